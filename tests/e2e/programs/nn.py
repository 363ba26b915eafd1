"""Neural-network ops: dense, matmul, batch_matmul (transposes, batch broadcast), bias_add,
softmax, log_softmax, layer_norm, conv2d (padding forms, strides, dilation, groups),
conv2d_transpose, conv3d, pooling (dilated windows too),
the recurrent nn.lstm, nn.gru and nn.rnn, and small models (MLP, attention, CNN) over a dynamic batch.

References are written from the catalogue's definitions (NCHW data, OIHW weights, padding
``[top, left, bottom, right]`` or ``[h, w]``), with explicit loops over kernel offsets.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from harness import Case, uniform


def _naive_dft(z: np.ndarray, axis: int, n: int, inverse: bool) -> np.ndarray:
    """The DFT of the complex ``z`` along ``axis`` (cut or zero-padded to ``n``) by the sum of
    its definition in complex128, not an FFT."""
    z = np.moveaxis(z.astype(np.complex128), axis, -1)[..., :n]
    z = np.concatenate([z, np.zeros((*z.shape[:-1], n - z.shape[-1]))], axis=-1)
    k = np.arange(n)
    sign = 1 if inverse else -1
    out = z @ np.exp(sign * 2j * np.pi * np.outer(k, k) / n) / (n if inverse else 1)
    return np.moveaxis(out, -1, axis)


def _naive_irfft(half: np.ndarray, axis: int, n: int) -> np.ndarray:
    """The real signal of length ``n`` whose one-sided spectrum is ``half`` (``[..., 2]``):
    bins 1 to ``n / 2`` (exclusive) count twice, the others once, real parts only."""
    z = np.moveaxis(half[..., 0] + 1j * half[..., 1], axis, -1)[..., : n // 2 + 1]
    k = np.arange(z.shape[-1])
    weight = np.where((k == 0) | (2 * k == n), 1.0, 2.0)
    turn = np.exp(2j * np.pi * np.outer(k, np.arange(n)) / n)
    out: np.ndarray = ((z * weight) @ turn).real / n
    return np.moveaxis(out, -1, axis)[..., None]


def _dft_ops(x: np.ndarray, z: np.ndarray) -> tuple[np.ndarray, ...]:
    n = x.shape[1]
    full = _naive_dft(x[..., 0], 1, n, False)[:, : n // 2 + 1]
    r = np.stack([full.real, full.imag], axis=-1).astype(np.float32)
    inv = _naive_dft(z[..., 0] + 1j * z[..., 1], 0, 6, True)
    back = _naive_irfft(r.astype(np.float64), 1, 2 * (n // 2)).astype(np.float32)
    return r, np.stack([inv.real, inv.imag], axis=-1), back


def _pad4(padding: Sequence[int]) -> tuple[int, int, int, int]:
    if len(padding) == 2:
        return padding[0], padding[1], padding[0], padding[1]
    return padding[0], padding[1], padding[2], padding[3]


def _pad_hw(x: np.ndarray, padding: Sequence[int], value: float) -> np.ndarray:
    top, left, bottom, right = _pad4(padding)
    return np.pad(x, [(0, 0), (0, 0), (top, bottom), (left, right)], constant_values=value)


def _out_size(size: int, k: int, stride: int, dilation: int = 1) -> int:
    return (size - dilation * (k - 1) - 1) // stride + 1


def _patches(
    xp: np.ndarray, kh: int, kw: int, strides: Sequence[int], dilation: Sequence[int]
) -> tuple[int, int, list[tuple[int, int, np.ndarray]]]:
    """Output size and, per kernel offset (i, j), the (N, C, OH, OW) input values it meets."""
    sh, sw = strides
    dh, dw = dilation
    oh = _out_size(xp.shape[2], kh, sh, dh)
    ow = _out_size(xp.shape[3], kw, sw, dw)
    out = []
    for i in range(kh):
        for j in range(kw):
            rows = slice(i * dh, i * dh + sh * (oh - 1) + 1, sh)
            cols = slice(j * dw, j * dw + sw * (ow - 1) + 1, sw)
            out.append((i, j, xp[:, :, rows, cols]))
    return oh, ow, out


def conv2d(
    x: np.ndarray,
    w: np.ndarray,
    strides: Sequence[int] = (1, 1),
    padding: Sequence[int] = (0, 0, 0, 0),
    dilation: Sequence[int] = (1, 1),
    groups: int = 1,
) -> np.ndarray:
    """NCHW x OIHW convolution (cross-correlation), accumulated in float64."""
    xp = _pad_hw(x.astype(np.float64), padding, 0.0)
    o, cg, kh, kw = w.shape
    og = o // groups
    oh, ow, patches = _patches(xp, kh, kw, strides, dilation)
    out = np.zeros((x.shape[0], o, oh, ow))
    for g in range(groups):
        for i, j, patch in patches:
            part = patch[:, g * cg : (g + 1) * cg]
            weight = w[g * og : (g + 1) * og, :, i, j].astype(np.float64)
            out[:, g * og : (g + 1) * og] += np.einsum("nchw,oc->nohw", part, weight)
    return out


def conv3d(
    x: np.ndarray,
    w: np.ndarray,
    strides: Sequence[int] = (1, 1, 1),
    padding: Sequence[int] = (0, 0, 0, 0, 0, 0),
    dilation: Sequence[int] = (1, 1, 1),
    groups: int = 1,
) -> np.ndarray:
    """NCDHW x OIDHW convolution: output depth z sums, over the depth taps i, the 2-d
    convolution of input depth ``z * SD + i * DD`` (of the depth-padded input) by the
    weights of tap i."""
    front, top, left, back, bottom, right = padding
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (front, back), (0, 0), (0, 0)))
    kd = w.shape[2]
    od = (xp.shape[2] - dilation[0] * (kd - 1) - 1) // strides[0] + 1
    planes = []
    for z in range(od):
        plane = sum(
            conv2d(
                xp[:, :, z * strides[0] + i * dilation[0]],
                w[:, :, i],
                strides[1:],
                (top, left, bottom, right),
                dilation[1:],
                groups,
            )
            for i in range(kd)
        )
        planes.append(plane)
    if planes:
        return np.stack(planes, axis=2)
    o = w.shape[0]
    empty = conv2d(xp[:, :, 0], w[:, :, 0], strides[1:], (top, left, bottom, right), dilation[1:])
    return np.zeros((x.shape[0], o, 0, *empty.shape[2:]))


def conv2d_transpose(
    x: np.ndarray,
    w: np.ndarray,
    strides: Sequence[int] = (1, 1),
    padding: Sequence[int] = (0, 0, 0, 0),
    output_padding: Sequence[int] = (0, 0),
    dilation: Sequence[int] = (1, 1),
    groups: int = 1,
) -> np.ndarray:
    """Transposed convolution, weight (C, O / groups, KH, KW): input pixel (i, j) times kernel
    offset (p, q) adds at (i * stride + p * dilation, ...) of the full result, which
    output_padding extends with zeros at the end and padding then crops."""
    top, left, bottom, right = _pad4(padding)
    n, c, h, wd = x.shape
    _, og, kh, kw = w.shape
    cg = c // groups
    fh = (h - 1) * strides[0] + dilation[0] * (kh - 1) + 1 + output_padding[0]
    fw = (wd - 1) * strides[1] + dilation[1] * (kw - 1) + 1 + output_padding[1]
    full = np.zeros((n, og * groups, fh, fw))
    for g in range(groups):
        for p in range(kh):
            for q in range(kw):
                rows = slice(
                    p * dilation[0], p * dilation[0] + (h - 1) * strides[0] + 1, strides[0]
                )
                cols = slice(
                    q * dilation[1], q * dilation[1] + (wd - 1) * strides[1] + 1, strides[1]
                )
                part = x[:, g * cg : (g + 1) * cg].astype(np.float64)
                weight = w[g * cg : (g + 1) * cg, :, p, q].astype(np.float64)
                full[:, g * og : (g + 1) * og, rows, cols] += np.einsum(
                    "nchw,co->nohw", part, weight
                )
    return full[:, :, top : fh - bottom, left : fw - right]


def max_pool2d(
    x: np.ndarray,
    size: Sequence[int],
    strides: Sequence[int] = (1, 1),
    padding: Sequence[int] = (0, 0),
    dilation: Sequence[int] = (1, 1),
) -> np.ndarray:
    """Max over (dilated) windows; padded positions are -inf so they never win."""
    xp = _pad_hw(x, padding, -np.inf)
    _, _, patches = _patches(xp, size[0], size[1], strides, dilation)
    return np.max(np.stack([p for _, _, p in patches]), axis=0)


def avg_pool2d(
    x: np.ndarray,
    size: Sequence[int],
    strides: Sequence[int] = (1, 1),
    padding: Sequence[int] = (0, 0),
    dilation: Sequence[int] = (1, 1),
) -> np.ndarray:
    """Mean over the real (unpadded) elements of each (dilated) window."""
    xp = _pad_hw(x.astype(np.float64), padding, 0.0)
    mask = _pad_hw(np.ones((1, 1, *x.shape[2:])), padding, 0.0)
    _, _, patches = _patches(xp, size[0], size[1], strides, dilation)
    _, _, counts = _patches(mask, size[0], size[1], strides, dilation)
    total = np.sum(np.stack([p for _, _, p in patches]), axis=0)
    count = np.sum(np.stack([p for _, _, p in counts]), axis=0)
    return total / count


def softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    if x.size == 0:
        return x.copy()
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def log_softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    if x.size == 0:
        return x.copy()
    shifted = x - x.max(axis=axis, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=axis, keepdims=True))


def layer_norm(
    x: np.ndarray, gamma: np.ndarray, beta: np.ndarray, axis: int = -1, eps: float = 1e-5
) -> np.ndarray:
    shape = [1] * x.ndim
    shape[axis] = -1
    x64 = x.astype(np.float64)
    mean = x64.mean(axis=axis, keepdims=True) if x.size else x64
    var = ((x64 - mean) ** 2).mean(axis=axis, keepdims=True) if x.size else x64
    return (x64 - mean) / np.sqrt(var + eps) * gamma.reshape(shape) + beta.reshape(shape)


def rms_norm(x: np.ndarray, gamma: np.ndarray, axis: int = -1, eps: float = 1e-5) -> np.ndarray:
    shape = [1] * x.ndim
    shape[axis] = -1
    x64 = x.astype(np.float64)
    square = (x64 * x64).mean(axis=axis, keepdims=True) if x.size else x64
    return x64 / np.sqrt(square + eps) * gamma.reshape(shape)


def _mlp(
    x: np.ndarray, w1: np.ndarray, b1: np.ndarray, w2: np.ndarray, b2: np.ndarray
) -> np.ndarray:
    h = np.maximum(x @ w1.T + b1, 0)
    return log_softmax(h @ w2.T + b2, axis=-1)


def _attention(x: np.ndarray, wq: np.ndarray, wk: np.ndarray, wv: np.ndarray) -> np.ndarray:
    q, k, v = x @ wq.T, x @ wk.T, x @ wv.T
    scores = q @ k.transpose(0, 2, 1) * np.float32(1 / np.sqrt(8))
    return softmax(scores, axis=-1) @ v


def _attention_op(q: np.ndarray, k: np.ndarray, v: np.ndarray, mask: np.ndarray) -> np.ndarray:
    qh, kh, vh = (t.transpose(0, 2, 1, 3) for t in (q, k, v))  # (b, heads, s, 8)
    scores = qh @ kh.transpose(0, 1, 3, 2) * np.float32(0.35355339) + mask
    return (softmax(scores, axis=-1) @ vh).transpose(0, 2, 1, 3)


def _sigmoid(v: np.ndarray) -> np.ndarray:
    return 1 / (1 + np.exp(-v))


def _lstm_lengths(
    x: np.ndarray,
    w: np.ndarray,
    r: np.ndarray,
    bias: np.ndarray,
    lens: np.ndarray,
    h0: np.ndarray,
    c0: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """ONNX's bidirectional LSTM (gates i, o, f, c), one entry at a time: an entry runs its
    first ``len`` steps (reverse: down from ``len - 1``), zeros in Y after them; a length 0
    gives zero final states (onnxruntime). Then relu on Y, as the program."""
    seq, batch, _ = x.shape
    k = r.shape[2]
    y = np.zeros((seq, 2, batch, k))
    y_h, y_c = np.zeros((2, batch, k)), np.zeros((2, batch, k))
    for d in range(2):
        for n in range(batch):
            h, c = h0[d, n].astype(np.float64), c0[d, n].astype(np.float64)
            steps = range(int(lens[n]) - 1, -1, -1) if d else range(int(lens[n]))
            for t in steps:
                g = w[d] @ x[t, n] + r[d] @ h + bias[d, : 4 * k] + bias[d, 4 * k :]
                i, o, f = _sigmoid(g[:k]), _sigmoid(g[k : 2 * k]), _sigmoid(g[2 * k : 3 * k])
                c = f * c + i * np.tanh(g[3 * k :])
                h = o * np.tanh(c)
                y[t, d, n] = h
            if lens[n]:
                y_h[d, n], y_c[d, n] = h, c
    return np.maximum(y, 0), y_h, y_c


def _gru_rnn_batch_major(
    x: np.ndarray, wg: np.ndarray, rg: np.ndarray, bg: np.ndarray, wr: np.ndarray, rr: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """GRU with linear_before_reset (gates z, r, h), batch-major (layout=1), forward; then a
    reverse RNN with relu and clip 1.5 on its Y: ``(gru Y, rnn Y_h)``."""
    batch, seq, _ = x.shape
    k = rg.shape[2]
    y = np.zeros((batch, seq, 1, k))
    for n in range(batch):
        h = np.zeros(k)
        for t in range(seq):
            xw = wg[0] @ x[n, t] + bg[0, : 3 * k]
            hr = rg[0] @ h + bg[0, 3 * k :]
            z = _sigmoid(xw[:k] + hr[:k])
            r = _sigmoid(xw[k : 2 * k] + hr[k : 2 * k])
            h = (1 - z) * np.tanh(xw[2 * k :] + r * hr[2 * k :]) + z * h
            y[n, t, 0] = h
    y_h = np.zeros((1, batch, k))
    for n in range(batch):
        h = np.zeros(k)
        for t in range(seq - 1, -1, -1):
            h = np.maximum(np.clip(wr[0] @ y[n, t, 0] + rr[0] @ h, -1.5, 1.5), 0)
        y_h[0, n] = h
    return y, y_h


def _cnn(x: np.ndarray, k: np.ndarray, w: np.ndarray) -> np.ndarray:
    h = np.maximum(conv2d(x, k, padding=(1, 1, 1, 1)), 0)
    p = max_pool2d(h, (2, 2), (2, 2))
    flat = p.reshape(p.shape[0], 64)
    return softmax(flat @ w.T.astype(np.float64), axis=1)


IMG = [{"n": 0, "h": 3, "w": 1}, {"n": 1, "h": 4, "w": 4}, {"n": 2, "h": 7, "w": 3}]

CASES = [
    Case(
        name="dense_bias_relu",
        source="""
