"""Building small ONNX models in tests, and running them through dynshape (and onnxruntime)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import dynshape
import dynshape.onnx

ELEM = {
    "float32": TensorProto.FLOAT,
    "float64": TensorProto.DOUBLE,
    "int32": TensorProto.INT32,
    "int64": TensorProto.INT64,
    "bool": TensorProto.BOOL,
}


def model(
    nodes: Sequence[Any],
    inputs: Sequence[tuple[str, str, Sequence[Any] | None]],
    outputs: Sequence[str],
    initializers: dict[str, np.ndarray] | None = None,
    opset: int = 17,
) -> onnx.ModelProto:
    """A model of ``nodes``; inputs as ``(name, dtype, dims)`` (dims: ints, names, None)."""
    graph = helper.make_graph(
        list(nodes),
        "test",
        [helper.make_tensor_value_info(n, ELEM[t], d) for n, t, d in inputs],
        [helper.make_tensor_value_info(n, TensorProto.UNDEFINED, None) for n in outputs],
        [numpy_helper.from_array(a, name) for name, a in (initializers or {}).items()],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def run(m: onnx.ModelProto, *arrays: np.ndarray, **dims: Any) -> Any:
    """Import ``m``, compile it and run it on the VM."""
    program = dynshape.onnx.load(m, dims=dims or None)
    return dynshape.VirtualMachine(dynshape.compile(program)).run(*arrays)
