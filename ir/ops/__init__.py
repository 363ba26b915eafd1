"""The op catalogue. Importing this package registers every built-in op.

Each op is declared once, in ``shape_funcs/declarations/catalogue`` (plain data the VM reads
too); this package registers the IR's definition of each, with its dtype rule: a shared one
(``_declare.NAMED_RULES``) or the op's own, written in the family's module here.
"""

from shape_funcs.declarations import BUILTIN_OPS

from ..op import all_ops, is_builtin_op
from . import dynamic, elementwise, image, nn, transform
from ._declare import declare

for _decl in BUILTIN_OPS.values():
    declare(_decl)

#: The names of the ops this catalogue declares (custom ops registered later are not among them).
#: ``ir.is_builtin_op(name)`` asks the same of the registry.
BUILTIN_OP_NAMES: frozenset[str] = frozenset(op.name for op in all_ops() if is_builtin_op(op.name))

__all__ = ["dynamic", "elementwise", "image", "nn", "transform"]
