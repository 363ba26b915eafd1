"""The reduction converters of ``dynshape.onnx`` against onnxruntime: one-node models with
symbolic input dims, axes as an input (opset 18) or an attribute (opset 17), each compiled once
and run at several sizes."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import dynshape  # noqa: E402
import dynshape.onnx  # noqa: E402
import ir  # noqa: E402
from dynshape.passes.infer_types import infer_types  # noqa: E402

RNG = np.random.default_rng(20240616)
DIMS = ["B", "S", 5]
SIZES = [(1, 7, 5), (3, 9, 5), (2, 1, 5)]
REDUCTIONS = [
    "ReduceSum",
    "ReduceMean",
    "ReduceMax",
    "ReduceMin",
    "ReduceProd",
    "ReduceL1",
    "ReduceL2",
    "ReduceSumSquare",
    "ReduceLogSum",
    "ReduceLogSumExp",
]


def model(
    op: str,
    axes: list[int] | None = None,
    opset: int = 18,
    dims: list[Any] = DIMS,
    elem: int = TensorProto.FLOAT,
    **attrs: Any,
) -> Any:
    """A one-node model of ``op`` over ``x: dims``; ``axes`` an int64 initializer (the node's
    input 1) where the opset takes axes as an input, else the ``axes`` attribute."""
    axes_input = opset >= (13 if op == "ReduceSum" else 18) and op not in ("ArgMax", "ArgMin")
    inits, names = [], ["x"]
    if axes is not None:
        if axes_input:
            inits.append(numpy_helper.from_array(np.array(axes, np.int64), "axes"))
            names.append("axes")
        else:
            attrs["axes"] = axes
    node = helper.make_node(op, names, ["y"], name=f"the_{op.lower()}", **attrs)
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", elem, dims)],
        [helper.make_empty_tensor_value_info("y")],
        inits,
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def compare(m: Any, arrays: list[np.ndarray], rtol: float = 1e-4, atol: float = 1e-5) -> None:
    """Import and compile ``m`` once; on each array the VM must give onnxruntime's result."""
    machine = dynshape.VirtualMachine(dynshape.compile(dynshape.onnx.load(m)))
    session = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    for x in arrays:
        (expected,) = session.run(None, {"x": x})
        got = np.asarray(machine.run(x))
        assert got.shape == expected.shape, (got.shape, expected.shape)
        assert got.dtype == expected.dtype, (got.dtype, expected.dtype)
        np.testing.assert_allclose(got, expected, rtol=rtol, atol=atol)


def data(op: str, sizes: list[tuple[int, ...]] = SIZES) -> list[np.ndarray]:
    """Positive inputs for the logarithms, small ones for products."""
    out = []
    for s in sizes:
        x = RNG.standard_normal(s).astype(np.float32)
        if op == "ReduceLogSum":
            x = np.abs(x) + 0.1
        elif op == "ReduceProd":
            x = (x * 0.3 + 1).astype(np.float32)
        out.append(x)
    return out


@pytest.mark.parametrize("op", REDUCTIONS)
@pytest.mark.parametrize("axes", [[1], [-1], [0, 2], [-2, 0], None])
@pytest.mark.parametrize("keepdims", [0, 1])
def test_reduce_axes_input(op: str, axes: list[int] | None, keepdims: int) -> None:
    compare(model(op, axes, keepdims=keepdims), data(op))


@pytest.mark.parametrize("op", REDUCTIONS)
@pytest.mark.parametrize("axes", [[1], [-1, 0], None])
def test_reduce_axes_attribute(op: str, axes: list[int] | None) -> None:
    """Opset 17: axes are an attribute (an input for ReduceSum since opset 13)."""
    compare(model(op, axes, opset=17, keepdims=0), data(op))


@pytest.mark.parametrize("op", REDUCTIONS)
def test_noop_with_empty_axes(op: str) -> None:
    compare(model(op, [], noop_with_empty_axes=1), data(op))
    compare(model(op, None, noop_with_empty_axes=1), data(op))
    compare(model(op, [], noop_with_empty_axes=0, keepdims=0), data(op))


@pytest.mark.parametrize(
    ("op", "axes", "keepdims", "ty"),
    [
        ("ReduceMean", [-1], 1, "Tensor[(B, S, 1), float32]"),
        ("ReduceLogSumExp", [1], 0, "Tensor[(B, 5), float32]"),
        ("ReduceL2", [0, 1], 1, "Tensor[(1, 1, 5), float32]"),
    ],
)
def test_reduce_keeps_symbolic_dims(op: str, axes: list[int], keepdims: int, ty: str) -> None:
    program = dynshape.onnx.load(model(op, axes, keepdims=keepdims))
    text = ir.text.printer.module_to_text(infer_types(program))
    assert re.findall(r"ty=(Tensor\[[^\]]*\])", text)[-1] == ty


