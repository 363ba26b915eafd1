"""The ``ScatterND`` and ``ScatterElements`` converters of ``dynshape.onnx`` against
onnxruntime: models with symbolic input dims, each compiled once and run at several sizes (the
reductions of each opset, repeated and negative indices, int32 indices, the KV-cache update an
exporter writes, a shape edited at import); and the messages of what is refused."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from model_builder import compare, import_error, run  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import dynshape  # noqa: E402
import ir  # noqa: E402
from dynshape.passes.infer_types import infer_types  # noqa: E402

RNG = np.random.default_rng(20261201)
FLOAT, INT64, INT32 = TensorProto.FLOAT, TensorProto.INT64, TensorProto.INT32

#: The reductions each opset defines (ONNX 16 added add and mul, 18 max and min).
BY_OPSET = [(13, "none"), (16, "add"), (16, "mul"), (18, "max"), (18, "min"), (21, "none")]


def model(
    op: str,
    inputs: Sequence[tuple[str, Any, Any]],
    weights: dict[str, np.ndarray] | None = None,
    opset: int = 18,
    **attrs: Any,
) -> Any:
    """A one-node model of ``op`` on ``inputs`` (name, element type, dims), then ``weights``."""
    weights = weights or {}
    names = [n for n, _, _ in inputs] + list(weights)
    node = helper.make_node(op, names, ["y"], name=f"the_{op.lower()}", **attrs)
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info(n, t, dims) for n, t, dims in inputs],
        [helper.make_empty_tensor_value_info("y")],
        [numpy_helper.from_array(w, n) for n, w in weights.items()],
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def result_text(program: Any) -> str:
    """The last line of main's typed text: its result, with the result's type."""
    lines = ir.text.printer.module_to_text(infer_types(program)).strip().splitlines()
    return lines[lines.index("}") - 1]


def assert_symbolic(program: Any, *names: str) -> None:
    """The program's result types have no ``?`` dim and mention each of ``names``."""
    text = result_text(program)
    assert "?" not in text.split("ty=")[-1], text
    for name in names:
        assert re.search(rf"\b{name}\b", text.split("ty=")[-1]), text


