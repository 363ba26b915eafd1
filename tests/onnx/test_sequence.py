"""ONNX sequences and optionals against onnxruntime: the sequence ops on sequences known at
import (``SplitToSequence``, ``SequenceAt``/``Insert``/``Erase``/``Length``,
``ConcatFromSequence``, ``SequenceMap``), sequence and optional graph inputs and outputs, a
``Loop`` carrying a sequence (unrolled), and the messages of what is refused."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from hypothesis import given, settings
from hypothesis import strategies as st
from model_builder import import_error
from onnx import TensorProto, helper

import dynshape
import dynshape.onnx
from dynshape.onnx.sequence import regroup

FLOAT, INT64, BOOL = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL
RNG = np.random.default_rng(5)


def tensor(name: str, dims: Any = None, elem: int = FLOAT) -> Any:
    return helper.make_tensor_value_info(name, elem, dims)


def seq(name: str, dims: Any = None, elem: int = FLOAT) -> Any:
    return helper.make_value_info(
        name, helper.make_sequence_type_proto(helper.make_tensor_type_proto(elem, dims))
    )


def optional(name: str, dims: Any = None, elem: int = FLOAT) -> Any:
    inner = helper.make_tensor_type_proto(elem, dims)
    return helper.make_value_info(name, helper.make_optional_type_proto(inner))


def make(nodes: list[Any], inputs: list[Any], outputs: list[Any], opset: int = 18) -> Any:
    graph = helper.make_graph(nodes, "g", inputs, outputs)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def compare(m: Any, feeds: list[list[Any]], **given: Any) -> Any:
    """Import ``m`` once (``given``: ``sequences``, ``empty``); at each list of inputs (a list
    for a sequence, None for an empty optional), the VM's outputs, regrouped, must equal
    onnxruntime's. Returns what ``import_model`` gave."""
    import onnxruntime as ort

    imported = dynshape.onnx.import_model(m, **given)
    machine = dynshape.VirtualMachine(dynshape.compile(imported.program))
    session = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    for arrays in feeds:
        expected = session.run(None, dict(zip(names, arrays, strict=True)))
        flat = [a for value in arrays if value is not None for a in _flat(value)]
        got = machine.run(*flat)
        got = regroup(imported.outputs, list(got) if isinstance(got, tuple) else [got])
        assert len(got) == len(expected)
        for g, e in zip(got, expected, strict=True):
            if isinstance(e, list):
                assert isinstance(g, list) and len(g) == len(e)
                for a, b in zip(g, e, strict=True):
                    _same(a, b)
            else:
                _same(g, e)
    return imported


def _flat(value: Any) -> list[Any]:
    return list(value) if isinstance(value, list) else [value]


