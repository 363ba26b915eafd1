"""Neural-network kernels: dense and matmul, bias, softmax, layer norm, convolution, pooling.

Layouts: NCHW data, OIHW weights; padding is ``[top, left, bottom, right]`` (two entries
``[h, w]`` pad both sides alike). Convolution and pooling read windows through a strided view of
the (padded) input, so the only temporary is the padded copy when there is padding.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from numpy.lib.stride_tricks import as_strided

from .registry import Kernel, register_kernel


def _dense(data: np.ndarray, weight: np.ndarray, out: np.ndarray) -> None:
    np.matmul(data, weight.T, out=out)


@register_kernel("nn.dense")
def dense(attrs: Mapping[str, Any]) -> Kernel:
    """``data @ weight.T`` (``np.matmul`` with ``out=``)."""
    return _dense


@register_kernel("nn.matmul")
def matmul(attrs: Mapping[str, Any]) -> Kernel:
    """``a @ b`` (``np.matmul``: batched and broadcasting, with ``out=``)."""
    return np.matmul


@register_kernel("nn.batch_matmul")
def batch_matmul(attrs: Mapping[str, Any]) -> Kernel:
    """``x @ y`` on (b, m, k) x (b, k, n), each optionally transposed in its last two axes."""
    ta, tb = attrs["transpose_a"], attrs["transpose_b"]

    def kernel(x: np.ndarray, y: np.ndarray, out: np.ndarray) -> None:
        np.matmul(x.swapaxes(-1, -2) if ta else x, y.swapaxes(-1, -2) if tb else y, out=out)

    return kernel


def _along(v: np.ndarray, axis: int, ndim: int) -> np.ndarray:
    """``v`` (1-d) shaped to broadcast along ``axis`` of a rank-``ndim`` tensor."""
    axis %= ndim
    return v.reshape(v.shape + (1,) * (ndim - axis - 1))


@register_kernel("nn.bias_add")
def bias_add(attrs: Mapping[str, Any]) -> Kernel:
    """``data + bias`` with the 1-d bias laid along ``axis``."""
    axis = attrs["axis"]

    def kernel(data: np.ndarray, bias: np.ndarray, out: np.ndarray) -> None:
        np.add(data, _along(bias, axis, data.ndim), out)

    return kernel


@register_kernel("nn.softmax")
def softmax(attrs: Mapping[str, Any]) -> Kernel:
    """Softmax along ``axis``, in place in ``out`` (max-shifted; the temporaries are the reduced
    max and sum)."""
    axis = attrs["axis"]

    def kernel(x: np.ndarray, out: np.ndarray) -> None:
        if x.size == 0:
            return
        np.subtract(x, np.max(x, axis=axis, keepdims=True), out)
        np.exp(out, out)
        np.divide(out, np.sum(out, axis=axis, keepdims=True, dtype=_acc(out)), out)

    return kernel


def _acc(x: np.ndarray) -> Any:
    """The dtype to accumulate a sum of ``x`` in: float32 for float16, whose sums of many
    terms lose the last digits that a log of the sum then magnifies."""
    return np.float32 if x.dtype == np.float16 else None


@register_kernel("nn.log_softmax")
def log_softmax(attrs: Mapping[str, Any]) -> Kernel:
    """``x - max - log(sum(exp(x - max)))`` along ``axis``, written into ``out``; the sum of
    exponentials needs one temporary of the input's size."""
    axis = attrs["axis"]

    def kernel(x: np.ndarray, out: np.ndarray) -> None:
        if x.size == 0:
            return
        np.subtract(x, np.max(x, axis=axis, keepdims=True), out)
        lse = np.log(np.sum(np.exp(out), axis=axis, keepdims=True, dtype=_acc(out)))
        np.subtract(out, lse, out, casting="same_kind")

    return kernel


@register_kernel("nn.layer_norm")
def layer_norm(attrs: Mapping[str, Any]) -> Kernel:
    """``(x - mean) / sqrt(var + epsilon) * gamma + beta`` along ``axis`` (gamma and beta are
    1-d, laid along that axis); the temporaries are the reduced mean and variance."""
    axis, eps = attrs["axis"], attrs["epsilon"]

    def kernel(data: np.ndarray, gamma: np.ndarray, beta: np.ndarray, out: np.ndarray) -> None:
        if data.size == 0:
            return
        mean = np.mean(data, axis=axis, keepdims=True)
        np.subtract(data, mean, out)
        var = np.mean(np.square(out), axis=axis, keepdims=True)
        np.divide(out, np.sqrt(var + eps), out)
        np.multiply(out, _along(gamma, axis, data.ndim), out)
        np.add(out, _along(beta, axis, data.ndim), out)

    return kernel


def padding4(padding: Sequence[int]) -> tuple[int, int, int, int]:
    """``[top, left, bottom, right]`` from 4 entries, or from ``[h, w]`` (both sides alike)."""
    if len(padding) == 4:
        return (padding[0], padding[1], padding[2], padding[3])
    if len(padding) == 2:
        return (padding[0], padding[1], padding[0], padding[1])
    if len(padding) == 1:
        return (padding[0],) * 4
    raise ValueError(f"padding must have 1, 2 or 4 entries, got {tuple(padding)}")


def _pad_hw(x: np.ndarray, pad: tuple[int, int, int, int], value: float) -> np.ndarray:
    top, left, bottom, right = pad
    if not any(pad):
        return x
    if min(pad) < 0:
        raise ValueError(f"padding {pad} has a negative entry")
    n, c, h, w = x.shape
    padded = np.full((n, c, h + top + bottom, w + left + right), value, dtype=x.dtype)
    padded[:, :, top : top + h, left : left + w] = x
    return padded


