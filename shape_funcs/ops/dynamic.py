"""Shape functions of the shape and data-dependent ops.

A data-dependent input arrives as its value: a numpy array at run time, and at compile time a
numpy array when it is a constant or an ``UnknownValue`` (its type only) when it is not. With
an unknown value the result's rank is still known (from the length of a shape tensor, or the
rank of an input) and each dim that depends on the value is a fresh symbol (printed ``?``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..context import Dim, ShapeContext
from ..registry import register_shape_func
from ._common import (
    Shape,
    fail,
    normalize_axis,
    read_int_scalar,
    read_int_vector,
    require_nonnegative,
    strided_slice_shape,
    vector_length,
)
from .transform import reshape_to


@register_shape_func("shape_of")
def shape_of(ctx: ShapeContext, x: Shape, *, dtype: str = "int64") -> Shape:
    """``(rank of x,)``: only the rank matters, never a value."""
    return (len(x),)


def _static_length(value: Any, name: str) -> int:
    """The length of a 1-d tensor, which must be static: it is the rank of a result."""
    length = vector_length(value, name)
    if length is None:
        fail(
            f"{name} must have a static length (it is the rank of the result), "
            f"got shape {tuple(value.shape)}"
        )
    return length


def _shape_value(ctx: ShapeContext, value: Any, name: str) -> Shape:
    """The dims held in a 1-d shape tensor: its values, or fresh symbols when unknown."""
    if ctx.is_known(value):
        dims = read_int_vector(value, name)
        require_nonnegative(dims, name)
        return tuple(dims)
    return tuple(ctx.fresh(name) for _ in range(_static_length(value, name)))


@register_shape_func("dyn.reshape", data_dependent=[False, True])
def dyn_reshape(ctx: ShapeContext, x: Shape, newshape: Any) -> Shape:
    """``reshape`` with the newshape read from a tensor (0 and -1 as in ``reshape``)."""
    if ctx.is_known(newshape):
        return reshape_to(ctx, x, read_int_vector(newshape, "newshape"))
    return tuple(ctx.fresh("reshape") for _ in range(_static_length(newshape, "newshape")))


@register_shape_func("dyn.zeros", data_dependent=[True])
@register_shape_func("dyn.ones", data_dependent=[True])
def dyn_zeros(ctx: ShapeContext, shape: Any, *, dtype: str = "float32") -> Shape:
    """The shape held in the ``shape`` tensor."""
    return _shape_value(ctx, shape, "shape")


@register_shape_func("dyn.full", data_dependent=[False, True])
def dyn_full(ctx: ShapeContext, fill_value: Shape, shape: Any, *, dtype: str = "float32") -> Shape:
    """The shape held in the ``shape`` tensor; ``fill_value`` (a shape here) must be a scalar."""
    if fill_value:
        fail(f"fill_value must be a scalar, got shape {tuple(fill_value)}")
    return _shape_value(ctx, shape, "shape")


@register_shape_func("dyn.strided_slice", data_dependent=[False, True, True, True])
def dyn_strided_slice(ctx: ShapeContext, x: Shape, begin: Any, end: Any, strides: Any) -> Shape:
    """``strided_slice`` with begin, end and strides read from 1-d tensors.

    At compile time, unless all three are constants, every axis they may cover gets a fresh dim
    (all axes when a list's length is itself symbolic); the axes past them keep their dims.
    """
    values = (("begin", begin), ("end", end), ("strides", strides))
    if all(ctx.is_known(v) for _, v in values):
        b, e, s = (read_int_vector(v, name) for name, v in values)
        return strided_slice_shape(ctx, x, b, e, s)
    lengths = [vector_length(v, name) for name, v in values]
    covered = len(x) if None in lengths else max(n for n in lengths if n is not None)
    if covered > len(x):
        fail(f"begin/end/strides cover {covered} axes but x has rank {len(x)}")
    return (*(ctx.fresh("slice") for _ in range(covered)), *x[covered:])


@register_shape_func("argwhere", data_dependent=[True])
def argwhere(ctx: ShapeContext, x: Any) -> Shape:
    """``(number of non-zero elements, rank of x)``; the count is a fresh dim until run time."""
    rank = len(x.shape)
    if ctx.is_known(x):
        return (int(np.count_nonzero(x)), rank)
    return (ctx.fresh("argwhere"), rank)


def _topk_shapes(
    ctx: ShapeContext, x: Shape, k: Dim | None, axis: int, ret_type: str
) -> Shape | list[Shape]:
    at = normalize_axis(axis, len(x), "x")
    if k is not None:
        ctx.check(k, "<=", x[at], "k <= x.shape[{}]", at)
    else:  # k is a value known only at run time, where the concrete mode checks it
        k = ctx.fresh("k")
    out = (*x[:at], k, *x[at + 1 :])
    if ret_type == "both":
        return [out, out]
    if ret_type not in ("values", "indices"):
        fail(f"ret_type must be 'both', 'values' or 'indices', got {ret_type!r}")
    return out


@register_shape_func("topk")
def topk(
    ctx: ShapeContext,
    x: Shape,
    *,
    k: int,
    axis: int = -1,
    ret_type: str = "both",
    is_ascend: bool = False,
    dtype: str = "int64",
) -> Shape | list[Shape]:
    """The ``axis`` dim becomes ``k`` (0 <= k <= dim); two outputs when ``ret_type="both"``."""
    if k < 0:
        fail(f"k must be >= 0, got {k}")
    return _topk_shapes(ctx, x, k, axis, ret_type)


@register_shape_func("dyn.topk", data_dependent=[False, True])
def dyn_topk(
    ctx: ShapeContext,
    x: Shape,
    k: Any,
    *,
    axis: int = -1,
    ret_type: str = "both",
    is_ascend: bool = False,
    dtype: str = "int64",
) -> Shape | list[Shape]:
    """``topk`` with ``k`` read from a scalar tensor; a fresh dim while ``k`` is unknown."""
    if len(k.shape) != 0:
        fail(f"k must be a scalar tensor, got shape {tuple(k.shape)}")
    if not ctx.is_known(k):
        return _topk_shapes(ctx, x, None, axis, ret_type)
    count = read_int_scalar(k, "k")
    if count < 0:
        fail(f"k must be >= 0, got {count}")
    return _topk_shapes(ctx, x, count, axis, ret_type)
