"""The composed activations and normalisations (``dynshape/onnx/ops/composite.py``) and
Dropout with a ratio of 0, against onnxruntime: one-node models with symbolic dims, each
compiled once and run at several sizes; ``SwiGLU`` (onnxruntime 1.32 has no kernel for it)
and the zero norm of ``LpNormalization`` against the ONNX formulas in numpy."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from model_builder import compare, import_error, model, run  # noqa: E402
from onnx import helper  # noqa: E402

RNG = np.random.default_rng(20261202)


def one_node(
    op: str,
    inputs: list[tuple[str, str, Any]],
    opset: int = 17,
    out: str = "float32",
    **attrs: Any,
) -> Any:
    """A model of one ``op`` node reading ``inputs`` (name, dtype, dims), one output of
    element type ``out``."""
    node = helper.make_node(op, [n for n, _, _ in inputs], ["y"], **attrs)
    return model([node], inputs, ["y"], opset=opset, output_dtypes=[out])


def rand(shape: tuple[int, ...], dtype: str = "float32", scale: float = 3.0) -> np.ndarray:
    return (RNG.standard_normal(shape) * scale).astype(dtype)


SIZES = [(1, 3), (4, 1), (3, 6)]


def _shrink(x: np.ndarray, lambd: float = 0.5, bias: float = 0.0) -> np.ndarray:
    return np.where(x < -lambd, x + bias, np.where(x > lambd, x - bias, 0))


def _softplus(x: np.ndarray) -> np.ndarray:
    out: np.ndarray = np.logaddexp(0, x)
    return out


#: op -> the ONNX formula in numpy (float64), keyword arguments the node's attributes.
FORMULAS: dict[str, Any] = {
    "Softsign": lambda x: x / (1 + np.abs(x)),
    "Celu": lambda x, alpha=1.0: np.maximum(0, x) + np.minimum(0, alpha * np.expm1(x / alpha)),
    "ThresholdedRelu": lambda x, alpha=1.0: np.where(x > alpha, x, 0),
    "Shrink": _shrink,
    "Mish": lambda x: x * np.tanh(_softplus(x)),
    "Swish": lambda x, alpha=1.0: x / (1 + np.exp(-alpha * x)),
}

UNARY = [
    ("Softsign", {}, 17),
    ("Celu", {}, 17),
    ("Celu", {"alpha": 2.5}, 17),
    ("ThresholdedRelu", {}, 17),
    ("ThresholdedRelu", {"alpha": -0.5}, 17),
    ("Shrink", {}, 17),
    ("Shrink", {"lambd": 1.5, "bias": 0.25}, 17),
    ("Mish", {}, 18),
    ("Swish", {}, 24),
    ("Swish", {"alpha": 0.7}, 24),
]


@pytest.mark.parametrize(("op", "attrs", "opset"), UNARY)
@pytest.mark.parametrize("dtype", ["float32", "float64", "float16"])
def test_unary_activations(op: str, attrs: dict[str, Any], opset: int, dtype: str) -> None:
    """float32 against onnxruntime; every dtype against the formula (onnxruntime lacks some
    float64 and float16 kernels)."""
    m = one_node(op, [("x", dtype, ["N", "M"])], opset, dtype, **attrs)
    feeds = [[rand(s, dtype)] for s in SIZES]
    feeds.append([np.array([[-40.0, -1e-3, 0.0, 1e-3, 40.0]], dtype)])  # tails, near zero
    if dtype == "float32":
        compare(m, *feeds)
    tol = 2e-3 if dtype == "float16" else 1e-6
    for (x,) in feeds:
        got = run(m, x)
        assert got.dtype == np.dtype(dtype)
        want = FORMULAS[op](x.astype(np.float64), **attrs)
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


def test_shrink_of_integers() -> None:
    """Computed in float64 and cast back, as onnxruntime and the ONNX reference do."""
    m = one_node("Shrink", [("x", "int32", ["N"])], out="int32", lambd=2.0, bias=1.0)
    compare(m, [np.arange(-6, 7, dtype=np.int32)], [np.array([3], dtype=np.int32)])


@pytest.mark.parametrize(
    ("slope", "dtype"),
    [([1], "float32"), (["M"], "float32"), (["N", "M"], "float32"), (["M"], "int32")],
)
def test_prelu(slope: list[Any], dtype: str) -> None:
    m = one_node("PRelu", [("x", dtype, ["K", "N", "M"]), ("s", dtype, slope)], out=dtype)
    feeds = []
    for k, (n, mm) in zip((2, 1, 3), SIZES, strict=True):
        dims = {"K": k, "N": n, "M": mm, 1: 1}
        x = rand((k, n, mm)).astype(dtype)
        feeds.append([x, rand(tuple(dims[d] for d in slope)).astype(dtype)])
    compare(m, *feeds)


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_swiglu(dtype: str) -> None:
    """Against ``a * sigmoid(alpha * a) * b`` in float64 (onnxruntime has no SwiGLU)."""
    for alpha in (1.0, 0.5):
        m = one_node(
            "SwiGLU", [("a", dtype, ["N", "M"]), ("b", dtype, ["N", "M"])], 28, dtype, alpha=alpha
        )
        for shape in SIZES:
            a, b = rand(shape, dtype), rand(shape, dtype)
            a64, b64 = a.astype(np.float64), b.astype(np.float64)
            want = a64 / (1 + np.exp(-alpha * a64)) * b64
            got = run(m, a, b)
            assert got.dtype == np.dtype(dtype)
            tol = 2e-3 if dtype == "float16" else 1e-5
            np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_hardmax(axis: int) -> None:
    m = one_node("Hardmax", [("x", "float32", ["N", 4, "M"])], axis=axis)
    feeds = [[rand((n, 4, mm))] for n, mm in SIZES]
    feeds.append([np.ones((2, 4, 3), np.float32)])  # ties: the first maximum
    compare(m, *feeds)


@pytest.mark.parametrize(("p", "axis"), [(1, 0), (1, -1), (2, 1), (2, -1)])
def test_lp_normalization(p: int, axis: int) -> None:
    m = one_node("LpNormalization", [("x", "float32", ["N", "M"])], p=p, axis=axis)
    compare(m, *([rand(s)] for s in SIZES))


def test_lp_normalization_of_zeros_is_zero() -> None:
    """ONNX defines the result 0 where the norm is 0 (opset 22's text)."""
    m = one_node("LpNormalization", [("x", "float32", ["N", "M"])], p=2, axis=1)
    x = np.array([[0.0, 0.0], [3.0, 4.0]], np.float32)
    np.testing.assert_allclose(run(m, x), np.array([[0, 0], [0.6, 0.8]]), rtol=1e-6)


@pytest.mark.parametrize("axes", [None, [0, 2, 3], [1], [2, 3], [-1]])
def test_mean_variance_normalization(axes: list[int] | None) -> None:
    attrs: dict[str, Any] = {} if axes is None else {"axes": axes}
    m = one_node("MeanVarianceNormalization", [("x", "float32", ["N", 3, "H", "W"])], **attrs)
    compare(m, *([rand((n, 3, h, h + 1))] for n, h in SIZES), rtol=1e-3, atol=1e-4)


@pytest.mark.parametrize(("opset", "groups"), [(21, 2), (21, 1), (21, 6), (18, 3)])
def test_group_normalization(opset: int, groups: int) -> None:
    """Opset 21's scale and bias are per channel, opset 18's per group."""
    c = 6
    params = c if opset >= 21 else groups
    inputs = [
        ("x", "float32", ["N", c, "H", "W"]),
        ("s", "float32", [params]),
        ("b", "float32", [params]),
    ]
    for epsilon in (1e-5, 1e-2):
        m = one_node("GroupNormalization", inputs, opset, num_groups=groups, epsilon=epsilon)
        feeds = [[rand((n, c, h, h + 2)), rand((params,)), rand((params,))] for n, h in SIZES]
        compare(m, *feeds, rtol=1e-4, atol=1e-4)


def test_group_normalization_of_a_3d_input() -> None:
    m = one_node(
        "GroupNormalization",
        [("x", "float32", ["N", 4, "L"]), ("s", "float32", [4]), ("b", "float32", [4])],
        21,
        num_groups=2,
    )
    compare(m, *([rand((n, 4, ln)), rand((4,)), rand((4,))] for n, ln in SIZES), atol=1e-4)


@pytest.mark.parametrize(
    ("size", "dims"),
    [(3, ["N", 5, "H", "W"]), (4, ["N", 6, "H", "W"]), (1, ["N", 3, "H", "W"]), (5, ["N", 7])],
)
def test_lrn(size: int, dims: list[Any]) -> None:
    """Against the ONNX formula; odd sizes of 4-d inputs against onnxruntime too (which
    refuses the rest)."""
    alpha, beta, bias = 0.3, 0.6, 1.5
    m = one_node("LRN", [("x", "float32", dims)], size=size, alpha=alpha, beta=beta, bias=bias)
    feeds = []
    for n, h in SIZES:
        values = {"N": n, "H": h, "W": h + 1}
        feeds.append([rand(tuple(values.get(d, d) for d in dims))])
    if size % 2 and len(dims) == 4:
        compare(m, *feeds)
    for (x,) in feeds:
        c = x.shape[1]
        square = np.zeros(x.shape)
        for i in range(c):
            lo, hi = max(0, i - (size - 1) // 2), min(c - 1, i + size // 2)
            square[:, i] = np.sum(x[:, lo : hi + 1].astype(np.float64) ** 2, axis=1)
        want = x / (bias + alpha / size * square) ** beta
        np.testing.assert_allclose(run(m, x), want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("k", [0, 2, -1, 7])
@pytest.mark.parametrize("to", [None, onnx.TensorProto.FLOAT, onnx.TensorProto.INT64])
def test_eye_like(k: int, to: int | None) -> None:
    attrs: dict[str, Any] = {"k": k} if to is None else {"k": k, "dtype": to}
    dtype = {None: "int32", onnx.TensorProto.FLOAT: "float32", onnx.TensorProto.INT64: "int64"}[to]
    for dims in (["N", "M"], [3, 5]):
        m = one_node("EyeLike", [("x", "int32", dims)], out=dtype, **attrs)
        shapes = SIZES if dims == ["N", "M"] else [(3, 5)]
        compare(m, *([np.zeros(s, np.int32)] for s in shapes))


@pytest.mark.parametrize("n", [1, 2, 3])
def test_det(n: int) -> None:
    m = one_node("Det", [("x", "float32", ["B", n, n])])
    compare(m, *([rand((b, n, n), scale=1.0)] for b in (1, 4)), rtol=1e-4, atol=1e-5)
    m = one_node("Det", [("x", "float64", ["B", n, n])], out="float64")
    for b in (1, 5):  # onnxruntime has no float64 Det: numpy's
        x = rand((b, n, n), "float64")
        np.testing.assert_allclose(run(m, x), np.linalg.det(x), rtol=1e-12, atol=1e-12)


def test_dropout_training_with_ratio_zero_is_the_identity() -> None:
    node = helper.make_node("Dropout", ["x", "r", "t"], ["y", "mask"])
    m = model(
        [node],
        [("x", "float32", ["N", "M"])],
        ["y", "mask"],
        initializers={"r": np.array(0.0, np.float32), "t": np.array(True)},
        output_dtypes=["float32", "bool"],
    )
    compare(m, *([rand(s)] for s in SIZES))


def test_errors() -> None:
    x = [("x", "float32", ["N", "M"])]
    assert "p=3: only 1 and 2 are defined" in import_error(one_node("LpNormalization", x, p=3))
    assert "unsupported: Det of 4 x 4 matrices" in import_error(
        one_node("Det", [("x", "float32", [4, 4])])
    )
    assert "Det of 2 x 3 matrices: they must be square" in import_error(
        one_node("Det", [("x", "float32", [2, 3])])
    )
    assert "unsupported: Det of N x N matrices: the size must be static" in import_error(
        one_node("Det", [("x", "float32", ["N", "N"])])
    )
    gn = [("x", "float32", ["N", 6, "H"]), ("s", "float32", [6]), ("b", "float32", [6])]
    assert "num_groups=4 does not divide the 6 channels" in import_error(
        one_node("GroupNormalization", gn, 21, num_groups=4)
    )
    assert "scale must have shape [3] (groups at opset 18)" in import_error(
        one_node("GroupNormalization", gn, 18, num_groups=3)
    )
    assert "the input must be 2-d" in import_error(
        one_node("EyeLike", [("x", "float32", [2, 2, 2])])
    )
    assert "size=None must be given" in import_error(one_node("LRN", x))
    ab = [("a", "float32", [2, 3]), ("b", "float32", [1, 3])]
    assert "must have the same shape" in import_error(one_node("SwiGLU", ab, 28))
    assert "input 0 must be float16, float32 or float64, got int32" in import_error(
        one_node("Softsign", [("x", "int32", ["N"])])
    )
    dropout = helper.make_node("Dropout", ["x", "r", "t"], ["y"])
    training = model(
        [dropout],
        x,
        ["y"],
        initializers={"r": np.array(0.5, np.float32), "t": np.array(True)},
    )
    assert "training_mode=true is not supported" in import_error(training)


@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("order", [["x", "s"], ["s", "x"]])
def test_sigmoid_times_its_input_is_one_silu_with_onnxruntime_s_values(
    dtype: str, order: list[str]
) -> None:
    """torch.onnx's ``nn.SiLU`` (Sigmoid, then Mul by the input, either operand order) compiles
    to one ``silu`` (``fuse_silu``) and gives onnxruntime's values: odd and empty shapes, the
    tails, and sizes past the kernel's chunk."""
    import dynshape
    import dynshape.onnx

    nodes = [helper.make_node("Sigmoid", ["x"], ["s"]), helper.make_node("Mul", order, ["y"])]
    m = model(nodes, [("x", dtype, ["N", "M"])], ["y"], output_dtypes=[dtype])
    rewritten = str(dynshape.stages(dynshape.onnx.load(m))["rewritten"])
    assert "silu(" in rewritten and "sigmoid(" not in rewritten
    feeds = [[rand(s, dtype)] for s in [*SIZES, (0, 5), (7, 13), (300, 257)]]
    feeds.append([np.array([[-40.0, -8.0, -1e-3, 0.0, 1e-3, 8.0, 40.0]], dtype)])
    tol = 2e-3 if dtype == "float16" else 2e-6
    compare(m, *feeds, rtol=tol, atol=tol)
