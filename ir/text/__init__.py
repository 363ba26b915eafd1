"""The text format: a printer and a parser decided together (``parse(str(m))`` equals ``m``)."""

from .function_attrs_text import parse_steps, steps_text
from .parser import parse, parse_type
from .printer import (
    expr_to_text,
    function_to_text,
    module_to_text,
    printed_names,
    type_to_text,
)

__all__ = [
    "expr_to_text",
    "function_to_text",
    "module_to_text",
    "parse",
    "parse_steps",
    "parse_type",
    "printed_names",
    "steps_text",
    "type_to_text",
]
