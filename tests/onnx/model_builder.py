"""Building small ONNX models in tests, and running them through dynshape (and onnxruntime)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import dynshape
import dynshape.onnx
from dynshape.onnx.model import DTYPES

#: IR dtype -> ONNX element type: the importer's own table, inverted.
ELEM = {name: elem for elem, name in DTYPES.items()}


def model(
    nodes: Sequence[Any],
    inputs: Sequence[tuple[str, str, Sequence[Any] | None]],
    outputs: Sequence[str],
    initializers: dict[str, np.ndarray] | None = None,
    opset: int = 17,
    output_dtypes: Sequence[str] | None = None,
) -> onnx.ModelProto:
    """A model of ``nodes``; inputs as ``(name, dtype, dims)`` (dims: ints, names, None);
    outputs untyped unless ``output_dtypes`` are given (onnxruntime needs them from IR
    version 11, opset 23, on)."""
    elems = (
        [ELEM[t] for t in output_dtypes]
        if output_dtypes
        else [TensorProto.UNDEFINED] * len(outputs)
    )
    graph = helper.make_graph(
        list(nodes),
        "test",
        [helper.make_tensor_value_info(n, ELEM[t], d) for n, t, d in inputs],
        [helper.make_tensor_value_info(n, e, None) for n, e in zip(outputs, elems, strict=True)],
        [numpy_helper.from_array(a, name) for name, a in (initializers or {}).items()],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def run(m: onnx.ModelProto, *arrays: np.ndarray, **dims: Any) -> Any:
    """Import ``m``, compile it and run it on the VM."""
    program = dynshape.onnx.load(m, dims=dims or None)
    return dynshape.VirtualMachine(dynshape.compile(program)).run(*arrays)


def compare(m: Any, *feeds: list[np.ndarray], rtol: float = 1e-4, atol: float = 1e-5) -> Any:
    """Import and compile ``m`` once; at each list of inputs, the VM's results must equal
    onnxruntime's (shape, dtype, values). Returns the imported program."""
    import onnxruntime as ort

    program = dynshape.onnx.load(m)
    machine = dynshape.VirtualMachine(dynshape.compile(program))
    session = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    for arrays in feeds:
        expected = session.run(None, dict(zip(names, arrays, strict=True)))
        got = machine.run(*arrays)
        got = list(got) if isinstance(got, (list, tuple)) else [got]
        assert len(got) == len(expected)
        for g, e in zip(got, expected, strict=True):
            g = np.asarray(g)
            assert g.shape == e.shape, (g.shape, e.shape)
            assert g.dtype == e.dtype, (g.dtype, e.dtype)
            np.testing.assert_allclose(g, e, rtol=rtol, atol=atol)
    return program


def import_error(m: Any) -> str:
    """The message of the ``ModelImportError`` that importing ``m`` raises."""
    import pytest

    with pytest.raises(dynshape.ModelImportError) as info:
        dynshape.onnx.load(m)
    return str(info.value)


def typed_model(
    nodes: Sequence[Any],
    inputs: Sequence[tuple[Any, ...]],
    outputs: Sequence[tuple[Any, ...]],
    initializers: dict[str, Any] | None = None,
) -> onnx.ModelProto:
    """A model whose inputs and outputs are ``make_tensor_value_info`` arguments ``(name,
    elem_type, dims)`` (typed outputs: onnxruntime refuses untyped ones in some models)."""
    graph = helper.make_graph(
        list(nodes),
        "test",
        [helper.make_tensor_value_info(*i) for i in inputs],
        [helper.make_tensor_value_info(*o) for o in outputs],
        [numpy_helper.from_array(np.asarray(a), n) for n, a in (initializers or {}).items()],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
