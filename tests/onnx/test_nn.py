"""The neural-network converters of ``dynshape.onnx`` against onnxruntime: one-node models with
symbolic input dims, each compiled once and run at several sizes (odd ones, batch 1)."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from model_builder import compare, import_error  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import dynshape  # noqa: E402
import dynshape.onnx  # noqa: E402
import ir  # noqa: E402
from dynshape.passes.infer_types import infer_types  # noqa: E402

RNG = np.random.default_rng(20240615)
FLOAT = TensorProto.FLOAT


def model(
    op: str,
    inputs: list[tuple[str, list[Any]]],
    weights: dict[str, np.ndarray] | None = None,
    n_outputs: int = 1,
    opset: int = 17,
    order: list[str] | None = None,
    **attrs: Any,
) -> Any:
    """A one-node model: ``inputs`` are (name, dims) float32 graph inputs, ``weights`` are
    initializers; the node's inputs are ``order`` (default: inputs then weights)."""
    weights = weights or {}
    names = order if order is not None else [n for n, _ in inputs] + list(weights)
    outs = [f"y{i}" for i in range(n_outputs)]
    node = helper.make_node(op, names, outs, name=f"the_{op.lower()}", **attrs)
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info(n, FLOAT, dims) for n, dims in inputs],
        [helper.make_empty_tensor_value_info(o) for o in outs],
        [numpy_helper.from_array(w, n) for n, w in weights.items()],
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def result_type(program: Any) -> str:
    """The printed type of the program's result (the last ``ty=`` of the typed text)."""
    text = ir.text.printer.module_to_text(infer_types(program))
    return re.findall(r"ty=(Tensor\[[^\]]*\])", text)[-1]


def assert_symbolic(program: Any, *names: str) -> None:
    ty = result_type(program)
    assert "?" not in ty, ty
    for name in names:
        assert re.search(rf"\b{name}\b", ty), ty


def rand(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


NCHW = [("x", ["N", 3, "H", "W"])]
SIZES = [(1, 7, 9), (2, 9, 7), (3, 8, 8)]


def images(c: int = 3, sizes: list[tuple[int, int, int]] = SIZES) -> list[list[np.ndarray]]:
    return [[rand(n, c, h, w)] for n, h, w in sizes]


# ---- MatMul and Gemm --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("a", "b", "sizes"),
    [
        (["M", "K"], ["K", "N"], [(3, 5, 4), (1, 1, 7)]),
        (["B", "M", 6], [6, 4], [(2, 3), (1, 5)]),
        (["B", 1, "M", 6], ["C", 6, 5], [(2, 3, 4), (1, 1, 1)]),
        ([6], ["B", 6, 4], [(3,), (1,)]),
        (["B", "M", 6], [6], [(3, 2), (1, 1)]),
    ],
)
def test_matmul(a: list[Any], b: list[Any], sizes: list[tuple[int, ...]]) -> None:
    m = model("MatMul", [("a", a), ("b", b)])
    feeds = []
    for size in sizes:
        values = dict(zip(sorted({d for d in a + b if isinstance(d, str)}), size, strict=False))
        feeds.append([rand(*[values.get(d, d) for d in a]), rand(*[values.get(d, d) for d in b])])
    compare(m, *feeds)


def test_matmul_weight() -> None:
    m = model("MatMul", [("a", ["B", "S", 8])], {"w": rand(8, 3)})
    program = compare(m, [rand(1, 7, 8)], [rand(3, 2, 8)])
    assert_symbolic(program, "B", "S")


@pytest.mark.parametrize("trans_a", [0, 1])
@pytest.mark.parametrize("trans_b", [0, 1])
@pytest.mark.parametrize(("alpha", "beta"), [(1.0, 1.0), (0.5, -2.0)])
@pytest.mark.parametrize("c_shape", [None, [4], [1, 4], ["M", 4]])
def test_gemm(trans_a: int, trans_b: int, alpha: float, beta: float, c_shape: Any) -> None:
    a_dims = [6, "M"] if trans_a else ["M", 6]
    weights = {"b": rand(4, 6) if trans_b else rand(6, 4)}
    inputs = [("a", a_dims)]
    order = ["a", "b"]
    if c_shape is not None:
        if "M" in c_shape:
            inputs.append(("c", c_shape))
        else:
            weights["c"] = rand(*c_shape)
        order.append("c")
    m = model(
        "Gemm", inputs, weights, order=order, alpha=alpha, beta=beta, transA=trans_a, transB=trans_b
    )
    feeds = []
    for rows in (1, 5):
        a = rand(6, rows) if trans_a else rand(rows, 6)
        feeds.append([a, rand(rows, 4)] if c_shape is not None and "M" in c_shape else [a])
    program = compare(m, *feeds)
    assert_symbolic(program, "M")


