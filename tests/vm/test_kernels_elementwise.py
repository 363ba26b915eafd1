"""Elementwise and broadcasting kernels against plain numpy, on Hypothesis-drawn inputs."""

from __future__ import annotations

import math

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
    run_like,
    shapes,
    tol,
)

EXACT_FLOAT_UNARY = {
    "exp": np.exp,
    "log": np.log,
    "sqrt": np.sqrt,
    "sin": np.sin,
    "cos": np.cos,
    "tanh": np.tanh,
    "floor": np.floor,
    "ceil": np.ceil,
    "round": np.round,
}


def _ref(f, *args):
    with np.errstate(all="ignore"):
        return f(*args)


@pytest.mark.parametrize("op", sorted(EXACT_FLOAT_UNARY))
@pytest.mark.parametrize("dtype", FLOATS)
@KERNEL_SETTINGS
@given(data=st.data())
def test_float_unary(op, dtype, data):
    x = data.draw(arrays(dtype, shapes(), small=True))
    expected = _ref(EXACT_FLOAT_UNARY[op], x)
    assert_same(run_like(op, {}, [x], expected), expected)


def test_round_is_half_to_even():
    x = np.array([0.5, 1.5, 2.5, -0.5, -1.5], np.float32)
    assert run_like("round", {}, [x], x).tolist() == [0.0, 2.0, 2.0, -0.0, -2.0]


@pytest.mark.parametrize("dtype", FLOATS)
@KERNEL_SETTINGS
@given(data=st.data())
def test_rsqrt_sigmoid_erf(dtype, data):
    x = data.draw(arrays(dtype, shapes(), small=True))
    pos = np.abs(x) + np.array(0.5, dtype)
    expected = _ref(lambda v: (1 / np.sqrt(v.astype(np.float64))).astype(dtype), pos)
    assert_same(run_like("rsqrt", {}, [pos], expected), expected, tol(dtype))
    expected = _ref(lambda v: (1 / (1 + np.exp(-v.astype(np.float64)))).astype(dtype), x)
    assert_same(run_like("sigmoid", {}, [x], expected), expected, tol(dtype))
    expected = np.array([math.erf(v) for v in x.ravel().tolist()]).astype(dtype).reshape(x.shape)
    # erf: float64 within a few ulp of math.erf (Cody's approximation), narrower floats within
    # 1 ulp (one rational function, tests/vm/test_erf.py): a relative 2**-mantissa bound.
    rtol = {8: 1e-15, 4: 2.0**-23, 2: 2.0**-10}[np.dtype(dtype).itemsize]
    assert_same(run_like("erf", {}, [x], expected), expected, rtol)


@pytest.mark.parametrize("dtype", NUMERIC)
@KERNEL_SETTINGS
@given(data=st.data())
def test_numeric_unary(dtype, data):
    x = data.draw(arrays(dtype, shapes()))
    for op, f in [
        ("negative", np.negative),
        ("abs", np.abs),
        ("nn.relu", lambda v: np.maximum(v, 0).astype(dtype)),
    ]:
        expected = _ref(f, x)
        assert_same(run_like(op, {}, [x], expected), expected)


@pytest.mark.parametrize("dtype", ALL)
@KERNEL_SETTINGS
@given(data=st.data())
def test_copy_and_like(dtype, data):
    x = data.draw(arrays(dtype, shapes()))
    assert_same(run_like("copy", {}, [x], x), x)
    assert_same(run_like("zeros_like", {}, [x], x), np.zeros_like(x))
    assert_same(run_like("ones_like", {}, [x], x), np.ones_like(x))


@KERNEL_SETTINGS
@given(x=arrays("bool", shapes()))
def test_logical_not(x):
    assert_same(run_like("logical_not", {}, [x], x), np.logical_not(x))


@pytest.mark.parametrize("src", ALL)
@KERNEL_SETTINGS
@given(data=st.data())
def test_cast(src, data):
    dst = data.draw(st.sampled_from(ALL))
    # Values every dtype can hold, so the cast is defined (numpy leaves overflow undefined).
    x = data.draw(
        hnp.arrays(
            np.dtype(src),
            shapes(),
            elements=st.booleans() if src == "bool" else st.integers(0, 100).map(lambda v: v),
        )
    )
    expected = x.astype(dst)
    assert_same(run_like("cast", {"dtype": dst}, [x], expected), expected)


@pytest.mark.parametrize("dtype", NUMERIC)
@KERNEL_SETTINGS
@given(data=st.data())
def test_clip(dtype, data):
    x = data.draw(arrays(dtype, shapes()))
    lo = data.draw(st.integers(-3, 50))
    hi = data.draw(st.integers(lo, 120))
    if np.dtype(dtype).kind in "iu":
        # Bounds outside the dtype's range saturate to it (numpy would refuse a uint8 bound -1).
        info = np.iinfo(dtype)
        lo_, hi_ = (min(max(v, info.min), info.max) for v in (lo, hi))
        expected = np.clip(x.astype(np.int64), lo_, hi_).astype(dtype)
    else:
        expected = np.clip(x, lo, hi).astype(dtype)
    assert_same(run_like("clip", {"a_min": float(lo), "a_max": float(hi)}, [x], expected), expected)


def test_clip_int_rounds_bounds_inward_and_saturates():
    x = np.array([-128, 0, 1, 2, 127], np.int8)
    got = run_like("clip", {"a_min": 0.5, "a_max": 1e9}, [x], x)
    assert got.tolist() == [1, 1, 1, 2, 127]


