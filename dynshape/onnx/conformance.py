"""The ONNX backend node tests (``onnx.backend.test``) through the importer and the VM.

The ``onnx`` package generates 1,884 node tests (``collect_testcases``): a one-op (or small)
model with input and expected output arrays and tolerances. ``run_case`` imports the model,
compiles it, runs it on the VM and compares every output, as onnxruntime's backend test does;
``run_all`` does every case. A case is

- ``unsupported`` when the importer refuses it before converting (an op it has no converter
  for, an opset or element type outside its range): not a failure of what exists;
- ``passed`` when every output matches (same shape, values within the case's tolerances, NaNs
  where expected);
- ``failed`` otherwise: a wrong value or shape, or an error importing, compiling or running an
  op the importer claims to support.

The tests feed every operand as a graph input, axes and repeats included, where exported
models have constants. dynshape needs those at compile time (they decide ranks and part counts),
so ``run_case`` first turns the inputs that a node reads at such a position (``FROZEN``) into
initializers holding the test's values; everything else stays an input. A case written at an
opset below the importer's range runs at its lowest opset when the ``onnx`` schemas say each
of its ops is defined the same at both (``_lifted``). A shape given to
``Reshape`` or slice bounds stay inputs: those have a run-time path (``dyn.*`` ops).

Used by ``benchmarks/onnx_conformance.py`` (the counts) and ``tests/onnx/test_conformance.py``
(every case whose ops are converted must pass, or be listed with its reason).

Generating the cases runs every generator of the ``onnx`` package (15 s, most of it in the
3-d pools). ``index()`` lists them without generating: each case's name, its top-level op
types and the generator module that makes it, read from ``conformance_cases.json`` when that
file was written for the installed ``onnx`` version (generated otherwise), and ``case(name)``
generates only that case's module. The test suite parametrizes by name, so collecting it reads
a file. ``python -m dynshape.onnx.conformance`` rewrites the file for the installed ``onnx``;
``tests/onnx/test_conformance.py`` checks it against a full generation.
"""

from __future__ import annotations

import importlib
import json
import pkgutil
import re
import sys
import warnings
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from dynshape_errors import DynShapeError
from shape_funcs.declarations.dtypes import EXTENDED_KINDS

from ..errors import ModelImportError
from .model import OPSETS
from .sequence import regroup

#: Op type -> the input positions read at compile time (axes, repeats, sizes, pads, k).
FROZEN: dict[str, tuple[int, ...]] = {
    "Unsqueeze": (1,),
    "Squeeze": (1,),
    "Tile": (1,),
    "Expand": (1,),
    "ConstantOfShape": (0,),
    "Slice": (3, 4),
    "Split": (1,),
    "ReduceSum": (1,),
    "ReduceMean": (1,),
    "ReduceMax": (1,),
    "ReduceMin": (1,),
    "ReduceProd": (1,),
    "ReduceL1": (1,),
    "ReduceL2": (1,),
    "ReduceLogSum": (1,),
    "ReduceLogSumExp": (1,),
    "ReduceSumSquare": (1,),
    "Pad": (1, 2, 3),
    "TopK": (1,),
    "Resize": (1, 2, 3),
    "CumSum": (1,),
    "Trilu": (1,),
    "CumProd": (1,),
    "OneHot": (1,),
    "Dropout": (1, 2),  # ratio and training_mode: whether it draws random numbers
    "SplitToSequence": (1,),
    "SequenceAt": (1,),
    "SequenceInsert": (2,),
    "SequenceErase": (1,),
    "AffineGrid": (1,),
    "CenterCropPad": (1,),
    "Col2Im": (1, 2),
    "MaxUnpool": (2,),
    "DFT": (1, 2),
    "STFT": (1, 3),
    "HannWindow": (0,),
    "HammingWindow": (0,),
    "BlackmanWindow": (0,),
    "MelWeightMatrix": (0, 1, 2, 3, 4),
}

#: Messages of the importer that mean "not supported", not "wrong".
_UNSUPPORTED = (
    "unsupported op",
    "supported: 13 to",
    "which dynshape does not support",
    "is not a tensor",
    ": unsupported: ",
)


@dataclass(frozen=True)
class Outcome:
    """The result of one backend test case."""

    name: str
    status: str
    """``passed``, ``failed`` or ``unsupported``."""
    detail: str = ""
    """Why, for a case that did not pass."""


def cases() -> list[Any]:
    """The backend node test cases the installed ``onnx`` generates."""
    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the generators divide by zero on purpose
        return list(collect_testcases(None))


