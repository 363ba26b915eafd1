"""The ``ConvTranspose`` converter and dilated ``MaxPool``/``AveragePool`` against onnxruntime
(and, where onnxruntime departs from the ONNX spec, the onnx package's reference evaluator):
one-node models with symbolic input dims, each compiled once and run at several sizes; the
printed result types stay symbolic; and the messages of the variants refused."""

from __future__ import annotations

import re
from typing import Any, cast

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from model_builder import compare, import_error  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

import dynshape  # noqa: E402
import dynshape.onnx  # noqa: E402
import ir  # noqa: E402
from dynshape.passes.infer_types import infer_types  # noqa: E402

RNG = np.random.default_rng(20261201)


def model(
    op: str,
    inputs: list[tuple[str, list[Any]]],
    weights: dict[str, np.ndarray] | None = None,
    opset: int = 19,
    **attrs: Any,
) -> Any:
    """A one-node float32 model: graph inputs ``(name, dims)``, then initializers."""
    weights = weights or {}
    names = [n for n, _ in inputs] + list(weights)
    node = helper.make_node(op, names, ["y"], name=f"the_{op.lower()}", **attrs)
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, dims) for n, dims in inputs],
        [helper.make_empty_tensor_value_info("y")],
        [numpy_helper.from_array(w, n) for n, w in weights.items()],
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 9
    return m


def rand(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def result_type(program: Any) -> str:
    """The printed type of the program's result (the last ``ty=`` of the typed text)."""
    text = ir.text.printer.module_to_text(infer_types(program))
    return re.findall(r"ty=(Tensor\[[^\]]*\])", text)[-1]


def compare_reference(m: Any, *feeds: list[np.ndarray]) -> Any:
    """As ``model_builder.compare``, against the onnx package's reference evaluator: for the
    variants where onnxruntime departs from the ONNX spec (each test says how)."""
    program = dynshape.onnx.load(m)
    machine = dynshape.VirtualMachine(dynshape.compile(program))
    reference = ReferenceEvaluator(m)
    names = [i.name for i in m.graph.input]
    for arrays in feeds:
        outputs = cast(list[Any], reference.run(None, dict(zip(names, arrays, strict=True))))
        expected = np.asarray(outputs[0])
        got = np.asarray(machine.run(*arrays))
        assert got.shape == expected.shape, (got.shape, expected.shape)
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)
    return program


def assert_symbolic(program: Any, *names: str) -> None:
    ty = result_type(program)
    assert "?" not in ty, ty
    for name in names:
        assert re.search(rf"\b{name}\b", ty), ty


NCHW = [("x", ["N", 4, "H", "W"])]
SIZES = [(1, 1, 1), (1, 5, 7), (2, 6, 3), (3, 4, 4)]


def images(c: int = 4) -> list[list[np.ndarray]]:
    return [[rand(n, c, h, w)] for n, h, w in SIZES]


