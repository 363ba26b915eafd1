"""Shape functions of the neural-network ops: products, normalisation, convolution, pooling.

Images are NCHW and kernels OIHW. A ``padding`` list is ``[top, left, bottom, right]``, or
``[h, w]`` for the same padding on both sides.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..context import Dim, ShapeContext
from ..declarations.dtypes import ITEMSIZE
from ..registry import register_shape_func
from ..workspace import PIECE_SLACK, register_workspace
from ._common import Shape, broadcast_pair, fail, normalize_axis, require_min_rank, require_rank


@register_shape_func("nn.dense")
def dense(ctx: ShapeContext, data: Shape, weight: Shape) -> Shape:
    """``(..., k) x (units, k) -> (..., units)``."""
    require_min_rank(data, 1, "data")
    require_rank(weight, 2, "weight")
    last = len(data) - 1
    ctx.check_equal(data[last], weight[1], "data.shape[{}] == weight.shape[1]", last)
    return (*data[:last], weight[0])


@register_shape_func("nn.matmul")
def matmul(ctx: ShapeContext, a: Shape, b: Shape) -> Shape:
    """numpy's matmul: 1-d operands get a 1 prepended (a) or appended (b) and then removed;
    the batch dims (all but the last two) broadcast."""
    require_min_rank(a, 1, "a")
    require_min_rank(b, 1, "b")
    ra, rb = len(a), len(b)
    kb = rb - 2 if rb >= 2 else 0  # the axis of b that meets a's last one
    ctx.check_equal(a[ra - 1], b[kb], "a.shape[{}] == b.shape[{}]", ra - 1, kb)
    batch = broadcast_pair(ctx, a[: max(ra - 2, 0)], b[: max(rb - 2, 0)], "a", "b")
    rows = (a[ra - 2],) if ra >= 2 else ()
    cols = (b[rb - 1],) if rb >= 2 else ()
    return (*batch, *rows, *cols)


@register_shape_func("nn.batch_matmul")
def batch_matmul(
    ctx: ShapeContext, x: Shape, y: Shape, *, transpose_a: bool = False, transpose_b: bool = True
) -> Shape:
    """``(b, m, k) x (b, k, n) -> (b, m, n)``, each operand optionally transposed in its last
    two axes; a batch of 1 broadcasts."""
    require_rank(x, 3, "x")
    require_rank(y, 3, "y")
    m, kx = (2, 1) if transpose_a else (1, 2)
    ky, n = (2, 1) if transpose_b else (1, 2)
    ctx.check_equal(x[kx], y[ky], "x.shape[{}] == y.shape[{}]", kx, ky)
    batch = ctx.broadcast(x[0], y[0], "x.shape[0] with y.shape[0]")
    return (batch, x[m], y[n])


@register_shape_func("nn.bias_add")
def bias_add(ctx: ShapeContext, data: Shape, bias: Shape, *, axis: int = 1) -> Shape:
    """``data``'s shape; ``bias`` is ``(data.shape[axis],)``."""
    at = normalize_axis(axis, len(data), "data")
    require_rank(bias, 1, "bias")
    ctx.check_equal(bias[0], data[at], "bias.shape[0] == data.shape[{}]", at)
    return data


@register_shape_func("nn.softmax")
@register_shape_func("nn.log_softmax")
def softmax(ctx: ShapeContext, x: Shape, *, axis: int = -1) -> Shape:
    """``x``'s shape (``axis`` must exist)."""
    normalize_axis(axis, len(x), "x")
    return x


def _permuted(x: Shape, axes: Sequence[int] | None, name: str) -> Shape:
    """``x`` with its axes permuted by ``axes`` (``None``: as it is); ``axes`` lists every
    axis of ``x`` once, as non-negative indices."""
    if axes is None:
        return x
    if sorted(axes) != list(range(len(x))):
        fail(f"{name}={list(axes)} must be a permutation of 0..{len(x) - 1}")
    return tuple(x[a] for a in axes)


