"""Creation and data-dependent kernels against plain numpy."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from vm_testlib import (
    ALL,
    FLOATS,
    INTS,
    KERNEL_SETTINGS,
    NUMERIC,
    arrays,
    assert_same,
    run_kernel,
    run_like,
    shapes,
)

from vm.kernels import get_kernel_factory

DTYPE = st.sampled_from(ALL)


@KERNEL_SETTINGS
@given(shape=shapes(), dtype=DTYPE, fill_dtype=DTYPE)
def test_creation(shape, dtype, fill_dtype):
    zeros = np.zeros(shape, dtype)
    assert_same(run_like("zeros", {"shape": shape, "dtype": dtype}, [], zeros), zeros)
    ones = np.ones(shape, dtype)
    assert_same(run_like("ones", {"shape": shape, "dtype": dtype}, [], ones), ones)
    fill = np.array(1, fill_dtype)
    e = np.full(shape, fill.astype(dtype))
    assert_same(run_like("full", {"shape": shape, "dtype": dtype}, [fill], e), e)
    sh = np.array(shape, np.int64)
    assert_same(run_like("dyn.zeros", {"dtype": dtype}, [sh], zeros), zeros)
    assert_same(run_like("dyn.ones", {"dtype": dtype}, [sh], ones), ones)
    assert_same(run_like("dyn.full", {"dtype": dtype}, [fill, sh], e), e)


@pytest.mark.parametrize("dtype", NUMERIC)
@KERNEL_SETTINGS
@given(data=st.data())
def test_arange(dtype, data):
    start = data.draw(st.integers(-5, 5))
    step = data.draw(st.sampled_from([-2, -1, 1, 3]))
    stop = data.draw(st.integers(-5, 10))
    if dtype == "uint8" and min(start, stop, step) < 0:
        return
    e = np.arange(start, stop, step, dtype=dtype)
    args = [np.array(v, dtype) for v in (start, stop, step)]
    assert_same(run_like("arange", {"dtype": dtype}, args, e), e)


@pytest.mark.parametrize(
    "bounds",
    [
        (0.0, 1e-45, 2.0),  # the quotient underflows to +0: one value (Hypothesis found it)
        (0.0, 3e-45, 4.0),
        (0.0, -1e-45, 2.0),  # -0: none
        (0.0, 5.0, np.inf),  # a step of infinity: one value
        (0.0, -5.0, np.inf),
        (-1e-8, 1.0, 1.0),  # the difference rounds to 1 in float32: one value
        (0.0, 0.3, 0.1),  # the quotient rounds to 3 in float32: three (float64 would say 4)
    ],
)
def test_arange_length_is_numpys_at_the_float32_edges(bounds):
    # numpy computes the length in the operands' arithmetic, and a quotient of 0 from a
    # nonzero difference (underflow, an infinite step) gives one value if it is +0
    e = np.arange(*(np.float32(v) for v in bounds), dtype=np.float32)
    args = [np.array(v, np.float32) for v in bounds]
    assert_same(run_like("arange", {"dtype": "float32"}, args, e), e)


def test_arange_length_mismatch_is_an_error():
    args = [np.array(v, np.int64) for v in (0, 5, 1)]
    with pytest.raises(ValueError, match="5 values"):
        run_kernel("arange", {"dtype": "int64"}, args, [((4,), "int64")])


@KERNEL_SETTINGS
@given(x=arrays("float32", shapes()), dtype=st.sampled_from(["int32", "int64"]))
def test_shape_of(x, dtype):
    e = np.array(x.shape, dtype)
    assert_same(run_like("shape_of", {"dtype": dtype}, [x], e), e)


@KERNEL_SETTINGS
@given(x=arrays("int16", shapes(min_dims=1)))
def test_dyn_reshape_and_slice(x):
    e = x.reshape(-1)
    assert_same(run_like("dyn.reshape", {}, [x, np.array([-1], np.int64)], e), e)
    begin, end, strides = np.array([1]), np.array([-1]), np.array([1])
    e = x[1:-1]
    assert_same(run_like("dyn.strided_slice", {}, [x, begin, end, strides], e), e)


@KERNEL_SETTINGS
@given(x=st.sampled_from(ALL).flatmap(lambda d: arrays(d, shapes(), small=True)))
def test_argwhere(x):
    e = np.argwhere(x)
    assert_same(run_like("argwhere", {}, [x], e), e)


@KERNEL_SETTINGS
@given(data=st.data())
def test_compress(data):
    # any data dtype, a bool or numeric mask (non-zero selects, NaN too), every axis, 0-size
    x = data.draw(st.sampled_from(ALL).flatmap(lambda d: arrays(d, shapes(min_dims=1))))
    axis = data.draw(st.integers(-x.ndim, x.ndim - 1))
    mask = data.draw(st.sampled_from(ALL).flatmap(lambda d: arrays(d, (x.shape[axis],))))
    e = np.compress(mask, x, axis=axis)
    assert_same(run_like("compress", {"axis": axis}, [x, mask], e), e)
    # the positions of the mask, gathered: what the select pass replaced
    e = np.take(x, np.argwhere(mask)[:, 0], axis=axis)
    assert_same(run_like("compress", {"axis": axis}, [x, mask], e), e)


def test_compress_refuses_a_mask_or_output_that_does_not_fit():
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    with pytest.raises(ValueError, match="does not select along axis 1"):
        run_kernel("compress", {"axis": 1}, [x, np.ones(2, bool)], [((2, 2), "float32")])
    with pytest.raises(ValueError, match="does not select along axis 2"):
        run_kernel("compress", {"axis": 2}, [x, np.ones(3, bool)], [((2, 3), "float32")])
    with pytest.raises(ValueError, match="selects 2 of 3, but the output is"):
        mask = np.array([1, 0, 1], bool)
        run_kernel("compress", {"axis": 1}, [x, mask], [((2, 3), "float32")])


def _topk_ref(x, k, axis, ascending):
    moved = np.moveaxis(x, axis, -1)
    idx = np.empty((*moved.shape[:-1], k), np.int64)
    for pos in np.ndindex(*moved.shape[:-1]):
        row = moved[pos].tolist()
        order = sorted(range(len(row)), key=lambda i: (row[i] if ascending else -row[i], i))
        idx[pos] = order[:k]
    idx = np.moveaxis(idx, -1, axis)
    return np.take_along_axis(x, idx, axis=axis), idx


@pytest.mark.parametrize("dtype", NUMERIC)
@KERNEL_SETTINGS
@given(data=st.data())
def test_topk(dtype, data):
    x = data.draw(arrays(dtype, shapes(min_dims=1, max_side=5), small=True))
    axis = data.draw(st.integers(-x.ndim, x.ndim - 1))
    k = data.draw(st.integers(0, x.shape[axis]))
    ascending = data.draw(st.booleans())
    idx_dtype = data.draw(st.sampled_from(["int32", "int64"]))
    if dtype in INTS:
        x = x.astype(np.int64).astype(dtype)  # ties are common: the order must be stable
    values, idx = _topk_ref(
        x.astype(np.float64) if dtype in FLOATS else x.astype(np.int64), k, axis, ascending
    )
    values = np.take_along_axis(x, idx, axis=axis)
    base = {"k": k, "axis": axis, "is_ascend": ascending, "dtype": idx_dtype}
    v, i = run_kernel(
        "topk", {**base, "ret_type": "both"}, [x], [(values.shape, dtype), (idx.shape, idx_dtype)]
    )
    assert_same(v, values)
    assert_same(i, idx.astype(idx_dtype))
    (only,) = run_kernel("topk", {**base, "ret_type": "indices"}, [x], [(idx.shape, idx_dtype)])
    assert_same(only, idx.astype(idx_dtype))
    attrs = {key: val for key, val in base.items() if key != "k"}
    (vals,) = run_kernel(
        "dyn.topk",
        {**attrs, "ret_type": "values"},
        [x, np.array(k, np.int64)],
        [(values.shape, dtype)],
    )
    assert_same(vals, values)


# ---- non_max_suppression ----------------------------------------------------------------------


def _ort_suppresses(box1, box2, center, iou_threshold):
    """onnxruntime's ``SuppressByIOU``, line by line, on float32 scalars."""
    f = np.float32
    if center == 0:
        x1_min, x1_max = sorted((box1[1], box1[3]))
        x2_min, x2_max = sorted((box2[1], box2[3]))
        y1_min, y1_max = sorted((box1[0], box1[2]))
        y2_min, y2_max = sorted((box2[0], box2[2]))
    else:
        x1_min, x1_max = box1[0] - box1[2] / f(2), box1[0] + box1[2] / f(2)
        x2_min, x2_max = box2[0] - box2[2] / f(2), box2[0] + box2[2] / f(2)
        y1_min, y1_max = box1[1] - box1[3] / f(2), box1[1] + box1[3] / f(2)
        y2_min, y2_max = box2[1] - box2[3] / f(2), box2[1] + box2[3] / f(2)
    ix_min, ix_max = max(x1_min, x2_min), min(x1_max, x2_max)
    if ix_max <= ix_min:
        return False
    iy_min, iy_max = max(y1_min, y2_min), min(y1_max, y2_max)
    if iy_max <= iy_min:
        return False
    inter = (ix_max - ix_min) * (iy_max - iy_min)
    area1 = (x1_max - x1_min) * (y1_max - y1_min)
    area2 = (x2_max - x2_min) * (y2_max - y2_min)
    union = area1 + area2 - inter
    if inter <= 0 or area1 <= 0 or area2 <= 0 or union <= 0:
        return False
    return inter / union > iou_threshold


