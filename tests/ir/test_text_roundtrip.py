"""Round trips of the text format: the corpus, the seed, random modules and deep programs."""

from __future__ import annotations

from pathlib import Path

import pytest
import sympy
from hypothesis import HealthCheck, given, settings
from strategies import modules

import ir
from ir.text import module_to_text

HERE = Path(__file__).parent
CORPUS = sorted((HERE / "corpus").glob("*.txt"))
SEED = HERE.parent / "fixtures" / "seed_before.txt"  # the seed program, kept in the repo


def check_round_trip(m: ir.Module) -> str:
    """Assert parse(str(m)) equals m (both ways) and that printing is a fixed point."""
    text = str(m)
    again = ir.parse(text)
    assert ir.structurally_equal(again, m), text
    assert ir.structurally_equal(m, again), text
    assert str(again) == text
    return text


def test_corpus_is_big_enough() -> None:
    assert len(CORPUS) >= 40


@pytest.mark.parametrize("path", CORPUS, ids=[p.stem for p in CORPUS])
def test_corpus_round_trip(path: Path) -> None:
    m = ir.parse(path.read_text(), source_name=path.name)
    check_round_trip(m)


# ---- what the corpus covers ------------------------------------------------------------------


class _Census(ir.ExprVisitor):
    """Collects what a program uses: ops, node kinds, dtypes, types and dims."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: set[str] = set()
        self.kinds: set[type] = set()
        self.const_shapes: set[tuple[str, tuple[int, ...]]] = set()
        self.types: list[ir.Type] = []
        self.global_calls: list[str] = []
        self.primitive = False
        self.typed_lets = 0
        self.untyped_lets = 0
        self.nested_tuples = False

    def visit(self, expr: ir.Expr) -> None:
        self.kinds.add(type(expr))
        super().visit(expr)

    def visit_call(self, call: ir.Call) -> None:
        if call.op is not None:
            self.ops.add(call.op.name)
        if isinstance(call.callee, ir.GlobalVar):
            self.global_calls.append(call.callee.name)
        super().visit_call(call)

    def visit_constant(self, const: ir.Constant) -> None:
        self.const_shapes.add((const.value.dtype.name, const.value.shape))

    def visit_var(self, var: ir.Var) -> None:
        if var.type_annotation is not None:
            self.types.append(var.type_annotation)

    def visit_function(self, fn: ir.Function) -> None:
        self.primitive |= fn.is_primitive
        if fn.ret_type is not None:
            self.types.append(fn.ret_type)
        super().visit_function(fn)

    def visit_let(self, let: ir.Let) -> None:
        if let.var.type_annotation is None:
            self.untyped_lets += 1
        else:
            self.typed_lets += 1
        super().visit_let(let)

    def visit_tuple(self, tup: ir.Tuple) -> None:
        self.nested_tuples |= any(isinstance(f, ir.Tuple) for f in tup.fields)
        super().visit_tuple(tup)


def _census() -> tuple[_Census, list[ir.Module]]:
    census = _Census()
    parsed = [ir.parse(p.read_text(), source_name=p.name) for p in CORPUS]
    for m in parsed:
        for fn in m.values():
            census.visit(fn)
    return census, parsed


def test_corpus_uses_every_op() -> None:
    census, _ = _census()
    missing = set(ir.ops.BUILTIN_OP_NAMES) - census.ops
    assert not missing, f"no corpus program uses {sorted(missing)}"


def test_corpus_uses_every_expression_kind() -> None:
    census, _ = _census()
    kinds = {
        ir.Var,
        ir.GlobalVar,
        ir.Constant,
        ir.Call,
        ir.Function,
        ir.Let,
        ir.Tuple,
        ir.TupleGetItem,
        ir.If,
    }
    assert kinds <= census.kinds
    assert census.primitive
    assert census.typed_lets and census.untyped_lets
    assert census.nested_tuples


def test_corpus_uses_symbolic_and_anonymous_dims() -> None:
    census, parsed = _census()
    symbols = set().union(*(ir.type_symbols(t) for t in census.types))
    assert any(not ir.is_anonymous(s) for s in symbols)
    assert any(ir.is_anonymous(s) for s in symbols)
    dims = [d for t in census.types for leaf in _leaves(t) for d in leaf.shape]
    assert any(isinstance(d, sympy.Expr) and not d.is_Symbol for d in dims)  # 2*n, n // 2, ...
    # A '?0' repeated within one global: the same anonymous symbol in two parameter types.
    repeated = False
    for m in parsed:
        for fn in m.values():
            seen: set[sympy.Basic] = set()
            for p in fn.params:
                if p.type_annotation is None:
                    continue
                syms = {s for s in ir.type_symbols(p.type_annotation) if ir.is_anonymous(s)}
                repeated |= bool(syms & seen)
                seen |= syms
    assert repeated


def _leaves(ty: ir.Type) -> list[ir.TensorType]:
    if isinstance(ty, ir.TensorType):
        return [ty]
    if isinstance(ty, ir.TupleType):
        return [leaf for f in ty.fields for leaf in _leaves(f)]
    if isinstance(ty, ir.StorageType):
        return []
    return [leaf for p in (*ty.params, ty.ret) for leaf in _leaves(p)]


def test_corpus_uses_globals_recursion_and_constants() -> None:
    census, parsed = _census()
    assert any(len(m) >= 3 for m in parsed)
    recursive = any(name in _calls(fn) for m in parsed for name, fn in m.items())
    assert recursive
    dtypes = {dtype for dtype, _ in census.const_shapes}
    assert dtypes == ir.DTYPES
    shapes = {shape for _, shape in census.const_shapes}
    assert () in shapes
    assert any(len(s) >= 2 for s in shapes)
    assert any(0 in s for s in shapes)  # size-0 constants


def _calls(fn: ir.Function) -> set[str]:
    census = _Census()
    census.visit(fn)
    return set(census.global_calls)


# ---- the seed --------------------------------------------------------------------------------


def test_seed_before_round_trips() -> None:
    m = ir.parse(SEED.read_text(), source_name="before.txt")
    assert list(m) == ["main"]
    body = m.main.body
    assert isinstance(body, ir.Let)
    assert isinstance(body.value, ir.Call)
    fused = body.value.callee
    assert isinstance(fused, ir.Function) and fused.is_primitive
    assert body.body is body.var
    text = check_round_trip(m)
    assert "%1 = fn (%p0: Tensor[(10,), float32], %p1: Tensor[(10,), float32], Primitive=1)" in text


# ---- random modules --------------------------------------------------------------------------


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(modules())
def test_random_modules_round_trip(m: ir.Module) -> None:
    check_round_trip(m)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(modules(with_types=True))
def test_random_typed_modules_round_trip(m: ir.Module) -> None:
    text = str(m)
    again = ir.parse(text)
    assert ir.structurally_equal(again, m)
    # Inferred types are comments: what comes back is the module without them.
    assert str(again) == module_to_text(m, show_types=False)


# ---- deep programs ---------------------------------------------------------------------------

DEPTH = 3000


def test_deep_chain_of_graph_bindings() -> None:
    lines = ["def @main(%x: Tensor[(n,), float32]) -> Tensor[(n,), float32] {"]
    prev = "%x"
    for i in range(DEPTH):
        lines.append(f"  %{i} = add({prev}, 1f);")
        prev = f"%{i}"
    lines += [f"  add({prev}, 1f)", "}"]
    text = "\n".join(lines)
    m = ir.parse(text)
    assert check_round_trip(m) == text


def test_deep_nested_lets() -> None:
    lines = ["def @main(%x: Tensor[(n,), float32]) -> Tensor[(n,), float32] {"]
    prev = "%x"
    for i in range(DEPTH):
        lines.append(f"  let %v{i}: Tensor[(n,), float32] = add({prev}, 1f);")
        prev = f"%v{i}"
    lines += [f"  {prev}", "}"]
    text = "\n".join(lines)
    m = ir.parse(text)
    assert check_round_trip(m) == text


def test_deep_nesting_built_with_the_api() -> None:
    x = ir.Var("x", ir.TensorType((ir.sym("n"),)))
    body: ir.Expr = x
    for _ in range(DEPTH):
        body = ir.call("exp", body)
    lets: ir.Expr = body
    for i in range(DEPTH):
        lets = ir.Let(ir.Var(f"v{i}"), ir.call("negative", ir.const(float(i), "float32")), lets)
    check_round_trip(ir.Module({"main": ir.function([x], lets)}))


def test_deep_nested_ifs() -> None:
    c = ir.Var("c", ir.scalar("bool"))
    body: ir.Expr = c
    for _ in range(300):
        body = ir.If(c, body, ir.call("logical_not", c))
    check_round_trip(ir.Module({"main": ir.function([c], body)}))


def test_a_dim_the_printer_factors_round_trips_as_the_same_dim() -> None:
    # The planner makes ceiling(m*n/16 + 3*n/16); the printer shows ceil(n*(m + 3) / 16),
    # which parses back as a product: a different sympy tree for the same dim.
    n, m = ir.sym("n"), ir.sym("m")
    size = 64 * sympy.ceiling(m * n / 16 + 3 * n / 16)
    x = ir.Var("x", ir.TensorType((n, m), "float32"))
    module = ir.Module.from_main(ir.function([x], ir.call("memory.alloc_storage", size=size)))
    text = module_to_text(module)
    assert "ceil(n*(m + 3) / 16)" in text
    again = ir.parse(text)
    assert again["main"].body.attrs["size"] != size  # spelt differently ...
    assert ir.structurally_equal(again, module)  # ... and equal
    other = ir.Module.from_main(ir.function([x], ir.call("memory.alloc_storage", size=size + 1)))
    assert not ir.structurally_equal(other, module)
