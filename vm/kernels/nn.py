"""Neural-network kernels: dense and matmul, bias, softmax, layer norm, global pooling, and
the padding and window helpers of convolution and pooling (whose kernels are in ``conv``).

Layouts: NCHW data, OIHW weights (a transposed convolution's is (C_in, C_out / groups, KH,
KW)); padding is ``[top, left, bottom, right]`` (two entries ``[h, w]`` pad both sides alike).
Window views are made here (``windows``: numpy's constructor over a contiguous input's buffer,
which checks the view's extent itself, else ``as_strided`` of this module, which the loader
fuzzer wraps with a bounds check), and any padded copy is bounded by ``PAD_FACTOR``.

float16: every kernel here that accumulates (softmax, log_softmax, layer_norm,
global_avg_pool2d) computes in float32 and rounds once into the
float16 output, as ONNX does; the temporaries are float32 copies of the operands (2x their
bytes) and of the result.
The matmuls need no such path: numpy's float16 ``matmul`` already sums each dot product in
float32 and rounds it once (``tests/vm/test_kernels_float16.py`` holds it to that). float32 and
float64 take the direct path, without copies.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
from numpy.lib.stride_tricks import as_strided

from . import row_panels
from .blas_threads import matmul as _matmul
from .constant_layouts import ConstantLayouts
from .elementwise import SHARED_UNARY
from .registry import Kernel, register_kernel
from .row_softmax import softmax_rows
from .workspace import Workspace

F16 = np.dtype(np.float16)
_exp = SHARED_UNARY["exp"]


def _dense(data: np.ndarray, weight: np.ndarray, out: np.ndarray) -> None:
    _matmul(data, weight.T, out)


def _product(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> None:
    _matmul(a, b, out)


def _kept_panels(constants: Mapping[int, np.ndarray], general: Kernel, transposed: bool) -> Kernel:
    """``general`` (``a @ b``, or ``a @ b.T`` when ``transposed``) with a constant 2-d float32
    ``b`` at position 1 kept as the column panels that products of a few rows read
    (``row_panels``: the same bits as the panels made from ``b`` per call); ``general`` itself
    for any other constant."""
    b = constants.get(1)
    if b is None or b.ndim != 2 or b.dtype != np.float32:
        return general
    layouts = ConstantLayouts([b])
    key = "row_panels_t" if transposed else "row_panels"

    def kept(w: int) -> row_panels.Laid:
        laid: row_panels.Laid = layouts.get(
            b, (key, w), lambda x: row_panels.panels(x.T if transposed else x, w)
        )
        return laid

    def kernel(a: np.ndarray, b_: np.ndarray, out: np.ndarray) -> None:
        if b_ is not b:  # not the constant it was prepared for
            general(a, b_, out)
        elif transposed:
            _matmul(a, b.T, out, kept)
        else:
            _matmul(a, b, out, kept)

    return kernel


_dense.with_constants = lambda constants: _kept_panels(constants, _dense, True)  # type: ignore[attr-defined]
_product.with_constants = lambda constants: _kept_panels(constants, _product, False)  # type: ignore[attr-defined]


@register_kernel("nn.dense")
def dense(attrs: Mapping[str, Any]) -> Kernel:
    """``data @ weight.T`` (``np.matmul`` with ``out=``; BLAS threads by size, see
    ``blas_threads``; a constant weight kept in the panels a product of a few rows reads)."""
    return _dense


@register_kernel("nn.matmul")
def matmul(attrs: Mapping[str, Any]) -> Kernel:
    """``a @ b`` (``np.matmul``: batched and broadcasting, with ``out=``; BLAS threads by size,
    see ``blas_threads``; a constant ``b`` kept in the panels a product of a few rows reads)."""
    return _product


@register_kernel("nn.batch_matmul")
def batch_matmul(attrs: Mapping[str, Any]) -> Kernel:
    """``x @ y`` on (b, m, k) x (b, k, n), each optionally transposed in its last two axes."""
    ta, tb = attrs["transpose_a"], attrs["transpose_b"]

    def kernel(x: np.ndarray, y: np.ndarray, out: np.ndarray) -> None:
        _matmul(x.swapaxes(-1, -2) if ta else x, y.swapaxes(-1, -2) if tb else y, out)

    return kernel


def _along(v: np.ndarray, axis: int, ndim: int) -> np.ndarray:
    """``v`` (1-d) shaped to broadcast along ``axis`` of a rank-``ndim`` tensor."""
    axis %= ndim
    return v.reshape(v.shape + (1,) * (ndim - axis - 1))


#: A bias along an axis followed by a run of fewer than ``PLANE_RUN_MAX`` elements (an NCHW
#: convolution's bias over planes smaller than 64x64) broadcasts with a stride-0 innermost
#: loop that short, and numpy then runs the add through its ufunc buffers (it does below half
#: its 8,192-element buffer): 1.7-3.6x the time of adding a contiguous operand of the same
#: size (session 37, float32, one thread: 4x96x24x24 57.6 us against 19.5, 4x960x7x7 54.4
#: against 15.4, 1x512x7x7 8.0 against 2.6; a run of 4,608 already at the contiguous speed).
#: A constant bias is therefore kept broadcast over the axes from its own on ("its plane", a
#: ``ConstantLayouts`` layout) when that holds at most ``PLANE_MAX`` elements (512 KiB of
#: float32: it is read once per image); the add of a contiguous plane measured 24.7, 17.4 and
#: 3.0 us on those three. A smaller ufunc buffer (``np.setbufsize``) helped runs of 512 and
#: more only (31.8 us) and lost below (4x960x7x7: 139 us).
PLANE_RUN_MAX = 4096
PLANE_MAX = 1 << 17


@register_kernel("nn.bias_add")
def bias_add(attrs: Mapping[str, Any]) -> Kernel:
    """``data + bias`` with the 1-d bias laid along ``axis``; a constant bias along an axis with
    a short run after it is added as its plane (``PLANE_RUN_MAX``), the same sums."""
    axis = attrs["axis"]

    def build(layouts: ConstantLayouts) -> Kernel:
        # The last bias and data shape with the operand added for them: a bias is most often a
        # constant, the same array every call, and making its broadcast view was a quarter of
        # the call on a small map (4.9 -> 3.7 us for a 1x96x4x4 one). One tuple, read and
        # replaced whole, so that a kernel shared by threads never pairs one bias with
        # another's operand; holding the bias keeps the identity test sound.
        kept: list[tuple[np.ndarray, tuple[int, ...], np.ndarray] | None] = [None]

        def kernel(data: np.ndarray, bias: np.ndarray, out: np.ndarray) -> None:
            last = kept[0]
            if last is None or last[0] is not bias or last[1] != data.shape:
                operand = _bias_operand(bias, axis, data.shape, layouts)
                last = kept[0] = (bias, data.shape, operand)
            np.add(data, last[2], out)

        def prepared(constants: Mapping[int, np.ndarray]) -> Kernel:
            bias = constants.get(1)
            return kernel if bias is None else build(ConstantLayouts([bias]))

        kernel.with_constants = prepared  # type: ignore[attr-defined]
        return kernel

    return build(ConstantLayouts())


def _bias_operand(
    bias: np.ndarray, axis: int, shape: tuple[int, ...], layouts: ConstantLayouts
) -> np.ndarray:
    """What ``bias_add`` adds to data of ``shape``: the bias's broadcast view, or its plane
    (kept) for a constant bias with a short run after its axis (``PLANE_RUN_MAX``)."""
    view = _along(bias, axis, len(shape))
    if not layouts.keeps(bias) or bias.ndim != 1:
        return view
    plane = shape[axis % len(shape) :]
    run = math.prod(plane[1:])
    if not 1 < run < PLANE_RUN_MAX or plane[0] != bias.shape[0] or math.prod(plane) > PLANE_MAX:
        return view
    laid: np.ndarray = layouts.get(
        bias, ("plane", plane), lambda b: np.ascontiguousarray(np.broadcast_to(view, plane))
    )
    return laid


@register_kernel("nn.softmax")
def softmax(attrs: Mapping[str, Any]) -> Kernel:
    """Softmax along ``axis``, in place in ``out`` (max-shifted; the temporaries are the reduced
    max and sum; scaled by the sums' reciprocals)."""
    axis = attrs["axis"]

    return _along_axis(_softmax, axis)


def _along_axis(fn: Callable[[np.ndarray, int, np.ndarray], None], axis: int) -> Kernel:
    """The kernel running ``fn(x, axis, out)``; float16 is computed in float32 and rounded once
    into ``out``."""

    def kernel(x: np.ndarray, out: np.ndarray) -> None:
        if x.size == 0:
            return
        if x.dtype == F16:
            t = x.astype(np.float32)
            fn(t, axis, t)
            np.copyto(out, t)
        else:
            fn(x, axis, out)

    return kernel


def _softmax(x: np.ndarray, axis: int, out: np.ndarray) -> None:
    # Along the last axis of contiguous arrays: rows of a matrix (``row_softmax``: one shift
    # for every row where their range allows). Elsewhere the ufuncs' own reduce methods, not
    # np.max/np.sum (their Python wrappers cost ~1 us a call at small sizes), and one
    # reciprocal of the reduced sums then a multiply over the tensor, not a divide over it
    # (half the time at (256, 256), measured): 4 passes over the tensor (shift, exp, sum,
    # scale), temporaries of the reduced size only.
    if x.ndim and axis % x.ndim == x.ndim - 1 and x.flags.c_contiguous and out.flags.c_contiguous:
        n = x.shape[-1]
        softmax_rows(x.reshape(-1, n), out.reshape(-1, n))
        return
    np.subtract(x, np.maximum.reduce(x, axis=axis, keepdims=True), out)
    _exp(out, out)  # shared with the worker thread on large tensors
    total = np.add.reduce(out, axis=axis, keepdims=True)
    np.reciprocal(total, total)
    np.multiply(out, total, out)


@register_kernel("nn.log_softmax")
def log_softmax(attrs: Mapping[str, Any]) -> Kernel:
    """``x - max - log(sum(exp(x - max)))`` along ``axis``, written into ``out``; the sum of
    exponentials needs one temporary of the input's size."""
    axis = attrs["axis"]

    return _along_axis(_log_softmax, axis)


def _log_softmax(x: np.ndarray, axis: int, out: np.ndarray) -> None:
    np.subtract(x, np.max(x, axis=axis, keepdims=True), out)
    lse = np.log(np.sum(np.exp(out), axis=axis, keepdims=True))
    np.subtract(out, lse, out)


@register_kernel("nn.layer_norm")
def layer_norm(attrs: Mapping[str, Any]) -> Kernel:
    """``(x - mean) / sqrt(var + epsilon) * gamma + beta`` along ``axis`` (gamma and beta are
    1-d, laid along that axis); the temporaries are the squares of the centred input and the
    reduced mean and variance (float16: all in float32, plus a float32 copy of the input).
    Last-axis norms up to ``MATVEC_NORM_MAX`` elements reduce with a matrix-vector product."""
    axis, eps = attrs["axis"], attrs["epsilon"]

    def kernel(
        data: np.ndarray,
        gamma: np.ndarray,
        beta: np.ndarray,
        out: np.ndarray,
        workspace: np.ndarray | None = None,
    ) -> None:
        if data.size == 0:
            return
        if data.dtype == F16:
            # float16 squares overflow past 256: compute in float32, round once into out.
            ws = Workspace(workspace, data, gamma, beta, out)
            t = ws.empty(data.shape, np.float32)
            np.copyto(t, data)
            _layer_norm(t, gamma, beta, axis, eps, t, ws)
            np.copyto(out, t)
        else:
            _layer_norm(data, gamma, beta, axis, eps, out, workspace)

    return kernel


#: Up to this many elements a last-axis layer norm reduces by a matrix-vector product with
#: ``1/n`` (one BLAS call each for the mean and the variance: 2.5x faster than ``add.reduce``
#: at (1024, 64), measured); above it OpenBLAS threads the product, which lost under load.
MATVEC_NORM_MAX = 1 << 18

_inverse_counts: dict[tuple[int, np.dtype[Any]], np.ndarray] = {}


def _inverse_count(n: int, dtype: np.dtype[Any]) -> np.ndarray:
    """A read-only ``(n, 1)`` column of ``1/n`` (cached: layer norm's reducing vector)."""
    col = _inverse_counts.get((n, dtype))
    if col is None:
        col = np.full((n, 1), 1.0 / n, dtype)
        col.flags.writeable = False
        _inverse_counts[(n, dtype)] = col  # the same value from any thread: a race is harmless
    return col


#: One row (a batch-1 MLP, a decode step): the mean and the variance as two BLAS dot
#: products, the reciprocal deviation a Python float; 5 numpy calls instead of 11, 13 against
#: 28 us on (1, 256) float32 (measured, same results within the last bit).
ONE_ROW_NORM = True


def _layer_norm_row(
    x: np.ndarray, gamma: np.ndarray, beta: np.ndarray, eps: float, out: np.ndarray
) -> None:
    """Layer norm of the contiguous 1-d ``x`` into the contiguous 1-d ``out``."""
    n = x.size
    np.subtract(x, np.dot(x, _inverse_count(n, x.dtype).reshape(n)), out)
    d = float(np.dot(out, out)) / n + eps
    # numpy's answers where the deviation is no positive number (a zero or negative epsilon)
    scale = 1.0 / math.sqrt(d) if d > 0 else (math.inf if d == 0 else math.nan)
    np.multiply(out, scale, out)
    np.multiply(out, gamma, out)
    np.add(out, beta, out)


def _layer_norm(
    data: np.ndarray,
    gamma: np.ndarray,
    beta: np.ndarray,
    axis: int,
    eps: float,
    out: np.ndarray,
    workspace: Workspace | np.ndarray | None = None,
) -> None:
    # Passes over the tensor: mean, centre (into out), square (the one temporary, carved from
    # ``workspace``: a Workspace, or the call's buffer), variance, scale by the reciprocal
    # deviation, gamma, beta; the rest is on the reduced column.
    axis %= data.ndim
    n = data.shape[axis]
    if (
        ONE_ROW_NORM
        and axis == data.ndim - 1
        and data.size == n
        and data.dtype.kind == "f"
        and data.flags.c_contiguous
        and out.flags.c_contiguous
    ):
        _layer_norm_row(data.reshape(-1), gamma, beta, eps, out.reshape(-1))
        return
    if (
        axis == data.ndim - 1
        and data.size <= MATVEC_NORM_MAX
        and data.dtype.kind == "f"
        and data.flags.c_contiguous
        and out.flags.c_contiguous
    ):
        # On the (rows, n) views, gamma and beta broadcast as they are: the general path's
        # arithmetic without reshaping the variance and the parameters (a fifth of a one-row
        # norm's time goes to such calls).
        x2, target = data.reshape(-1, n), out.reshape(-1, n)  # views: both are contiguous
        inv = _inverse_count(n, data.dtype)
        # np.dot: np.matmul's BLAS call and bits on two matrices, ~0.4 us less each (a BERT
        # layer's (16, 128) norm 7.8 -> 6.9 us, session 42)
        mean = np.dot(x2, inv)
        np.subtract(x2, mean, target)
        var = np.dot(_squares(target, workspace, data, gamma, beta), inv)
        scale, shift = gamma, beta
    else:
        mean = np.add.reduce(data, axis=axis, keepdims=True)
        np.multiply(mean, 1.0 / n, mean)
        np.subtract(data, mean, out)
        var = np.add.reduce(_squares(out, workspace, data, gamma, beta), axis=axis, keepdims=True)
        np.multiply(var, 1.0 / n, var)
        target, scale, shift = out, _along(gamma, axis, data.ndim), _along(beta, axis, data.ndim)
    np.add(var, eps, var)
    np.sqrt(var, var)
    np.reciprocal(var, var)
    np.multiply(target, var, target)
    np.multiply(target, scale, target)
    np.add(target, shift, target)


#: Layer norm's squares from this many bytes on are carved from the workspace (``_squares``);
#: smaller ones (well below glibc's smallest mmap threshold, 128 KiB) are numpy's: the
#: workspace's checks cost ~3 us a call, a tenth of a one-token encoder's norm.
WORKSPACE_SQUARES_BYTES = 1 << 16


def _squares(
    x: np.ndarray, workspace: Workspace | np.ndarray | None, *operands: np.ndarray
) -> np.ndarray:
    """``x * x`` into a piece of ``workspace`` (made a Workspace over the call's buffer, checked
    against ``x`` and ``operands``, if it is not one): planned scratch, where a new array was
    megabytes of fresh pages a call whenever the C allocator had returned the last one's (five
    norms of a BERT encoder at (8, 128): 773 page faults a call)."""
    if x.nbytes < WORKSPACE_SQUARES_BYTES and not isinstance(workspace, Workspace):
        squares = np.empty_like(x)  # small: numpy's heap, cheaper than checking the workspace
    else:
        ws = workspace if isinstance(workspace, Workspace) else Workspace(workspace, x, *operands)
        squares = ws.empty(x.shape, x.dtype)
    np.square(x, out=squares)
    return squares


@register_kernel("nn.rms_norm")
def rms_norm(attrs: Mapping[str, Any]) -> Kernel:
    """``x / sqrt(mean(x * x) + epsilon) * gamma`` along ``axis`` (gamma is 1-d, laid along that
    axis); the temporary is the reduced mean square (float16: computed in float32, rounded once
    into ``out``). One row reduces with one BLAS dot product and scales by a Python float: 3
    numpy calls where the unfused ops make 7 (a decode step's norm, 19 -> 7 us measured)."""
    axis, eps = attrs["axis"], attrs["epsilon"]

    def kernel(data: np.ndarray, gamma: np.ndarray, out: np.ndarray) -> None:
        if data.size == 0:
            return
        if data.dtype == F16:
            # float16 squares overflow past 256: compute in float32, round once into out.
            t = data.astype(np.float32)
            _rms_norm(t, gamma, axis, eps, t)
            np.copyto(out, t)
        else:
            _rms_norm(data, gamma, axis, eps, out)

    return kernel


def _rms_norm(data: np.ndarray, gamma: np.ndarray, axis: int, eps: float, out: np.ndarray) -> None:
    axis %= data.ndim
    n = data.shape[axis]
    last = axis == data.ndim - 1 and data.flags.c_contiguous and out.flags.c_contiguous
    if ONE_ROW_NORM and last and data.size == n:
        x, y = data.reshape(-1), out.reshape(-1)
        d = float(np.dot(x, x)) / n + eps
        # numpy's answers where the mean square is no positive number (a zero or negative eps)
        np.multiply(x, 1.0 / math.sqrt(d) if d > 0 else (math.inf if d == 0 else math.nan), y)
        np.multiply(y, gamma, y)
        return
    # The squares are a temporary, not written into out: out may be data (in place).
    if last and data.size <= MATVEC_NORM_MAX:
        # reduced by a product with 1/n, as layer norm's mean (square + matmul: 0.6-0.9x the
        # time of add.reduce or einsum from (8, 128) to (2048, 64), measured)
        x2, target = data.reshape(-1, n), out.reshape(-1, n)
        square = np.dot(np.square(x2), _inverse_count(n, data.dtype))  # (as layer norm's)
        scale = gamma
    else:
        x2, target = data, out
        square = np.add.reduce(np.square(data), axis=axis, keepdims=True)
        np.multiply(square, 1.0 / n, square)
        scale = _along(gamma, axis, data.ndim)
    np.add(square, eps, square)
    np.sqrt(square, square)
    np.divide(x2, square, target)
    np.multiply(target, scale, target)


def padding4(padding: Sequence[int]) -> tuple[int, int, int, int]:
    """``[top, left, bottom, right]`` from 4 entries, or from ``[h, w]`` (both sides alike)."""
    if len(padding) == 4:
        return (padding[0], padding[1], padding[2], padding[3])
    if len(padding) == 2:
        return (padding[0], padding[1], padding[0], padding[1])
    if len(padding) == 1:
        return (padding[0],) * 4
    raise ValueError(f"padding must have 1, 2 or 4 entries, got {tuple(padding)}")


#: A padding copy may hold at most ``PAD_FACTOR`` times the elements of the input and the
#: output together, plus ``PAD_SLACK`` elements (and so may one (H, W) plane of it, against one
#: plane of each). Real programs stay far below: "same" padding of a k x k window pads an
#: h x w map to (h + k - 1) x (w + k - 1), at most k * k / 2 times a 1 x 1 map and its output.
#: Padding an executable's attributes ask for beyond that is refused before anything is built.
PAD_FACTOR = 32
PAD_SLACK = 1 << 16


def _padded_shape(
    kind: str, data: np.ndarray, pad: tuple[int, int, int, int], out: np.ndarray
) -> tuple[int, ...]:
    """The NCHW shape of ``data`` padded by ``pad``, checked (integer arithmetic only) to be
    bounded by the input and the output as ``PAD_FACTOR`` says; raises ValueError if not."""
    if data.ndim != 4 or out.ndim != 4:
        raise ValueError(f"{kind}: expected NCHW data and output, got {data.shape} and {out.shape}")
    if min(pad) < 0:
        raise ValueError(f"{kind}: padding {pad} has a negative entry")
    top, left, bottom, right = pad
    n, c, h, w = data.shape
    shape = (n, c, h + top + bottom, w + left + right)
    if not any(pad):
        return shape
    plane = shape[2] * shape[3]
    total = n * c * plane
    if plane > PAD_FACTOR * (h * w + out.shape[2] * out.shape[3]) + PAD_SLACK or total > (
        PAD_FACTOR * (data.size + out.size) + PAD_SLACK
    ):
        raise ValueError(
            f"{kind}: padding {pad} on input shape {data.shape} gives a padded copy of shape "
            f"{shape}, more than {PAD_FACTOR} times the input and the output {out.shape}"
        )
    return shape


def _pad_hw(
    x: np.ndarray,
    pad: tuple[int, int, int, int],
    value: float,
    dtype: Any = None,
    ws: Workspace | None = None,
) -> np.ndarray:
    """``x`` padded in H and W with ``value``, as ``dtype`` (default: ``x``'s), carved from
    ``ws`` when given; ``x`` itself when there is nothing to pad or convert. Check the shape
    with ``_padded_shape`` first."""
    dt = x.dtype if dtype is None else np.dtype(dtype)
    top, left, bottom, right = pad
    if not any(pad):
        return x if dt == x.dtype else x.astype(dt)
    n, c, h, w = x.shape
    shape = (n, c, h + top + bottom, w + left + right)
    padded = np.empty(shape, dt) if ws is None else ws.empty(shape, dt)
    padded.fill(value)
    padded[:, :, top : top + h, left : left + w] = x
    return padded


def windows(
    x: np.ndarray,
    kernel: tuple[int, int],
    strides: Sequence[int],
    dilation: Sequence[int],
    out_hw: tuple[int, int],
    origin: tuple[int, int] = (0, 0),
) -> np.ndarray:
    """A (N, C, OH, OW, KH, KW) read-only strided view of the NCHW ``x`` (no copy), the first
    window's top left corner at row and column ``origin`` of ``x``.

    A C-contiguous ``x`` (a padded copy, most inputs) is viewed by numpy's own constructor over
    its buffer, which refuses a view reaching past ``x``'s bytes (ValueError) and costs ~0.6
    us; ``as_strided``, for any other ``x``, costs ~5-15 us (its Python makes the view through
    ``__array_interface__``), a convolution's tenth to a third on small maps: a caller that
    would view a rectangle of a contiguous array passes the array and the rectangle's corner."""
    sn, sc, sh, sw = x.strides
    n, c = x.shape[:2]
    shape = (n, c, out_hw[0], out_hw[1], kernel[0], kernel[1])
    steps = (sn, sc, sh * strides[0], sw * strides[1], sh * dilation[0], sw * dilation[1])
    if x.flags.c_contiguous:
        view: np.ndarray = np.ndarray(shape, x.dtype, x, origin[0] * sh + origin[1] * sw, steps)
        view.flags.writeable = False
        return view
    corner = x[:, :, origin[0] :, origin[1] :]
    strided: np.ndarray = as_strided(corner, shape=shape, strides=steps, writeable=False)
    return strided


def _check_hw(
    kind: str,
    shape: Sequence[int],
    k: tuple[int, int],
    strides: Sequence[int],
    dilation: Sequence[int],
    out: np.ndarray,
) -> tuple[int, int]:
    """The output H, W that windows ``k`` give over the padded NCHW ``shape``; raises
    ValueError unless they are ``out``'s."""
    if len(shape) != 4 or len(strides) != 2 or len(dilation) != 2 or min(*strides, *dilation) < 1:
        raise ValueError(
            f"{kind}: expected NCHW data and 2 positive strides/dilations, got "
            f"shape {tuple(shape)}, strides {tuple(strides)}, dilation {tuple(dilation)}"
        )
    oh = (shape[2] - dilation[0] * (k[0] - 1) - 1) // strides[0] + 1
    ow = (shape[3] - dilation[1] * (k[1] - 1) - 1) // strides[1] + 1
    if (oh, ow) != tuple(out.shape[2:]) or min(oh, ow) < 0:
        raise ValueError(f"{kind}: output H, W should be {(oh, ow)}, got {out.shape[2:]}")
    return oh, ow


def _transpose_span(
    size: int, k: int, stride: int, dilation: int, begin: int, out_size: int
) -> tuple[int, int, int | None]:
    """For kernel tap ``k`` of an axis: the input positions ``[lo, hi)`` whose contribution
    ``position * stride + k * dilation - begin`` lands inside ``[0, out_size)``, and the first
    output index they write (None when none does)."""
    shift = k * dilation - begin
    lo = max(0, -(shift // stride))  # the least i with i * stride + shift >= 0
    hi = min(size, (out_size - 1 - shift) // stride + 1) if out_size > 0 else 0
    return lo, hi, (shift + lo * stride if lo < hi else None)


#: Up to this many elements a (H, W) plane, global average pooling is a matrix-vector product
#: of the (N * C, H * W) rows with ``1 / (H * W)`` (one BLAS call: 4-7x faster than
#: ``np.mean``, whose reduction runs a short inner loop per row, measured on (4, 288, 3, 3) 34
#: vs 6 us, (8, 16, 64, 64) 115 vs 19 us), with ``np.mean``'s accuracy (relative error 1e-7 to
#: 3e-7 against float64 on those shapes); longer rows keep ``np.mean``'s pairwise sum.
MATVEC_POOL_MAX = 1 << 12


def _global_avg(data: np.ndarray, out: np.ndarray) -> None:
    n, c, h, w = data.shape
    if data.dtype == F16:
        acc = np.empty(out.shape, np.float32)  # float32 accumulation, one rounding
        np.mean(data, axis=(2, 3), keepdims=True, dtype=np.float32, out=acc)
        np.copyto(out, acc)
    elif (
        h * w <= MATVEC_POOL_MAX
        and data.dtype.kind == "f"
        and data.flags.c_contiguous
        and out.flags.c_contiguous
        and data.size
    ):
        rows = data.reshape(n * c, h * w)  # views: both are contiguous
        _matmul(rows, _inverse_count(h * w, data.dtype), out.reshape(n * c, 1))
    else:
        np.mean(data, axis=(2, 3), keepdims=True, out=out)


def _global_max(data: np.ndarray, out: np.ndarray) -> None:
    np.max(data, axis=(2, 3), keepdims=True, out=out)


@register_kernel("nn.global_avg_pool2d")
def global_avg_pool2d(attrs: Mapping[str, Any]) -> Kernel:
    """Mean over H and W keeping them as 1-dims (``np.mean`` with ``out=``; float16 through a
    float32 temporary of the output's shape, rounded once)."""
    return _global_avg


@register_kernel("nn.global_max_pool2d")
def global_max_pool2d(attrs: Mapping[str, Any]) -> Kernel:
    """Max over H and W keeping them as 1-dims (``np.max`` with ``out=``)."""
    return _global_max


@register_kernel("dft")
def dft(attrs: Mapping[str, Any]) -> Kernel:
    """ONNX ``DFT`` by ``np.fft`` (``fft``, ``ifft``, ``rfft`` for a real one-sided one,
    ``irfft`` for an inverse one-sided one) in complex64, complex128 for float64 input: numpy's
    own precision, which onnx's reference (and its expected values) follows; float16 and the
    narrower floats go through float32. Temporaries: the complex signal and its transform."""
    axis, length = attrs["axis"], attrs["length"]
    inverse, onesided = attrs["inverse"], attrs["onesided"]

    def kernel(x: np.ndarray, out: np.ndarray) -> None:
        real = np.float64 if x.dtype == np.float64 else np.float32
        at = axis % x.ndim
        if x.shape[-1] == 2:
            signal = np.empty(x.shape[:-1], np.complex128 if real is np.float64 else np.complex64)
            signal.real, signal.imag = x[..., 0], x[..., 1]
        else:
            signal = x[..., 0].astype(real)
        if inverse and onesided:
            n = 2 * (x.shape[at] - 1) if length is None else length
            np.copyto(out[..., 0], np.fft.irfft(signal, n=n, axis=at), casting="unsafe")
            return
        n = x.shape[at] if length is None else length
        if inverse:
            result = np.fft.ifft(signal, n=n, axis=at)
        elif onesided and not np.iscomplexobj(signal):
            result = np.fft.rfft(signal, n=n, axis=at)
        else:
            result = np.fft.fft(signal, n=n, axis=at)
            if onesided:
                result = np.take(result, np.arange(n // 2 + 1), axis=at)
        np.copyto(out[..., 0], result.real, casting="unsafe")
        np.copyto(out[..., 1], result.imag, casting="unsafe")

    return kernel
