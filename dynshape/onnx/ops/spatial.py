"""Spatial ops composed of catalogue ops: ``DepthToSpace``/``SpaceToDepth`` (reshape, transpose,
reshape), ``LpPool`` (an average pool of ``|x|^p`` over zero padding), ``CenterCropPad`` (a
slice and a pad), ``MaxUnpool`` and ``Col2Im`` (a scatter into zeros), ``AffineGrid`` (a
batched matmul of the base grid) and ``GridSample`` (per axis, taps with their weights; the
taps of every axis combined into flat indices gathered by ``take``).

Sizes that decide the output shape (``CenterCropPad``'s shape, ``Col2Im``'s image and block
shapes, ``AffineGrid``'s size, ``MaxUnpool``'s output_shape) must be known at import.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import sympy

import ir
from dynshape.builder import trace

from ..known import Known
from ..registry import Node, NodeError, Unsupported, converter
from .nn import _ints, pool_nd, pool_pads, pool_window
from .operands import known_ints, normalize_axis, value_dtype, value_shape
from .unrolled_windows import FLOATS as _FLOATS
from .unrolled_windows import cut as _cut
from .unrolled_windows import scatter_blocks as _scatter_blocks


def _const(value: Any, dtype: str) -> Any:
    return trace.constant(np.array(value, dtype=dtype), dtype)


def _scalar(node: Node, d: ir.Dim, dtype: str) -> Any:
    """A 0-d tensor of ``d`` (a number, or a dim computed from the input shapes) as ``dtype``."""
    if isinstance(d, (int, float, np.integer, np.floating)):
        return _const(d, dtype)
    value = trace.apply("reshape", node.materialize(Known.of([d], "int64")), newshape=[])
    return value if dtype == "int64" else trace.apply("cast", value, dtype=dtype)


def _mode(node: Node, name: str, default: str, choices: Sequence[str]) -> str:
    value = node.attr(name, default)
    value = value.decode() if isinstance(value, bytes) else str(value)
    if value not in choices:
        raise NodeError(f"{name} {value!r} is not one of {', '.join(choices)}")
    return value


# ---- DepthToSpace, SpaceToDepth -----------------------------------------------------------------


def _blocks(node: Node) -> tuple[Any, tuple[ir.Dim, ...], int, str]:
    shape = value_shape(node.input(0))
    if len(shape) != 4:
        raise NodeError(f"the input must have rank 4 (N, C, H, W), got rank {len(shape)}")
    b = node.attr("blocksize")
    if b is None or int(b) < 1:
        raise NodeError(f"blocksize must be given and >= 1, got {b}")
    return node.tensor(0), shape, int(b), _mode(node, "mode", "DCR", ("DCR", "CRD"))


@converter("DepthToSpace")
def depth_to_space(node: Node) -> Any:
    """Channels to blocks: ``(N, C, H, W)`` to ``(N, C / b^2, H * b, W * b)``, the channels
    read as ``(b, b, C / b^2)`` (``DCR``) or ``(C / b^2, b, b)`` (``CRD``)."""
    x, (n, c, h, w), b, mode = _blocks(node)
    if isinstance(c, int) and c % (b * b):
        raise NodeError(f"the channels ({c}) are not a multiple of blocksize^2 ({b * b})")
    depth = c // (b * b) if isinstance(c, int) else -1
    if mode == "DCR":
        x = trace.apply("reshape", x, newshape=[n, b, b, depth, h, w])
        x = trace.apply("transpose", x, axes=[0, 3, 4, 1, 5, 2])
    else:
        x = trace.apply("reshape", x, newshape=[n, depth, b, b, h, w])
        x = trace.apply("transpose", x, axes=[0, 1, 4, 2, 5, 3])
    return trace.apply("reshape", x, newshape=[n, depth, h * b, w * b])


@converter("SpaceToDepth")
def space_to_depth(node: Node) -> Any:
    """Blocks to channels: ``(N, C, H, W)`` to ``(N, C * b^2, H / b, W / b)``, the channels
    written as ``(b, b, C)`` (``DCR``, the only order before opset 28) or ``(C, b, b)``."""
    x, (n, c, h, w), b, mode = _blocks(node)
    for name, d in (("height", h), ("width", w)):
        if not isinstance(d, int):
            raise Unsupported(
                f"SpaceToDepth over the symbolic {name} {d}: its blocks need it to be a "
                f"multiple of {b} (fix the dim)"
            )
        if d % b:
            raise NodeError(f"the {name} ({d}) is not a multiple of blocksize ({b})")
    x = trace.apply("reshape", x, newshape=[n, c, h // b, b, w // b, b])
    perm = [0, 3, 5, 1, 2, 4] if mode == "DCR" else [0, 1, 3, 5, 2, 4]
    x = trace.apply("transpose", x, axes=perm)
    return trace.apply("reshape", x, newshape=[n, c * b * b, h // b, w // b])


# ---- LpPool -------------------------------------------------------------------------------------


@converter("LpPool")
def lp_pool(node: Node) -> Any:
    """``(sum over the window of |x|^p)^(1/p)``: the sum an average pool of ``|x|^p`` padded
    with zeros (the pads, and what ``ceil_mode`` adds) times the window's size; 1-d to 3-d."""
    kernel, strides, dilations = pool_window(node)
    dtype = value_dtype(node.input(0))
    if dtype not in _FLOATS:
        raise NodeError(f"LpPool of {dtype}: a float type is required")
    p = int(node.attr("p", 2))
    if p < 1:
        raise NodeError(f"p={p} must be >= 1")
    begin, end = pool_pads(node, kernel, strides, dilations)
    x = trace.apply("abs", node.tensor(0))
    if p != 1:
        x = trace.apply("power", x, _const(p, dtype))
    if any(begin + end):
        width = [[0, 0], [0, 0], *([b, e] for b, e in zip(begin, end, strict=True))]
        x = trace.apply("nn.pad", x, pad_width=width, pad_value=0.0)
    zeros = [0] * len(kernel)
    out = pool_nd(x, "nn.avg_pool2d", kernel, strides, zeros, zeros, dilations)
    out = trace.apply("multiply", out, _const(math.prod(kernel), dtype))
    if p == 1:
        return out
    if p == 2:
        return trace.apply("sqrt", out)
    return trace.apply("power", out, _const(1.0 / p, dtype))


