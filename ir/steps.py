"""The op calls a step plan numbers, and the check that a plan fits its function's body.

A step (``ir.Step``) names an op call of a primitive's body by its number in evaluation order:
post-order, operands left to right, a shared node once (``multiply(add(%p0, %p1), %p0)`` has
``add`` as 0 and ``multiply`` as 1). ``step_calls`` resolves the steps to those calls and checks
what the body alone decides: each number names a call of the stated op, every call runs exactly
once, after the calls it reads, and scratch slots are numbered in order of first use. The parser
runs it on a ``Steps`` text once (errors located at the step); what needs types (destination
counts and types, and that no step overwrites a value still needed) the lowering checks
(``dynshape/analysis/recorded_plan.py``).
"""

from __future__ import annotations

from collections.abc import Sequence

from .errors import IRError
from .expr import Call, Expr, Tuple, TupleGetItem
from .function_attrs import Step
from .graph import post_order_uses


class StepsError(IRError):
    """A step plan does not fit its body; ``step`` is the index of the step at fault, if one
    is (the parser points at it)."""

    def __init__(self, message: str, step: int | None = None) -> None:
        super().__init__(message)
        self.step = step


def step_operands(node: Expr) -> list[tuple[Expr, None]]:
    """The nodes a step plan's walks descend into from ``node`` (in ``post_order_uses`` form)."""
    if isinstance(node, Call):
        return [(a, None) for a in node.args]
    if isinstance(node, Tuple):
        return [(f, None) for f in node.fields]
    if isinstance(node, TupleGetItem):
        return [(node.tuple_value, None)]
    return []


def op_calls(body: Expr) -> list[Call]:
    """The op calls of a primitive's ``body`` in evaluation order: what a step's number names."""
    order, _ = post_order_uses(body, step_operands, None)
    return [n for n in order if isinstance(n, Call) and n.op is not None]


def producers(e: Expr) -> list[Call]:
    """The op calls whose results ``e`` reads (through tuples and projections)."""
    if isinstance(e, Call) and e.op is not None:
        return [e]
    if isinstance(e, Tuple):
        return [p for f in e.fields for p in producers(f)]
    if isinstance(e, TupleGetItem):
        return producers(e.tuple_value)
    return []


def step_calls(body: Expr, steps: Sequence[Step]) -> list[Call]:
    """The op call each of ``steps`` runs, in step order, checked against ``body`` (see the
    module docstring). Raises ``StepsError``; its message completes "the Steps attribute"."""
    calls = op_calls(body)
    ran: list[Call] = []
    step_of: dict[Call, int] = {}
    slots = 0  # scratch slots used so far
    for i, step in enumerate(steps):
        if step.call >= len(calls):
            raise StepsError(f"names call {step.call}, but the body has {len(calls)} op calls", i)
        call = calls[step.call]
        assert call.op is not None
        if call.op.name != step.op:
            raise StepsError(f"says call {step.call} is {step.op}, but it is {call.op.name}", i)
        if call in step_of:
            raise StepsError(f"runs call {step.call} ({step.op}) twice", i)
        step_of[call] = i
        ran.append(call)
        slots = _check_slots(step, i, slots)
    missing = [f"{k} ({c.op.name})" for k, c in enumerate(calls) if c not in step_of and c.op]
    if missing:
        raise StepsError(f"never runs call {', '.join(missing)}")
    for i, call in enumerate(ran):
        for arg in call.args:
            for p in producers(arg):
                if step_of[p] > i:
                    raise StepsError(
                        f"runs {_what(call, i)} before {_what(p, step_of[p])}, which it reads", i
                    )
    return ran


def _check_slots(step: Step, i: int, slots: int) -> int:
    """How many scratch slots are used after step ``i``, given ``slots`` before it: slots are
    numbered in order of first use (``t1`` never before ``t0``)."""
    for d in step.dests:
        if d.kind == "tmp" and d.index > slots:
            raise StepsError(f"uses scratch slot t{d.index} before t{slots}", i)
        if d.kind == "tmp" and d.index == slots:
            slots += 1
    return slots


def _what(call: Call, step: int) -> str:
    assert call.op is not None
    return f"{call.op.name} (step {step})"