def @main(%x: Tensor[(n, 8), float32], %w: Tensor[(4, 8), float32], %b: Tensor[(4,), float32]) -> Tensor[(n, 4), float32] {
  nn.relu(nn.bias_add(nn.dense(%x, %w), %b, axis=-1))
}
""",
        reference=lambda x, w, b: np.maximum(x @ w.T + b, 0),
        bindings=[{"n": 0}, {"n": 1}, {"n": 5}, {"n": 17}],
    ),
    Case(
        name="dense_rank3_int32",
        source="""
def @main(%x: Tensor[(b, s, 4), int32], %w: Tensor[(3, 4), int32]) -> Tensor[(b, s, 3), int32] {
  nn.dense(%x, %w)
}
""",
        reference=lambda x, w: x @ w.T,
        bindings=[{"b": 0, "s": 2}, {"b": 1, "s": 1}, {"b": 2, "s": 5}, {"b": 3, "s": 0}],
    ),
    Case(
        name="matmul_numpy_semantics",
        source="""
def @main(%a: Tensor[(n, k), float32], %b: Tensor[(k, m), float32], %v: Tensor[(k,), float32], %t: Tensor[(2, n, k), float32], %bb: Tensor[(2, k, m), float32]) {
  (nn.matmul(%a, %b), nn.matmul(%a, %v), nn.matmul(%v, %b), nn.matmul(%t, %b), nn.matmul(expand_dims(%a, axis=0), %bb), nn.matmul(%v, %v))
}
""",
        reference=lambda a, b, v, t, bb: (a @ b, a @ v, v @ b, t @ b, a[None] @ bb, v @ v),
        bindings=[
            {"n": 0, "k": 3, "m": 2},
            {"n": 1, "k": 1, "m": 1},
            {"n": 4, "k": 5, "m": 3},
            {"n": 3, "k": 0, "m": 2},
        ],
    ),
    Case(
        name="batch_matmul_transposes_and_broadcast",
        source="""