def op_types(case: Any) -> set[str]:
    """The op types a case's model uses (its top-level graph), keyed as ``CONVERTERS`` is
    (``ai.onnx.preview.FlexAttention`` outside the default domain)."""
    from .graph import op_key

    return {op_key(node) for node in case.model.graph.node}


#: The index of the cases for one ``onnx`` version (see the module docstring).
INDEX_FILE = Path(__file__).with_name("conformance_cases.json")


@dataclass(frozen=True)
class Entry:
    """One generated case, known without generating it."""

    name: str
    module: str
    """The generator module (``onnx.backend.test.case.node.abs``) whose import makes it."""
    op_types: frozenset[str]
    """Its model's top-level op types (``op_types``)."""


def index() -> list[Entry]:
    """Every case the installed ``onnx`` generates, in generation order, read from
    ``INDEX_FILE`` when it was written for this ``onnx`` version, generated otherwise."""
    import onnx

    try:
        saved = json.loads(INDEX_FILE.read_text())
    except FileNotFoundError:
        saved = {}
    if saved.get("onnx") == onnx.__version__:
        return [
            Entry(name, module, frozenset(ops))
            for module, entries in saved["modules"].items()
            for name, ops in entries
        ]
    return generate_index()


def generate_index() -> list[Entry]:
    """The index by generating every case, one generator module at a time (``onnx``'s own
    ``collect_testcases`` order); in a process that has generated none yet."""
    import onnx.backend.test.case.node as node
    from onnx import ONNX_ML

    made = node._NodeTestCases
    if made:
        raise RuntimeError("generate_index needs a process in which no case was generated")
    entries: list[Entry] = []

    def walk(package: Any) -> None:  # onnx.backend.test.case.utils.import_recursive
        for _, name, is_package in pkgutil.iter_modules(package.__path__):
            module_name = f"{package.__name__}.{name}"
            if not ONNX_ML and module_name.startswith(f"{node.__name__}.ai_onnx_ml"):
                continue
            start = len(made)
            module = importlib.import_module(module_name)
            entries.extend(Entry(c.name, module_name, frozenset(op_types(c))) for c in made[start:])
            if is_package:
                walk(module)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the generators divide by zero on purpose
        walk(node)
    return entries


def write_index() -> int:
    """Writes ``INDEX_FILE`` for the installed ``onnx``; the number of cases."""
    import onnx

    modules: dict[str, list[tuple[str, list[str]]]] = {}
    entries = generate_index()
    for e in entries:
        modules.setdefault(e.module, []).append((e.name, sorted(e.op_types)))
    lines = [f'{{"onnx": {json.dumps(onnx.__version__)}, "modules": {{']
    for i, (module, cases_) in enumerate(modules.items()):
        end = "," if i < len(modules) - 1 else ""
        lines.append(f"{json.dumps(module)}: {json.dumps(cases_, separators=(',', ':'))}{end}")
    INDEX_FILE.write_text("\n".join([*lines, "}}"]) + "\n")
    return len(entries)


def case(entry: Entry) -> Any:
    """The case ``entry`` names, generated by importing its generator module alone."""
    import onnx.backend.test.case.node as node

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        importlib.import_module(entry.module)
    for c in node._NodeTestCases:
        if c.name == entry.name:
            return c
    raise LookupError(f"{entry.module} generates no case {entry.name}")


def run_case(case: Any) -> Outcome:
    """Import, compile and run one case (see the module docstring)."""
    import dynshape
    import dynshape.onnx

    model, data_sets = _frozen(case)
    sequences, empty = _structure(model, data_sets)
    try:
        imported = dynshape.onnx.import_model(model, sequences=sequences, empty=empty)
        program = imported.program
    except ModelImportError as e:
        text = str(e)
        status = "unsupported" if any(m in text for m in _UNSUPPORTED) else "failed"
        return Outcome(case.name, status, text)
    try:
        vm = dynshape.VirtualMachine(dynshape.compile(program))
    except DynShapeError as e:
        return Outcome(case.name, "failed", f"compile: {e}")
    declared = [v for v in model.graph.input if v.name not in _weights(model)]
    for inputs, expected in data_sets:
        args = _flat_inputs(imported.inputs, declared, inputs)
        if args is None:
            return Outcome(case.name, "unsupported", "data sets with sequences of other lengths")
        try:
            with np.errstate(all="ignore"):
                got = vm.run(*args)
        except DynShapeError as e:
            return Outcome(case.name, "failed", f"run: {e}")
        outputs = list(got) if isinstance(got, tuple) else [got]
        outputs = regroup(imported.outputs, outputs)
        if len(outputs) != len(expected):
            return Outcome(case.name, "failed", f"{len(outputs)} outputs, expected {len(expected)}")
        for i, (g, w) in enumerate(zip(outputs, expected, strict=True)):
            problem = _compare_structured(g, w, case.rtol, case.atol)
            if problem:
                return Outcome(case.name, "failed", f"output {i}: {problem}")
    return Outcome(case.name, "passed")