@register_shape_func("nn.attention")
def attention(
    ctx: ShapeContext,
    q: Shape,
    k: Shape,
    v: Shape,
    mask: Shape,
    *,
    scale: float = 1.0,
    q_axes: Sequence[int] | None = None,
    k_axes: Sequence[int] | None = None,
    v_axes: Sequence[int] | None = None,
    out_axes: Sequence[int] | None = None,
    nan_to_zero: bool = False,
) -> Shape:
    """``softmax(q @ k^T * scale + mask) @ v``: after the permutations, ``(..., S_q, D) x
    (..., S_k, D) x (..., S_k, Dv) -> (..., S_q, Dv)`` with the leading axes broadcast as
    numpy's matmul does, then permuted by ``out_axes``; ``mask`` broadcasts to the scores
    ``(..., S_q, S_k)`` and may not widen them (each of its dims is 1 or the scores')."""
    q = _permuted(q, q_axes, "q_axes")
    k = _permuted(k, k_axes, "k_axes")
    v = _permuted(v, v_axes, "v_axes")
    for name, x in (("q", q), ("k", k), ("v", v)):
        require_min_rank(x, 2, f"{name} (permuted)")
    rq, rk, rv = len(q), len(k), len(v)
    ctx.check_equal(q[rq - 1], k[rk - 1], "q.shape[-1] == k.shape[-1] (after the permutations)")
    ctx.check_equal(k[rk - 2], v[rv - 2], "k.shape[-2] == v.shape[-2] (after the permutations)")
    lead = broadcast_pair(ctx, q[: rq - 2], k[: rk - 2], "q", "k")
    scores = (*lead, q[rq - 2], k[rk - 2])
    if len(mask) > len(scores):
        fail(f"mask has rank {len(mask)}, more than the scores' {len(scores)}")
    offset = len(scores) - len(mask)
    for i, m in enumerate(mask):
        s = scores[offset + i]
        # The mask is added in place to the scores: it may broadcast, never widen them.
        ctx.check_equal(
            ctx.broadcast(s, m, "mask.shape[{}] with the scores' axis {}", i, offset + i),
            s,
            "mask.shape[{}] is 1 or the scores' axis {}",
            i,
            offset + i,
        )
    out = (*broadcast_pair(ctx, lead, v[: rv - 2], "q @ k^T", "v"), q[rq - 2], v[rv - 1])
    return _permuted(out, out_axes, "out_axes")


@register_workspace("nn.attention")
def attention_workspace(
    result: Shape,
    q: Shape,
    k: Shape,
    v: Shape,
    mask: Shape,
    *,
    dtype: str,
    k_axes: Sequence[int] | None = None,
    out_axes: Sequence[int] | None = None,
    **_: object,
) -> Dim:
    """The bytes ``nn.attention``'s kernel carves (``vm/kernels/attention.py``): the scores,
    ``(..., S_q, S_k)``, whose rows are at most the result's (its leading axes broadcast the
    scores' with ``v``'s): every dim of the result but ``Dv`` (the last before ``out_axes``),
    times ``S_k``; float32 for float16 data."""
    last = len(result) - 1
    rows = 1
    for i, d in enumerate(result):
        if (i if out_axes is None else out_axes[i]) != last:
            rows = rows * d
    s_k = k[len(k) - 2] if k_axes is None else k[k_axes[len(k) - 2]]
    itemsize = 4 if dtype == "float16" else ITEMSIZE[dtype]
    return rows * s_k * itemsize + PIECE_SLACK


@register_shape_func("nn.layer_norm")
def layer_norm(
    ctx: ShapeContext,
    data: Shape,
    gamma: Shape,
    beta: Shape,
    *,
    axis: int = -1,
    epsilon: float = 1e-5,
) -> Shape:
    """``data``'s shape; ``gamma`` and ``beta`` are ``(data.shape[axis],)``."""
    at = normalize_axis(axis, len(data), "data")
    for name, param in (("gamma", gamma), ("beta", beta)):
        require_rank(param, 1, name)
        ctx.check_equal(param[0], data[at], "{}.shape[0] == data.shape[{}]", name, at)
    return data


