"""``InferenceSession``: an ONNX model compiled once and run the way onnxruntime users run it.

    sess = dynshape.InferenceSession("model.onnx", dims={"batch": (1, 64)})
    name = sess.get_inputs()[0].name
    logits, = sess.run(["logits"], {name: x})

The calls, their arguments and the objects they return are onnxruntime's (``run(output_names,
input_feed)``, ``get_inputs()``, ``get_outputs()``, ``get_modelmeta()``, ``get_providers()``);
what differs is what dynshape is: the model is imported with its dims symbolic and compiled
once (``dynshape.onnx.load`` + ``dynshape.compile``), so the session runs every shape the model
allows without re-planning, and a symbolic dim shows as its name or formula (``"batch"``,
``"past_seq + seq"``) where onnxruntime shows the ``dim_param`` or None. A session may be
shared by threads (its ``VirtualMachine`` is). It needs the ``onnx`` extra.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from vm import TensorSpec, VirtualMachine
from vm.batch_split import BatchSplit

from .batch_processes import runner, split_plan
from .errors import SessionError
from .pipeline import CompileReport, as_module, compile, infer_types

#: onnxruntime's spelling of each element type (``NodeArg.type``).
ORT_TYPES = {
    "float32": "tensor(float)",
    "float64": "tensor(double)",
    "float16": "tensor(float16)",
    "int8": "tensor(int8)",
    "int16": "tensor(int16)",
    "int32": "tensor(int32)",
    "int64": "tensor(int64)",
    "uint8": "tensor(uint8)",
    "uint16": "tensor(uint16)",
    "uint32": "tensor(uint32)",
    "uint64": "tensor(uint64)",
    "bool": "tensor(bool)",
    # the extended dtypes: ONNX's element type names in lower case (onnxruntime 1.32 reports
    # the bfloat16 and float8 ones so; it runs no model with the others on the CPU)
    "bfloat16": "tensor(bfloat16)",
    "float8_e4m3fn": "tensor(float8e4m3fn)",
    "float8_e4m3fnuz": "tensor(float8e4m3fnuz)",
    "float8_e5m2": "tensor(float8e5m2)",
    "float8_e5m2fnuz": "tensor(float8e5m2fnuz)",
    "float8_e8m0fnu": "tensor(float8e8m0)",
    "float4_e2m1fn": "tensor(float4e2m1)",
    "int4": "tensor(int4)",
    "uint4": "tensor(uint4)",
    "int2": "tensor(int2)",
    "uint2": "tensor(uint2)",
}

#: The one execution provider: dynshape's kernels are numpy on the CPU.
PROVIDERS = ("CPUExecutionProvider",)


@dataclass(frozen=True)
class NodeArg:
    """An input or output of the model, as onnxruntime's ``NodeArg`` describes it."""

    name: str
    """Its name in the model."""
    shape: list[int | str | None]
    """One entry per axis: an int, the text of a symbolic dim (``"batch"``, ``"2*n"``), or
    None where nothing is known of it."""
    type: str
    """The element type in onnxruntime's spelling (``"tensor(float)"``)."""


@dataclass(frozen=True)
class ModelMetadata:
    """The model's metadata, as onnxruntime's ``ModelMetadata``."""

    producer_name: str = ""
    graph_name: str = ""
    graph_description: str = ""
    domain: str = ""
    description: str = ""
    version: int = 0
    custom_metadata_map: dict[str, str] = field(default_factory=dict)


