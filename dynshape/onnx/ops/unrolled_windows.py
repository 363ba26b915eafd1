"""Windowed ops unrolled at import over static spatial dims: every window position is a
constant, so a window element is one ``take`` of constant indices (``cut``) and a sum into an
image is one ``scatter_elements`` of constant positions (``scatter_blocks``). Used by Col2Im and
MaxUnpool (``spatial.py``) and by the 3-d ConvTranspose and MaxPool's Indices output
(``nn.py``): a module of its own so that neither converter module imports the other."""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import Any, Literal

import numpy as np

import ir
from dynshape.builder import trace

from ..registry import Node, NodeError, Unsupported
from .operands import value_dtype, value_shape

FLOATS = ("float16", "float32", "float64")


def _const(value: Any, dtype: str) -> Any:
    return trace.constant(np.array(value, dtype=dtype), dtype)


def cut(x: Any, axis: int, where: range) -> Any:
    """``x`` at positions ``where`` of ``axis``: a ``take`` of constant indices (a contiguous
    range is copied as a slice by the kernel): static positions of a padded, possibly symbolic
    axis."""
    index = trace.constant(np.arange(where.start, where.stop, where.step, dtype=np.int64), "int64")
    return trace.apply("take", x, index, axis=axis)


def scatter_blocks(
    x: Any,
    batch: ir.Dim,
    channels: ir.Dim,
    image: list[int],
    block: list[int],
    counts: list[int],
    strides: list[int],
    dilations: list[int],
    pads: list[int],
    dtype: str,
) -> Any:
    """Col2Im's sum: ``x`` (N, C * prod(block), prod(counts)) added into zeros of (N, C,
    *image) at each (block element, block position)'s image position, known at import; the
    pairs outside the image are dropped."""
    n = len(image)
    k, length = math.prod(block), math.prod(counts)
    grids = np.meshgrid(
        *(np.arange(b) * d for b, d in zip(block, dilations, strict=True)),
        *(np.arange(c) * s - pads[i] for i, (c, s) in enumerate(zip(counts, strides, strict=True))),
        indexing="ij",
    )
    coords = [grids[i] + grids[n + i] for i in range(n)]  # shape (*block, *counts) each
    inside = np.logical_and.reduce(
        [(c >= 0) & (c < size) for c, size in zip(coords, image, strict=True)]
    )
    flat = np.ravel_multi_index(tuple(np.where(inside, c, 0) for c in coords), image).reshape(-1)
    keep = np.flatnonzero(inside.reshape(-1))
    x = trace.apply("reshape", x, newshape=[batch, channels, k * length])
    if keep.size != k * length:
        x = trace.apply("take", x, trace.constant(keep.astype(np.int64), "int64"), axis=2)
    index = trace.constant(flat[keep].astype(np.int64), "int64")
    index = trace.apply("broadcast_to", index, shape=[batch, channels, int(keep.size)])
    zeros = trace.apply(
        "full", _const(0, dtype), shape=[batch, channels, math.prod(image)], dtype=dtype
    )
    out = trace.apply("scatter_elements", zeros, index, x, axis=2, reduction="add")
    return trace.apply("reshape", out, newshape=[batch, channels, *image])


def conv_transpose_nd(
    node: Node,
    kernel: list[int],
    strides: list[int],
    dilations: list[int],
    begin: list[int],
    end: list[int],
    output_padding: list[int],
) -> Any:
    """A 3-d ConvTranspose (``group`` 1, static spatial dims): the columns ``W^T x`` by one
    ``nn.matmul``, ``(N, M * prod(k), D * H * W)``, summed into the output by Col2Im's
    scatter with the crop as its pads (a column position past the output is dropped); a
    negative crop (an output past the full result) is zeros there."""
    x_shape = value_shape(node.input(0))
    w_shape = value_shape(node.input(1))
    if int(node.attr("group", 1)) != 1:
        raise Unsupported("3-d ConvTranspose with group > 1")
    sizes = list(x_shape[2:])
    if not all(isinstance(d, int) for d in [*sizes, *w_shape]):
        raise Unsupported(f"3-d ConvTranspose over symbolic dims {list(x_shape)}, {list(w_shape)}")
    batch, channels = x_shape[:2]
    outs = list(w_shape)[1]
    dtype = value_dtype(node.input(0))
    image = [
        s * (i - 1) + p + d * (k - 1) + 1 - b - e
        for i, s, p, d, k, b, e in zip(
            sizes, strides, output_padding, dilations, kernel, begin, end, strict=True
        )
    ]
    lead = [max(-b, 0) for b in begin]
    pads = [max(b, 0) for b in begin] + [max(e, 0) for e in end]
    inner = [i - extra for i, extra in zip(image, lead, strict=True)]
    w = trace.apply("reshape", node.tensor(1), newshape=[channels, -1])  # (C, M * K)
    w = trace.apply("transpose", w, axes=[1, 0])
    cols = trace.apply("reshape", node.tensor(0), newshape=[batch, channels, -1])
    cols = trace.apply("nn.matmul", w, cols)  # (N, M * K, L)
    counts = [int(v) for v in sizes]
    out = scatter_blocks(cols, batch, outs, inner, kernel, counts, strides, dilations, pads, dtype)
    if any(lead):
        width = [[0, 0], [0, 0], *([a, 0] for a in lead)]
        out = trace.apply("nn.pad", out, pad_width=width, pad_value=0.0)
    if node.input(2) is not None:
        out = trace.apply("nn.bias_add", out, node.tensor(2), axis=1)
    return out


