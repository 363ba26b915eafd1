"""Lowering of manifested modules to VM bytecode."""

from .lower import lower, type_spec

__all__ = ["lower", "type_spec"]
