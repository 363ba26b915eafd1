"""The op catalogue. Importing this package registers every built-in op."""

from ..op import all_ops, is_builtin_op
from . import create, dynamic, elementwise, image, memory, nn, reduce, transform

#: The names of the ops this catalogue declares (custom ops registered later are not among them).
#: ``ir.is_builtin_op(name)`` asks the same of the registry.
BUILTIN_OP_NAMES: frozenset[str] = frozenset(op.name for op in all_ops() if is_builtin_op(op.name))

__all__ = ["create", "dynamic", "elementwise", "image", "memory", "nn", "reduce", "transform"]
