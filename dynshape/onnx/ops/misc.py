"""``ReverseSequence`` and ``TensorScatter``, composed of catalogue ops. (``Scatter``, the
``ScatterElements`` of opsets 9-10, is deprecated from opset 11: the importer reads 13 on.)

``ReverseSequence`` is one ``take`` from the flattened data at the flat position of
``(t' , b, ...)`` with ``t' = len[b] - 1 - t`` below ``len[b]`` and ``t`` past it (index grids
as in ``GatherElements``). ``TensorScatter`` (a KV cache written in place) is a
``scatter_elements`` along its sequence axis at ``write_indices[b] + s`` (modulo the cache's
length for ``circular``); an index past the cache in ``linear`` mode raises at run time.
"""

from __future__ import annotations

from typing import Any

import numpy as np

import ir
from dynshape.builder import trace

from ..registry import Node, NodeError, converter
from .indexing import _dim_scalar, _int64, _iota, _prod
from .operands import normalize_axis, value_dtype, value_shape


@converter("ReverseSequence")
def reverse_sequence(node: Node) -> Any:
    """The first ``sequence_lens[b]`` elements of batch ``b`` along ``time_axis`` reversed, the
    rest kept (``batch_axis`` and ``time_axis`` are 0 and 1, either way)."""
    data = node.input(0)
    shape = value_shape(data)
    rank = len(shape)
    if rank < 2:
        raise NodeError(f"ReverseSequence of rank {rank} (at least 2)")
    batch_axis = normalize_axis(int(node.attr("batch_axis", 1)), rank)
    time_axis = normalize_axis(int(node.attr("time_axis", 0)), rank)
    if {batch_axis, time_axis} != {0, 1}:
        raise NodeError(f"batch_axis {batch_axis} and time_axis {time_axis} must be 0 and 1")
    lens_shape = value_shape(node.input(1))
    if len(lens_shape) != 1 or ir.compare(lens_shape[0], "==", shape[batch_axis], {}) is False:
        raise NodeError(
            f"sequence_lens of shape {list(lens_shape)} for a batch of {shape[batch_axis]}"
        )
    if value_dtype(node.input(1)) not in ("int32", "int64"):
        raise NodeError("sequence_lens must be int32 or int64")
    lens = trace.apply(
        "reshape",
        _int64(node.tensor(1)),
        newshape=[shape[batch_axis] if a == batch_axis else 1 for a in range(rank)],
    )
    t = _iota(node, shape[time_axis], rank, time_axis)
    one = trace.constant(np.array(1, np.int64), "int64")
    flipped = trace.apply("subtract", trace.apply("subtract", lens, one), t)
    index = trace.apply("where", trace.apply("less", t, lens), flipped, t)
    flat: Any = None
    for a in range(rank):
        term = index if a == time_axis else _iota(node, shape[a], rank, a)
        stride = _prod(shape[a + 1 :])
        if stride != 1:
            term = trace.apply("multiply", term, _dim_scalar(node, stride))
        flat = term if flat is None else trace.apply("add", flat, term)
    if value_shape(flat) != shape:
        flat = trace.apply("broadcast_to", flat, shape=list(shape))
    return trace.apply("take", node.tensor(0), flat, axis=None)


@converter("TensorScatter")
def tensor_scatter(node: Node) -> Any:
    """``update`` written into a copy of ``past_cache`` along ``axis`` (not 0, the batch) from
    ``write_indices[b]`` on (0 without them), wrapping around in ``circular`` mode."""
    cache, update = node.input(0), node.input(1)
    c_shape, u_shape = value_shape(cache), value_shape(update)
    rank = len(c_shape)
    mode = node.attr("mode", "linear")
    mode = mode.decode() if isinstance(mode, bytes) else str(mode)
    if mode not in ("linear", "circular"):
        raise NodeError(f"mode {mode!r} (linear or circular)")
    if len(u_shape) != rank:
        raise NodeError(f"update of rank {len(u_shape)} for a cache of rank {rank}")
    axis = normalize_axis(int(node.attr("axis", -2)), rank)
    if axis == 0:
        raise NodeError("axis 0 is the batch axis")
    for a in range(rank):
        if a != axis and ir.compare(u_shape[a], "==", c_shape[a], {}) is False:
            raise NodeError(f"update {list(u_shape)} and cache {list(c_shape)} differ in axis {a}")
    if ir.compare(u_shape[axis], "<=", c_shape[axis], {}) is False:
        raise NodeError(f"an update of {u_shape[axis]} is longer than the cache {c_shape[axis]}")
    if value_dtype(update) != value_dtype(cache):
        raise NodeError("update and cache have different dtypes")
    index = _iota(node, u_shape[axis], rank, axis)
    if node.input(2) is not None:
        starts = trace.apply(
            "reshape",
            _int64(node.tensor(2)),
            newshape=[c_shape[0] if a == 0 else 1 for a in range(rank)],
        )
        index = trace.apply("add", index, starts)
    if mode == "circular":
        index = trace.apply("mod", index, _dim_scalar(node, c_shape[axis]))
    if value_shape(index) != u_shape:
        index = trace.apply("broadcast_to", index, shape=list(u_shape))
    return trace.apply(
        "scatter_elements",
        node.tensor(0),
        index,
        node.tensor(1),
        axis=axis,
        reduction="none",
    )
