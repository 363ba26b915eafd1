"""Convolution and pooling: ``conv1d``/``conv2d`` (and core ATen's ``convolution``) onto
``nn.conv2d`` (a 1-d one over a height of 1), ``conv3d`` onto ``nn.conv3d``, ``max_pool2d``,
``avg_pool2d``, ``adaptive_avg_pool2d``. torch's ``padding=[ph, pw]`` is the catalogue's
``[top, left, bottom, right] = [ph, pw, ph, pw]`` (``[pd, ph, pw]`` twice for 3-d)."""

from __future__ import annotations

from typing import Any

from dynshape.builder import Value, trace

from .ops_nn import const_array
from .registry import Call, Unsupported, converter


def _n(v: Any, n: int, what: str) -> list[int]:
    """An int or a list of 1 or ``n`` ints as ``n`` ints."""
    values = [v] if isinstance(v, int) else list(v)
    if len(values) == 1:
        values = values * n
    if len(values) != n or not all(isinstance(x, int) for x in values):
        raise Unsupported(f"{what} {v!r} (expected {n} ints)")
    return values


def _conv(x: Value, w: Value, b: Any, stride: Any, padding: Any, dilation: Any, groups: int) -> Any:
    rank = x.ndim
    if isinstance(padding, str):
        raise Unsupported(f"padding={padding!r} (give the sizes)")
    if rank == 3:  # (N, C, L): over a height of 1
        s, p, d = _n(stride, 1, "stride"), _n(padding, 1, "padding"), _n(dilation, 1, "dilation")
        x4 = trace.apply("expand_dims", x, axis=2)
        array = const_array(w)
        if array is not None:
            w4 = trace.constant(array[:, :, None, :], None)
        else:
            w4 = trace.apply("expand_dims", w, axis=2)
        y = trace.apply(
            "nn.conv2d", x4, w4, strides=[1, s[0]], padding=[0, p[0], 0, p[0]],
            dilation=[1, d[0]], groups=int(groups),
        )  # fmt: skip
        y = trace.apply("squeeze", y, axis=[2])
    elif rank == 4:
        s, p, d = _n(stride, 2, "stride"), _n(padding, 2, "padding"), _n(dilation, 2, "dilation")
        y = trace.apply(
            "nn.conv2d", x, w, strides=s, padding=[p[0], p[1], p[0], p[1]], dilation=d,
            groups=int(groups),
        )  # fmt: skip
    elif rank == 5:  # (N, C, D, H, W)
        s, p, d = _n(stride, 3, "stride"), _n(padding, 3, "padding"), _n(dilation, 3, "dilation")
        y = trace.apply(
            "nn.conv3d", x, w, strides=s, padding=[*p, *p], dilation=d, groups=int(groups),
        )  # fmt: skip
    else:
        raise Unsupported(f"a convolution of rank {rank} input (3 to 5)")
    if b is None:
        return y
    shape = [-1] + [1] * (rank - 2)
    array = const_array(b)
    bias = (
        trace.constant(array.reshape(shape), None)
        if array is not None
        else (trace.apply("reshape", b, newshape=shape))
    )
    return trace.apply("add", y, bias)


@converter("aten.conv1d.default", "aten.conv2d.default", "aten.conv3d.default")
def conv(call: Call) -> Any:
    """``nn.conv2d`` (a 1-d convolution over a height of 1) or ``nn.conv3d``, bias added."""
    return _conv(
        call["input"], call["weight"], call["bias"], call["stride"], call["padding"],
        call["dilation"], call["groups"],
    )  # fmt: skip


@converter("aten.convolution.default")
def convolution(call: Call) -> Any:
    """Core ATen's convolution: as ``conv1d``/``conv2d``; transposed ones are unsupported."""
    if call["transposed"]:
        raise Unsupported("a transposed convolution")
    return _conv(
        call["input"], call["weight"], call["bias"], call["stride"], call["padding"],
        call["dilation"], call["groups"],
    )  # fmt: skip


def _pool_args(call: Call) -> tuple[list[int], list[int], list[int]]:
    if call["ceil_mode"]:
        raise Unsupported("ceil_mode=True")
    kernel = _n(call["kernel_size"], 2, "kernel_size")
    stride = call["stride"]
    strides = kernel if not stride else _n(stride, 2, "stride")
    p = _n(call["padding"], 2, "padding")
    return kernel, strides, [p[0], p[1], p[0], p[1]]


@converter("aten.max_pool2d.default", "aten.max_pool2d_with_indices.default")
def max_pool2d(call: Call) -> Any:
    """``nn.max_pool2d`` (padding is never chosen: -inf, as torch). The core-ATen form's
    indices are for training only (refused if read: ``getitem``)."""
    kernel, strides, padding = _pool_args(call)
    dilation = _n(call["dilation"], 2, "dilation")
    if call.target.endswith("with_indices.default"):
        return (_max_pool(call, kernel, strides, padding, dilation), None)
    return _max_pool(call, kernel, strides, padding, dilation)


def _max_pool(
    call: Call, kernel: list[int], strides: list[int], padding: list[int], dilation: list[int]
) -> Any:
    return trace.apply(
        "nn.max_pool2d", call["self"], pool_size=kernel, strides=strides, padding=padding,
        dilation=dilation,
    )  # fmt: skip


@converter("aten.avg_pool2d.default")
def avg_pool2d(call: Call) -> Any:
    """``nn.avg_pool2d``; with ``count_include_pad`` the padding is zeros counted in the mean
    (an ``nn.pad`` first)."""
    kernel, strides, padding = _pool_args(call)
    if call["divisor_override"] is not None:
        raise Unsupported("divisor_override")
    x = call["self"]
    if call["count_include_pad"] and any(padding):
        top, left, bottom, right = padding
        x = trace.apply("nn.pad", x, pad_width=[[0, 0], [0, 0], [top, bottom], [left, right]])
        padding = [0, 0, 0, 0]
    return trace.apply("nn.avg_pool2d", x, pool_size=kernel, strides=strides, padding=padding)


@converter("aten.adaptive_avg_pool2d.default", "aten._adaptive_avg_pool2d.default")
def adaptive_avg_pool2d(call: Call) -> Any:
    """Output ``1x1``: ``nn.global_avg_pool2d``; else a static input that the output size
    divides: ``nn.avg_pool2d`` of the quotient."""
    x = call["self"]
    out = _n(call["output_size"], 2, "output_size")
    if out == [1, 1]:
        return trace.apply("nn.global_avg_pool2d", x)
    h, w = x.shape[2], x.shape[3]
    if isinstance(h, int) and isinstance(w, int) and h % out[0] == 0 and w % out[1] == 0:
        k = [h // out[0], w // out[1]]
        return trace.apply("nn.avg_pool2d", x, pool_size=k, strides=k)
    raise Unsupported(f"adaptive_avg_pool2d to {out} of a {x.shape[2:]} input")
