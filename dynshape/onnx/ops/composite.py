"""ONNX activations and normalisations that are compositions of catalogue ops.

``Softsign``, ``Celu``, ``ThresholdedRelu``, ``Shrink``, ``Mish``, ``PRelu``, ``Swish``,
``SwiGLU``, ``Hardmax`` (an ``argmax`` compared with an index grid), ``LpNormalization``,
``MeanVarianceNormalization``, ``GroupNormalization`` (the input viewed as ``(N, groups, -1)``),
``LRN`` (an average pool over the channels of an ``(N, 1, C, -1)`` view) and ``EyeLike`` (index
grids compared, or a constant when the shape is static). Each follows its ONNX definition; where
a formula could overflow in the branch not taken (``exp`` of a large ``x``), the argument is
clamped first. The input's shape stays symbolic throughout.
"""

from __future__ import annotations

from typing import Any

import numpy as np

import ir
from dynshape.builder import trace

from ..known import Known
from ..model import DTYPES
from ..registry import Node, NodeError, Unsupported, converter
from .operands import normalize_axis, value_dtype, value_shape

_FLOATS = ("float16", "float32", "float64")


def _const(value: Any, dtype: str) -> Any:
    """A 0-d constant of ``dtype``."""
    return trace.constant(np.asarray(value, dtype=dtype), dtype)


def _iota(node: Node, n: Any, rank: int, axis: int) -> Any:
    """``0, 1, ..., n-1`` (int64) along ``axis`` of a tensor of ``rank``, 1s elsewhere; ``n``
    an int or a dim (then computed from the input shapes)."""
    shape = [n if a == axis else 1 for a in range(rank)]
    if isinstance(n, int):
        return trace.constant(np.arange(n, dtype=np.int64).reshape(shape), "int64")
    stop = node.materialize(Known.of(n, "int64"))
    out = trace.apply("arange", _const(0, "int64"), stop, _const(1, "int64"), dtype="int64")
    return trace.apply("reshape", out, newshape=shape)


def _float_input(node: Node, i: int = 0) -> tuple[Any, str]:
    """Input ``i`` as a tensor and its dtype, which must be a float."""
    dtype = value_dtype(node.input(i))
    if dtype not in _FLOATS:
        raise NodeError(f"input {i} must be float16, float32 or float64, got {dtype}")
    return node.tensor(i), dtype


def _widened(node: Node, i: int = 0) -> tuple[Any, str, str]:
    """Input ``i`` (a float) for an activation: float16 is computed in float32 and rounded
    once at the end (``_narrowed``), as onnxruntime and the ONNX test cases do. Returns the
    tensor, the dtype to compute in and the input's dtype."""
    x, dtype = _float_input(node, i)
    if dtype != "float16":
        return x, dtype, dtype
    return trace.apply("cast", x, dtype="float32"), "float32", dtype


def _narrowed(out: Any, work: str, dtype: str) -> Any:
    return out if work == dtype else trace.apply("cast", out, dtype=dtype)


def _softplus(x: Any, dtype: str) -> Any:
    """``log(1 + exp(x))`` as ``max(x, 0) + log(1 + exp(-|x|))``: no overflow."""
    tail = trace.apply("exp", trace.apply("negative", trace.apply("abs", x)))
    tail = trace.apply("log", trace.apply("add", _const(1, dtype), tail))
    return trace.apply("add", trace.apply("maximum", x, _const(0, dtype)), tail)


def _swish(x: Any, alpha: float, dtype: str) -> Any:
    """``x * sigmoid(alpha * x)``."""
    scaled = x if alpha == 1.0 else trace.apply("multiply", x, _const(alpha, dtype))
    return trace.apply("multiply", x, trace.apply("sigmoid", scaled))


# ---- activations ------------------------------------------------------------------------------


@converter("Softsign")
def softsign(node: Node) -> Any:
    """``x / (1 + |x|)``."""
    x, work, dtype = _widened(node)
    out = trace.apply("divide", x, trace.apply("add", _const(1, work), trace.apply("abs", x)))
    return _narrowed(out, work, dtype)


