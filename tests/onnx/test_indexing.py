"""The indexing converters of ``dynshape.onnx`` (NonZero, TopK, GatherElements, GatherND, Pad,
CumSum, Trilu, OneHot, Einsum) against onnxruntime: small models with symbolic input dims, each
compiled once and run at several sizes; and the messages of the variants refused."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from model_builder import compare as _compare  # noqa: E402
from model_builder import import_error  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402


def compare(m: Any, *feeds: list[np.ndarray], rtol: float = 1e-5, atol: float = 1e-5) -> Any:
    """``model_builder.compare`` with this file's tolerance."""
    return _compare(m, *feeds, rtol=rtol, atol=atol)


import ir  # noqa: E402
from dynshape.passes.infer_types import infer_types  # noqa: E402

RNG = np.random.default_rng(20240616)
FLOAT, INT64, INT32 = TensorProto.FLOAT, TensorProto.INT64, TensorProto.INT32


def model(
    op: str,
    inputs: list[tuple[str, int, list[Any]]],
    weights: dict[str, np.ndarray] | None = None,
    n_outputs: int = 1,
    opset: int = 18,
    order: list[str] | None = None,
    **attrs: Any,
) -> Any:
    """A one-node model: ``inputs`` are (name, element type, dims) graph inputs, ``weights``
    initializers; the node's inputs are ``order`` (default: inputs then weights, "" omits)."""
    weights = weights or {}
    names = order if order is not None else [n for n, _, _ in inputs] + list(weights)
    outs = [f"y{i}" for i in range(n_outputs)]
    node = helper.make_node(op, names, outs, name=f"the_{op.lower()}", **attrs)
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info(n, t, dims) for n, t, dims in inputs],
        [helper.make_empty_tensor_value_info(o) for o in outs],
        [numpy_helper.from_array(w, n) for n, w in weights.items()],
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def result_line(program: Any) -> str:
    """The last line of main's typed text: its result, with the result's type."""
    lines = ir.text.printer.module_to_text(infer_types(program)).strip().splitlines()
    return lines[lines.index("}") - 1]


def result_types(program: Any) -> list[str]:
    """The printed tensor types of the program's results."""
    return re.findall(r"Tensor\[[^\]]*\]", result_line(program).split("ty=")[-1])


def assert_symbolic(program: Any, *names: str) -> None:
    """The program's result types have no ``?`` dim and mention each of ``names``."""
    text = result_line(program)
    assert "?" not in text, text
    for name in names:
        assert re.search(rf"\b{name}\b", text), text


