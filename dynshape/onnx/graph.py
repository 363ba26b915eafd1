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

import os
from collections.abc import Collection, Mapping
from collections.abc import Sequence as Listed
from dataclasses import dataclass, field
from typing import Any

import ir

from ..builder import Value, build
from ..builder.program import Program, tensor
from ..builder.trace import tracing_ranges
from ..errors import BuildError, CompileError, ModelImportError
from .dims import DimOption, InputDims, dim_names, recorded_dim, symbol_name
from .known import Known
from .materialize import Materializer
from .model import dtype_of, onnx_module, opset_of, read, weight
from .registry import CONVERTERS, Node, NodeError, Unsupported, unsupported
from .sequence import Optional, Sequence, Slot, flatten


def load(
    model: Any,
    dims: Mapping[str, DimOption] | None = None,
    external_data_dir: str | os.PathLike[str] | None = None,
    sequences: Mapping[str, int | list[int]] | None = None,
    empty: Collection[str] = (),
) -> Program:
    """The program of an ONNX model (a path, bytes or an ``onnx.ModelProto``).

    Inputs are the graph's inputs that are not initializers, by ONNX name and in order;
    results are the graph's outputs (``program.outputs`` has their names). ``dims`` renames,
    fixes or bounds the ``dim_param`` names (``{"batch": 1}``, ``{"seq": (1, 512)}``).
    Weights in external files are read from the model file's directory, or for bytes and a
    proto from ``external_data_dir`` only (``model.read``). A graph input that is a sequence
    becomes one input per element (``x.0``, ``x.1``, ...): ``sequences`` gives each one's
    length, or its elements' ranks (needed where the model declares no element shape); an
    optional input named in ``empty`` has no value (``sequence.py``).
    """
    return import_model(model, dims, external_data_dir, sequences, empty).program


@dataclass
class ShapeStats:
    """How well the importer knows the shapes of the node outputs of a model."""

    known: int = 0
    """Outputs whose contents are known at import (constants, shape computations)."""
    symbolic: int = 0
    """Tensors whose every dim is an int or an expression of the input dims."""
    partial: int = 0
    """Tensors with some dims known only at run time (``?``) and some not."""
    unknown: int = 0
    """Tensors whose every dim is ``?`` (rank 1 or more)."""
    shapes: dict[str, tuple[Any, ...]] = field(default_factory=dict)
    """Each named node output's dims (ints, dims, ``?``), by its ONNX name (a value that is not
    a tensor is left out): what ``benchmarks/onnx_unknown_dims.py`` compares with onnxruntime's
    symbolic shape inference."""

    def add(self, value: Any, name: str = "") -> None:
        """Count one node output (named ``name`` in the model)."""
        if isinstance(value, Known):
            self.known += 1
            if name:
                self.shapes[name] = value.shape
            return
        ty = getattr(value, "type", None)
        shape = ty.shape if isinstance(ty, ir.TensorType) else ()
        if name and isinstance(ty, ir.TensorType):
            self.shapes[name] = tuple(shape)
        fresh = [any(ir.is_anonymous(s) for s in ir.free_symbols(d)) for d in shape]
        if not any(fresh):
            self.symbolic += 1
        elif all(fresh):
            self.unknown += 1
        else:
            self.partial += 1

    def format(self) -> str:
        """One line per kind, with its count and share."""
        total = self.known + self.symbolic + self.partial + self.unknown
        rows = [
            ("known at import (constants, shapes)", self.known),
            ("fully symbolic shape", self.symbolic),
            ("partially known shape", self.partial),
            ("unknown shape", self.unknown),
        ]

        def share(k: int) -> str:
            return f"{100 * k / total:5.1f}%" if total else "    -"

        lines = [f"node outputs: {total}"]
        lines += [f"  {label:<38}{count:>6}  {share(count)}" for label, count in rows]
        return "\n".join(lines)