def test_gemm_runtime_b_transposed() -> None:
    m = model("Gemm", [("a", ["M", 5]), ("b", [3, 5])], transB=1, alpha=2.0)
    compare(m, [rand(4, 5), rand(3, 5)], [rand(1, 5), rand(3, 5)])


# ---- Conv -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "attrs",
    [
        {},
        {"strides": [2, 2]},
        {"pads": [1, 1, 1, 1]},
        {"pads": [0, 1, 2, 1], "strides": [2, 1]},
        {"dilations": [2, 1], "pads": [2, 1, 2, 1]},
        {"auto_pad": "SAME_UPPER"},
        {"auto_pad": "SAME_LOWER", "kernel_shape": [2, 2]},
        {"auto_pad": "VALID", "strides": [2, 3]},
    ],
)
@pytest.mark.parametrize("bias", [True, False])
def test_conv(attrs: dict[str, Any], bias: bool) -> None:
    k = attrs.get("kernel_shape", [3, 3])
    weights = {"w": rand(4, 3, *k)}
    if bias:
        weights["b"] = rand(4)
    m = model("Conv", NCHW, weights, **attrs)
    program = compare(m, *images())
    assert_symbolic(program, "N", "H", "W")


@pytest.mark.parametrize("group", [3, 6])
def test_conv_groups(group: int) -> None:
    m = model("Conv", [("x", ["N", 6, "H", "W"])], {"w": rand(12, 6 // group, 3, 3)}, group=group)
    program = compare(m, *images(6))
    assert_symbolic(program, "H", "W")


def test_conv_dims_are_expressions() -> None:
    m = model("Conv", NCHW, {"w": rand(4, 3, 3, 3)}, strides=[2, 2], pads=[1, 1, 1, 1])
    ty = result_type(dynshape.onnx.load(m))
    assert ty == "Tensor[(N, 4, (H - 1) // 2 + 1, (W - 1) // 2 + 1), float32]"


def test_conv_runtime_weight() -> None:
    m = model("Conv", [("x", ["N", 2, "H", "W"]), ("w", [5, 2, 3, 3])], pads=[1, 1, 1, 1])
    compare(m, [rand(1, 2, 7, 9), rand(5, 2, 3, 3)], [rand(2, 2, 5, 4), rand(5, 2, 3, 3)])


@pytest.mark.parametrize(
    "attrs",
    [{}, {"strides": [2], "pads": [1, 2]}, {"dilations": [2]}, {"auto_pad": "SAME_UPPER"}],
)
def test_conv_1d(attrs: dict[str, Any]) -> None:
    m = model("Conv", [("x", ["N", 3, "L"])], {"w": rand(4, 3, 3), "b": rand(4)}, **attrs)
    program = compare(m, [rand(1, 3, 7)], [rand(2, 3, 9)], [rand(3, 3, 12)])
    assert_symbolic(program, "N", "L")


def test_conv_same_with_stride_on_symbolic_dim_is_an_error() -> None:
    m = model("Conv", NCHW, {"w": rand(4, 3, 3, 3)}, auto_pad="SAME_UPPER", strides=[2, 2])
    message = import_error(m)
    assert "Conv 'the_conv'" in message
    assert "auto_pad=SAME_UPPER with stride 2 over the symbolic dim H" in message


def test_conv_same_with_stride_on_static_dims() -> None:
    m = model(
        "Conv",
        [("x", ["N", 3, 9, 8])],
        {"w": rand(4, 3, 3, 3)},
        auto_pad="SAME_LOWER",
        strides=[2, 2],
    )
    compare(m, [rand(1, 3, 9, 8)], [rand(2, 3, 9, 8)])


@pytest.mark.parametrize(
    "attrs",
    [
        {},
        {"pads": [1, 0, 1, 0, 1, 2], "strides": [2, 1, 2]},
        {"dilations": [2, 1, 1], "pads": [2, 1, 0, 1, 1, 0]},
        {"auto_pad": "SAME_UPPER"},
        {"group": 3, "kernel_shape": [2, 3, 1]},
    ],
)
def test_conv_3d(attrs: dict[str, Any]) -> None:
    # video and volumetric models: ``nn.conv3d``, every spatial dim symbolic
    k = attrs.get("kernel_shape", [3, 2, 3])
    per_group = 6 // attrs.get("group", 1)
    weights = {"w": rand(6, per_group, *k), "b": rand(6)}
    m = model("Conv", [("x", ["N", 6, "D", "H", "W"])], weights, **attrs)
    feeds = [[rand(1, 6, 4, 5, 6)], [rand(2, 6, 5, 3, 4)], [rand(0, 6, 5, 4, 3)]]
    program = compare(m, *feeds)
    assert_symbolic(program, "N", "D", "H", "W")


def test_conv_3d_on_too_shallow_an_input_names_the_depth() -> None:
    m = model("Conv", [("x", ["N", 3, "D", "H", "W"])], {"w": rand(4, 3, 3, 3, 3)})
    vm = dynshape.VirtualMachine(dynshape.compile(dynshape.onnx.load(m)))
    with pytest.raises(
        dynshape.DynShapeError, match=r"nn.conv3d: expected the padded depth >= the dilated"
    ):
        vm.run(rand(1, 3, 2, 5, 5))


# ---- pooling ----------------------------------------------------------------------------------

POOL_VARIANTS = [
    {"kernel_shape": [3, 3]},
    {"kernel_shape": [2, 2], "strides": [2, 2]},
    {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]},
    {"kernel_shape": [3, 2], "pads": [0, 1, 2, 0]},
    {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1},
    {"kernel_shape": [2, 2], "strides": [2, 2], "ceil_mode": 1},
    {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1], "ceil_mode": 1},
    {"kernel_shape": [3, 3], "auto_pad": "SAME_UPPER"},
    {"kernel_shape": [2, 2], "auto_pad": "SAME_LOWER"},
    {"kernel_shape": [3, 3], "auto_pad": "VALID", "strides": [2, 2]},
]


@pytest.mark.parametrize("attrs", POOL_VARIANTS)
def test_max_pool(attrs: dict[str, Any]) -> None:
    program = compare(model("MaxPool", NCHW, **attrs), *images())
    assert_symbolic(program, "N", "H", "W")


@pytest.mark.parametrize("attrs", POOL_VARIANTS)
@pytest.mark.parametrize("count_include_pad", [0, 1])
def test_average_pool(attrs: dict[str, Any], count_include_pad: int) -> None:
    m = model("AveragePool", NCHW, count_include_pad=count_include_pad, **attrs)
    program = compare(m, *images())
    assert_symbolic(program, "N", "H", "W")


def test_pool_dims_are_expressions() -> None:
    m = model("MaxPool", NCHW, kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)
    assert result_type(dynshape.onnx.load(m)) == (
        "Tensor[(N, 3, H // 2, W // 2), float32]"  # ceil((H - 3) / 2) + 1
    )


@pytest.mark.parametrize("op", ["MaxPool", "AveragePool"])
def test_pool_1d(op: str) -> None:
    m = model(op, [("x", ["N", 3, "L"])], kernel_shape=[3], strides=[2], pads=[1, 0])
    program = compare(m, [rand(1, 3, 7)], [rand(2, 3, 10)])
    assert_symbolic(program, "L")


def test_max_pool_ceil_mode_on_static_dims() -> None:
    # kernel 2, stride 3: whether the last window starts in the padding depends on H mod 3
    # (it does for H = 8: ONNX drops it; not for W = 7)
    m = model(
        "MaxPool",
        [("x", ["N", 3, 8, 7])],
        kernel_shape=[2, 2],
        strides=[3, 3],
        pads=[0, 0, 1, 1],
        ceil_mode=1,
    )
    compare(m, [rand(1, 3, 8, 7)], [rand(2, 3, 8, 7)])


def test_pool_errors() -> None:
    m = model("MaxPool", NCHW, kernel_shape=[2, 2], strides=[3, 3], ceil_mode=1)
    message = import_error(m)
    assert "MaxPool 'the_maxpool'" in message and "ceil_mode=1 over the symbolic dim H" in message
    m = model("MaxPool", NCHW, n_outputs=2, kernel_shape=[2, 2])
    assert "MaxPool's Indices over symbolic spatial dims [H, W]" in import_error(m)


@pytest.mark.parametrize("op", ["GlobalAveragePool", "GlobalMaxPool"])
@pytest.mark.parametrize("rank", [3, 4, 5])
def test_global_pool(op: str, rank: int) -> None:
    dims: list[Any] = ["N", 3, "H", "W", "D"][:rank]
    sizes = [(1, 3, 7, 9, 2), (2, 3, 9, 7, 3)]
    program = compare(model(op, [("x", dims)]), *[[rand(*s[:rank])] for s in sizes])
    assert_symbolic(program, "N")


# ---- normalisation ----------------------------------------------------------------------------


def _bn_params(c: int) -> dict[str, np.ndarray]:
    return {
        "scale": rand(c),
        "bias": rand(c),
        "mean": rand(c),
        "var": np.abs(rand(c)) + 0.1,
    }


@pytest.mark.parametrize("dims", [["N", 3, "H", "W"], ["N", 3], ["N", 3, "L"]])
def test_batch_normalization(dims: list[Any]) -> None:
    m = model("BatchNormalization", [("x", dims)], _bn_params(3), epsilon=1e-3)
    shapes = [(1, 3, 7, 9), (2, 3, 9, 7)]
    compare(m, *[[rand(*s[: len(dims)])] for s in shapes])


def test_batch_normalization_runtime_params() -> None:
    params = _bn_params(3)
    inputs = [("x", ["N", 3, "H", "W"])] + [(k, [3]) for k in params]
    m = model("BatchNormalization", inputs)
    compare(m, *[[rand(n, 3, h, w), *params.values()] for n, h, w in SIZES])


def test_batch_normalization_training_is_an_error() -> None:
    m = model("BatchNormalization", NCHW, _bn_params(3), training_mode=1, opset=15)
    message = import_error(m)
    assert "BatchNormalization 'the_batchnormalization'" in message
    assert "training_mode=1 is not supported" in message


@pytest.mark.parametrize("axis", [-1, 2, 1, -2])
@pytest.mark.parametrize("bias", [True, False])
def test_layer_normalization(axis: int, bias: bool) -> None:
    dims: list[Any] = ["B", 4, 6]
    norm = dims[axis:]
    weights = {"scale": rand(*norm)}
    if bias:
        weights["bias"] = rand(*norm)
    m = model("LayerNormalization", [("x", dims)], weights, axis=axis, epsilon=1e-3)
    program = compare(m, [rand(1, 4, 6)], [rand(3, 4, 6)])
    assert_symbolic(program, "B")


def test_layer_normalization_symbolic_last_axis() -> None:
    m = model("LayerNormalization", [("x", ["B", "S", 8])], {"scale": rand(8), "bias": rand(8)})
    program = compare(m, [rand(1, 7, 8)], [rand(2, 9, 8)])
    assert_symbolic(program, "B", "S")


def test_layer_normalization_mean_and_invstd() -> None:
    m = model("LayerNormalization", [("x", ["B", 5, 6])], {"scale": rand(6)}, n_outputs=3, axis=1)
    compare(m, [rand(1, 5, 6)], [rand(3, 5, 6)])


def test_instance_normalization() -> None:
    m = model("InstanceNormalization", NCHW, {"scale": rand(3), "bias": rand(3)}, epsilon=1e-4)
    program = compare(m, *images())
    assert_symbolic(program, "N", "H", "W")


# ---- softmax, dropout -------------------------------------------------------------------------


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
@pytest.mark.parametrize("axis", [None, -1, 0, 1, -2])
def test_softmax(op: str, axis: int | None) -> None:
    attrs = {} if axis is None else {"axis": axis}
    m = model(op, [("x", ["B", "S", 5])], **attrs)
    program = compare(m, [rand(1, 7, 5)], [rand(3, 9, 5)])
    assert_symbolic(program, "B", "S")


def test_dropout_is_the_identity() -> None:
    m = model("Dropout", NCHW)
    compare(m, *images())
    m = model("Dropout", NCHW, {"ratio": np.array(0.3, np.float32)}, n_outputs=2)
    compare(m, *images())


def test_dropout_training_is_an_error() -> None:
    weights = {"ratio": np.array(0.3, np.float32), "training": np.array(True)}
    message = import_error(model("Dropout", NCHW, weights))
    assert "Dropout 'the_dropout'" in message and "training_mode=true is not supported" in message
