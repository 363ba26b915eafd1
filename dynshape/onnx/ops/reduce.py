"""Reductions: ``ReduceSum``/``Mean``/``Max``/``Min``/``Prod`` onto the catalogue's, the others
(``ReduceL1``, ``ReduceL2``, ``ReduceSumSquare``, ``ReduceLogSum``, ``ReduceLogSumExp``)
composed; ``ArgMax``/``ArgMin``.

The axes are an input since opset 13 for ``ReduceSum`` and opset 18 for the others (an
attribute before); they must be known at import. No axes reduce all of them, unless
``noop_with_empty_axes=1``, which makes the op the identity (as onnxruntime does).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from dynshape.builder import trace

from ..known import Known
from ..registry import Node, NodeError, converter
from .layout import slice_axis
from .operands import normalize_axis, value_dtype, value_shape

#: The element types of ``nn.global_avg_pool2d`` (the catalogue's "float" class).
_FLOATS = frozenset({"float16", "float32", "float64"})

_CATALOGUE = {
    "ReduceSum": "sum",
    "ReduceMean": "mean",
    "ReduceMax": "max",
    "ReduceMin": "min",
    "ReduceProd": "prod",
}


def _axes(node: Node, rank: int) -> list[int] | str | None:
    """The reduced axes (sorted, non-negative), None for all of them, or ``"noop"``."""
    axes_input = node.opset >= (13 if node.op_type == "ReduceSum" else 18)
    axes = node.ints(1, "axes") if axes_input else node.attr("axes")
    if not axes:
        return "noop" if node.attr("noop_with_empty_axes", 0) else None
    out = sorted({normalize_axis(int(a), rank, "axes entry") for a in axes})
    if len(out) != len(axes):
        raise NodeError(f"axes={list(axes)} names an axis twice")
    return out


def _identity(op: str, dtype: str) -> Any:
    """What ``op`` gives for no elements (ONNX): the identity of its operation."""
    if op == "ReduceSum":
        return 0
    if op == "ReduceProd":
        return 1
    # the max of nothing is the least value, and the min the most; log(sum(exp(nothing))) is
    # log(0), the least value too
    lowest = op in ("ReduceMax", "ReduceLogSumExp")
    if dtype == "bool":
        return not lowest
    if dtype.startswith("float"):
        return -np.inf if lowest else np.inf
    info = np.iinfo(dtype)
    return info.min if lowest else info.max


def _empty_reduction(op: str, shape: Any, axes: Any, keepdims: bool, dtype: str) -> Any:
    """A reduction over an axis that is statically empty: a constant of the op's identity, or
    None if no reduced axis is 0. (An axis that is 0 only at run time reaches the catalogue
    op, which refuses an empty max or min with a run-time error.)"""
    reduced = range(len(shape)) if axes is None else axes
    if op not in ("ReduceSum", "ReduceProd", "ReduceMax", "ReduceMin", "ReduceLogSumExp"):
        return None
    if not any(shape[a] == 0 for a in reduced):
        return None
    if keepdims:
        out = [1 if a in reduced else d for a, d in enumerate(shape)]
    else:
        out = [d for a, d in enumerate(shape) if a not in reduced]
    fill = trace.constant(np.array(_identity(op, dtype), dtype=dtype), dtype)
    return trace.apply("full", fill, shape=out, dtype=dtype)


def _reduce(op: str, x: Any, axes: Any, keepdims: bool) -> Any:
    return trace.apply(op, x, axis=axes, keepdims=keepdims, exclude=False)


@converter(*_CATALOGUE, "ReduceL1", "ReduceL2", "ReduceSumSquare", "ReduceLogSum")
def reduce(node: Node) -> Any:
    """A catalogue reduction, or a sum with elementwise ops around it. With
    ``noop_with_empty_axes`` only the sum is left out (``ReduceL1`` is then ``abs(x)``, as in
    onnxruntime)."""
    rank = len(value_shape(node.input(0)))
    axes = _axes(node, rank)
    x = node.tensor(0)
    keepdims = bool(node.attr("keepdims", 1))
    dtype = value_dtype(node.input(0))
    op = node.op_type
    if op in _CATALOGUE:
        if axes == "noop":
            return x
        empty = _empty_reduction(op, value_shape(node.input(0)), axes, keepdims, dtype)
        if empty is not None:
            return empty
        if op == "ReduceMean" and rank == 4 and axes == [2, 3] and keepdims and dtype in _FLOATS:
            # the same mean as GlobalAveragePool, as the dynamo exporter writes PyTorch's
            # adaptive average pooling to 1x1 (squeeze-excite blocks, a CNN's head): its
            # kernel's product by 1/(H*W) beats a reduction of short rows (design/onnx.md)
            return trace.apply("nn.global_avg_pool2d", x)
        out = _reduce(_CATALOGUE[op], x, axes, keepdims)
        if op == "ReduceMean" and not dtype.startswith("float"):
            out = trace.apply("cast", out, dtype=dtype)  # the catalogue's integer mean is float64
        return out

    def total(v: Any) -> Any:
        return v if axes == "noop" else _reduce("sum", v, axes, keepdims)

    if op == "ReduceL1":
        return total(trace.apply("abs", x))
    if op == "ReduceLogSum":
        return trace.apply("log", total(x))
    squares = total(trace.apply("multiply", x, x))
    return trace.apply("sqrt", squares) if op == "ReduceL2" else squares


@converter("ReduceLogSumExp")
def reduce_log_sum_exp(node: Node) -> Any:
    """``log(sum(exp(x - m))) + m`` with ``m`` the maximum over the axes (no overflow)."""
    rank = len(value_shape(node.input(0)))
    axes = _axes(node, rank)
    x = node.tensor(0)
    if axes == "noop":
        return x
    assert not isinstance(axes, str)
    keepdims = bool(node.attr("keepdims", 1))
    shape = value_shape(node.input(0))
    empty = _empty_reduction(node.op_type, shape, axes, keepdims, value_dtype(node.input(0)))
    if empty is not None:  # log of an empty sum: -inf, where the max below has no value
        return empty
    m = _reduce("max", x, axes, True)
    total = _reduce("sum", trace.apply("exp", trace.apply("subtract", x, m)), axes, True)
    out = trace.apply("add", trace.apply("log", total), m)
    if keepdims:
        return out
    gone = list(range(rank)) if axes is None else axes
    return trace.apply(
        "reshape", out, newshape=[d for i, d in enumerate(value_shape(out)) if i not in gone]
    )


def _arg(node: Node, op: str) -> Any:
    x_shape = value_shape(node.input(0))
    rank = len(x_shape)
    axis = normalize_axis(int(node.attr("axis", 0)), rank)
    keepdims = bool(node.attr("keepdims", 1))
    x = node.tensor(0)
    if not node.attr("select_last_index", 0):
        return _reduce(op, x, [axis], keepdims)
    # The last index of the extreme: the first of the reversed axis, counted from the end.
    reversed_x = slice_axis(x, axis, -1, None, -1)
    first = _reduce(op, reversed_x, [axis], keepdims)
    n = x_shape[axis]
    last = node.materialize(Known.of(n - 1, "int64"))
    return trace.apply("subtract", last, first)


@converter("ArgMax")
def argmax(node: Node) -> Any:
    return _arg(node, "argmax")


@converter("ArgMin")
def argmin(node: Node) -> Any:
    return _arg(node, "argmin")
