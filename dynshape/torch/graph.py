"""The importer: an ``ExportedProgram``'s FX graph, node by node, to a builder ``Program``.

1. Every ``call_function`` target must have a converter (``registry.py``), or compute a
   symbolic int (``sym_size``, Python ``add``/``floordiv`` on sizes: their value is the
   expression torch recorded); else, if ``run_decompositions()`` gives a program whose targets
   all have one, that program is imported; else one error lists every unsupported target with
   its count and nodes (``targets.py``).
2. Parameters, buffers and lifted constants become constants (made when first used); user
   inputs keep their names and get torch's symbolic shapes (``symbols.py``).
3. Nodes run in order. Each tensor result is checked against the shape torch recorded: a dim
   provably different is an error naming the node (a converter bug never gives a wrong
   answer silently).
4. The user outputs, in order, are the program's results, named after the output specs.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import ir

from ..builder import Value, build
from ..builder.program import Program, tensor
from ..builder.trace import constant, tracing_ranges
from ..errors import BuildError, CompileError, ModelImportError
from . import assertions
from .dtypes import array, ir_dtype
from .materialize import Materializer
from .reading import read, torch_module
from .registry import CONVERTERS, Call, NodeError, Unsupported, unsupported
from .symbols import DimOption, Symbols
from .targets import check_outputs, is_scalar, missing_targets, submodule, target_key


def load(
    program: Any,
    dims: Mapping[str, DimOption] | None = None,
    outputs: Sequence[str] | None = None,
    inputs: Sequence[str] | None = None,
) -> Program:
    """The dynshape ``Program`` of a ``torch.export.ExportedProgram`` or a ``.pt2`` path.

    Inputs are the program's user inputs, by name and in order; results its user outputs,
    named after the output specs or ``outputs``; ``inputs`` renames the inputs in order (names
    a Python argument cannot have: ``past_key_values.0.key``). torch's symbols keep the
    user's ``Dim`` names where torch records them (else ``s0``-style names) and their
    ranges; ``dims`` renames
    (``{"batch": "b"}``), fixes (``{"batch": 1}``) or narrows (``{"seq": (1, 512)}``) them.
    """
    return import_program(program, dims, outputs, inputs).program


@dataclass
class Imported:
    """An imported program, with what the import saw."""

    program: Program
    targets: Counter[str] = field(default_factory=Counter)
    """How many nodes of each target the graph had (``aten.linear.default``: 4)."""
    decomposed: bool = False
    """Whether the graph was first decomposed (``run_decompositions()``)."""
    seconds: float = 0.0

    def format(self) -> str:
        """The statistics ``import --stats`` prints."""
        total = sum(self.targets.values())
        lines = [f"nodes: {total} ({len(self.targets)} targets)"]
        if self.decomposed:
            lines[0] += ", after run_decompositions()"
        lines += [f"  {name:<48}{n:>5}" for name, n in self.targets.most_common()]
        return "\n".join(lines)


def import_program(
    program: Any,
    dims: Mapping[str, DimOption] | None = None,
    outputs: Sequence[str] | None = None,
    inputs: Sequence[str] | None = None,
) -> Imported:
    """``load``, with the import's statistics (``import --stats``)."""
    t0 = time.perf_counter()
    ep = read(program)
    check_outputs(ep)
    problems = missing_targets(ep)
    decomposed = False
    if problems:
        try:
            other = ep.run_decompositions()
        except Exception:  # a program torch cannot decompose: report the original's targets
            other = None
        if other is None or missing_targets(other):
            raise unsupported(problems)
        ep, decomposed = other, True
    importer = _Importer(ep, dims, outputs, inputs)
    result = importer.run()
    return Imported(result, importer.targets, decomposed, time.perf_counter() - t0)