@converter("Celu")
def celu(node: Node) -> Any:
    """``max(0, x) + alpha * (exp(min(0, x) / alpha) - 1)``: ONNX's ``max(0, x) + min(0, alpha *
    (exp(x / alpha) - 1))`` with the exponent clamped (its term is 0 for ``x >= 0`` anyway)."""
    x, work, dtype = _widened(node)
    alpha = float(node.attr("alpha", 1.0))
    if alpha == 0.0:
        raise NodeError("alpha=0 divides by zero")
    zero = _const(0, work)
    scaled = trace.apply("divide", trace.apply("minimum", x, zero), _const(alpha, work))
    em1 = trace.apply("subtract", trace.apply("exp", scaled), _const(1, work))
    neg = trace.apply("multiply", em1, _const(alpha, work))
    return _narrowed(trace.apply("add", trace.apply("maximum", x, zero), neg), work, dtype)


@converter("ThresholdedRelu")
def thresholded_relu(node: Node) -> Any:
    """``x`` where ``x > alpha``, else 0."""
    x, dtype = _float_input(node)
    alpha = float(node.attr("alpha", 1.0))
    above = trace.apply("greater", x, _const(alpha, dtype))
    return trace.apply("where", above, x, _const(0, dtype))


@converter("Shrink")
def shrink(node: Node) -> Any:
    """``x + bias`` where ``x < -lambd``, ``x - bias`` where ``x > lambd``, else 0. Integer
    inputs are computed in float64 and cast back (truncating), as the ONNX reference does."""
    dtype = value_dtype(node.input(0))
    if dtype == "bool":
        raise NodeError("Shrink of a bool tensor")
    lambd = float(node.attr("lambd", 0.5))
    bias = float(node.attr("bias", 0.0))
    x = node.tensor(0)
    work = dtype if dtype in _FLOATS else "float64"
    if work != dtype:
        x = trace.apply("cast", x, dtype=work)
    low = trace.apply("add", x, _const(bias, work))
    high = trace.apply("subtract", x, _const(bias, work))
    out = trace.apply(
        "where", trace.apply("greater", x, _const(lambd, work)), high, _const(0, work)
    )
    out = trace.apply("where", trace.apply("less", x, _const(-lambd, work)), low, out)
    return out if work == dtype else trace.apply("cast", out, dtype=dtype)


@converter("Mish")
def mish(node: Node) -> Any:
    """``x * tanh(softplus(x))``."""
    x, work, dtype = _widened(node)
    out = trace.apply("multiply", x, trace.apply("tanh", _softplus(x, work)))
    return _narrowed(out, work, dtype)


@converter("PRelu")
def prelu(node: Node) -> Any:
    """``slope * x`` where ``x < 0``, else ``x``; the slope broadcasts to ``x`` (one way)."""
    dtype = value_dtype(node.input(0))
    if dtype not in (*_FLOATS, "int32", "int64", "uint32", "uint64"):
        raise NodeError(f"PRelu of {dtype}")
    if value_dtype(node.input(1)) != dtype:
        raise NodeError(f"the slope is {value_dtype(node.input(1))}, the input {dtype}")
    x_shape, s_shape = value_shape(node.input(0)), value_shape(node.input(1))
    if len(s_shape) > len(x_shape):
        raise NodeError(f"the slope {list(s_shape)} has a higher rank than the input's")
    for a, b in zip(reversed(x_shape), reversed(s_shape), strict=False):
        if b != 1 and ir.compare(a, "==", b) is False:
            raise NodeError(
                f"the slope {list(s_shape)} does not broadcast to the input {list(x_shape)}"
            )
    x = node.tensor(0)
    negative = trace.apply("less", x, _const(0, dtype))
    return trace.apply("where", negative, trace.apply("multiply", x, node.tensor(1)), x)


