"""Selection by data: ``Compress`` (the catalogue's ``compress``) and ``Unique`` (the
catalogue's ``unique``).

Their output lengths are data-dependent: a ``?`` dim in the types, fixed at run time by the
op's shape function (``shape_funcs/ops/dynamic.py``). ``TopK`` stays ``topk``
(``indexing.py``): with k the whole axis it is the catalogue's ``sort`` and ``argsort`` at
once, by the same stable order (``topk_order``, ties to the lower index), in one op.
"""

from __future__ import annotations

from typing import Any

import numpy as np

import ir
from dynshape.builder import trace
from shape_funcs.ops.dynamic import unique_values

from ..known import Known
from ..registry import Node, NodeError, Unsupported, converter
from .layout import slice_axis
from .operands import normalize_axis, value_dtype, value_shape


@converter("Compress")
def compress(node: Node) -> Any:
    """The slices along ``axis`` (the flattened input without one) where ``condition`` is
    true. ONNX allows a condition shorter than the axis (the slices past it are dropped): a
    static one cuts the input first; a symbolic one must be as long (a run-time check)."""
    x, condition = node.input(0), node.input(1)
    shape = value_shape(x)
    c_shape = value_shape(condition)
    if len(c_shape) != 1:
        raise NodeError(f"condition must be 1-d, got shape {list(c_shape)}")
    axis_attr = node.attr("axis")
    if isinstance(x, Known) and not x.symbolic and node.numeric(1) is not None:
        mask = np.asarray(node.numeric(1)).astype(bool)
        axis = None if axis_attr is None else normalize_axis(int(axis_attr), len(shape))
        n = int(np.prod(shape)) if axis is None else shape[axis]
        if mask.shape[0] > n:
            raise NodeError(f"a condition of {mask.shape[0]} for {n} elements")
        return Known(np.compress(mask, x.array, axis=axis), x.dtype)
    data = node.tensor(0)
    if axis_attr is None:
        total: Any = 1
        for d in shape:
            total = total * d
        data = trace.apply("reshape", data, newshape=[ir.simplify(total)])
        shape, axis = (value_shape(data)[0],), 0
    else:
        axis = normalize_axis(int(axis_attr), len(shape))
    n, m = shape[axis], c_shape[0]
    if ir.compare(m, ">", n, {}) is True:
        raise NodeError(f"a condition of {m} for an axis of {n}")
    if isinstance(m, int) and ir.compare(m, "<", n, {}) is True:
        data = slice_axis(data, axis, 0, m)
    return trace.apply("compress", data, node.tensor(1), axis=axis)


@converter("Unique")
def unique(node: Node) -> Any:
    """The catalogue's ``unique``: ``Y``, ``indices``, ``inverse_indices``, ``counts``, of the
    flattened input or of its slices along ``axis``, ``sorted`` or by first occurrence; folded
    at import when the input is numbers known then."""
    x = node.input(0)
    shape = value_shape(x)
    axis_attr = node.attr("axis")
    axis = None if axis_attr is None else normalize_axis(int(axis_attr), len(shape))
    if axis is not None and not shape:
        raise NodeError("Unique along an axis of a scalar")
    keep_sorted = bool(node.attr("sorted", 1))
    dtype = value_dtype(x)
    if dtype == "bool":
        raise Unsupported("Unique of a bool tensor")
    if isinstance(x, Known) and not x.symbolic:
        found = unique_values(np.asarray(x.array), axis, keep_sorted)
        dtypes = (dtype, "int64", "int64", "int64")
        return tuple(Known(a, t) for a, t in zip(found, dtypes, strict=True))
    data = node.tensor(0)
    storage = dtype == "bfloat16" or dtype.startswith("float8")
    if storage:  # exact in float32, and one-to-one: the same distinct values
        data = trace.apply("cast", data, dtype="float32")
    y, first, inverse, counts = trace.apply("unique", data, axis=axis, sorted=keep_sorted)
    if storage:
        y = trace.apply("cast", y, dtype=dtype)
    return y, first, inverse, counts
