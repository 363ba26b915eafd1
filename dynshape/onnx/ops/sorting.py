"""Sorting and selection by data: ``Compress`` (the catalogue's ``compress``) and ``Unique``.

Their output lengths are data-dependent: a ``?`` dim in the types, fixed at run time by the
op's shape function (``shape_funcs/ops/dynamic.py``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

import ir
from dynshape.builder import trace

from ..known import Known
from ..registry import Node, NodeError, converter
from .layout import slice_axis
from .operands import normalize_axis, value_shape


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