def _array(value: Any, dtype: Any) -> np.ndarray:
    """A data set's value as an array of the declared dtype (some generators store tensors as
    ``TensorProto``s, or arrays of objects)."""
    from onnx import TensorProto, numpy_helper

    if isinstance(value, TensorProto):
        value = numpy_helper.to_array(value)
    array = np.asarray(value)
    return array.astype(dtype) if array.dtype == object and dtype is not None else array


def _structure(model: Any, data_sets: list[Any]) -> tuple[dict[str, list[int]], set[str]]:
    """The sequence inputs' element ranks (their lengths) and the empty optional inputs, as
    the first data set has them (the importer needs them: ``sequence.py``)."""
    sequences: dict[str, list[int]] = {}
    empty: set[str] = set()
    declared = [v for v in model.graph.input if v.name not in _weights(model)]
    if not data_sets:
        return sequences, empty
    for value, given in zip(declared, data_sets[0][0], strict=False):
        if value.type.WhichOneof("value") == "tensor_type":
            continue
        if given is None:
            empty.add(value.name)
        elif isinstance(given, list):
            sequences[value.name] = [np.ndim(_array(a, None)) for a in given]
    return sequences, empty


def _flat_inputs(slots: list[Any], declared: list[Any], inputs: list[Any]) -> list[Any] | None:
    """A data set's inputs as the program's flat tensors (a sequence's elements in order, an
    empty optional none); None when a sequence's length differs from the imported one."""
    by_name = {slot.name: slot for slot in slots}
    args: list[Any] = []
    for value, given in zip(declared, inputs, strict=False):
        slot, dtype = by_name.get(value.name), _declared(value)
        if slot is None or slot.kind == "tensor":
            args.append(_array(given, dtype))
        elif not slot.present:
            if given is not None:
                return None
        elif slot.kind.endswith("sequence"):
            if not isinstance(given, list) or len(given) != slot.count:
                return None  # (a rank that differs is refused by the VM's argument checks)
            args += [_array(a, dtype) for a in given]
        else:
            args.append(_array(given, dtype))
    return args


def _compare_structured(got: Any, want: Any, rtol: float, atol: float) -> str:
    """``_compare``, through sequences (lists) and empty optionals (None)."""
    if want is None or got is None:
        return "" if want is None and got is None else f"got {got!r}, expected {want!r}"
    if isinstance(want, list) or isinstance(got, list):
        if not isinstance(want, list) or not isinstance(got, list) or len(got) != len(want):
            size = len(got) if isinstance(got, list) else "a tensor"
            return f"a sequence of {size}, expected {len(want) if isinstance(want, list) else 1}"
        for k, (g, w) in enumerate(zip(got, want, strict=True)):
            problem = _compare(np.asarray(g), _array(w, None), rtol, atol)
            if problem:
                return f"element {k}: {problem}"
        return ""
    return _compare(np.asarray(got), _array(want, None), rtol, atol)


def _weights(model: Any) -> set[str]:
    return {t.name for t in model.graph.initializer}


def _declared(value: Any) -> Any:
    """The numpy dtype of a graph input's declared element type (of its tensors, for a
    sequence or an optional)."""
    from onnx import helper

    ty = value.type
    while ty.WhichOneof("value") in ("sequence_type", "optional_type"):
        kind = ty.WhichOneof("value")
        ty = ty.sequence_type.elem_type if kind == "sequence_type" else ty.optional_type.elem_type
    elem = ty.tensor_type.elem_type
    return helper.tensor_dtype_to_np_dtype(elem) if elem else None


def _frozen(case: Any) -> tuple[Any, list[tuple[list[Any], list[Any]]]]:
    """The case's model with its ``FROZEN`` inputs as initializers (the first data set's
    values), and the data sets without them. Cases whose data sets disagree on a frozen
    input keep it as an input (the importer then says why it needs a constant)."""
    from onnx import numpy_helper

    source = _lifted(case.model)
    graph = source.graph
    positions = {
        name
        for node in graph.node
        for i, name in enumerate(node.input)
        if name and i in FROZEN.get(node.op_type, ()) + _structural(node)
    }
    names = [v.name for v in graph.input]
    frozen = [
        i
        for i, name in enumerate(names)
        if name in positions
        and all(
            np.array_equal(_array(d[0][i], None), _array(case.data_sets[0][0][i], None))
            for d in case.data_sets
        )
    ]
    if not frozen:
        return source, list(case.data_sets)
    model = type(source)()
    model.CopyFrom(source)
    for i in frozen:
        array = _array(case.data_sets[0][0][i], None)
        model.graph.initializer.append(numpy_helper.from_array(array, names[i]))
    keep = [v for i, v in enumerate(model.graph.input) if i not in frozen]
    del model.graph.input[:]
    model.graph.input.extend(keep)
    data = [
        ([a for i, a in enumerate(ins) if i not in frozen], outs) for ins, outs in case.data_sets
    ]
    return model, data