def test_reduce_int() -> None:
    x = [RNG.integers(-5, 5, s).astype(np.int64) for s in SIZES]
    compare(model("ReduceSum", [1], elem=TensorProto.INT64), x)
    compare(model("ReduceMax", [0, 1], elem=TensorProto.INT64, keepdims=0), x)
    compare(model("ReduceMean", [1], elem=TensorProto.INT64), x)  # truncated, as onnxruntime


def test_axes_from_data_is_an_error() -> None:
    node = helper.make_node("ReduceSum", ["x", "a"], ["y"], name="sum_it")
    graph = helper.make_graph(
        [node],
        "g",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, DIMS),
            helper.make_tensor_value_info("a", TensorProto.INT64, [1]),
        ],
        [helper.make_empty_tensor_value_info("y")],
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    with pytest.raises(dynshape.ModelImportError) as info:
        dynshape.onnx.load(m)
    assert "ReduceSum 'sum_it'" in str(info.value)
    assert "axes (input 1) depends on tensor data" in str(info.value)


@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("axis", [0, 1, -1, 2])
@pytest.mark.parametrize("keepdims", [0, 1])
@pytest.mark.parametrize("last", [0, 1])
def test_arg(op: str, axis: int, keepdims: int, last: int) -> None:
    # small integers as floats: ties, so that select_last_index matters
    x = [RNG.integers(0, 3, s).astype(np.float32) for s in SIZES]
    compare(model(op, axis=axis, keepdims=keepdims, select_last_index=last), x)


@settings(max_examples=15, deadline=None)
@given(
    op=st.sampled_from(REDUCTIONS),
    axes=st.lists(st.integers(-3, 2), min_size=1, max_size=3, unique_by=lambda a: a % 3),
    keepdims=st.integers(0, 1),
    b=st.integers(1, 4),
    s=st.integers(1, 9),
)
def test_reduce_any_axes(op: str, axes: list[int], keepdims: int, b: int, s: int) -> None:
    compare(model(op, axes, keepdims=keepdims), data(op, [(b, s, 5)]))


@pytest.mark.parametrize("keepdims", [0, 1])
def test_log_sum_exp_of_an_empty_axis_is_minus_infinity(keepdims: int) -> None:
    # log(sum(exp(nothing))) = log(0): the max that keeps the sum from overflowing has no value
    # over no elements, so the statically empty case is the constant
    graph = helper.make_graph(
        [helper.make_node("ReduceLogSumExp", ["x", "axes"], ["y"], keepdims=keepdims)],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 0, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.array([1], np.int64), "axes")],
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    vm = dynshape.VirtualMachine(dynshape.compile(dynshape.onnx.load(m)))
    out = vm.run(np.zeros((2, 0, 4), np.float32))
    assert out.shape == ((2, 1, 4) if keepdims else (2, 4))
    assert np.all(out == -np.inf)


@pytest.mark.parametrize(
    ("axes", "keepdims", "elem", "pooled"),
    [
        ([2, 3], 1, TensorProto.FLOAT, True),  # the dynamo exporter's adaptive pooling to 1x1
        ([-1, -2], 1, TensorProto.FLOAT, True),
        ([2, 3], 1, TensorProto.DOUBLE, True),
        ([2, 3], 1, TensorProto.FLOAT16, True),
        ([2, 3], 0, TensorProto.FLOAT, False),  # (N, C): stays a mean
        ([1, 2], 1, TensorProto.FLOAT, False),
        ([3], 1, TensorProto.FLOAT, False),
    ],
)
def test_spatial_mean_of_a_4d_tensor_is_global_average_pooling(
    axes: list[int], keepdims: int, elem: int, pooled: bool
) -> None:
    """``ReduceMean`` over H and W of an NCHW tensor, keeping them, imports as
    ``nn.global_avg_pool2d`` (its kernel's product beats a reduction of short rows); any other
    mean stays one. Both give onnxruntime's values, with symbolic batch and plane dims."""
    m = model("ReduceMean", axes, dims=["N", 6, "H", "W"], elem=elem, keepdims=keepdims)
    program = dynshape.onnx.load(m)
    text = ir.text.printer.module_to_text(infer_types(program))
    assert ("nn.global_avg_pool2d(" in text) == pooled
    assert ("mean(" in text) != pooled
    dtype = helper.tensor_dtype_to_np_dtype(elem)
    arrays = [RNG.standard_normal(s).astype(dtype) for s in [(1, 6, 3, 3), (2, 6, 5, 1)]]
    tol = 1e-2 if dtype == np.float16 else 1e-5
    compare(m, arrays, rtol=tol, atol=tol)
