"""The reference interpreter's neural-network ops, as plain numpy loops and einsums.

Convolution and pooling loop over the kernel window (one strided slice per kernel position) and
accumulate in float64: slow but obviously right, and independent of ``vm.kernels``' strided
views. Padding is ``[top, left, bottom, right]`` or ``[h, w]`` (``design/shapes.md``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np


def _padding(padding: Sequence[int]) -> tuple[int, int, int, int]:
    p = [int(v) for v in padding]
    if len(p) == 2:
        p = [p[0], p[1], p[0], p[1]]
    return p[0], p[1], p[2], p[3]


def _along(v: np.ndarray, axis: int, ndim: int) -> np.ndarray:
    """A 1-d ``v`` shaped to broadcast along ``axis`` of a rank-``ndim`` tensor."""
    shape = [1] * ndim
    shape[axis % ndim] = v.shape[0]
    return v.reshape(shape)


def _softmax(x: np.ndarray, axis: int) -> np.ndarray:
    shifted = x.astype(np.float64) - np.max(x, axis=axis, keepdims=True, initial=-np.inf)
    e = np.exp(shifted)
    return np.asarray(e / np.sum(e, axis=axis, keepdims=True))


def _log_softmax(x: np.ndarray, axis: int) -> np.ndarray:
    shifted = x.astype(np.float64) - np.max(x, axis=axis, keepdims=True, initial=-np.inf)
    return np.asarray(shifted - np.log(np.sum(np.exp(shifted), axis=axis, keepdims=True)))


def _layer_norm(ins: Sequence[Any], attrs: Mapping[str, Any]) -> np.ndarray:
    x, gamma, beta = (np.asarray(v, np.float64) for v in ins)
    axis = attrs["axis"]
    mean = np.mean(x, axis=axis, keepdims=True)
    var = np.mean((x - mean) ** 2, axis=axis, keepdims=True)
    norm = (x - mean) / np.sqrt(var + attrs["epsilon"])
    return np.asarray(norm * _along(gamma, axis, x.ndim) + _along(beta, axis, x.ndim))


def _rms_norm(ins: Sequence[Any], attrs: Mapping[str, Any]) -> np.ndarray:
    x, gamma = (np.asarray(v, np.float64) for v in ins)
    axis = attrs["axis"]
    square = np.mean(x * x, axis=axis, keepdims=True)
    return np.asarray(x / np.sqrt(square + attrs["epsilon"]) * _along(gamma, axis, x.ndim))


def _attention(ins: Sequence[Any], attrs: Mapping[str, Any]) -> np.ndarray:
    """Written out as the unfused ops compute it: matmul, scale, add the mask, softmax (its NaNs
    zeroed with ``nan_to_zero``), matmul (each operand permuted first, the result permuted
    last)."""

    def permuted(x: Any, axes: Any) -> np.ndarray:
        return np.asarray(x if axes is None else np.transpose(x, axes))

    q, k, v = (permuted(x, attrs[f"{n}_axes"]) for x, n in zip(ins[:3], "qkv", strict=True))
    dtype = q.dtype
    scores = np.matmul(q, np.swapaxes(k, -1, -2)) * attrs["scale"] + np.asarray(ins[3])
    probs = _softmax(scores, -1)
    if attrs.get("nan_to_zero", False):
        probs = np.where(np.isnan(probs), 0.0, probs)
    out = np.matmul(probs, v.astype(np.float64)).astype(dtype)
    return permuted(out, attrs["out_axes"])


_ACTIVATIONS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "sigmoid": lambda v: 1 / (1 + np.exp(-v)),
    "tanh": np.tanh,
    "relu": lambda v: np.maximum(v, 0),
}


def _cell_step(
    cell: str,
    attrs: Mapping[str, Any],
    act: Callable[..., np.ndarray],
    xw: np.ndarray,
    hr: np.ndarray,
    h: np.ndarray,
    c: np.ndarray,
    r: np.ndarray,
    rb: np.ndarray,
    peep: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """One step of one batch entry: ``xw = W x + Wb``, ``hr = R h + Rb``; the new ``(h, c)``."""
    k = len(h)
    if cell == "rnn":
        return act("f", xw + hr), c
    if cell == "gru":
        z = act("f", xw[:k] + hr[:k])
        reset = act("f", xw[k : 2 * k] + hr[k : 2 * k])
        if attrs["linear_before_reset"]:
            cand = xw[2 * k :] + reset * hr[2 * k :]
        else:
            cand = xw[2 * k :] + r[2 * k :] @ (reset * h) + rb[2 * k :]
        return (1 - z) * act("g", cand) + z * h, c
    g = xw + hr
    i = act("f", g[:k] + peep[0] * c)
    f = 1 - i if attrs["input_forget"] else act("f", g[2 * k : 3 * k] + peep[2] * c)
    c = f * c + i * act("g", g[3 * k :])
    o = act("f", g[k : 2 * k] + peep[1] * c)
    return o * act("h", c, clipped=False), c


def _recurrent(cell: str) -> Callable[[Sequence[Any], Mapping[str, Any]], tuple[np.ndarray, ...]]:
    """ONNX's LSTM (gates i, o, f, c), GRU (z, r, h) or RNN, one batch entry and step at a time in
    float64: an entry's steps are ``0 .. len - 1`` (reverse: down from ``len - 1``), its ``Y``
    rows past ``len`` are zeros, its final states those after its last step (zeros for
    ``len == 0``, as onnxruntime gives). A 0-d optional operand is absent."""

    def impl(ins: Sequence[Any], attrs: Mapping[str, Any]) -> tuple[np.ndarray, ...]:
        arrays = [np.asarray(a) for a in ins]
        dtype = arrays[0].dtype
        x, w, r, b, lens, h0 = (a.astype(np.float64) for a in arrays[:6])
        c0, p = (a.astype(np.float64) for a in arrays[6:8]) if cell == "lstm" else (None, None)
        layout = attrs["layout"]
        if layout:
            x = x.swapaxes(0, 1)
            h0 = h0.swapaxes(0, 1) if h0.ndim else h0
            c0 = c0.swapaxes(0, 1) if c0 is not None and c0.ndim else c0
        seq, batch, _ = x.shape
        dirs, gh, hidden = r.shape
        clip = attrs["clip"]

        def act(key: str, v: np.ndarray, clipped: bool = True) -> np.ndarray:
            if clip is not None and clipped:
                v = np.clip(v, -clip, clip)
            return _ACTIVATIONS[attrs[f"act_{key}"]](v)

        y = np.zeros((seq, dirs, batch, hidden))
        y_h = np.zeros((dirs, batch, hidden))
        y_c = np.zeros((dirs, batch, hidden))
        steps = [int(n) for n in lens] if lens.ndim else [seq] * batch
        for d, reverse in enumerate(
            {"forward": [False], "reverse": [True], "bidirectional": [False, True]}[
                attrs["direction"]
            ]
        ):
            wb, rb = (b[d, :gh], b[d, gh:]) if b.ndim else (np.zeros(gh), np.zeros(gh))
            for n in range(batch):
                peep = p[d].reshape(3, hidden) if p is not None and p.ndim else np.zeros((3, 1))
                h = h0[d, n] if h0.ndim else np.zeros(hidden)
                c = c0[d, n] if c0 is not None and c0.ndim else np.zeros(hidden)
                order = range(steps[n] - 1, -1, -1) if reverse else range(steps[n])
                for t in order:
                    xw = w[d] @ x[t, n] + wb
                    hr = r[d] @ h + rb
                    h, c = _cell_step(cell, attrs, act, xw, hr, h, c, r[d], rb, peep)
                    y[t, d, n] = h
                if steps[n]:
                    y_h[d, n], y_c[d, n] = h, c
        outs = [y, y_h, y_c] if cell == "lstm" else [y, y_h]
        if layout:
            outs = [y.transpose(2, 0, 1, 3), *(s.swapaxes(0, 1) for s in outs[1:])]
        return tuple(o.astype(dtype) for o in outs)

    return impl


def _batch_matmul(ins: Sequence[Any], attrs: Mapping[str, Any]) -> np.ndarray:
    x, y = ins
    if attrs["transpose_a"]:
        x = np.swapaxes(x, 1, 2)
    if attrs["transpose_b"]:
        y = np.swapaxes(y, 1, 2)
    return np.asarray(np.matmul(x, y))


def _windows(
    x: np.ndarray,
    kernel: tuple[int, int],
    strides: Sequence[int],
    dilation: Sequence[int],
    out_hw: tuple[int, int],
) -> Iterator[tuple[int, int, np.ndarray]]:
    """For each kernel position ``(i, j)``: the (N, C, OH, OW) input elements it meets."""
    (sh, sw), (dh, dw), (oh, ow) = strides, dilation, out_hw
    for i in range(kernel[0]):
        for j in range(kernel[1]):
            rows = slice(i * dh, i * dh + sh * oh, sh)
            cols = slice(j * dw, j * dw + sw * ow, sw)
            yield i, j, x[:, :, rows, cols]


def _out_size(size: int, k: int, stride: int, dilation: int) -> int:
    return (size - (dilation * (k - 1) + 1)) // stride + 1


def _conv2d(ins: Sequence[Any], attrs: Mapping[str, Any]) -> np.ndarray:
    data, weight = (np.asarray(v, np.float64) for v in ins)
    top, left, bottom, right = _padding(attrs["padding"])
    x = np.pad(data, [(0, 0), (0, 0), (top, bottom), (left, right)])
    groups = attrs["groups"]
    o, per_group, kh, kw = weight.shape
    strides, dilation = attrs["strides"], attrs["dilation"]
    oh = _out_size(x.shape[2], kh, strides[0], dilation[0])
    ow = _out_size(x.shape[3], kw, strides[1], dilation[1])
    out = np.zeros((x.shape[0], o, oh, ow))
    o_per_group = o // groups
    for g in range(groups):
        xs = x[:, g * per_group : (g + 1) * per_group]
        ws = weight[g * o_per_group : (g + 1) * o_per_group]
        for i, j, patch in _windows(xs, (kh, kw), strides, dilation, (oh, ow)):
            out[:, g * o_per_group : (g + 1) * o_per_group] += np.einsum(
                "nchw,oc->nohw", patch, ws[:, :, i, j]
            )
    return out


def _conv3d(ins: Sequence[Any], attrs: Mapping[str, Any]) -> np.ndarray:
    """Each kernel position (i, j, k) adds its strided, dilated input block times its weights,
    per group."""
    data, weight = (np.asarray(v, np.float64) for v in ins)
    front, top, left, back, bottom, right = (int(v) for v in attrs["padding"])
    x = np.pad(data, [(0, 0), (0, 0), (front, back), (top, bottom), (left, right)])
    groups, strides, dilation = attrs["groups"], attrs["strides"], attrs["dilation"]
    o, per_group = weight.shape[:2]
    sizes = [
        _out_size(x.shape[2 + a], weight.shape[2 + a], strides[a], dilation[a]) for a in range(3)
    ]
    out = np.zeros((x.shape[0], o, *sizes))
    o_per_group = o // groups
    for g in range(groups):
        xs = x[:, g * per_group : (g + 1) * per_group]
        ws = weight[g * o_per_group : (g + 1) * o_per_group]
        for i, j, k in np.ndindex(*weight.shape[2:]):
            block = xs[
                :,
                :,
                i * dilation[0] : i * dilation[0] + strides[0] * sizes[0] : strides[0],
                j * dilation[1] : j * dilation[1] + strides[1] * sizes[1] : strides[1],
                k * dilation[2] : k * dilation[2] + strides[2] * sizes[2] : strides[2],
            ]
            out[:, g * o_per_group : (g + 1) * o_per_group] += np.einsum(
                "ncdhw,oc->nodhw", block, ws[:, :, i, j, k]
            )
    return out


def _conv2d_transpose(ins: Sequence[Any], attrs: Mapping[str, Any]) -> np.ndarray:
    """Each kernel tap adds its input plane, spread by the stride, into the full (uncropped)
    result, which padding then crops and output_padding extends with zeros at the end."""
    data, weight = (np.asarray(v, np.float64) for v in ins)
    top, left, bottom, right = _padding(attrs["padding"])
    (sh, sw), (dh, dw) = attrs["strides"], attrs["dilation"]
    ph, pw = attrs["output_padding"]
    groups = attrs["groups"]
    n, c, h, w = data.shape
    _, og, kh, kw = weight.shape
    cg = c // groups
    oh = (h - 1) * sh - top - bottom + dh * (kh - 1) + ph + 1
    ow = (w - 1) * sw - left - right + dw * (kw - 1) + pw + 1
    full_h = max((h - 1) * sh + dh * (kh - 1) + 1, top + oh)
    full_w = max((w - 1) * sw + dw * (kw - 1) + 1, left + ow)
    full = np.zeros((n, og * groups, full_h, full_w))
    for g in range(groups):
        xs = data[:, g * cg : (g + 1) * cg]
        for i in range(kh):
            for j in range(kw):
                rows = slice(i * dh, i * dh + (h - 1) * sh + 1, sh)
                cols = slice(j * dw, j * dw + (w - 1) * sw + 1, sw)
                ws = weight[g * cg : (g + 1) * cg, :, i, j]
                full[:, g * og : (g + 1) * og, rows, cols] += np.einsum("nchw,co->nohw", xs, ws)
    return full[:, :, top : top + oh, left : left + ow]


def _pool(
    reduce: Callable[[np.ndarray, np.ndarray], np.ndarray], pad_value: float, average: bool
) -> Callable[[Sequence[Any], Mapping[str, Any]], np.ndarray]:
    def impl(ins: Sequence[Any], attrs: Mapping[str, Any]) -> np.ndarray:
        data = np.asarray(ins[0], np.float64)
        top, left, bottom, right = _padding(attrs["padding"])
        pads = [(0, 0), (0, 0), (top, bottom), (left, right)]
        x = np.pad(data, pads, constant_values=pad_value)
        real = np.pad(np.ones(data.shape[2:]), pads[2:])[None, None]  # 1 where not padding
        kh, kw = attrs["pool_size"]
        strides, dilation = attrs["strides"], attrs["dilation"]
        oh = _out_size(x.shape[2], kh, strides[0], dilation[0])
        ow = _out_size(x.shape[3], kw, strides[1], dilation[1])
        acc = np.full((x.shape[0], x.shape[1], oh, ow), pad_value)
        count = np.zeros((1, 1, oh, ow))
        for (_, _, patch), (_, _, ones) in zip(
            _windows(x, (kh, kw), strides, dilation, (oh, ow)),
            _windows(real, (kh, kw), strides, dilation, (oh, ow)),
            strict=True,
        ):
            acc = reduce(acc, patch)
            count = count + ones
        return acc / count if average else acc

    return impl


NN_OPS: dict[str, Callable[[Sequence[Any], Mapping[str, Any]], Any]] = {
    "nn.dense": lambda ins, attrs: np.matmul(ins[0], np.swapaxes(ins[1], 0, 1)),
    "nn.matmul": lambda ins, attrs: np.matmul(ins[0], ins[1]),
    "nn.batch_matmul": _batch_matmul,
    "nn.attention": _attention,
    "nn.lstm": _recurrent("lstm"),
    "nn.gru": _recurrent("gru"),
    "nn.rnn": _recurrent("rnn"),
    "nn.bias_add": lambda ins, attrs: ins[0] + _along(ins[1], attrs["axis"], ins[0].ndim),
    "nn.softmax": lambda ins, attrs: _softmax(ins[0], attrs["axis"]),
    "nn.log_softmax": lambda ins, attrs: _log_softmax(ins[0], attrs["axis"]),
    "nn.layer_norm": _layer_norm,
    "nn.rms_norm": _rms_norm,
    "nn.conv2d": _conv2d,
    "nn.conv3d": _conv3d,
    "nn.conv2d_transpose": _conv2d_transpose,
    "nn.max_pool2d": _pool(np.maximum, -np.inf, average=False),
    "nn.avg_pool2d": _pool(np.add, 0.0, average=True),
    "nn.global_avg_pool2d": lambda ins, attrs: np.mean(ins[0], axis=(2, 3), keepdims=True),
    "nn.global_max_pool2d": lambda ins, attrs: np.max(ins[0], axis=(2, 3), keepdims=True),
}
