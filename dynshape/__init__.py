"""dynshape: compile tensor programs with symbolic dimensions once, run them on any shapes.

The public face of the project. ``ir`` holds the language, ``shape_funcs`` the shape functions,
``vm`` the runtime; this package holds the compiler passes, the public API and the CLI.
"""

from dynshape_errors import DynShapeError
from ir import IRError, Module, ParseError, parse

from .errors import CompileError

__all__ = ["CompileError", "DynShapeError", "IRError", "Module", "ParseError", "parse"]
__version__ = "0.1.0"