def @main(%x: Tensor[(b, n, k), float32], %y: Tensor[(b, m, k), float32], %z: Tensor[(b, k, m), float32], %w1: Tensor[(1, m, k), float32]) {
  (nn.batch_matmul(%x, %y), nn.batch_matmul(%x, %z, transpose_b=False), nn.batch_matmul(transpose(%x, axes=[0, 2, 1]), %y, transpose_a=True), nn.batch_matmul(%x, %w1), nn.batch_matmul(%z, %x, transpose_a=True, transpose_b=True))
}
""",
        reference=lambda x, y, z, w1: (
            x @ y.transpose(0, 2, 1),
            x @ z,
            x @ y.transpose(0, 2, 1),
            x @ w1.transpose(0, 2, 1),
            z.transpose(0, 2, 1) @ x.transpose(0, 2, 1),
        ),
        bindings=[
            {"b": 0, "n": 2, "k": 3, "m": 2},
            {"b": 1, "n": 1, "k": 1, "m": 1},
            {"b": 3, "n": 4, "k": 2, "m": 5},
            {"b": 2, "n": 0, "k": 4, "m": 3},
        ],
    ),
    Case(
        name="bias_add_axes_and_dtypes",
        source="""
def @main(%x: Tensor[(n, 3, h, w), float32], %bx: Tensor[(3,), float32], %y: Tensor[(n, m), int64], %by: Tensor[(m,), int64], %bn: Tensor[(n,), int64]) {
  (nn.bias_add(%x, %bx), nn.bias_add(%y, %by, axis=-1), nn.bias_add(%y, %bn, axis=0))
}
""",
        reference=lambda x, bx, y, by, bn: (x + bx[:, None, None], y + by, y + bn[:, None]),
        bindings=[
            {"n": 0, "h": 2, "w": 2, "m": 3},
            {"n": 1, "h": 1, "w": 1, "m": 1},
            {"n": 3, "h": 4, "w": 5, "m": 0},
        ],
    ),
    Case(
        name="softmax_log_softmax_axes",
        source="""
