"""The bit ops (``BitwiseAnd``/``Or``/``Xor``/``Not``, ``BitShift``, ``BitCast``), the other
trigonometric and hyperbolic functions (``Tan``, ``Asin`` ... ``Atanh``) and ``CumProd``
against onnxruntime: models with symbolic dims, compiled once and run at several random
shapes; ONNX's shift rule on Python ints; folding at import; the messages of what is refused."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from model_builder import compare, import_error, run  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import dynshape.onnx  # noqa: E402

RNG = np.random.default_rng(20261202)
#: dtype name -> ONNX element type.
ELEM = {
    name: helper.np_dtype_to_tensor_dtype(np.dtype(name))
    for name in "bool int8 int16 int32 int64 uint8 uint16 uint32 uint64 float16 float32 float64".split()
}
INTEGERS = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")


def model(
    op: str,
    inputs: list[tuple[str, str, list[Any]]],
    out: str,
    opset: int,
    weights: dict[str, np.ndarray] | None = None,
    **attrs: Any,
) -> Any:
    """One ``op`` node reading ``inputs`` (name, dtype, dims) and then ``weights``; its output
    typed ``out`` (onnxruntime wants typed outputs at the newer opsets)."""
    names = [n for n, _, _ in inputs] + list(weights or {})
    graph = helper.make_graph(
        [helper.make_node(op, names, ["result"], name="the_node", **attrs)],
        "test",
        [helper.make_tensor_value_info(n, ELEM[t], d) for n, t, d in inputs],
        [helper.make_tensor_value_info("result", ELEM[out], None)],
        [numpy_helper.from_array(a, n) for n, a in (weights or {}).items()],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def shapes(rank: int, count: int = 3) -> list[tuple[int, ...]]:
    """Random shapes of ``rank``, sizes 0 and 1 among them."""
    return [(0,) * rank, *(tuple(RNG.integers(1, 6, rank)) for _ in range(count - 1))]


def ints(dtype: str, shape: tuple[int, ...], lo: int | None = None, hi: int | None = None) -> Any:
    info = np.iinfo(dtype)
    low = info.min if lo is None else lo
    high = info.max if hi is None else hi
    return RNG.integers(low, high, shape, dtype=dtype, endpoint=True)


# ---- Tan, Asin, ..., Atanh -----------------------------------------------------------------

TRIG = {
    "Tan": (np.tan, (-1.5, 1.5)),
    "Asin": (np.arcsin, (-1.0, 1.0)),
    "Acos": (np.arccos, (-1.0, 1.0)),
    "Atan": (np.arctan, (-20.0, 20.0)),
    "Sinh": (np.sinh, (-8.0, 8.0)),
    "Cosh": (np.cosh, (-8.0, 8.0)),
    "Asinh": (np.arcsinh, (-50.0, 50.0)),
    "Acosh": (np.arccosh, (1.0, 50.0)),
    "Atanh": (np.arctanh, (-0.99, 0.99)),
}


@pytest.mark.parametrize("op", sorted(TRIG))
def test_trigonometric_float32_against_onnxruntime(op: str) -> None:
    lo, hi = TRIG[op][1]
    m = model(op, [("x", "float32", ["n", "m"])], "float32", 17)
    feeds = [[RNG.uniform(lo, hi, s).astype(np.float32)] for s in shapes(2)]
    program = compare(m, *feeds, rtol=2e-6, atol=1e-6)
    assert "(n, m)" in str(program)


@pytest.mark.parametrize("op", sorted(TRIG))
def test_trigonometric_float64_and_outside_the_domain(op: str) -> None:
    """float64 (onnxruntime has few of these kernels) against numpy, NaN outside the domain."""
    fn, (lo, hi) = TRIG[op]
    m = model(op, [("x", "float64", ["n"])], "float64", 17)
    x = np.concatenate([RNG.uniform(lo, hi, 9), [lo - 2.0, hi + 2.0, np.nan, 0.0]])
    with np.errstate(all="ignore"):
        np.testing.assert_allclose(run(m, x), fn(x), rtol=1e-14, atol=0)


def test_trigonometric_of_a_constant_folds() -> None:
    x = np.array([0.25, -0.5], np.float32)
    m = model("Acos", [], "float32", 17, {"x": x})
    program = dynshape.onnx.load(m)
    assert "acos" not in str(program)
    np.testing.assert_allclose(run(m), np.arccos(x), rtol=1e-6)


def test_trigonometric_of_ints_is_refused() -> None:
    m = model("Sinh", [("x", "int32", [3])], "int32", 17)
    assert "Sinh 'the_node': Sinh expects floating-point inputs, got int32" in import_error(m)


# ---- BitwiseAnd/Or/Xor/Not -----------------------------------------------------------------


@pytest.mark.parametrize("op", ["BitwiseAnd", "BitwiseOr", "BitwiseXor"])
@pytest.mark.parametrize("dtype", INTEGERS)
def test_bitwise_binary_broadcasts(op: str, dtype: str) -> None:
    m = model(op, [("a", dtype, ["n", "m"]), ("b", dtype, ["m"])], dtype, 18)
    feeds = [[ints(dtype, s), ints(dtype, s[1:])] for s in shapes(2)]
    program = compare(m, *feeds, rtol=0, atol=0)
    assert "(n, m)" in str(program)


@pytest.mark.parametrize("dtype", INTEGERS)
def test_bitwise_not(dtype: str) -> None:
    m = model("BitwiseNot", [("x", dtype, ["n", 3])], dtype, 18)
    compare(m, *[[ints(dtype, s)] for s in [(0, 3), (1, 3), (7, 3)]], rtol=0, atol=0)


def test_bitwise_of_dims_is_built_at_run_time() -> None:
    """``Shape(x) & 6`` depends on symbolic dims: not folded, computed from them."""
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("BitwiseAnd", ["s", "six"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "test",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 5])],
        [helper.make_tensor_value_info("y", TensorProto.INT64, None)],
        [numpy_helper.from_array(np.array(6, np.int64), "six")],
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    for n in (0, 3, 7, 12):
        assert run(m, np.zeros((n, 5), np.float32)).tolist() == [n & 6, 5 & 6]


def test_bitwise_of_constants_folds() -> None:
    a = np.array([12, 10, -1], np.int16)
    b = np.array([10, 6, 3], np.int16)
    m = model("BitwiseXor", [], "int16", 18, {"a": a, "b": b})
    assert "bitwise_xor" not in str(dynshape.onnx.load(m))
    assert run(m).tolist() == (a ^ b).tolist()


def test_bitwise_refuses_floats_bools_and_mixed_types() -> None:
    m = model("BitwiseOr", [("a", "float32", [3]), ("b", "float32", [3])], "float32", 18)
    assert "BitwiseOr 'the_node': BitwiseOr expects integer inputs, got float32" in import_error(m)
    m = model("BitwiseNot", [("a", "bool", [3])], "bool", 18)
    assert "BitwiseNot expects integer inputs, got bool" in import_error(m)
    m = model("BitwiseAnd", [("a", "int32", [3]), ("b", "int64", [3])], "int32", 18)
    assert "got int32 and int64" in import_error(m)


# ---- BitShift --------------------------------------------------------------------------------


def onnx_shift(a: np.ndarray, b: np.ndarray, left: bool) -> np.ndarray:
    """BitShift as opset 28 specifies it, on Python ints: a count outside ``[0, bits)`` gives
    the sign fill alone (-1 for a negative value shifted right, else 0)."""
    bits = a.dtype.itemsize * 8
    signed = a.dtype.kind == "i"
    out = []
    for x, y in zip(*(v.ravel().tolist() for v in np.broadcast_arrays(a, b)), strict=True):
        if not 0 <= y < bits:
            out.append(-1 if (not left and x < 0) else 0)
        elif not left:
            out.append(x >> y)
        else:
            v = (x << y) & ((1 << bits) - 1)
            out.append(v - (1 << bits) if signed and v >= 1 << (bits - 1) else v)
    return np.array(out, a.dtype).reshape(np.broadcast_shapes(a.shape, b.shape))


@pytest.mark.parametrize("direction", ["LEFT", "RIGHT"])
@pytest.mark.parametrize("dtype", ["uint8", "uint16", "uint32", "uint64"])
def test_bit_shift_unsigned_against_onnxruntime(direction: str, dtype: str) -> None:
    """Counts within the width (onnxruntime's C shifts are undefined beyond), broadcast."""
    m = model(
        "BitShift", [("x", dtype, ["n", "m"]), ("y", dtype, ["m"])], dtype, 18, direction=direction
    )
    bits = np.dtype(dtype).itemsize * 8
    feeds = [[ints(dtype, s), ints(dtype, s[1:], 0, bits - 1)] for s in shapes(2)]
    compare(m, *feeds, rtol=0, atol=0)


@pytest.mark.parametrize("direction", ["LEFT", "RIGHT"])
@pytest.mark.parametrize("dtype", INTEGERS)
def test_bit_shift_follows_opset_28_out_of_range(direction: str, dtype: str) -> None:
    """Signed values and counts below 0 and at or past the width (opset 28's rule)."""
    m = model(
        "BitShift", [("x", dtype, ["n"]), ("y", dtype, ["n"])], dtype, 28, direction=direction
    )
    bits = np.dtype(dtype).itemsize * 8
    lo = -3 if dtype.startswith("int") else 0
    for n in (0, 1, 40):
        x, y = ints(dtype, (n,)), ints(dtype, (n,), lo, min(bits + 3, 127))
        got = run(m, x, y)
        np.testing.assert_array_equal(got, onnx_shift(x, y, direction == "LEFT"))
        assert got.dtype == np.dtype(dtype)


def test_bit_shift_of_constants_folds_and_bad_direction() -> None:
    x = np.array([1, 4, 255], np.uint8)
    y = np.array([1, 2, 9], np.uint8)
    m = model("BitShift", [], "uint8", 18, {"x": x, "y": y}, direction="LEFT")
    assert "left_shift" not in str(dynshape.onnx.load(m))
    assert run(m).tolist() == [2, 16, 0]
    m = model("BitShift", [("x", "uint8", [3]), ("y", "uint8", [3])], "uint8", 18, direction="UP")
    assert "BitShift's direction must be 'LEFT' or 'RIGHT', got 'UP'" in import_error(m)


# ---- BitCast ---------------------------------------------------------------------------------

BITCASTS = [
    ("float32", "int32"),
    ("int32", "float32"),
    ("float64", "uint64"),
    ("int64", "float64"),
    ("float16", "int16"),
    ("uint16", "float16"),
    ("int8", "uint8"),
    ("uint32", "int32"),
]


def _values(dtype: str, shape: tuple[int, ...]) -> np.ndarray:
    if dtype == "bool":
        return RNG.random(shape) < 0.5
    if dtype.startswith("float"):
        return RNG.standard_normal(shape).astype(dtype)
    return ints(dtype, shape)


@pytest.mark.parametrize(("source", "target"), BITCASTS)
def test_bit_cast_against_onnxruntime(source: str, target: str) -> None:
    to = ELEM[target]
    m = model("BitCast", [("x", source, ["n", "m"])], target, 26, to=to)
    compare(m, *[[_values(source, s)] for s in shapes(2)], rtol=0, atol=0)


def test_bit_cast_of_bools_and_folding() -> None:
    """bool <-> uint8 (onnxruntime 1.32 has no BitCast of bools): a byte other than 0 or 1 is
    True."""
    m = model("BitCast", [("x", "bool", ["n"])], "uint8", 26, to=TensorProto.UINT8)
    assert run(m, np.array([True, False, True])).tolist() == [1, 0, 1]
    m = model("BitCast", [("x", "uint8", [4])], "bool", 26, to=TensorProto.BOOL)
    assert run(m, np.array([0, 1, 2, 255], np.uint8)).tolist() == [False, True, True, True]
    x = np.array([1.0, -2.5], np.float32)
    m = model("BitCast", [], "int32", 26, {"x": x}, to=TensorProto.INT32)
    assert "bitcast" not in str(dynshape.onnx.load(m))
    assert run(m).tolist() == x.view(np.int32).tolist()


def test_bit_cast_refuses_other_widths_and_types() -> None:
    m = model("BitCast", [("x", "float32", [3])], "int64", 26, to=TensorProto.INT64)
    assert (
        "BitCast 'the_node': BitCast needs element types of one width, got float32 (32 bits) "
        "and int64 (64 bits)"
    ) in import_error(m)
    m = model("BitCast", [("x", "float64", [3])], "float64", 26, to=TensorProto.COMPLEX64)
    assert "unsupported: BitCast to element type 14 is not supported" in import_error(m)


# ---- CumProd ---------------------------------------------------------------------------------


@pytest.mark.parametrize("exclusive", [0, 1])
@pytest.mark.parametrize("reverse", [0, 1])
@pytest.mark.parametrize("axis", [0, -1])
def test_cum_prod(exclusive: int, reverse: int, axis: int) -> None:
    weights = {"axis": np.array(axis, np.int64)}
    m = model(
        "CumProd",
        [("x", "float32", ["n", "m"])],
        "float32",
        26,
        weights,
        exclusive=exclusive,
        reverse=reverse,
    )
    feeds = [[RNG.uniform(0.5, 1.5, s).astype(np.float32)] for s in shapes(2, 4)]
    program = compare(m, *feeds, rtol=1e-5, atol=1e-6)
    assert "(n, m)" in str(program)


@pytest.mark.parametrize("dtype", ["int32", "int64", "uint32", "uint64", "float64"])
def test_cum_prod_of_other_types(dtype: str) -> None:
    m = model("CumProd", [("x", dtype, ["n"])], dtype, 26, {"axis": np.array(0, np.int32)})
    # Small factors: an integer product stays in range (onnxruntime's wraparound is C's).
    feeds = [
        [_values(dtype, (n,)) % 5 if "int" in dtype else _values(dtype, (n,))] for n in (0, 1, 9)
    ]
    compare(m, *feeds, rtol=1e-12, atol=0)


def test_cum_prod_refuses_an_axis_from_data_and_bools() -> None:
    m = model("CumProd", [("x", "float32", ["n"]), ("axis", "int64", [])], "float32", 26)
    assert "CumProd 'the_node': unsupported: an axis computed from data" in import_error(m)
    m = model("CumProd", [("x", "bool", ["n"])], "bool", 26, {"axis": np.array(0, np.int64)})
    assert "CumProd 'the_node': CumProd of a bool tensor" in import_error(m)
