"""Shape functions of the reductions: ``axis`` (int, list or None), ``keepdims``, ``exclude``.

``argmax`` and ``argmin`` over several axes are defined as numpy's argmax over those axes
flattened, in order, into one: the result has the shape of any other reduction over them.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..context import ShapeContext
from ..registry import register_shape_func
from ._common import Shape, normalize_axis, reduce_axes

Axis = int | Sequence[int] | None


def reduce(
    ctx: ShapeContext, x: Shape, *, axis: Axis = None, keepdims: bool = False, exclude: bool = False
) -> Shape:
    """The reduced axes are dropped, or kept as 1-dims with ``keepdims``."""
    reduced = reduce_axes(axis, len(x), exclude, "x")
    if keepdims:
        return tuple(1 if r else d for d, r in zip(x, reduced, strict=True))
    return tuple(d for d, r in zip(x, reduced, strict=True) if not r)


def reduce_nonempty(
    ctx: ShapeContext, x: Shape, *, axis: Axis = None, keepdims: bool = False, exclude: bool = False
) -> Shape:
    """Like ``reduce``, for reductions without an identity: no reduced axis may be empty.

    (numpy raises for ``max`` over an empty axis even when the result itself is empty.)
    """
    reduced = reduce_axes(axis, len(x), exclude, "x")
    for i, r in enumerate(reduced):
        if r:
            ctx.check(x[i], ">", 0, "x.shape[{}] > 0 (a reduced axis must not be empty)", i)
    if keepdims:
        return tuple(1 if r else d for d, r in zip(x, reduced, strict=True))
    return tuple(d for d, r in zip(x, reduced, strict=True) if not r)


for _name in ("sum", "mean", "prod"):
    register_shape_func(_name)(reduce)
for _name in ("max", "min", "argmax", "argmin"):
    register_shape_func(_name)(reduce_nonempty)


@register_shape_func("cumsum")
@register_shape_func("cumprod")
def cumsum(
    ctx: ShapeContext, x: Shape, *, axis: int = 0, exclusive: bool = False, reverse: bool = False
) -> Shape:
    """Running sums (``cumsum``) and products (``cumprod``) keep ``x``'s shape; ``axis`` must
    be one of its axes (rank 1 or more)."""
    normalize_axis(axis, len(x), "x")
    return x