@dataclass
class Imported:
    """An imported model: its program, and how well its shapes are known."""

    program: Program
    stats: ShapeStats = field(default_factory=ShapeStats)
    inputs: list[Slot] = field(default_factory=list)
    """How the graph's inputs lie in the program's (a sequence is one input per element)."""
    outputs: list[Slot] = field(default_factory=list)
    """How the graph's outputs lie in the program's results (``sequence.regroup``)."""


def import_model(
    model: Any,
    dims: Mapping[str, DimOption] | None = None,
    external_data_dir: str | os.PathLike[str] | None = None,
    sequences: Mapping[str, int | list[int]] | None = None,
    empty: Collection[str] = (),
) -> Imported:
    """``load``, with the shape statistics of the node outputs (``import --stats``).

    A model that fails to import is imported once more with the input dims' ranges narrowed
    where a truncating division of dims needs a non-negative numerator (``InputDims``,
    design/onnx.md): only then, so that a model that computes such a value at run time keeps
    every size. A model refused for sizes computed from data is then imported with those sizes
    known at run time only (``InputDims.run_time_sizes``: ``dyn.resize``), the last resort, as
    its dims are no longer symbolic. If every try fails, the first error is the one raised, or
    the last try's when it got past that one's refusal."""
    proto = read(model, external_data_dir)
    given = dict(sequences or {}), frozenset(empty)
    try:
        importer = _Importer(proto, dims, given=given)
        return importer.imported()
    except ModelImportError as first:
        error = first
    try:
        importer = _Importer(proto, dims, narrow=True, given=given)
        result = importer.imported()
        if importer.dims.narrowed:  # else narrowing was not what it needed
            return result
    except ModelImportError:
        pass
    if RUN_TIME_SIZES not in str(error):
        raise error from None
    # the last try got past the first refusal, so its error says more
    importer = _Importer(proto, dims, narrow=True, run_time_sizes=True, given=given)
    return importer.imported()


#: The refusal that a last try with sizes known at run time only may overcome.
RUN_TIME_SIZES = "computed from data"


def describe(node: Any) -> str:
    """``Conv 'conv1'`` (or ``Conv #3`` for a node without a name)."""
    return f"{node.op_type} {node.name!r}" if node.name else f"{node.op_type} (unnamed)"


