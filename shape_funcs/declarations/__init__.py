"""Op declarations: each op's data, written once, read by every layer.

An op's name, operands, attributes (with kinds as text and plain defaults), fusion pattern,
dtype rule's name, modes, ``in_place`` and doc are declared here as an ``OpDecl``
(``decl.py``): the built-in ops in ``catalogue/``, a custom op by ``dynshape.register_op``,
which builds one the same way. The IR builds its ``OpDef`` from it, the VM checks a loaded
kernel's attributes against it, the builder's signatures and the importer read it. It lives
in ``shape_funcs`` because that package is below both the IR and the VM, and it imports nothing
(no sympy, no other package of the project), so a deployed VM loads it with numpy alone.
"""

from .catalogue import BUILTIN_OPS
from .decl import (
    DTYPE_RULES,
    MEMORY_DIALECT,
    PATTERNS,
    REQUIRED,
    AttrDecl,
    OpDecl,
    attr,
    declare,
)
from .errors import DeclarationError
from .kinds import parse_kind, value_check

__all__ = [
    "BUILTIN_OPS",
    "DTYPE_RULES",
    "MEMORY_DIALECT",
    "PATTERNS",
    "REQUIRED",
    "AttrDecl",
    "DeclarationError",
    "OpDecl",
    "attr",
    "declare",
    "parse_kind",
    "value_check",
]
