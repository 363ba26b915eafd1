"""Shape functions of the creation ops: shapes from attributes, and ``arange`` from values."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from ..context import Dim, ShapeContext
from ..registry import register_shape_func
from ._common import Shape, fail, require_nonnegative


@register_shape_func("zeros")
@register_shape_func("ones")
def zeros(ctx: ShapeContext, *, shape: Sequence[int], dtype: str = "float32") -> Shape:
    """The ``shape`` attribute (no dim negative)."""
    require_nonnegative(shape, "shape")
    return tuple(shape)


@register_shape_func("full")
def full(
    ctx: ShapeContext, fill_value: Shape, *, shape: Sequence[int], dtype: str = "float32"
) -> Shape:
    """The ``shape`` attribute; ``fill_value`` must be a scalar."""
    if fill_value:
        fail(f"fill_value must be a scalar, got shape {tuple(fill_value)}")
    require_nonnegative(shape, "shape")
    return tuple(shape)


def arange_length(start: Any, stop: Any, step: Any) -> int:
    """numpy's length of ``arange(start, stop, step)`` for three rank-0 numpy arrays.

    numpy computes ``ceil((stop - start) / step)`` with the arithmetic of the inputs' dtypes
    (a float32 difference is rounded to float32) and clamps it at 0; so do we, by doing the
    arithmetic on the numpy scalars themselves. The kernel must call
    ``np.arange(start[()], stop[()], step[()], dtype=dtype)`` to agree to the element.
    """
    first, last, delta = start[()], stop[()], step[()]
    if delta == 0:
        fail("step must not be 0")
    length = float((last - first) / delta)
    if not math.isfinite(length):
        fail(f"cannot compute the length of arange({first}, {last}, {delta})")
    return max(0, math.ceil(length))


@register_shape_func("arange", data_dependent=[True, True, True])
def arange(ctx: ShapeContext, start: Any, stop: Any, step: Any, *, dtype: str = "float32") -> Shape:
    """``(len,)`` with numpy's length; unknown (``?``) at compile time unless all are constants."""
    for name, v in (("start", start), ("stop", stop), ("step", step)):
        if len(v.shape) != 0:
            fail(f"{name} must be a scalar, got shape {tuple(v.shape)}")
    if ctx.is_known(start) and ctx.is_known(stop) and ctx.is_known(step):
        length: Dim = arange_length(start, stop, step)
    else:
        length = ctx.fresh("arange")
    return (length,)
