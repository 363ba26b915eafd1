"""Image kernels: ``resize``, with ONNX ``Resize``'s arithmetic (``onnx.reference``'s
``op_resize``), axis by axis.

Each resized axis maps its output indices ``y`` to source coordinates ``x`` in float64 (the
coordinate transformation mode, with the axis's scale: the one given, or out/in), then:

- ``nearest``: one ``np.take`` of the rounded, clamped coordinates (any dtype, no arithmetic);
- ``linear`` / ``cubic``: the 2 or 4 neighbours of each ``x`` (clamped to the axis: edge
  padding), blended with the reference's coefficients (cubic's are float32 numbers, as the
  reference's). An axis of at most ``DENSE_AXIS_MAX`` input elements (a segmentation head's
  logits upsampled to the image: 8 to 16) is blended by one matrix product with the axis's
  dense (out, in) interpolation matrix, the taps' weights at their inputs (``axis_matrix``,
  kept like the tables), over the whole tensor, in float32, for float32 and float16 data:
  within a few float32 roundings of the reference's float64 blend (onnxruntime computes in
  float32 too). Other dtypes (float64, integers, whose truncation a last-bit difference
  could move), longer axes and inputs holding a NaN or an infinity (a product would spread
  it over the whole row: ``0 * inf``) take one ``np.take`` per tap in float64: the
  reference's values. The axes are blended one after the other and rounded once into
  ``out``. Integer outputs are truncated toward zero and saturated, as onnxruntime does
  (``static_cast`` of its float result; the ONNX reference rounds instead).

An axis whose extent and scale (within ``math.isclose``) do not change is skipped, as the
reference skips it. Shapes, scales and attributes are checked first (ValueError naming them).

The index and weight tables of an axis depend only on its sizes, its scale and the attributes:
they are computed once per such key (``axis_table``, a bounded LRU cache of read-only arrays) and
reused by every later call at the same shapes.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from shape_funcs.declarations import BUILTIN_OPS

from .blas_threads import matmul as _matmul
from .registry import Kernel, register_kernel
from .resize_repeat import repeat_factor, upsample

#: The modes resize takes, read from its declaration (``shape_funcs/declarations``).
_MODES = BUILTIN_OPS["resize"].choices("mode")
_COORDINATE_MODES = BUILTIN_OPS["resize"].choices("coordinate_transformation_mode")
_NEAREST_MODES = BUILTIN_OPS["resize"].choices("nearest_mode")


def source_coordinates(mode: str, size_in: int, size_out: int, scale: float) -> np.ndarray:
    """The float64 source coordinate of each output index along one axis (ONNX's
    ``coordinate_transformation_mode``, written as the reference computes it: ``length`` is
    the float ``scale * size_in``, which is not always ``size_out``)."""
    y = np.arange(size_out, dtype=np.float64)
    length = scale * size_in
    if mode == "half_pixel":
        return (y + 0.5) / scale - 0.5
    if mode == "half_pixel_symmetric":
        offset = size_in / 2 * (1 - size_out / length)
        return offset + (y + 0.5) / scale - 0.5
    if mode == "pytorch_half_pixel":
        return np.full(size_out, -0.5) if length == 1 else (y + 0.5) / scale - 0.5
    if mode == "align_corners":
        return np.zeros(size_out) if length == 1 else y * (size_in - 1) / (length - 1)
    if mode == "asymmetric":
        return y / scale
    # tf_half_pixel_for_nn (Resize-11's, still honoured by onnxruntime; the reference has none)
    return (y + 0.5) / scale


def nearest_indices(x: np.ndarray, nearest_mode: str, size_in: int) -> np.ndarray:
    """The input index each coordinate takes: ``x`` itself when an integer, else its floor or
    ceiling by ``nearest_mode`` (ties at .5 by the mode's preference), clamped to the axis."""
    floor = np.floor(x)
    ratio = x - floor
    if nearest_mode == "round_prefer_floor":
        up = ratio > 0.5
    elif nearest_mode == "round_prefer_ceil":
        up = ratio >= 0.5
    elif nearest_mode == "floor":
        up = np.zeros(x.shape, bool)
    else:
        up = ratio > 0
    index: np.ndarray = np.clip(floor + up, 0, size_in - 1).astype(np.intp)
    return index


def _cubic_coeffs(r: np.ndarray, a: float) -> np.ndarray:
    """The reference's 4 cubic-convolution weights of each ratio ``r`` in ``(0, 1]``.

    They are float32 numbers: the reference (and onnxruntime) evaluates them with the float32
    ``cubic_coeff_a``, each operand ``r``, ``r + 1``, ``1 - r``, ``2 - r`` rounded to float32
    (computed in float64 first, as the reference's Python floats are).
    """
    f32 = np.float32
    a32 = f32(a)
    r1, r0 = (r + 1).astype(f32), r.astype(f32)
    s0, s1 = (1 - r).astype(f32), ((1 - r) + 1).astype(f32)
    weights = [
        ((a32 * r1 - 5 * a32) * r1 + 8 * a32) * r1 - 4 * a32,
        ((a32 + 2) * r0 - (a32 + 3)) * r0 * r0 + 1,
        ((a32 + 2) * s0 - (a32 + 3)) * s0 * s0 + 1,
        ((a32 * s1 - 5 * a32) * s1 + 8 * a32) * s1 - 4 * a32,
    ]
    return np.stack(weights, axis=1).astype(np.float64)


def taps(
    x: np.ndarray, mode: str, size_in: int, cubic_a: float, exclude_outside: bool
) -> tuple[np.ndarray, np.ndarray]:
    """For ``linear`` (2 taps) or ``cubic`` (4), the clamped input indices ``(out, taps)`` and
    their weights, as the reference picks them: the taps nearest ``x``, the lower ones on a
    tie (an integer ``x`` has ratio 1, which gives its own element weight 1 and the others
    0); ``exclude_outside`` gives the taps outside the axis weight 0 and renormalises."""
    floor = np.floor(x)
    ratio = np.where(x == floor, 1.0, x - floor)
    n = 2 if mode == "linear" else 4
    pad = n // 2
    # The reference finds the window in coordinates shifted by the edge padding; shifting
    # rounds x + pad, so the window is found the same way here, to pick the same taps.
    padded = x + pad
    p = np.floor(padded)
    start = p + np.where(padded == p, -(n // 2), -(n // 2) + 1) - pad
    index = start.astype(np.int64)[:, None] + np.arange(n)[None, :]
    coeffs = np.stack([1 - ratio, ratio], axis=1) if n == 2 else _cubic_coeffs(ratio, cubic_a)
    if exclude_outside:
        coeffs = np.where((index < 0) | (index >= size_in), 0.0, coeffs)
        total = coeffs.sum(axis=1, keepdims=True)
        coeffs = coeffs / np.where(total == 0, 1.0, total)
    return np.clip(index, 0, size_in - 1).astype(np.intp), coeffs


def _blend(data: np.ndarray, axis: int, index: np.ndarray, coeffs: np.ndarray) -> np.ndarray:
    """``sum_k coeffs[:, k] * data[index[:, k]]`` along ``axis``, in tap order (float64)."""
    shape = [1] * data.ndim
    shape[axis] = -1
    acc: np.ndarray = np.take(data, index[:, 0], axis=axis) * coeffs[:, 0].reshape(shape)
    for k in range(1, index.shape[1]):
        acc += np.take(data, index[:, k], axis=axis) * coeffs[:, k].reshape(shape)
    return acc


#: Output axes up to this long have their tables cached (see ``axis_table``); longer ones are
#: computed per call, so the cache cannot hold more than a bounded amount of memory.
CACHED_AXIS_MAX = 1 << 12


def axis_table(
    mode: str,
    coord: str,
    nearest: str,
    cubic_a: float,
    exclude: bool,
    size_in: int,
    size_out: int,
    scale: float,
) -> tuple[np.ndarray, np.ndarray | None]:
    """One axis's input indices and (linear/cubic) weights, read-only: ``nearest`` gives
    ``(indices, None)``, else ``taps``'s ``(out, taps)`` pair. Cached (LRU, 128 axes) for an
    output axis up to ``CACHED_AXIS_MAX`` long, so the cache stays below 128 * 2**12 * 64
    bytes (cubic's 4 indices and 4 weights an element: 34 MB at worst, a few KB an axis for
    ordinary images) whatever the shapes."""
    if size_out <= CACHED_AXIS_MAX:
        return _cached_axis_table(mode, coord, nearest, cubic_a, exclude, size_in, size_out, scale)
    return _axis_table(mode, coord, nearest, cubic_a, exclude, size_in, size_out, scale)


def _axis_table(
    mode: str,
    coord: str,
    nearest: str,
    cubic_a: float,
    exclude: bool,
    size_in: int,
    size_out: int,
    scale: float,
) -> tuple[np.ndarray, np.ndarray | None]:
    coords = source_coordinates(coord, size_in, size_out, scale)
    if mode == "nearest":  # exclude_outside does not apply (see ir/ops/image.py)
        index = nearest_indices(coords, nearest, size_in)
        index.flags.writeable = False
        return index, None
    index, coeffs = taps(coords, mode, size_in, cubic_a, exclude)
    index.flags.writeable = False
    coeffs.flags.writeable = False
    return index, coeffs


_cached_axis_table = functools.lru_cache(maxsize=128)(_axis_table)

#: A linear or cubic axis of at most this many input elements, whose matrix holds at most
#: ``DENSE_MATRIX_MAX`` elements, is blended by a product with its dense interpolation matrix
#: (module doc): LRASPP's (4, 21, 12, 12) logits to 96x96, one thread, 5,972 us by taps in
#: float64 against 315 by float32 products (982 by float64 ones, still a last bit off the
#: reference now and then: not used); (8, 21, 16, 16) to 128x128 25.1 -> 1.4 ms; (4, 128, 6,
#: 6) to 12x12 486 -> 73 us.
#: A product costs ``in`` multiply-adds an output where the taps cost 2 or 4, hence the bound.
DENSE_AXIS_MAX = 64
DENSE_MATRIX_MAX = 1 << 16


@functools.lru_cache(maxsize=64)
def axis_matrix(
    mode: str,
    coord: str,
    nearest: str,
    cubic_a: float,
    exclude: bool,
    size_in: int,
    size_out: int,
    scale: float,
) -> np.ndarray:
    """The (size_out, size_in) float32 matrix of one linear or cubic axis (read-only):
    row ``i`` holds the weights of output ``i``'s taps at their inputs (two taps clamped to
    the same input add up). Cached (LRU, 64 matrices of at most ``DENSE_MATRIX_MAX``
    elements: 32 MB at worst)."""
    index, coeffs = axis_table(mode, coord, nearest, cubic_a, exclude, size_in, size_out, scale)
    assert coeffs is not None  # (linear or cubic)
    matrix = np.zeros((size_out, size_in))
    np.add.at(matrix, (np.arange(size_out)[:, None], index), coeffs)
    matrix = matrix.astype(np.float32)
    matrix.flags.writeable = False
    return matrix


def _blend_dense(
    data: np.ndarray, axis: int, matrix: np.ndarray, into: np.ndarray | None = None
) -> np.ndarray:
    """``data`` resized along ``axis`` by the product with ``matrix`` (out, in), in
    ``data``'s dtype: the axis is the rows of a batched product (the columns when last), on
    the BLAS threads ``blas_threads`` chooses. ``into``: an array of the result's shape and
    dtype to write it into (and return)."""
    shape = list(data.shape)
    shape[axis] = matrix.shape[0]
    result = np.empty(shape, data.dtype) if into is None else into
    if axis == data.ndim - 1:
        _matmul(data, matrix.T, result)
    else:
        _matmul(matrix, np.moveaxis(data, axis, -2), np.moveaxis(result, axis, -2))
    return result


def _check(
    x: np.ndarray, out: np.ndarray, sizes: Sequence[Any], scales: Sequence[float] | None
) -> None:
    if out.ndim != x.ndim or len(sizes) != x.ndim:
        raise ValueError(
            f"resize: output {out.shape} and sizes {list(sizes)} for input shape {x.shape}"
        )
    if out.dtype != x.dtype:
        raise ValueError(f"resize: output dtype {out.dtype} for input dtype {x.dtype}")
    for a, (s, n) in enumerate(zip(sizes, out.shape, strict=True)):
        if s is not None and s != n:
            raise ValueError(f"resize: output {out.shape} is not sizes {list(sizes)}")
        if n > 0 and x.shape[a] == 0:
            raise ValueError(f"resize: axis {a} of input shape {x.shape} is empty, resized to {n}")
    if scales is not None:
        if len(scales) != x.ndim:
            raise ValueError(f"resize: {len(scales)} scales for input shape {x.shape}")
        if not all(math.isfinite(s) and s > 0 for s in scales):
            raise ValueError(f"resize: scales {list(scales)} must be positive numbers")


@register_kernel("resize")
def resize(attrs: Mapping[str, Any]) -> Kernel:
    """ONNX ``Resize`` of ``x`` into ``out`` (see the module doc)."""
    sizes, scales, mode = attrs["sizes"], attrs["scales"], attrs["mode"]
    coord, nearest = attrs["coordinate_transformation_mode"], attrs["nearest_mode"]
    cubic_a, exclude = float(attrs["cubic_coeff_a"]), bool(attrs["exclude_outside"])
    if mode not in _MODES:
        raise ValueError(f"resize: unknown mode {mode!r}")
    if coord not in _COORDINATE_MODES or nearest not in _NEAREST_MODES:
        raise ValueError(f"resize: unknown mode {coord!r} or nearest mode {nearest!r}")

    def kernel(x: np.ndarray, out: np.ndarray) -> None:
        _check(x, out, sizes, scales)
        if mode != "nearest" and x.dtype == np.bool_:
            raise ValueError(f"resize: {mode} resize of a bool tensor")
        if out.size == 0:
            return
        result = x
        # products (in float32) for float32 and float16 data, none where a NaN or an infinity
        # would spread along a row (module doc)
        products = (
            mode != "nearest" and x.dtype in (np.float32, np.float16) and bool(np.isfinite(x).all())
        )
        axes = []  # (axis, scale) of the axes to resize
        for a in range(x.ndim):
            size_in, size_out = x.shape[a], out.shape[a]
            scale = float(scales[a]) if scales is not None else size_out / size_in
            if not (size_out == size_in and math.isclose(scale, 1.0)):
                axes.append((a, scale))  # the reference leaves the others as they are
        if mode == "nearest" and _upsampled(x, out, axes, (mode, coord, nearest, cubic_a, exclude)):
            return
        for a, scale in axes:
            size_in, size_out = x.shape[a], out.shape[a]
            table = (mode, coord, nearest, cubic_a, exclude, size_in, size_out, scale)
            if mode == "nearest":
                result = np.take(result, axis_table(*table)[0], axis=a)
            elif products and size_in <= DENSE_AXIS_MAX and size_in * size_out <= DENSE_MATRIX_MAX:
                last = (a, scale) == axes[-1] and out.dtype == np.float32
                into = out if last else None  # the last product straight into out
                result = _blend_dense(
                    result.astype(np.float32, copy=False), a, axis_matrix(*table), into
                )
                if last:
                    return
            else:
                index, coeffs = axis_table(*table)
                assert coeffs is not None  # (linear or cubic)
                result = _blend(result.astype(np.float64, copy=False), a, index, coeffs)
        if out.dtype.kind in "iu" and result.dtype != out.dtype:
            info = np.iinfo(out.dtype)
            result = np.clip(np.trunc(result), info.min, info.max)
        np.copyto(out, result, casting="unsafe")

    return kernel


def _upsampled(
    x: np.ndarray,
    out: np.ndarray,
    axes: Sequence[tuple[int, float]],
    attrs: tuple[str, str, str, float, bool],
) -> bool:
    """Whether a nearest resize was done as repeats (``resize_repeat``): every resized axis is
    one of the last two, its table repeats each input a whole number of times, and ``out``
    is C-contiguous; False (nothing written) otherwise."""
    if x.ndim < 2 or not axes or not out.flags.c_contiguous:
        return False
    factors = [1, 1]
    for a, scale in axes:
        if a < x.ndim - 2:
            return False
        size_in, size_out = x.shape[a], out.shape[a]
        factor = _repeat_factor(*attrs, size_in, size_out, scale)
        if not factor:
            return False
        factors[a - x.ndim + 2] = factor
    upsample(x, out, *factors)
    return True


@functools.lru_cache(maxsize=128)
def _repeat_factor(*table: Any) -> int:
    """``resize_repeat.repeat_factor`` of the nearest axis table ``table`` (kept per table;
    an output size that is no multiple of the input's is no repeat, without the table)."""
    size_in, size_out = table[5], table[6]
    if size_in < 1 or size_out % size_in:
        return 0
    index, _ = axis_table(*table)
    return repeat_factor(index, size_in)


@register_kernel("dyn.resize")
def dyn_resize(attrs: Mapping[str, Any]) -> Kernel:
    """``resize`` to the sizes held in the ``sizes`` tensor: its shape function read them into
    the output's shape, so this is ``resize`` with each size taken from ``out`` and the scales
    out/in (one kernel per rank, made on first use)."""
    by_rank: dict[int, Kernel] = {}

    def kernel(x: np.ndarray, sizes: np.ndarray, out: np.ndarray) -> None:
        inner = by_rank.get(x.ndim)
        if inner is None:
            inner = resize({**attrs, "sizes": [None] * x.ndim, "scales": None})
            by_rank[x.ndim] = inner
        inner(x, out)

    return kernel