def _nms_ref(boxes, scores, limit, iou, threshold, center):
    """The loop of onnxruntime's NonMaxSuppression: candidates above the threshold in a queue
    ordered by (score desc, index asc); each is kept unless a kept box suppresses it."""
    rows = []
    for b in range(boxes.shape[0]):
        for c in range(scores.shape[1]):
            queue = [(s, i) for i, s in enumerate(scores[b, c]) if s > threshold]
            queue.sort(key=lambda t: (-t[0], t[1]))
            kept = []
            for _, i in queue:
                if len(kept) >= max(limit, 0):
                    break
                if not any(_ort_suppresses(boxes[b, i], boxes[b, j], center, iou) for j in kept):
                    kept.append(i)
            rows += [(b, c, i) for i in kept]
    return np.array(rows, np.int64).reshape(len(rows), 3)


def _nms_inputs(data, center):
    """Boxes on a coarse grid (duplicates, partial overlaps, touching and empty boxes, corners
    in either order) or anywhere, scores with ties, and the three one-value inputs."""
    batch, classes, n = (data.draw(st.integers(0, hi)) for hi in (2, 3, 12))
    coarse = data.draw(st.booleans())
    coord = st.integers(-1, 5).map(float) if coarse else st.floats(-10, 10, width=32)
    if center:
        boxes = np.empty((batch, n, 4), np.float32)
        boxes[..., :2] = data.draw(arrays_of(coord, (batch, n, 2)))
        boxes[..., 2:] = data.draw(arrays_of(st.integers(-1, 4).map(float), (batch, n, 2)))
    else:
        boxes = data.draw(arrays_of(coord, (batch, n, 4)))
    scores = data.draw(arrays_of(st.integers(0, 4).map(lambda v: v / 4), (batch, classes, n)))
    limit = data.draw(st.integers(-1, 6))
    iou = np.float32(data.draw(st.sampled_from([0.0, 0.1, 0.3, 0.5, 0.7, 1.0])))
    threshold = np.float32(data.draw(st.sampled_from([-np.inf, 0.0, 0.3, 0.5])))
    return boxes, scores, limit, iou, threshold