# ---- ConvTranspose ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "attrs",
    [
        {},
        {"strides": [2, 2]},
        {"strides": [3, 2], "pads": [1, 0, 1, 1]},
        {"strides": [2, 2], "output_padding": [1, 1], "pads": [1, 1, 1, 1]},
        {"strides": [3, 1], "output_padding": [2, 0]},
        {"dilations": [2, 1]},
        {"dilations": [2, 2], "pads": [2, 1, 1, 2], "strides": [1, 2]},
        {"group": 2},
        {"group": 2, "strides": [2, 3], "dilations": [1, 2], "pads": [0, 1, 1, 0]},
        {"auto_pad": "SAME_UPPER", "strides": [2, 2]},
        {"auto_pad": "SAME_LOWER", "strides": [2, 2]},
        {"auto_pad": "SAME_UPPER", "strides": [2, 1], "output_padding": [1, 0]},
        {"auto_pad": "VALID", "strides": [2, 3]},
        {"kernel_shape": [3, 3], "strides": [2, 2]},
    ],
)
@pytest.mark.parametrize("bias", [True, False])
def test_conv_transpose(attrs: dict[str, Any], bias: bool) -> None:
    group = attrs.get("group", 1)
    weights = {"w": rand(4, 6 // group, 3, 3)}
    if bias:
        weights["b"] = rand(6)
    program = compare(model("ConvTranspose", NCHW, weights, **attrs), *images())
    assert_symbolic(program, "N", "H", "W")


def test_conv_transpose_dims_are_expressions() -> None:
    m = model(
        "ConvTranspose",
        NCHW,
        {"w": rand(4, 2, 3, 3)},
        strides=[2, 3],
        pads=[1, 1, 1, 1],
        output_padding=[1, 0],
    )
    # (H - 1) * 2 - 2 + 2 + 1 + 1 and (W - 1) * 3 - 2 + 2 + 0 + 1
    assert result_type(dynshape.onnx.load(m)) == "Tensor[(N, 2, 2*H, 3*W - 2), float32]"
    m = model("ConvTranspose", NCHW, {"w": rand(4, 2, 3, 3)}, auto_pad="SAME_UPPER", strides=[2, 2])
    assert result_type(dynshape.onnx.load(m)) == "Tensor[(N, 2, 2*H, 2*W), float32]"


def test_conv_transpose_runtime_weight_and_bias() -> None:
    inputs: list[tuple[str, list[Any]]] = [
        ("x", ["N", 2, "H", "W"]),
        ("w", [2, 3, 2, 2]),
        ("b", [3]),
    ]
    m = model("ConvTranspose", inputs, strides=[2, 2])
    compare(
        m,
        [rand(1, 2, 3, 5), rand(2, 3, 2, 2), rand(3)],
        [rand(2, 2, 1, 2), rand(2, 3, 2, 2), rand(3)],
    )


@pytest.mark.parametrize(
    "attrs",
    [
        {},
        {"strides": [2], "pads": [1, 1]},
        {"strides": [3], "output_padding": [1]},
        {"dilations": [2], "group": 2},
        {"auto_pad": "SAME_LOWER", "strides": [2]},
    ],
)
def test_conv_transpose_1d(attrs: dict[str, Any]) -> None:
    group = attrs.get("group", 1)
    weights = {"w": rand(4, 6 // group, 3), "b": rand(6)}
    m = model("ConvTranspose", [("x", ["N", 4, "L"])], weights, **attrs)
    program = compare(m, [rand(1, 4, 1)], [rand(2, 4, 9)], [rand(3, 4, 12)])
    assert_symbolic(program, "N", "L")


@pytest.mark.parametrize(
    "attrs",
    [
        # total padding 3*2 + 3 - 10 = -1, 2*2 + 3 - 8 = -1: zeros after the full result
        {"output_shape": [10, 8], "strides": [3, 2]},
        {"output_shape": [10, 8], "strides": [3, 2], "output_padding": [1, 1]},
        # total padding 1 on each axis: NOTSET and SAME_LOWER crop the start, SAME_UPPER the end
        {"output_shape": [6, 6], "strides": [2, 2], "kernel_shape": [2, 2]},
        {"output_shape": [6, 6], "strides": [2, 2], "auto_pad": "SAME_LOWER"},
        {"output_shape": [6, 6], "strides": [2, 2], "auto_pad": "SAME_UPPER"},
        {"output_shape": [5, 4], "strides": [2, 1], "pads": [3, 3, 3, 3]},  # pads are ignored
    ],
)
def test_conv_transpose_output_shape(attrs: dict[str, Any]) -> None:
    k = attrs.get("kernel_shape", [3, 3])
    weights = {"w": rand(2, 3, *k), "b": rand(3)}
    m = model("ConvTranspose", [("x", ["N", 2, 3, 3])], weights, **attrs)
    program = compare(m, [rand(1, 2, 3, 3)], [rand(3, 2, 3, 3)])
    oh, ow = attrs["output_shape"]
    assert result_type(program) == f"Tensor[(N, 3, {oh}, {ow}), float32]"


@pytest.mark.parametrize("auto_pad", ["SAME_UPPER", "SAME_LOWER"])
@pytest.mark.parametrize("k", [1, 2])
def test_conv_transpose_same_wider_than_the_full_result(auto_pad: str, k: int) -> None:
    # A stride of 3 over a kernel of 1 or 2: SAME's output H * 3 is 2 or 1 past the full result
    # (3 * (H - 1) + k), so the ONNX spec pads with zeros (negative pads) on both sides or one;
    # onnxruntime clamps the padding at 0 instead (a smaller output), so the reference is the
    # onnx package's evaluator, which follows the spec.
    m = model(
        "ConvTranspose",
        NCHW,
        {"w": rand(4, 2, k, k), "b": rand(2)},
        auto_pad=auto_pad,
        strides=[3, 3],
    )
    program = compare_reference(m, *images())
    assert result_type(program) == "Tensor[(N, 2, 3*H, 3*W), float32]"


@pytest.mark.parametrize("end", [0, 1])
def test_conv_transpose_output_padding_up_to_the_dilation(end: int) -> None:
    # output_padding 1 with stride 1 and dilation 2: the spec (and PyTorch) allow it, below
    # max(stride, dilation), but onnxruntime and the reference evaluator refuse it at run time.
    # By definition it is one more row at the end: the full result's last row when the end
    # padding crops it, else a row of zeros (plus the bias).
    w, b = rand(4, 2, 3, 3), rand(2)
    pads = [0, 0, end, 0]
    m = model(
        "ConvTranspose",
        NCHW,
        {"w": w, "b": b},
        dilations=[2, 1],
        output_padding=[1, 0],
        pads=pads,
    )
    program = dynshape.onnx.load(m)
    assert_symbolic(program, "N", "H", "W")
    machine = dynshape.VirtualMachine(dynshape.compile(program))
    plain = model("ConvTranspose", NCHW, {"w": w, "b": b}, dilations=[2, 1])
    session = ort.InferenceSession(plain.SerializeToString(), providers=["CPUExecutionProvider"])
    for (x,) in images():
        (full,) = session.run(None, {"x": x})
        if not end:
            full = np.concatenate(
                [full, np.broadcast_to(b[None, :, None, None], full[:, :, :1].shape)], 2
            )
        np.testing.assert_allclose(machine.run(x), full, rtol=1e-4, atol=1e-5)


def test_conv_transpose_refusals() -> None:
    w = {"w": rand(4, 2, 3, 3)}
    m = model("ConvTranspose", [("x", ["N", 4, "D", "H", "W"])], {"w": rand(4, 2, 3, 3, 3)})
    message = import_error(m)
    assert (
        "ConvTranspose 'the_convtranspose': unsupported: 3-d ConvTranspose over symbolic" in message
    )
    message = import_error(model("ConvTranspose", NCHW, w, output_shape=[8, 8]))
    assert (
        "unsupported: output_shape=[8, 8] over the symbolic dim H: the padding H - 6 depends on "
        "H, so it cannot be static (fix the dim or use pads)"
    ) in message


@pytest.mark.parametrize(
    ("inputs", "weights", "attrs", "fragment"),
    [
        (
            NCHW,
            {"w": rand(4, 2, 3, 3)},
            {"strides": [2, 2], "output_padding": [2, 0]},
            "output_padding=[2, 0] must be >= 0 and less than max(stride, dilation) on each axis "
            "(strides=[2, 2], dilations=[1, 1])",
        ),
        (NCHW, {"w": rand(4, 2, 3, 3)}, {"output_padding": [-1, 0]}, "output_padding=[-1, 0]"),
        (NCHW, {"w": rand(4, 2, 3)}, {}, "the weight has rank 3 but the input has rank 4"),
        (
            NCHW,
            {"w": rand(4, 2, 3, 3)},
            {"kernel_shape": [2, 2]},
            "kernel_shape=[2, 2] differs from the weight's [3, 3]",
        ),
        (
            NCHW,
            {"w": rand(4, 2, 3, 3)},
            {"auto_pad": "SAME"},
            "auto_pad='SAME' is not one of NOTSET, SAME_UPPER, SAME_LOWER, VALID",
        ),
        (
            [("x", ["N", 4, 3, 3])],
            {"w": rand(4, 2, 3, 3)},
            {"output_shape": [1, 2, 6, 6]},
            "output_shape=[1, 2, 6, 6] must have 2 entries (one per spatial axis)",
        ),
        (NCHW, {"w": rand(4, 2, 3, 3)}, {"strides": [0, 1]}, "strides=[0, 1] and dilations="),
        (NCHW, {"w": rand(4, 2, 3, 3)}, {"pads": [1, -1, 0, 0]}, "pads=[1, -1, 0, 0] has a neg"),
        (NCHW, {"w": rand(4, 2, 3, 3)}, {"group": 0}, "group=0 must be >= 1"),
        (NCHW, {"w": rand(3, 2, 3, 3)}, {}, "data.shape[1] == weight.shape[0]"),
        (NCHW, {"w": rand(4, 2, 3, 3)}, {"group": 3}, "divisible by groups=3"),
        (
            [("x", ["N", 4, 2, 2])],
            {"w": rand(4, 2, 3, 3)},
            {"pads": [9, 0, 0, 0]},
            "the output height >= 0 (padding crops at most all of it), got -5 < 0",
        ),
    ],
)
def test_conv_transpose_errors(
    inputs: list[Any], weights: dict[str, np.ndarray], attrs: dict[str, Any], fragment: str
) -> None:
    message = import_error(model("ConvTranspose", inputs, weights, **attrs))
    assert "ConvTranspose 'the_convtranspose'" in message and fragment in message, message


# ---- pools with dilations ---------------------------------------------------------------------

POOL_VARIANTS = [
    {"kernel_shape": [2, 2], "dilations": [2, 2]},
    {"kernel_shape": [3, 2], "dilations": [2, 1], "strides": [2, 2], "pads": [1, 0, 1, 1]},
    {"kernel_shape": [2, 3], "dilations": [3, 2], "pads": [1, 1, 1, 1]},
    {"kernel_shape": [2, 2], "dilations": [2, 2], "ceil_mode": 1},
    {
        "kernel_shape": [2, 2],
        "dilations": [2, 2],
        "strides": [2, 2],
        "pads": [1, 1, 1, 1],
        "ceil_mode": 1,
    },
    {"kernel_shape": [2, 2], "dilations": [2, 2], "auto_pad": "VALID", "strides": [2, 1]},
]
POOL_SIZES = [(1, 7, 9), (2, 9, 7), (3, 8, 8), (1, 5, 6)]


def pool_images() -> list[list[np.ndarray]]:
    return [[rand(n, 3, h, w)] for n, h, w in POOL_SIZES]


@pytest.mark.parametrize("attrs", POOL_VARIANTS)
def test_max_pool_dilated(attrs: dict[str, Any]) -> None:
    m = model("MaxPool", [("x", ["N", 3, "H", "W"])], **attrs)
    program = compare(m, *pool_images())
    assert_symbolic(program, "N", "H", "W")


@pytest.mark.parametrize("attrs", POOL_VARIANTS)
@pytest.mark.parametrize("count_include_pad", [0, 1])
def test_average_pool_dilated(attrs: dict[str, Any], count_include_pad: int) -> None:
    m = model(
        "AveragePool", [("x", ["N", 3, "H", "W"])], count_include_pad=count_include_pad, **attrs
    )
    program = compare(m, *pool_images())
    assert_symbolic(program, "N", "H", "W")


@pytest.mark.parametrize("op", ["MaxPool", "AveragePool"])
@pytest.mark.parametrize(
    "attrs",
    [
        {"kernel_shape": [3, 3], "dilations": [2, 2], "auto_pad": "SAME_UPPER"},
        {"kernel_shape": [3, 2], "dilations": [2, 1], "auto_pad": "SAME_LOWER"},
    ],
)
def test_dilated_pool_same(op: str, attrs: dict[str, Any]) -> None:
    # The spec's SAME pads by the dilated window: pad_shape = dilation * (kernel - 1) at stride
    # 1, the extra one at the end for SAME_UPPER. onnxruntime 1.32 pads by the undilated window
    # (fewer rows than its own shape inference says) and the reference evaluator splits by it,
    # so the check is onnxruntime on the explicit pads the spec gives.
    program = dynshape.onnx.load(model(op, [("x", ["N", 3, "H", "W"])], **attrs))
    assert result_type(program) == "Tensor[(N, 3, H, W), float32]"
    totals = [d * (k - 1) for d, k in zip(attrs["dilations"], attrs["kernel_shape"], strict=True)]
    small = [t // 2 for t in totals]
    big = [t - h for t, h in zip(totals, small, strict=True)]
    pads = small + big if attrs["auto_pad"] == "SAME_UPPER" else big + small
    explicit = {k: v for k, v in attrs.items() if k != "auto_pad"}
    m = model(op, [("x", ["N", 3, "H", "W"])], pads=pads, **explicit)
    session = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    machine = dynshape.VirtualMachine(dynshape.compile(program))
    for (x,) in pool_images():
        (expected,) = session.run(None, {"x": x})
        np.testing.assert_allclose(machine.run(x), expected, rtol=1e-5, atol=1e-6)


def test_dilated_pool_dims_are_expressions() -> None:
    m = model("MaxPool", [("x", ["N", 3, "H", "W"])], kernel_shape=[3, 2], dilations=[2, 3])
    # the windows span 2 * (3 - 1) + 1 = 5 rows and 3 * (2 - 1) + 1 = 4 columns
    assert result_type(dynshape.onnx.load(m)) == "Tensor[(N, 3, H - 4, W - 3), float32]"


@pytest.mark.parametrize("op", ["MaxPool", "AveragePool"])
def test_dilated_pool_1d(op: str) -> None:
    m = model(op, [("x", ["N", 3, "L"])], kernel_shape=[3], dilations=[2], strides=[2], pads=[1, 0])
    program = compare(m, [rand(1, 3, 7)], [rand(2, 3, 10)], [rand(1, 3, 5)])
    assert_symbolic(program, "L")


def test_dilated_pool_errors() -> None:
    m = model("MaxPool", [("x", ["N", 3, "H", "W"])], kernel_shape=[2, 2], dilations=[0, 1])
    message = import_error(m)
    assert "MaxPool 'the_maxpool'" in message
    assert "kernel_shape=[2, 2], strides=[1, 1] and dilations=[0, 1] must be >= 1" in message
    m = model("MaxPool", [("x", ["N", 3, "H", "W"])], kernel_shape=[2, 2], dilations=[2])
    assert "dilations=[2] must have 2 entries (one per spatial axis)" in import_error(m)
    # a dilated window of 2 * (2 - 1) + 1 = 3 rows with stride 4 and ceil_mode: whether the
    # last window starts in the padding depends on H mod 4
    m = model(
        "AveragePool",
        [("x", ["N", 3, "H", "W"])],
        kernel_shape=[2, 2],
        dilations=[2, 2],
        strides=[4, 4],
        ceil_mode=1,
    )
    message = import_error(m)
    assert "AveragePool 'the_averagepool'" in message
    assert "ceil_mode=1 over the symbolic dim H (spatial axis 0) with stride 4" in message


# ---- Conv1d blocks ----------------------------------------------------------------------------


def test_a_temporal_conv_block_keeps_its_unit_axis_and_onnxruntime_s_values() -> None:
    """A TCN residual block as torch.onnx writes it (causal Conv1d's left padding, dilation,
    bias, Relu, a 1x1 Conv1d on the skip path, Add, Relu): the imported 2-d convolutions stay
    on the unit axis between layers (``sink_squeezes``: one squeeze left, at the output) and the
    values are onnxruntime's, on short, long and empty sequences."""
    from model_builder import compare

    def conv(x: str, w: str, b: str, y: str, k: int, dilation: int) -> Any:
        pad = (k - 1) * dilation
        return helper.make_node(
            "Conv", [x, w, b], [y], kernel_shape=[k], dilations=[dilation], pads=[pad, 0]
        )

    nodes = [
        conv("x", "w1", "b1", "c1", 3, 2),
        helper.make_node("Relu", ["c1"], ["r1"]),
        conv("r1", "w2", "b2", "c2", 3, 2),
        helper.make_node("Relu", ["c2"], ["r2"]),
        conv("x", "w3", "b3", "skip", 1, 1),
        helper.make_node("Add", ["r2", "skip"], ["s"]),
        helper.make_node("Relu", ["s"], ["y"]),
    ]
    weights = {
        "w1": rand(6, 4, 3),
        "b1": rand(6),
        "w2": rand(6, 6, 3),
        "b2": rand(6),
        "w3": rand(6, 4, 1),
        "b3": rand(6),
    }
    graph = helper.make_graph(
        nodes,
        "tcn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4, "T"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(w, n) for n, w in weights.items()],
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 9
    rewritten = str(dynshape.stages(dynshape.onnx.load(m))["rewritten"])
    assert rewritten.count("squeeze(") == 1, rewritten
    compare(m, *[[rand(n, 4, t)] for n, t in [(1, 1), (2, 9), (3, 64), (0, 5)]])
