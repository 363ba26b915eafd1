"""Slicing, splitting and tiling: ``Slice``, ``Split``, ``Tile``.

Their index inputs (starts, ends, split sizes, repeats) are read at import when known. ONNX
writes "to the end" as a huge end (``INT64_MAX``), which ``strided_slice`` clamps like numpy,
symbolic dims included (``min(end, n)``). Slice bounds that are dims (``x[:, :seq]``) or depend
on data go through ``dyn.strided_slice``, whose result shape is known only at run time.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from dynshape.builder import trace

from ..known import Known
from ..registry import Node, NodeError, converter
from .shape import _axis, _shape

#: A slice end past any dim.
_END = 2**62


def _ints(node: Node, i: int, what: str) -> list[int] | None:
    """Input ``i`` as plain ints when known and numeric; None when omitted."""
    if node.input(i) is None:
        return None
    array = node.numeric(i)
    if array is None:
        return None if node.known(i) is None else []  # [] marks "symbolic": the dyn path
    return [int(v) for v in np.asarray(array).reshape(-1)]


@converter("Slice")
def slice_(node: Node) -> Any:
    data = node.input(0)
    rank = len(_shape(data))
    starts, ends = _ints(node, 1, "starts"), _ints(node, 2, "ends")
    axes, steps = _ints(node, 3, "axes"), _ints(node, 4, "steps")
    if not starts or not ends or axes == [] or steps == []:
        return _dynamic_slice(node, rank)
    axes = [_axis(a, rank, "axes entry") for a in (axes or range(len(starts)))]
    steps = steps or [1] * len(starts)
    if not len(starts) == len(ends) == len(axes) == len(steps):
        raise NodeError("starts, ends, axes and steps must have the same length")
    if len(set(axes)) != len(axes):
        raise NodeError(f"axes {axes} repeat an axis")
    if any(s == 0 for s in steps):
        raise NodeError("a step is 0")
    if isinstance(data, Known):
        index = [slice(None)] * rank
        for a, b, e, s in zip(axes, starts, ends, steps, strict=True):
            index[a] = slice(b, e, s)
        return Known(data.array[tuple(index)], data.dtype)
    count = max(axes) + 1
    begin, strides = [0] * count, [1] * count
    stops: list[int | None] = [None] * count  # None: to the end, in the step's direction
    for a, b, e, s in zip(axes, starts, ends, steps, strict=True):
        begin[a], strides[a] = b, s
        stops[a] = None if abs(e) >= _HUGE else e
    end = _end_list(stops, strides, _shape(data))
    return trace.apply("strided_slice", data, begin=begin, end=end, strides=strides)


#: An end at least this large is "to the end" (exporters write INT64_MAX or INT32_MAX).
_HUGE = 2**31 - 1


def _end_list(stops: list[int | None], strides: list[int], shape: Any) -> list[int]:
    """``strided_slice``'s ``end``: trailing "to the end" entries are left out (an omitted
    bound: exact for symbolic dims); an interior one is the dim when static, else a huge
    stand-in (which the types show as ``min(2**62, n)``)."""
    while stops and stops[-1] is None:
        stops.pop()
    out = []
    for i, e in enumerate(stops):
        if e is not None:
            out.append(e)
        elif isinstance(shape[i], int):
            out.append(shape[i] if strides[i] > 0 else -shape[i] - 1)
        else:
            out.append(_END if strides[i] > 0 else -_END)
    return out


def _dynamic_slice(node: Node, rank: int) -> Any:
    """Slice bounds that are dims (``Slice(x, 0, seq)``) or data: ``dyn.strided_slice`` on
    bound vectors over the axes up to the last sliced one. When every bound is known (dims),
    the result is reshaped to its symbolic shape, so later ops keep it (a run-time check that
    the two agree); with bounds from data the sliced axes are ``?``."""
    axes_given = node.numeric(3) if node.input(3) is not None else None
    if node.input(3) is not None and axes_given is None:
        raise NodeError("Slice axes must be numbers known at import")
    listed = axes_given if axes_given is not None else range(int(_shape(node.input(1))[0]))
    axes = [_axis(int(a), rank, "axes entry") for a in listed]
    if node.input(4) is not None and node.numeric(4) is None:
        raise NodeError("Slice steps must be numbers known at import")
    given_steps = node.numeric(4)
    steps = [int(v) for v in given_steps] if given_steps is not None else [1] * len(axes)
    bounds = [node.known(1), node.known(2)]
    if any(b is None for b in bounds):
        if axes != list(range(len(axes))):
            raise NodeError("Slice bounds from data must cover the first axes in order")
        begin, end = node.tensor(1), node.tensor(2)
        strides = trace.constant(np.array(steps, dtype=np.int64), "int64")
        return trace.apply("dyn.strided_slice", node.tensor(0), begin, end, strides)
    starts, ends = (b.dims() for b in bounds)  # type: ignore[union-attr]
    count = max(axes) + 1
    begin_d: list[Any] = [0] * count
    end_d: list[Any] = list(_shape(node.input(0))[:count])  # unsliced axes: whole
    stride_d = [1] * count
    for a, b, e, st in zip(axes, starts, ends, steps, strict=True):
        begin_d[a], end_d[a], stride_d[a] = b, e, st
    vectors = [node.materialize(Known.of(v, "int64")) for v in (begin_d, end_d, stride_d)]
    out = trace.apply("dyn.strided_slice", node.tensor(0), *vectors)
    shape = _symbolic_slice_shape(_shape(node.input(0)), begin_d, end_d, stride_d)
    return trace.apply("reshape", out, newshape=list(shape))


def _symbolic_slice_shape(shape: Any, begin: list[Any], end: list[Any], strides: list[int]) -> Any:
    from dynshape.symbolic_context import SymbolicContext
    from shape_funcs.ops._common import strided_slice_shape

    return strided_slice_shape(SymbolicContext(), tuple(shape), begin, end, strides)


@converter("Split")
def split(node: Node) -> Any:
    data = node.input(0)
    shape = _shape(data)
    axis = _axis(node.attr("axis", 0), len(shape))
    sizes = node.attr("split") if node.opset < 13 else _ints(node, 1, "split")
    count = node.num_outputs
    if sizes == []:
        raise NodeError("split sizes that depend on data are not supported")
    if sizes:
        if len(sizes) != count:
            raise NodeError(f"{len(sizes)} split sizes for {count} outputs")
        points = list(np.cumsum(sizes[:-1]).tolist())
        spec: Any = [int(p) for p in points]
    else:
        num = node.attr("num_outputs", count)
        n = shape[axis]
        if isinstance(n, int) and n % num:  # opset 18: the last part is smaller
            part = -(-n // num)
            spec = [part * i for i in range(1, num)]
        else:
            spec = num
    if isinstance(data, Known):
        return [Known(a, data.dtype) for a in np.split(data.array, spec, axis=axis)]
    parts = trace.apply("split", node.tensor(0), indices_or_sections=spec, axis=axis)
    return list(parts)


@converter("Tile")
def tile(node: Node) -> Any:
    reps = _ints(node, 1, "repeats")
    if not reps:
        raise NodeError("Tile repeats must be numbers known at import")
    data = node.input(0)
    if len(reps) != len(_shape(data)):
        raise NodeError(f"{len(reps)} repeats for a tensor of rank {len(_shape(data))}")
    if isinstance(data, Known) and not data.symbolic:
        return Known(np.tile(data.array, reps), data.dtype)
    return trace.apply("tile", node.tensor(0), reps=reps)