def _same(got: Any, want: Any) -> None:
    got = np.asarray(got)
    assert got.shape == want.shape, (got.shape, want.shape)
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def _split_model(split: Any, axis: int, keepdims: int, position: int) -> Any:
    """``SplitToSequence`` of ``x: (6, c)`` or ``(r, 6)`` on the 6, then every sequence op on
    the parts (``stacked`` when the parts have one shape)."""
    inits = [] if split is None else [helper.make_tensor("split", INT64, np.shape(split), split)]
    rank = 2 if keepdims or split is not None else 1
    equal = split in (None, 1, 2, [2, 2, 2])
    nodes = [
        helper.make_node(
            "SplitToSequence",
            ["x"] + ([] if split is None else ["split"]),
            ["parts"],
            axis=axis,
            keepdims=keepdims,
        ),
        helper.make_node(
            "Constant", [], ["p"], value=helper.make_tensor("p", INT64, [], [position])
        ),
        helper.make_node("SequenceAt", ["parts", "p"], ["at"]),
        helper.make_node("SequenceErase", ["parts", "p"], ["erased"]),
        helper.make_node(  # a position valid in the shorter sequence
            "Constant",
            [],
            ["q"],
            value=helper.make_tensor(
                "q", INT64, [], [min(position + 1, 0) if position < 0 else position]
            ),
        ),
        helper.make_node("SequenceInsert", ["erased", "at", "q"], ["back"]),
        helper.make_node("SequenceLength", ["back"], ["n"]),
        helper.make_node("ConcatFromSequence", ["back"], ["joined"], axis=axis if rank == 2 else 0),
        helper.make_node("ConcatFromSequence", ["back"], ["stacked"], axis=-1, new_axis=1),
    ]
    outputs = [seq("parts"), tensor("at"), tensor("n", None, INT64), tensor("joined")]
    graph = helper.make_graph(
        nodes if equal else nodes[:-1],
        "g",
        [tensor("x", ["r", 6] if axis % 2 else [6, "c"])],
        outputs + ([tensor("stacked")] if equal else []),
        inits,
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    m.ir_version = 8
    return m


@settings(max_examples=15, deadline=None)
@given(
    split=st.sampled_from([None, 1, 2, 4, [1, 5], [3, 0, 3], [2, 2, 2]]),
    axis=st.sampled_from([0, 1, -1, -2]),
    keepdims=st.integers(0, 1),
    position=st.integers(-2, 1),
    other=st.integers(1, 4),
)
def test_split_to_sequence_and_the_sequence_ops(
    split: Any, axis: int, keepdims: int, position: int, other: int
) -> None:
    if split is not None:
        # ONNX ignores keepdims when split is given; onnxruntime still drops the axis of a
        # scalar split 1, so only the case both agree on is compared
        keepdims = 1
    m = _split_model(split, axis, keepdims, position)
    shape = (other, 6) if axis % 2 else (6, other)
    compare(m, [[RNG.random(shape, np.float32)]])


def test_sequence_inputs_and_sequence_map() -> None:
    """A sequence input of 3 and one of 0: the elements' named dims are their own (``N_k``)."""
    body = helper.make_graph(
        [helper.make_node("Add", ["a", "b"], ["s"]), helper.make_node("Shape", ["a"], ["sh"])],
        "body",
        [tensor("a", ["N"]), tensor("b", ["N"])],
        [tensor("s", ["N"]), tensor("sh", [1], INT64)],
    )
    m = make(
        [
            helper.make_node("SequenceMap", ["xs", "t"], ["ys", "shapes"], body=body),
            helper.make_node("Neg", ["t"], ["t_out"]),  # a result when the sequences are empty
        ],
        [seq("xs", ["N"]), tensor("t", [1])],
        [seq("ys", ["N"]), seq("shapes", [1], INT64), tensor("t_out", [1])],
    )
    imported = compare(
        m,
        [[[RNG.random(n, np.float32) for n in (4, 1, 7)], RNG.random(1, np.float32)]],
        sequences={"xs": 3},
    )
    assert imported.program.inputs == ("xs.0", "xs.1", "xs.2", "t")
    assert "Tensor[(N_1,), float32]" in str(imported.program)
    compare(m, [[[], RNG.random(1, np.float32)]], sequences={"xs": 0})


def test_sequence_elements_declared_without_a_shape_take_the_given_ranks() -> None:
    m = make(
        [
            helper.make_node("SequenceInsert", ["xs", "t"], ["ys"]),
            helper.make_node("SequenceLength", ["ys"], ["n"]),
        ],
        [seq("xs"), tensor("t", [2, "k"])],
        [seq("ys"), tensor("n", [], INT64)],
    )
    elements = [RNG.random((3, 1), np.float32), RNG.random((1, 4), np.float32)]
    imported = compare(m, [[elements, RNG.random((2, 5), np.float32)]], sequences={"xs": [2, 2]})
    assert "Tensor[(xs_d0_1, xs_d1_1), float32]" in str(imported.program)
    with pytest.raises(dynshape.ModelImportError, match="element 0 given rank 1, declared 2"):
        dynshape.onnx.load(
            make(m.graph.node, [seq("xs", [2, 2]), tensor("t", [2, 2])], []), sequences={"xs": [1]}
        )


def test_optional_inputs_present_and_empty() -> None:
    m = make(
        [
            helper.make_node("OptionalHasElement", ["o"], ["has"]),
            helper.make_node("Optional", ["x"], ["wrapped"]),
            helper.make_node("OptionalGetElement", ["wrapped"], ["same"]),
        ],
        [optional("o", [3]), tensor("x", ["n"])],
        [tensor("has", [], BOOL), tensor("same", ["n"])],
    )
    x = RNG.random(5, np.float32)
    compare(m, [[RNG.random(3, np.float32), x]])
    compare(m, [[None, x]], empty={"o"})


def _growing_loop(trip: str, cond: str) -> Any:
    """A Loop appending ``x[:i + 1]`` to a carried sequence on each iteration."""
    body = helper.make_graph(
        [
            helper.make_node("Identity", ["c"], ["c_out"]),
            helper.make_node(
                "Constant", [], ["one"], value=helper.make_tensor("o", INT64, [1], [1])
            ),
            helper.make_node(
                "Constant", [], ["zero"], value=helper.make_tensor("z", INT64, [1], [0])
            ),
            helper.make_node("Add", ["i", "one"], ["end"]),
            helper.make_node("Slice", ["x", "zero", "end"], ["part"]),
            helper.make_node("SequenceInsert", ["s", "part"], ["s_out"]),
            helper.make_node("ReduceSum", ["part"], ["total"], keepdims=0),
        ],
        "body",
        [tensor("i", [], INT64), tensor("c", [], BOOL), seq("s")],
        [tensor("c_out", [], BOOL), seq("s_out"), tensor("total", [])],
    )
    nodes = [
        helper.make_node("Constant", [], ["M"], value=helper.make_tensor("m", INT64, [], [4])),
        helper.make_node("Constant", [], ["go"], value=helper.make_tensor("g", BOOL, [], [True])),
        helper.make_node("SequenceEmpty", [], ["empty"], dtype=FLOAT),
        helper.make_node("Loop", [trip, cond, "empty"], ["out", "totals"], body=body),
    ]
    inputs = [tensor("x", ["n"])] + [
        tensor(name, [], t) for name, t in (("M_in", INT64),) if trip == name
    ]
    return make(nodes, inputs, [seq("out"), tensor("totals")])


def test_a_loop_carrying_a_sequence_is_unrolled() -> None:
    compare(_growing_loop("M", "go"), [[RNG.random(6, np.float32)], [RNG.random(4, np.float32)]])


def test_what_is_refused() -> None:
    assert "a Loop carrying a sequence or optional with a trip count computed from data" in (
        import_error(_growing_loop("M_in", "go"))
    )
    no_length = make(
        [helper.make_node("SequenceLength", ["xs"], ["n"])],
        [seq("xs", [2])],
        [tensor("n", [], INT64)],
    )
    assert "input 'xs' is a sequence: unsupported without its length" in import_error(no_length)
    with pytest.raises(dynshape.ModelImportError, match="its elements have no shape"):
        dynshape.onnx.load(make(no_length.graph.node, [seq("xs")], []), sequences={"xs": 1})
    at_data = make(
        [
            helper.make_node("SplitToSequence", ["x"], ["s"]),
            helper.make_node("SequenceAt", ["s", "p"], ["y"]),
        ],
        [tensor("x", [3, 2]), tensor("p", [], INT64)],
        [tensor("y")],
    )
    assert "unsupported: a sequence position computed from data" in import_error(at_data)
    symbolic = make(
        [helper.make_node("SplitToSequence", ["x"], ["s"])], [tensor("x", ["n"])], [seq("s")]
    )
    assert "unsupported: a split of a symbolic dim n" in import_error(symbolic)
    branch = helper.make_graph(
        [helper.make_node("SequenceConstruct", ["x"], ["s"])], "b", [], [seq("s")]
    )
    if_data = make(
        [helper.make_node("If", ["c"], ["s"], then_branch=branch, else_branch=branch)],
        [tensor("c", [], BOOL), tensor("x", [2])],
        [seq("s")],
    )
    assert "an If on a condition computed from data whose branches return sequences" in (
        import_error(if_data)
    )
    out_of_range = make(
        [
            helper.make_node("SequenceConstruct", ["x"], ["s"]),
            helper.make_node("Constant", [], ["p"], value=helper.make_tensor("p", INT64, [], [1])),
            helper.make_node("SequenceAt", ["s", "p"], ["y"]),
        ],
        [tensor("x", [2])],
        [tensor("y")],
    )
    assert "position 1 is out of range for a sequence of 1" in import_error(out_of_range)
    get_empty = make(
        [helper.make_node("OptionalGetElement", ["o"], ["y"])], [optional("o", [2])], [tensor("y")]
    )
    with pytest.raises(dynshape.ModelImportError, match="OptionalGetElement of an empty optional"):
        dynshape.onnx.load(get_empty, empty={"o"})


def test_a_split_of_a_dim_of_zero_is_an_empty_sequence() -> None:
    m = make(
        [
            helper.make_node("SplitToSequence", ["x"], ["s"], axis=1),
            helper.make_node("SequenceLength", ["s"], ["n"]),
        ],
        [tensor("x", [2, 0])],
        [tensor("n", [], INT64)],
    )
    compare(m, [[np.zeros((2, 0), np.float32)]])
