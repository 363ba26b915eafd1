"""The importer: an ONNX graph, node by node, to a builder ``Program``.

1. The inputs that are not weights become ``ds.tensor``s with symbolic dims (``dims.py``);
   initializers become ``Known`` constants (``model.py``).
2. Every node's op must have a converter (``registry.py``); all the nodes that do not, and
   every other problem found before converting, are reported together.
3. Nodes run in order (ONNX lists them topologically). A node whose inputs are all ``Known``
   may be evaluated at import (its converter decides: shapes and constants fold); otherwise it
   builds ops. A converter's failure is a ``ModelImportError`` naming the node.
4. The graph's outputs, in order and by name, are the program's results.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..builder import Value, build
from ..builder.program import Program, tensor
from ..errors import BuildError, CompileError, ModelImportError
from .dims import DimOption, InputDims, dim_names
from .known import Known
from .materialize import Materializer
from .model import dtype_of, onnx_module, opset_of, read, weight
from .registry import CONVERTERS, Node, NodeError, unsupported


def load(model: Any, dims: Mapping[str, DimOption] | None = None) -> Program:
    """The program of an ONNX model (a path, bytes or an ``onnx.ModelProto``).

    Inputs are the graph's inputs that are not initializers, by ONNX name and in order;
    results are the graph's outputs (``program.outputs`` has their names). ``dims`` renames,
    fixes or bounds the ``dim_param`` names (``{"batch": 1}``, ``{"seq": (1, 512)}``).
    """
    return _Importer(read(model), dims).run()


def describe(node: Any) -> str:
    """``Conv 'conv1'`` (or ``Conv #3`` for a node without a name)."""
    return f"{node.op_type} {node.name!r}" if node.name else f"{node.op_type} (unnamed)"


class _Importer:
    def __init__(self, model: Any, dims: Mapping[str, DimOption] | None) -> None:
        self.model = model
        self.graph = model.graph
        self.opset = opset_of(model)
        weights = {t.name for t in self.graph.initializer}
        self.dims = InputDims(dims, dim_names(self.graph, weights))
        self.values: dict[str, Any] = {}
        self.materialize = Materializer()

    def run(self) -> Program:
        self.check_ops()
        inputs = self.read_inputs()
        for node in self.graph.node:
            self.convert(node)
        outputs = []
        for out in self.graph.output:
            if out.name not in self.values:
                raise ModelImportError(f"graph output {out.name!r} is computed by no node")
            value = self.values[out.name]
            outputs.append(self.materialize(value) if isinstance(value, Known) else value)
        if not outputs:
            raise ModelImportError("the graph has no outputs")
        try:
            program = build(
                outputs[0] if len(outputs) == 1 else outputs, inputs, ranges=self.dims.ranges
            )
        except (BuildError, CompileError) as e:
            raise ModelImportError(f"the imported program does not type: {e}") from None
        return Program(program, program.ranges, program.inputs, [o.name for o in self.graph.output])

    def check_ops(self) -> None:
        """Every op converted and in the default domain: else one error listing all nodes."""
        missing: dict[str, list[str]] = {}
        for node in self.graph.node:
            if node.domain not in ("", "ai.onnx"):
                key = f"{node.domain}.{node.op_type}"
            elif node.op_type not in CONVERTERS:
                key = node.op_type
            else:
                continue
            missing.setdefault(key, []).append(node.name or "(unnamed)")
        if missing:
            problems = [
                f"unsupported op {op} ({len(names)} node(s): {', '.join(names[:5])}"
                f"{', ...' if len(names) > 5 else ''})"
                for op, names in sorted(missing.items())
            ]
            raise unsupported(problems)

    def read_inputs(self) -> list[Value]:
        for init in self.graph.initializer:
            self.values[init.name] = weight(init, f"initializer {init.name!r}")
        inputs = []
        for value in self.graph.input:
            if value.name in self.values:
                continue  # a weight listed as an input (older exporters)
            ty = value.type
            if ty.WhichOneof("value") != "tensor_type":
                raise ModelImportError(f"input {value.name!r} is not a tensor")
            dtype = dtype_of(ty.tensor_type.elem_type, f"input {value.name!r}")
            if not ty.tensor_type.HasField("shape"):
                raise ModelImportError(f"input {value.name!r} has no shape (not even a rank)")
            shape = [self.dims.dim(d) for d in ty.tensor_type.shape.dim]
            try:
                v = tensor(value.name, shape, dtype)
            except BuildError as e:
                raise ModelImportError(f"input {value.name!r}: {e.message}") from None
            self.materialize.record(v)
            self.values[value.name] = v
            inputs.append(v)
        return inputs

    def convert(self, node: Any) -> None:
        where = describe(node)
        args: list[Any] = []
        for name in node.input:
            if not name:
                args.append(None)
            elif name not in self.values:
                raise ModelImportError(
                    f"node {where}: input {name!r} is computed by no earlier node"
                )
            else:
                args.append(self.values[name])
        view = Node(
            node.op_type,
            node.name,
            args,
            _attributes(node, where),
            self.opset,
            len(node.output),
            self.materialize,
        )
        try:
            results = CONVERTERS[node.op_type](view)
        except (NodeError, BuildError, CompileError) as e:
            raise ModelImportError(f"node {where}: {getattr(e, 'message', e)}") from None
        if not isinstance(results, (list, tuple)):
            results = [results]
        if len(results) < len([o for o in node.output if o]):
            raise ModelImportError(f"node {where}: the converter made {len(results)} outputs")
        for name, result in zip(node.output, results, strict=False):
            if name:
                self.values[name] = result
                self.materialize.record(result)


def _attributes(node: Any, where: str) -> dict[str, Any]:
    onnx = onnx_module()
    out: dict[str, Any] = {}
    for a in node.attribute:
        if a.ref_attr_name:
            raise ModelImportError(f"node {where}: attribute {a.name} refers to a function's")
        value = onnx.helper.get_attribute_value(a)
        if isinstance(value, bytes):
            value = value.decode("utf-8", "replace")
        elif isinstance(value, onnx.TensorProto):
            value = weight(value, f"node {where}: attribute {a.name}")
        elif isinstance(value, list) and value and isinstance(value[0], bytes):
            value = [v.decode("utf-8", "replace") for v in value]
        out[a.name] = value
    return out