def @main(%x: Tensor[(n, m), float32], %y: Tensor[(n, 3, m), float64]) {
  (nn.softmax(%x), nn.softmax(%x, axis=0), nn.log_softmax(%x, axis=-1), nn.log_softmax(%y, axis=1), nn.softmax(%y, axis=-2))
}
""",
        reference=lambda x, y: (
            softmax(x),
            softmax(x, axis=0),
            log_softmax(x),
            log_softmax(y, axis=1),
            softmax(y, axis=-2),
        ),
        bindings=[{"n": 0, "m": 3}, {"n": 1, "m": 1}, {"n": 4, "m": 0}, {"n": 6, "m": 5}],
        inputs={"x": uniform(-20.0, 20.0)},
    ),
    Case(
        name="layer_norm_axes_and_epsilon",
        source="""
def @main(%x: Tensor[(n, 6), float32], %g: Tensor[(6,), float32], %b: Tensor[(6,), float32], %y: Tensor[(n, 3, 4), float64], %g2: Tensor[(3,), float64], %b2: Tensor[(3,), float64]) {
  (nn.layer_norm(%x, %g, %b), nn.layer_norm(%y, %g2, %b2, axis=1, epsilon=0.001))
}
""",
        reference=lambda x, g, b, y, g2, b2: (
            layer_norm(x, g, b),
            layer_norm(y, g2, b2, axis=1, eps=1e-3),
        ),
        bindings=[{"n": 0}, {"n": 1}, {"n": 5}, {"n": 12}],
    ),
    Case(
        name="rms_norm_rows_axes_and_epsilon",
        source="""