class _Importer:
    def __init__(
        self,
        model: Any,
        dims: Mapping[str, DimOption] | None,
        narrow: bool = False,
        run_time_sizes: bool = False,
        given: tuple[dict[str, Any], frozenset[str]] = ({}, frozenset()),
    ) -> None:
        self.model = model
        self.sequences, self.empty = given
        """The lengths (or element ranks) of the sequence inputs, and the optional inputs
        given no value."""
        self.slots: tuple[list[Slot], list[Slot]] = ([], [])
        """The inputs' and outputs' slots (``sequence.Slot``), as ``run`` lays them out."""
        self.graph = model.graph
        self.check_ops()  # first: a model of other domains only has no default opset
        self.opset = opset_of(model)
        weights = {t.name for t in self.graph.initializer}
        self.dims = InputDims(
            dims, dim_names(self.graph, weights), narrow=narrow, run_time_sizes=run_time_sizes
        )
        self.values: dict[str, Any] = {}
        self.depth = 0
        """How many subgraphs (``If`` branches, ``Loop`` bodies) deep the conversion is."""
        self.counting = True
        """Whether node outputs go into the statistics: a subgraph converted again (a loop
        body traced until its types settle) is counted once."""
        self.counted: set[int] = set()
        """The ids of the subgraphs counted."""
        self.materialize = Materializer()
        self.stats = ShapeStats()
        self.names = dim_names(self.graph, weights)
        self.recorded = {v.name: v for v in self.graph.output}
        self.recorded.update({v.name: v for v in self.graph.value_info})
        """What the exporter recorded of intermediate values (shapes), checked as we go."""

    def run(self) -> Program:
        inputs = self.read_inputs()
        with tracing_ranges(self.dims.ranges):
            for node in self.graph.node:
                self.convert(node)
        outputs, names = [], []
        for out in self.graph.output:
            if out.name not in self.values:
                raise ModelImportError(f"graph output {out.name!r} is computed by no node")
            slot, tensors = flatten(out.name, self.values[out.name])
            self.slots[1].append(slot)
            for name, value in tensors:
                outputs.append(self.materialize(value) if isinstance(value, Known) else value)
                names.append(name)
        if not outputs:
            raise ModelImportError(
                "the graph has no outputs"
                + (": unsupported: its outputs are empty" if self.slots[1] else "")
            )
        try:
            program = build(
                outputs[0] if len(outputs) == 1 else outputs, inputs, ranges=self.dims.ranges
            )
        except (BuildError, CompileError) as e:
            raise ModelImportError(f"the imported program does not type: {e}") from None
        return Program(program, program.ranges, program.inputs, names)

    def imported(self) -> Imported:
        """``run``'s program with the statistics and the inputs' and outputs' slots."""
        program = self.run()
        return Imported(program, self.stats, *self.slots)

    def check_ops(self) -> None:
        """Every op has a converter (keyed by domain outside the default one): else one error
        listing all nodes."""
        missing: dict[str, list[str]] = {}
        for node in _all_nodes(self.graph):
            key = op_key(node)
            if key in CONVERTERS:
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
        inputs: list[Value] = []
        for value in self.graph.input:
            if value.name in self.values:
                continue  # a weight listed as an input (older exporters)
            ty = value.type
            if ty.WhichOneof("value") != "tensor_type":
                self.values[value.name] = self.structured_input(value.name, ty, inputs)
                continue
            v = self.input_tensor(value.name, value.name, ty.tensor_type)
            self.slots[0].append(Slot(value.name, "tensor", 1))
            self.values[value.name] = v
            inputs.append(v)
        return inputs

    def input_tensor(
        self, where: str, name: str, ty: Any, element: int | None = None, rank: int | None = None
    ) -> Value:
        """The program input ``name`` of tensor type ``ty`` (a ``TypeProto.Tensor``); for
        ``element`` k of a sequence input each named dim ``N`` is its own ``N_k`` (the
        elements of one sequence may differ in size), and an element declared without a shape
        has ``rank`` dims of its own (``x_d1_0``) when the caller gave its rank."""
        dtype = dtype_of(ty.elem_type, f"input {where!r}")
        if not ty.HasField("shape") and rank is None:
            if element is not None:
                raise ModelImportError(
                    f"input {where!r}: unsupported: its elements have no shape (not even a "
                    f"rank; load(..., sequences={{{where!r}: [rank, ...]}}) gives them)"
                )
            raise ModelImportError(f"input {where!r} has no shape (not even a rank)")
        if not ty.HasField("shape"):
            shape: list[Any] = [symbol_name(f"{where}_d{a}") for a in range(rank or 0)]
        else:
            shape = [self.dims.dim(d) for d in ty.shape.dim]
            if rank is not None and rank != len(shape):
                raise ModelImportError(
                    f"input {where!r}: element {element} given rank {rank}, declared {len(shape)}"
                )
        if element is not None:
            shape = [f"{d}_{element}" if isinstance(d, str) and d != "?" else d for d in shape]
        try:
            v = tensor(name, shape, dtype)
        except BuildError as e:
            raise ModelImportError(f"input {where!r}: {e.message}") from None
        self.materialize.record(v)
        return v

    def structured_input(self, name: str, ty: Any, inputs: list[Value]) -> Any:
        """A sequence or optional graph input (``sequence.py``) as the program inputs its
        given length or emptiness makes, appended to ``inputs``."""
        which = ty.WhichOneof("value")
        if which == "optional_type":
            inner = ty.optional_type.elem_type
            if name in self.empty:
                self.slots[0].append(Slot(name, "optional tensor", 0, present=False))
                return Optional(None)
            if inner.WhichOneof("value") == "tensor_type":
                v = self.input_tensor(name, name, inner.tensor_type)
                self.slots[0].append(Slot(name, "optional tensor", 1))
                inputs.append(v)
                return Optional(v)
            value = self.structured_input(name, inner, inputs)
            slot = self.slots[0][-1]
            self.slots[0][-1] = Slot(name, f"optional {slot.kind}", slot.count)
            return Optional(value)
        if which != "sequence_type":
            raise ModelImportError(f"input {name!r} is not a tensor")
        elem = ty.sequence_type.elem_type
        if elem.WhichOneof("value") != "tensor_type":
            raise ModelImportError(f"input {name!r}: unsupported: a sequence of non-tensors")
        if name not in self.sequences:
            raise ModelImportError(
                f"input {name!r} is a sequence: unsupported without its length "
                f"(load(..., sequences={{{name!r}: n}}))"
            )
        given = self.sequences[name]
        ranks = [None] * int(given) if isinstance(given, int) else [int(r) for r in given]
        items = [
            self.input_tensor(name, f"{name}.{k}", elem.tensor_type, k, rank)
            for k, rank in enumerate(ranks)
        ]
        inputs.extend(items)
        self.slots[0].append(Slot(name, "sequence", len(items)))
        return Sequence(tuple(items), dtype_of(elem.tensor_type.elem_type, f"input {name!r}"))

    def convert(self, node: Any) -> None:
        where = describe(node)
        args = self._inputs(node, where)
        try:
            attrs = _attributes(node, where)
        except ModelImportError:
            raise
        except Exception as e:  # protobuf or onnx.helper on a malformed attribute
            raise ModelImportError(f"node {where}: unreadable attributes ({e})") from None
        view = Node(
            op_key(node),
            node.name,
            args,
            attrs,
            self.opset,
            len(node.output),
            self.materialize,
            tuple(bool(name) for name in node.output),
            self.subgraph,
            self.dims,
        )
        self._bind(node, where, _run_converter(view, where))

    def _inputs(self, node: Any, where: str) -> list[Any]:
        """The values of ``node``'s inputs (None for an omitted one)."""
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
        return args

    def _bind(self, node: Any, where: str, results: Any) -> None:
        """Name ``node``'s outputs (the converter's ``results``, one or a list of them)."""
        if not isinstance(results, (list, tuple)):
            results = [results]
        if len(results) < len([o for o in node.output if o]):
            raise ModelImportError(f"node {where}: the converter made {len(results)} outputs")
        for name, result in zip(node.output, results, strict=False):
            if name:
                self.values[name] = result
                if not self.depth:  # a branch's values exist in the branch only
                    self.materialize.record(result)
                if self.counting:
                    self.stats.add(result, name)
                self.check_recorded(where, name, result)

    def subgraph(self, graph: Any, inputs: Listed[Any] = ()) -> list[Any]:
        """Convert the nodes of ``graph`` (an ``If`` branch, a ``Loop`` body) with the
        enclosing values in scope (ONNX subgraphs read outer values by name) and its inputs
        bound to ``inputs``; its outputs, in order."""
        if len(inputs) != len(graph.input):
            raise ModelImportError(
                f"subgraph {graph.name!r} takes {len(graph.input)} inputs, given {len(inputs)}"
            )
        outer, counting = self.values, self.counting
        self.values = dict(outer)
        self.counting = counting and id(graph) not in self.counted
        self.counted.add(id(graph))
        self.depth += 1
        try:
            for declared, value in zip(graph.input, inputs, strict=True):
                self.values[declared.name] = value
            for init in graph.initializer:
                self.values[init.name] = weight(init, f"initializer {init.name!r}")
            for node in graph.node:
                self.convert(node)
            missing = [o.name for o in graph.output if o.name not in self.values]
            if missing:
                raise ModelImportError(
                    f"subgraph {graph.name!r}: outputs {missing} are computed by no node"
                )
            return [self.values[o.name] for o in graph.output]
        finally:
            self.values, self.counting = outer, counting
            self.depth -= 1

    def check_recorded(self, where: str, name: str, result: Any) -> None:
        """The exporter's recorded shape of output ``name`` must agree with the importer's: a
        dim provably different, or a constant where the exporter recorded an expression of
        the input dims (a size baked in at export: the model runs only at that size), is an
        error naming the node. Undecided dims and invented names are not checked."""
        info = self.recorded.get(name)
        if info is None or result is None or info.type.WhichOneof("value") != "tensor_type":
            return
        if not info.type.tensor_type.HasField("shape"):
            return
        ours = result.shape if isinstance(result, Known) else getattr(result.type, "shape", None)
        if ours is None:
            return
        theirs = info.type.tensor_type.shape.dim
        if len(theirs) != len(ours):
            raise ModelImportError(
                f"node {where}: output {name!r} has rank {len(ours)}, but the model records "
                f"rank {len(theirs)}"
            )
        for axis, (d, mine) in enumerate(zip(theirs, ours, strict=True)):
            which = d.WhichOneof("value")
            if which == "dim_value":
                recorded: Any = int(d.dim_value)
            elif which == "dim_param":
                recorded = recorded_dim(d.dim_param, self.dims, self.names)
            else:
                recorded = None
            if recorded is None:
                continue
            verdict = ir.compare(mine, "==", recorded, self.dims.ranges)
            baked = isinstance(mine, int) and not isinstance(recorded, int) and verdict is None
            if verdict is False or baked:
                raise ModelImportError(
                    f"node {where}: output {name!r} has dim {mine} at axis {axis}, but the "
                    f"model records {recorded}"
                    + (" (a size fixed at export: the model runs only at it)" if baked else "")
                )


