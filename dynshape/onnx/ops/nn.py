"""Neural-network ops: matrix products, convolution, pooling, normalisation, softmax, dropout.

Convolution and pooling map onto the catalogue's NCHW ops (``nn.conv2d``,
``nn.conv2d_transpose``, ``nn.max_pool2d``, ``nn.avg_pool2d``, dilations included), whose
``padding`` is ``[top, left, bottom, right]``: ONNX's ``pads`` (``[x1_begin, x2_begin, x1_end,
x2_end]``) in the same order. 1-d ones run as 2-d over a height of 1. What the catalogue ops
lack is composed: ``count_include_pad=1`` pads with zeros first (``nn.pad``), ``ceil_mode=1``
pads the end of each axis by what the last window needs (the pooling ops never count padding
in a max or an average), a ConvTranspose output wider than its full result gets zeros. A
padding that depends on a symbolic dim (``auto_pad=SAME_*`` with a stride over it, a fixed
``output_shape`` of a ConvTranspose) cannot be an attribute: refused. The output dims stay
expressions of the input's (``(H - 1)//2 + 1``, ``2*H + 1``): the catalogue's shape functions
compute them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np
import sympy

import ir
from dynshape.builder import trace

from ..known import Known
from ..registry import Node, NodeError, Unsupported, converter
from .operands import normalize_axis, value_dtype, value_shape
from .unrolled_windows import conv_transpose_nd, max_pool_with_indices


def _const(value: Any, dtype: str) -> Any:
    """A constant tensor of ``dtype`` (a scalar for a number)."""
    return trace.constant(np.asarray(value, dtype=dtype), dtype)


def _reduce_keep(op: str, x: Any, axes: Sequence[int]) -> Any:
    return trace.apply(op, x, axis=list(axes), keepdims=True, exclude=False)


# ---- matrix products --------------------------------------------------------------------------


@converter("MatMul")
def matmul(node: Node) -> Any:
    """numpy's matmul (batched, broadcasting, 1-d operands): ``nn.matmul``."""
    return trace.apply("nn.matmul", node.tensor(0), node.tensor(1))


@converter("Gemm")
def gemm(node: Node) -> Any:
    """``alpha * A' @ B' + beta * C`` (``'`` by ``transA``/``transB``; C broadcasts)."""
    alpha = float(node.attr("alpha", 1.0))
    beta = float(node.attr("beta", 1.0))
    trans_a, trans_b = node.attr("transA", 0), node.attr("transB", 0)
    dtype = value_dtype(node.input(0))
    for i in (0, 1):
        if len(value_shape(node.input(i))) != 2:
            raise NodeError(f"input {i} must be 2-d, got shape {list(value_shape(node.input(i)))}")
    a = node.tensor(0)
    if trans_a:
        a = trace.apply("transpose", a, axes=[1, 0])
    b_known = node.numeric(1)
    if trans_b and not trans_a:
        out = trace.apply("nn.dense", a, node.tensor(1))  # a @ b.T
    else:
        if trans_b:
            b = (
                _const(b_known.T, dtype)
                if b_known is not None
                else trace.apply("transpose", node.tensor(1), axes=[1, 0])
            )
        else:
            b = node.tensor(1)
        out = trace.apply("nn.matmul", a, b)
    if alpha != 1.0:
        out = trace.apply("multiply", out, _const(alpha, dtype))
    if node.input(2) is not None and beta != 0.0:
        c_known = node.numeric(2)
        if c_known is not None:
            c = _const(c_known * beta if beta != 1.0 else c_known, dtype)
        else:
            c = node.tensor(2)
            if beta != 1.0:
                c = trace.apply("multiply", c, _const(beta, dtype))
        out = trace.apply("add", out, c)
    return out


# ---- convolution and pooling ------------------------------------------------------------------


def _ints(node: Node, name: str, default: list[int], n: int) -> list[int]:
    value = node.attr(name)
    out = [int(v) for v in (default if value is None else value)]
    if len(out) != n:
        raise NodeError(f"{name}={out} must have {n} entries (one per spatial axis)")
    return out


