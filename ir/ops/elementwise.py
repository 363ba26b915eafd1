"""The dtype rules of ``where`` and ``bitcast`` (the elementwise ops are declared in
``shape_funcs/declarations/catalogue/elementwise.py``; the others use shared rules)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..attrs import Attrs
from ..dtypes import ITEMSIZE
from ..errors import IRError
from ._declare import all_same, input_dtype, own_rule


@own_rule("where")
def _where(dtypes: Sequence[Any], attrs: Attrs) -> str:
    if dtypes[0] != "bool":
        raise IRError(f"where's condition must be bool, got {dtypes[0]}")
    return all_same(dtypes[1:], attrs)


@own_rule("bitcast")
def _bitcast(dtypes: Sequence[Any], attrs: Attrs) -> str:
    """The attribute ``dtype``, of the input's width: reinterpreting bits keeps the shape."""
    source = input_dtype(dtypes, 0, "input")
    target = str(attrs["dtype"])
    if ITEMSIZE[source] != ITEMSIZE[target]:
        raise IRError(
            f"bitcast needs dtypes of one width, got {source} ({ITEMSIZE[source]} bytes) and "
            f"{target} ({ITEMSIZE[target]} bytes)"
        )
    return target
