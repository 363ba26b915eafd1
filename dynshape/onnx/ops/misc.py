"""``ReverseSequence``, ``TensorScatter`` and ``TfIdfVectorizer`` (integer pools), composed of
catalogue ops. (``Scatter``, the ``ScatterElements`` of opsets 9-10, is not converted: the
importer reads opsets 13 on, and a case of opset 10 is lifted only when its ops are the same
at 13, which a deprecated op is not.)

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

from ..registry import Node, NodeError, Unsupported, converter
from .indexing import _dim_scalar, _int64, _iota, flat_index
from .layout import slice_axis
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
    flat = flat_index(node, index, time_axis, shape, shape)
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


def _pool_ngrams(node: Node) -> list[tuple[tuple[int, ...], int]]:
    """The pool's n-grams of a length in ``[min_gram_length, max_gram_length]``, each with its
    output column (``ngram_indexes``, numbered over every n-gram of the pool)."""
    pool = [int(v) for v in node.attr("pool_int64s", [])]
    if node.attr("pool_strings"):
        raise Unsupported("TfIdfVectorizer over strings (pool_strings)")
    starts = [int(v) for v in node.attr("ngram_counts", [])]
    columns = [int(v) for v in node.attr("ngram_indexes", [])]
    lo, hi = int(node.attr("min_gram_length", 1)), int(node.attr("max_gram_length", 1))
    out: list[tuple[tuple[int, ...], int]] = []
    number = 0
    for size, start in enumerate(starts, 1):
        end = starts[size] if size < len(starts) else len(pool)
        if (end - start) % size:
            raise NodeError(f"the pool's {size}-grams take {end - start} items")
        for at in range(start, end, size):
            if number >= len(columns):
                raise NodeError("ngram_indexes has fewer entries than the pool has n-grams")
            if lo <= size <= hi:
                out.append((tuple(pool[at : at + size]), columns[number]))
            number += 1
    return out


@converter("TfIdfVectorizer")
def tfidf_vectorizer(node: Node) -> Any:
    """Counts of the pool's n-grams in each row of integer input (items ``d`` apart, ``d`` up
    to ``max_skip_count + 1``; a unigram once per position), weighted by ``mode``: ``TF`` the
    counts, ``IDF`` the weight (1 without ``weights``) where the count is positive, ``TFIDF``
    the count times the weight. Each n-gram at each distance is one comparison of shifted
    slices, summed; the counts go to their output columns by one matmul with a 0/1 matrix."""
    x = node.input(0)
    shape = value_shape(x)
    if value_dtype(x) not in ("int32", "int64"):
        raise Unsupported(f"TfIdfVectorizer of {value_dtype(x)} (int32 and int64 are supported)")
    if len(shape) not in (1, 2):
        raise NodeError(f"input of rank {len(shape)} (1 or 2)")
    mode = node.attr("mode", "TF")
    mode = mode.decode() if isinstance(mode, bytes) else str(mode)
    if mode not in ("TF", "IDF", "TFIDF"):
        raise NodeError(f"mode {mode!r} (TF, IDF or TFIDF)")
    columns = [int(v) for v in node.attr("ngram_indexes", [])]
    if not columns or min(columns) < 0:
        raise NodeError("ngram_indexes must be non-empty and non-negative")
    width = max(columns) + 1
    skips = int(node.attr("max_skip_count", 0))
    data = _int64(node.tensor(0))
    if len(shape) == 1:
        data = trace.apply("expand_dims", data, axis=0)
    counts, targets = [], []
    for gram, column in _pool_ngrams(node):
        total: Any = None
        for d in range(1, (skips + 1 if len(gram) > 1 else 1) + 1):
            hit: Any = None
            for j, item in enumerate(gram):
                tail = (len(gram) - 1 - j) * d
                part = slice_axis(data, 1, j * d, -tail if tail else None)
                same = trace.apply("equal", part, trace.constant(np.array(item, np.int64), "int64"))
                hit = same if hit is None else trace.apply("logical_and", hit, same)
            found = trace.apply(
                "sum", trace.apply("cast", hit, dtype="float32"), axis=[1], keepdims=False
            )
            total = found if total is None else trace.apply("add", total, found)
        counts.append(total)
        targets.append(column)
    rows = value_shape(data)[0]
    if counts:
        placed = np.zeros((len(counts), width), np.float32)
        placed[np.arange(len(counts)), targets] = 1.0
        table = trace.apply("stack", counts, axis=1)
        out = trace.apply("nn.matmul", table, trace.constant(placed, "float32"))
    else:
        out = trace.apply("zeros", shape=[rows, width], dtype="float32")
    weights = node.attr("weights")
    if mode == "IDF":
        out = trace.apply(
            "cast",
            trace.apply("greater", out, trace.constant(np.array(0, np.float32), "float32")),
            dtype="float32",
        )
    if mode != "TF" and weights is not None and len(weights):
        w = np.asarray(weights, np.float32)
        if w.shape != (width,):
            raise NodeError(f"{w.size} weights for {width} outputs")
        out = trace.apply("multiply", out, trace.constant(w, "float32"))
    if len(shape) == 1:
        out = trace.apply("reshape", out, newshape=[width])
    return out
