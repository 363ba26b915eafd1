"""Shape-valued and data-dependent ops: shape_of feeding arange and the dyn.* ops (reshape,
zeros/ones/full, strided_slice, topk), argwhere feeding take and topk; shapes computed in the
program with take, concatenate, multiply and floor_divide."""

from __future__ import annotations

from typing import Any

import numpy as np
from harness import Binding, Case, distinct, fixed, ints


def _slice_args(rng: np.random.Generator, b: Binding) -> tuple[Any, ...]:
    """x and random begin/end/strides (int64), including negative and out-of-range bounds."""
    n, m = b["n"], b["m"]
    x = rng.standard_normal((n, m)).astype(np.float32)
    begin = np.array([rng.integers(-n - 2, n + 3), rng.integers(-m - 2, m + 3)], np.int64)
    end = np.array([rng.integers(-n - 2, n + 3), rng.integers(-m - 2, m + 3)], np.int64)
    strides = rng.choice(np.array([-3, -2, -1, 1, 2, 3], np.int64), 2)
    return x, begin, end, strides


def _slice_ref(x: np.ndarray, begin: np.ndarray, end: np.ndarray, strides: np.ndarray) -> Any:
    return x[begin[0] : end[0] : strides[0], begin[1] : end[1] : strides[1]]


def _topk_order(x: np.ndarray, axis: int, ascending: bool) -> np.ndarray:
    """Sorting indices along ``axis``; equal values keep their index order (lower first)."""
    key = x.astype(np.int64) if x.dtype.kind in "iub" else x.astype(np.float64)
    return np.argsort(key if ascending else -key, axis=axis, kind="stable")


def _topk(x: np.ndarray, k: int, axis: int = -1, ascending: bool = False) -> tuple[Any, Any]:
    order = np.take(_topk_order(x, axis, ascending), np.arange(k), axis=axis)
    return np.take_along_axis(x, order, axis=axis), order


def _unique(x: np.ndarray, axis: int | None, keep_sorted: bool) -> tuple[Any, ...]:
    """ONNX Unique by a dictionary of first occurrences (not np.unique, the kernel's)."""
    rows = list(x.reshape(-1)) if axis is None else list(np.moveaxis(x, axis, 0))
    keys = [r.tobytes() if isinstance(r, np.ndarray) else r.item() for r in rows]
    first: dict[Any, int] = {}
    for i, k in enumerate(keys):
        first.setdefault(k, i)
    picked = list(first.values())
    if keep_sorted:
        picked.sort(key=lambda i: tuple(np.asarray(rows[i]).reshape(-1).tolist()))
    where = {keys[i]: j for j, i in enumerate(picked)}
    inverse = np.array([where[k] for k in keys], np.int64)
    counts = np.array([keys.count(keys[i]) for i in picked], np.int64)
    values = np.take(
        x.reshape(-1) if axis is None else x, np.array(picked, np.int64), axis=axis or 0
    )
    return values, np.array(picked, np.int64), inverse, counts


def _iou(a: np.ndarray, b: np.ndarray) -> float:
    """IoU of two ``[y1, x1, y2, x2]`` boxes (corners in either order), 0 for empty ones."""
    ay0, ay1 = sorted((a[0], a[2]))
    ax0, ax1 = sorted((a[1], a[3]))
    by0, by1 = sorted((b[0], b[2]))
    bx0, bx1 = sorted((b[1], b[3]))
    w, h = min(ax1, bx1) - max(ax0, bx0), min(ay1, by1) - max(ay0, by0)
    area_a, area_b = (ax1 - ax0) * (ay1 - ay0), (bx1 - bx0) * (by1 - by0)
    if w <= 0 or h <= 0 or area_a <= 0 or area_b <= 0:
        return 0.0
    return float(w * h / (area_a + area_b - w * h))


def _nms(boxes: np.ndarray, scores: np.ndarray, limit: Any, iou: Any, threshold: Any) -> Any:
    """Greedy NMS, one box at a time: best score first (ties: lower index), kept unless a kept
    box of its batch and class overlaps it by more than ``iou``."""
    rows = []
    for b in range(scores.shape[0]):
        for c in range(scores.shape[1]):
            s = scores[b, c]
            kept: list[int] = []
            for i in sorted(np.flatnonzero(s > threshold).tolist(), key=lambda i: -s[i]):
                if len(kept) < int(limit) and all(
                    _iou(boxes[b, i], boxes[b, j]) <= iou for j in kept
                ):
                    kept.append(i)
            rows += [(b, c, i) for i in kept]
    return np.array(rows, np.int64).reshape(len(rows), 3)