def @main(%x: Tensor[(n, 6), float32], %g: Tensor[(6,), float32], %y: Tensor[(n, 3, 4), float64], %g2: Tensor[(3,), float64], %z: Tensor[(1, 1, n), float32], %g3: Tensor[(n,), float32]) {
  (nn.rms_norm(%x, %g), nn.rms_norm(%y, %g2, axis=1, epsilon=0.001), nn.rms_norm(%z, %g3, epsilon=1e-06))
}
""",
        reference=lambda x, g, y, g2, z, g3: (
            rms_norm(x, g),
            rms_norm(y, g2, axis=1, eps=1e-3),
            rms_norm(z, g3, eps=1e-6),
        ),
        bindings=[{"n": 0}, {"n": 1}, {"n": 5}, {"n": 12}],
    ),
    Case(
        name="conv2d_padding_forms",
        source="""
def @main(%x: Tensor[(n, 3, h, w), float32], %k: Tensor[(4, 3, 3, 3), float32]) {
  (nn.conv2d(%x, %k, padding=[1, 1, 1, 1]), nn.conv2d(%x, %k, padding=[0, 1]))
}
""",
        reference=lambda x, k: (conv2d(x, k, padding=(1, 1, 1, 1)), conv2d(x, k, padding=(0, 1))),
        bindings=IMG,
    ),
    Case(
        name="conv2d_strided_dilated_asymmetric_padding",
        source="""
def @main(%x: Tensor[(n, 2, h, w), float32], %k: Tensor[(3, 2, 2, 3), float32]) {
  nn.conv2d(%x, %k, strides=[2, 1], padding=[0, 1, 2, 0], dilation=[1, 2])
}
""",
        reference=lambda x, k: conv2d(x, k, (2, 1), (0, 1, 2, 0), (1, 2)),
        bindings=[{"n": 1, "h": 0, "w": 4}, {"n": 0, "h": 3, "w": 5}, {"n": 2, "h": 6, "w": 8}],
    ),
    Case(
        name="conv2d_groups_and_depthwise",
        source="""