def windows(
    x: np.ndarray,
    kernel: tuple[int, int],
    strides: Sequence[int],
    dilation: Sequence[int],
    out_hw: tuple[int, int],
) -> np.ndarray:
    """A (N, C, OH, OW, KH, KW) strided view of the NCHW ``x`` (no copy)."""
    sn, sc, sh, sw = x.strides
    n, c = x.shape[:2]
    return as_strided(
        x,
        shape=(n, c, out_hw[0], out_hw[1], kernel[0], kernel[1]),
        strides=(sn, sc, sh * strides[0], sw * strides[1], sh * dilation[0], sw * dilation[1]),
        writeable=False,
    )


def _check_hw(
    kind: str,
    x: np.ndarray,
    k: tuple[int, int],
    strides: Sequence[int],
    dilation: Sequence[int],
    out: np.ndarray,
) -> tuple[int, int]:
    if x.ndim != 4 or len(strides) != 2 or len(dilation) != 2 or min(*strides, *dilation) < 1:
        raise ValueError(
            f"{kind}: expected NCHW data and 2 positive strides/dilations, got "
            f"shape {x.shape}, strides {tuple(strides)}, dilation {tuple(dilation)}"
        )
    oh = (x.shape[2] - dilation[0] * (k[0] - 1) - 1) // strides[0] + 1
    ow = (x.shape[3] - dilation[1] * (k[1] - 1) - 1) // strides[1] + 1
    if (oh, ow) != tuple(out.shape[2:]) or min(oh, ow) < 0:
        raise ValueError(f"{kind}: output H, W should be {(oh, ow)}, got {out.shape[2:]}")
    return oh, ow


@register_kernel("nn.conv2d")
def conv2d(attrs: Mapping[str, Any]) -> Kernel:
    """2-d convolution, NCHW x OIHW, with strides, dilation, padding and groups.

    Windows are a strided view of the (padded) input, contracted with the weight by
    ``np.einsum(..., out=)`` per group into a view of ``out``; the padded input is a temporary.
    """
    strides, dilation, groups = attrs["strides"], attrs["dilation"], attrs["groups"]
    pad = padding4(attrs["padding"])

    def kernel(data: np.ndarray, weight: np.ndarray, out: np.ndarray) -> None:
        x = _pad_hw(data, pad, 0)
        o, cg, kh, kw = weight.shape
        if groups < 1 or data.shape[1] != cg * groups or o % groups:
            raise ValueError(
                f"nn.conv2d: data {data.shape} and weight {weight.shape} do not fit groups={groups}"
            )
        oh, ow = _check_hw("nn.conv2d", x, (kh, kw), strides, dilation, out)
        win = windows(x, (kh, kw), strides, dilation, (oh, ow))
        og = o // groups
        for g in range(groups):
            np.einsum(
                "nchwij,ocij->nohw",
                win[:, g * cg : (g + 1) * cg],
                weight[g * og : (g + 1) * og],
                out=out[:, g * og : (g + 1) * og],
            )

    return kernel


def _pool_setup(
    attrs: Mapping[str, Any],
) -> tuple[tuple[int, int], Sequence[int], tuple[int, int, int, int]]:
    size = attrs["pool_size"]
    if len(size) == 1:
        size = (size[0], size[0])
    if len(size) != 2:
        raise ValueError(f"pool_size must have 2 entries, got {tuple(size)}")
    return (size[0], size[1]), attrs["strides"], padding4(attrs["padding"])


@register_kernel("nn.max_pool2d")
def max_pool2d(attrs: Mapping[str, Any]) -> Kernel:
    """Max pooling (NCHW): padding is -inf, so it never wins; windows are a strided view,
    reduced with ``np.max(..., out=)``."""
    size, strides, pad = _pool_setup(attrs)

    def kernel(data: np.ndarray, out: np.ndarray) -> None:
        x = _pad_hw(data, pad, -np.inf)
        oh, ow = _check_hw("nn.max_pool2d", x, size, strides, (1, 1), out)
        np.max(windows(x, size, strides, (1, 1), (oh, ow)), axis=(4, 5), out=out)

    return kernel


@register_kernel("nn.avg_pool2d")
def avg_pool2d(attrs: Mapping[str, Any]) -> Kernel:
    """Average pooling (NCHW), padding excluded from the count: the window sums of the
    zero-padded input divided by the number of real elements in each window."""
    size, strides, pad = _pool_setup(attrs)

    def kernel(data: np.ndarray, out: np.ndarray) -> None:
        x = _pad_hw(data, pad, 0)
        oh, ow = _check_hw("nn.avg_pool2d", x, size, strides, (1, 1), out)
        np.sum(windows(x, size, strides, (1, 1), (oh, ow)), axis=(4, 5), out=out)
        ones = _pad_hw(np.ones((1, 1, *data.shape[2:]), dtype=np.float64), pad, 0)
        counts = windows(ones, size, strides, (1, 1), (oh, ow)).sum(axis=(4, 5))
        np.divide(out, counts, out, casting="unsafe")

    return kernel


def _global_avg(data: np.ndarray, out: np.ndarray) -> None:
    np.mean(data, axis=(2, 3), keepdims=True, out=out)


def _global_max(data: np.ndarray, out: np.ndarray) -> None:
    np.max(data, axis=(2, 3), keepdims=True, out=out)


@register_kernel("nn.global_avg_pool2d")
def global_avg_pool2d(attrs: Mapping[str, Any]) -> Kernel:
    """Mean over H and W keeping them as 1-dims (``np.mean`` with ``out=``)."""
    return _global_avg


@register_kernel("nn.global_max_pool2d")
def global_max_pool2d(attrs: Mapping[str, Any]) -> Kernel:
    """Max over H and W keeping them as 1-dims (``np.max`` with ``out=``)."""
    return _global_max