@register_workspace("nn.layer_norm")
def layer_norm_workspace(result: Shape, data: Shape, *_: Shape, dtype: str, **__: object) -> Dim:
    """The bytes ``nn.layer_norm``'s kernel carves (``vm/kernels/nn.py``): the squares of the
    centred input, ``data``'s size; float16 adds the float32 copy it computes in (both
    float32)."""
    elements = 1
    for d in data:
        elements = elements * d
    per_element = 8 if dtype == "float16" else ITEMSIZE[dtype]
    return elements * per_element + 2 * PIECE_SLACK


@register_shape_func("nn.rms_norm")
def rms_norm(
    ctx: ShapeContext, data: Shape, gamma: Shape, *, axis: int = -1, epsilon: float = 1e-5
) -> Shape:
    """``data``'s shape; ``gamma`` is ``(data.shape[axis],)``."""
    at = normalize_axis(axis, len(data), "data")
    require_rank(gamma, 1, "gamma")
    ctx.check_equal(gamma[0], data[at], "{}.shape[0] == data.shape[{}]", "gamma", at)
    return data


def _pair(values: Sequence[int], name: str, least: int) -> tuple[int, int]:
    if len(values) != 2:
        fail(f"{name} must have 2 values (height, width), got {list(values)}")
    for v in values:
        if v < least:
            fail(f"{name} must be >= {least}, got {list(values)}")
    return values[0], values[1]


def _padding(padding: Sequence[int]) -> tuple[int, int, int, int]:
    """``(top, left, bottom, right)`` from 4 values, or from ``[h, w]``."""
    if len(padding) == 2:
        padding = (padding[0], padding[1], padding[0], padding[1])
    if len(padding) != 4:
        fail(f"padding must be [top, left, bottom, right] or [h, w], got {list(padding)}")
    if min(padding) < 0:
        fail(f"padding must be >= 0, got {list(padding)}")
    return padding[0], padding[1], padding[2], padding[3]


def _window(
    ctx: ShapeContext, size: Dim, pad: int, kernel: Dim, stride: int, dilation: int, what: str
) -> Dim:
    """The number of positions of a dilated window of ``kernel`` over a padded axis."""
    extent = dilation * (kernel - 1) + 1
    ctx.check(size + pad, ">=", extent, "the padded {0} >= the dilated window {0}", what)
    return ctx.floor_div(size + pad - extent, stride) + 1


@register_shape_func("nn.conv2d")
def conv2d(
    ctx: ShapeContext,
    data: Shape,
    weight: Shape,
    *,
    strides: Sequence[int] = (1, 1),
    padding: Sequence[int] = (0, 0, 0, 0),
    dilation: Sequence[int] = (1, 1),
    groups: int = 1,
) -> Shape:
    """``(N, C, H, W) x (O, C / groups, KH, KW) -> (N, O, OH, OW)``, sliding-window sizes."""
    require_rank(data, 4, "data")
    require_rank(weight, 4, "weight")
    sh, sw = _pair(strides, "strides", 1)
    dh, dw = _pair(dilation, "dilation", 1)
    top, left, bottom, right = _padding(padding)
    if groups < 1:
        fail(f"groups must be >= 1, got {groups}")
    if groups == 1:
        ctx.check_equal(data[1], weight[1], "data.shape[1] == weight.shape[1]")
    else:
        ctx.check_equal(
            data[1],
            weight[1] * groups,
            "data.shape[1] == weight.shape[1] * groups (groups={})",
            groups,
        )
    ctx.check_divides(groups, weight[0], "weight.shape[0] divisible by groups={}", groups)
    ctx.check(weight[2], ">", 0, "weight.shape[2] > 0")
    ctx.check(weight[3], ">", 0, "weight.shape[3] > 0")
    oh = _window(ctx, data[2], top + bottom, weight[2], sh, dh, "height")
    ow = _window(ctx, data[3], left + right, weight[3], sw, dw, "width")
    return (data[0], weight[0], oh, ow)