def @main(%x: Tensor[(n, 4, h, w), float32], %k2: Tensor[(6, 2, 3, 3), float32], %kd: Tensor[(4, 1, 3, 3), float32]) {
  (nn.conv2d(%x, %k2, padding=[1, 1], groups=2), nn.conv2d(%x, %kd, padding=[1, 1, 1, 1], groups=4))
}
""",
        reference=lambda x, k2, kd: (
            conv2d(x, k2, padding=(1, 1), groups=2),
            conv2d(x, kd, padding=(1, 1), groups=4),
        ),
        bindings=[{"n": 0, "h": 2, "w": 3}, {"n": 1, "h": 1, "w": 1}, {"n": 2, "h": 5, "w": 4}],
    ),
    Case(
        name="conv2d_1x1_float64",
        source="""
def @main(%x: Tensor[(n, 5, h, w), float64], %k: Tensor[(2, 5, 1, 1), float64]) -> Tensor[(n, 2, h, w), float64] {
  nn.conv2d(%x, %k)
}
""",
        reference=lambda x, k: conv2d(x, k),
        bindings=[{"n": 0, "h": 2, "w": 2}, {"n": 1, "h": 1, "w": 1}, {"n": 3, "h": 4, "w": 6}],
    ),
    Case(
        name="conv3d_strided_padded_dilated_grouped",
        source="""
def @main(%x: Tensor[(n, 4, d, h, w), float32], %k: Tensor[(6, 2, 2, 3, 1), float32], %g: Tensor[(2, 4, 1, 1, 2), float32]) {
  (nn.conv3d(%x, %k, strides=[2, 1, 1], padding=[1, 1, 0, 0, 1, 0], dilation=[2, 1, 1], groups=2), nn.conv3d(%x, %g))
}
""",
        reference=lambda x, k, g: (
            conv3d(x, k, (2, 1, 1), (1, 1, 0, 0, 1, 0), (2, 1, 1), 2),
            conv3d(x, g),
        ),
        bindings=[
            {"n": 0, "d": 2, "h": 1, "w": 2},
            {"n": 1, "d": 3, "h": 1, "w": 2},
            {"n": 2, "d": 5, "h": 3, "w": 4},
        ],
    ),
    Case(
        name="conv2d_transpose_strided_cropped_grouped",
        source="""
def @main(%x: Tensor[(n, 4, h, w), float32], %k: Tensor[(4, 3, 3, 3), float32], %g: Tensor[(4, 1, 2, 3), float32]) {
  (nn.conv2d_transpose(%x, %k, strides=[2, 3], padding=[1, 0, 2, 1], output_padding=[1, 2]), nn.conv2d_transpose(%x, %g, padding=[0, 1], dilation=[2, 1], groups=2))
}
""",
        reference=lambda x, k, g: (
            conv2d_transpose(x, k, (2, 3), (1, 0, 2, 1), (1, 2)),
            conv2d_transpose(x, g, padding=(0, 1), dilation=(2, 1), groups=2),
        ),
        bindings=[{"n": 0, "h": 1, "w": 2}, {"n": 1, "h": 1, "w": 1}, {"n": 2, "h": 5, "w": 4}],
    ),
    Case(
        name="pools_with_dilated_windows",
        source="""
def @main(%x: Tensor[(n, 2, h, w), float32]) {
  (nn.max_pool2d(%x, pool_size=[2, 2], padding=[1, 1], dilation=[2, 2]), nn.avg_pool2d(%x, pool_size=[2, 3], strides=[2, 1], padding=[1, 0, 1, 2], dilation=[3, 2]))
}
""",
        reference=lambda x: (
            max_pool2d(x, (2, 2), padding=(1, 1), dilation=(2, 2)),
            avg_pool2d(x, (2, 3), (2, 1), (1, 0, 1, 2), (3, 2)),
        ),
        bindings=[{"n": 0, "h": 3, "w": 3}, {"n": 1, "h": 4, "w": 5}, {"n": 2, "h": 7, "w": 6}],
    ),
    Case(
        name="max_pool2d_padding_never_wins",
        source="""
