"""The quantization converters (``dynshape/onnx/ops/quantize.py``) against onnxruntime, or the
onnx package's reference evaluator where onnxruntime lacks a variant: one-node models with
symbolic input dims, compiled once and run at several sizes, values drawn to hit rounding ties
and saturation; and the messages of the variants refused."""

from __future__ import annotations

from typing import Any, cast

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from model_builder import ELEM, import_error  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

import dynshape  # noqa: E402
import dynshape.onnx  # noqa: E402

RNG = np.random.default_rng(20261202)
RANGES = {"uint8": (0, 255), "int8": (-128, 127), "uint16": (0, 65535), "int16": (-32768, 32767)}
NARROW_RANGES = {"uint4": (0, 15), "int4": (-8, 7), "uint2": (0, 3), "int2": (-2, 1)}


def model(
    op: str,
    inputs: list[tuple[str, str, Any]],
    weights: dict[str, Any] | None = None,
    outputs: int = 1,
    opset: int = 21,
    **attrs: Any,
) -> Any:
    """A one-node model: graph inputs ``(name, dtype, dims)`` ('' for an omitted input),
    then initializers."""
    weights = weights or {}
    names = [n for n, _, _ in inputs] + list(weights)
    outs = ["y", "y_scale", "y_zero_point"][:outputs]
    node = helper.make_node(op, names, outs, name=f"the_{op.lower()}", **attrs)
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info(n, ELEM[t], d) for n, t, d in inputs if n],
        [helper.make_empty_tensor_value_info(o) for o in outs],
        [numpy_helper.from_array(w, n) for n, w in weights.items()],
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 10
    return m


def check(m: Any, *feeds: list[np.ndarray], oracle: str = "ort") -> Any:
    """Import and compile ``m`` once; at each list of inputs the VM's results must equal the
    oracle's exactly (dtype, shape, values): quantized results are integers, and a dequantized
    one is one rounding of the same product."""
    program = dynshape.onnx.load(m)
    machine = dynshape.VirtualMachine(dynshape.compile(program))
    names = [i.name for i in m.graph.input]
    if oracle == "ort":
        runner: Any = ort.InferenceSession(
            m.SerializeToString(), providers=["CPUExecutionProvider"]
        )
    else:
        runner = ReferenceEvaluator(m)
    for arrays in feeds:
        expected = cast(list[Any], runner.run(None, dict(zip(names, arrays, strict=True))))
        got = machine.run(*arrays)
        got = list(got) if isinstance(got, (list, tuple)) else [got]
        assert len(got) == len(expected)
        for g, e in zip(got, expected, strict=True):
            g, e = np.asarray(g), np.asarray(e)
            assert (g.shape, g.dtype) == (e.shape, e.dtype)
            if g.dtype.kind == "V":  # ml_dtypes' types: compared as float32 (nan equal to nan)
                g, e = g.astype(np.float32), e.astype(np.float32)
            np.testing.assert_array_equal(g, e)
    return program


def values(shape: tuple[int, ...], scale: float, lo: int, hi: int) -> np.ndarray:
    """float32 values that quantize across ``[lo, hi]`` and past it, half of them exact ties
    (``(k + 0.5) * scale`` with ``scale`` a power of two, so the quotient is exact)."""
    k = RNG.integers(lo - 20, hi + 20, size=shape)
    tie = RNG.random(shape) < 0.5
    return ((k + np.where(tie, 0.5, RNG.uniform(-0.49, 0.49, shape))) * scale).astype(np.float32)


# ---- QuantizeLinear / DequantizeLinear --------------------------------------------------------