@register_shape_func("nn.conv3d")
def conv3d(
    ctx: ShapeContext,
    data: Shape,
    weight: Shape,
    *,
    strides: Sequence[int] = (1, 1, 1),
    padding: Sequence[int] = (0, 0, 0, 0, 0, 0),
    dilation: Sequence[int] = (1, 1, 1),
    groups: int = 1,
) -> Shape:
    """``(N, C, D, H, W) x (O, C / groups, KD, KH, KW) -> (N, O, OD, OH, OW)``, sliding-window
    sizes; ``padding`` is ``[front, top, left, back, bottom, right]``."""
    require_rank(data, 5, "data")
    require_rank(weight, 5, "weight")
    for name, values in (("strides", strides), ("dilation", dilation)):
        if len(values) != 3 or min(values) < 1:
            fail(f"{name} must have 3 values >= 1 (depth, height, width), got {list(values)}")
    if len(padding) != 6 or min(padding) < 0:
        fail(
            "padding must have 6 values >= 0 ([front, top, left, back, bottom, right]), got "
            f"{list(padding)}"
        )
    if groups < 1:
        fail(f"groups must be >= 1, got {groups}")
    ctx.check_equal(
        data[1], weight[1] * groups, "data.shape[1] == weight.shape[1] * groups (groups={})", groups
    )
    ctx.check_divides(groups, weight[0], "weight.shape[0] divisible by groups={}", groups)
    out = [data[0], weight[0]]
    for axis, what in enumerate(("depth", "height", "width")):
        ctx.check(weight[2 + axis], ">", 0, "weight.shape[{}] > 0", 2 + axis)
        pads = padding[axis] + padding[3 + axis]
        size = data[2 + axis]
        out.append(_window(ctx, size, pads, weight[2 + axis], strides[axis], dilation[axis], what))
    return tuple(out)


@register_workspace("nn.conv3d")
def conv3d_workspace(
    result: Shape,
    data: Shape,
    weight: Shape,
    *,
    dtype: str,
    strides: Sequence[int] = (1, 1, 1),
    padding: Sequence[int] = (0, 0, 0, 0, 0, 0),
    dilation: Sequence[int] = (1, 1, 1),
    **_: object,
) -> Dim:
    """The bytes ``nn.conv3d``'s kernel carves (``vm/kernels/conv3d.py``): the depth taps
    stacked into channels, ``(N * OD, KD * C, H, W)``, the 2-d convolution's result ``(N * OD,
    O, OH, OW)``, and that convolution's own workspace (``nn.conv2d``'s rule on those shapes)."""
    n, c, _, h, w = data
    o, cg, kd, kh, kw = weight
    od, oh, ow = result[2], result[3], result[4]
    images = n * od
    planar = conv2d_workspace(
        (images, o, oh, ow),
        (images, kd * c, h, w),
        (o, kd * cg, kh, kw),
        dtype=dtype,
        strides=strides[1:],
        padding=(padding[1], padding[2], padding[4], padding[5]),
        dilation=dilation[1:],
    )
    elements = images * kd * c * h * w + images * o * oh * ow
    return elements * ITEMSIZE[dtype] + 2 * PIECE_SLACK + planar


