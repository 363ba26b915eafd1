"""Slicing, splitting and tiling: ``Slice``, ``Split``, ``Tile``.

Their index inputs (starts, ends, split sizes, repeats) are read at import when known. ONNX
writes "to the end" as a huge end (``INT64_MAX``), which ``strided_slice`` clamps like numpy,
symbolic dims included (``min(end, n)``). Slice bounds that are dims (``x[:, :seq]``,
``Slice(cos_cache, past, past + seq)``) are ``strided_slice``'s dim attributes, typed with
``min``/``max`` of dims, when each is non-negative for every binding (a dim index counts from
the start; ONNX would count a negative one from the end). Bounds that depend on data, on a
``?`` dim or that may be negative (``seq - 1``) go through ``dyn.strided_slice``, whose result
is reshaped to its symbolic shape or, from data, known only at run time.
"""

from __future__ import annotations

from typing import Any

import numpy as np

import ir
from dynshape.builder import trace

from ..known import Known
from ..registry import Node, NodeError, Unsupported, converter
from .operands import data_dependent, known_ints, normalize_axis, value_shape

#: A slice end past any dim (an omitted bound that must be written, typed as omitted).
_END = 2**62


@converter("Slice")
def slice_(node: Node) -> Any:
    data = node.input(0)
    rank = len(value_shape(data))
    if node.numeric(1) is None or node.numeric(2) is None:
        return _dynamic_slice(node, rank)  # bounds that are dims, or data
    starts, ends = known_ints(node, 1, "starts"), known_ints(node, 2, "ends")
    axes, steps = known_ints(node, 3, "axes"), known_ints(node, 4, "steps")
    assert starts is not None and ends is not None
    axes = [normalize_axis(a, rank, "axes entry") for a in (axes or range(len(starts)))]
    steps = steps or [1] * len(starts)
    _check_slice(starts, ends, axes, steps)
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
    end = _end_list(stops, strides, value_shape(data))
    return trace.apply("strided_slice", data, begin=begin, end=end, strides=strides)


#: An end at least this large is "to the end" (exporters write INT64_MAX or INT32_MAX).
_HUGE = 2**31 - 1


def _end_list(stops: list[Any], strides: list[int], shape: Any) -> list[Any]:
    """``strided_slice``'s ``end``: trailing "to the end" entries are left out (an omitted
    bound: exact for symbolic dims); an interior one is the dim when static, else ``2**62``
    (``-2**62`` going backward), which the shape function types as omitted too: an omitted
    bound, not a dim, so the kernel's attributes stay ints (no values computed per call)."""
    count = len(stops)
    while count and stops[count - 1] is None:
        count -= 1
    out = []
    for i, e in enumerate(stops[:count]):
        if e is not None:
            out.append(e)
        elif isinstance(shape[i], int):
            out.append(shape[i] if strides[i] > 0 else -shape[i] - 1)
        else:
            out.append(_END if strides[i] > 0 else -_END)
    return out


def slice_axis(x: Any, axis: int, begin: int, end: int | None = None, stride: int = 1) -> Any:
    """``x[..., begin:end:stride, ...]`` along ``axis`` of a tensor (``end`` None: to the end
    in the step's direction), the other axes whole."""
    stops: list[int | None] = [*([None] * axis), end]
    strides = [1] * axis + [stride]
    end_list = _end_list(stops, strides, value_shape(x))
    return trace.apply(
        "strided_slice", x, begin=[0] * axis + [begin], end=end_list, strides=strides
    )


def _dynamic_slice(node: Node, rank: int) -> Any:
    """Slice bounds that are dims (``Slice(x, 0, seq)``) or data: ``dyn.strided_slice`` on
    bound vectors over the axes up to the last sliced one. When every bound is known (dims),
    the result is reshaped to its symbolic shape, so later ops keep it (a run-time check that
    the two agree); with bounds from data the sliced axes are ``?``."""
    given_axes = known_ints(node, 3, "axes")
    listed = given_axes if given_axes is not None else range(int(value_shape(node.input(1))[0]))
    axes = [normalize_axis(int(a), rank, "axes entry") for a in listed]
    steps = known_ints(node, 4, "steps") or [1] * len(axes)
    bounds = [node.known(1), node.known(2)]
    if any(b is None for b in bounds):
        return _data_slice(node, axes, steps)
    starts, ends = (b.dims() for b in bounds)  # type: ignore[union-attr]
    if _attribute_bounds([*starts, *ends]):
        return _dim_slice(node, rank, axes, steps, starts, ends)
    count = max(axes) + 1
    begin_d: list[Any] = [0] * count
    end_d: list[Any] = list(value_shape(node.input(0))[:count])  # unsliced axes: whole
    stride_d = [1] * count
    for a, b, e, st in zip(axes, starts, ends, steps, strict=True):
        begin_d[a], end_d[a], stride_d[a] = b, e, st
    vectors = [node.materialize(Known.of(v, "int64")) for v in (begin_d, end_d, stride_d)]
    out = trace.apply("dyn.strided_slice", node.tensor(0), *vectors)
    shape = _symbolic_slice_shape(value_shape(node.input(0)), begin_d, end_d, stride_d)
    return out if shape is None else trace.apply("reshape", out, newshape=list(shape))


