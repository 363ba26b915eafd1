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


def arange_operands(start: Any, stop: Any, step: Any) -> tuple[Any, Any, Any]:
    """The scalars ``arange`` works with, shared by this shape function and the kernel.

    Floats stay numpy scalars of their dtype: numpy computes the length in that arithmetic (a
    float32 difference is rounded to float32), and so must we to agree to the element.
    Integers become Python ints: in a small dtype the difference would wrap around
    (``uint8(0) - uint8(5)`` is 251), which is numpy's scalar arithmetic, not a range.
    """
    return tuple(int(v) if v.dtype.kind in "iub" else v[()] for v in (start, stop, step))  # type: ignore[return-value]


def arange_length(start: Any, stop: Any, step: Any) -> int:
    """numpy's length of ``arange`` for three rank-0 numpy arrays: ``ceil((stop - start) /
    step)`` clamped at 0, on the scalars of ``arange_operands`` (in their arithmetic); and, as
    numpy checks for underflow and a step of infinity, one value where the quotient is +0 but
    the difference is not 0 (``arange(0, 1e-45, 2)`` in float32: half the least subnormal
    rounds to 0), none where it is -0."""
    first, last, delta = arange_operands(start, stop, step)
    if delta == 0:
        fail("step must not be 0")
    span = last - first
    quotient = span / delta
    if quotient == 0 and span != 0:
        return 0 if math.copysign(1.0, float(quotient)) < 0 else 1
    length = float(quotient)
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