def arrays_of(elements, shape):
    """float32 arrays of ``shape`` drawn from ``elements``."""
    return hnp.arrays(np.float32, shape, elements=elements)


@pytest.mark.parametrize("center", [0, 1])
@KERNEL_SETTINGS
@given(data=st.data())
def test_non_max_suppression_is_onnxruntimes_loop(center, data):
    boxes, scores, limit, iou, threshold = _nms_inputs(data, center)
    expected = _nms_ref(boxes, scores, limit, iou, threshold, center)
    scalars = [np.array([limit], np.int64), np.array(iou), np.array([threshold])]
    got = run_like(
        "non_max_suppression", {"center_point_box": center}, [boxes, scores, *scalars], expected
    )
    assert_same(got, expected)


@pytest.mark.parametrize("pairwise", [0, 1 << 20])
@KERNEL_SETTINGS
@given(data=st.data())
def test_non_max_suppression_pairwise_and_one_at_a_time_agree(pairwise, data):
    """The selection from every pair's IoU (small images) and from one box against the rest
    (large ones) are the same loop; the memo of the last selection is bypassed by new inputs."""
    from shape_funcs.ops import dynamic

    boxes, scores, limit, iou, threshold = _nms_inputs(data, 0)
    expected = _nms_ref(boxes, scores, limit, iou, threshold, 0)
    scalars = [np.array(limit), np.array(iou), np.array(threshold)]
    got = dynamic._select(boxes, scores, *scalars, 0, pairwise=pairwise)
    assert_same(got, expected)


