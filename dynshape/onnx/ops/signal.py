"""Signal ops: ``DFT``, ``STFT``, ``HannWindow``, ``HammingWindow``, ``BlackmanWindow``,
``MelWeightMatrix``.

A DFT is the catalogue's ``dft``: numpy's FFT (``O(L log L)``) in the input's precision
(complex64 for float32), as onnx's reference computes it, so that its expected values, which
carry complex64 rounding (1e-6 where the exact value is 0), are met; the length may be a dim.
``STFT`` gathers its frames with one ``take`` (a grid of ``frame * step + j``), weights them by
the window and transforms the frame axis with ``dft``. The windows and ``MelWeightMatrix``
take sizes known at import and are constants, computed with numpy as onnx's reference does.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import sympy

import ir
from dynshape.builder import trace

from ...errors import ModelImportError
from ..known import Known
from ..model import dtype_of
from ..registry import Node, NodeError, Unsupported, converter
from .operands import known_ints, normalize_axis, value_dtype, value_shape

_FLOATS = ("float16", "float32", "float64")


def _scalar_int(node: Node, i: int, what: str) -> int | None:
    """Input ``i`` as one int known at import (None when omitted)."""
    values = known_ints(node, i, what)
    if values is None:
        return None
    if len(values) != 1:
        raise NodeError(f"{what} (input {i}) must hold one value, got {len(values)}")
    return values[0]


def _output_dtype(node: Node, default: int = 1) -> str:
    """The ``output_datatype`` attribute (an ONNX element type; float by default) in the IR's
    spelling; Unsupported for a type dynshape has not."""
    try:
        return dtype_of(int(node.attr("output_datatype", default)), "output_datatype")
    except ModelImportError as e:
        raise Unsupported(str(e)) from None


# ---- windows, MelWeightMatrix ---------------------------------------------------------------


def _window(node: Node, terms: tuple[float, ...]) -> Known:
    """``sum_j terms[j] * cos(2 pi j n / N)`` for ``n < size``, ``N = size`` (periodic) or
    ``size - 1``; the onnx reference's formulas (Hann is ``sin^2(pi n / N)``, the same)."""
    size = _scalar_int(node, 0, "size")
    if size is None:
        raise NodeError(f"{node.op_type} needs its size input")
    if size < 0:
        raise NodeError(f"window size {size} is negative")
    period = size if node.attr("periodic", 1) else size - 1
    n = np.arange(size, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):  # size 1, symmetric: N = 0 (NaN)
        if node.op_type == "HannWindow":
            out = np.sin(n * np.pi / period) ** 2
        else:
            out = np.zeros(size, dtype=np.float64)
            for j, a in enumerate(terms):
                out = out + a * np.cos(n * (2 * np.pi * j) / period)
    dtype = _output_dtype(node)
    return Known(out.astype(dtype), dtype)


@converter("HannWindow")
def hann_window(node: Node) -> Known:
    """``sin^2(pi n / N)``: a constant (the size must be known at import)."""
    return _window(node, ())


@converter("HammingWindow")
def hamming_window(node: Node) -> Known:
    """``25/46 - 21/46 cos(2 pi n / N)``: a constant."""
    alpha = 25.0 / 46.0
    return _window(node, (alpha, -(1 - alpha)))


@converter("BlackmanWindow")
def blackman_window(node: Node) -> Known:
    """``0.42 - 0.5 cos(2 pi n / N) + 0.08 cos(4 pi n / N)``: a constant."""
    return _window(node, (0.42, -0.5, 0.08))


