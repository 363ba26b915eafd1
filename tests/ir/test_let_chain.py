"""``ir.let_chain``, the one walker of let chains, and the visitor and mutator built on it."""

from __future__ import annotations

import sys

import ir
from ir import Call, Expr, Let, TensorType, Var, call, let_chain


def _x() -> Var:
    return Var("x", TensorType((4,), "float32"))


def _chain(n: int, result: Expr) -> tuple[list[Let], Expr]:
    """``let %v0 = exp(%x); ...; let %v{n-1} = exp(%x); result`` and its lets, outermost first."""
    x = _x()
    body = result
    lets: list[Let] = []
    for i in reversed(range(n)):
        body = Let(Var(f"v{i}"), call("exp", x), body)
        lets.insert(0, body)
    return lets, body


def test_an_expression_that_is_not_a_let_is_an_empty_chain() -> None:
    x = _x()
    assert let_chain(x) == ([], x)
    e = call("exp", x)
    lets, result = let_chain(e, stop=lambda let: True)
    assert lets == [] and result is e


def test_the_lets_come_outermost_first_and_the_result_is_the_first_non_let_body() -> None:
    result = call("negative", _x())
    lets, head = _chain(3, result)
    got, end = let_chain(head)
    assert got == lets and [let.var.name_hint for let in got] == ["v0", "v1", "v2"]
    assert end is result


def test_a_let_inside_a_value_is_not_part_of_the_chain() -> None:
    inner = Let(Var("a"), call("exp", _x()), _x())
    outer = Let(Var("b"), inner, call("negative", _x()))
    lets, result = let_chain(outer)
    assert lets == [outer] and isinstance(result, Call)


def test_stop_ends_the_chain_before_the_first_let_it_is_true_for() -> None:
    lets, head = _chain(5, _x())
    got, end = let_chain(head, stop=lambda let: let is lets[3])
    assert got == lets[:3] and end is lets[3]


def test_stop_is_never_asked_about_the_first_let() -> None:
    lets, head = _chain(3, _x())
    asked: list[Let] = []

    def stop(let: Let) -> bool:
        asked.append(let)
        return True

    got, end = let_chain(head, stop)
    assert got == [head] and end is lets[1] and asked == [lets[1]]


def test_a_chain_longer_than_the_recursion_limit_is_walked_iteratively() -> None:
    n = max(200_000, 2 * sys.getrecursionlimit())
    result = _x()
    head: Expr = result
    for i in range(n):  # values are the variable itself: building op calls would be slow
        head = Let(Var(f"v{i}"), result, head)
    asked = 0

    def stop(let: Let) -> bool:
        nonlocal asked
        asked += 1
        return False

    lets, end = let_chain(head, stop)
    assert len(lets) == n and end is result
    assert asked == n - 1  # linear: one step per let (counted, not timed)


def _shared_value_and_body() -> tuple[Let, Let]:
    """``let %a = L; L`` where ``L = let %b = exp(%x); negative(%b)``: one let used as the
    value of another and as its body (a DAG may share a let like any node)."""
    b = Var("b")
    shared = Let(b, call("exp", _x()), call("negative", b))
    return Let(Var("a"), shared, shared), shared


def test_the_visitor_visits_a_shared_let_once() -> None:
    outer, _ = _shared_value_and_body()
    calls: list[Call] = []

    class Calls(ir.ExprVisitor):
        def visit_call(self, c: Call) -> None:
            calls.append(c)
            super().visit_call(c)

    Calls().visit(outer)
    assert sorted(c.op.name for c in calls if c.op is not None) == ["exp", "negative"]


def test_the_mutator_keeps_a_let_shared_when_it_rebuilds_it() -> None:
    outer, shared = _shared_value_and_body()

    class ExpToLog(ir.ExprMutator):
        def visit_call(self, c: Call) -> Expr:
            new = super().visit_call(c)
            assert isinstance(new, Call)
            if new.op is not None and new.op.name == "exp":
                return call("log", *new.args)
            return new

    rebuilt = ExpToLog().visit(outer)
    assert isinstance(rebuilt, Let) and rebuilt is not outer
    assert rebuilt.value is rebuilt.body  # still one node, not two copies
    assert "log(" in str(rebuilt) and "exp(" not in str(rebuilt)
    assert ir.structurally_equal(rebuilt.value, ExpToLog().visit(shared))


def test_a_let_shared_from_inside_a_chain_is_visited_once_and_stays_shared() -> None:
    lets, head = _chain(4, _x())
    both = ir.Tuple((head, lets[2]))  # the chain, and its tail from the third let on
    seen: list[Call] = []

    class Calls(ir.ExprVisitor):
        def visit_call(self, c: Call) -> None:
            seen.append(c)
            super().visit_call(c)

    Calls().visit(both)
    assert len(seen) == 4

    class Rename(ir.ExprMutator):
        def visit_var(self, var: Var) -> Expr:
            return Var(var.name_hint + "_", var.type_annotation) if var.name_hint != "x" else var

    rebuilt = Rename().visit(both)
    assert isinstance(rebuilt, ir.Tuple)
    new_lets, _ = let_chain(rebuilt.fields[0])
    assert [let.var.name_hint for let in new_lets] == ["v0_", "v1_", "v2_", "v3_"]
    assert new_lets[2] is rebuilt.fields[1]