def test_the_selection_memo_answers_equal_inputs_only():
    from shape_funcs.ops.dynamic import select_boxes

    boxes = np.array([[[0, 0, 2, 2], [0, 0, 2, 2.1], [5, 5, 6, 6]]], np.float32)
    scores = np.array([[[0.9, 0.8, 0.7]]], np.float32)
    scalars = [np.array(3), np.array(np.float32(0.5)), np.array(np.float32(0))]
    first = select_boxes(boxes, scores, *scalars)
    np.testing.assert_array_equal(first, [[0, 0, 0], [0, 0, 2]])
    first[0, 2] = 99  # a caller changing its copy does not change the memo
    np.testing.assert_array_equal(select_boxes(boxes, scores, *scalars), [[0, 0, 0], [0, 0, 2]])
    scores[0, 0, 1] = 0.95  # new values: selected again
    np.testing.assert_array_equal(select_boxes(boxes, scores, *scalars), [[0, 0, 1], [0, 0, 2]])


def test_non_max_suppression_reads_ties_overlaps_and_limits():
    # Three copies of one box with tied scores: the lowest index wins; a far box survives.
    boxes = np.array([[[0, 0, 1, 1], [1, 1, 0, 0], [0, 0, 1, 1], [5, 5, 6, 6]]], np.float32)
    scores = np.array([[[0.5, 0.9, 0.9, 0.1], [0.2, 0.2, 0.2, 0.2]]], np.float32)
    one = [np.array(10, np.int64), np.array(0.5, np.float32), np.array(0.0, np.float32)]
    expected = np.array([[0, 0, 1], [0, 0, 3], [0, 1, 0], [0, 1, 3]], np.int64)
    got = run_like("non_max_suppression", {"center_point_box": 0}, [boxes, scores, *one], expected)
    assert_same(got, expected)
    one[0] = np.array(1, np.int64)
    expected = np.array([[0, 0, 1], [0, 1, 0]], np.int64)
    got = run_like("non_max_suppression", {"center_point_box": 0}, [boxes, scores, *one], expected)
    assert_same(got, expected)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({0: np.zeros((1, 3, 5), np.float32)}, r"boxes must have shape \(batch, num_boxes, 4\)"),
        ({1: np.zeros((1, 3), np.float32)}, "scores must have shape"),
        ({1: np.zeros((2, 1, 3), np.float32)}, "disagree on the batch or the number of boxes"),
        ({2: np.array([1, 2], np.int64)}, "max_output_boxes_per_class must hold one value"),
        ({3: np.array(-0.5, np.float32)}, r"iou_threshold must be in \[0, 1\], got -0.5"),
        ({4: np.zeros(0, np.float32)}, "score_threshold must hold one value"),
        (
            {5: np.zeros((2, 3), np.int64)},
            r"3 boxes selected, giving shape \(3, 3\), but the output",
        ),
    ],
)
def test_non_max_suppression_rejects_bad_inputs(change, message):
    boxes = np.array([[[0, 0, 1, 1], [2, 2, 3, 3], [4, 4, 5, 5]]], np.float32)
    ins = [boxes, np.ones((1, 1, 3), np.float32), np.array(5, np.int64)]
    ins += [np.array(0.5, np.float32), np.array(0.0, np.float32), np.zeros((3, 3), np.int64)]
    for i, value in change.items():
        ins[i] = value
    kernel = get_kernel_factory("non_max_suppression")({"center_point_box": 0})
    with pytest.raises(ValueError, match=message):
        kernel(*ins)


def test_non_max_suppression_rejects_a_bad_box_format():
    kernel = get_kernel_factory("non_max_suppression")({"center_point_box": 2})
    ins = [np.zeros((1, 1, 4), np.float32), np.ones((1, 1, 1), np.float32)]
    ins += [np.array(1), np.array(0.5, np.float32), np.array(0.0, np.float32)]
    with pytest.raises(ValueError, match="center_point_box must be 0 or 1, got 2"):
        kernel(*ins, np.zeros((1, 3), np.int64))
