"""The end-to-end corpus: cases, input generation, and comparison with numpy references.

A ``Case`` is a complete module in the text format whose ``@main`` has symbolic dims, a plain
numpy ``reference`` of what ``@main`` computes, and a few ``bindings`` of its dimension symbols
(``{"n": 0}``, ``{"n": 1}``, ``{"n": 7}``). For each binding the harness draws inputs from the
types of ``@main``'s parameters: random values of the parameter's dtype, in the shape that the
binding gives. Ops that need valid data (indices in range, logarithms of positive values, non-zero
divisors, small exponents) get it through a per-parameter generator (``Case.inputs``, see
``positive``, ``ints``, ``index_into`` ...) or, for inputs that depend on each other or on the
binding in other ways, through ``Case.make_inputs``.

The cases live in ``programs/*.py`` (one module per area, each defining ``CASES``); they are
imported by file path, so the folder needs no ``__init__.py`` and shadows nothing.

Bindings policy: 3-5 per case, binding every symbol of ``@main``'s parameters (the symbols of a
parameter type must be plain names, so the VM can bind them at entry). Include a 0 and a 1 for
some symbol wherever the program allows it; where it does not (a max over an axis, a window
that must fit, ``topk``'s ``k <= dim``), the binding must satisfy the run-time checks that type
inference recorded for ``@main``, which ``test_corpus_type_checks`` evaluates. References are
plain numpy written from the op catalogue's definitions, never from ``vm.kernels``.

Adding a case: append a ``Case`` to the ``CASES`` of the right area; ``test_corpus_type_checks``
(no compiler needed) tells whether the program types, the bindings are legal and the reference
agrees with the inferred result type.
"""

from __future__ import annotations

import functools
import importlib.util
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

import ir
from dynshape.passes.infer_types import InferTypes

Binding = Mapping[str, int]
Gen = Callable[[np.random.Generator, tuple[int, ...], np.dtype, Binding], np.ndarray]
"""A generator of one input: ``(rng, shape, dtype, binding) -> array``."""

PROGRAMS = Path(__file__).parent / "programs"


@dataclass(frozen=True, eq=False)
class Case:
    """One program of the corpus, with its reference and the shapes it runs on."""

    name: str
    """Unique, used as the test id."""
    source: str
    """A complete module in the text format (its entry is ``@main``)."""
    reference: Callable[..., Any]
    """numpy: takes ``@main``'s inputs (copies), returns an array, a scalar or a (nested) tuple."""
    bindings: Sequence[Binding]
    """Values of the dimension symbols of ``@main``'s parameters, one run per entry."""
    inputs: Mapping[str, Gen] = field(default_factory=dict)
    """Generators for individual parameters (by name, without ``%``); others are random, and so
    are the fields of a tuple parameter."""
    make_inputs: Callable[[np.random.Generator, Binding], Sequence[Any]] | None = None
    """Builds every argument itself (overrides ``inputs`` and the default generation)."""
    rtol: float | None = None
    """Relative tolerance for float results (default: by dtype, see ``TOLERANCES``)."""
    atol: float | None = None
    """Absolute tolerance for float results (default: by dtype)."""

    def __post_init__(self) -> None:
        if not self.bindings:
            raise ValueError(f"case {self.name}: needs at least one binding")


# ---- loading the corpus ----------------------------------------------------------------------


