"""Kernels of the integer bit ops, the other trigonometric and hyperbolic functions, ``bitcast``
and ``cumprod``, against plain definitions (Python ints for the shifts) on drawn inputs."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from vm_testlib import FLOATS, KERNEL_SETTINGS, NUMERIC, arrays, assert_same, run_like, shapes, tol

INTEGERS = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")
TRIG = {
    "tan": np.tan,
    "asin": np.arcsin,
    "acos": np.arccos,
    "atan": np.arctan,
    "sinh": np.sinh,
    "cosh": np.cosh,
    "asinh": np.arcsinh,
    "acosh": np.arccosh,
    "atanh": np.arctanh,
}


@pytest.mark.parametrize("op", sorted(TRIG))
@pytest.mark.parametrize("dtype", FLOATS)
@KERNEL_SETTINGS
@given(data=st.data())
def test_trigonometric(op, dtype, data):
    """Values inside and outside each domain (NaN outside, as numpy), computed in float64 and
    rounded once as the reference."""
    x = data.draw(arrays(dtype, shapes(), small=True))
    with np.errstate(all="ignore"):
        expected = TRIG[op](x.astype(np.float64)).astype(dtype)
    assert_same(run_like(op, {}, [x], expected), expected, tol(dtype))


def _python_shift(a: int, b: int, bits: int, signed: bool, left: bool) -> int:
    """ONNX's BitShift (opset 28) on Python ints: a count outside ``[0, bits)`` leaves the sign
    fill (-1 for a negative value shifted right, else 0); a left shift wraps to ``bits``."""
    if not 0 <= b < bits:
        return -1 if (not left and a < 0) else 0
    if not left:
        return a >> b
    v = (a << b) & ((1 << bits) - 1)
    return v - (1 << bits) if signed and v >= 1 << (bits - 1) else v


@pytest.mark.parametrize("op", ["left_shift", "right_shift"])
@pytest.mark.parametrize("dtype", INTEGERS)
@KERNEL_SETTINGS
@given(data=st.data())
def test_shifts_follow_onnx_out_of_range(op, dtype, data):
    """Counts from below 0 to past the width, values over the whole range; broadcast."""
    dt = np.dtype(dtype)
    bits = dt.itemsize * 8
    shapes_ = data.draw(hnp.mutually_broadcastable_shapes(num_shapes=2, max_dims=3, max_side=4))
    a = data.draw(arrays(dtype, shapes_.input_shapes[0]))
    lo = -3 if dt.kind == "i" else 0
    b = data.draw(
        hnp.arrays(dt, shapes_.input_shapes[1], elements=st.integers(lo, min(bits + 3, 127)))
    )
    left = op == "left_shift"
    wide_a, wide_b = np.broadcast_arrays(a, b)
    expected = np.array(
        [
            _python_shift(int(x), int(y), bits, dt.kind == "i", left)
            for x, y in zip(wide_a.ravel().tolist(), wide_b.ravel().tolist(), strict=True)
        ],
        dtype,
    ).reshape(shapes_.result_shape)
    assert_same(run_like(op, {}, [a, b], expected), expected)


@pytest.mark.parametrize("dtype", INTEGERS)
@KERNEL_SETTINGS
@given(data=st.data())
def test_bitwise(dtype, data):
    shapes_ = data.draw(hnp.mutually_broadcastable_shapes(num_shapes=2, max_dims=3, max_side=4))
    a = data.draw(arrays(dtype, shapes_.input_shapes[0]))
    b = data.draw(arrays(dtype, shapes_.input_shapes[1]))
    for op, f in [("bitwise_and", np.bitwise_and), ("bitwise_or", np.bitwise_or)]:
        expected = f(a, b)
        assert_same(run_like(op, {}, [a, b], expected), expected)
    expected = np.bitwise_xor(a, b)
    assert_same(run_like("bitwise_xor", {}, [a, b], expected), expected)
    assert_same(run_like("bitwise_not", {}, [a], ~a), ~a)


PAIRS = [
    ("float32", "int32"),
    ("int32", "float32"),
    ("float64", "uint64"),
    ("int64", "float64"),
    ("float16", "int16"),
    ("uint16", "float16"),
    ("int8", "uint8"),
    ("bool", "uint8"),
    ("uint32", "int32"),
]


@pytest.mark.parametrize(("source", "target"), PAIRS)
@KERNEL_SETTINGS
@given(data=st.data())
def test_bitcast_keeps_the_bytes(source, target, data):
    """Round trips back to the same bytes, strided inputs included (a reversed view)."""
    x = data.draw(arrays(source, shapes()))
    if data.draw(st.booleans()) and x.ndim:
        x = x[::-1]
    expected = np.frombuffer(np.ascontiguousarray(x).tobytes(), target).reshape(x.shape)
    got = run_like("bitcast", {"dtype": target}, [x], expected)
    assert got.tobytes() == expected.tobytes()
    back = run_like("bitcast", {"dtype": source}, [got], x)
    assert back.tobytes() == np.ascontiguousarray(x).tobytes()


def test_bitcast_to_bool_is_nonzero():
    x = np.array([0, 1, 2, 255], np.uint8)
    got = run_like("bitcast", {"dtype": "bool"}, [x], x.astype(bool))
    assert got.tolist() == [False, True, True, True]


def test_bitcast_refuses_other_widths():
    with pytest.raises(ValueError, match="bitcast: int32 and int64 differ in width"):
        run_like("bitcast", {"dtype": "int64"}, [np.ones(3, np.int32)], np.ones(3, np.int64))


def _ref_cumprod(x, axis, exclusive, reverse):
    out = np.ones(x.shape, np.float64 if x.dtype.kind == "f" else np.int64)
    n = x.shape[axis]
    for j in range(n):
        lo, hi = (j, n) if reverse else (0, j + 1)
        if exclusive:
            lo, hi = (j + 1, n) if reverse else (0, j)
        product = np.take(x, np.arange(lo, hi), axis=axis).astype(out.dtype).prod(axis=axis)
        index = [slice(None)] * x.ndim
        index[axis] = j
        out[tuple(index)] = product
    return out


@pytest.mark.parametrize("dtype", NUMERIC)
@KERNEL_SETTINGS
@given(data=st.data())
def test_cumprod(dtype, data):
    x = data.draw(arrays(dtype, shapes(min_dims=1), small=True))
    axis = data.draw(st.integers(-x.ndim, x.ndim - 1))
    exclusive, reverse = data.draw(st.booleans()), data.draw(st.booleans())
    with np.errstate(all="ignore"):
        expected = _ref_cumprod(x, axis, exclusive, reverse).astype(dtype)
    attrs = {"axis": axis, "exclusive": exclusive, "reverse": reverse}
    got = run_like("cumprod", attrs, [x], expected)
    assert_same(got, expected, tol(dtype) * 10 if dtype in FLOATS else None)


def test_cumprod_rejects_a_wrong_axis():
    with pytest.raises(ValueError, match="cumprod: axis 1 is out of bounds"):
        run_like(
            "cumprod", {"axis": 1, "exclusive": False, "reverse": False}, [np.ones(3)], np.ones(3)
        )