def @main(%x: Tensor[(n, 2, h, w), float32]) {
  (nn.max_pool2d(%x, pool_size=[2, 2], strides=[2, 2]), nn.max_pool2d(%x, pool_size=[3, 3], padding=[1, 1]), nn.max_pool2d(%x, pool_size=[2, 3], strides=[1, 2], padding=[1, 0, 0, 2]))
}
""",
        reference=lambda x: (
            max_pool2d(x, (2, 2), (2, 2)),
            max_pool2d(x, (3, 3), padding=(1, 1)),
            max_pool2d(x, (2, 3), (1, 2), (1, 0, 0, 2)),
        ),
        bindings=[{"n": 0, "h": 2, "w": 2}, {"n": 1, "h": 3, "w": 5}, {"n": 2, "h": 8, "w": 7}],
        inputs={"x": uniform(-5.0, -1.0)},
    ),
    Case(
        name="avg_pool2d_count_excludes_padding",
        source="""
def @main(%x: Tensor[(n, 3, h, w), float32]) {
  (nn.avg_pool2d(%x, pool_size=[3, 3], padding=[1, 1, 1, 1]), nn.avg_pool2d(%x, pool_size=[2, 2], strides=[2, 2], padding=[0, 1, 1, 0]))
}
""",
        reference=lambda x: (
            avg_pool2d(x, (3, 3), padding=(1, 1, 1, 1)),
            avg_pool2d(x, (2, 2), (2, 2), (0, 1, 1, 0)),
        ),
        bindings=[{"n": 0, "h": 1, "w": 3}, {"n": 1, "h": 1, "w": 1}, {"n": 2, "h": 6, "w": 5}],
        inputs={"x": uniform(1.0, 3.0)},
    ),
    Case(
        name="global_avg_and_max_pool",
        source="""
def @main(%x: Tensor[(n, c, h, w), float32]) -> (Tensor[(n, c, 1, 1), float32], Tensor[(n, c, 1, 1), float32]) {
  (nn.global_avg_pool2d(%x), nn.global_max_pool2d(%x))
}
""",
        reference=lambda x: (x.mean(axis=(2, 3), keepdims=True), x.max(axis=(2, 3), keepdims=True)),
        bindings=[
            {"n": 0, "c": 2, "h": 1, "w": 1},
            {"n": 1, "c": 1, "h": 3, "w": 2},
            {"n": 3, "c": 4, "h": 5, "w": 6},
        ],
    ),
    Case(
        name="mlp_dense_relu_log_softmax",
        source="""
def @main(%x: Tensor[(n, 6), float32], %w1: Tensor[(8, 6), float32], %b1: Tensor[(8,), float32], %w2: Tensor[(3, 8), float32], %b2: Tensor[(3,), float32]) -> Tensor[(n, 3), float32] {
  %h = nn.relu(nn.bias_add(nn.dense(%x, %w1), %b1));
  %o = nn.bias_add(nn.dense(%h, %w2), %b2, axis=1);
  nn.log_softmax(%o)
}
""",
        reference=_mlp,
        bindings=[{"n": 0}, {"n": 1}, {"n": 7}, {"n": 32}],
    ),
    Case(
        name="attention_dynamic_batch_and_sequence",
        source="""
def @main(%x: Tensor[(b, s, 8), float32], %wq: Tensor[(8, 8), float32], %wk: Tensor[(8, 8), float32], %wv: Tensor[(8, 8), float32]) -> Tensor[(b, s, 8), float32] {
  %shape = shape_of(%x);
  %flat = reshape(%x, newshape=[-1, 8]);
  %q = dyn.reshape(nn.dense(%flat, %wq), %shape);
  %k = dyn.reshape(nn.dense(%flat, %wk), %shape);
  %v = dyn.reshape(nn.dense(%flat, %wv), %shape);
  %scores = multiply(nn.batch_matmul(%q, %k), 0.35355339f);
  %out = nn.batch_matmul(nn.softmax(%scores, axis=-1), %v, transpose_b=False);
  reshape(%out, newshape=[0, 0, 8])
}
""",
        reference=_attention,
        # No s = 0 with b > 0: shape_of(x) is then [b, 0, 8], and dyn.reshape reads its 0 as
        # "copy the input's dim 1" (8), as reshape's 0 does, so the element counts differ.
        bindings=[{"b": 0, "s": 3}, {"b": 1, "s": 1}, {"b": 2, "s": 5}, {"b": 3, "s": 2}],
    ),
    Case(
        name="attention_op_head_layout_broadcast_kv",
        # nn.attention reading the (b, s, heads, 8) head split through its axes (views), one kv
        # head broadcast against 4 query heads (GQA's limit), an additive (b, 1, 1, s) mask.
        source="""