@register_workspace("nn.conv2d")
def conv2d_workspace(
    result: Shape,
    data: Shape,
    weight: Shape,
    *,
    dtype: str,
    strides: Sequence[int] = (1, 1),
    padding: Sequence[int] = (0, 0, 0, 0),
    dilation: Sequence[int] = (1, 1),
    **_: object,
) -> Dim:
    """The bytes ``nn.conv2d``'s kernel carves (``vm/kernels/conv.py``): the largest of its
    paths' needs is the stride-1 "flat" path's, the zero-padded region the taps read with one
    extra row, its im2col buffer of KH * KW taps by OH * RW columns (RW the region's width, so
    the junk columns count) and the product of the same columns; every other path's buffers
    (window, taps, gather, channels-last, depthwise) fit in those three pieces. float16 data
    adds the float32 accumulator, and sums in float32 throughout. ``RH = OH * SH + (KH - 1) * DH``
    bounds the rows read (``(OH - 1) * SH + (KH - 1) * DH + 1``) and is never negative. A 1x1
    convolution at stride 1 without padding carves nothing (0: no workspace)."""
    n, c = data[0], data[1]
    o, kh, kw = weight[0], weight[2], weight[3]
    oh, ow = result[2], result[3]
    wide = dtype == "float16"
    if (kh, kw) == (1, 1) and tuple(strides) == (1, 1) and not any(padding) and not wide:
        return 0  # one matmul straight into the result (the "matmul" path)
    rh = oh * strides[0] + (kh - 1) * dilation[0]
    rw = ow * strides[1] + (kw - 1) * dilation[1]
    elements = n * c * (rh + 1) * rw + n * c * kh * kw * oh * rw + n * o * oh * rw
    if wide:
        elements += n * o * oh * ow
    itemsize = 4 if wide else ITEMSIZE[dtype]
    return elements * itemsize + 4 * PIECE_SLACK


@register_shape_func("nn.conv2d_transpose")
def conv2d_transpose(
    ctx: ShapeContext,
    data: Shape,
    weight: Shape,
    *,
    strides: Sequence[int] = (1, 1),
    padding: Sequence[int] = (0, 0, 0, 0),
    output_padding: Sequence[int] = (0, 0),
    dilation: Sequence[int] = (1, 1),
    groups: int = 1,
) -> Shape:
    """``(N, C, H, W) x (C, O / groups, KH, KW) -> (N, O, OH, OW)`` with
    ``OH = (H - 1) * stride - top - bottom + dilation * (KH - 1) + output_padding + 1``.

    H and W must not be empty (the formula has no meaning for an empty image) and the output
    must not be negative (padding crops at most the whole result)."""
    require_rank(data, 4, "data")
    require_rank(weight, 4, "weight")
    sh, sw = _pair(strides, "strides", 1)
    dh, dw = _pair(dilation, "dilation", 1)
    ph, pw = _pair(output_padding, "output_padding", 0)
    top, left, bottom, right = _padding(padding)
    if groups < 1:
        fail(f"groups must be >= 1, got {groups}")
    ctx.check_equal(data[1], weight[0], "data.shape[1] == weight.shape[0]")
    ctx.check_divides(groups, weight[0], "weight.shape[0] divisible by groups={}", groups)
    ctx.check(weight[2], ">", 0, "weight.shape[2] > 0")
    ctx.check(weight[3], ">", 0, "weight.shape[3] > 0")
    ctx.check(data[2], ">", 0, "data.shape[2] > 0 (a transposed convolution needs pixels)")
    ctx.check(data[3], ">", 0, "data.shape[3] > 0 (a transposed convolution needs pixels)")
    oh = (data[2] - 1) * sh - top - bottom + dh * (weight[2] - 1) + ph + 1
    ow = (data[3] - 1) * sw - left - right + dw * (weight[3] - 1) + pw + 1
    ctx.check(oh, ">=", 0, "the output height >= 0 (padding crops at most all of it)")
    ctx.check(ow, ">=", 0, "the output width >= 0 (padding crops at most all of it)")
    return (data[0], weight[1] * groups, oh, ow)