def rand(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def small_ints(*shape: int) -> np.ndarray:
    """Small float values, so products of several updates stay exact."""
    return RNG.integers(-3, 4, shape).astype(np.float32)


# ---- ScatterND --------------------------------------------------------------------------------


@pytest.mark.parametrize(("opset", "reduction"), BY_OPSET)
def test_scatter_nd_rows_with_repeats(opset: int, reduction: str) -> None:
    """Rows of ``(n, m)`` data at ``(k, 1)`` indices: repeated rows accumulate under a
    reduction, and the last write wins without one (onnxruntime's sequential order)."""
    attrs: dict[str, Any] = {} if opset < 16 else {"reduction": reduction}
    inputs = [("x", FLOAT, ["n", "m"]), ("i", INT64, ["k", 1]), ("u", FLOAT, ["k", "m"])]
    m = model("ScatterND", inputs, opset=opset, **attrs)
    feeds = []
    for n, w, k in [(4, 3, 6), (1, 5, 3), (6, 2, 1), (3, 4, 0)]:
        idx = RNG.integers(-n, n, (k, 1)).astype(np.int64)
        feeds.append([small_ints(n, w), idx, small_ints(k, w)])
    program = compare(m, *feeds)
    assert_symbolic(program, "n", "m")


def test_scatter_nd_element_tuples_and_whole_data() -> None:
    """Full index tuples (one element each), a batch of tuples, and tuples of length 0 (each
    update is the whole data: the last one wins)."""
    inputs = [("x", FLOAT, ["n", "m"]), ("i", INT64, ["a", "b", 2]), ("u", FLOAT, ["a", "b"])]
    m = model("ScatterND", inputs, reduction="add")
    feeds = []
    for n, w, a, b in [(3, 4, 2, 3), (5, 1, 1, 4), (2, 2, 3, 3)]:
        idx = np.stack([RNG.integers(-n, n, (a, b)), RNG.integers(0, w, (a, b))], -1)
        feeds.append([rand(n, w), idx.astype(np.int64), rand(a, b)])
    compare(m, *feeds)
    inputs = [("x", FLOAT, ["n", 3]), ("i", INT64, ["k", 0]), ("u", FLOAT, ["k", "n", 3])]
    m = model("ScatterND", inputs)
    compare(
        m, *[[rand(n, 3), np.zeros((k, 0), np.int64), rand(k, n, 3)] for n, k in [(2, 3), (4, 1)]]
    )


def test_scatter_nd_kv_cache_update() -> None:
    """The pattern exporters write for ``cache[:, past:past + t] = new``: indices
    ``(b, t, 2)`` from ``Range``s over the new tokens' shape, broadcast and joined by
    ``Unsqueeze``/``Expand``/``Concat``; the cache keeps its symbolic type."""
    one = numpy_helper.from_array(np.array(1, np.int64), "one")
    zero = numpy_helper.from_array(np.array(0, np.int64), "zero")
    nodes = [
        helper.make_node("Shape", ["new"], ["shape"]),
        helper.make_node("Gather", ["shape", "zero"], ["b"]),
        helper.make_node("Gather", ["shape", "one"], ["t"]),
        helper.make_node("Slice", ["shape", "s0", "s2"], ["bt"]),
        helper.make_node("Add", ["past", "t"], ["end"]),
        helper.make_node("Range", ["past", "end", "one"], ["pos"]),
        helper.make_node("Range", ["zero", "b", "one"], ["rows"]),
        helper.make_node("Unsqueeze", ["rows", "ax1"], ["rows_col"]),
        helper.make_node("Expand", ["rows_col", "bt"], ["row_grid"]),
        helper.make_node("Unsqueeze", ["pos", "ax0"], ["pos_row"]),
        helper.make_node("Expand", ["pos_row", "bt"], ["pos_grid"]),
        helper.make_node("Unsqueeze", ["row_grid", "ax2"], ["r3"]),
        helper.make_node("Unsqueeze", ["pos_grid", "ax2"], ["p3"]),
        helper.make_node("Concat", ["r3", "p3"], ["idx"], axis=2),
        helper.make_node("ScatterND", ["cache", "idx", "new"], ["y"], name="kv_update"),
    ]
    consts = [
        numpy_helper.from_array(np.array(v, np.int64), name)
        for name, v in [("s0", [0]), ("s2", [2]), ("ax0", [0]), ("ax1", [1]), ("ax2", [2])]
    ]
    graph = helper.make_graph(
        nodes,
        "kv",
        [
            helper.make_tensor_value_info("cache", FLOAT, ["b", "s", "d"]),
            helper.make_tensor_value_info("new", FLOAT, ["b", "t", "d"]),
            helper.make_tensor_value_info("past", INT64, []),
        ],
        [helper.make_empty_tensor_value_info("y")],
        [one, zero, *consts],
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    m.ir_version = 8
    feeds = [
        [rand(b, s, d), rand(b, t, d), np.array(past, np.int64)]
        for b, s, d, t, past in [
            (1, 8, 4, 1, 3),
            (2, 8, 4, 3, 5),
            (3, 16, 2, 5, 0),
            (2, 4, 3, 4, 0),
        ]
    ]
    program = compare(m, *feeds)
    assert_symbolic(program, "b", "s", "d")
    with pytest.raises(dynshape.DynShapeError, match=r"out of range for the leading dims \(1, 8\)"):
        run(m, rand(1, 8, 4), rand(1, 2, 4), np.array(7, np.int64))  # positions 7 and 8


def test_scatter_nd_on_a_shape_is_folded_with_its_dims() -> None:
    """``Shape`` edited by ``ScatterND`` (positions 1 and 2 swapped) and fed to ``Reshape``:
    folded at import, so the reshaped type keeps ``n`` and ``m``."""
    nodes = [
        helper.make_node("Shape", ["x"], ["shape"]),
        helper.make_node("Gather", ["shape", "two"], ["m"]),
        helper.make_node("Concat", ["m", "c2"], ["new"], axis=0),
        helper.make_node("ScatterND", ["shape", "where", "new"], ["target"]),
        helper.make_node("Reshape", ["x", "target"], ["y"]),
    ]
    weights = {
        "two": np.array([2], np.int64),
        "c2": np.array([2], np.int64),
        "where": np.array([[1], [-1]], np.int64),
    }
    graph = helper.make_graph(
        nodes,
        "fold",
        [helper.make_tensor_value_info("x", FLOAT, ["n", 2, "m"])],
        [helper.make_empty_tensor_value_info("y")],
        [numpy_helper.from_array(w, k) for k, w in weights.items()],
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    program = compare(m, [rand(3, 2, 5)], [rand(1, 2, 1)], [rand(4, 2, 3)])
    assert_symbolic(program, "n", "m")
    assert "scatter_nd" not in ir.text.printer.module_to_text(program)


# ---- ScatterElements --------------------------------------------------------------------------


@pytest.mark.parametrize(("opset", "reduction"), BY_OPSET)
@pytest.mark.parametrize("axis", [0, -1])
def test_scatter_elements(opset: int, reduction: str, axis: int) -> None:
    """Indices shorter than the data on the other axis and with repeats along ``axis``."""
    attrs: dict[str, Any] = {"axis": axis} | ({} if opset < 16 else {"reduction": reduction})
    dims = ["k", "j"] if axis == 0 else ["j", "k"]
    inputs = [("x", FLOAT, ["n", "m"]), ("i", INT64, dims), ("u", FLOAT, dims)]
    m = model("ScatterElements", inputs, opset=opset, **attrs)
    feeds = []
    for n, w, k, j in [(4, 3, 5, 2), (1, 6, 3, 1), (5, 5, 1, 5), (2, 3, 0, 2)]:
        along, other = (n, w) if axis == 0 else (w, n)
        shape = (k, min(j, other)) if axis == 0 else (min(j, other), k)
        idx = RNG.integers(-along, along, shape).astype(np.int64)
        feeds.append([small_ints(n, w), idx, small_ints(*shape)])
    program = compare(m, *feeds)
    assert_symbolic(program, "n", "m")


def test_scatter_elements_int32_indices_and_int_data() -> None:
    inputs = [("x", INT64, ["n", 4]), ("i", INT32, ["n", 2]), ("u", INT64, ["n", 2])]
    m = model("ScatterElements", inputs, axis=1, reduction="max")
    feeds: list[list[np.ndarray]] = [
        [
            RNG.integers(-9, 9, (n, 4)),
            RNG.integers(-4, 4, (n, 2)).astype(np.int32),
            RNG.integers(-9, 9, (n, 2)),
        ]
        for n in (1, 3, 6)
    ]
    compare(m, *feeds)
    # counts of labels per row, as one-hot encoders and bincount-like exports do
    inputs = [("c", INT64, ["b", 5]), ("l", INT64, ["b", "t"]), ("o", INT64, ["b", "t"])]
    m = model("ScatterElements", inputs, axis=1, reduction="add")
    compare(
        m,
        *[
            [np.zeros((b, 5), np.int64), RNG.integers(0, 5, (b, t)), np.ones((b, t), np.int64)]
            for b, t in [(2, 7), (1, 1), (4, 3)]
        ],
    )


def test_scatter_elements_out_of_range_index_fails_at_run_time() -> None:
    inputs = [("x", FLOAT, ["n", 3]), ("i", INT64, ["k", 3]), ("u", FLOAT, ["k", 3])]
    m = model("ScatterElements", inputs)
    with pytest.raises(dynshape.DynShapeError, match=r"index -3 at indices\[1, 0\] .* size 2"):
        run(m, rand(2, 3), np.array([[0, 1, 1], [-3, 0, 0]], np.int64), rand(2, 3))


def test_scatter_elements_on_known_values_is_folded() -> None:
    """All inputs known (a constant table updated): evaluated at import, exactly as ONNX's
    sequential definition (repeated index 1: the sum of both updates)."""
    weights = {
        "x": np.array([[1, 2], [3, 4]], np.int64),
        "i": np.array([[1, 1]], np.int64),
        "u": np.array([[10, 20]], np.int64),
    }
    node = helper.make_node("ScatterElements", list(weights), ["y"], axis=1, reduction="add")
    graph = helper.make_graph(
        [node],
        "g",
        [],
        [helper.make_empty_tensor_value_info("y")],
        [numpy_helper.from_array(w, k) for k, w in weights.items()],
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    m.ir_version = 8
    program = compare(m, [])
    assert "scatter_elements" not in ir.text.printer.module_to_text(program)
    np.testing.assert_array_equal(run(m), [[1, 32], [3, 4]])


# ---- what is refused ------------------------------------------------------------------------


ND_INPUTS = [("x", FLOAT, ["n", 4]), ("i", INT64, ["k", 1]), ("u", FLOAT, ["k", 4])]
EL_INPUTS = [("x", FLOAT, ["n", 4]), ("i", INT64, ["k", 4]), ("u", FLOAT, ["k", 4])]


@pytest.mark.parametrize("op", ["ScatterND", "ScatterElements"])
@pytest.mark.parametrize(
    ("opset", "reduction", "message"),
    [
        (13, "add", "reduction 'add': {op} has no reduction attribute before opset 16"),
        (15, "none", None),
        (16, "max", "reduction 'max' is not defined at opset 16 (one of none, add, mul)"),
        (17, "min", "reduction 'min' is not defined at opset 17"),
        (18, "sub", "reduction 'sub' is not defined at opset 18 (one of none, add, mul, max, min)"),
        (21, "mean", "reduction 'mean' is not defined at opset 21"),
    ],
)
def test_reductions_an_opset_does_not_define(
    op: str, opset: int, reduction: str, message: str | None
) -> None:
    inputs = ND_INPUTS if op == "ScatterND" else EL_INPUTS
    m = model(op, inputs, opset=opset, reduction=reduction)
    if message is None:  # "none" is the default, harmless where the attribute is unknown
        dynshape.onnx.load(m)
        return
    assert f"{op} 'the_{op.lower()}': " + message.format(op=op) in import_error(m)


@pytest.mark.parametrize(
    ("inputs", "message"),
    [
        (
            [("x", FLOAT, ["n", 4]), ("i", INT64, []), ("u", FLOAT, [4])],
            "indices must have rank 1 or more",
        ),
        (
            [("x", FLOAT, ["n", 4]), ("i", INT64, ["k", 3]), ("u", FLOAT, ["k"])],
            "index tuples of length 3 (the last dim of indices) for data of rank 2",
        ),
        (
            [("x", FLOAT, ["n", 4]), ("i", INT64, ["k", 1]), ("u", FLOAT, ["k", 5])],
            "updates have shape [k, 5], but indices.shape[:-1] + data.shape[1:] is [k, 4]",
        ),
        (
            [("x", FLOAT, ["n", 4]), ("i", INT64, ["k", 2]), ("u", FLOAT, ["k", 4])],
            "updates have shape [k, 4], but indices.shape[:-1] + data.shape[2:] is [k]",
        ),
        (
            [("x", FLOAT, ["n", 4]), ("i", INT64, ["k", "q"]), ("u", FLOAT, ["k", 4, 2, 1])],
            "updates of rank 4 do not fit indices [k, q] and data of rank 2",
        ),
        (
            [("x", FLOAT, ["n", 4]), ("i", FLOAT, ["k", 1]), ("u", FLOAT, ["k", 4])],
            "indices must be int32 or int64, got float32",
        ),
        (
            [("x", FLOAT, ["n", 4]), ("i", INT64, ["k", 1]), ("u", INT64, ["k", 4])],
            "updates are int64 but the data float32",
        ),
    ],
)
def test_scatter_nd_refuses(inputs: list[Any], message: str) -> None:
    assert "ScatterND 'the_scatternd': " + message in import_error(model("ScatterND", inputs))


@pytest.mark.parametrize(
    ("inputs", "attrs", "message"),
    [
        (
            [("x", FLOAT, ["n", 4]), ("i", INT64, ["k"]), ("u", FLOAT, ["k"])],
            {},
            "indices have rank 1, the data rank 2",
        ),
        (
            [("x", FLOAT, ["n", 4]), ("i", INT64, ["k", 4]), ("u", FLOAT, ["k", 3])],
            {},
            "updates have shape [k, 3], but the shape of indices is [k, 4]",
        ),
        (
            [("x", FLOAT, ["n", 4]), ("i", INT64, ["k", 5]), ("u", FLOAT, ["k", 5])],
            {},
            "indices [k, 5] are longer than the data [n, 4] along axis 1 (only the axis 0",
        ),
        (
            [("x", FLOAT, ["n", 4]), ("i", INT64, ["k", 4]), ("u", FLOAT, ["k", 4])],
            {"axis": 2},
            "axis 2 is out of range for rank 2",
        ),
        (
            [("x", FLOAT, []), ("i", INT64, []), ("u", FLOAT, [])],
            {},
            "ScatterElements into a scalar",
        ),
    ],
)
def test_scatter_elements_refuses(inputs: list[Any], attrs: dict[str, Any], message: str) -> None:
    m = model("ScatterElements", inputs, **attrs)
    assert "ScatterElements 'the_scatterelements': " + message in import_error(m)


def test_shapes_that_disagree_only_at_run_time_are_checked_there() -> None:
    """``updates`` of ``(j, 4)`` for indices of ``(k, 1)``: the import cannot tell, the
    compiled program checks ``j == k`` when it runs."""
    inputs = [("x", FLOAT, ["n", 4]), ("i", INT64, ["k", 1]), ("u", FLOAT, ["j", 4])]
    m = model("ScatterND", inputs)
    np.testing.assert_array_equal(
        run(m, np.zeros((2, 4), np.float32), np.array([[1]]), np.ones((1, 4), np.float32)),
        [[0, 0, 0, 0], [1, 1, 1, 1]],
    )
    with pytest.raises(dynshape.DynShapeError, match=r"updates.shape\[0\] == indices.shape\[0\]"):
        run(m, np.zeros((2, 4), np.float32), np.array([[1]]), np.ones((2, 4), np.float32))


def test_a_symbolic_tuple_length_is_told_by_the_ranks() -> None:
    """Indices ``(k, q)``: the ranks give ``q = 1``, checked when the program runs."""
    inputs = [("x", FLOAT, ["n", 4]), ("i", INT64, ["k", "q"]), ("u", FLOAT, ["k", 4])]
    m = model("ScatterND", inputs)
    compare(
        m,
        [rand(3, 4), np.array([[2], [0]]), rand(2, 4)],
        [rand(1, 4), np.zeros((0, 1), np.int64), rand(0, 4)],
    )
    with pytest.raises(dynshape.DynShapeError, match=r"indices.shape\[-1\] == 1"):
        run(m, rand(3, 4), np.array([[2, 1]]), rand(1, 4))


def test_folding_refuses_an_index_out_of_range() -> None:
    nodes = [
        helper.make_node("Shape", ["x"], ["shape"]),
        helper.make_node("ScatterND", ["shape", "where", "new"], ["y"], name="edit"),
    ]
    weights = {"where": np.array([[2]], np.int64), "new": np.array([1], np.int64)}
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", FLOAT, ["n", "m"])],
        [helper.make_empty_tensor_value_info("y")],
        [numpy_helper.from_array(w, k) for k, w in weights.items()],
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    assert "ScatterND 'edit': index 2 is out of range for a dim of 2" in import_error(m)