# ---- CenterCropPad ------------------------------------------------------------------------------


@converter("CenterCropPad")
def center_crop_pad(node: Node) -> Any:
    """Each axis cropped or padded with zeros to its size, centred (the odd one out at the
    end): a ``strided_slice``, then an ``nn.pad``. A symbolic dim must equal its size."""
    x_shape = value_shape(node.input(0))
    rank = len(x_shape)
    shape = node.ints(1, "shape")
    if shape is None:
        raise NodeError("shape (input 1) is required")
    given = node.attr("axes")
    axes = (
        list(range(rank))
        if given is None
        else [normalize_axis(int(a), rank, "axes entry") for a in given]
    )
    if len(set(axes)) != len(axes):
        raise NodeError(f"axes={list(given or [])} repeats an axis")
    if len(shape) != len(axes):
        raise NodeError(f"shape has {len(shape)} entries for {len(axes)} axes")
    begin, end = [0] * rank, list(x_shape)
    pads = [[0, 0] for _ in range(rank)]
    for a, size in zip(axes, shape, strict=True):
        dim = x_shape[a]
        if dim == size:
            continue
        if not (isinstance(dim, int) and isinstance(size, int)):
            raise Unsupported(
                f"CenterCropPad of the symbolic dim {dim} to {size}: whether it crops or pads "
                f"is not known at import (fix the dim)"
            )
        if size < 0:
            raise NodeError(f"shape entry {size} is negative")
        if size < dim:
            begin[a] = (dim - size) // 2
            end[a] = begin[a] + size
        else:
            pads[a] = [(size - dim) // 2, size - dim - (size - dim) // 2]
    x = node.tensor(0)
    for a in range(rank):
        if begin[a] or end[a] != x_shape[a]:
            x = _cut(x, a, range(begin[a], end[a]))
    if any(b or e for b, e in pads):
        x = trace.apply("nn.pad", x, pad_width=pads, pad_value=0.0)
    return x


# ---- MaxUnpool, Col2Im --------------------------------------------------------------------------


@converter("MaxUnpool")
def max_unpool(node: Node) -> Any:
    """Zeros with each value of ``X`` written at its flat index (``MaxPool``'s Indices, over
    the whole output): ``scatter_elements`` into the flattened zeros. The output's spatial
    dims are ``output_shape`` (input 2) or ``(in - 1) * stride - pads + kernel``."""
    x_shape = value_shape(node.input(0))
    rank = len(x_shape)
    n = rank - 2
    if n < 1:
        raise NodeError(f"the input must have rank >= 3 (N, C, spatial...), got rank {rank}")
    if value_shape(node.input(1)) != x_shape:
        raise NodeError(
            f"the indices' shape {list(value_shape(node.input(1)))} differs from X's "
            f"{list(x_shape)}"
        )
    if node.attr("kernel_shape") is None:
        raise NodeError("kernel_shape is required")
    kernel = _ints(node, "kernel_shape", [], n)
    strides = _ints(node, "strides", [1] * n, n)
    pads = _ints(node, "pads", [0] * 2 * n, 2 * n)
    inferred = [
        *x_shape[:2],
        *(
            ir.check_dim(sympy.sympify((d - 1) * s - pads[i] - pads[i + n] + k))
            if not isinstance(d, int)
            else (d - 1) * s - pads[i] - pads[i + n] + k
            for i, (d, s, k) in enumerate(zip(x_shape[2:], strides, kernel, strict=True))
        ),
    ]
    total = math.prod(inferred)
    total = total if isinstance(total, int) else ir.check_dim(total)
    dtype = value_dtype(node.input(0))
    zeros = trace.apply("full", _const(0, dtype), shape=[total], dtype=dtype)
    values = trace.apply("reshape", node.tensor(0), newshape=[-1])
    indices = trace.apply("reshape", node.tensor(1), newshape=[-1])
    out = trace.apply("scatter_elements", zeros, indices, values, axis=0, reduction="none")
    out = trace.apply("reshape", out, newshape=inferred)
    given = node.ints(2, "output_shape")
    if given is None or list(given) == inferred:
        return out
    # The reference (and the backend cases) index the inferred shape and put it in the
    # top-left corner of output_shape, the rest zeros.
    if len(given) != rank:
        raise NodeError(f"output_shape has {len(given)} entries for a rank-{rank} input")
    extra = [sympy.sympify(g - d) for g, d in zip(given, inferred, strict=True)]
    if not all(e.is_Integer and e >= 0 for e in extra):
        raise Unsupported(
            f"output_shape={list(given)} against the inferred shape {inferred}: only an "
            f"output_shape larger by numbers is supported"
        )
    return trace.apply("nn.pad", out, pad_width=[[0, int(e)] for e in extra], pad_value=0.0)


@converter("Col2Im")
def col2im(node: Node) -> Any:
    """Blocks ``(N, C * prod(block), L)`` summed into images ``(N, C, *image_shape)``: every
    (block element, block position) pair has its image position, known at import; the pairs
    inside the image are taken and added there by one ``scatter_elements``."""
    x_shape = value_shape(node.input(0))
    if len(x_shape) != 3:
        raise NodeError(f"the input must have rank 3 (N, C * prod(block), L), got {len(x_shape)}")
    image = known_ints(node, 1, "image_shape")
    block = known_ints(node, 2, "block_shape")
    if image is None or block is None:
        raise NodeError("image_shape and block_shape are required")
    n = len(image)
    if len(block) != n or n < 1:
        raise NodeError(f"image_shape={image} and block_shape={block} must have equal lengths")
    strides = _ints(node, "strides", [1] * n, n)
    dilations = _ints(node, "dilations", [1] * n, n)
    pads = _ints(node, "pads", [0] * 2 * n, 2 * n)
    if min(block + strides + dilations + image) < 1 or min(pads) < 0:
        raise NodeError("block_shape, strides, dilations and image_shape must be >= 1, pads >= 0")
    counts = [
        (image[i] + pads[i] + pads[i + n] - dilations[i] * (block[i] - 1) - 1) // strides[i] + 1
        for i in range(n)
    ]
    if min(counts) < 1:
        raise NodeError(f"no block fits the padded image (blocks per axis {counts})")
    k, length = math.prod(block), math.prod(counts)
    batch, rows, cols = x_shape
    if isinstance(rows, int) and rows % k:
        raise NodeError(f"input dim 1 ({rows}) is not a multiple of prod(block_shape) = {k}")
    if isinstance(cols, int) and cols != length:
        raise NodeError(f"input dim 2 ({cols}) is not the number of blocks ({length})")
    channels = rows // k if isinstance(rows, int) else ir.check_dim(rows / k)
    dtype = value_dtype(node.input(0))
    return _scatter_blocks(
        node.tensor(0), batch, channels, image, block, counts, strides, dilations, pads, dtype
    )


# ---- AffineGrid, GridSample ---------------------------------------------------------------------


@converter("AffineGrid")
def affine_grid(node: Node) -> Any:
    """``theta`` (N, r, r + 1) applied to the base grid of ``size`` (N, C, *spatial; known at
    import as numbers): ``(N, *spatial, r)`` of ``theta @ [x, y, (z,) 1]``, the base
    coordinates evenly spaced in [-1, 1] (centres of the pixels unless ``align_corners``)."""
    size = known_ints(node, 1, "size")
    theta_shape = value_shape(node.input(0))
    if size is None:
        raise NodeError("size (input 1) is required")
    r = len(size) - 2
    if r not in (2, 3):
        raise NodeError(f"size must have 4 or 5 entries (N, C, spatial...), got {size}")
    if len(theta_shape) != 3 or theta_shape[1:] != (r, r + 1):
        raise NodeError(f"theta must be (N, {r}, {r + 1}), got {list(theta_shape)}")
    dtype = value_dtype(node.input(0))
    if dtype not in _FLOATS:
        raise NodeError(f"theta of {dtype}: a float type is required")
    if isinstance(theta_shape[0], int) and theta_shape[0] != size[0]:
        raise NodeError(f"size[0] ({size[0]}) differs from theta's batch ({theta_shape[0]})")
    align = bool(node.attr("align_corners", 0))
    spatial = size[2:]
    axes = []
    for s in spatial:
        if align:
            axes.append(np.linspace(-1.0, 1.0, s) if s > 1 else np.array([-1.0]))
        else:
            axes.append((2.0 * np.arange(s) + 1.0) / s - 1.0)
    mesh = np.meshgrid(*axes, indexing="ij")  # per spatial axis, (*spatial)
    # homogeneous coordinates in the grid's order: x (the last axis) first
    base = np.stack([*(m.reshape(-1) for m in reversed(mesh)), np.ones(math.prod(spatial))], 0)
    batch = theta_shape[0]
    base_t = trace.constant(np.ascontiguousarray(base.T).astype(dtype), dtype)  # (P, r + 1)
    base_t = trace.apply("broadcast_to", base_t, shape=[batch, math.prod(spatial), r + 1])
    grid = trace.apply("nn.batch_matmul", base_t, node.tensor(0))  # (N, P, r): base @ theta^T
    return trace.apply("reshape", grid, newshape=[batch, *spatial, r])


def _reflect(x: Any, lo: Any, hi: Any, dtype: str) -> Any:
    """``x`` reflected off ``lo`` and ``hi`` until inside, as the spec's reference does."""
    span = trace.apply("subtract", hi, lo)
    two, zero = _const(2, dtype), _const(0, dtype)

    def folded(dx: Any, below: bool) -> Any:
        turns = trace.apply("floor", trace.apply("divide", dx, span))
        rest = trace.apply("subtract", dx, trace.apply("multiply", turns, span))
        even = trace.apply("equal", trace.apply("mod", turns, two), zero)
        up, down = trace.apply("add", lo, rest), trace.apply("subtract", hi, rest)
        return trace.apply("where", even, *((up, down) if below else (down, up)))

    below = folded(trace.apply("subtract", lo, x), True)
    above = folded(trace.apply("subtract", x, hi), False)
    out = trace.apply("where", trace.apply("greater", x, hi), above, x)
    return trace.apply("where", trace.apply("less", x, lo), below, out)


def _cubic(t: Any, dtype: str) -> list[Any]:
    """Keys' cubic weights (a = -0.75) of the 4 taps at offsets -1, 0, 1, 2 of ``t`` in [0, 1)."""
    a = -0.75

    def c(v: float) -> Any:
        return _const(v, dtype)

    def far(d: Any) -> Any:  # |d| in [1, 2): ((a*d - 5a)*d + 8a)*d - 4a
        poly = trace.apply("subtract", trace.apply("multiply", c(a), d), c(5 * a))
        poly = trace.apply("add", trace.apply("multiply", poly, d), c(8 * a))
        return trace.apply("subtract", trace.apply("multiply", poly, d), c(4 * a))

    def near(d: Any) -> Any:  # |d| in [0, 1]: ((a+2)*d - (a+3))*d*d + 1
        poly = trace.apply("subtract", trace.apply("multiply", c(a + 2), d), c(a + 3))
        poly = trace.apply("multiply", trace.apply("multiply", poly, d), d)
        return trace.apply("add", poly, c(1.0))

    one_minus = trace.apply("subtract", c(1.0), t)
    return [
        far(trace.apply("add", t, c(1.0))),
        near(t),
        near(one_minus),
        far(trace.apply("subtract", c(2.0), t)),
    ]


def _taps(
    node: Node, g: Any, size: ir.Dim, mode: str, padding: str, align: bool, dtype: str
) -> list[tuple[Any, Any | None]]:
    """One spatial axis of GridSample: its taps as (int64 index into the axis, weight or None
    for 1), from the normalised coordinate ``g``; a tap outside the axis gets weight 0
    (``zeros``), the edge (``border``) or its reflection (``reflection``)."""

    def c(v: float) -> Any:
        return _const(v, dtype)

    s = _scalar(node, size, dtype)
    last = _scalar(node, size - 1, dtype)
    one = c(1.0)
    if align:  # (g + 1) / 2 * (size - 1)
        x = trace.apply(
            "multiply", trace.apply("multiply", trace.apply("add", g, one), c(0.5)), last
        )
        lo, hi = c(0.0), last
    else:  # ((g + 1) * size - 1) / 2
        x = trace.apply("multiply", trace.apply("add", g, one), s)
        x = trace.apply("multiply", trace.apply("subtract", x, one), c(0.5))
        lo, hi = c(-0.5), trace.apply("subtract", s, c(0.5))
    if mode == "nearest":
        x = trace.apply("round", x)  # half to even, as the reference's np.rint
    if padding == "border":
        # clamped to [0, size - 1] only outside [lo, hi] (the reference's order: for cubic
        # taps, a coordinate in [-0.5, 0) is not the same as 0)
        outside = trace.apply(
            "logical_or", trace.apply("less", x, lo), trace.apply("greater", x, hi)
        )
        clamped = trace.apply("minimum", trace.apply("maximum", x, c(0.0)), last)
        x = trace.apply("where", outside, clamped, x)
    elif padding == "reflection":
        x = _reflect(x, lo, hi, dtype)
    if mode == "nearest":
        offsets, weights = [x], [None]
    else:
        base = trace.apply("floor", x)
        t = trace.apply("subtract", x, base)
        if mode == "linear":
            offsets = [base, trace.apply("add", base, one)]
            weights = [trace.apply("subtract", one, t), t]
        else:
            offsets = [trace.apply("add", base, c(float(k))) for k in (-1, 0, 1, 2)]
            weights = _cubic(t, dtype)
    taps = []
    for at, w in zip(offsets, weights, strict=True):
        if padding == "zeros":
            inside = trace.apply(
                "logical_and",
                trace.apply("greater_equal", at, c(0.0)),
                trace.apply("less_equal", at, last),
            )
            mask = trace.apply("cast", inside, dtype=dtype)
            w = mask if w is None else trace.apply("multiply", w, mask)
            at = trace.apply("minimum", trace.apply("maximum", at, c(0.0)), last)
        elif padding == "border":
            at = trace.apply("minimum", trace.apply("maximum", at, c(0.0)), last)
        else:
            at = _reflect(at, lo, hi, dtype)  # then truncated, as the reference's int()
        taps.append((trace.apply("cast", at, dtype="int64"), w))
    return taps


@converter("GridSample")
def grid_sample(node: Node) -> Any:
    """``X`` (N, C, *spatial) sampled at ``grid`` (N, *out, r; normalised coordinates, x
    first): per spatial axis the taps (1 for ``nearest``, 2 ``linear``, 4 ``cubic``) with
    their weights and padding; each combination of taps is one ``take`` of the (N * P, C)
    rows of ``X`` at ``n * P + flat index``, weighted and summed. 1-d to 3-d."""
    x_shape = value_shape(node.input(0))
    g_shape = value_shape(node.input(1))
    r = len(x_shape) - 2
    if r < 1:
        raise NodeError(f"X must have rank >= 3 (N, C, spatial...), got rank {len(x_shape)}")
    if len(g_shape) != r + 2 or g_shape[-1] != r:
        raise NodeError(
            f"the grid must be (N, *out, {r}) for X of rank {r + 2}, got {list(g_shape)}"
        )
    if r > 3:
        raise Unsupported(f"GridSample over {r} spatial axes (1 to 3 are supported)")
    modes = (
        ("bilinear", "nearest", "bicubic") if node.opset < 20 else ("linear", "nearest", "cubic")
    )
    mode = _mode(node, "mode", modes[0], modes)
    mode = {"bilinear": "linear", "bicubic": "cubic"}.get(mode, mode)
    padding = _mode(node, "padding_mode", "zeros", ("zeros", "border", "reflection"))
    align = bool(node.attr("align_corners", 0))
    dtype = value_dtype(node.input(0))
    g_dtype = value_dtype(node.input(1))
    if g_dtype not in _FLOATS:
        raise NodeError(f"the grid of {g_dtype}: a float type is required")
    if mode != "nearest" and dtype not in _FLOATS:
        raise Unsupported(f"{mode} GridSample of {dtype} (a float type is supported)")
    work = "float32" if g_dtype == "float16" else g_dtype
    grid = node.tensor(1)
    if work != g_dtype:
        grid = trace.apply("cast", grid, dtype=work)
    batch, channels, *sizes = x_shape
    per_axis = []
    for i, size in enumerate(sizes):
        g = trace.apply("take", grid, _const(r - 1 - i, "int64"), axis=-1)
        per_axis.append(_taps(node, g, size, mode, padding, align, work))
    points = math.prod(sizes)
    # row n * P of the (N * P, C) rows is batch n's first point
    ones = trace.apply("full", _const(1, "int64"), shape=[batch], dtype="int64")
    start = trace.apply("cumsum", ones, axis=0, exclusive=True)
    start = trace.apply("multiply", start, _scalar(node, points, "int64"))
    start = trace.apply("reshape", start, newshape=[batch, *([1] * r)])
    strides = [math.prod(sizes[i + 1 :]) for i in range(r)]
    perm = [0, *range(2, r + 2), 1]
    rows = trace.apply(
        "reshape", trace.apply("transpose", node.tensor(0), axes=perm), newshape=[-1, channels]
    )
    out = None
    for combo in itertools.product(*per_axis):
        index, weight = start, None
        for (at, w), stride in zip(combo, strides, strict=True):
            step = (
                at if stride == 1 else trace.apply("multiply", at, _scalar(node, stride, "int64"))
            )
            index = trace.apply("add", index, step)
            if w is not None:
                weight = w if weight is None else trace.apply("multiply", weight, w)
        picked = trace.apply("take", rows, index, axis=0)  # (N, *out, C)
        if weight is not None:
            if work != dtype:
                weight = trace.apply("cast", weight, dtype=dtype)
            picked = trace.apply("multiply", picked, trace.apply("expand_dims", weight, axis=-1))
        out = picked if out is None else trace.apply("add", out, picked)
    assert out is not None
    return trace.apply("transpose", out, axes=[0, r + 1, *range(1, r + 1)])


# ---- RoiAlign -----------------------------------------------------------------------------------


def _roi_axis(
    node: Node,
    rois: Any,
    r: Any,
    column: int,
    size: ir.Dim,
    bins: int,
    grid: int,
    scale: float,
    half: bool,
    dtype: str,
) -> list[tuple[Any, Any]]:
    """One axis of RoiAlign's samples: ``(r, bins, grid)`` positions as two taps (int64 index,
    weight), the weight 0 where the sample is outside ``[-1, size]`` (the reference skips it)."""

    def c(v: float) -> Any:
        return _const(v, dtype)

    def column_of(j: int) -> Any:
        v = trace.apply("take", rois, _const(j, "int64"), axis=1)
        v = trace.apply("subtract", trace.apply("multiply", v, c(scale)), c(0.5 if half else 0.0))
        return trace.apply("reshape", v, newshape=[r, 1, 1])

    start, end = column_of(column), column_of(column + 2)
    extent = trace.apply("subtract", end, start)
    if not half:  # malformed rois are 1 x 1
        extent = trace.apply("maximum", extent, c(1.0))
    step = trace.apply("divide", extent, c(float(bins)))
    where = np.arange(bins, dtype=dtype).reshape(1, bins, 1)
    within = ((np.arange(grid, dtype=dtype) + 0.5) / grid).reshape(1, 1, grid)
    offsets = trace.constant((where + within).astype(dtype), dtype)  # in bins
    y = trace.apply("add", start, trace.apply("multiply", step, offsets))  # (r, bins, grid)
    s = _scalar(node, size, dtype)
    last = _scalar(node, size - 1, dtype)
    inside = trace.apply(
        "logical_and",
        trace.apply("greater_equal", y, c(-1.0)),
        trace.apply("less_equal", y, s),
    )
    y = trace.apply("maximum", y, c(0.0))
    low = trace.apply("floor", y)
    at_end = trace.apply("greater_equal", low, last)
    low = trace.apply("where", at_end, last, low)
    y = trace.apply("where", at_end, last, y)
    high = trace.apply("where", at_end, last, trace.apply("add", low, c(1.0)))
    frac = trace.apply("subtract", y, low)
    mask = trace.apply("cast", inside, dtype=dtype)
    w_low = trace.apply("multiply", trace.apply("subtract", c(1.0), frac), mask)
    w_high = trace.apply("multiply", frac, mask)
    return [
        (trace.apply("cast", low, dtype="int64"), w_low),
        (trace.apply("cast", high, dtype="int64"), w_high),
    ]


@converter("RoiAlign")
def roi_align(node: Node) -> Any:
    """Per roi, bins of ``sampling_ratio``^2 bilinear samples averaged (or, ``max``, the
    largest weighted corner of each sample, maximised), as the reference: per axis two taps
    per sample; the four corner combinations gathered by ``take`` from X's (N * H * W, C) rows
    at ``batch * H * W + y * W + x``. ``sampling_ratio`` 0 (a grid sized by each roi's extent,
    data) is unsupported."""
    x_shape = value_shape(node.input(0))
    if len(x_shape) != 4:
        raise NodeError(f"X must have rank 4 (N, C, H, W), got rank {len(x_shape)}")
    r_shape = value_shape(node.input(1))
    if len(r_shape) != 2 or r_shape[1] != 4:
        raise NodeError(f"rois must be (num_rois, 4), got {list(r_shape)}")
    dtype = value_dtype(node.input(0))
    if dtype not in _FLOATS:
        raise NodeError(f"RoiAlign of {dtype}: a float type is required")
    mode = _mode(node, "mode", "avg", ("avg", "max"))
    default = "half_pixel" if node.opset >= 16 else "output_half_pixel"
    coord = _mode(
        node, "coordinate_transformation_mode", default, ("half_pixel", "output_half_pixel")
    )
    bins_h, bins_w = int(node.attr("output_height", 1)), int(node.attr("output_width", 1))
    ratio = int(node.attr("sampling_ratio", 0))
    if ratio <= 0:
        raise Unsupported(
            "RoiAlign with sampling_ratio 0 (each roi's grid is sized by its extent, data)"
        )
    if min(bins_h, bins_w) < 1:
        raise NodeError(f"output_height and output_width must be >= 1, got {bins_h}, {bins_w}")
    scale = float(node.attr("spatial_scale", 1.0))
    _, channels, height, width = x_shape
    r = r_shape[0]
    rois = node.tensor(1)
    if value_dtype(node.input(1)) != dtype:
        rois = trace.apply("cast", rois, dtype=dtype)
    half = coord == "half_pixel"
    ys = _roi_axis(node, rois, r, 1, height, bins_h, ratio, scale, half, dtype)
    xs = _roi_axis(node, rois, r, 0, width, bins_w, ratio, scale, half, dtype)
    which = trace.apply("cast", node.tensor(2), dtype="int64")
    plane = trace.apply("multiply", which, _scalar(node, height * width, "int64"))
    plane = trace.apply("reshape", plane, newshape=[r, 1, 1, 1, 1])
    rows = trace.apply(
        "reshape",
        trace.apply("transpose", node.tensor(0), axes=[0, 2, 3, 1]),
        newshape=[-1, channels],
    )
    w_dim = _scalar(node, width, "int64")
    out = None
    for (yi, yw), (xi, xw) in itertools.product(ys, xs):
        y5 = trace.apply("reshape", yi, newshape=[r, bins_h, ratio, 1, 1])
        x5 = trace.apply("reshape", xi, newshape=[r, 1, 1, bins_w, ratio])
        index = trace.apply("add", plane, trace.apply("multiply", y5, w_dim))
        index = trace.apply("add", index, x5)
        weight = trace.apply(
            "multiply",
            trace.apply("reshape", yw, newshape=[r, bins_h, ratio, 1, 1]),
            trace.apply("reshape", xw, newshape=[r, 1, 1, bins_w, ratio]),
        )
        term = trace.apply(
            "multiply",
            trace.apply("take", rows, index, axis=0),  # (r, bh, g, bw, g, C)
            trace.apply("expand_dims", weight, axis=-1),
        )
        combine = "add" if mode == "avg" else "maximum"
        out = term if out is None else trace.apply(combine, out, term)
    assert out is not None
    if mode == "avg":
        out = trace.apply("sum", out, axis=[2, 4])
        out = trace.apply("divide", out, _const(float(ratio * ratio), dtype))
    else:
        out = trace.apply("max", out, axis=[2, 4])
    return trace.apply("transpose", out, axes=[0, 3, 1, 2])