@converter("Swish")
def swish(node: Node) -> Any:
    """``x * sigmoid(alpha * x)``."""
    x, work, dtype = _widened(node)
    return _narrowed(_swish(x, float(node.attr("alpha", 1.0)), work), work, dtype)


@converter("SwiGLU")
def swiglu(node: Node) -> Any:
    """``Swish_alpha(A) * B``; A and B have the same shape (no broadcasting)."""
    a, work, dtype = _widened(node, 0)
    if value_dtype(node.input(1)) != dtype:
        raise NodeError(f"B is {value_dtype(node.input(1))}, A {dtype}")
    a_shape, b_shape = value_shape(node.input(0)), value_shape(node.input(1))
    if len(a_shape) != len(b_shape) or any(
        ir.compare(p, "==", q) is False for p, q in zip(a_shape, b_shape, strict=True)
    ):
        raise NodeError(f"A {list(a_shape)} and B {list(b_shape)} must have the same shape")
    b = node.tensor(1) if work == dtype else trace.apply("cast", node.tensor(1), dtype=work)
    out = trace.apply("multiply", _swish(a, float(node.attr("alpha", 1.0)), work), b)
    return _narrowed(out, work, dtype)


@converter("Hardmax")
def hardmax(node: Node) -> Any:
    """1 at the first maximum along ``axis``, 0 elsewhere: ``argmax`` against an index grid."""
    x, dtype = _float_input(node)
    shape = value_shape(node.input(0))
    axis = normalize_axis(int(node.attr("axis", -1)), len(shape))
    if not shape:
        raise NodeError("Hardmax of a scalar")
    first = trace.apply("argmax", x, axis=axis, keepdims=True)
    hit = trace.apply("equal", first, _iota(node, shape[axis], len(shape), axis))
    out = trace.apply("cast", hit, dtype=dtype)
    if value_shape(out) != shape:  # a static axis of 1 against a symbolic one: broadcast
        out = trace.apply("broadcast_to", out, shape=list(shape))
    return out


# ---- normalisations ---------------------------------------------------------------------------


@converter("LpNormalization")
def lp_normalization(node: Node) -> Any:
    """``x / norm`` along ``axis`` (``p`` 1 or 2); 0 where the norm is 0 (all zeros)."""
    x, dtype = _float_input(node)
    axis = normalize_axis(int(node.attr("axis", -1)), len(value_shape(node.input(0))))
    p = int(node.attr("p", 2))
    if p == 1:
        norm = trace.apply("sum", trace.apply("abs", x), axis=[axis], keepdims=True)
    elif p == 2:
        norm = trace.apply("sum", trace.apply("multiply", x, x), axis=[axis], keepdims=True)
        norm = trace.apply("sqrt", norm)
    else:
        raise NodeError(f"p={p}: only 1 and 2 are defined")
    # a zero norm means x is all zeros there: dividing by 1 gives the 0 ONNX defines
    zero = trace.apply("equal", norm, _const(0, dtype))
    norm = trace.apply("where", zero, _const(1, dtype), norm)
    return trace.apply("divide", x, norm)


@converter("MeanVarianceNormalization")
def mean_variance_normalization(node: Node) -> Any:
    """``(x - E[x]) / (sqrt(E[x^2] - E[x]^2) + 1e-9)`` over ``axes`` (default 0, 2, 3), as the
    ONNX function body computes it."""
    x, dtype = _float_input(node)
    rank = len(value_shape(node.input(0)))
    axes = sorted({normalize_axis(int(a), rank, "axes") for a in node.attr("axes", [0, 2, 3])})
    mean = trace.apply("mean", x, axis=axes, keepdims=True)
    mean_sq = trace.apply("mean", trace.apply("multiply", x, x), axis=axes, keepdims=True)
    var = trace.apply("subtract", mean_sq, trace.apply("multiply", mean, mean))
    std = trace.apply("add", trace.apply("sqrt", var), _const(1e-9, dtype))
    return trace.apply("divide", trace.apply("subtract", x, mean), std)


