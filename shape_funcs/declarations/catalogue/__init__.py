"""The built-in ops' declarations, one module per family (as ``ir/ops`` and ``vm/kernels``).

``BUILTIN_OPS`` maps each name to its ``OpDecl``; the IR's catalogue (``ir/ops``), the VM's
attribute checks (``vm/kernels/attr_schema.py``), the blocked runner's elementwise ops and the
resize kernel's modes are all read from it.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from ..decl import OpDecl
from ..errors import DeclarationError
from . import create, dynamic, elementwise, image, memory, nn, reduce, transform


def _by_name(*families: tuple[OpDecl, ...]) -> dict[str, OpDecl]:
    table: dict[str, OpDecl] = {}
    for op in (op for family in families for op in family):
        if op.name in table:
            raise DeclarationError(f"op {op.name!r} is declared twice")
        table[op.name] = op
    return table


#: Every built-in op's declaration, by name (the memory dialect's among them).
BUILTIN_OPS: Mapping[str, OpDecl] = MappingProxyType(
    _by_name(
        create.DECLARATIONS,
        dynamic.DECLARATIONS,
        elementwise.DECLARATIONS,
        image.DECLARATIONS,
        memory.DECLARATIONS,
        nn.DECLARATIONS,
        reduce.DECLARATIONS,
        transform.DECLARATIONS,
    )
)