def _detections(rng: np.random.Generator, b: Binding) -> tuple[Any, ...]:
    """Boxes on a coarse grid (overlaps and exact duplicates), quantised scores (ties)."""
    corners = rng.integers(0, 6, (b["b"], b["n"], 4)).astype(np.float32)
    scores = (rng.integers(0, 5, (b["b"], b["c"], b["n"])) / 4).astype(np.float32)
    return corners, scores, np.array(3, np.int64), np.array(0.4, np.float32)


CASES = [
    Case(
        name="shape_of_then_arange",
        source="""
def @main(%x: Tensor[(n, m), float32]) -> (Tensor[(?,), int64], Tensor[(2,), int32], Tensor[(2,), int64]) {
  %s = shape_of(%x);
  %rows = take(%s, 0);
  (arange(0i64, %rows, 1i64, dtype="int64"), shape_of(%x, dtype="int32"), multiply(%s, 2i64))
}
""",
        reference=lambda x: (
            np.arange(x.shape[0], dtype=np.int64),
            np.array(x.shape, np.int32),
            np.array(x.shape, np.int64) * 2,
        ),
        bindings=[{"n": 0, "m": 3}, {"n": 1, "m": 1}, {"n": 7, "m": 0}, {"n": 12, "m": 5}],
    ),
    Case(
        name="dyn_reshape_by_computed_shape",
        source="""
def @main(%x: Tensor[(n, m, 4), float32]) {
  %s = shape_of(%x);
  %rows = take(%s, const([0], int32));
  %cols = multiply(take(%s, const([1], int32)), take(%s, const([2], int32)));
  %shape = concatenate((%rows, %cols));
  (dyn.reshape(%x, %shape), dyn.reshape(%x, const([-1, 4], int64)), dyn.reshape(%x, const([0, 0, 2, 2], int64)))
}
""",
        reference=lambda x: (
            x.reshape(x.shape[0], x.shape[1] * 4),
            x.reshape(-1, 4),
            x.reshape(x.shape[0], x.shape[1], 2, 2),
        ),
        bindings=[{"n": 0, "m": 3}, {"n": 1, "m": 1}, {"n": 2, "m": 0}, {"n": 5, "m": 6}],
    ),
    Case(
        name="dyn_reshape_by_shape_arithmetic",
        source="""
def @main(%x: Tensor[(n, 6), int32]) -> Tensor[(?, ?), int32] {
  %s = shape_of(%x);
  %shape = floor_divide(multiply(%s, const([2, 1], int64)), const([1, 2], int64));
  dyn.reshape(%x, %shape)
}
""",
        reference=lambda x: x.reshape(2 * x.shape[0], 3),
        bindings=[{"n": 0}, {"n": 1}, {"n": 4}, {"n": 9}],
    ),
    Case(
        name="dyn_zeros_ones_full_from_shape_of",
        source="""
def @main(%x: Tensor[(n, m), float32], %v: float32) {
  %s = shape_of(%x);
  %rev = take(%s, const([1, 0], int64));
  (dyn.zeros(%s), dyn.ones(%rev, dtype="int32"), dyn.full(%v, %rev, dtype="float64"), dyn.full(7, shape_of(%x, dtype="int32"), dtype="uint8"))
}
""",
        reference=lambda x, v: (
            np.zeros(x.shape, np.float32),
            np.ones(x.shape[::-1], np.int32),
            np.full(x.shape[::-1], np.float32(v), np.float64),
            np.full(x.shape, 7, np.uint8),
        ),
        bindings=[{"n": 0, "m": 3}, {"n": 1, "m": 1}, {"n": 4, "m": 0}, {"n": 3, "m": 5}],
    ),
    Case(
        name="dyn_resize_to_sizes_computed_at_run_time",
        source="""
def @main(%x: Tensor[(n, m), float32]) -> Tensor[(?, ?), float32] {
  %s = multiply(shape_of(%x), 2i64);
  dyn.resize(%x, %s, coordinate_transformation_mode="asymmetric", nearest_mode="floor")
}
""",
        reference=lambda x: np.repeat(np.repeat(x, 2, axis=0), 2, axis=1),
        bindings=[{"n": 0, "m": 3}, {"n": 1, "m": 1}, {"n": 4, "m": 0}, {"n": 3, "m": 5}],
    ),
    Case(
        name="dyn_strided_slice_random_bounds",
        source="""
def @main(%x: Tensor[(n, m), float32], %begin: Tensor[(2,), int64], %end: Tensor[(2,), int64], %strides: Tensor[(2,), int64]) -> Tensor[(?, ?), float32] {
  dyn.strided_slice(%x, %begin, %end, %strides)
}
""",
        reference=_slice_ref,
        bindings=[{"n": 0, "m": 3}, {"n": 1, "m": 1}, {"n": 6, "m": 4}, {"n": 9, "m": 7}],
        make_inputs=_slice_args,
    ),
    Case(
        name="dyn_strided_slice_bounds_from_shape_of",
        source="""
def @main(%x: Tensor[(n, m), float32]) {
  %s = shape_of(%x);
  %half = dyn.strided_slice(%x, const([0, 0], int64), floor_divide(%s, 2i64), const([1, 1], int64));
  %back = dyn.strided_slice(%x, subtract(%s, 1i64), const([-100, -100], int64), const([-1, -2], int64));
  (%half, %back)
}
""",
        reference=lambda x: (
            x[: x.shape[0] // 2, : x.shape[1] // 2],
            x[x.shape[0] - 1 : -100 : -1, x.shape[1] - 1 : -100 : -2],
        ),
        bindings=[{"n": 0, "m": 3}, {"n": 1, "m": 1}, {"n": 5, "m": 8}, {"n": 10, "m": 3}],
    ),
    Case(
        name="argwhere_then_take",
        source="""
def @main(%x: Tensor[(n,), float32], %y: Tensor[(n, m), int32]) {
  %pos = argwhere(greater(%x, 0f));
  %picked = take(%x, squeeze(%pos, axis=[1]), axis=0);
  (%picked, argwhere(greater(%y, 0)), %pos)
}
""",
        reference=lambda x, y: (x[x > 0], np.argwhere(y > 0), np.argwhere(x > 0)),
        bindings=[{"n": 0, "m": 3}, {"n": 1, "m": 1}, {"n": 6, "m": 4}, {"n": 20, "m": 2}],
    ),
    Case(
        # compress written out (columns by an integer mask), and a selection the select pass
        # rewrites into it, with the multiply after it
        name="compress_and_selection",
        source="""
def @main(%x: Tensor[(n, m), float32], %keep: Tensor[(m,), int32], %v: Tensor[(n,), float32]) {
  %cols = compress(%x, %keep, axis=1);
  %idx = squeeze(argwhere(greater(%v, 0f)), axis=[1]);
  (%cols, multiply(take(%v, %idx, axis=0), 2f))
}
""",
        reference=lambda x, keep, v: (np.compress(keep, x, axis=1), v[v > 0] * 2),
        bindings=[{"n": 0, "m": 3}, {"n": 1, "m": 1}, {"n": 6, "m": 0}, {"n": 13, "m": 7}],
    ),
    Case(
        name="argwhere_of_bool_and_rank0",
        source="""
def @main(%b: bool, %f: Tensor[(n, 3), bool]) -> (Tensor[(?, 0), int64], Tensor[(?, 2), int64]) {
  (argwhere(%b), argwhere(%f))
}
""",
        reference=lambda b, f: (np.argwhere(b), np.argwhere(f)),
        bindings=[{"n": 0}, {"n": 1}, {"n": 4}, {"n": 7}],
    ),
    Case(
        name="topk_variants_last_axis",
        source="""
def @main(%x: Tensor[(n, 5), float32]) {
  %both = topk(%x, k=3);
  %low = topk(%x, k=2, ret_type="values", is_ascend=True);
  %idx = topk(%x, k=5, ret_type="indices", dtype="int32");
  (%both.0, %both.1, %low, %idx, topk(%x, k=0, ret_type="values"))
}
""",
        reference=lambda x: (
            *_topk(x, 3),
            _topk(x, 2, ascending=True)[0],
            _topk(x, 5)[1],
            _topk(x, 0)[0],
        ),
        bindings=[{"n": 0}, {"n": 1}, {"n": 4}, {"n": 9}],
        inputs={"x": distinct(0.5)},
    ),
    Case(
        name="topk_axis0_ties_lower_index_first",
        source="""
def @main(%x: Tensor[(n, 4), int32], %u: Tensor[(n,), uint8]) {
  %first = topk(%x, k=1, axis=0);
  %asc = topk(%x, k=1, axis=-2, ret_type="indices", is_ascend=True);
  (%first.0, %first.1, %asc, topk(%u, k=1))
}
""",
        reference=lambda x, u: (
            *_topk(x, 1, axis=0),
            _topk(x, 1, axis=0, ascending=True)[1],
            _topk(u, 1),
        ),
        bindings=[{"n": 1}, {"n": 3}, {"n": 8}],
        inputs={"x": ints(-2, 3), "u": ints(0, 3)},
    ),
    Case(
        name="dyn_topk_tensor_k",
        source="""
def @main(%x: Tensor[(n, m), float32], %k: int32) {
  %half = floor_divide(take(shape_of(%x), 1), 2i64);
  (dyn.topk(%x, %k), dyn.topk(%x, %half, ret_type="values", is_ascend=True), dyn.topk(%x, %k, axis=1, ret_type="indices", dtype="int32"))
}
""",
        reference=lambda x, k: (
            _topk(x, int(k)),
            _topk(x, x.shape[1] // 2, ascending=True)[0],
            _topk(x, int(k), axis=1)[1],
        ),
        bindings=[{"n": 0, "m": 3}, {"n": 1, "m": 1}, {"n": 4, "m": 6}, {"n": 7, "m": 2}],
        inputs={"x": distinct(0.25), "k": fixed(lambda b: min(b["m"], 2))},
    ),
    Case(
        name="argwhere_count_drives_topk",
        source="""
def @main(%x: Tensor[(n,), float32]) -> Tensor[(?,), float32] {
  %pos = argwhere(greater(%x, 0f));
  %count = take(shape_of(%pos), 0);
  dyn.topk(%x, %count, ret_type="values")
}
""",
        reference=lambda x: np.sort(x[x > 0])[::-1],
        bindings=[{"n": 0}, {"n": 1}, {"n": 5}, {"n": 16}],
        inputs={"x": distinct(0.5)},
    ),
    Case(
        name="arange_grid_gathers_itself",
        source="""
def @main(%x: Tensor[(n, m), float32]) -> Tensor[(?, ?), float32] {
  %s = shape_of(%x);
  %cols = take(%s, 1);
  %r = arange(0i64, take(%s, 0), 1i64, dtype="int64");
  %c = arange(0i64, %cols, 1i64, dtype="int64");
  %flat = add(multiply(expand_dims(%r, axis=1), %cols), %c);
  take(%x, %flat)
}
""",
        reference=lambda x: x.copy(),
        bindings=[{"n": 0, "m": 3}, {"n": 1, "m": 1}, {"n": 3, "m": 0}, {"n": 6, "m": 5}],
    ),
    Case(
        name="non_max_suppression_rows_gather_boxes",
        source="""
def @main(%boxes: Tensor[(b, n, 4), float32], %scores: Tensor[(b, c, n), float32], %limit: Tensor[(), int64], %iou: Tensor[(), float32]) -> (Tensor[(?, 3), int64], Tensor[(?, 4), float32]) {
  %rows = non_max_suppression(%boxes, %scores, %limit, %iou, 0.25f);
  %picked = take(%rows, const([0, 2], int64), axis=1);
  %flat = add(multiply(take(%picked, 0, axis=1), take(shape_of(%boxes), 1)), take(%picked, 1, axis=1));
  (%rows, take(reshape(%boxes, newshape=[-1, 4]), %flat, axis=0))
}
""",
        reference=lambda boxes, scores, limit, iou: (
            (rows := _nms(boxes, scores, limit, iou, np.float32(0.25))),
            boxes.reshape(-1, 4)[rows[:, 0] * boxes.shape[1] + rows[:, 2]],
        ),
        bindings=[{"b": 1, "c": 1, "n": 0}, {"b": 1, "c": 2, "n": 5}, {"b": 2, "c": 3, "n": 12}],
        make_inputs=_detections,
    ),
    Case(
        name="sort_argsort_unique",
        source="""
def @main(%x: Tensor[(n, 4), int32], %v: Tensor[(m,), float32]) {
  %u = unique(%x, axis=0);
  %f = unique(%v, sorted=False);
  (sort(%x, axis=0), sort(%x, descending=True), argsort(%x, axis=0, descending=True), argsort(%v, dtype="int32"), %u.0, %u.1, %u.2, %u.3, %f.0, %f.1, %f.2, %f.3)
}
""",
        reference=lambda x, v: (
            np.sort(x, axis=0, kind="stable"),
            np.take_along_axis(x, _topk_order(x, -1, False), axis=-1),
            _topk_order(x, 0, False),
            np.argsort(v, kind="stable").astype(np.int32),
            *_unique(x, 0, True),
            *_unique(v, None, False),
        ),
        bindings=[{"n": 0, "m": 0}, {"n": 1, "m": 1}, {"n": 6, "m": 5}, {"n": 11, "m": 9}],
        inputs={"x": ints(-1, 2), "v": ints(0, 4)},
    ),
]