def _attribute_bounds(dims: list[Any]) -> bool:
    """Whether slice bounds can be ``strided_slice``'s attributes: ints, or dims of ``main``'s
    symbols that are never negative (so they index from the start, as ONNX reads them). A
    rounded dim (``(frames - 1) // 2 + 1``, a convolution's output length, which sympy's
    assumptions leave undecided) is proved non-negative by ``ir.compare`` (interval
    arithmetic, then ``ir.dim_proofs``, each with its budget)."""
    if data_dependent(dims):
        return False
    return all(
        isinstance(d, int) or d.is_nonnegative is True or ir.compare(0, "<=", d) is True
        for d in dims
    )


def _check_slice(starts: list[Any], ends: list[Any], axes: list[int], steps: list[int]) -> None:
    """Raise NodeError unless one entry per sliced axis, no axis twice, no step 0."""
    if not len(starts) == len(ends) == len(axes) == len(steps):
        raise NodeError("starts, ends, axes and steps must have the same length")
    if len(set(axes)) != len(axes):
        raise NodeError(f"axes {axes} repeat an axis")
    if any(s == 0 for s in steps):
        raise NodeError("a step is 0")


def _dim_slice(
    node: Node, rank: int, axes: list[int], steps: list[int], starts: list[Any], ends: list[Any]
) -> Any:
    """``strided_slice`` with dims among its begin and end (see the module doc)."""
    _check_slice(starts, ends, axes, steps)
    count = max(axes) + 1
    begin: list[Any] = [0] * count
    strides = [1] * count
    stops: list[Any] = [None] * count  # None: to the end, in the step's direction
    for a, b, e, s in zip(axes, starts, ends, steps, strict=True):
        begin[a], strides[a] = b, s
        stops[a] = None if isinstance(e, int) and abs(e) >= _HUGE else e
    end = _end_list(stops, strides, value_shape(node.input(0)))
    return trace.apply("strided_slice", node.tensor(0), begin=begin, end=end, strides=strides)


def _data_slice(node: Node, axes: list[int], steps: list[int]) -> Any:
    """Bounds from data: vectors over the axes up to the last sliced one, each entry taken
    from the bound tensors (sliced axes) or whole (the others; their dims at run time)."""
    shape = value_shape(node.input(0))
    count = max(axes) + 1
    begin_t, end_t = node.tensor(1), node.tensor(2)
    dtype = begin_t.type.dtype

    def vector(bound: Any, default: list[Any]) -> Any:
        pieces = []
        for a in range(count):
            if a in axes:
                entry = trace.apply("take", bound, axes.index(a))
                pieces.append(
                    trace.apply("cast", entry, dtype="int64") if dtype != "int64" else entry
                )
            else:
                pieces.append(node.materialize(Known.of(default[a], "int64")))
        return trace.apply("stack", pieces, axis=0)

    strides = [steps[axes.index(a)] if a in axes else 1 for a in range(count)]
    return trace.apply(
        "dyn.strided_slice",
        node.tensor(0),
        vector(begin_t, [0] * count),
        vector(end_t, list(shape[:count])),
        trace.constant(np.array(strides, dtype=np.int64), "int64"),
    )


def _symbolic_slice_shape(shape: Any, begin: list[Any], end: list[Any], strides: list[int]) -> Any:
    """The slice's shape over dims, or None when it holds only under facts left for run time
    (a bound such as ``seq - 2`` typed as a non-negative index, which ONNX would count from
    the end where it is negative): the result then keeps its run-time shape."""
    from dynshape.inference.symbolic_context import SymbolicContext
    from shape_funcs.ops._common import strided_slice_shape

    ctx = SymbolicContext()
    out = strided_slice_shape(ctx, tuple(shape), begin, end, strides)
    return None if ctx.deferred else out


@converter("Split")
def split(node: Node) -> Any:
    data = node.input(0)
    shape = value_shape(data)
    axis = normalize_axis(node.attr("axis", 0), len(shape))
    sizes = node.attr("split") if node.opset < 13 else known_ints(node, 1, "split")
    count = node.num_outputs
    if sizes is not None:
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
    known = node.known(1)
    if known is None:
        raise Unsupported(
            "Tile repeats computed from data are not supported (they decide the shape)"
        )
    reps: list[Any] = known.dims()
    if data_dependent(reps):
        raise Unsupported(
            "Tile repeats that hold a size known at run time only (a count of data, such "
            "as NonZero's) are not supported (they decide the shape)"
        )
    data = node.input(0)
    if len(reps) != len(value_shape(data)):
        raise NodeError(f"{len(reps)} repeats for a tensor of rank {len(value_shape(data))}")
    if isinstance(data, Known) and not data.symbolic and all(isinstance(r, int) for r in reps):
        return Known(np.tile(data.array, reps), data.dtype)
    # (a constant tiled by dims, DETR's queries repeated over the batch: tiled at run time)
    return trace.apply("tile", node.tensor(0), reps=reps)