def _structural(node: Any) -> tuple[int, ...]:
    """The input positions of ``node`` that decide the structure of a sequence or an optional
    (the importer needs them at import, ``sequence.py``): a ``Loop``'s trip count and condition
    when it carries one, an ``If``'s condition when its branches return one."""
    graphs = {a.name: a.g for a in node.attribute if a.HasField("g")}

    def tensors(values: Any) -> bool:
        return all(v.type.WhichOneof("value") in (None, "tensor_type") for v in values)

    if node.op_type == "Loop" and "body" in graphs and not tensors(graphs["body"].input[2:]):
        return (0, 1)
    if (
        node.op_type == "If"
        and "then_branch" in graphs
        and not tensors(graphs["then_branch"].output)
    ):
        return (0,)
    return ()


def _lifted(model: Any) -> Any:
    """``model`` restamped at the importer's lowest opset when it is written at an older one
    and every op it uses has, by the ``onnx`` package's own schemas, the same definition at
    both (``since_version`` at or below the model's opset): the same model, so its case is in
    scope. Only top-level graphs without subgraphs qualify. The NonMaxSuppression cases are at
    opset 11 and the logical ones at 1 and 7; ops redefined since stay out of scope."""
    from onnx import defs

    floor = OPSETS.start
    opsets = [o for o in model.opset_import if o.domain in ("", "ai.onnx")]
    if len(opsets) != 1 or opsets[0].version >= floor:
        return model
    version = opsets[0].version
    for node in model.graph.node:
        if node.domain not in ("", "ai.onnx") or any(a.g.node or a.graphs for a in node.attribute):
            return model
        try:
            since = defs.get_schema(node.op_type, floor).since_version
        except defs.SchemaError:
            return model
        if since > version:
            return model
    lifted = type(model)()
    lifted.CopyFrom(model)
    for o in lifted.opset_import:
        if o.domain in ("", "ai.onnx"):
            o.version = floor
    return lifted


def _compare(got: np.ndarray, want: np.ndarray, rtol: float, atol: float) -> str:
    if got.shape != want.shape:
        return f"shape {got.shape}, expected {want.shape}"
    if EXTENDED_KINDS.get(want.dtype.name) == "f":  # bfloat16, float8_*: compared as float64
        if got.dtype != want.dtype:
            return f"dtype {got.dtype}, expected {want.dtype}"
        return _compare(got.astype(np.float64), want.astype(np.float64), rtol, atol)
    if want.dtype.kind in "fc":
        if not np.allclose(got.astype(want.dtype), want, rtol=rtol, atol=atol, equal_nan=True):
            worst = np.nanmax(np.abs(got.astype(np.float64) - want.astype(np.float64)))
            return f"values differ (max abs difference {worst:.3g})"
    elif not np.array_equal(got, want):
        return "values differ"
    if got.dtype != want.dtype:
        return f"dtype {got.dtype}, expected {want.dtype}"
    return ""


def reasons(detail: str) -> list[str]:
    """The reasons an importer error gives, one per problem, without node names: ``unsupported
    op Acos``, ``Cast: unsupported: Cast to element type 16 is not supported``."""
    lines = [line.strip() for line in detail.splitlines()]
    problems = lines[1:] if len(lines) > 1 and lines[0].endswith("problem(s)") else lines[:1]
    found = []
    for line in problems:
        op = re.match(r"unsupported op (\S+)", line)
        if op:
            found.append(f"unsupported op {op.group(1)}")
            continue
        node = re.match(r"node (\S+) \([^)]*\): (.*)", line)
        found.append(f"{node.group(1)}: {node.group(2)}" if node else line)
    return found


def run_all(selected: Iterable[Any] | None = None) -> Iterator[Outcome]:
    """``run_case`` over ``selected`` (default: every case)."""
    for case in selected if selected is not None else cases():
        try:
            yield run_case(case)
        except Exception as e:  # a bug of ours: counted, named, never hidden
            yield Outcome(case.name, "failed", f"internal error: {type(e).__name__}: {e}")


if __name__ == "__main__":
    print(f"{write_index()} cases -> {INDEX_FILE}", file=sys.stderr)
