"""``nn.conv3d``: a 3-d convolution as one 2-d one.

The depth taps are stacked into channels: for each output depth ``z`` and depth tap ``i``,
the input plane at depth ``z * SD + i * DD - front`` (zeros where that is padding) goes to
the channels of tap ``i``; the images of the 2-d convolution are the ``(N, OD)`` pairs, its
channels ``(group, tap, channel)``, its weight ``(O, KD * C / groups, KH, KW)``. The
height and width (strides, dilation, padding, groups) are ``nn.conv2d``'s kernel's, BLAS and
all. The stacked planes (an im2col along the depth only), the 2-d result and the 2-d kernel's
own scratch are carved from the workspace the compiler planned (``nn.conv3d``'s rule in
``shape_funcs/ops/nn.py``; design/vm.md, "3-d convolutions").
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from .conv import conv2d
from .registry import Kernel, register_kernel
from .workspace import Workspace


def _checked(
    data: np.ndarray,
    weight: np.ndarray,
    out: np.ndarray,
    attrs: Mapping[str, Any],
) -> tuple[int, ...]:
    """The output depth, height and width the attributes give, after checking the shapes."""
    groups = attrs["groups"]
    if data.ndim != 5 or weight.ndim != 5:
        raise ValueError(
            f"nn.conv3d: expected NCDHW data and an OIDHW weight, got {data.shape} and "
            f"{weight.shape}"
        )
    o, cg = weight.shape[:2]
    if groups < 1 or data.shape[1] != cg * groups or o % groups:
        raise ValueError(
            f"nn.conv3d: data {data.shape} and weight {weight.shape} do not fit groups={groups}"
        )
    sizes = []
    pad = attrs["padding"]
    for axis in range(3):
        extent = attrs["dilation"][axis] * (weight.shape[2 + axis] - 1) + 1
        padded = data.shape[2 + axis] + pad[axis] + pad[3 + axis]
        if padded < extent:
            raise ValueError(
                f"nn.conv3d: the padded input ({padded} along axis {2 + axis}) is shorter than "
                f"the dilated window ({extent})"
            )
        sizes.append((padded - extent) // attrs["strides"][axis] + 1)
    if out.shape != (data.shape[0], o, *sizes):
        raise ValueError(
            f"nn.conv3d: data {data.shape} and weight {weight.shape} give "
            f"{(data.shape[0], o, *sizes)}, but the output is {out.shape}"
        )
    return tuple(sizes)


def _planar_weight(weight: np.ndarray, groups: int) -> np.ndarray:
    """``(O, C / groups, KD, KH, KW)`` as the 2-d convolution's ``(O, KD * C / groups, KH,
    KW)``: each group's channels ordered by depth tap, then channel."""
    o, cg, kd, kh, kw = weight.shape
    grouped = weight.reshape(groups, o // groups, cg, kd, kh, kw).transpose(0, 1, 3, 2, 4, 5)
    return np.ascontiguousarray(grouped.reshape(o, kd * cg, kh, kw))


def _depth_taps(
    data: np.ndarray, attrs: Mapping[str, Any], od: int, kd: int, ws: Workspace
) -> np.ndarray:
    """The planes each output depth reads: ``(N, OD, groups, KD, C / groups, H, W)``, zero
    where a tap reads the depth padding (carved from ``ws``)."""
    n, c, d, h, w = data.shape
    groups = attrs["groups"]
    sd, dd, front = attrs["strides"][0], attrs["dilation"][0], attrs["padding"][0]
    taps = ws.zeros((n, od, groups, kd, c // groups, h, w), data.dtype)
    planes = data.reshape(n, groups, c // groups, d, h, w)
    for i in range(kd):
        # output depths z whose input depth z * sd + i * dd - front lies in [0, d)
        first = max(0, -(-(front - i * dd) // sd))
        stop = min(od, (d - 1 + front - i * dd) // sd + 1)
        if first >= stop:
            continue
        start = first * sd + i * dd - front
        read = planes[:, :, :, start : start + (stop - first - 1) * sd + 1 : sd]
        taps[:, first:stop, :, i] = read.transpose(0, 3, 1, 2, 4, 5)
    return taps


@register_kernel("nn.conv3d")
def conv3d(attrs: Mapping[str, Any]) -> Kernel:
    """3-d convolution, NCDHW x OIDHW, with strides, dilation, padding ``[front, top, left,
    back, bottom, right]`` and groups, as one ``nn.conv2d`` over the depth taps stacked into
    channels (see the module doc)."""
    pad = attrs["padding"]
    planar = conv2d(
        {
            "strides": list(attrs["strides"][1:]),
            "padding": [pad[1], pad[2], pad[4], pad[5]],
            "dilation": list(attrs["dilation"][1:]),
            "groups": attrs["groups"],
        }
    )

    def build(plane_kernel: Kernel, laid: tuple[np.ndarray, np.ndarray] | None) -> Kernel:
        def kernel(
            data: np.ndarray,
            weight: np.ndarray,
            out: np.ndarray,
            workspace: np.ndarray | None = None,
        ) -> None:
            od, oh, ow = _checked(data, weight, out, attrs)
            if out.size == 0:
                return
            o, cg, kd = weight.shape[:3]
            if cg == 0:  # no input channels: every sum is empty
                out.fill(0)
                return
            w2 = laid[1] if laid is not None and laid[0] is weight else None
            if w2 is None:
                w2 = _planar_weight(weight, attrs["groups"])
            ws = Workspace(workspace, data, weight, out)
            taps = _depth_taps(data, attrs, od, kd, ws)
            n, _, _, _, _, h, w = taps.shape
            images = ws.empty((n * od, o, oh, ow), out.dtype)
            rest = None if ws.buffer is None else ws.buffer[ws.offset :]  # the 2-d kernel's
            plane_kernel(taps.reshape(n * od, -1, h, w), w2, images, rest)
            np.copyto(out, images.reshape(n, od, o, oh, ow).transpose(0, 2, 1, 3, 4))

        def prepared(constants: Mapping[int, np.ndarray]) -> Kernel:
            weight = constants.get(1)
            groups = attrs["groups"]
            if weight is None or weight.ndim != 5 or groups < 1 or weight.shape[0] % groups:
                return kernel  # (the call checks and names what is wrong)
            w2 = _planar_weight(weight, attrs["groups"])
            prepare = getattr(planar, "with_constants", None)
            inner = prepare({1: w2}) if prepare is not None else planar
            return build(inner, (weight, w2))

        kernel.with_constants = prepared  # type: ignore[attr-defined]
        return kernel

    return build(planar, None)