@register_workspace("nn.conv2d_transpose")
def conv2d_transpose_workspace(
    result: Shape, data: Shape, weight: Shape, *, dtype: str, **_: object
) -> Dim:
    """The bytes ``nn.conv2d_transpose``'s kernel carves (``vm/kernels/conv.py``): every input
    pixel's contribution to every tap, ``(N, O, KH, KW, H, W)`` (the tap-by-tap fallback's one
    tap's products fit in it), and the input (in float32 for float16 data, or one tap's input
    rows for the fallback); float16 adds the float32 weight and accumulator."""
    n, c, h, w = data
    og, kh, kw = weight[1], weight[2], weight[3]
    o, oh, ow = result[1], result[2], result[3]
    elements = n * o * kh * kw * h * w + n * c * h * w
    pieces = 2
    if dtype == "float16":
        elements += c * og * kh * kw + n * o * oh * ow
        pieces += 2
    itemsize = 4 if dtype == "float16" else ITEMSIZE[dtype]
    return elements * itemsize + pieces * PIECE_SLACK


def pool2d(
    ctx: ShapeContext,
    data: Shape,
    *,
    pool_size: Sequence[int],
    strides: Sequence[int] = (1, 1),
    padding: Sequence[int] = (0, 0, 0, 0),
    dilation: Sequence[int] = (1, 1),
) -> Shape:
    """``(N, C, H, W) -> (N, C, OH, OW)``: windows of ``pool_size`` dilated by ``dilation``
    (padding never counts in the value, but it does in the number of windows)."""
    require_rank(data, 4, "data")
    kh, kw = _pair(pool_size, "pool_size", 1)
    sh, sw = _pair(strides, "strides", 1)
    dh, dw = _pair(dilation, "dilation", 1)
    top, left, bottom, right = _padding(padding)
    oh = _window(ctx, data[2], top + bottom, kh, sh, dh, "height")
    ow = _window(ctx, data[3], left + right, kw, sw, dw, "width")
    return (data[0], data[1], oh, ow)


register_shape_func("nn.max_pool2d")(pool2d)
register_shape_func("nn.avg_pool2d")(pool2d)


def pool2d_workspace(
    result: Shape,
    data: Shape,
    *,
    dtype: str,
    padding: Sequence[int] = (0, 0, 0, 0),
    **_: object,
) -> Dim:
    """The bytes the pooling kernels carve (``vm/kernels/conv.py``), every path's pieces
    counted (an upper bound): the input padded with the op's identity, the rows' temporary of
    a separable pool (over the padded width), the columns' one, and average pooling's float32
    accumulator for float16 data; in float32 for float16."""
    n, c, h, w = data
    oh, ow = result[2], result[3]
    top, left, bottom, right = _padding(padding)
    hp, wp = h + top + bottom, w + left + right
    elements = n * c * (hp * wp + oh * wp + h * ow + oh * ow)
    itemsize = 4 if dtype == "float16" else ITEMSIZE[dtype]
    return elements * itemsize + 3 * PIECE_SLACK


register_workspace("nn.max_pool2d")(pool2d_workspace)
register_workspace("nn.avg_pool2d")(pool2d_workspace)


@register_shape_func("nn.global_avg_pool2d")
def global_avg_pool2d(ctx: ShapeContext, data: Shape) -> Shape:
    """``(N, C, H, W) -> (N, C, 1, 1)``."""
    require_rank(data, 4, "data")
    return (data[0], data[1], 1, 1)


@register_shape_func("nn.global_max_pool2d")
def global_max_pool2d(ctx: ShapeContext, data: Shape) -> Shape:
    """``(N, C, H, W) -> (N, C, 1, 1)``; H and W must not be empty (a max has no identity)."""
    require_rank(data, 4, "data")
    ctx.check(data[2], ">", 0, "data.shape[2] > 0 (a pooled axis must not be empty)")
    ctx.check(data[3], ">", 0, "data.shape[3] > 0 (a pooled axis must not be empty)")
    return (data[0], data[1], 1, 1)


# ---- recurrent layers ----------------------------------------------------------------------


