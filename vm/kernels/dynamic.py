"""Kernels of the data-dependent ops. Their outputs are pre-allocated like any other: the
bytecode first runs the op's data-dependent shape function (``shape_func`` instruction) on the
input values, allocates, then invokes the kernel, which writes into ``out``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from shape_funcs.ops.dynamic import select_boxes, unique_values

from .registry import Kernel, register_kernel, register_table
from .transform import slices


def _shape_of(x: np.ndarray, out: np.ndarray) -> None:
    """``x.shape`` as a 1-d integer tensor (the output's dtype is the ``dtype`` attribute)."""
    out[...] = x.shape


def _dyn_reshape(x: np.ndarray, newshape: np.ndarray, out: np.ndarray) -> None:
    """Copy ``x`` into ``out``, whose shape the shape function resolved from ``newshape``."""
    np.copyto(out, x.reshape(out.shape))


def _fill_zeros(shape: np.ndarray, out: np.ndarray) -> None:
    """Zeros of the shape held in ``shape`` (already the output's shape)."""
    out.fill(0)


def _fill_ones(shape: np.ndarray, out: np.ndarray) -> None:
    """Ones of the shape held in ``shape``."""
    out.fill(1)


def _dyn_full(fill_value: np.ndarray, shape: np.ndarray, out: np.ndarray) -> None:
    """``fill_value`` in the shape held in ``shape``, converted to the output's dtype."""
    np.copyto(out, fill_value, casting="unsafe")


def _dyn_strided_slice(
    x: np.ndarray, begin: np.ndarray, end: np.ndarray, strides: np.ndarray, out: np.ndarray
) -> None:
    """``strided_slice`` with begin/end/strides read from 1-d integer tensors."""
    np.copyto(out, x[slices(x.shape, begin.tolist(), end.tolist(), strides.tolist())])


def _argwhere(x: np.ndarray, out: np.ndarray) -> None:
    """Indices of the non-zero elements, ``(count, rank)`` int64. ``np.argwhere`` has no
    ``out=``: the index array is built, then copied; the count is checked against the output
    first (``np.count_nonzero`` allocates nothing), so that temporary is the output's size."""
    shape = (int(np.count_nonzero(x)), x.ndim)
    if shape != out.shape:
        raise ValueError(
            f"argwhere: input of shape {x.shape} has {shape[0]} non-zero elements, giving "
            f"shape {shape}, but the output is {out.shape}"
        )
    np.copyto(out, np.argwhere(x))


@register_kernel("compress")
def compress(attrs: Mapping[str, Any]) -> Kernel:
    """The slices of ``x`` along ``axis`` where the 1-d ``mask`` is non-zero, into ``out``
    (sized by the shape function's ``np.count_nonzero``). It is ``np.flatnonzero`` then
    ``np.take(..., mode="wrap")``, not ``np.compress``: ``np.compress`` is the same two steps
    with ``mode="raise"``, which bounds-checks every index and, with ``out=``, fills a buffered
    copy of ``out`` (numpy's note on ``take``); the positions of a mask are in range by
    construction, so ``wrap`` never changes one and skips both (measured ~0.86x of
    ``np.compress`` at 1e6 float32 elements, design/compiler_fusion.md)."""
    axis = attrs["axis"]

    def kernel(x: np.ndarray, mask: np.ndarray, out: np.ndarray) -> None:
        if mask.ndim != 1 or not -x.ndim <= axis < x.ndim or mask.shape[0] != x.shape[axis]:
            raise ValueError(
                f"compress: mask of shape {mask.shape} does not select along axis {axis} of "
                f"an input of shape {x.shape}"
            )
        positions = np.flatnonzero(mask)
        a = axis % x.ndim
        if out.shape != (*x.shape[:a], positions.size, *x.shape[a + 1 :]):
            raise ValueError(
                f"compress: the mask selects {positions.size} of {mask.shape[0]}, but the "
                f"output is {out.shape} for an input of shape {x.shape}"
            )
        np.take(x, positions, axis=a, out=out, mode="wrap")

    return kernel


register_table(
    {
        "shape_of": _shape_of,
        "dyn.reshape": _dyn_reshape,
        "dyn.zeros": _fill_zeros,
        "dyn.ones": _fill_ones,
        "dyn.full": _dyn_full,
        "dyn.strided_slice": _dyn_strided_slice,
        "argwhere": _argwhere,
    }
)


def topk_order(x: np.ndarray, axis: int, ascending: bool) -> np.ndarray:
    """Indices sorting ``x`` along ``axis``, ties broken by the smaller index first, in both
    directions (descending order without negating, which unsigned ints could not survive)."""
    if ascending:
        return np.argsort(x, axis=axis, kind="stable")
    n = x.shape[axis]
    rev = np.flip(x, axis=axis)
    order = np.flip(np.argsort(rev, axis=axis, kind="stable"), axis=axis)
    reversed_order: np.ndarray = (n - 1) - order
    return reversed_order


#: ``topk`` pre-selects candidates (``topk_small_k``) when ``k * SMALL_K_RATIO <= n`` along the
#: axis: a full stable sort of a 256-wide axis for k = 8 ran ~230x ``np.add`` on the same input
#: (benchmarks/kernel_audit.py).
SMALL_K_RATIO = 8


def topk_small_k(x: np.ndarray, axis: int, ascending: bool, k: int) -> np.ndarray | None:
    """``topk_order(x, axis, ascending)`` restricted to its first ``k`` positions, without
    sorting the whole axis: ``np.partition`` finds the k-th value, every element at least as
    good is a candidate (ties included), and only the candidates are sorted. The candidates of
    a row are kept in index order, so the stable sort breaks ties by the smaller index, as
    ``topk_order`` does. Returns None (use ``topk_order``) for NaNs (they order differently in
    a partition's comparisons), dtypes other than ints and floats, or too many ties (more than
    ``4 * k + 16`` candidates in a row)."""
    if x.dtype.kind not in "fiu" or k == 0 or x.size == 0:
        return None
    xm = np.moveaxis(x, axis, -1)
    n = xm.shape[-1]
    if x.dtype.kind == "f" and np.isnan(xm).any():
        return None
    kth = k - 1 if ascending else n - k
    pivot = np.partition(xm, kth, axis=-1)[..., kth : kth + 1]
    mask = xm <= pivot if ascending else xm >= pivot
    counts = np.count_nonzero(mask, axis=-1)
    width = int(counts.max())
    if width > 4 * k + 16:
        return None
    rows = mask.reshape(-1, n)
    r, cols = np.nonzero(rows)  # row-major: each row's candidates in index order
    starts = np.cumsum(counts.reshape(-1)) - counts.reshape(-1)
    cand = np.zeros((rows.shape[0], width), np.intp)
    filled = np.zeros((rows.shape[0], width), bool)
    at = np.arange(r.size) - starts[r]
    cand[r, at] = cols
    filled[r, at] = True
    values = np.take_along_axis(xm.reshape(-1, n), cand, axis=-1)
    # Padding (rows with fewer candidates than the widest) gets the worst value of the dtype
    # and a later position than every candidate, so the stable sort puts it last.
    if x.dtype.kind == "f":
        values[~filled] = np.inf if ascending else -np.inf
    else:
        info = np.iinfo(x.dtype)
        values[~filled] = info.max if ascending else info.min
    best = topk_order(values, -1, ascending)[:, :k]
    picked = np.take_along_axis(cand, best, axis=-1).reshape((*xm.shape[:-1], k))
    return np.moveaxis(picked, -1, axis)


def _topk_kernel(attrs: Mapping[str, Any]) -> Kernel:
    axis, ret, ascending = attrs["axis"], attrs["ret_type"], attrs["is_ascend"]

    def run(x: np.ndarray, outs: tuple[np.ndarray, ...]) -> None:
        _check_topk(x, axis, ret, outs)
        first = outs[0]
        k = first.shape[axis] if first.ndim else 0
        order = None
        if k * SMALL_K_RATIO <= x.shape[axis]:
            order = topk_small_k(x, axis, ascending, k)
        if order is None:
            order = np.take(topk_order(x, axis, ascending), np.arange(k), axis=axis)
        if ret == "both":
            np.copyto(outs[0], np.take_along_axis(x, order, axis=axis))
            np.copyto(outs[1], order, casting="unsafe")
        elif ret == "values":
            np.copyto(outs[0], np.take_along_axis(x, order, axis=axis))
        else:
            np.copyto(outs[0], order, casting="unsafe")

    return run


def _check_topk(x: np.ndarray, axis: int, ret: str, outs: tuple[np.ndarray, ...]) -> None:
    """Raise ValueError unless ``outs`` are what topk of ``x`` makes: ``x``'s shape with
    ``k <= x.shape[axis]`` along ``axis``, two outputs for ``ret_type="both"``."""
    want = 2 if ret == "both" else 1
    if len(outs) != want:
        raise ValueError(f"topk: ret_type {ret!r} makes {want} outputs, got {len(outs)}")
    if not -x.ndim <= axis < x.ndim:
        raise ValueError(f"topk: axis {axis} is out of bounds for input shape {x.shape}")
    a = axis % x.ndim
    k = outs[0].shape[a] if outs[0].ndim == x.ndim else -1
    shape = (*x.shape[:a], k, *x.shape[a + 1 :])
    if not 0 <= k <= x.shape[a] or any(o.shape != shape for o in outs):
        raise ValueError(
            f"topk: outputs {[o.shape for o in outs]} do not fit input shape {x.shape} "
            f"(k along axis {axis} at most {x.shape[a]}, the other dims the input's)"
        )


@register_kernel("topk")
def topk(attrs: Mapping[str, Any]) -> Kernel:
    """The k largest (smallest if ``is_ascend``) along ``axis``, sorted; values and/or indices
    (``ret_type``), indices in the ``dtype`` attribute. k is read from the output's shape, which
    the shape function computed from the ``k`` attribute, and checked against the input. Sorting
    has no ``out=``: the temporaries are at most three int64 arrays of the input's size (the
    order, and for descending its flipped copy) and the outputs' size; for ``k <= n / 8``
    (``topk_small_k``) a partitioned copy of the input, a bool mask of its size and arrays of
    at most ``4k + 16`` candidates per row instead."""
    run = _topk_kernel(attrs)
    return lambda x, *outs: run(x, outs)


@register_kernel("dyn.topk")
def dyn_topk(attrs: Mapping[str, Any]) -> Kernel:
    """``topk`` with k held in a scalar tensor (the output's shape already says k)."""
    run = _topk_kernel(attrs)
    return lambda x, k, *outs: run(x, outs)


@register_kernel("sort")
def sort(attrs: Mapping[str, Any]) -> Kernel:
    """``x`` sorted along ``axis`` into ``out``, stably (``topk_order``: descending without
    negating); temporaries: the int64 order (and its flipped copy, descending)."""
    axis, descending = attrs["axis"], attrs["descending"]

    def kernel(x: np.ndarray, out: np.ndarray) -> None:
        if not descending:
            np.copyto(out, np.sort(x, axis=axis, kind="stable"))
            return
        np.copyto(out, np.take_along_axis(x, topk_order(x, axis, False), axis=axis))

    return kernel


@register_kernel("argsort")
def argsort(attrs: Mapping[str, Any]) -> Kernel:
    """The stable sorting order of ``x`` along ``axis`` (equal values by the lower index
    first, in both directions), cast to ``out``'s dtype."""
    axis, descending = attrs["axis"], attrs["descending"]

    def kernel(x: np.ndarray, out: np.ndarray) -> None:
        np.copyto(out, topk_order(x, axis, not descending), casting="unsafe")

    return kernel


@register_kernel("unique")
def unique(attrs: Mapping[str, Any]) -> Kernel:
    """ONNX ``Unique`` (``unique_values``) into four outputs sized by the shape function, which
    ran the same ``np.unique`` (data-dependent ops compute twice, design/shapes.md)."""
    axis, keep_sorted = attrs["axis"], attrs["sorted"]

    def kernel(x: np.ndarray, *outs: np.ndarray) -> None:
        results = unique_values(x, axis, keep_sorted)
        if len(outs) != 4 or any(o.shape != r.shape for o, r in zip(outs, results, strict=True)):
            raise ValueError(
                f"unique: outputs {[o.shape for o in outs]} do not fit the results "
                f"{[r.shape for r in results]} of an input of shape {x.shape}"
            )
        for o, r in zip(outs, results, strict=True):
            np.copyto(o, r, casting="unsafe")

    return kernel


@register_kernel("non_max_suppression")
def non_max_suppression(attrs: Mapping[str, Any]) -> Kernel:
    """ONNX NonMaxSuppression into ``out`` (``(count, 3)`` int64 rows ``[batch, class,
    box]``). The selection is ``shape_funcs``' ``select_boxes``, the function whose row count
    the shape function returned: the VM ran it once to size ``out``, and runs it again here (a
    shape function cannot hand its work to the kernel; design/shapes.md). Bad inputs raise
    ValueError, and so does an output of another shape."""
    center_point_box = attrs["center_point_box"]

    def kernel(
        boxes: np.ndarray,
        scores: np.ndarray,
        max_output_boxes_per_class: np.ndarray,
        iou_threshold: np.ndarray,
        score_threshold: np.ndarray,
        out: np.ndarray,
    ) -> None:
        rows = select_boxes(
            boxes,
            scores,
            max_output_boxes_per_class,
            iou_threshold,
            score_threshold,
            center_point_box,
        )
        if rows.shape != out.shape:
            raise ValueError(
                f"non_max_suppression: {rows.shape[0]} boxes selected, giving shape "
                f"{rows.shape}, but the output is {out.shape}"
            )
        np.copyto(out, rows, casting="unsafe")

    return kernel