@converter("MelWeightMatrix")
def mel_weight_matrix(node: Node) -> Known:
    """The ``(dft_length // 2 + 1, num_mel_bins)`` matrix of triangular filters, spaced evenly
    on the mel scale, as onnx's reference builds it: a constant, every input known at import."""
    bins, length, rate = (_scalar_int(node, i, w) for i, w in enumerate(("bins", "length", "rate")))
    edges = [node.numeric(3), node.numeric(4)]
    if bins is None or length is None or rate is None or any(e is None for e in edges):
        raise Unsupported("MelWeightMatrix inputs not known at import")
    low, high = (float(np.asarray(e).reshape(-1)[0]) for e in edges)
    if bins <= 0 or length <= 0 or rate <= 0:
        raise NodeError(f"num_mel_bins {bins}, dft_length {length}, sample_rate {rate} must be > 0")
    points = np.arange(0, bins + 2)
    low_mel = 2595 * np.log1p(low / 700) / np.log(10)
    high_mel = 2595 * np.log1p(high / 700) / np.log(10)
    step = (high_mel - low_mel) / points.shape[0]
    hertz = 700 * np.expm1((points * step + low_mel) / 2595 * np.log(10))
    edge = (((length + 1) * hertz) // rate).astype(int)
    spectrum = length // 2 + 1
    if edge.min() < 0 or edge.max() >= spectrum + 1:
        raise NodeError(f"the mel edges {edge.tolist()} fall outside {spectrum} DFT bins")
    out = np.zeros((spectrum + 1, bins))
    for i in range(bins):
        left, center, right = edge[i], edge[i + 1], edge[i + 2]
        if center == left:
            out[center, i] = 1
        else:
            for j in range(left, center + 1):
                out[j, i] = (j - left) / (center - left)
        for j in range(center, right):
            out[j, i] = (right - j) / (right - center)
    dtype = _output_dtype(node)
    return Known(out[:spectrum].astype(dtype), dtype)


# ---- DFT ------------------------------------------------------------------------------------


def _transform(x: Any, axis: int, length: int | None, inverse: bool, onesided: bool) -> Any:
    """The catalogue's ``dft`` of ``x`` (``[..., n, ..., 1 or 2]``) along ``axis``: numpy's FFT
    in the input's precision, as onnx's reference (``length`` None: the axis dim, or
    ``2 (n - 1)`` for an inverse one-sided one, a symbol if the dim is one)."""
    dtype = value_dtype(x)
    if dtype not in _FLOATS:
        raise Unsupported(f"a DFT of {dtype} (float16, float32 and float64 are supported)")
    channels = value_shape(x)[-1]
    if channels not in (1, 2):
        raise NodeError(f"the last dim must be 1 (real) or 2 (complex), got {channels}")
    if length is not None and length <= 0:
        raise NodeError(f"dft_length {length} must be positive")
    return trace.apply("dft", x, axis=axis, length=length, inverse=inverse, onesided=onesided)


@converter("DFT")
def dft(node: Node) -> Any:
    """The DFT along an axis (an attribute before opset 20, the third input from it), of the
    length ``dft_length`` (known at import; the input is cut or padded with zeros to it),
    ``inverse`` (scaled by ``1 / length``) and ``onesided`` (the first ``length // 2 + 1`` bins;
    for an inverse one the real signal those bins are half of)."""
    x_shape = value_shape(node.input(0))
    rank = len(x_shape)
    if rank < 2:
        raise NodeError(f"DFT input of rank {rank} (a signal axis and a last axis of 1 or 2)")
    if node.opset >= 20:
        given = _scalar_int(node, 2, "axis")
        raw_axis = -2 if given is None else given
    else:
        raw_axis = int(node.attr("axis", 1))
    axis = normalize_axis(raw_axis, rank)
    if axis == rank - 1:
        raise NodeError("the DFT axis cannot be the last one (real and imaginary parts)")
    inverse = bool(node.attr("inverse", 0))
    onesided = bool(node.attr("onesided", 0))
    if node.input(1) is not None and node.numeric(1) is None:
        raise Unsupported("a dft_length not known at import")
    length = _scalar_int(node, 1, "dft_length")
    if inverse and onesided and x_shape[-1] != 2:
        raise NodeError("an inverse one-sided DFT takes complex input (a last dim of 2)")
    return _transform(node.tensor(0), axis, length, inverse, onesided)


# ---- STFT -----------------------------------------------------------------------------------


@converter("STFT")
def stft(node: Node) -> Any:
    """``[batch, frames, bins, 2]``: frames of ``frame_length`` every ``frame_step`` samples
    (``frames = (length - frame_length) // frame_step + 1``), times the window (input 2, a
    run-time tensor; none is all ones), each transformed (``onesided``: ``frame_length // 2 +
    1`` bins). Step and frame length known at import; the signal's length may be a dim."""
    signal = node.input(0)
    shape = value_shape(signal)
    if len(shape) != 3:
        raise NodeError(f"STFT signal of rank {len(shape)}; [batch, length, 1 or 2] expected")
    step = _scalar_int(node, 1, "frame_step")
    if step is None or step <= 0:
        raise NodeError(f"frame_step must be a positive number known at import, got {step}")
    window = node.input(2)
    frame = _scalar_int(node, 3, "frame_length")
    if window is not None:
        (width,) = value_shape(window) or (None,)
        if not isinstance(width, int):
            raise Unsupported("a window whose length is not known at import")
        if frame is not None and frame != width:
            raise NodeError(f"frame_length {frame} but a window of {width}")
        frame = width
    if frame is None:
        raise NodeError("STFT needs a window or a frame_length")
    if frame <= 0:
        raise NodeError(f"frame_length {frame} must be positive")
    length = shape[1]
    if ir.compare(length, ">=", frame, {}) is False:
        raise NodeError(f"a signal of {length} samples is shorter than a frame of {frame}")
    if not isinstance(length, int) and not node.nonnegative(length - frame):
        raise Unsupported(f"a signal length {length} not proved >= the frame length {frame}")
    count = sympy.floor(sympy.sympify(length - frame) / step) + 1
    frames = int(count) if count.is_Integer else ir.check_dim(count)
    starts = _frame_starts(node, frames, step)
    grid = trace.apply("add", starts, trace.constant(np.arange(frame, dtype=np.int64), "int64"))
    framed = trace.apply("take", node.tensor(0), grid, axis=1)  # [batch, frames, frame, c]
    if window is not None:
        w = trace.apply("reshape", node.tensor(2), newshape=[frame, 1])
        if value_dtype(window) != value_dtype(signal):
            w = trace.apply("cast", w, dtype=value_dtype(signal))
        framed = trace.apply("multiply", framed, w)
    onesided = bool(node.attr("onesided", 1))
    return _transform(framed, 2, frame, False, onesided)


def _frame_starts(node: Node, frames: Any, step: int) -> Any:
    """``[[0], [step], [2 step], ...]``: int64 ``(frames, 1)``."""
    if isinstance(frames, int):
        return trace.constant((np.arange(frames, dtype=np.int64) * step).reshape(-1, 1), "int64")
    zero = trace.constant(np.array(0, np.int64), "int64")
    stop = node.materialize(Known.of(frames * step, "int64"))
    by = trace.constant(np.array(step, np.int64), "int64")
    out = trace.apply("arange", zero, stop, by, dtype="int64")
    return trace.apply("reshape", out, newshape=[frames, 1])