def rand(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


# ---- NonZero, TopK --------------------------------------------------------------------------


def test_nonzero() -> None:
    m = model("NonZero", [("x", FLOAT, ["n", "m"])])
    feeds = []
    for n, k in [(3, 4), (1, 5), (4, 2)]:
        x = rand(n, k)
        x[x < 0.2] = 0
        feeds.append([x])
    feeds.append([np.zeros((2, 3), np.float32)])  # no element: shape (2, 0)
    program = compare(m, *feeds)
    assert result_types(program) == ["Tensor[(2, ?0), int64]"]


@pytest.mark.parametrize("largest", [0, 1])
@pytest.mark.parametrize("axis", [-1, 0])
def test_topk_known_k(largest: int, axis: int) -> None:
    m = model(
        "TopK",
        [("x", FLOAT, ["n", "m"])],
        {"k": np.array([2], np.int64)},
        n_outputs=2,
        axis=axis,
        largest=largest,
    )
    program = compare(m, [rand(3, 5)], [rand(4, 2)], [rand(2, 7)])
    assert_symbolic(program)


def test_topk_ties_go_to_the_smaller_index() -> None:
    m = model("TopK", [("x", FLOAT, ["n", "m"])], {"k": np.array([3], np.int64)}, n_outputs=2)
    x = np.array([[1, 1, 2, 2, 1], [0, 0, 0, 0, 0]], np.float32)
    compare(m, [x], [np.round(rand(3, 6))])
    m = model(
        "TopK", [("x", FLOAT, ["n", "m"])], {"k": np.array([3], np.int64)}, n_outputs=2, largest=0
    )
    compare(m, [x], [np.round(rand(3, 6))])


def test_topk_k_from_data() -> None:
    m = model("TopK", [("x", FLOAT, ["n", "m"]), ("k", INT64, [1])], n_outputs=2)
    program = compare(
        m, [rand(3, 5), np.array([2], np.int64)], [rand(2, 4), np.array([4], np.int64)]
    )
    assert result_types(program) == ["Tensor[(n, ?0), float32]", "Tensor[(n, ?0), int64]"]


def test_topk_k_from_a_shape_stays_symbolic() -> None:
    """k = the second dim of another input: the result has that dim, not ``?``."""
    shape = helper.make_node("Shape", ["s"], ["sh"], start=1, end=2)
    topk = helper.make_node("TopK", ["x", "sh"], ["v", "i"], name="the_topk")
    graph = helper.make_graph(
        [shape, topk],
        "g",
        [
            helper.make_tensor_value_info("x", FLOAT, ["n", "m"]),
            helper.make_tensor_value_info("s", FLOAT, [1, "k"]),
        ],
        [helper.make_empty_tensor_value_info("v"), helper.make_empty_tensor_value_info("i")],
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    program = compare(m, [rand(2, 6), rand(1, 3)], [rand(3, 4), rand(1, 4)])
    assert_symbolic(program, "k")


# ---- GatherElements, GatherND -----------------------------------------------------------------


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_gather_elements(axis: int) -> None:
    m = model(
        "GatherElements", [("x", FLOAT, ["n", "m", 3]), ("i", INT64, ["a", "b", 2])], axis=axis
    )
    feeds = []
    for n, k, a, b in [(4, 5, 2, 3), (3, 2, 3, 2), (2, 3, 1, 1)]:
        size = [n, k, 3][axis]
        idx = RNG.integers(-size, size, (a, b, 2)).astype(np.int64)  # negatives included
        feeds.append([rand(n, k, 3), idx])
    program = compare(m, *feeds)
    assert_symbolic(program, "a", "b")


def test_gather_elements_int32_indices() -> None:
    m = model("GatherElements", [("x", FLOAT, ["n", 4]), ("i", INT32, ["n", 2])], axis=1)
    compare(m, *[[rand(n, 4), RNG.integers(0, 4, (n, 2)).astype(np.int32)] for n in (1, 3)])


def test_gather_nd() -> None:
    m = model("GatherND", [("x", FLOAT, ["n", "m", 4]), ("i", INT64, ["k", 2])])
    feeds = []
    for n, k, c in [(3, 5, 4), (2, 2, 1), (4, 3, 6)]:
        idx = np.stack([RNG.integers(-n, n, c), RNG.integers(-k, k, c)], axis=1).astype(np.int64)
        feeds.append([rand(n, k, 4), idx])
    program = compare(m, *feeds)
    assert_symbolic(program, "k")


def test_gather_nd_full_tuples_and_batch_dims() -> None:
    m = model("GatherND", [("x", FLOAT, ["n", 3]), ("i", INT64, ["a", "b", 2])])
    idx = np.stack([RNG.integers(0, 4, (2, 5)), RNG.integers(0, 3, (2, 5))], -1).astype(np.int64)
    compare(m, [rand(4, 3), idx])
    m = model("GatherND", [("x", FLOAT, ["b", "m", 3]), ("i", INT64, ["b", "k", 1])], batch_dims=1)
    feeds = [
        [rand(b, k, 3), RNG.integers(0, k, (b, c, 1)).astype(np.int64)]
        for b, k, c in [(2, 4, 3), (3, 2, 5)]
    ]
    compare(m, *feeds)


# ---- Pad ------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge", "wrap"])
def test_pad_modes(mode: str) -> None:
    pads = np.array([1, 2, 2, 0], np.int64)
    m = model("Pad", [("x", FLOAT, ["n", "m"])], {"pads": pads}, mode=mode)
    program = compare(m, [rand(3, 4)], [rand(4, 3)], [rand(5, 6)])
    assert_symbolic(program, "n", "m")


def test_pad_constant_value_axes_and_negative_pads() -> None:
    weights = {
        "pads": np.array([2, -1, 1, 3], np.int64),
        "value": np.array(1.5, np.float32),
        "axes": np.array([-1, 0], np.int64),
    }
    m = model("Pad", [("x", FLOAT, ["n", "m"])], weights)
    compare(m, [rand(3, 4)], [rand(2, 5)])


def test_pad_of_ints() -> None:
    weights = {"pads": np.array([0, 1, 0, 2], np.int64), "value": np.array(-7, np.int64)}
    m = model("Pad", [("x", INT64, [2, "m"])], weights)
    compare(m, *[[RNG.integers(-5, 5, (2, k)).astype(np.int64)] for k in (1, 4)])


def test_pad_refuses_pads_from_data() -> None:
    m = model("Pad", [("x", FLOAT, ["n"]), ("pads", INT64, [2])])
    text = import_error(m)
    assert "Pad 'the_pad': unsupported: pads computed from data" in text


def test_pad_refuses_reflect_wider_than_the_axis() -> None:
    m = model("Pad", [("x", FLOAT, [2, 3])], {"pads": np.array([0, 3, 0, 0], np.int64)})
    compare(m, [rand(2, 3)])  # constant: any width
    m = model(
        "Pad", [("x", FLOAT, [2, 3])], {"pads": np.array([0, 3, 0, 0], np.int64)}, mode="reflect"
    )
    assert "Pad 'the_pad': reflect padding of 3 along an axis of 3" in import_error(m)


# ---- CumSum --------------------------------------------------------------------------------


@pytest.mark.parametrize("exclusive", [0, 1])
@pytest.mark.parametrize("reverse", [0, 1])
@pytest.mark.parametrize("axis", [0, -1])
def test_cumsum(exclusive: int, reverse: int, axis: int) -> None:
    weights = {"axis": np.array(axis, np.int64)}
    m = model("CumSum", [("x", FLOAT, ["n", "m"])], weights, exclusive=exclusive, reverse=reverse)
    program = compare(m, [rand(3, 4)], [rand(1, 5)], [rand(6, 2)])
    assert_symbolic(program, "n", "m")


def test_cumsum_of_ints_and_axis_from_data() -> None:
    m = model("CumSum", [("x", INT32, ["n"])], {"axis": np.array(0, np.int32)})
    compare(m, *[[RNG.integers(-9, 9, n).astype(np.int32)] for n in (1, 7)])
    m = model("CumSum", [("x", FLOAT, ["n"]), ("axis", INT64, [])])
    assert "CumSum 'the_cumsum': unsupported: an axis computed from data" in import_error(m)


# ---- Trilu, OneHot --------------------------------------------------------------------------


@pytest.mark.parametrize("upper", [0, 1])
@pytest.mark.parametrize("k", [None, -1, 2])
def test_trilu(upper: int, k: int | None) -> None:
    weights = {} if k is None else {"k": np.array(k, np.int64)}
    m = model("Trilu", [("x", FLOAT, ["b", "n", "m"])], weights, upper=upper)
    program = compare(m, [rand(2, 3, 4)], [rand(1, 5, 2)], [rand(3, 4, 4)])
    assert_symbolic(program, "b", "n", "m")


def test_trilu_k_from_data() -> None:
    m = model("Trilu", [("x", INT64, ["n", "m"]), ("k", INT64, [])], upper=0)
    x = RNG.integers(1, 9, (4, 5)).astype(np.int64)
    compare(m, [x, np.array(1, np.int64)], [x[:3], np.array(-2, np.int64)])


@pytest.mark.parametrize("axis", [-1, 0, 1])
def test_one_hot(axis: int) -> None:
    weights = {"depth": np.array(5, np.int64)}
    m = model(
        "OneHot",
        [("i", INT64, ["n", "m"]), ("values", FLOAT, [2])],
        weights,
        order=["i", "depth", "values"],
        axis=axis,
    )
    values = np.array([-1.0, 3.0], np.float32)
    feeds = [[RNG.integers(-6, 7, (n, k)).astype(np.int64), values] for n, k in [(2, 3), (4, 1)]]
    program = compare(m, *feeds)
    assert_symbolic(program, "n", "m")


def test_one_hot_refuses_depth_from_data() -> None:
    m = model("OneHot", [("i", INT64, ["n"]), ("d", INT64, []), ("v", FLOAT, [2])])
    assert "OneHot 'the_onehot': unsupported: a depth computed from data" in import_error(m)


# ---- Einsum ---------------------------------------------------------------------------------

EINSUMS = [
    ("bij,bjk->bik", [["b", "n", "k"], ["b", "k", "m"]]),
    ("bhqd,bhkd->bhqk", [["b", 2, "q", 4], ["b", 2, "s", 4]]),
    ("bhqk,bhkd->bhqd", [["b", 2, "q", "s"], ["b", 2, "s", 4]]),
    ("ij->ji", [["n", "m"]]),
    ("ij->i", [["n", "m"]]),
    ("ij", [["n", "m"]]),
    ("ji", [["n", "m"]]),
    ("i,i->", [["n"], ["n"]]),
    ("i,j->ij", [["n"], ["m"]]),
    ("ij,jk", [["n", "k"], ["k", "m"]]),
    ("...ij,...jk->...ik", [["b", "n", "k"], ["b", "k", "m"]]),
    ("bnd,dk->bnk", [["b", "n", 4], [4, "m"]]),
    ("ij,jk,kl->il", [["n", "k"], ["k", 3], [3, "m"]]),
    ("bij,bkj->b", [["b", "n", "k"], ["b", "m", "k"]]),
]


@pytest.mark.parametrize(("equation", "dims"), EINSUMS, ids=[e for e, _ in EINSUMS])
def test_einsum(equation: str, dims: list[list[Any]]) -> None:
    inputs = [(f"x{i}", FLOAT, d) for i, d in enumerate(dims)]
    m = model("Einsum", inputs, equation=equation)
    feeds = []
    for sizes in [{"b": 2, "n": 3, "k": 4, "m": 5, "q": 3, "s": 6}, {"b": 1, "n": 1, "k": 2}]:
        full = {"m": 3, "q": 2, "s": 5, **sizes}
        feeds.append([rand(*[full.get(d, d) for d in shape]) for shape in dims])
    program = compare(m, *feeds, rtol=1e-4)
    assert_symbolic(program)


@pytest.mark.parametrize("op", ["GatherElements", "GatherND"])
def test_an_index_out_of_range_raises_rather_than_reading_another_element(op: str) -> None:
    from onnx import TensorProto, helper

    import dynshape.onnx

    graph = helper.make_graph(
        [
            helper.make_node(
                op, ["data", "idx"], ["y"], **({"axis": 0} if op == "GatherElements" else {})
            )
        ],
        "g",
        [
            helper.make_tensor_value_info("data", TensorProto.FLOAT, [3, 4]),
            helper.make_tensor_value_info(
                "idx", TensorProto.INT64, [1, 4] if op == "GatherElements" else [1, 2]
            ),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    vm = dynshape.VirtualMachine(dynshape.compile(dynshape.onnx.load(model)))
    data = np.arange(12, dtype=np.float32).reshape(3, 4)
    # Row 3 of a 3-row table: flattened, it would land on row 0 of the next column.
    bad = np.array([[3, 0, 0, 0]] if op == "GatherElements" else [[3, 0]], dtype=np.int64)
    with pytest.raises(dynshape.DynShapeError, match=r"out of|index"):
        vm.run(data, bad)
    good = np.array([[2, 1, 0, -1]] if op == "GatherElements" else [[2, 3]], dtype=np.int64)
    vm.run(data, good)