def _per_channel(rank: int) -> list[int]:
    return [-1, *([1] * (rank - 2))]


@converter("GroupNormalization")
def group_normalization(node: Node) -> Any:
    """Each (n, group) normalised over its channels and spatial dims (the input viewed as ``(N,
    groups, -1)``), then ``scale * y + bias`` per channel (opset 21; per group before 21).
    ``stash_type=1`` computes the first stage of a float16 input in float32."""
    x, dtype = _float_input(node)
    shape = value_shape(node.input(0))
    rank = len(shape)
    if rank < 3:
        raise NodeError(f"the input must have rank >= 3 (N, C, spatial...), got rank {rank}")
    groups = node.attr("num_groups")
    if groups is None:
        raise NodeError("num_groups is required")
    groups = int(groups)
    channels = shape[1]
    if groups < 1 or (isinstance(channels, int) and channels % groups):
        raise NodeError(f"num_groups={groups} does not divide the {channels} channels")
    eps = float(node.attr("epsilon", 1e-5))
    stash = int(node.attr("stash_type", 1))
    if stash not in (0, 1):
        raise Unsupported(f"stash_type={stash} is not supported (0 or 1)")
    work = "float32" if stash == 1 and dtype == "float16" else dtype
    if work != dtype:
        x = trace.apply("cast", x, dtype=work)
    grouped = trace.apply("reshape", x, newshape=[shape[0], groups, -1])
    mean = trace.apply("mean", grouped, axis=[2], keepdims=True)
    centred = trace.apply("subtract", grouped, mean)
    var = trace.apply("mean", trace.apply("multiply", centred, centred), axis=[2], keepdims=True)
    inv = trace.apply("rsqrt", trace.apply("add", var, _const(eps, work)))
    normed = trace.apply("multiply", centred, inv)
    if work != dtype:
        normed = trace.apply("cast", normed, dtype=dtype)
    per_group = node.opset < 21
    expected = groups if per_group else channels
    for i, what in ((1, "scale"), (2, "bias")):
        p_shape = value_shape(node.input(i))
        if len(p_shape) != 1 or ir.compare(p_shape[0], "==", expected) is False:
            raise NodeError(
                f"{what} must have shape [{expected}] ({'groups' if per_group else 'C'} at "
                f"opset {node.opset}), got {list(p_shape)}"
            )
    if per_group:
        scale = trace.apply("reshape", node.tensor(1), newshape=[-1, 1])
        bias = trace.apply("reshape", node.tensor(2), newshape=[-1, 1])
        out = trace.apply("add", trace.apply("multiply", normed, scale), bias)
        return trace.apply("reshape", out, newshape=list(shape))
    normed = trace.apply("reshape", normed, newshape=list(shape))
    scale = trace.apply("reshape", node.tensor(1), newshape=_per_channel(rank))
    bias = trace.apply("reshape", node.tensor(2), newshape=_per_channel(rank))
    return trace.apply("add", trace.apply("multiply", normed, scale), bias)


@converter("LRN")
def lrn(node: Node) -> Any:
    """``x / (bias + alpha / size * square_sum) ** beta``, the square sum over the channels
    ``c - (size - 1) // 2 .. c + ceil((size - 1) / 2)``: an average pool of ``x*x`` viewed as
    ``(N, 1, C, -1)``, zero-padded (the pool leaves padding out of its count)."""
    x, dtype = _float_input(node)
    shape = value_shape(node.input(0))
    if len(shape) < 2:
        raise NodeError(f"the input must have rank >= 2 (N, C, ...), got rank {len(shape)}")
    size = node.attr("size")
    if size is None or int(size) < 1:
        raise NodeError(f"size={size} must be given and >= 1")
    size = int(size)
    alpha = float(node.attr("alpha", 1e-4))
    beta = float(node.attr("beta", 0.75))
    bias = float(node.attr("bias", 1.0))
    rest: Any = 1
    for d in shape[2:]:
        rest = rest * d
    rest = ir.simplify(rest) if not isinstance(rest, int) else rest
    square = trace.apply("multiply", x, x)
    view = trace.apply("reshape", square, newshape=[shape[0], 1, shape[1], rest])
    before, after = (size - 1) // 2, size // 2
    view = trace.apply(
        "nn.pad", view, pad_width=[[0, 0], [0, 0], [before, after], [0, 0]], pad_value=0.0
    )
    mean = trace.apply("nn.avg_pool2d", view, pool_size=[size, 1])
    mean = trace.apply("reshape", mean, newshape=list(shape))
    base = trace.apply(
        "add", trace.apply("multiply", mean, _const(alpha, dtype)), _const(bias, dtype)
    )
    return trace.apply("divide", x, trace.apply("power", base, _const(beta, dtype)))