def @main(%q: Tensor[(b, s, 4, 8), float32], %k: Tensor[(b, s, 1, 8), float32], %v: Tensor[(b, s, 1, 8), float32], %mask: Tensor[(b, 1, 1, s), float32]) -> Tensor[(b, s, 4, 8), float32] {
  nn.attention(%q, %k, %v, %mask, scale=0.35355339, q_axes=[0, 2, 1, 3], k_axes=[0, 2, 1, 3], v_axes=[0, 2, 1, 3], out_axes=[0, 2, 1, 3])
}
""",
        reference=_attention_op,
        bindings=[{"b": 0, "s": 3}, {"b": 1, "s": 1}, {"b": 2, "s": 5}, {"b": 3, "s": 0}],
    ),
    Case(
        name="lstm_op_bidirectional_lengths",
        # nn.lstm over a dynamic sequence and batch: per-entry lengths from 0 to s (zeros in Y
        # past them), initial states, Y consumed by an elementwise op, the states returned.
        source="""
def @main(%x: Tensor[(s, b, 3), float32], %w: Tensor[(2, 16, 3), float32], %r: Tensor[(2, 16, 4), float32], %bias: Tensor[(2, 32), float32], %lens: Tensor[(b,), int32], %h0: Tensor[(2, b, 4), float32], %c0: Tensor[(2, b, 4), float32]) -> (Tensor[(s, 2, b, 4), float32], Tensor[(2, b, 4), float32], Tensor[(2, b, 4), float32]) {
  %0 = nn.lstm(%x, %w, %r, %bias, %lens, %h0, %c0, 0f, direction="bidirectional");
  (nn.relu(%0.0), %0.1, %0.2)
}
""",
        reference=_lstm_lengths,
        bindings=[{"s": 0, "b": 2}, {"s": 1, "b": 1}, {"s": 5, "b": 3}, {"s": 4, "b": 0}],
        inputs={
            "lens": lambda rng, shape, dtype, b: rng.integers(0, b["s"] + 1, shape).astype(dtype)
        },
    ),
    Case(
        name="gru_rnn_ops_batch_major_clip",
        # nn.gru batch-major (layout=1) with linear_before_reset, its Y (b, s, 1, 4) read by a
        # reverse relu nn.rnn with clip (absent optional operands as 0-d constants).
        source="""
def @main(%x: Tensor[(b, s, 3), float32], %wg: Tensor[(1, 12, 3), float32], %rg: Tensor[(1, 12, 4), float32], %bg: Tensor[(1, 24), float32], %wr: Tensor[(1, 4, 4), float32], %rr: Tensor[(1, 4, 4), float32]) -> (Tensor[(b, s, 1, 4), float32], Tensor[(1, b, 4), float32]) {
  %g = nn.gru(%x, %wg, %rg, %bg, 0i32, 0f, layout=1, linear_before_reset=True);
  %y = %g.0;
  %seq = transpose(reshape(%y, newshape=[0, 0, 4]), axes=[1, 0, 2]);
  %r = nn.rnn(%seq, %wr, %rr, 0f, 0i32, 0f, direction="reverse", clip=1.5, act_f="relu");
  (%y, %r.1)
}
""",
        reference=_gru_rnn_batch_major,
        bindings=[{"b": 2, "s": 0}, {"b": 1, "s": 1}, {"b": 3, "s": 5}, {"b": 0, "s": 2}],
    ),
    Case(
        name="cnn_conv_pool_flatten_dense",
        source="""
def @main(%x: Tensor[(n, 1, 8, 8), float32], %k: Tensor[(4, 1, 3, 3), float32], %w: Tensor[(10, 64), float32]) -> Tensor[(n, 10), float32] {
  %h = nn.relu(nn.conv2d(%x, %k, padding=[1, 1, 1, 1]));
  %p = nn.max_pool2d(%h, pool_size=[2, 2], strides=[2, 2]);
  nn.softmax(nn.dense(nn.batch_flatten(%p), %w), axis=1)
}
""",
        reference=_cnn,
        bindings=[{"n": 0}, {"n": 1}, {"n": 3}],
    ),
    Case(
        name="dft_fft_ifft_rfft_irfft",
        # dft of a real signal one-sided (rfft, n // 2 + 1 bins of a symbolic n), of a complex
        # one inverse and zero-padded or cut to 6 along axis 0, and the irfft back.
        source="""
def @main(%x: Tensor[(b, n, 1), float32], %z: Tensor[(n, 3, 2), float64]) {
  %r = dft(%x, axis=1, onesided=True);
  (%r, dft(%z, axis=0, length=6, inverse=True), dft(%r, axis=1, inverse=True, onesided=True))
}
""",
        reference=_dft_ops,
        bindings=[{"b": 0, "n": 4}, {"b": 1, "n": 2}, {"b": 2, "n": 7}, {"b": 3, "n": 10}],
        atol=1e-4,
    ),
]
