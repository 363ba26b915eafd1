"""What the converters ask of their operands: the shape and dtype of a value (a ``Known`` or a
builder Value), an axis normalised against a rank, and an input as numbers known at import."""

from __future__ import annotations

from typing import Any

import numpy as np

import ir

from ..known import Known
from ..registry import Node, NodeError


def _tensor_type(value: Any) -> ir.TensorType:
    ty = value.type
    if not isinstance(ty, ir.TensorType):
        raise NodeError(f"expected a tensor, got {ty}")
    return ty


def value_shape(value: Any) -> tuple[ir.Dim, ...]:
    """The dims of ``value`` (a ``Known`` or a tensor Value)."""
    return value.shape if isinstance(value, Known) else tuple(_tensor_type(value).shape)


def value_dtype(value: Any) -> str:
    """The dtype of ``value`` (a ``Known`` or a tensor Value), as the IR spells it."""
    return value.dtype if isinstance(value, Known) else str(_tensor_type(value).dtype)


def normalize_axis(axis: int, rank: int, what: str = "axis") -> int:
    """``axis`` (negative counts from the end) in ``[0, rank)``; a NodeError naming ``what``
    when it is out of range (a scalar's only axis is 0 or -1)."""
    if not -rank <= axis < max(rank, 1):
        raise NodeError(f"{what} {axis} is out of range for rank {rank}")
    return axis % rank if rank else 0


def known_ints(node: Node, i: int, what: str) -> list[int] | None:
    """Input ``i`` as ints (None when omitted); a NodeError when it is not numbers known at
    import (a dim, or data): these inputs decide ranks and part counts."""
    if node.input(i) is None:
        return None
    array = node.numeric(i)
    if array is None:
        raise NodeError(f"{what} (input {i}) must be numbers known at import")
    return [int(v) for v in np.asarray(array).reshape(-1)]


def data_dependent(dims: Any) -> bool:
    """Whether some dim of ``dims`` holds a ``?`` (a size produced at run time by a data-dependent
    op: NonZero's count, a TopK whose k is computed from one). An op attribute may name only
    the symbols ``main``'s parameters bind, so such dims go to an op's dynamic variant, which
    reads them from a materialised tensor (issue 29, item 2)."""
    return any(
        not isinstance(d, int) and any(ir.is_anonymous(s) for s in ir.free_symbols(d)) for d in dims
    )
