"""Shape functions of the shape and data-dependent ops.

A data-dependent input arrives as its value: a numpy array at run time, and at compile time a
numpy array when it is a constant or an ``UnknownValue`` (its type only) when it is not. With
an unknown value the result's rank is still known (from the length of a shape tensor, or the
rank of an input) and each dim that depends on the value is a fresh symbol (printed ``?``).
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from ..context import Dim, ShapeContext
from ..registry import register_shape_func
from ._common import (
    Shape,
    fail,
    normalize_axis,
    prod,
    read_int_scalar,
    read_int_vector,
    require_nonnegative,
    strided_slice_shape,
    vector_length,
)
from .image import resize
from .transform import reshape_to


@register_shape_func("shape_of")
def shape_of(ctx: ShapeContext, x: Shape, *, dtype: str = "int64") -> Shape:
    """``(rank of x,)``: only the rank matters, never a value."""
    return (len(x),)


def _static_length(value: Any, name: str) -> int:
    """The length of a 1-d tensor, which must be static: it is the rank of a result."""
    length = vector_length(value, name)
    if length is None:
        fail(
            f"{name} must have a static length (it is the rank of the result), "
            f"got shape {tuple(value.shape)}"
        )
    return length


def _shape_value(ctx: ShapeContext, value: Any, name: str) -> Shape:
    """The dims held in a 1-d shape tensor: its values, or fresh symbols when unknown."""
    if ctx.is_known(value):
        dims = read_int_vector(value, name)
        require_nonnegative(dims, name)
        return tuple(dims)
    return tuple(ctx.fresh(name) for _ in range(_static_length(value, name)))


@register_shape_func("dyn.reshape", data_dependent=[False, True])
def dyn_reshape(ctx: ShapeContext, x: Shape, newshape: Any) -> Shape:
    """``reshape`` with the newshape read from a tensor (0 and -1 as in ``reshape``)."""
    if ctx.is_known(newshape):
        return reshape_to(ctx, x, read_int_vector(newshape, "newshape"))
    return tuple(ctx.fresh("reshape") for _ in range(_static_length(newshape, "newshape")))


@register_shape_func("dyn.resize", data_dependent=[False, True])
def dyn_resize(ctx: ShapeContext, x: Shape, sizes: Any, **attrs: Any) -> Shape:
    """``resize`` to the sizes held in a 1-d tensor, one per axis: ``resize``'s shape (and its
    checks) when they are known, else a fresh dim per axis."""
    if ctx.is_known(sizes):
        return resize(ctx, x, sizes=read_int_vector(sizes, "sizes"))
    length = _static_length(sizes, "sizes")
    if length != len(x):
        fail(f"sizes has {length} entries for x of rank {len(x)}")
    return tuple(ctx.fresh("resize") for _ in x)


@register_shape_func("dyn.zeros", data_dependent=[True])
@register_shape_func("dyn.ones", data_dependent=[True])
def dyn_zeros(ctx: ShapeContext, shape: Any, *, dtype: str = "float32") -> Shape:
    """The shape held in the ``shape`` tensor."""
    return _shape_value(ctx, shape, "shape")


@register_shape_func("dyn.full", data_dependent=[False, True])
def dyn_full(ctx: ShapeContext, fill_value: Shape, shape: Any, *, dtype: str = "float32") -> Shape:
    """The shape held in the ``shape`` tensor; ``fill_value`` (a shape here) must be a scalar."""
    if fill_value:
        fail(f"fill_value must be a scalar, got shape {tuple(fill_value)}")
    return _shape_value(ctx, shape, "shape")


@register_shape_func("dyn.strided_slice", data_dependent=[False, True, True, True])
def dyn_strided_slice(ctx: ShapeContext, x: Shape, begin: Any, end: Any, strides: Any) -> Shape:
    """``strided_slice`` with begin, end and strides read from 1-d tensors.

    At compile time, unless all three are constants, every axis they may cover gets a fresh dim
    (all axes when a list's length is itself symbolic); the axes past them keep their dims.
    """
    values = (("begin", begin), ("end", end), ("strides", strides))
    if all(ctx.is_known(v) for _, v in values):
        b, e, s = (read_int_vector(v, name) for name, v in values)
        return strided_slice_shape(ctx, x, b, e, s)
    lengths = [vector_length(v, name) for name, v in values]
    covered = len(x) if None in lengths else max(n for n in lengths if n is not None)
    if covered > len(x):
        fail(f"begin/end/strides cover {covered} axes but x has rank {len(x)}")
    return (*(ctx.fresh("slice") for _ in range(covered)), *x[covered:])


@register_shape_func("argwhere", data_dependent=[True])
def argwhere(ctx: ShapeContext, x: Any) -> Shape:
    """``(number of non-zero elements, rank of x)``; the count is a fresh dim until run time."""
    rank = len(x.shape)
    if ctx.is_known(x):
        return (int(np.count_nonzero(x)), rank)
    return (ctx.fresh("argwhere"), rank)


@register_shape_func("compress", data_dependent=[False, True])
def compress(ctx: ShapeContext, x: Shape, mask: Any, *, axis: int = 0) -> Shape:
    """``x``'s shape with the ``axis`` dim replaced by the mask's non-zero count (a fresh dim
    until run time). The mask is 1-d and as long as that axis. At run time the count is one
    ``np.count_nonzero`` over the mask the program computed already (no second mask)."""
    at = normalize_axis(axis, len(x), "x")
    if len(mask.shape) != 1:
        fail(f"mask must be 1-d, got shape {tuple(mask.shape)}")
    ctx.check_equal(mask.shape[0], x[at], "mask.shape[0] == x.shape[{}]", at)
    count = int(np.count_nonzero(mask)) if ctx.is_known(mask) else ctx.fresh("compress")
    return (*x[:at], count, *x[at + 1 :])


def _topk_shapes(
    ctx: ShapeContext, x: Shape, k: Dim | None, axis: int, ret_type: str
) -> Shape | list[Shape]:
    at = normalize_axis(axis, len(x), "x")
    if k is not None:
        ctx.check(k, "<=", x[at], "k <= x.shape[{}]", at)
    else:  # k is a value known only at run time, where the concrete mode checks it
        k = ctx.fresh("k")
    out = (*x[:at], k, *x[at + 1 :])
    if ret_type == "both":
        return [out, out]
    if ret_type not in ("values", "indices"):
        fail(f"ret_type must be 'both', 'values' or 'indices', got {ret_type!r}")
    return out


@register_shape_func("topk")
def topk(
    ctx: ShapeContext,
    x: Shape,
    *,
    k: int,
    axis: int = -1,
    ret_type: str = "both",
    is_ascend: bool = False,
    dtype: str = "int64",
) -> Shape | list[Shape]:
    """The ``axis`` dim becomes ``k`` (0 <= k <= dim); two outputs when ``ret_type="both"``."""
    if k < 0:
        fail(f"k must be >= 0, got {k}")
    return _topk_shapes(ctx, x, k, axis, ret_type)


@register_shape_func("dyn.topk", data_dependent=[False, True])
def dyn_topk(
    ctx: ShapeContext,
    x: Shape,
    k: Any,
    *,
    axis: int = -1,
    ret_type: str = "both",
    is_ascend: bool = False,
    dtype: str = "int64",
) -> Shape | list[Shape]:
    """``topk`` with ``k`` read from a scalar tensor; a fresh dim while ``k`` is unknown."""
    if len(k.shape) != 0:
        fail(f"k must be a scalar tensor, got shape {tuple(k.shape)}")
    if not ctx.is_known(k):
        return _topk_shapes(ctx, x, None, axis, ret_type)
    count = read_int_scalar(k, "k")
    if count < 0:
        fail(f"k must be >= 0, got {count}")
    return _topk_shapes(ctx, x, count, axis, ret_type)


@register_shape_func("sort")
def sort(ctx: ShapeContext, x: Shape, *, axis: int = -1, descending: bool = False) -> Shape:
    """``x``'s shape (the axis must exist: a scalar has none to sort)."""
    normalize_axis(axis, len(x), "x")
    return x


@register_shape_func("argsort")
def argsort(
    ctx: ShapeContext, x: Shape, *, axis: int = -1, descending: bool = False, dtype: str = "int64"
) -> Shape:
    """``x``'s shape, as ``sort``."""
    normalize_axis(axis, len(x), "x")
    return x


def unique_values(
    x: np.ndarray, axis: int | None, keep_sorted: bool = True
) -> tuple[np.ndarray, ...]:
    """ONNX ``Unique`` of ``x`` (flattened when ``axis`` is None): the distinct values
    (``np.unique``'s, ascending; else reordered by first occurrence, the inverse renumbered to
    match), the first indices, the inverse (1-d) and the counts, int64. Shared by the shape
    function (the count), the kernel and the importer (folding known inputs)."""
    if axis is not None and x.ndim == 0:
        raise ValueError("unique along an axis of a scalar")
    y, first, inverse, counts = np.unique(
        x, return_index=True, return_inverse=True, return_counts=True, axis=axis
    )
    inverse = inverse.reshape(-1)
    if not keep_sorted:
        order = np.argsort(first, kind="stable")
        rank = np.empty_like(order)
        rank[order] = np.arange(order.size)
        y = np.take(y, order, axis=0 if axis is None else axis)
        first, inverse, counts = first[order], rank[inverse], counts[order]
    return tuple(a if a is y else a.astype(np.int64) for a in (y, first, inverse, counts))


@register_shape_func("unique", data_dependent=[True])
def unique(ctx: ShapeContext, x: Any, *, axis: int | None = None, sorted: bool = True) -> Any:
    """``[(u,) or x's shape with u along axis, (u,), (n,), (u,)]``: ``u`` the number of distinct
    elements (slices), a fresh dim until the value is known; ``n`` the element count of ``x``
    (axis None) or its axis dim."""
    shape = tuple(x.shape)
    if ctx.is_known(x):
        at = None if axis is None else normalize_axis(axis, len(shape), "x")
        count: Dim = int(unique_values(np.asarray(x), at)[0].shape[0 if at is None else at])
    else:
        count = ctx.fresh("unique")
    if axis is None:
        n = prod(shape)
        values: Shape = (count,)
    else:
        at = normalize_axis(axis, len(shape), "x")
        n = shape[at]
        values = (*shape[:at], count, *shape[at + 1 :])
    return [values, (count,), (n,), (count,)]


# ---- non_max_suppression ------------------------------------------------------------------
#
# The selection itself lives here, not in the VM: the number of rows it selects *is* the output
# shape, so the shape function must run it, and the kernel (``vm/kernels/dynamic.py``, which
# may import this package but not the other way round) runs the same function to fill ``out``.


def _one_value(value: Any, name: str) -> Any:
    """The one element of a scalar or 1-element tensor (ONNX exporters write both)."""
    if value.size != 1:
        raise ValueError(f"{name} must hold one value, got shape {tuple(value.shape)}")
    return value.reshape(())[()]


def _corners(boxes: np.ndarray, center_point_box: int) -> tuple[np.ndarray, ...]:
    """``(x_min, y_min, x_max, y_max, area)`` per box, in the boxes' dtype. Corner boxes are
    ``[y1, x1, y2, x2]`` with either corner first (min/max normalise them); center boxes
    ``[x_center, y_center, width, height]``. The arithmetic is onnxruntime's, in the same order
    and precision, so that IoUs at the threshold compare the same."""
    if center_point_box == 0:
        x_min = np.minimum(boxes[..., 1], boxes[..., 3])
        x_max = np.maximum(boxes[..., 1], boxes[..., 3])
        y_min = np.minimum(boxes[..., 0], boxes[..., 2])
        y_max = np.maximum(boxes[..., 0], boxes[..., 2])
    else:
        two = boxes.dtype.type(2)
        half_w, half_h = boxes[..., 2] / two, boxes[..., 3] / two
        x_min, x_max = boxes[..., 0] - half_w, boxes[..., 0] + half_w
        y_min, y_max = boxes[..., 1] - half_h, boxes[..., 1] + half_h
    return x_min, y_min, x_max, y_max, (x_max - x_min) * (y_max - y_min)


def _suppressed(corners: tuple[np.ndarray, ...], top: Any, rest: Any, iou: Any) -> Any:
    """Which boxes ``rest`` overlap boxes ``top`` with an IoU above ``iou``: onnxruntime's
    ``SuppressByIOU``, for index arrays that broadcast (one box against many, or every pair).
    Empty or inverted boxes (area <= 0) and boxes that do not intersect never suppress nor are
    suppressed."""
    x_min, y_min, x_max, y_max, area = corners
    ix = np.minimum(x_max[top], x_max[rest]) - np.maximum(x_min[top], x_min[rest])
    iy = np.minimum(y_max[top], y_max[rest]) - np.maximum(y_min[top], y_min[rest])
    inter = ix * iy
    union = (area[rest] + area[top]) - inter
    valid = (ix > 0) & (iy > 0) & (inter > 0) & (area[rest] > 0) & (area[top] > 0) & (union > 0)
    ratio = np.divide(inter, union, out=np.zeros_like(inter), where=valid)
    return valid & (ratio > iou)


#: Up to this many boxes per image, the IoU of every pair is computed once (shared by all
#: classes) and the greedy selection only reads it; above, one box against the rest at a time
#: (the pairs would take n**2 memory).
PAIRWISE_BOXES = 1024

_last = threading.local()
"""The last selection in this thread, by its inputs' bytes: the shape function and then the
kernel select from the same inputs, one after the other (see ``select_boxes``)."""


def select_boxes(
    boxes: np.ndarray,
    scores: np.ndarray,
    max_output_boxes_per_class: np.ndarray,
    iou_threshold: np.ndarray,
    score_threshold: np.ndarray,
    center_point_box: int = 0,
) -> np.ndarray:
    """The rows ``[batch_index, class_index, box_index]`` (int64, ``(count, 3)``) that ONNX
    NonMaxSuppression selects, in onnxruntime's order: by batch, then class, then descending
    score (ties to the smaller box index). Per batch and class, the candidates are the boxes
    scoring above ``score_threshold``; greedily, the best remaining one is selected and every
    remaining box whose IoU with it exceeds ``iou_threshold`` is dropped, until
    ``max_output_boxes_per_class`` are selected (a negative limit is 0) or none remain.

    The run-time shape function needs the count and the kernel the rows, from the same inputs:
    the last result in each thread is kept with the bytes of its inputs, and a call with equal
    ones returns a copy of it (an exact match, so never a stale answer). Raises ValueError for
    inputs onnxruntime refuses (shapes, an IoU threshold outside [0, 1], a ``center_point_box``
    other than 0 and 1) and for a threshold or limit not one value."""
    inputs = (boxes, scores, max_output_boxes_per_class, iou_threshold, score_threshold)
    key = (center_point_box, *((a.dtype.str, a.shape, a.tobytes()) for a in inputs))
    last = getattr(_last, "entry", None)
    if last is not None and last[0] == key:
        return np.array(last[1], copy=True)
    rows = _select(*inputs, center_point_box)
    _last.entry = (key, rows)
    return np.array(rows, copy=True)


def _select(
    boxes: np.ndarray,
    scores: np.ndarray,
    max_output_boxes_per_class: np.ndarray,
    iou_threshold: np.ndarray,
    score_threshold: np.ndarray,
    center_point_box: int,
    pairwise: int = PAIRWISE_BOXES,
) -> np.ndarray:
    """``select_boxes`` without the memo; the pairs are computed up to ``pairwise`` boxes."""
    if boxes.ndim != 3 or boxes.shape[2] != 4:
        raise ValueError(f"boxes must have shape (batch, num_boxes, 4), got {boxes.shape}")
    if scores.ndim != 3:
        raise ValueError(
            f"scores must have shape (batch, num_classes, num_boxes), got {scores.shape}"
        )
    if boxes.shape[0] != scores.shape[0] or boxes.shape[1] != scores.shape[2]:
        raise ValueError(
            f"boxes {boxes.shape} and scores {scores.shape} disagree on the batch or the "
            "number of boxes (boxes (batch, num_boxes, 4), scores (batch, num_classes, "
            "num_boxes))"
        )
    if center_point_box not in (0, 1):
        raise ValueError(f"center_point_box must be 0 or 1, got {center_point_box}")
    limit = max(int(_one_value(max_output_boxes_per_class, "max_output_boxes_per_class")), 0)
    iou = boxes.dtype.type(_one_value(iou_threshold, "iou_threshold"))
    if not 0 <= iou <= 1:
        raise ValueError(f"iou_threshold must be in [0, 1], got {iou}")
    threshold = scores.dtype.type(_one_value(score_threshold, "score_threshold"))
    rows: list[tuple[int, int, int]] = []
    if limit == 0:
        return np.zeros((0, 3), np.int64)
    n = boxes.shape[1]
    with np.errstate(all="ignore"):  # inf - inf in degenerate boxes: masked as not valid
        corners_all = _corners(boxes, center_point_box)
        for b in range(boxes.shape[0]):
            corners = tuple(c[b] for c in corners_all)
            every = np.arange(n)
            pairs = _suppressed(corners, every[:, None], every, iou) if n <= pairwise else None
            for c in range(scores.shape[1]):
                s = scores[b, c]
                candidates = np.flatnonzero(s > threshold)
                # descending by score, stable: equal scores keep the smaller index first
                order = candidates[np.argsort(-s[candidates], kind="stable")]
                kept = _greedy(order, limit, corners, iou, pairs)
                rows.extend((b, c, int(k)) for k in kept)
    return np.array(rows, np.int64).reshape(len(rows), 3)


def _greedy(
    order: np.ndarray, limit: int, corners: tuple[np.ndarray, ...], iou: Any, pairs: Any
) -> list[int]:
    """The boxes of ``order`` (best first) that the greedy selection keeps, at most ``limit``.
    With ``pairs`` (every pair's suppression), one mask update per kept box; without, the IoU
    of each kept box against the remaining ones."""
    kept: list[int] = []
    if pairs is None:
        left = order
        while left.size and len(kept) < limit:
            top, left = int(left[0]), left[1:]
            kept.append(top)
            left = left[~_suppressed(corners, top, left, iou)]
        return kept
    over = pairs[np.ix_(order, order)]
    alive = np.ones(order.size, bool)
    at = 0
    while at < order.size and len(kept) < limit:
        at += int(alive[at:].argmax())
        if not alive[at]:
            break
        kept.append(int(order[at]))
        alive &= ~over[at]
        at += 1
    return kept


def _scalar_shape(ctx: ShapeContext, shape: Any, name: str) -> None:
    """A threshold or limit is a scalar or a 1-element 1-d tensor."""
    if len(shape) > 1:
        fail(f"{name} must be a scalar or hold one value, got shape {tuple(shape)}")
    if len(shape) == 1:
        ctx.check_equal(shape[0], 1, "{}.shape[0] == 1", name)


@register_shape_func("non_max_suppression", data_dependent=[True, True, True, True, True])
def non_max_suppression(
    ctx: ShapeContext,
    boxes: Any,
    scores: Any,
    max_output_boxes_per_class: Any,
    iou_threshold: Any,
    score_threshold: Any,
    *,
    center_point_box: int = 0,
) -> Shape:
    """``(number of selected boxes, 3)``: the count depends on every input's values, so it is
    a fresh dim until run time, where this runs the whole selection (``select_boxes``) and the
    kernel runs it again to fill the output (see design/shapes.md)."""
    b, s = boxes.shape, scores.shape
    if len(b) != 3:
        fail(f"boxes must have rank 3 (batch, num_boxes, 4), got shape {tuple(b)}")
    if len(s) != 3:
        fail(f"scores must have rank 3 (batch, num_classes, num_boxes), got shape {tuple(s)}")
    if center_point_box not in (0, 1):
        fail(f"center_point_box must be 0 or 1, got {center_point_box}")
    ctx.check_equal(b[2], 4, "boxes.shape[2] == 4 (box coordinates)")
    ctx.check_equal(b[0], s[0], "boxes.shape[0] == scores.shape[0] (batch)")
    ctx.check_equal(b[1], s[2], "boxes.shape[1] == scores.shape[2] (number of boxes)")
    values = (
        ("max_output_boxes_per_class", max_output_boxes_per_class),
        ("iou_threshold", iou_threshold),
        ("score_threshold", score_threshold),
    )
    for name, value in values:
        _scalar_shape(ctx, value.shape, name)
    inputs = (boxes, scores, max_output_boxes_per_class, iou_threshold, score_threshold)
    if not all(ctx.is_known(v) for v in inputs):
        return (ctx.fresh("nms"), 3)
    try:
        rows = select_boxes(*inputs, center_point_box=center_point_box)
    except ValueError as e:
        fail(str(e))
    return (rows.shape[0], 3)