class InferenceSession:
    """An ONNX model (a path, its bytes or an ``onnx.ModelProto``) imported and compiled once.

    ``dims`` narrows or renames the model's input dims as ``dynshape.onnx.load`` takes them;
    ``providers`` is accepted for onnxruntime's code (only ``"CPUExecutionProvider"``);
    ``external_data_dir`` is where a model given as bytes or a proto keeps its external weights
    (they are never read from anywhere else);
    ``batch_processes``: 1 (the default) runs every call in this process; 2 runs the second
    half of a large enough batch in a worker process, on the other core (onnxruntime's
    ``intra_op_num_threads`` is the nearest thing): only for a model whose batch rows the
    compiler proves independent, and only from a size where it pays (``row_split`` says
    whether and along what; design/vm.md, "A second process for the batch"). The answers are
    the unsplit run's to the kernels' rounding, and a given set of input shapes always takes
    the same path.
    Call ``close()`` (or use the session as a context manager) to stop the worker at once;
    it also stops when the session is collected.
    ``compile_options`` go to ``dynshape.compile`` (``time_budget=``, ``plan_memory=``).
    """

    def __init__(
        self,
        path_or_bytes: Any,
        dims: Mapping[str, Any] | None = None,
        *,
        providers: Sequence[Any] | None = None,
        external_data_dir: str | os.PathLike[str] | None = None,
        batch_processes: int = 1,
        **compile_options: Any,
    ) -> None:
        from . import onnx as onnx_import  # the extra, only when a session is made
        from .onnx.model import read

        _check_providers(providers)
        if type(batch_processes) is not int or batch_processes not in (1, 2):
            raise SessionError(
                f"batch_processes must be 1 (this process only) or 2 (a worker process for "
                f"half of a large batch), got {batch_processes!r}"
            )
        proto = read(path_or_bytes, external_data_dir)
        program = onnx_import.load(proto, dims)
        self._meta = _metadata(proto)
        report = compile_options.pop("report", None) or CompileReport()
        self._vm = VirtualMachine(compile(program, report=report, **compile_options))
        self._split: BatchSplit | None = None
        self._split_note = "not split: batch_processes=1"
        if batch_processes == 2:
            typed = report.typed or infer_types(as_module(program))  # (start= skips "types")
            self._split, self._split_note = runner(split_plan(typed), self._vm)
        self._inputs = [_node_arg(p.name, p.type) for p in self._vm.inputs]
        self._outputs = [_node_arg(p.name, p.type) for p in self._vm.named_outputs]
        self._index = {arg.name: i for i, arg in enumerate(self._outputs)}

    @property
    def row_split(self) -> str:
        """Whether calls may be split across processes, and along what or why not."""
        return self._split_note

    def close(self) -> None:
        """Stop the worker process of ``batch_processes=2`` (the session still runs calls,
        all in this process, and starts no other worker)."""
        if self._split is not None:
            self._split.close()
            self._split = None
            self._split_note = "not split: the session was closed"

    def __enter__(self) -> InferenceSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def vm(self) -> VirtualMachine:
        """The virtual machine that runs the compiled model (its ``exe`` is the executable)."""
        return self._vm

    def get_inputs(self) -> list[NodeArg]:
        """The model's inputs, in order."""
        return list(self._inputs)

    def get_outputs(self) -> list[NodeArg]:
        """The model's outputs, in order."""
        return list(self._outputs)

    def get_modelmeta(self) -> ModelMetadata:
        """The model's metadata (producer, graph name, its ``metadata_props``)."""
        return self._meta

    def get_providers(self) -> list[str]:
        """``["CPUExecutionProvider"]``: where the kernels run."""
        return list(PROVIDERS)

    def run(
        self,
        output_names: Iterable[str] | None,
        input_feed: Mapping[str, Any],
        run_options: Any = None,
    ) -> list[np.ndarray]:
        """The outputs named by ``output_names`` (all of them, in order, for None) computed
        from ``input_feed`` (every input by name). A missing or unknown input, an unknown
        output name, or an array of the wrong shape or dtype is an error naming it."""
        wanted = self._positions(output_names)
        if not isinstance(input_feed, Mapping):
            raise SessionError(
                f"input_feed must map input names to arrays, got {type(input_feed).__name__}"
            )
        split = self._split
        if split is not None:
            result = split.run(dict(input_feed))
        else:
            result = self._vm.run(dict(input_feed))
        results = result if isinstance(result, tuple) else (result,)
        return [results[i] for i in wanted]

    def _positions(self, output_names: Iterable[str] | None) -> list[int]:
        if output_names is None:
            return list(range(len(self._outputs)))
        if isinstance(output_names, str):
            raise SessionError(
                f"output_names must be a list of names (or None), got the string "
                f"{output_names!r}: write [{output_names!r}]"
            )
        positions = []
        for name in output_names:
            if name not in self._index:
                names = list(self._index)
                close = difflib.get_close_matches(str(name), names, n=1)
                hint = f"; did you mean {close[0]!r}?" if close else ""
                raise SessionError(
                    f"the model has no output {name!r} (its outputs: {', '.join(names)}{hint})"
                )
            positions.append(self._index[name])
        return positions


def _check_providers(providers: Sequence[Any] | None) -> None:
    for p in providers or ():
        name = p[0] if isinstance(p, tuple) else p
        if name not in PROVIDERS:
            raise SessionError(
                f"provider {name!r} is not available: dynshape runs its kernels on the CPU "
                f"(providers: {', '.join(PROVIDERS)})"
            )


def _node_arg(name: str, spec: Any) -> NodeArg:
    if not isinstance(spec, TensorSpec):
        raise SessionError(f"{name}: a session's inputs and outputs are tensors, got {spec}")
    shape: list[int | str | None] = [None if d == "?" else d for d in spec.shape]
    return NodeArg(name, shape, ORT_TYPES.get(spec.dtype, f"tensor({spec.dtype})"))


def _metadata(proto: Any) -> ModelMetadata:
    return ModelMetadata(
        producer_name=proto.producer_name,
        graph_name=proto.graph.name,
        graph_description=proto.graph.doc_string,
        domain=proto.domain,
        description=proto.doc_string,
        version=int(proto.model_version),
        custom_metadata_map={p.key: p.value for p in proto.metadata_props},
    )
