"""Helpers for text-in / text-out tests of passes, and checkers of what passes guarantee.

- ``check_pass(pass_, INPUT, EXPECTED)``: parse INPUT, infer its types, run the pass, and
  compare with ``parse(EXPECTED)`` by ``ir.structurally_equal``; on failure both are printed.
  The output must also re-infer to the types it carries and survive a print/parse round trip.
- ``assert_fused(module)``: the fuse_ops guarantee (every op call in a primitive, primitives
  well formed); ``assert_anf(module)``: the to_anf guarantee (let chains of flat values).
- ``check_pipeline(source)``: both passes on one program, every guarantee checked after each.
- ``assert_threads_agree(vm, inputs, expected)``: threads sharing a VM get their own answers.
- ``compile_without(pass_class, program)``: the default pipeline with one pass left out.
"""

from __future__ import annotations

import textwrap
import threading
from collections.abc import Sequence

import numpy as np

import ir
from dynshape.analysis.dataflow import use_graph
from dynshape.passes.base import ModulePass
from dynshape.passes.fuse_ops import RESHAPE_LIKE, FuseOps
from dynshape.passes.infer_types import InferTypes
from dynshape.passes.to_anf import ToANF
from ir import Call, Constant, Expr, Function, GlobalVar, If, Let, Module, OpPattern, Var
from ir import Tuple as TupleExpr
from ir.text import module_to_text

_ANCHORS = (OpPattern.REDUCTION, OpPattern.OUT_ELEMWISE_FUSABLE)


def parse_typed(source: str) -> tuple[Module, InferTypes]:
    """Parse ``source`` (dedented) and infer its types; also return the pass (its checks)."""
    infer = InferTypes()
    return infer.run(ir.parse(textwrap.dedent(source))), infer


def show(module: Module) -> str:
    """The module as text, without type comments (what EXPECTED texts are written as)."""
    return module_to_text(module, show_types=False)


def check_pass(pass_: ModulePass, source: str, expected: str) -> Module:
    """Run ``pass_`` on the typed ``source``; the result must equal ``expected``."""
    module, _ = parse_typed(source)
    out = pass_.run(module)
    want = ir.parse(textwrap.dedent(expected))
    assert ir.structurally_equal(out, want), (
        f"--- {pass_.name} gave:\n{show(out)}\n--- expected:\n{show(want)}"
    )
    assert_reinfers(out)
    assert_roundtrip(out)
    return out


def assert_reinfers(module: Module) -> Module:
    """Type inference on ``module`` gives exactly the types its nodes carry; returns it."""
    again = InferTypes().run(module)
    assert ir.structurally_equal(module, again, compare_types=True), (
        f"--- re-inferred types differ; carried:\n{module}\n--- re-inferred:\n{again}"
    )
    return again


def assert_roundtrip(module: Module) -> None:
    """The printed module parses back to an equal module, and prints the same again."""
    text = show(module)
    parsed = ir.parse(text)
    assert ir.structurally_equal(parsed, module), f"round trip changed:\n{text}"
    assert show(parsed) == text


def count_ops(module: Module) -> int:
    """The number of op calls in ``module``, primitive bodies included (each node once)."""
    seen: set[Expr] = set()
    stack: list[Expr] = list(module.values())
    count = 0
    while stack:
        node = stack.pop()
        if node in seen:
            continue
        seen.add(node)
        if isinstance(node, Call) and node.op is not None:
            count += 1
        stack.extend(_all_children(node))
    return count


def _all_children(node: Expr) -> list[Expr]:
    """Every child, entering primitive bodies too (unlike dataflow.children)."""
    if isinstance(node, Function):
        return [node.body]
    if isinstance(node, Call):
        return ([node.callee] if isinstance(node.callee, Expr) else []) + list(node.args)
    if isinstance(node, TupleExpr):
        return list(node.fields)
    if isinstance(node, ir.TupleGetItem):
        return [node.tuple_value]
    if isinstance(node, If):
        return [node.cond, node.then_branch, node.else_branch]
    if isinstance(node, Let):
        return [node.value, node.body]
    return []


# ---- fuse_ops --------------------------------------------------------------------------------
def assert_fused(module: Module, original: Module | None = None) -> None:
    """Check the fuse_ops guarantee on ``module`` (and that no op was lost from ``original``).

    Outside primitive functions there is no op call. Each primitive function is closed
    (uses only its parameters and constants), has tensor parameters all used, holds only op
    calls (and the tuples of tuple operands), at most one anchor (a reduction or dense-like op),
    and an opaque op only alone; it is marked ``Reshape=1`` iff it holds only reshape-like ops.
    """
    for name, fn in module.items():
        if fn.is_primitive:
            continue
        for node in use_graph(fn.body).order:
            if isinstance(node, Call) and node.op is not None:
                raise AssertionError(f"op call outside a primitive in @{name}: {node}")
            if isinstance(node, Function) and node.is_primitive:
                _assert_primitive(node, f"@{name}")
    if original is not None:
        assert count_ops(module) == count_ops(original), "fuse_ops lost or duplicated op calls"


