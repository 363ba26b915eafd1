"""Reduction kernels against plain numpy (axis None/int/list, keepdims, exclude)."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from vm_testlib import FLOATS, KERNEL_SETTINGS, NUMERIC, arrays, assert_same, run_like, shapes, tol


def _axis_attr(data, ndim):
    """An axis attribute: None, an int (maybe negative) or a list of distinct axes."""
    if ndim == 0:
        return data.draw(st.sampled_from([None, ()]))
    kind = data.draw(st.sampled_from(["none", "int", "list"]))
    if kind == "none":
        return None
    if kind == "int":
        return data.draw(st.integers(-ndim, ndim - 1))
    return tuple(data.draw(st.lists(st.integers(0, ndim - 1), unique=True, max_size=ndim)))


def _axes(ndim, axis, exclude):
    given_axes = range(ndim) if axis is None else ([axis] if isinstance(axis, int) else axis)
    norm = {a % ndim for a in given_axes}
    return tuple(sorted(set(range(ndim)) - norm if exclude else norm))


REDUCERS = {"sum": np.sum, "mean": np.mean, "max": np.max, "min": np.min, "prod": np.prod}


def _cases():
    """(op, dtype): every numeric dtype, and bool for max/min (the catalogue refuses sum,
    mean and prod of bool)."""
    for op in sorted(REDUCERS):
        for dtype in (*NUMERIC, "bool") if op in ("max", "min") else NUMERIC:
            yield op, dtype


@pytest.mark.parametrize(("op", "dtype"), list(_cases()))
@KERNEL_SETTINGS
@given(data=st.data())
def test_reductions(op, dtype, data):
    # mean of an integer tensor is float64 (numpy's rule, the catalogue's too).
    out_dtype = "float64" if op == "mean" and dtype not in FLOATS else dtype
    x = data.draw(arrays(dtype, shapes(), small=op == "prod"))
    axis = _axis_attr(data, x.ndim)
    keepdims, exclude = data.draw(st.booleans()), data.draw(st.booleans())
    axes = _axes(x.ndim, axis, exclude)
    if op in ("max", "min") and math.prod(x.shape[a] for a in axes) == 0 and x.size == 0:
        return  # no identity: the shape function rejects an empty max/min
    # float16 sum, mean and prod accumulate in float32 and round once (vm/kernels/reduce.py),
    # so the reference does too: in float16, a product that overflows before it meets a zero
    # is inf * 0 = nan, where the exact product is 0.
    wide = x.astype(np.float32) if dtype == "float16" and op in ("sum", "mean", "prod") else x
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        expected = np.asarray(REDUCERS[op](wide, axis=axes, keepdims=keepdims)).astype(out_dtype)
    attrs = {"axis": axis, "keepdims": keepdims, "exclude": exclude}
    got = run_like(op, attrs, [x], expected)
    assert_same(got, expected, tol(out_dtype) * 10 if out_dtype in FLOATS else None)


def _ref_arg(f, x, axes, keepdims):
    kept = [a for a in range(x.ndim) if a not in axes]
    out = np.empty([x.shape[a] for a in kept], np.int64)
    for idx in np.ndindex(*out.shape):
        sel = [slice(None)] * x.ndim
        for a, i in zip(kept, idx, strict=True):
            sel[a] = i
        out[idx] = f(x[tuple(sel)].ravel())  # reduced axes stay in order: C-order flatten
    if keepdims:
        out = out.reshape([1 if a in axes else d for a, d in enumerate(x.shape)])
    return out


@pytest.mark.parametrize("op", ["argmax", "argmin"])
@pytest.mark.parametrize("dtype", ("bool", *NUMERIC))
@KERNEL_SETTINGS
@given(data=st.data())
def test_arg_reductions_flatten_axes_in_order(op, dtype, data):
    x = data.draw(arrays(dtype, shapes(max_side=3)))
    axis = _axis_attr(data, x.ndim)
    keepdims, exclude = data.draw(st.booleans()), data.draw(st.booleans())
    axes = _axes(x.ndim, axis, exclude)
    if math.prod(x.shape[a] for a in axes) == 0:
        return  # argmax of nothing is an error
    expected = _ref_arg(np.argmax if op == "argmax" else np.argmin, x, axes, keepdims)
    got = run_like(op, {"axis": axis, "keepdims": keepdims, "exclude": exclude}, [x], expected)
    assert_same(got, expected)


def _ref_cumsum(x, axis, exclusive, reverse):
    out = np.zeros(x.shape, np.float64 if x.dtype.kind == "f" else np.int64)
    n = x.shape[axis]
    for j in range(n):
        lo, hi = (j, n) if reverse else (0, j + 1)
        if exclusive:
            lo, hi = (j + 1, n) if reverse else (0, j)
        total = np.take(x, np.arange(lo, hi), axis=axis).astype(out.dtype).sum(axis=axis)
        index = [slice(None)] * x.ndim
        index[axis] = j
        out[tuple(index)] = total
    return out


@pytest.mark.parametrize("dtype", NUMERIC)
@KERNEL_SETTINGS
@given(data=st.data())
def test_cumsum(dtype, data):
    x = data.draw(arrays(dtype, shapes(min_dims=1), small=True))
    axis = data.draw(st.integers(-x.ndim, x.ndim - 1))
    exclusive, reverse = data.draw(st.booleans()), data.draw(st.booleans())
    with np.errstate(all="ignore"):
        expected = _ref_cumsum(x, axis, exclusive, reverse).astype(dtype)
    attrs = {"axis": axis, "exclusive": exclusive, "reverse": reverse}
    got = run_like("cumsum", attrs, [x], expected)
    assert_same(got, expected, tol(dtype) * 10 if dtype in FLOATS else None)


def test_cumsum_rejects_a_wrong_axis():
    with pytest.raises(ValueError, match="cumsum: axis 2 is out of bounds"):
        run_like(
            "cumsum", {"axis": 2, "exclusive": False, "reverse": False}, [np.ones(3)], np.ones(3)
        )


@pytest.mark.parametrize("op", ["sum", "mean"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@KERNEL_SETTINGS
@given(data=st.data())
def test_float_sum_and_mean_are_numpy_s_bit_for_bit(op, dtype, data):
    """The float32/float64 fast path (``np.add.reduce`` and a divide by the count) gives what
    ``np.sum``/``np.mean`` give, exactly: the same pairwise summation, the same division."""
    x = data.draw(arrays(dtype, shapes()))
    axis = _axis_attr(data, x.ndim)
    keepdims, exclude = data.draw(st.booleans()), data.draw(st.booleans())
    axes = _axes(x.ndim, axis, exclude)
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        expected = np.asarray(REDUCERS[op](x, axis=axes, keepdims=keepdims))
        got = run_like(op, {"axis": axis, "keepdims": keepdims, "exclude": exclude}, [x], expected)
    np.testing.assert_array_equal(got, expected)