@pytest.mark.parametrize("target", ["uint8", "int8", "uint16", "int16"])
def test_quantize_per_tensor(target: str) -> None:
    lo, hi = RANGES[target]
    m = model(
        "QuantizeLinear",
        [("x", "float32", ["n", "c"]), ("s", "float32", []), ("zp", target, [])],
    )
    zp = np.array((lo + hi) // 3, target)
    feeds = [
        [values(shape, 0.25, lo - int(zp), hi - int(zp)), np.array(0.25, np.float32), zp]
        for shape in [(3, 5), (1, 7), (4, 1)]
    ]
    check(m, *feeds)


def test_quantize_default_uint8_and_output_dtype() -> None:
    """Without a zero point the output is uint8, or ``output_dtype``."""
    x = values((6, 2), 0.5, -10, 270)
    s = np.array(0.5, np.float32)
    check(model("QuantizeLinear", [("x", "float32", ["n", 2]), ("s", "float32", [])]), [x, s])
    m = model(
        "QuantizeLinear",
        [("x", "float32", ["n", 2]), ("s", "float32", [])],
        output_dtype=TensorProto.INT16,
    )
    check(m, [values((6, 2), 2.0**-9, -33000, 33000), np.array(2.0**-9, np.float32)], oracle="ref")


@settings(max_examples=15, deadline=None)
@given(axis=st.sampled_from([0, 1, -1, 2]), rows=st.integers(1, 5), known=st.booleans())
def test_quantize_per_axis(axis: int, rows: int, known: bool) -> None:
    """A 1-d scale and zero point along ``axis`` (given as graph inputs or as initializers)."""
    shape = (rows, 3, 4)
    n = shape[axis]
    scale = (2.0 ** RNG.integers(-3, 2, n)).astype(np.float32)
    zp = RNG.integers(-20, 20, n).astype(np.int8)
    dims: list[Any] = ["r", 3, 4]
    if known:
        m = model("QuantizeLinear", [("x", "float32", dims)], {"s": scale, "zp": zp}, axis=axis)
        feeds = [[values(shape, 0.5, -140, 140)]]
    else:
        m = model(
            "QuantizeLinear",
            [("x", "float32", dims), ("s", "float32", [n]), ("zp", "int8", [n])],
            axis=axis,
        )
        feeds = [[values(shape, 0.5, -140, 140), scale, zp]]
    check(m, *feeds)


@pytest.mark.parametrize("known", [False, True])
@pytest.mark.parametrize(("cols", "block"), [(6, 2), (7, 3), (4, 4)])
def test_quantize_dequantize_blocked(cols: int, block: int, known: bool) -> None:
    """Blocked quantization along the last axis, the last block cut short where ``block``
    does not divide the extent (7 = 3 + 3 + 1)."""
    nb = -(-cols // block)
    scale = (2.0 ** RNG.integers(-3, 2, (3, nb))).astype(np.float32)
    zp = RNG.integers(0, 40, (3, nb)).astype(np.uint8)
    params = [("s", "float32", [3, nb]), ("zp", "uint8", [3, nb])]
    attrs: dict[str, Any] = {"axis": 1, "block_size": block}
    x = values((3, cols), 0.5, -30, 280)
    if known:
        q = model("QuantizeLinear", [("x", "float32", [3, cols])], {"s": scale, "zp": zp}, **attrs)
        check(q, [x], oracle="ref")
    else:
        q = model("QuantizeLinear", [("x", "float32", [3, cols]), *params], **attrs)
        check(q, [x, scale, zp], oracle="ref")
    xq = RNG.integers(0, 256, (3, cols)).astype(np.uint8)
    d = model("DequantizeLinear", [("x", "uint8", [3, cols]), *params], **attrs)
    check(d, [xq, scale, zp])


def test_quantize_precision_and_float16() -> None:
    """float16 data over a float32 scale divides in float32 (numpy's promotion, as the
    reference); ``precision`` (opset 23) chooses float16."""
    x = (RNG.standard_normal((4, 5)) * 40).astype(np.float16)
    s = np.array(0.3, np.float32)
    inputs = [("x", "float16", ["n", 5]), ("s", "float32", [])]
    check(model("QuantizeLinear", inputs), [x, s], oracle="ref")
    m = model("QuantizeLinear", inputs, opset=23, precision=TensorProto.FLOAT16)
    check(m, [x, s], oracle="ref")


@pytest.mark.parametrize("dtype", ["uint8", "int8", "uint16", "int16"])
def test_dequantize(dtype: str) -> None:
    lo, hi = RANGES[dtype]
    m = model(
        "DequantizeLinear",
        [("x", dtype, ["n", 3]), ("s", "float32", []), ("zp", dtype, [])],
    )
    feeds = [
        [
            RNG.integers(lo, hi, (n, 3), endpoint=True).astype(dtype),
            np.array(0.037, np.float32),
            np.array(lo // 2 + hi // 3, dtype),
        ]
        for n in (1, 4)
    ]
    check(m, *feeds)


def test_dequantize_int32_is_exact() -> None:
    """int32 data: the difference is exact and the product rounded once (the reference rounds
    ``x`` to float32 first, onnxruntime the difference): against numpy in float64."""
    m = model(
        "DequantizeLinear", [("x", "int32", ["n"]), ("s", "float32", []), ("zp", "int32", [])]
    )
    x = RNG.integers(-(2**31), 2**31, 50).astype(np.int32)
    s, zp = np.array(0.037, np.float32), np.array(-(2**30) - 7, np.int32)
    got = dynshape.VirtualMachine(dynshape.compile(dynshape.onnx.load(m))).run(x, s, zp)
    want = ((x.astype(np.int64) - zp).astype(np.float64) * np.float64(s)).astype(np.float32)
    np.testing.assert_array_equal(got, want)


def test_dequantize_per_axis_float16_and_output_dtype() -> None:
    scale = np.array([0.5, 0.1, 3.0], np.float16)
    x = RNG.integers(-128, 128, (2, 3, 4)).astype(np.int8)
    zp = np.array([-3, 0, 7], np.int8)
    inputs = [("x", "int8", ["n", 3, "w"]), ("s", "float16", [3]), ("zp", "int8", [3])]
    check(model("DequantizeLinear", inputs), [x, scale, zp])
    m = model("DequantizeLinear", inputs, opset=23, output_dtype=TensorProto.FLOAT)
    check(m, [x, scale, zp], oracle="ref")


def test_dequantize_of_constants_is_folded() -> None:
    """A QDQ model's weights: DequantizeLinear of initializers becomes one constant."""
    w = RNG.integers(-128, 128, (4, 3)).astype(np.int8)
    scale = np.array([0.5, 0.25, 0.125, 1.0], np.float32)
    m = model("DequantizeLinear", [], {"w": w, "s": scale}, axis=0)
    program = check(m, [])
    assert "multiply" not in str(program)


@pytest.mark.parametrize("low", [-3.0, 0.0, 2.0])
def test_dynamic_quantize(low: float) -> None:
    """The range widened to hold 0 (all-positive, all-negative and mixed data); an all-zero
    range has scale 1 (onnxruntime's; the reference gives 1/255)."""
    m = model("DynamicQuantizeLinear", [("x", "float32", ["n", "c"])], outputs=3, opset=13)
    feeds = [[(RNG.uniform(low, low + 5, shape)).astype(np.float32)] for shape in [(2, 3), (5, 1)]]
    feeds.append([np.full((2, 2), low, np.float32)])
    check(m, *feeds)


# ---- integer products ---------------------------------------------------------------------


@settings(max_examples=12, deadline=None)
@given(
    a_type=st.sampled_from(["uint8", "int8"]),
    b_type=st.sampled_from(["uint8", "int8"]),
    batch=st.booleans(),
    per_column=st.booleans(),
)
def test_matmul_integer(a_type: str, b_type: str, batch: bool, per_column: bool) -> None:
    a_dims: list[Any] = ["b", "m", 6] if batch else ["m", 6]
    b_dims: list[Any] = [2, 6, 5] if batch else [6, 5]
    zp_b = ([2, 1, 5] if batch else [5]) if per_column else []
    m = model(
        "MatMulInteger",
        [("a", a_type, a_dims), ("b", b_type, b_dims), ("za", a_type, []), ("zb", b_type, zp_b)],
        opset=13,
    )

    def ints(dtype: str, shape: Any) -> np.ndarray:
        lo, hi = RANGES[dtype]
        return np.asarray(RNG.integers(lo, hi, shape, endpoint=True), dtype)

    feeds = []
    for rows in (1, 3):
        a_shape = (2, rows, 6) if batch else (rows, 6)
        feeds.append(
            [ints(a_type, a_shape), ints(b_type, b_dims), ints(a_type, ()), ints(b_type, zp_b)]
        )
    # onnxruntime's kernels with an int8 operand saturate pairs of products to int16
    # (measured: sums off by 13): those against the reference
    check(m, *feeds, oracle="ort" if a_type == b_type == "uint8" else "ref")


def test_matmul_integer_per_row_a() -> None:
    """A 1-d zero point of ``a`` is one per row (the spec's per-row quantization; onnxruntime
    takes only a scalar there): against numpy."""
    a = RNG.integers(0, 256, (4, 3)).astype(np.uint8)
    b = RNG.integers(0, 256, (3, 2)).astype(np.uint8)
    za = np.array([1, 2, 3, 200], np.uint8)
    m = model("MatMulInteger", [("a", "uint8", ["m", 3]), ("b", "uint8", [3, 2])], {"za": za})
    program = dynshape.onnx.load(m)
    got = dynshape.VirtualMachine(dynshape.compile(program)).run(a, b)
    want = (a.astype(np.int32) - za.astype(np.int32)[:, None]) @ b.astype(np.int32)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize(
    "attrs",
    [{}, {"pads": [1, 0, 2, 1]}, {"strides": [2, 1], "dilations": [1, 2]}, {"group": 2}],
)
@pytest.mark.parametrize("per_channel", [False, True])
def test_conv_integer(attrs: dict[str, Any], per_channel: bool) -> None:
    """uint8 weights with a zero point per tensor against onnxruntime; int8 ones per output
    channel (which onnxruntime refuses) against the reference."""
    group = attrs.get("group", 1)
    w_type = "int8" if per_channel else "uint8"
    lo, hi = RANGES[w_type]
    w = RNG.integers(lo, hi, (4, 4 // group, 3, 2), endpoint=True).astype(w_type)
    zw = RNG.integers(-5, 5, 4 if per_channel else ()).astype(np.int8).astype(w_type)
    m = model(
        "ConvInteger",
        [("x", "uint8", ["n", 4, "h", "w"]), ("w", w_type, [4, 4 // group, 3, 2])],
        {"zx": np.array(128, np.uint8), "zw": zw},
        opset=13,
        **attrs,
    )
    feeds = [[RNG.integers(0, 256, (n, 4, h, 7)).astype(np.uint8), w] for n, h in [(1, 5), (2, 8)]]
    check(m, *feeds, oracle="ref" if per_channel else "ort")


def test_conv_integer_1d() -> None:
    m = model("ConvInteger", [("x", "uint8", [1, 2, "l"]), ("w", "uint8", [3, 2, 2])], opset=13)
    w = RNG.integers(0, 256, (3, 2, 2)).astype(np.uint8)
    check(m, *[[RNG.integers(0, 256, (1, 2, n)).astype(np.uint8), w] for n in (4, 9)])


@pytest.mark.parametrize(("dtype", "scale_type"), [("uint8", "float32"), ("int8", "float16")])
@pytest.mark.parametrize("per_column", [False, True])
def test_qlinear_matmul(dtype: str, scale_type: str, per_column: bool) -> None:
    lo, hi = RANGES[dtype]
    n = [3] if per_column else []
    inputs = [
        ("a", dtype, ["b", "m", 4]),
        ("sa", scale_type, []),
        ("za", dtype, []),
        ("bm", dtype, [4, 3]),
        ("sb", scale_type, n),
        ("zb", dtype, n),
        ("sy", scale_type, []),
        ("zy", dtype, []),
    ]
    m = model("QLinearMatMul", inputs)

    def feed(rows: int) -> list[np.ndarray]:
        return [
            RNG.integers(lo, hi, (2, rows, 4), endpoint=True).astype(dtype),
            np.array(0.02, scale_type),
            np.array(lo + 100, dtype),
            RNG.integers(lo, hi, (4, 3), endpoint=True).astype(dtype),
            RNG.uniform(0.01, 0.05, n).astype(scale_type),
            RNG.integers(lo, lo + 200, n).astype(dtype),
            np.array(0.3, scale_type),
            np.array(lo + 60, dtype),
        ]

    # int8 against the reference (onnxruntime's int8 kernels saturate, see test_matmul_integer)
    check(m, feed(1), feed(5), oracle="ort" if dtype == "uint8" else "ref")


def test_qlinear_matmul_constants_are_folded() -> None:
    """Weights, scales and zero points given as initializers are combined at import: one
    subtraction (a's zero point) and no division left at run time."""
    w = {
        "sa": np.array(0.02, np.float32),
        "za": np.array(3, np.uint8),
        "bm": RNG.integers(0, 256, (4, 3)).astype(np.uint8),
        "sb": np.array([0.01, 0.02, 0.03], np.float32),
        "zb": np.array([1, 2, 3], np.uint8),
        "sy": np.array(0.3, np.float32),
        "zy": np.array(7, np.uint8),
    }
    m = model("QLinearMatMul", [("a", "uint8", ["m", 4])], w)
    program = check(m, [RNG.integers(0, 256, (5, 4)).astype(np.uint8)])
    text = str(program)
    assert text.count("subtract(") == 1 and "divide(" not in text, text


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize(
    ("w_type", "per_channel"), [("uint8", False), ("uint8", True), ("int8", True)]
)
def test_qlinear_conv(bias: bool, w_type: str, per_channel: bool) -> None:
    """Against onnxruntime with uint8 weights; int8 ones against the reference: onnxruntime's
    uint8 x int8 kernel saturates pairs of products to int16 (measured: results off by 20)."""
    c = [2] if per_channel else []
    inputs = [
        ("x", "uint8", ["n", 3, "h", 6]),
        ("sx", "float32", []),
        ("zx", "uint8", []),
        ("w", w_type, [2, 3, 3, 3]),
        ("sw", "float32", c),
        ("zw", w_type, c),
        ("sy", "float32", []),
        ("zy", "uint8", []),
    ]
    if bias:
        inputs.append(("bias", "int32", [2]))
    m = model("QLinearConv", inputs, opset=13, pads=[1, 1, 1, 1], strides=[1, 2])
    lo, hi = RANGES[w_type]

    def feed(n: int, h: int) -> list[np.ndarray]:
        arrays: list[np.ndarray] = [
            RNG.integers(0, 256, (n, 3, h, 6)).astype(np.uint8),
            np.array(0.05, np.float32),
            np.array(120, np.uint8),
            RNG.integers(lo, hi, (2, 3, 3, 3), endpoint=True).astype(w_type),
            RNG.uniform(0.001, 0.01, c).astype(np.float32),
            # onnxruntime takes per-channel weight zero points only when they are zero
            (np.zeros(c) if per_channel else np.array(lo + 9)).astype(w_type),
            np.array(0.2, np.float32),
            np.array(100, np.uint8),
        ]
        if bias:
            arrays.append(RNG.integers(-2000, 2000, 2).astype(np.int32))
        return arrays

    check(m, feed(1, 4), feed(2, 7), oracle="ort" if w_type == "uint8" else "ref")


def test_qlinear_conv_weight_zero_points_against_reference() -> None:
    w = RNG.integers(0, 256, (2, 1, 2, 2)).astype(np.uint8)
    m = model(
        "QLinearConv",
        [("x", "uint8", [1, 1, "h", "w"])],
        {
            "sx": np.array(0.1, np.float32),
            "zx": np.array(3, np.uint8),
            "w": w,
            "sw": np.array([0.02, 0.03], np.float32),
            "zw": np.array([100, 7], np.uint8),
            "sy": np.array(0.5, np.float32),
            "zy": np.array(9, np.uint8),
        },
        opset=13,
    )
    check(m, [RNG.integers(0, 256, (1, 1, 5, 4)).astype(np.uint8)], oracle="ref")


def test_qdq_convolution() -> None:
    """The QDQ form exporters write: activations quantized and dequantized around a float
    ``Conv`` whose weight is a DequantizeLinear of int8 initializers (folded at import), with
    a symbolic batch and height; against the reference (onnxruntime fuses QDQ into its int8
    kernels)."""
    w = RNG.integers(-128, 128, (4, 3, 3, 3)).astype(np.int8)
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "sx", "zx"], ["xq"]),
        helper.make_node("DequantizeLinear", ["xq", "sx", "zx"], ["xd"]),
        helper.make_node("DequantizeLinear", ["w", "sw"], ["wd"], axis=0),
        helper.make_node("Conv", ["xd", "wd"], ["y"], pads=[1, 1, 1, 1]),
    ]
    weights: dict[str, np.ndarray] = {
        "sx": np.array(0.05, np.float32),
        "zx": np.array(128, np.uint8),
        "w": w,
        "sw": RNG.uniform(0.001, 0.01, 4).astype(np.float32),
    }
    graph = helper.make_graph(
        nodes,
        "qdq",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3, "h", 5])],
        [helper.make_empty_tensor_value_info("y")],
        [numpy_helper.from_array(a, n) for n, a in weights.items()],
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    program = dynshape.onnx.load(m)
    # one multiply (the activations'): the weight is dequantized at import
    assert str(program).count("multiply(") == 1
    machine = dynshape.VirtualMachine(dynshape.compile(program))
    for n, h in [(1, 4), (2, 7)]:
        x = RNG.standard_normal((n, 3, h, 5)).astype(np.float32) * 3
        (want,) = cast(list[Any], ReferenceEvaluator(m).run(None, {"x": x}))
        np.testing.assert_allclose(machine.run(x), want, rtol=1e-5, atol=1e-5)


# ---- refused variants -------------------------------------------------------------------------


def test_errors() -> None:
    x = ("x", "float32", ["n", 4])
    m = model("QuantizeLinear", [x, ("s", "float32", []), ("zp", "int8", [])], output_dtype=2)
    assert "output_dtype uint8 differs from the zero point's type int8" in import_error(m)
    m = model("QuantizeLinear", [x, ("s", "float32", [3])], axis=1)
    assert "y_scale has 3 elements but the input has 4 along axis 1" in import_error(m)
    m = model("QuantizeLinear", [x, ("s", "float32", [2, 2])])
    assert "must be a scalar or 1-d (per axis) without block_size" in import_error(m)
    m = model("QuantizeLinear", [x, ("s", "float32", [1, 3])], axis=1, block_size=2)
    assert "does not fit the input" in import_error(m)
    m = model(
        "QuantizeLinear", [("x", "float32", [2, "k"]), ("s", "float32", [2, 2])], block_size=2
    )
    assert "unsupported: blocked quantization over the symbolic dim k" in import_error(m)
    m = model("DequantizeLinear", [("x", "uint8", [4]), ("s", "float32", []), ("z", "int8", [])])
    assert "x_zero_point is int8 but x is uint8" in import_error(m)
    m = model("MatMulInteger", [("a", "int32", [2, 2]), ("b", "int8", [2, 2])], opset=13)
    assert "unsupported: MatMulInteger of int32 is not supported" in import_error(m)
    q = [("a", "uint8", [2, 2]), ("sa", "float32", []), ("za", "uint8", [])]
    q += [("b", "uint8", [2, 2]), ("sb", "float32", []), ("zb", "uint8", [])]
    m = model("QLinearMatMul", [*q, ("sy", "float32", [2]), ("zy", "uint8", [2])])
    assert "output scale and zero point must be per tensor" in import_error(m)
    m = model("QLinearMatMul", [*q, ("sy", "float16", []), ("zy", "uint8", [])])
    assert "scales must share one float type" in import_error(m)


# ---- the extended types (ml_dtypes': bfloat16, float8, float4, int4, int2) ---------------------

extended = pytest.mark.skipif(
    "int4" not in dynshape.onnx.model.DTYPES.values(), reason="the extended dtypes"
)


def ml(dtype: str) -> Any:
    """The numpy dtype of an extended type's name."""
    import ml_dtypes

    return np.dtype(getattr(ml_dtypes, dtype))


@extended
@pytest.mark.parametrize("target", list(NARROW_RANGES))
def test_quantize_dequantize_narrow_ints(target: str) -> None:
    """int4/uint4/int2/uint2 per axis, with ties and saturation, and back."""
    lo, hi = NARROW_RANGES[target]
    zp = np.array([lo, (lo + hi) // 2, hi], ml(target))
    scale = np.array([0.5, 0.25, 1.0], np.float32)
    params = [("s", "float32", [3]), ("zp", target, [3])]
    q = model("QuantizeLinear", [("x", "float32", [3, "n"]), *params], axis=0, opset=25)
    x = values((3, 6), 0.25, lo - 4, hi + 4)
    check(q, [x, scale, zp], [x[:, :2], scale, zp], oracle="ref")
    d = model("DequantizeLinear", [("x", target, [3, "n"]), *params], axis=0, opset=25)
    xq = RNG.integers(lo, hi, (3, 5), endpoint=True).astype(ml(target))
    check(d, [xq, scale, zp], oracle="ref")


@extended
@pytest.mark.parametrize("target", ["float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2"])
@pytest.mark.parametrize("saturate", [0, 1])
def test_quantize_float8(target: str, saturate: int) -> None:
    """Values past the type's range saturate or overflow (to inf or nan) by ``saturate``."""
    m = model(
        "QuantizeLinear",
        [("x", "float32", ["n"]), ("s", "float32", []), ("zp", target, [])],
        saturate=saturate,
    )
    x = np.array([0.0, 1.7, -3.1, 300.0, -1000.0, 7e4, -2e5, 12.3456], np.float32)
    zp = np.array(0, ml(target))
    check(
        m, [x, np.array(2.0, np.float32), zp], [x[:3], np.array(0.1, np.float32), zp], oracle="ref"
    )


@extended
def test_quantize_float4_and_bfloat16() -> None:
    """float4 (the cast saturates) with a zero point; bfloat16 data over a bfloat16 scale."""
    m = model(
        "QuantizeLinear",
        [("x", "float32", ["n"]), ("s", "float32", []), ("zp", "float4_e2m1fn", [])],
        opset=23,
    )
    x = np.array([0.0, 0.3, -1.26, 2.5, 9.0, -40.0], np.float32)
    check(m, [x, np.array(0.5, np.float32), np.array(1.0, ml("float4_e2m1fn"))], oracle="ref")
    m = model(
        "QuantizeLinear",
        [("x", "bfloat16", ["n"]), ("s", "bfloat16", []), ("zp", "int8", [])],
    )
    xb = (RNG.standard_normal(9) * 50).astype(ml("bfloat16"))
    check(m, [xb, np.array(0.37, ml("bfloat16")), np.array(3, np.int8)], oracle="ref")
    m = model(
        "QuantizeLinear",
        [("x", "float32", ["n"]), ("s", "float32", [])],
        opset=23,
        precision=TensorProto.BFLOAT16,
    )
    check(
        m,
        [(RNG.standard_normal(9) * 50).astype(np.float32), np.array(0.37, np.float32)],
        oracle="ref",
    )


@extended
@pytest.mark.parametrize("source", ["float8_e4m3fn", "float8_e5m2", "float4_e2m1fn"])
def test_dequantize_floats(source: str) -> None:
    m = model(
        "DequantizeLinear",
        [("x", source, ["n", 2]), ("s", "float32", [])],
        output_dtype=TensorProto.BFLOAT16,
        opset=23,
    )
    x = (RNG.standard_normal((4, 2)) * 4).astype(ml(source))
    check(m, [x, np.array(0.3, np.float32)], oracle="ref")


@extended
def test_dequantize_e8m0_scale() -> None:
    """A float8_e8m0 (power of two) scale, opset 24, with float32 output."""
    m = model(
        "DequantizeLinear",
        [("x", "int8", ["n"]), ("s", "float8_e8m0fnu", [])],
        output_dtype=TensorProto.FLOAT,
        opset=24,
    )
    x = RNG.integers(-128, 128, 7).astype(np.int8)
    check(m, [x, np.array(0.125, ml("float8_e8m0fnu"))], oracle="ref")


@extended
def test_float8_zero_point_must_be_zero() -> None:
    m = model(
        "DequantizeLinear",
        [("x", "float8_e4m3fn", [3]), ("s", "float32", [])],
        {"zp": np.array(1.0, ml("float8_e4m3fn"))},
    )
    assert "x_zero_point of float8_e4m3fn data must be zero" in import_error(m)