def _recurrent(
    ctx: ShapeContext,
    gates: int,
    x: Shape,
    w: Shape,
    r: Shape,
    optional: Sequence[tuple[str, Shape, str]],
    direction: str,
    layout: int,
    outputs: int,
) -> list[Shape]:
    """ONNX's recurrent shapes: ``x`` is ``(seq, batch, input)`` (``layout=1``: ``(batch, seq,
    input)``), ``w`` ``(dirs, gates * hidden, input)``, ``r`` ``(dirs, gates * hidden,
    hidden)``; each optional input is 0-d (absent) or of its ONNX shape, named by ``optional``'s
    kind: ``"bias"`` ``(dirs, 2 * gates * hidden)``, ``"lens"`` ``(batch,)``, ``"state"`` the
    initial states' ``(dirs, batch, hidden)`` (``layout=1``: ``(batch, dirs, hidden)``),
    ``"peepholes"`` ``(dirs, 3 * hidden)``. Results: ``Y`` ``(seq, dirs, batch, hidden)``
    (``layout=1``: ``(batch, seq, dirs, hidden)``), then ``outputs - 1`` final states."""
    if layout not in (0, 1):
        fail(f"layout={layout} is not 0 or 1")
    dirs = 2 if direction == "bidirectional" else 1
    require_rank(x, 3, "x")
    require_rank(w, 3, "w")
    require_rank(r, 3, "r")
    seq, batch = (x[1], x[0]) if layout else (x[0], x[1])
    hidden = r[2]
    ctx.check_equal(w[0], dirs, "w.shape[0] == {} (the directions)", dirs)
    ctx.check_equal(r[0], dirs, "r.shape[0] == {} (the directions)", dirs)
    ctx.check_equal(w[1], gates * hidden, "w.shape[1] == {} * r.shape[2]", gates)
    ctx.check_equal(r[1], gates * hidden, "r.shape[1] == {} * r.shape[2]", gates)
    ctx.check_equal(w[2], x[2], "w.shape[2] == x.shape[2]")
    state = (batch, dirs, hidden) if layout else (dirs, batch, hidden)
    want = {
        "bias": (dirs, 2 * gates * hidden),
        "lens": (batch,),
        "state": state,
        "peepholes": (dirs, 3 * hidden),
    }
    for name, shape, kind in optional:
        if len(shape) == 0:
            continue  # absent
        expected = want[kind]
        require_rank(shape, len(expected), name)
        for i, (got, dim) in enumerate(zip(shape, expected, strict=True)):
            ctx.check_equal(got, dim, "{}.shape[{}] == {}", name, i, dim)
    y = (batch, seq, dirs, hidden) if layout else (seq, dirs, batch, hidden)
    return [y, *([state] * (outputs - 1))]


@register_shape_func("nn.lstm")
def lstm(
    ctx: ShapeContext,
    x: Shape,
    w: Shape,
    r: Shape,
    b: Shape,
    sequence_lens: Shape,
    initial_h: Shape,
    initial_c: Shape,
    p: Shape,
    *,
    direction: str = "forward",
    layout: int = 0,
    clip: float | None = None,
    act_f: str = "sigmoid",
    act_g: str = "tanh",
    act_h: str = "tanh",
    input_forget: bool = False,
) -> list[Shape]:
    """``(Y, Y_h, Y_c)`` of ONNX's LSTM (gates ``i, o, f, c``); see ``_recurrent``."""
    optional = [
        ("b", b, "bias"),
        ("sequence_lens", sequence_lens, "lens"),
        ("initial_h", initial_h, "state"),
        ("initial_c", initial_c, "state"),
        ("p", p, "peepholes"),
    ]
    return _recurrent(ctx, 4, x, w, r, optional, direction, layout, 3)


@register_shape_func("nn.gru")
def gru(
    ctx: ShapeContext,
    x: Shape,
    w: Shape,
    r: Shape,
    b: Shape,
    sequence_lens: Shape,
    initial_h: Shape,
    *,
    direction: str = "forward",
    layout: int = 0,
    clip: float | None = None,
    act_f: str = "sigmoid",
    act_g: str = "tanh",
    linear_before_reset: bool = False,
) -> list[Shape]:
    """``(Y, Y_h)`` of ONNX's GRU (gates ``z, r, h``); see ``_recurrent``."""
    optional = [
        ("b", b, "bias"),
        ("sequence_lens", sequence_lens, "lens"),
        ("initial_h", initial_h, "state"),
    ]
    return _recurrent(ctx, 3, x, w, r, optional, direction, layout, 2)