class _Importer:
    def __init__(
        self,
        ep: Any,
        dims: Mapping[str, DimOption] | None,
        outputs: Sequence[str] | None,
        inputs: Sequence[str] | None = None,
    ) -> None:
        self.ep = ep
        self.torch = torch_module()
        self.symbols = Symbols(ep, dims)
        self.output_names = list(outputs) if outputs is not None else None
        self.input_names = list(inputs) if inputs is not None else None
        self.values: dict[str, Any] = {}
        self.weights: dict[str, Any] = {}
        """Placeholder name -> its torch tensor (a parameter, buffer or constant), made a
        constant when first used."""
        self.targets: Counter[str] = Counter()
        self.materialize = Materializer()

    def run(self) -> Program:
        inputs = self.read_inputs()
        out_node = None
        with tracing_ranges(self.symbols.ranges):  # narrowed by assertions as they come
            for node in self.ep.graph.nodes:
                if node.op in ("call_function", "get_attr"):
                    self.convert(node)
                elif node.op == "output":
                    out_node = node
        if out_node is None:
            raise ModelImportError("the graph has no output node")
        results, names = self.read_outputs(out_node)
        try:
            program = build(
                results[0] if len(results) == 1 else results, inputs, ranges=self.symbols.ranges
            )
        except (BuildError, CompileError) as e:
            raise ModelImportError(f"the imported program does not type: {e}") from None
        return Program(program, program.ranges, program.inputs, names)

    def read_inputs(self) -> list[Value]:
        kinds = self.torch.export.graph_signature.InputKind
        specs = {s.arg.name: s for s in self.ep.graph_signature.input_specs}
        inputs: list[Value] = []
        user = [
            s.arg.name for s in self.ep.graph_signature.input_specs if s.kind == kinds.USER_INPUT
        ]
        if self.input_names is not None and len(self.input_names) != len(user):
            raise ModelImportError(
                f"inputs= gives {len(self.input_names)} names for {len(user)} inputs"
            )
        renamed = dict(zip(user, self.input_names or user, strict=True))
        for node in self.ep.graph.nodes:
            if node.op != "placeholder":
                continue
            spec = specs.get(node.name)
            if spec is None:
                raise ModelImportError(f"placeholder {node.name!r} is not in the graph signature")
            if spec.kind in (kinds.PARAMETER, kinds.BUFFER, kinds.CONSTANT_TENSOR):
                self.weights[node.name] = self.weight(spec.target, node.name)
                continue
            if spec.kind != kinds.USER_INPUT:
                raise ModelImportError(
                    f"input {node.name!r}: unsupported: a {spec.kind.name} input"
                )
            val = node.meta.get("val")
            if not isinstance(val, self.torch.Tensor):
                raise ModelImportError(
                    f"input {node.name!r}: unsupported: a {type(val).__name__} input (tensors only)"
                )
            try:
                shape = self.symbols.shape(val.shape)
                dtype = ir_dtype(val.dtype)
                v = tensor(renamed[node.name], shape, dtype)
            except (NodeError, BuildError) as e:
                raise ModelImportError(f"input {node.name!r}: {getattr(e, 'message', e)}") from None
            self.values[node.name] = v
            self.materialize.record(v)
            inputs.append(v)
        return inputs

    def weight(self, target: str | None, name: str) -> Any:
        """The tensor of a parameter, buffer or lifted constant (``ep.state_dict`` holds the
        persistent ones, ``ep.constants`` the others)."""
        if target in self.ep.state_dict:
            return self.ep.state_dict[target]
        if target in self.ep.constants:
            return self.ep.constants[target]
        raise ModelImportError(f"input {name!r}: its tensor {target!r} is not in the program")

    def value(self, arg: Any) -> Any:
        """A node argument as converters see it: tensors as Values, sizes as dims, dtypes as
        IR names, lists mapped element by element."""
        torch = self.torch
        if isinstance(arg, torch.fx.Node):
            if arg.name in self.weights and arg.name not in self.values:
                tensor_ = self.weights[arg.name]
                try:
                    self.values[arg.name] = constant(array(tensor_), None)
                except Unsupported as e:
                    raise ModelImportError(f"weight {arg.name!r}: unsupported: {e}") from None
            return self.values[arg.name]
        if isinstance(arg, (list, tuple)):
            return [self.value(a) for a in arg]
        if isinstance(arg, torch.dtype):
            return ir_dtype(arg)
        return arg

    def subgraph(self, module: Any, inputs: Sequence[Any]) -> list[Any]:
        """Convert the nodes of ``module`` (a ``cond`` branch) with its placeholders bound to
        ``inputs``, in the scope of the enclosing values; its results, in order."""
        outer = self.values
        self.values = dict(outer)
        try:
            placeholders = [n for n in module.graph.nodes if n.op == "placeholder"]
            if len(placeholders) != len(inputs):
                raise ModelImportError(
                    f"subgraph takes {len(placeholders)} inputs, given {len(inputs)}"
                )
            bound = dict(zip((n.name for n in placeholders), inputs, strict=True))
            results: list[Any] = []
            for node in module.graph.nodes:
                if node.op == "placeholder":
                    self.values[node.name] = bound[node.name]
                elif node.op in ("call_function", "get_attr"):
                    self.convert(node, module)
                elif node.op == "output":
                    returned = node.args[0]
                    returned = returned if isinstance(returned, (list, tuple)) else [returned]
                    results = [self.value(a) for a in returned]
            return results
        finally:
            self.values = outer

    def convert(self, node: Any, module: Any = None) -> None:
        if node.op == "get_attr":
            self.values[node.name] = submodule(module or self.ep.graph_module, node.target)
            return
        key = target_key(node.target)
        self.targets[key] += 1
        where = f"node {node.name!r} ({key})"
        val = node.meta.get("val")
        try:
            if key in assertions.TARGETS:
                assertions.check(self, node, where)
                self.values[node.name] = None
                return
            if is_scalar(node):
                self.values[node.name] = self.scalar(val)
                return
            call = Call(
                key,
                node.name,
                self.arguments(node),
                val,
                _out_dtype(val),
                self.symbols.shape,
                self.materialize,
                self,
            )
            result = CONVERTERS[key](call)
        except Unsupported as e:
            raise ModelImportError(f"{where}: unsupported: {e}") from None
        except ModelImportError:
            raise
        except (NodeError, BuildError, CompileError, ir.IRError) as e:
            raise ModelImportError(f"{where}: {getattr(e, 'message', e)}") from None
        except Exception as e:  # a node the converter did not foresee
            raise ModelImportError(
                f"{where}: malformed for the importer ({type(e).__name__}: {e})"
            ) from None
        self.check_recorded(where, val, result)
        self.values[node.name] = result

    def scalar(self, val: Any) -> Any:
        """The value of a node computing a number: a dim for a size, the number for a constant,
        torch's own object for a symbolic bool or float (read by assertions only)."""
        if isinstance(val, (bool, float)):
            return val
        if isinstance(val, (int, self.torch.SymInt)):
            return self.symbols.dim(val)
        return val

    def arguments(self, node: Any) -> dict[str, Any]:
        """The node's arguments by schema name, defaults filled in (``getitem`` and other
        Python functions: ``a0``, ``a1``, ...)."""
        schema = getattr(node.target, "_schema", None)
        if schema is None:
            return {f"a{i}": self.value(a) for i, a in enumerate(node.args)}
        out: dict[str, Any] = {}
        for i, spec in enumerate(schema.arguments):
            if i < len(node.args):
                out[spec.name] = self.value(node.args[i])
            elif spec.name in node.kwargs:
                out[spec.name] = self.value(node.kwargs[spec.name])
            elif spec.has_default_value():
                out[spec.name] = self.value(spec.default_value)
            else:
                raise NodeError(f"argument {spec.name!r} is missing")
        return out

    def check_recorded(self, where: str, val: Any, result: Any) -> None:
        """The result's shapes must agree with the fake tensors torch recorded."""
        torch = self.torch
        pairs: list[tuple[Any, Any]] = []
        if isinstance(val, torch.Tensor):
            pairs = [(val, result)]
        elif isinstance(val, (list, tuple)) and isinstance(result, (list, tuple)):
            pairs = [
                (v, r) for v, r in zip(val, result, strict=False) if isinstance(v, torch.Tensor)
            ]
        for recorded, ours in pairs:
            if not isinstance(ours, Value):
                continue
            self.symbols.bind_unbacked(recorded.shape, ours.shape)
            self.materialize.record(ours)  # a ``?`` dim is read off the tensor it sizes
            theirs = self.symbols.shape(recorded.shape)
            mine = list(ours.shape)
            if len(theirs) != len(mine):
                raise ModelImportError(
                    f"{where}: result of rank {len(mine)}, torch recorded {tuple(theirs)}"
                )
            for axis, (a, b) in enumerate(zip(mine, theirs, strict=True)):
                if ir.compare(a, "==", b, self.symbols.ranges) is False:
                    raise ModelImportError(
                        f"{where}: result dim {a} at axis {axis}, torch recorded {b}"
                    )
            dtype = dtype_or_none(recorded.dtype)
            if dtype is not None and dtype != ours.dtype:
                raise ModelImportError(
                    f"{where}: result of dtype {ours.dtype}, torch recorded {dtype}"
                )

    def read_outputs(self, out_node: Any) -> tuple[list[Value], list[str]]:
        kinds = self.torch.export.graph_signature.OutputKind
        specs = self.ep.graph_signature.output_specs
        returned = out_node.args[0]
        results: list[Value] = []
        names: list[str] = []
        for spec, arg in zip(specs, returned, strict=True):
            if spec.kind != kinds.USER_OUTPUT:
                raise ModelImportError(
                    f"output {spec.arg.name!r}: unsupported: a {spec.kind.name} output "
                    "(export the model in eval mode)"
                )
            v = self.value(arg)
            if not isinstance(v, Value):
                raise ModelImportError(
                    f"output {getattr(spec.arg, 'name', arg)!r}: unsupported: not a tensor"
                )
            results.append(v)
            names.append(spec.arg.name)
        if not results:
            raise ModelImportError("the program has no outputs")
        if self.output_names is not None:
            if len(self.output_names) != len(names):
                raise ModelImportError(
                    f"outputs= gives {len(self.output_names)} names for {len(names)} outputs"
                )
            names = list(self.output_names)
        return results, names


def dtype_or_none(dtype: Any) -> str | None:
    """The IR name of a torch dtype, None for one dynshape does not have."""
    try:
        return ir_dtype(dtype)
    except Unsupported:
        return None


def _out_dtype(val: Any) -> str | None:
    first = val[0] if isinstance(val, (list, tuple)) and val else val
    dtype = getattr(first, "dtype", None)
    return dtype_or_none(dtype) if dtype is not None else None
