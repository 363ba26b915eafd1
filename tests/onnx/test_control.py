"""ONNX ``If``: branches that read the enclosing graph's values, a condition from data (an
``if`` in the program) or known at import (one branch converted), against onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from model_builder import compare, import_error
from onnx import TensorProto, helper, numpy_helper

import dynshape
import dynshape.onnx


def _branch(name: str, op: str, out: str) -> object:
    """A subgraph computing ``op(x, x)`` of the enclosing graph's ``x``."""
    return helper.make_graph(
        [helper.make_node(op, ["x", "x"], [out])],
        name,
        [],
        [helper.make_tensor_value_info(out, TensorProto.FLOAT, None)],
    )


def _model(cond_nodes: list[object], inits: list[object]) -> object:
    nodes = [
        *cond_nodes,
        helper.make_node(
            "If",
            ["cond"],
            ["y"],
            then_branch=_branch("then", "Add", "t"),
            else_branch=_branch("else", "Mul", "e"),
            name="choice",
        ),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", "m"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_a_condition_from_data_is_an_if_with_both_branches() -> None:
    m = _model(
        [
            helper.make_node("ReduceSum", ["x"], ["total"], keepdims=0),
            helper.make_node("Greater", ["total", "zero"], ["cond"]),
        ],
        [numpy_helper.from_array(np.array(0, np.float32), "zero")],
    )
    program = compare(
        m,
        [np.ones((2, 3), np.float32)],
        [-np.ones((4, 1), np.float32)],
        [np.zeros((0, 2), np.float32)],
    )
    text = str(program)
    assert "if (" in text and "add(%x, %x)" in text and "multiply(%x, %x)" in text


def test_a_condition_known_at_import_converts_one_branch() -> None:
    m = _model([], [numpy_helper.from_array(np.array([True]), "cond")])
    program = compare(m, [np.full((2, 2), 3, np.float32)])
    text = str(program)
    assert "if (" not in text and "add(%x, %x)" in text and "multiply" not in text


def test_branches_whose_results_differ_are_an_error_naming_the_node() -> None:
    then_branch = _branch("then", "Add", "t")
    else_branch = helper.make_graph(
        [helper.make_node("Cast", ["x"], ["e"], to=TensorProto.INT64)],
        "else",
        [],
        [helper.make_tensor_value_info("e", TensorProto.INT64, None)],
    )
    graph = helper.make_graph(
        [
            helper.make_node("ReduceSum", ["x"], ["total"], keepdims=0),
            helper.make_node("Greater", ["total", "zero"], ["cond"]),
            helper.make_node(
                "If",
                ["cond"],
                ["y"],
                then_branch=then_branch,
                else_branch=else_branch,
                name="choice",
            ),
        ],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.array(0, np.float32), "zero")],
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    assert "node If 'choice'" in import_error(m)


def test_an_unsupported_op_inside_a_branch_is_listed_up_front() -> None:
    branch = helper.make_graph(
        [helper.make_node("Frobnicate", ["x"], ["t"], name="inner")],
        "then",
        [],
        [helper.make_tensor_value_info("t", TensorProto.FLOAT, None)],
    )
    graph = helper.make_graph(
        [helper.make_node("If", ["cond"], ["y"], then_branch=branch, else_branch=branch)],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.array([True]), "cond")],
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(
        dynshape.ModelImportError, match=r"unsupported op Frobnicate \(2 node\(s\): inner, inner\)"
    ):
        dynshape.onnx.load(m)