@register_shape_func("nn.rnn")
def rnn(
    ctx: ShapeContext,
    x: Shape,
    w: Shape,
    r: Shape,
    b: Shape,
    sequence_lens: Shape,
    initial_h: Shape,
    *,
    direction: str = "forward",
    layout: int = 0,
    clip: float | None = None,
    act_f: str = "tanh",
) -> list[Shape]:
    """``(Y, Y_h)`` of ONNX's RNN (one gate); see ``_recurrent``."""
    optional = [
        ("b", b, "bias"),
        ("sequence_lens", sequence_lens, "lens"),
        ("initial_h", initial_h, "state"),
    ]
    return _recurrent(ctx, 1, x, w, r, optional, direction, layout, 2)


def _recurrent_workspace(
    result: Shape, x: Shape, w: Shape, r: Shape, *_: Shape, dtype: str, **__: object
) -> Dim:
    """The bytes a recurrent kernel carves (``vm/kernels/recurrent.py``): the input
    projections of every step, ``seq * batch * dirs * G`` elements (``G`` = gates * hidden,
    ``r.shape[1]``), and on top of them, for the steps, either both directions' gate-major
    copy and their states (``2 * seq * batch * (G + hidden)``) or one direction's gate-major
    copy (``seq * batch * G``, less): in the compute dtype (float32 for float16). ``seq *
    batch`` is ``x``'s first two dims in either layout."""
    steps = x[0] * x[1]
    dirs, gates_hidden, hidden = r[0], r[1], r[2]
    elements = steps * (dirs * gates_hidden + 2 * gates_hidden + 2 * hidden)
    itemsize = 4 if dtype == "float16" else ITEMSIZE[dtype]
    return elements * itemsize + 3 * PIECE_SLACK


register_workspace("nn.lstm", results=3)(_recurrent_workspace)
register_workspace("nn.gru", results=2)(_recurrent_workspace)
register_workspace("nn.rnn", results=2)(_recurrent_workspace)


@register_shape_func("dft")
def dft(
    ctx: ShapeContext,
    x: Shape,
    *,
    axis: int = -2,
    length: int | None = None,
    inverse: bool = False,
    onesided: bool = False,
) -> Shape:
    """ONNX ``DFT``: ``x``'s shape with ``length`` (or ``length // 2 + 1`` one-sided) along
    ``axis`` and a last dim of 2; an inverse one-sided one (irfft) ``length`` and 1. The
    default length is the axis dim (``2 (dim - 1)`` for irfft), a symbol if the dim is one."""
    require_min_rank(x, 2, "x")
    rank = len(x)
    at = normalize_axis(axis, rank, "x")
    if at == rank - 1:
        fail("the DFT axis cannot be the last one (real and imaginary parts)")
    channels = x[rank - 1]  # 1 (real) or 2 (complex): 1 <= channels <= 2
    ctx.check(channels, ">=", 1, "the last dim of x (1 real, 2 complex) >= 1")
    ctx.check(channels, "<=", 2, "the last dim of x (1 real, 2 complex) <= 2")
    real_out = inverse and onesided
    size: Dim
    if length is not None:
        if length <= 0:
            fail(f"length must be >= 1, got {length}")
        size = length
    else:
        size = 2 * (x[at] - 1) if real_out else x[at]
        ctx.check(size, ">=", 1, "the DFT length (from x.shape[{}]) >= 1", at)
    bins = ctx.floor_div(size, 2) + 1 if onesided and not inverse else size
    return (*x[:at], bins, *x[at + 1 : rank - 1], 1 if real_out else 2)