def _assert_primitive(fn: Function, where: str) -> None:
    params = set(fn.params)
    used: set[Var] = set()
    ops: list[Call] = []
    for node in use_graph(fn.body).order:
        if isinstance(node, Var):
            assert node in params, f"primitive in {where} uses the free variable %{node.name_hint}"
            used.add(node)
        elif isinstance(node, Call):
            assert node.op is not None, f"primitive in {where} calls a function: {node}"
            ops.append(node)
        else:
            assert isinstance(node, (Constant, TupleExpr)), (
                f"primitive in {where} holds a {type(node).__name__}"
            )
    assert used == params, f"primitive in {where} has unused parameters"
    for p in fn.params:
        assert isinstance(p.type_annotation, ir.TensorType), f"{where}: %{p.name_hint} not a tensor"
    assert ops, f"empty primitive in {where}"
    patterns = [op.op.pattern for op in ops if op.op is not None]
    assert sum(p in _ANCHORS for p in patterns) <= 1, f"two anchors in a primitive in {where}"
    if OpPattern.OPAQUE in patterns:
        assert len(ops) == 1, f"an opaque op fused with others in {where}"
    reshape_only = all(op.op is not None and op.op.name in RESHAPE_LIKE for op in ops)
    assert fn.attrs.reshape == reshape_only, f"wrong Reshape mark in {where}"


# ---- to_anf ----------------------------------------------------------------------------------
def assert_anf(module: Module) -> None:
    """Check the to_anf guarantee: every scope outside primitives is a let chain ending in an
    atom, each let value has only atoms as operands, and no computation is bound twice."""
    bound: set[Expr] = set()
    for fn in module.values():
        if not fn.is_primitive:
            _assert_chain(fn.body, bound)


def _is_atom(node: Expr) -> bool:
    return isinstance(node, (Var, GlobalVar, Constant)) or (
        isinstance(node, Function) and node.is_primitive
    )


def _assert_chain(body: Expr, bound: set[Expr]) -> None:
    lets, body = ir.let_chain(body)
    for let in lets:
        value = let.value
        if not _is_atom(value):
            assert value not in bound, f"bound twice: {value}"
            bound.add(value)
            _assert_flat(value, bound)
    assert _is_atom(body), f"a scope ends in a {type(body).__name__}, not an atom: {body}"


def _assert_flat(value: Expr, bound: set[Expr]) -> None:
    if isinstance(value, If):
        assert _is_atom(value.cond), f"non-atomic condition: {value.cond}"
        _assert_chain(value.then_branch, bound)
        _assert_chain(value.else_branch, bound)
    elif isinstance(value, Function):
        _assert_chain(value.body, bound)
    else:
        assert isinstance(value, (Call, TupleExpr, ir.TupleGetItem)), f"bad let value {value}"
        for child in _all_children(value):
            assert _is_atom(child), f"non-atomic operand {child} in {value}"


# ---- both ------------------------------------------------------------------------------------
def check_pipeline(source: str) -> Module:
    """infer -> fuse_ops -> infer -> to_anf -> infer on ``source``, checking every guarantee:
    types and deferred checks unchanged, both passes idempotent, the text round-trips."""
    typed, infer = parse_typed(source)
    fused = FuseOps().run(typed)
    assert_fused(fused, typed)
    refused = InferTypes()
    retyped = refused.run(fused)
    assert ir.structurally_equal(fused, retyped, compare_types=True)
    assert _deferred(refused) == _deferred(infer), "fusion changed the run-time checks"
    assert ir.structurally_equal(FuseOps().run(retyped), fused), "fuse_ops is not idempotent"
    assert_roundtrip(fused)
    anf = ToANF().run(retyped)
    assert_anf(anf)
    assert_fused(anf, typed)
    assert_reinfers(anf)
    assert ir.structurally_equal(ToANF().run(anf), anf), "to_anf is not idempotent"
    assert_roundtrip(anf)
    return anf


def _deferred(infer: InferTypes) -> dict[str, list[tuple[str, str, str]]]:
    """The run-time checks per function, as facts about named inputs (the dims themselves may
    hold fresh ``?`` symbols, which differ from one inference to the next)."""
    return {
        name: sorted((c.kind, c.op_name, c.what) for c in checks)
        for name, checks in infer.deferred.items()
    }


def assert_threads_agree(
    vm: object, inputs: Sequence[np.ndarray], expected: Sequence[np.ndarray], calls: int = 10
) -> None:
    """One thread per input calls ``vm.run(input)`` ``calls`` times; every answer must be its
    expected one (within float32 rounding)."""
    failures: list[int] = []

    def work(i: int) -> None:
        for _ in range(calls):
            got = vm.run(inputs[i])  # type: ignore[attr-defined]
            if not np.allclose(got, expected[i], rtol=1e-5, atol=1e-5):
                failures.append(i)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(inputs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures, f"threads with inputs {sorted(set(failures))} got other answers"


def compile_without(pass_class: type[ModulePass], program: str) -> object:
    """``dynshape.compile(program)`` with ``pass_class``'s ``run`` returning its input (the
    program the pass's rewrite is compared with)."""
    import dynshape

    run = pass_class.run
    try:
        pass_class.run = lambda self, module: module  # type: ignore[method-assign]
        return dynshape.compile(program)
    finally:
        pass_class.run = run  # type: ignore[method-assign]