@functools.cache
def all_cases() -> tuple[Case, ...]:
    """Every case of ``programs/*.py``, in file order; names are unique."""
    cases: list[Case] = []
    for path in sorted(PROGRAMS.glob("*.py")):
        spec = importlib.util.spec_from_file_location(f"e2e_programs_{path.stem}", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        cases.extend(module.CASES)
    seen: set[str] = set()
    for case in cases:
        if case.name in seen:
            raise ValueError(f"duplicate case name {case.name!r}")
        seen.add(case.name)
    return tuple(cases)


def case_binding_params() -> list[tuple[Case, Binding]]:
    """``(case, binding)`` for every binding of every case."""
    return [(c, b) for c in all_cases() for b in c.bindings]


def binding_id(binding: Binding) -> str:
    """A short test id for a binding: ``n=0,m=3`` (``-`` when empty)."""
    return ",".join(f"{k}={v}" for k, v in sorted(binding.items())) or "-"


@functools.cache
def parsed(case: Case) -> ir.Module:
    """The case's module, parsed (cached)."""
    return ir.parse(case.source, source_name=case.name)


@functools.cache
def typed(case: Case) -> tuple[ir.Module, InferTypes]:
    """The module after type inference, and the pass (for its deferred checks)."""
    infer = InferTypes()
    return infer.run(parsed(case)), infer


# ---- dims and input generation ---------------------------------------------------------------


def concrete_dim(dim: ir.Dim, binding: Binding) -> int | None:
    """The value of ``dim`` under ``binding``; None if it has an anonymous or unbound symbol."""
    if isinstance(dim, int):
        return dim
    names = {s.name for s in dim.free_symbols}
    if any(ir.is_anonymous(s) for s in dim.free_symbols) or not names <= set(binding):
        return None
    value = dim.xreplace({ir.sym(k): v for k, v in binding.items() if k in names})
    return int(value)


def concrete_shape(ty: ir.TensorType, binding: Binding, what: str) -> tuple[int, ...]:
    """The shape of a parameter type under ``binding`` (every dim must be determined)."""
    dims = []
    for axis, d in enumerate(ty.shape):
        value = concrete_dim(d, binding)
        if value is None:
            raise ValueError(f"{what}: axis {axis} ({d}) is not determined by the binding")
        dims.append(value)
    return tuple(dims)


def random_array(rng: np.random.Generator, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """Default values: normal floats, small signed ints, uint8 in [0, 10), fair bools."""
    if dtype.kind == "f":
        return rng.standard_normal(shape).astype(dtype)
    if dtype.kind == "b":
        return rng.random(shape) < 0.5
    if dtype.kind == "u":
        return rng.integers(0, 10, shape).astype(dtype)
    return rng.integers(-5, 6, shape).astype(dtype)


def generate(
    rng: np.random.Generator, ty: ir.Type, binding: Binding, gen: Gen | None, what: str
) -> Any:
    """One argument of type ``ty`` (a tensor, or a nested tuple of them)."""
    if isinstance(ty, ir.TupleType):
        return tuple(
            generate(rng, f, binding, None, f"{what}[{i}]") for i, f in enumerate(ty.fields)
        )
    if not isinstance(ty, ir.TensorType):
        raise ValueError(f"{what}: cannot generate a value of type {ty}")
    shape = concrete_shape(ty, binding, what)
    dtype = np.dtype(ty.dtype)
    value = gen(rng, shape, dtype, binding) if gen else random_array(rng, shape, dtype)
    value = np.asarray(value)
    if value.shape != shape or value.dtype != dtype:
        raise ValueError(f"{what}: generated {value.dtype}{value.shape}, wanted {dtype}{shape}")
    return value


def seed_for(case: Case, binding: Binding) -> int:
    """A deterministic seed per case and binding."""
    return zlib.crc32(f"{case.name}:{binding_id(binding)}".encode())


def make_inputs(case: Case, binding: Binding) -> list[Any]:
    """The arguments of ``@main`` for one binding (deterministic)."""
    rng = np.random.default_rng(seed_for(case, binding))
    if case.make_inputs is not None:
        return list(case.make_inputs(rng, binding))
    main = parsed(case)["main"]
    unknown = set(case.inputs) - {p.name_hint for p in main.params}
    if unknown:
        raise ValueError(f"case {case.name}: generators for unknown parameters {sorted(unknown)}")
    args = []
    for p in main.params:
        if p.type_annotation is None:
            raise ValueError(f"case {case.name}: parameter %{p.name_hint} needs a type")
        args.append(
            generate(
                rng, p.type_annotation, binding, case.inputs.get(p.name_hint), f"%{p.name_hint}"
            )
        )
    return args


def copy_args(args: Sequence[Any]) -> list[Any]:
    """Deep copies of arguments (nested tuples of arrays or scalars)."""

    def cp(a: Any) -> Any:
        if isinstance(a, tuple):
            return tuple(cp(x) for x in a)
        return np.array(a, copy=True) if isinstance(a, np.ndarray) else a

    return [cp(a) for a in args]


def run_reference(case: Case, args: Sequence[Any]) -> Any:
    """The reference on copies of ``args``, with numpy's warnings silenced."""
    with np.errstate(all="ignore"):
        return case.reference(*copy_args(args))


# ---- per-parameter generators ----------------------------------------------------------------


def uniform(lo: float, hi: float) -> Gen:
    """Floats uniform in ``[lo, hi)``."""
    return lambda rng, shape, dtype, b: rng.uniform(lo, hi, shape).astype(dtype)


def positive(lo: float = 0.1, hi: float = 4.0) -> Gen:
    """Positive floats (for log, sqrt, rsqrt, power bases)."""
    return uniform(lo, hi)


def away_from_zero(lo: float = 0.5, hi: float = 3.0) -> Gen:
    """Floats with ``lo <= |x| < hi`` and random signs (divisors)."""

    def gen(rng: np.random.Generator, shape: Any, dtype: np.dtype, b: Binding) -> np.ndarray:
        mag = rng.uniform(lo, hi, shape)
        return np.where(rng.random(shape) < 0.5, -mag, mag).astype(dtype)

    return gen


def ints(lo: int, hi: int) -> Gen:
    """Integers in ``[lo, hi)`` (of the parameter's dtype)."""
    return lambda rng, shape, dtype, b: rng.integers(lo, hi, shape).astype(dtype)


def nonzero_ints(lo: int, hi: int) -> Gen:
    """Non-zero integers in ``[lo, hi)`` (divisors of integer division and mod)."""

    def gen(rng: np.random.Generator, shape: Any, dtype: np.dtype, b: Binding) -> np.ndarray:
        v = rng.integers(lo, hi - 1, shape)
        return np.where(v >= 0, v + 1, v).astype(dtype)

    return gen


def halves(lo: float = -4.0, hi: float = 4.0) -> Gen:
    """Multiples of 0.5 (ties for ``round``), mixed with a few arbitrary values."""

    def gen(rng: np.random.Generator, shape: Any, dtype: np.dtype, b: Binding) -> np.ndarray:
        v = rng.integers(int(lo * 2), int(hi * 2) + 1, shape) / 2.0
        noise = rng.uniform(lo, hi, shape)
        return np.where(rng.random(shape) < 0.7, v, noise).astype(dtype)

    return gen


def distinct(scale: float = 1.0) -> Gen:
    """Pairwise distinct values (a shuffled range): no ties for argmax, topk, max."""

    def gen(rng: np.random.Generator, shape: Any, dtype: np.dtype, b: Binding) -> np.ndarray:
        size = int(np.prod(shape, dtype=np.int64))
        values = rng.permutation(size) - size // 2
        out = values.reshape(shape) * scale
        if dtype.kind == "f":
            out = out + rng.uniform(0.0, 0.25, shape) * scale
        return out.astype(dtype)

    return gen


def bools(p_true: float = 0.5) -> Gen:
    """Bools, true with probability ``p_true``."""
    return lambda rng, shape, dtype, b: rng.random(shape) < p_true


def index_into(bound: Callable[[Binding], int], negative: bool = False) -> Gen:
    """Indices in ``[0, bound(binding))`` (also ``[-bound, 0)`` when ``negative``)."""

    def gen(rng: np.random.Generator, shape: Any, dtype: np.dtype, b: Binding) -> np.ndarray:
        n = bound(b)
        if n == 0:
            if int(np.prod(shape, dtype=np.int64)):
                raise ValueError("cannot draw indices into an empty axis")
            return np.zeros(shape, dtype)
        return rng.integers(-n if negative else 0, n, shape).astype(dtype)

    return gen


def fixed(value: Callable[[Binding], Any]) -> Gen:
    """A value computed from the binding (e.g. a loop count or a slice bound)."""
    return lambda rng, shape, dtype, b: np.asarray(value(b), dtype=dtype).reshape(shape)


# ---- comparison ------------------------------------------------------------------------------

TOLERANCES = {
    "float16": (1e-2, 1e-2),
    "float32": (1e-4, 1e-5),
    "float64": (1e-9, 1e-12),
}
"""Default ``(rtol, atol)`` per float dtype."""


def result_type(case: Case) -> ir.Type:
    """The type of ``@main``'s result: the declared one if any (type inference checks that the
    body's type refines to it, at run time where it cannot prove it), else the inferred one."""
    module, _ = typed(case)
    main = module["main"]
    ty = main.ret_type or main.body.ty
    assert ty is not None
    return ty


def _kind(dtype: np.dtype) -> str:
    return {"b": "bool", "i": "int", "u": "int", "f": "float"}.get(dtype.kind, dtype.kind)


def check_against_type(value: Any, ty: ir.Type, binding: Binding, where: str = "result") -> None:
    """``value`` (a reference's output) has the structure, shape and dtype kind of ``ty``.

    Dims that are anonymous (``?``) or mention symbols outside ``binding`` are not checked.
    """
    if isinstance(ty, ir.TupleType):
        assert isinstance(value, tuple), f"{where}: expected a tuple {ty}, got {type(value)}"
        assert len(value) == len(ty.fields), f"{where}: expected {len(ty.fields)} fields"
        for i, (v, t) in enumerate(zip(value, ty.fields, strict=True)):
            check_against_type(v, t, binding, f"{where}[{i}]")
        return
    assert isinstance(ty, ir.TensorType), f"{where}: unexpected type {ty}"
    arr = np.asarray(value)
    want = np.dtype(ty.dtype)
    assert _kind(arr.dtype) == _kind(want), f"{where}: reference dtype {arr.dtype}, type {ty}"
    assert arr.ndim == len(ty.shape), f"{where}: reference shape {arr.shape}, type {ty}"
    for axis, d in enumerate(ty.shape):
        value_d = concrete_dim(d, binding)
        if value_d is not None:
            assert arr.shape[axis] == value_d, (
                f"{where}: reference shape {arr.shape}, type {ty} (axis {axis} = {value_d})"
            )


def assert_matches(
    actual: Any,
    expected: Any,
    ty: ir.Type,
    rtol: float | None = None,
    atol: float | None = None,
    where: str = "result",
) -> None:
    """The VM's ``actual`` equals the reference's ``expected``; ``ty`` is the inferred type.

    The VM's dtype must be the type's; ints and bools compare exactly, floats with the
    tolerances of their dtype (or the case's). The reference may compute in another precision
    or integer width: it is converted to the type's dtype (checking nothing is lost for ints).
    """
    if isinstance(ty, ir.TupleType):
        assert isinstance(actual, tuple), f"{where}: expected a tuple, got {type(actual)}"
        assert len(actual) == len(ty.fields), f"{where}: {len(actual)} fields, want {ty}"
        for i, (a, e, t) in enumerate(zip(actual, expected, ty.fields, strict=True)):
            assert_matches(a, e, t, rtol, atol, f"{where}[{i}]")
        return
    assert isinstance(ty, ir.TensorType)
    got = np.asarray(actual)
    want_dtype = np.dtype(ty.dtype)
    exp = np.asarray(expected)
    assert got.dtype == want_dtype, f"{where}: dtype {got.dtype}, expected {want_dtype}"
    assert got.shape == exp.shape, f"{where}: shape {got.shape}, expected {exp.shape}"
    if want_dtype.kind == "f":
        r, a = TOLERANCES[want_dtype.name]
        np.testing.assert_allclose(
            got.astype(np.float64),
            exp.astype(np.float64),
            rtol=r if rtol is None else rtol,
            atol=a if atol is None else atol,
            err_msg=where,
        )
        return
    converted = exp.astype(want_dtype)
    if exp.dtype.kind in "iu" and want_dtype.kind in "iu":
        assert np.array_equal(converted.astype(exp.dtype), exp), (
            f"{where}: the reference's values do not fit {want_dtype}"
        )
    np.testing.assert_array_equal(got, converted, err_msg=where)


def assert_same(first: Any, second: Any, where: str = "result") -> None:
    """Two VM results are identical (dtype, shape and values, NaN equal to NaN)."""
    if isinstance(first, tuple):
        assert isinstance(second, tuple) and len(first) == len(second), where
        for i, (a, b) in enumerate(zip(first, second, strict=True)):
            assert_same(a, b, f"{where}[{i}]")
        return
    a, b = np.asarray(first), np.asarray(second)
    assert a.dtype == b.dtype and a.shape == b.shape, (
        f"{where}: {a.dtype}{a.shape} vs {b.dtype}{b.shape}"
    )
    np.testing.assert_array_equal(a, b, err_msg=where)


# ---- what the corpus covers ------------------------------------------------------------------


class _Survey(ir.ExprVisitor):
    """Collects the ops, globals called and ``if`` nodes of a function."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: set[str] = set()
        self.calls: list[ir.Call] = []
        self.ifs = 0

    def visit_call(self, call: ir.Call) -> None:
        if isinstance(call.callee, ir.OpDef):
            self.ops.add(call.callee.name)
        elif isinstance(call.callee, ir.GlobalVar):
            self.calls.append(call)
        super().visit_call(call)

    def visit_if(self, node: ir.If) -> None:
        self.ifs += 1
        super().visit_if(node)


@dataclass
class Features:
    """What one case's module uses."""

    ops: set[str] = field(default_factory=set)
    ifs: int = 0
    recursive: bool = False
    global_calls: int = 0
    symbolic_global_args: bool = False
    tuple_params: bool = False
    nested_tuple_params: bool = False
    nested_tuple_results: bool = False
    tuple_results: bool = False
    rank0_params: bool = False
    dtypes: set[str] = field(default_factory=set)


def _tuple_depth(ty: ir.Type | None) -> int:
    if isinstance(ty, ir.TupleType):
        return 1 + max((_tuple_depth(f) for f in ty.fields), default=0)
    return 0


def _has_symbolic_dims(ty: ir.Type | None) -> bool:
    if isinstance(ty, ir.TupleType):
        return any(_has_symbolic_dims(f) for f in ty.fields)
    return isinstance(ty, ir.TensorType) and any(not isinstance(d, int) for d in ty.shape)


def _dtypes(ty: ir.Type | None, out: set[str]) -> None:
    if isinstance(ty, ir.TupleType):
        for f in ty.fields:
            _dtypes(f, out)
    elif isinstance(ty, ir.TensorType):
        out.add(ty.dtype)


@functools.cache
def features(case: Case) -> Features:
    """The ops and constructs that ``case`` uses (of its typed module)."""
    module, _ = typed(case)
    feats = Features()
    graph: dict[str, set[str]] = {}
    for name in module:
        fn = module[name]
        survey = _Survey()
        survey.visit(fn.body)
        feats.ops |= survey.ops
        feats.ifs += survey.ifs
        feats.global_calls += len(survey.calls)
        graph[name] = {c.callee.name for c in survey.calls if isinstance(c.callee, ir.GlobalVar)}
        for call in survey.calls:
            if any(_has_symbolic_dims(a.ty) for a in call.args):
                feats.symbolic_global_args = True
        for p in fn.params:
            depth = _tuple_depth(p.type_annotation)
            feats.tuple_params |= depth >= 1
            feats.nested_tuple_params |= depth >= 2
            if isinstance(p.type_annotation, ir.TensorType) and not p.type_annotation.shape:
                feats.rank0_params = True
            _dtypes(p.type_annotation, feats.dtypes)
        depth = _tuple_depth(fn.body.ty)
        feats.tuple_results |= depth >= 1
        feats.nested_tuple_results |= depth >= 2
        _dtypes(fn.body.ty, feats.dtypes)
    feats.recursive = _has_cycle(graph)
    return feats


def _has_cycle(graph: Mapping[str, set[str]]) -> bool:
    """Whether some global reaches itself through calls."""

    def reaches(start: str, target: str, seen: set[str]) -> bool:
        for nxt in graph.get(start, ()):
            if nxt == target:
                return True
            if nxt not in seen:
                seen.add(nxt)
                if reaches(nxt, target, seen):
                    return True
        return False

    return any(reaches(g, g, set()) for g in graph)