def max_pool_with_indices(
    x: Any,
    kernel: Sequence[int],
    strides: Sequence[int],
    begin: Sequence[int],
    end: Sequence[int],
    dilations: Sequence[int],
    storage_order: int,
) -> tuple[Any, Any]:
    """MaxPool with its Indices output: one strided slice of the padded input per window
    element, kept where strictly greater than the best so far (the first maximum in scan
    order, as the reference), with its flat index: ``(n * C + c) * prod(spatial)`` plus the
    spatial position, row-major (``storage_order=0``) or column-major (1). ``end`` includes
    what ``ceil_mode`` adds. Needs static spatial dims (the positions are constants)."""
    shape = value_shape(x)
    batch, channels, *sizes = shape
    if not all(isinstance(d, int) for d in sizes):
        raise Unsupported(f"MaxPool's Indices over symbolic spatial dims {sizes}")
    if storage_order not in (0, 1):
        raise NodeError(f"storage_order={storage_order} is not 0 or 1")
    dtype = value_dtype(x)
    counts = [
        (size + b + e - (d * (k - 1) + 1)) // s + 1
        for size, b, e, k, s, d in zip(sizes, begin, end, kernel, strides, dilations, strict=True)
    ]
    low = float(np.finfo(dtype).min) if dtype in FLOATS else float(np.iinfo(dtype).min)
    padded = x
    if any(begin) or any(end):
        width = [[0, 0], [0, 0], *([b, e] for b, e in zip(begin, end, strict=True))]
        padded = trace.apply("nn.pad", x, pad_width=width, pad_value=low)
    order: Literal["C", "F"] = "C" if storage_order == 0 else "F"
    best: Any = None
    arg: Any = None
    for offsets in itertools.product(*(range(k) for k in kernel)):
        starts = [o * d for o, d in zip(offsets, dilations, strict=True)]
        stops = [a + (c - 1) * s + 1 for a, c, s in zip(starts, counts, strides, strict=True)]
        value = padded
        for i, (a, b, s) in enumerate(zip(starts, stops, strides, strict=True)):
            value = cut(value, 2 + i, range(a, b, s))
        # the input position of each output's window element (clamped: padding never wins)
        axes = [
            np.clip(np.arange(c) * s + a - b, 0, size - 1)
            for c, s, a, b, size in zip(counts, strides, starts, begin, sizes, strict=True)
        ]
        grids = tuple(np.meshgrid(*axes, indexing="ij"))
        where = np.ravel_multi_index(grids, [int(d) for d in sizes], order=order)
        index = trace.constant(where.astype(np.int64), "int64")
        if best is None:
            best, arg = value, index
            continue
        better = trace.apply("greater", value, best)
        best = trace.apply("where", better, value, best)
        arg = trace.apply("where", better, index, arg)
    # each (n, c) plane starts at (n * C + c) * prod(spatial)
    ones = trace.apply("full", _const(1, "int64"), shape=[batch, channels], dtype="int64")
    plane = trace.apply(
        "cumsum", trace.apply("reshape", ones, newshape=[-1]), axis=0, exclusive=True
    )
    plane = trace.apply("multiply", plane, _const(math.prod(sizes), "int64"))
    plane = trace.apply("reshape", plane, newshape=[batch, channels, *([1] * len(sizes))])
    return best, trace.apply("add", arg, plane)