def _spatial_pads(
    node: Node,
    sizes: Sequence[ir.Dim],
    kernel: Sequence[ir.Dim],
    strides: Sequence[int],
    dilations: Sequence[int],
) -> tuple[list[int], list[int]]:
    """``(begin, end)`` padding per spatial axis, from ``pads`` or ``auto_pad``."""
    n = len(sizes)
    auto_pad = node.attr("auto_pad", "NOTSET")
    if auto_pad == "NOTSET":
        pads = _ints(node, "pads", [0] * 2 * n, 2 * n)
        if min(pads) < 0:
            raise NodeError(f"pads={pads} has a negative entry")
        return pads[:n], pads[n:]
    if auto_pad == "VALID":
        return [0] * n, [0] * n
    if auto_pad not in ("SAME_UPPER", "SAME_LOWER"):
        raise NodeError(
            f"auto_pad={auto_pad!r} is not one of NOTSET, SAME_UPPER, SAME_LOWER, VALID"
        )
    begin, end = [], []
    for size, k, s, d in zip(sizes, kernel, strides, dilations, strict=True):
        if not isinstance(k, int):
            raise NodeError(f"auto_pad={auto_pad} needs a static kernel size, got {k}")
        extent = d * (k - 1) + 1
        if s == 1:
            total = extent - 1
        elif isinstance(size, int):
            total = max((-(-size // s) - 1) * s + extent - size, 0)
        else:
            raise NodeError(
                f"auto_pad={auto_pad} with stride {s} over the symbolic dim {size}: the padding "
                f"depends on {size} mod {s}, so it cannot be static (fix the dim or use pads)"
            )
        small = total // 2
        begin.append(small if auto_pad == "SAME_UPPER" else total - small)
        end.append(total - begin[-1])
    return begin, end


def _ceil_extra(size: ir.Dim, begin: int, end: int, k: int, s: int, d: int, axis: int) -> int:
    """The padding to add at the end of an axis so that flooring gives ``ceil_mode``'s window
    count, whose last window must start inside the input or its begin padding."""
    extent = d * (k - 1) + 1
    if isinstance(size, int):
        span = size + begin + end - extent
        count = -(-span // s) + 1
        if (count - 1) * s >= size + begin:
            count -= 1
        return max((count - 1) * s + extent - (size + begin + end), 0)
    if end + s - 1 >= extent:
        raise NodeError(
            f"ceil_mode=1 over the symbolic dim {size} (spatial axis {axis}) with stride {s}, "
            f"kernel {k} and end padding {end}: whether the last window starts in the padding "
            f"depends on {size} mod {s}, so the window count is not one expression"
        )
    return s - 1


def _to_2d(x: Any, rank: int, what: str) -> tuple[Any, bool]:
    """An NCHW view of an NCW (1-d) or NCHW input; True when it was 1-d."""
    if rank == 3:
        return trace.apply("expand_dims", x, axis=2), True
    if rank == 4 or (rank == 5 and what == "transposed convolutions"):  # 3-d: unrolled_windows.py
        return x, False
    raise Unsupported(f"only 1-d and 2-d {what} are supported (input rank 3 or 4), got rank {rank}")


def _hw(values: Sequence[Any], one: bool, fill: Any) -> list[Any]:
    return [fill, *values] if one else list(values)


def _window(
    node: Node, what: str
) -> tuple[Sequence[ir.Dim], Any, bool, list[Any], list[int], list[int]]:
    """What Conv and ConvTranspose read alike: the input's shape, the input as 2-d (and
    whether it was 1-d), the kernel's extent (checked against ``kernel_shape``), strides and
    dilations."""
    x_shape = value_shape(node.input(0))
    w_shape = value_shape(node.input(1))
    rank = len(x_shape)
    if len(w_shape) != rank:
        raise NodeError(f"the weight has rank {len(w_shape)} but the input has rank {rank}")
    x, one = _to_2d(node.tensor(0), rank, what)
    n = rank - 2
    kernel = list(w_shape[2:])
    given = node.attr("kernel_shape")
    if given is not None and [int(v) for v in given] != kernel:
        raise NodeError(f"kernel_shape={list(given)} differs from the weight's {kernel}")
    strides = _ints(node, "strides", [1] * n, n)
    dilations = _ints(node, "dilations", [1] * n, n)
    return x_shape, x, one, kernel, strides, dilations


def _weight_and_finish(node: Node, one: bool) -> tuple[Any, Any]:
    """The weight (with a height of 1 for a 1-d convolution) and the function that adds the
    optional bias and drops that height again."""
    w = node.tensor(1)
    if one:
        w = trace.apply("expand_dims", w, axis=2)

    def finish(out: Any) -> Any:
        if node.input(2) is not None:
            out = trace.apply("nn.bias_add", out, node.tensor(2), axis=1)
        if one:
            out = trace.apply("squeeze", out, axis=[2])
        return out

    return w, finish


@converter("Conv")
def conv(node: Node) -> Any:
    """1-d and 2-d convolution: ``nn.conv2d`` (group, dilations, strides, pads, auto_pad),
    3-d: ``nn.conv3d``; plus ``nn.bias_add`` of the optional bias."""
    if len(value_shape(node.input(0))) == 5:
        return _conv3d(node)
    x_shape, x, one, kernel, strides, dilations = _window(node, "convolutions")
    begin, end = _spatial_pads(node, x_shape[2:], kernel, strides, dilations)
    w, finish = _weight_and_finish(node, one)
    out = trace.apply(
        "nn.conv2d",
        x,
        w,
        strides=_hw(strides, one, 1),
        padding=[*_hw(begin, one, 0), *_hw(end, one, 0)],
        dilation=_hw(dilations, one, 1),
        groups=int(node.attr("group", 1)),
    )
    return finish(out)


def _conv3d(node: Node) -> Any:
    """A Conv over NCDHW data: ``nn.conv3d`` (its padding ``[front, top, left, back, bottom,
    right]`` is ONNX's ``pads``)."""
    x_shape, w_shape = value_shape(node.input(0)), value_shape(node.input(1))
    if len(w_shape) != 5:
        raise NodeError(f"the weight has rank {len(w_shape)} but the input has rank 5")
    kernel = list(w_shape[2:])
    given = node.attr("kernel_shape")
    if given is not None and [int(v) for v in given] != kernel:
        raise NodeError(f"kernel_shape={list(given)} differs from the weight's {kernel}")
    strides = _ints(node, "strides", [1] * 3, 3)
    dilations = _ints(node, "dilations", [1] * 3, 3)
    begin, end = _spatial_pads(node, x_shape[2:], kernel, strides, dilations)
    out = trace.apply(
        "nn.conv3d",
        node.tensor(0),
        node.tensor(1),
        strides=strides,
        padding=[*begin, *end],
        dilation=dilations,
        groups=int(node.attr("group", 1)),
    )
    if node.input(2) is not None:
        out = trace.apply("nn.bias_add", out, node.tensor(2), axis=1)
    return out


def _transpose_pads(
    node: Node,
    sizes: Sequence[ir.Dim],
    kernel: Sequence[ir.Dim],
    strides: Sequence[int],
    dilations: Sequence[int],
    output_padding: Sequence[int],
) -> tuple[list[int], list[int]]:
    """ConvTranspose's ``(begin, end)`` crop per spatial axis: ``pads`` as given, or, with
    ``output_shape`` or ``auto_pad=SAME_*`` (whose output is ``size * stride``), ONNX's
    ``total = stride * (size - 1) + output_padding + dilation * (kernel - 1) + 1 - output``
    split with the extra one at the end for SAME_UPPER, at the start otherwise. A negative
    entry asks for zeros past the full result."""
    n = len(sizes)
    auto_pad = node.attr("auto_pad", "NOTSET")
    if auto_pad not in ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"):
        raise NodeError(
            f"auto_pad={auto_pad!r} is not one of NOTSET, SAME_UPPER, SAME_LOWER, VALID"
        )
    given = node.attr("output_shape")
    if given is None and auto_pad == "VALID":
        return [0] * n, [0] * n
    if given is None and auto_pad == "NOTSET":
        pads = _ints(node, "pads", [0] * 2 * n, 2 * n)
        if min(pads) < 0:
            raise NodeError(f"pads={pads} has a negative entry")
        return pads[:n], pads[n:]
    # output_shape holds the spatial dims only (onnxruntime refuses N and C in it too)
    targets = (
        _ints(node, "output_shape", [], n)
        if given is not None
        else [size * s for size, s in zip(sizes, strides, strict=True)]
    )
    begin, end = [], []
    for size, k, s, d, extra, target in zip(
        sizes, kernel, strides, dilations, output_padding, targets, strict=True
    ):
        if not isinstance(k, int):
            raise NodeError(f"output_shape or auto_pad={auto_pad} needs a static kernel, got {k}")
        total = sympy.sympify(s * (size - 1) + extra + d * (k - 1) + 1 - target)
        if not total.is_Integer:
            # SAME's total never depends on the size; a fixed output_shape does
            raise Unsupported(
                f"output_shape={targets} over the symbolic dim {size}: the padding {total} "
                f"depends on {size}, so it cannot be static (fix the dim or use pads)"
            )
        half = int(total) // 2
        begin.append(half if auto_pad == "SAME_UPPER" else int(total) - half)
        end.append(int(total) - begin[-1])
    return begin, end


@converter("ConvTranspose")
def conv_transpose(node: Node) -> Any:
    """1-d and 2-d transposed convolution: ``nn.conv2d_transpose`` (group, dilations, strides,
    pads, output_padding, output_shape, auto_pad), plus ``nn.bias_add`` of the optional bias;
    3-d as a matmul and Col2Im's scatter (``unrolled_windows.conv_transpose_nd``).

    A negative crop that ``output_shape`` or SAME asks for (an output wider than the full
    result) is zeros: at the end it is more output_padding, at the start an ``nn.pad``."""
    x_shape, x, one, kernel, strides, dilations = _window(node, "transposed convolutions")
    n = len(x_shape) - 2
    output_padding = _ints(node, "output_padding", [0] * n, n)
    if min(strides + dilations) < 1:
        raise NodeError(f"strides={strides} and dilations={dilations} must be >= 1")
    for extra, s, d in zip(output_padding, strides, dilations, strict=True):
        # onnxruntime's (and PyTorch's) rule: more would be rows no input pixel can reach
        if not 0 <= extra < max(s, d):
            raise NodeError(
                f"output_padding={output_padding} must be >= 0 and less than max(stride, "
                f"dilation) on each axis (strides={strides}, dilations={dilations})"
            )
    group = int(node.attr("group", 1))
    if group < 1:
        raise NodeError(f"group={group} must be >= 1")
    begin, end = _transpose_pads(node, x_shape[2:], kernel, strides, dilations, output_padding)
    if len(x_shape) == 5:
        return conv_transpose_nd(node, kernel, strides, dilations, begin, end, output_padding)
    w, finish = _weight_and_finish(node, one)
    out = trace.apply(
        "nn.conv2d_transpose",
        x,
        w,
        strides=_hw(strides, one, 1),
        padding=[*_hw([max(b, 0) for b in begin], one, 0), *_hw([max(e, 0) for e in end], one, 0)],
        output_padding=_hw(
            [p + max(-e, 0) for p, e in zip(output_padding, end, strict=True)], one, 0
        ),
        dilation=_hw(dilations, one, 1),
        groups=group,
    )
    if min(begin) < 0:
        lead = [[max(-b, 0), 0] for b in begin]
        pad_width = [[0, 0], [0, 0], *([[0, 0]] if one else []), *lead]
        out = trace.apply("nn.pad", out, pad_width=pad_width, pad_value=0.0)
    return finish(out)


def pool_nd(
    x: Any,
    op: str,
    kernel: Sequence[int],
    strides: Sequence[int],
    begin: Sequence[int],
    end: Sequence[int],
    dilations: Sequence[int],
) -> Any:
    """A 1-d, 2-d or 3-d ``op`` (``nn.max_pool2d``/``nn.avg_pool2d``) over ``x`` (NC + spatial).

    A 3-d pool is two 2-d ones: over (H, W) with the channels and depth as one axis, then over
    depth with (H, W) as one axis. Both pools are separable: a window is a box, its maximum the
    maximum of per-axis maximums, and the count of an average that leaves padding out is the
    product of the per-axis counts (the window box meets the input box in a box)."""
    rank = len(kernel) + 2
    if rank == 5:
        n_, c, d, h, w = value_shape(x)
        flat = trace.apply("reshape", x, newshape=[n_, c * d, h, w])
        hw = pool_nd(flat, op, kernel[1:], strides[1:], begin[1:], end[1:], dilations[1:])
        ho, wo = value_shape(hw)[2:]
        cols = trace.apply("reshape", hw, newshape=[n_, c, d, ho * wo])
        out = pool_nd(
            cols,
            op,
            [kernel[0], 1],
            [strides[0], 1],
            [begin[0], 0],
            [end[0], 0],
            [dilations[0], 1],
        )
        return trace.apply("reshape", out, newshape=[n_, c, value_shape(out)[2], ho, wo])
    one = rank == 3
    if one:
        x = trace.apply("expand_dims", x, axis=2)
    out = trace.apply(
        op,
        x,
        pool_size=_hw(kernel, one, 1),
        strides=_hw(strides, one, 1),
        padding=[*_hw(begin, one, 0), *_hw(end, one, 0)],
        dilation=_hw(dilations, one, 1),
    )
    return trace.apply("squeeze", out, axis=[2]) if one else out


def pool_window(node: Node) -> tuple[list[int], list[int], list[int]]:
    """A pool's ``kernel_shape``, ``strides`` and ``dilations`` (1-d to 3-d), checked."""
    rank = len(value_shape(node.input(0)))
    n = rank - 2
    if rank not in (3, 4, 5):
        raise Unsupported(
            f"only 1-d, 2-d and 3-d pools are supported (input rank 3 to 5), got rank {rank}"
        )
    if node.attr("kernel_shape") is None:
        raise NodeError("kernel_shape is required")
    kernel = _ints(node, "kernel_shape", [], n)
    strides = _ints(node, "strides", [1] * n, n)
    dilations = _ints(node, "dilations", [1] * n, n)
    if min(kernel + strides + dilations) < 1:
        raise NodeError(
            f"kernel_shape={kernel}, strides={strides} and dilations={dilations} must be >= 1"
        )
    return kernel, strides, dilations


def pool_pads(
    node: Node, kernel: list[int], strides: list[int], dilations: list[int]
) -> tuple[list[int], list[int]]:
    """A pool's ``(begin, end)`` padding per spatial axis, ``end`` with what ``ceil_mode``
    adds (the last partial window's rows)."""
    sizes = value_shape(node.input(0))[2:]
    begin, end = _spatial_pads(node, sizes, kernel, strides, dilations)
    if node.attr("ceil_mode", 0):
        end = [
            e + _ceil_extra(size, b, e, k, s, d, i)
            for i, (size, b, e, k, s, d) in enumerate(
                zip(sizes, begin, end, kernel, strides, dilations, strict=True)
            )
        ]
    return begin, end


def _pool(node: Node, op: str) -> Any:
    x_shape = value_shape(node.input(0))
    kernel, strides, dilations = pool_window(node)
    x = node.tensor(0)
    begin, end = pool_pads(node, kernel, strides, dilations)
    if op == "nn.max_pool2d" and node.wants(1):  # the Indices output too
        order = int(node.attr("storage_order", 0))
        return max_pool_with_indices(x, kernel, strides, begin, end, dilations, order)
    if op == "nn.avg_pool2d" and node.attr("count_include_pad", 0) and any(begin + end):
        # The catalogue's average leaves padding out of the count: pad with zeros first (the
        # real pads only; what ceil_mode adds past them is left out, as ONNX does).
        real_end = _spatial_pads(node, x_shape[2:], kernel, strides, dilations)[1]
        x = trace.apply(
            "nn.pad",
            x,
            pad_width=[[0, 0], [0, 0], *map(list, zip(begin, real_end, strict=True))],
            pad_value=0.0,
        )
        end = [e - r for e, r in zip(end, real_end, strict=True)]
        begin = [0] * len(kernel)
    return pool_nd(x, op, kernel, strides, begin, end, dilations)


@converter("MaxPool")
def max_pool(node: Node) -> Any:
    """``nn.max_pool2d`` (kernel_shape, strides, pads, auto_pad, ceil_mode, dilations); with
    the Indices output, strided slices compared in turn
    (``unrolled_windows.max_pool_with_indices``)."""
    dtype = value_dtype(node.input(0))
    if dtype in ("int8", "uint8", "int16"):  # exact in float32: pool there, cast back
        cast = trace.apply("cast", node.tensor(0), dtype="float32")
        narrowed = dataclasses.replace(node, inputs=[cast, *node.inputs[1:]])
        out = _pool(narrowed, "nn.max_pool2d")
        if isinstance(out, tuple):  # with Indices
            return [trace.apply("cast", out[0], dtype=dtype), out[1]]
        return trace.apply("cast", out, dtype=dtype)
    out = _pool(node, "nn.max_pool2d")
    return list(out) if isinstance(out, tuple) else out


@converter("AveragePool")
def average_pool(node: Node) -> Any:
    """``nn.avg_pool2d`` (kernel_shape, strides, pads, auto_pad, ceil_mode, count_include_pad,
    dilations)."""
    return _pool(node, "nn.avg_pool2d")


def _global(node: Node, op: str, reduce: str) -> Any:
    rank = len(value_shape(node.input(0)))
    if rank < 3:
        raise NodeError(f"the input must have rank >= 3 (N, C, spatial...), got rank {rank}")
    if rank == 4:
        return trace.apply(op, node.tensor(0))
    return _reduce_keep(reduce, node.tensor(0), range(2, rank))


@converter("GlobalAveragePool")
def global_average_pool(node: Node) -> Any:
    return _global(node, "nn.global_avg_pool2d", "mean")


@converter("GlobalMaxPool")
def global_max_pool(node: Node) -> Any:
    return _global(node, "nn.global_max_pool2d", "max")


# ---- normalisation ----------------------------------------------------------------------------


def _per_channel(rank: int) -> list[int]:
    """The newshape laying a (C,) tensor along axis 1 of a rank-``rank`` tensor."""
    return [-1, *([1] * (rank - 2))]


@converter("BatchNormalization")
def batch_normalization(node: Node) -> Any:
    """Inference: ``(x - mean) * scale / sqrt(var + eps) + bias`` per channel (axis 1); folded
    to ``x * a + b`` when the parameters are known."""
    if node.attr("training_mode", 0):
        raise Unsupported("training_mode=1 is not supported (only inference)")
    if node.num_outputs > 1:
        raise Unsupported("the running mean/var outputs are training outputs: not supported")
    eps = float(node.attr("epsilon", 1e-5))
    x_shape = value_shape(node.input(0))
    rank = len(x_shape)
    if rank < 2:
        raise NodeError(f"the input must have rank >= 2 (N, C, ...), got rank {rank}")
    dtype = value_dtype(node.input(0))
    newshape = _per_channel(rank)
    params = [node.numeric(i) for i in (1, 2, 3, 4)]
    if all(p is not None for p in params):
        scale, bias, mean, var = (np.asarray(p, np.float64) for p in params)
        a = scale / np.sqrt(var + eps)
        b = bias - mean * a
        a_c = _const(a.reshape(newshape), dtype)
        b_c = _const(b.reshape(newshape), dtype)
        return trace.apply("add", trace.apply("multiply", node.tensor(0), a_c), b_c)
    scale, bias, mean, var = (
        trace.apply("reshape", node.tensor(i), newshape=newshape) for i in (1, 2, 3, 4)
    )
    inv = trace.apply("rsqrt", trace.apply("add", var, _const(eps, value_dtype(node.input(4)))))
    out = trace.apply("subtract", node.tensor(0), mean)
    out = trace.apply("multiply", out, trace.apply("multiply", scale, inv))
    return trace.apply("add", out, bias)


def _normalize(x: Any, axes: list[int], eps: float, dtype: str) -> tuple[Any, Any, Any]:
    """``((x - mean) * invstd, mean, invstd)`` over ``axes`` (kept as 1-dims)."""
    mean = _reduce_keep("mean", x, axes)
    centred = trace.apply("subtract", x, mean)
    var = _reduce_keep("mean", trace.apply("multiply", centred, centred), axes)
    inv = trace.apply("rsqrt", trace.apply("add", var, _const(eps, dtype)))
    return trace.apply("multiply", centred, inv), mean, inv


@converter("LayerNormalization")
def layer_normalization(node: Node) -> Any:
    """Normalise over axes ``[axis, rank)``, scale and shift (bias optional): ``nn.layer_norm``
    for the last axis alone, else composed; the Mean and InvStdDev outputs are composed."""
    x_shape = value_shape(node.input(0))
    rank = len(x_shape)
    axis = normalize_axis(int(node.attr("axis", -1)), rank)
    eps = float(node.attr("epsilon", 1e-5))
    dtype = value_dtype(node.input(0))
    if node.attr("stash_type", 1) != 1:
        raise Unsupported(f"stash_type={node.attr('stash_type')} is not supported (only 1)")
    scale_shape = value_shape(node.input(1))
    has_bias = node.input(2) is not None
    if axis == rank - 1 and len(scale_shape) == 1 and node.num_outputs == 1:
        scale = node.tensor(1)
        bias = node.tensor(2) if has_bias else trace.apply("zeros_like", scale)
        return trace.apply("nn.layer_norm", node.tensor(0), scale, bias, axis=-1, epsilon=eps)
    axes = list(range(axis, rank))
    out, mean, inv = _normalize(node.tensor(0), axes, eps, dtype)
    out = trace.apply("multiply", out, node.tensor(1))
    if has_bias:
        out = trace.apply("add", out, node.tensor(2))
    return [out, mean, inv][: max(node.num_outputs, 1)]


@converter("InstanceNormalization")
def instance_normalization(node: Node) -> Any:
    """Normalise each (n, c) over the spatial axes, then ``scale`` and ``B`` per channel."""
    rank = len(value_shape(node.input(0)))
    if rank < 3:
        raise NodeError(f"the input must have rank >= 3 (N, C, spatial...), got rank {rank}")
    eps = float(node.attr("epsilon", 1e-5))
    dtype = value_dtype(node.input(0))
    out, _, _ = _normalize(node.tensor(0), list(range(2, rank)), eps, dtype)
    newshape = _per_channel(rank)
    scale = trace.apply("reshape", node.tensor(1), newshape=newshape)
    bias = trace.apply("reshape", node.tensor(2), newshape=newshape)
    return trace.apply("add", trace.apply("multiply", out, scale), bias)


# ---- softmax and dropout ----------------------------------------------------------------------


def _softmax(node: Node, op: str) -> Any:
    """Opset 13 on: along ``axis`` (default -1), any axis. (Opsets before 13, which took the
    input as 2-d, are not imported at all.)"""
    axis = normalize_axis(int(node.attr("axis", -1)), len(value_shape(node.input(0))))
    return trace.apply(op, node.tensor(0), axis=axis)


@converter("Softmax")
def softmax(node: Node) -> Any:
    return _softmax(node, "nn.softmax")


@converter("LogSoftmax")
def log_softmax(node: Node) -> Any:
    return _softmax(node, "nn.log_softmax")


@converter("Dropout")
def dropout(node: Node) -> Any:
    """Inference, or a ratio known to be 0: the identity (its mask is all true). Training
    with another ratio draws random numbers: unsupported."""
    training = node.input(2)
    ratio = node.numeric(1) if node.input(1) is not None else None
    drops = ratio is None or bool(np.any(np.asarray(ratio) != 0))
    if training is not None and drops:
        flag = node.numeric(2)
        if flag is None:
            raise Unsupported("training_mode (input 2) must be known at import")
        if bool(np.asarray(flag).reshape(-1)[0]):
            raise Unsupported("training_mode=true is not supported (only inference or ratio 0)")
    x = node.input(0)
    if node.num_outputs < 2:
        return x
    if isinstance(x, Known):
        return [x, Known(np.ones(x.shape, dtype=bool), "bool")]
    ones = trace.apply("ones_like", x)
    return [x, trace.apply("cast", ones, dtype="bool")]