# ---- EyeLike ----------------------------------------------------------------------------------


@converter("EyeLike")
def eye_like(node: Node) -> Any:
    """Ones on diagonal ``k`` of a 2-d tensor of the input's shape, of ``dtype`` (default the
    input's): a constant for a static shape, else row and column grids compared."""
    shape = value_shape(node.input(0))
    if len(shape) != 2:
        raise NodeError(f"the input must be 2-d, got shape {list(shape)}")
    to = node.attr("dtype")
    if to is None:
        dtype = value_dtype(node.input(0))
    elif int(to) in DTYPES:
        dtype = DTYPES[int(to)]
    else:
        raise Unsupported(f"dtype={to} is not supported")
    k = int(node.attr("k", 0))
    rows, cols = shape
    if isinstance(rows, int) and isinstance(cols, int):
        return Known(np.eye(rows, cols, k, dtype=dtype), dtype)
    diff = trace.apply("subtract", _iota(node, cols, 2, 1), _iota(node, rows, 2, 0))
    hit = trace.apply("equal", diff, _const(k, "int64"))
    return trace.apply("cast", hit, dtype=dtype)


# ---- Det --------------------------------------------------------------------------------------


@converter("Det")
def det(node: Node) -> Any:
    """The determinant of each trailing ``n x n`` matrix, for a static ``n`` up to 3: the
    cofactor formula on the elements (``take`` from the matrices flattened). Larger matrices
    need an LU decomposition, which no catalogue op does: unsupported."""
    x, work, dtype = _widened(node)
    shape = value_shape(node.input(0))
    if len(shape) < 2:
        raise NodeError(f"the input must have rank >= 2, got shape {list(shape)}")
    n, m = shape[-2:]
    if not isinstance(n, int) or not isinstance(m, int):
        raise Unsupported(f"Det of {n} x {m} matrices: the size must be static")
    if n != m:
        raise NodeError(f"Det of {n} x {m} matrices: they must be square")
    if n > 3:
        raise Unsupported(f"Det of {n} x {n} matrices (up to 3 x 3: no LU decomposition op)")
    flat = trace.apply("reshape", x, newshape=[*shape[:-2], n * n])

    def e(i: int, j: int) -> Any:
        return trace.apply("take", flat, _const(i * n + j, "int64"), axis=len(shape) - 2)

    def mul(a: Any, b: Any) -> Any:
        return trace.apply("multiply", a, b)

    def minor(r0: int, r1: int, c0: int, c1: int) -> Any:
        return trace.apply("subtract", mul(e(r0, c0), e(r1, c1)), mul(e(r0, c1), e(r1, c0)))

    if n == 0:
        out = trace.apply("ones_like", trace.apply("sum", flat, axis=[-1]))
    elif n == 1:
        out = e(0, 0)
    elif n == 2:
        out = minor(0, 1, 0, 1)
    else:
        out = mul(e(0, 0), minor(1, 2, 1, 2))
        out = trace.apply("subtract", out, mul(e(0, 1), minor(1, 2, 0, 2)))
        out = trace.apply("add", out, mul(e(0, 2), minor(1, 2, 0, 1)))
    return _narrowed(out, work, dtype)
