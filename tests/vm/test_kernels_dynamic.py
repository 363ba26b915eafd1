"""Creation and data-dependent kernels against plain numpy."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
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
