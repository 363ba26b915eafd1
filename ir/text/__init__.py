"""The text format: a printer and a parser decided together (``parse(str(m))`` equals ``m``)."""

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
    "parse_type",
    "printed_names",
    "type_to_text",
]