@pytest.mark.parametrize("dtype", FLOATS)
@KERNEL_SETTINGS
@given(data=st.data())
def test_leaky_relu(dtype, data):
    x = data.draw(arrays(dtype, shapes()))
    alpha = data.draw(st.sampled_from([0.01, 0.5, 2.0]))
    expected = np.where(x > 0, x, x * np.array(alpha, dtype)).astype(dtype)
    assert_same(run_like("nn.leaky_relu", {"alpha": alpha}, [x], expected), expected)


ARITH = {
    "add": np.add,
    "subtract": np.subtract,
    "multiply": np.multiply,
    "floor_divide": np.floor_divide,
    "mod": np.mod,
    "maximum": np.maximum,
    "minimum": np.minimum,
}


def _two(dtype, data, small=False):
    sa, sb = data.draw(
        hnp.mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=3, max_side=3)
    ).input_shapes
    return data.draw(arrays(dtype, sa, small)), data.draw(arrays(dtype, sb, small))


@pytest.mark.parametrize("dtype", NUMERIC)
@KERNEL_SETTINGS
@given(data=st.data())
def test_arithmetic_broadcast(dtype, data):
    a, b = _two(dtype, data)
    for op, f in ARITH.items():
        expected = _ref(f, a, b)
        assert_same(run_like(op, {}, [a, b], expected), expected)
    expected = _ref(np.true_divide if dtype in FLOATS else np.floor_divide, a, b)
    assert_same(run_like("divide", {}, [a, b], expected), expected)


@pytest.mark.parametrize("dtype", NUMERIC)
@KERNEL_SETTINGS
@given(data=st.data())
def test_power(dtype, data):
    a, b = _two(dtype, data, small=True)
    if dtype in INTS:
        b = np.abs(b)  # numpy refuses negative integer powers
    expected = _ref(np.power, a, b)
    assert_same(run_like("power", {}, [a, b], expected), expected)


def test_divide_is_floor_division_for_ints():
    a, b = np.array([7, -7], np.int32), np.array([2, 2], np.int32)
    assert run_like("divide", {}, [a, b], a).tolist() == [3, -4]
    assert run_like("mod", {}, [a, b], a).tolist() == [1, 1]


@pytest.mark.parametrize("dtype", ALL)
@KERNEL_SETTINGS
@given(data=st.data())
def test_comparisons(dtype, data):
    a, b = _two(dtype, data)
    for op, f in [
        ("equal", np.equal),
        ("not_equal", np.not_equal),
        ("less", np.less),
        ("less_equal", np.less_equal),
        ("greater", np.greater),
        ("greater_equal", np.greater_equal),
    ]:
        expected = f(a, b)
        assert_same(run_like(op, {}, [a, b], expected), expected)


@KERNEL_SETTINGS
@given(data=st.data())
def test_logical_binary(data):
    a, b = _two("bool", data)
    assert_same(run_like("logical_and", {}, [a, b], np.logical_and(a, b)), np.logical_and(a, b))
    assert_same(run_like("logical_or", {}, [a, b], np.logical_or(a, b)), np.logical_or(a, b))


@pytest.mark.parametrize("dtype", ALL)
@KERNEL_SETTINGS
@given(data=st.data())
def test_where(dtype, data):
    sc, sx, sy = data.draw(
        hnp.mutually_broadcastable_shapes(num_shapes=3, max_dims=3, max_side=3)
    ).input_shapes
    cond = data.draw(arrays("bool", sc))
    x, y = data.draw(arrays(dtype, sx)), data.draw(arrays(dtype, sy))
    expected = np.where(cond, x, y)
    assert_same(run_like("where", {}, [cond, x, y], expected), expected)


UNARY_INTO_VIEWS = ["negative", "abs", "exp", "sqrt", "floor", "round", "tanh", "nn.relu", "copy"]


@pytest.mark.parametrize("op", UNARY_INTO_VIEWS)
@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "int64"])
def test_unary_kernels_into_column_views(op, dtype):
    """A kernel writing one column of a wider array (in place or from another array) writes
    exactly that column. numpy 2.4.6's np.negative does not: into ``a[:, :1]`` of a (rows, 4)
    float32 array it writes as if the column were contiguous."""
    from vm.kernels import get_kernel_factory

    if dtype.startswith("int") and op in ("exp", "sqrt", "tanh", "floor", "round"):
        pytest.skip("a float op")
    kernel = get_kernel_factory(op)({})
    for rows, cols, col in [(2, 4, 0), (3, 4, 1), (9, 2, 1), (17, 8, 3), (5, 3, 2)]:
        base = (np.arange(rows * cols) % 7 + 1).astype(dtype).reshape(rows, cols)
        ref = {"negative": np.negative, "abs": np.abs, "nn.relu": lambda v: np.maximum(v, 0),
               "copy": np.copy, "round": np.rint}.get(op) or getattr(np, op)  # fmt: skip
        want = ref(base[:, col : col + 1].copy())
        in_place = base.copy()
        kernel(in_place[:, col : col + 1], in_place[:, col : col + 1])
        np.testing.assert_array_equal(in_place[:, col : col + 1], want)
        np.testing.assert_array_equal(np.delete(in_place, col, 1), np.delete(base, col, 1))
        other = np.zeros_like(base)
        kernel(base[:, col : col + 1], other[:, col : col + 1])
        np.testing.assert_array_equal(other[:, col : col + 1], want)
        assert not np.delete(other, col, 1).any()