def op_key(node: Any) -> str:
    """The op's key in ``CONVERTERS``: its type, prefixed by its domain outside the default
    one (``ai.onnx.preview.FlexAttention``)."""
    if node.domain in ("", "ai.onnx"):
        return str(node.op_type)
    return f"{node.domain}.{node.op_type}"


def _all_nodes(graph: Any) -> list[Any]:
    """The nodes of ``graph`` and of its subgraphs (``If`` branches, ``Loop`` bodies)."""
    out = []
    for node in graph.node:
        out.append(node)
        for a in node.attribute:
            if a.HasField("g"):
                out += _all_nodes(a.g)
            out += [n for g in a.graphs for n in _all_nodes(g)]
    return out


def _run_converter(view: Node, where: str) -> Any:
    """The converter of ``view``'s op on it; every error it raises as a ModelImportError
    naming the node."""
    try:
        return CONVERTERS[view.op_type](view)
    except Unsupported as e:
        raise ModelImportError(f"node {where}: unsupported: {e}") from None
    except ModelImportError:
        raise  # a subgraph's node, named already
    except (NodeError, BuildError, CompileError) as e:
        if _extended(view, e):  # ONNX allows bfloat16 or float8 there; dynshape refuses it
            raise ModelImportError(
                f"node {where}: unsupported: {getattr(e, 'message', e)}"
            ) from None
        raise ModelImportError(f"node {where}: {getattr(e, 'message', e)}") from None
    except Exception as e:  # a malformed node the converter did not foresee
        raise ModelImportError(
            f"node {where}: malformed for the importer ({type(e).__name__}: {e})"
        ) from None


def _extended(view: Node, error: Exception) -> bool:
    """True when a converter's refusal is of an extended dtype (``bfloat16``, ``float8_*``,
    ``int4``, ...): an input has one, or an op refused computing on one. dynshape keeps them
    storage types (Cast, reshapes, selections), so such a node is unsupported, not a bug."""
    if isinstance(error.__context__, ir.StorageDTypeError):
        return True
    for v in view.inputs:
        if isinstance(v, Known):
            dtype = v.dtype
        elif isinstance(v, Value) and isinstance(v.type, ir.TensorType):
            dtype = v.type.dtype
        else:
            continue  # omitted, a sequence, a tuple
        if ir.is_extended(dtype):
            return True
    return False


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
