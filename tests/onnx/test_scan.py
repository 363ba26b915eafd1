"""ONNX ``Scan`` against onnxruntime: state variables and scan outputs, scan axes and
directions of inputs and outputs, symbolic scan lengths, a body reading the enclosing graph;
the backend cases that use ``Scan``; and the messages of scans refused."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from hypothesis import given, settings
from hypothesis import strategies as st
from model_builder import compare, import_error, run
from onnx import TensorProto, helper

from dynshape.onnx import conformance

FLOAT = TensorProto.FLOAT
RNG = np.random.default_rng(11)


def info(name: str, dims: Any = None) -> Any:
    return helper.make_tensor_value_info(name, FLOAT, dims)


def _cumulative(**attrs: Any) -> Any:
    """``s += x_t * w`` over the scan; scan outputs ``s`` and ``x_t - y_t`` (two scan inputs
    ``x``, ``y`` of shapes ``(b, t, d)``-like, scanned on the axes ``attrs`` say); ``w`` is
    read from the enclosing graph."""
    body = helper.make_graph(
        [
            helper.make_node("Mul", ["xt", "w"], ["xw"]),
            helper.make_node("Add", ["s", "xw"], ["s_out"]),
            helper.make_node("Identity", ["s_out"], ["scan0"]),
            helper.make_node("Sub", ["xt", "yt"], ["scan1"]),
        ],
        "body",
        [info("s"), info("xt"), info("yt")],
        [info("s_out"), info("scan0"), info("scan1")],
    )
    node = helper.make_node(
        "Scan", ["s0", "x", "y"], ["s", "z0", "z1"], body=body, num_scan_inputs=2, **attrs
    )
    graph = helper.make_graph(
        [node],
        "g",
        [info("s0", ["d"]), info("x", None), info("y", None), info("w", ["d"])],
        [helper.make_empty_tensor_value_info(o) for o in ("s", "z0", "z1")],
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def _with_input_dims(m: Any, x: list[Any], y: list[Any]) -> Any:
    """``m`` with the dims of inputs ``x`` and ``y`` set (names are symbolic dims)."""
    for value, dims in zip(m.graph.input[1:3], (x, y), strict=True):
        value.CopyFrom(info(value.name, dims))
    return m


def test_a_forward_scan_over_axis_0_with_symbolic_length() -> None:
    m = _with_input_dims(_cumulative(), ["t", "d"], ["t", "d"])
    feeds = []
    for t, d in [(5, 3), (1, 4), (7, 1)]:
        x, y = RNG.random((t, d), np.float32), RNG.random((t, d), np.float32)
        feeds.append([RNG.random(d, np.float32), x, y, RNG.random(d, np.float32)])
    program = compare(m, *feeds)
    # the scan outputs keep the scanned length: (t, d), not a loop's ``?``
    assert "Tensor[(t, d), float32]" in str(program)


@settings(max_examples=12, deadline=None)
@given(
    in_axes=st.tuples(st.integers(-2, 1), st.integers(-2, 1)),
    in_dirs=st.tuples(st.integers(0, 1), st.integers(0, 1)),
    out_axes=st.tuples(st.integers(-2, 1), st.integers(-2, 1)),
    out_dirs=st.tuples(st.integers(0, 1), st.integers(0, 1)),
    t=st.integers(1, 5),
    d=st.integers(1, 4),
)
def test_scan_axes_and_directions(
    in_axes: tuple[int, int],
    in_dirs: tuple[int, int],
    out_axes: tuple[int, int],
    out_dirs: tuple[int, int],
    t: int,
    d: int,
) -> None:
    m = _cumulative(
        scan_input_axes=list(in_axes),
        scan_input_directions=list(in_dirs),
        scan_output_axes=list(out_axes),
        scan_output_directions=list(out_dirs),
    )
    shapes = [(t, d) if a % 2 == 0 else (d, t) for a in in_axes]
    names = [["t", "d"] if a % 2 == 0 else ["d", "t"] for a in in_axes]
    m = _with_input_dims(m, *names)
    x, y = (RNG.random(s, np.float32) for s in shapes)
    compare(m, [RNG.random(d, np.float32), x, y, RNG.random(d, np.float32)])


def test_a_scan_with_no_state_and_a_rank_3_input() -> None:
    body = helper.make_graph(
        [helper.make_node("ReduceSum", ["xt"], ["r"], keepdims=0)],
        "body",
        [info("xt")],
        [info("r")],
    )
    node = helper.make_node("Scan", ["x"], ["z"], body=body, num_scan_inputs=1, scan_input_axes=[1])
    graph = helper.make_graph(
        [node], "g", [info("x", ["b", "t", 4])], [helper.make_empty_tensor_value_info("z")]
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    compare(m, [RNG.random((2, 3, 4), np.float32)], [RNG.random((1, 6, 4), np.float32)])


def test_a_scan_of_length_zero_keeps_the_state() -> None:
    """onnxruntime refuses a scan of length 0; the spec's loop runs no step: the state comes
    back as it was and each scan output has 0 rows on its axis."""
    m = _with_input_dims(_cumulative(scan_output_axes=[1, 0]), ["t", "d"], ["t", "d"])
    s0 = np.arange(3, dtype=np.float32)
    empty = np.zeros((0, 3), np.float32)
    state, z0, z1 = run(m, s0, empty, empty, s0)
    np.testing.assert_array_equal(state, s0)
    assert (z0.shape, z1.shape) == ((3, 0), (0, 3))


def test_scans_refused() -> None:
    bad_dir = _with_input_dims(_cumulative(scan_input_directions=[0, 2]), [3, 2], [3, 2])
    assert "a scan direction must be 0 (forward) or 1 (reverse)" in import_error(bad_dir)
    bad_axes = _with_input_dims(_cumulative(scan_input_axes=[0]), [3, 2], [3, 2])
    assert "scan_input_axes has 1 entries, expected 2" in import_error(bad_axes)
    unequal = _with_input_dims(_cumulative(), ["t", 2], ["u", 2])
    assert "unsupported: scan inputs of lengths [t, u]" in import_error(unequal)
    out_of_range = _with_input_dims(_cumulative(scan_input_axes=[2, 0]), [3, 2], [3, 2])
    assert "a scan input axis 2 is out of range for rank 2" in import_error(out_of_range)


@pytest.mark.parametrize(
    "name",
    ["test_linear_attention_gated_delta_gqa_expanded", "test_linear_attention_fp16_expanded"],
)
def test_backend_cases_that_use_scan(name: str) -> None:
    entry = next(e for e in conformance.index() if e.name == name)
    outcome = conformance.run_case(conformance.case(entry))
    assert outcome.status == "passed", outcome.detail
