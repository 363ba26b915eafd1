"""The step plan carried in the IR: a primitive's ``Steps`` attribute, written and read back.

``manifest_alloc`` plans each fused primitive once (``step_plan.plan_steps``), allocates the
plan's scratch and records the plan on the function, so the lowering reads it instead of
planning again, and the plan prints and parses with the rest of the stage:

    fn (%p0: ..., %p1: ..., Primitive=1, Steps="0 add -> t0; 1 exp -> o0; 2 multiply -> o0")

Each step is ``<call> <op> -> <dest>[,<dest>...]``: ``<call>`` numbers the body's op calls in
evaluation order (post-order, operands left to right: ``multiply(add(%p0, %p1), %p0)`` has
``add`` as 0 and ``multiply`` as 1), ``<op>`` repeats that call's op (a stale number is caught),
and there is one destination per tensor leaf of the call's result: ``o<j>`` is output ``j``,
``t<k>`` scratch slot ``k`` (slots are numbered in order of first use).

A plan read from text is verified before it is trusted (``plan_from_attr``): every call exactly
once, after the calls it reads; destinations of the right count and type; and, simulating the
buffers step by step, no step overwrites a value that a later step or the result still needs
(an elementwise step may write over an operand it reads directly: numpy ufuncs allow exactly
overlapping operands). A wrong plan is a ``CompileError`` naming the primitive, never a wrong
answer.
"""

from __future__ import annotations

import re

import ir
from ir import Call, Expr, Function, OpPattern, TensorType, Tuple, TupleGetItem
from ir.graph import post_order_uses

from ..errors import CompileError
from .step_plan import Dest, StepPlan, operands, same_type, type_of

ATTR = "Steps"
"""The function attribute that holds a primitive's step plan."""

_IN_PLACE = (OpPattern.ELEMWISE, OpPattern.BROADCAST)
_STEP = re.compile(r"(\d+) ([A-Za-z_][A-Za-z0-9_.]*) -> ([ot]\d+(?:,[ot]\d+)*)")

Leaf = tuple[Call, int]
"""One tensor of a step's result: the call and the leaf's index in its result."""


def single_op(fn: Function) -> bool:
    """True if ``fn``'s body is one op applied to its parameters in order: a plain kernel, no
    step plan."""
    body = fn.body
    return (
        isinstance(body, Call)
        and body.op is not None
        and len(body.args) == len(fn.params)
        and all(a is p for a, p in zip(body.args, fn.params, strict=True))
    )


def op_calls(fn: Function) -> list[Call]:
    """The op calls of ``fn``'s body in evaluation order: what a step's ``<call>`` numbers."""
    order, _ = post_order_uses(fn.body, operands, None)
    return [n for n in order if isinstance(n, Call) and n.op is not None]


def plan_to_attr(fn: Function, plan: StepPlan) -> str:
    """The ``Steps`` attribute text of ``plan`` for ``fn``."""
    index = {c: i for i, c in enumerate(op_calls(fn))}
    steps = []
    for call in plan.calls:
        assert call.op is not None
        dests = ",".join(f"{'o' if d.kind == 'out' else 't'}{d.index}" for d in plan.dests[call])
        steps.append(f"{index[call]} {call.op.name} -> {dests}")
    return "; ".join(steps)


def plan_from_attr(fn: Function, name: str) -> StepPlan:
    """The step plan that ``fn``'s ``Steps`` attribute records, verified (see the module
    docstring); ``name`` names the primitive in errors."""
    text = fn.attrs[ATTR]
    problem = None
    plan = StepPlan([], {}, [], [])
    if not isinstance(text, str):
        problem = f"must be a string, got {text!r}"
    else:
        problem = _read(fn, text, plan) or _verify(fn, plan)
    if problem is not None:
        raise CompileError(f"primitive function {name}: its {ATTR} attribute {problem}", fn.span)
    return plan


def _read(fn: Function, text: str, plan: StepPlan) -> str | None:
    """Fill ``plan`` from ``text``; the problem with the text, if any."""
    calls = op_calls(fn)
    for i, step in enumerate(s.strip() for s in text.split(";")):
        m = _STEP.fullmatch(step)
        if m is None:
            return f"has a malformed step {step!r} (expected '<call> <op> -> o0' or 't0')"
        k, op_name, dests = int(m.group(1)), m.group(2), m.group(3).split(",")
        if k >= len(calls):
            return f"names call {k}, but the body has {len(calls)} op calls"
        call = calls[k]
        assert call.op is not None
        if call.op.name != op_name:
            return f"says call {k} is {op_name}, but it is {call.op.name}"
        if call in plan.dests:
            return f"runs call {k} ({op_name}) twice"
        plan.calls.append(call)
        plan.dests[call] = tuple(Dest("out" if d[0] == "o" else "tmp", int(d[1:])) for d in dests)
        leaves = ir.tensor_leaves(type_of(call))  # a count mismatch is _verify's to report
        for j, (d, leaf) in enumerate(zip(plan.dests[call], leaves, strict=False)):
            if d.kind == "tmp" and d.index > len(plan.slots):
                return f"uses scratch slot t{d.index} before t{len(plan.slots)}"
            if d.kind == "tmp" and d.index == len(plan.slots):
                plan.slots.append(leaf)
                plan.first_writer.append((i, j))
    missing = [f"{k} ({c.op.name})" for k, c in enumerate(calls) if c not in plan.dests and c.op]
    return f"never runs call {', '.join(missing)}" if missing else None


def _verify(fn: Function, plan: StepPlan) -> str | None:
    """The reason running ``plan`` would not compute ``fn``'s results, if any."""
    outputs = ir.tensor_leaves(type_of(fn.body))
    results = _leaf_refs(fn.body)
    if len(results) != len(outputs):
        return "cannot describe a body whose results are not all op results"
    step_of = {c: i for i, c in enumerate(plan.calls)}
    last_read: dict[Leaf, int] = {}
    for i, call in enumerate(plan.calls):
        for leaf in _reads(call):
            if step_of[leaf[0]] >= i:
                return f"runs {_what(call, plan)} before {_what(leaf[0], plan)}, which it reads"
            last_read[leaf] = i
    for leaf in results:
        last_read[leaf] = len(plan.calls)  # the results are read at the end
    holder: dict[Dest, Leaf] = {}
    where: dict[Leaf, Dest] = {}
    for i, call in enumerate(plan.calls):
        leaves, dests = ir.tensor_leaves(type_of(call)), plan.dests[call]
        what = _what(call, plan)
        if len(dests) != len(leaves):
            return f"gives {what} {len(dests)} destinations for {len(leaves)} results"
        reads = _reads(call)
        if any(holder.get(where[leaf]) != leaf for leaf in reads):
            return f"lets {what} read a value already overwritten"
        direct = _direct_reads(call)
        in_place = call.op is not None and call.op.pattern in _IN_PLACE and len(leaves) == 1
        for j, (d, ty) in enumerate(zip(dests, leaves, strict=True)):
            if d.kind == "out" and d.index >= len(outputs):
                return f"writes output {d.index} of {len(outputs)}"
            want = outputs[d.index] if d.kind == "out" else plan.slots[d.index]
            if not same_type(ty, want):
                return f"writes {what}'s {ty} into a buffer of {want}"
            old = holder.get(d)
            needed = -1 if old is None else last_read.get(old, -1)
            if needed > i:
                return f"lets {what} overwrite a value still needed"
            if needed == i and not (
                in_place and old in direct and reads.count(old) == direct.count(old)
            ):
                return f"lets {what} overwrite an operand it is reading"
            holder[d] = (call, j)
            where[(call, j)] = d
    for j, leaf in enumerate(results):
        if holder.get(Dest("out", j)) != leaf:
            return f"does not leave result {j} in output {j}"
    return None


def _what(call: Call, plan: StepPlan) -> str:
    assert call.op is not None
    return f"{call.op.name} (step {plan.calls.index(call)})"


def _reads(call: Call) -> list[Leaf]:
    """The step results ``call`` reads, one entry per read."""
    return [leaf for a in call.args for leaf in _leaf_refs(a)]


def _direct_reads(call: Call) -> list[Leaf]:
    """The step results ``call`` takes directly as a tensor argument (not inside a tuple)."""
    return [leaf for a in call.args if isinstance(type_of(a), TensorType) for leaf in _leaf_refs(a)]


def _leaf_refs(e: Expr) -> list[Leaf]:
    """The step results whose tensors ``e`` is made of, leaf by leaf."""
    if isinstance(e, Call) and e.op is not None:
        return [(e, k) for k in range(len(ir.tensor_leaves(type_of(e))))]
    if isinstance(e, Tuple):
        return [leaf for f in e.fields for leaf in _leaf_refs(f)]
    if isinstance(e, TupleGetItem):
        refs = _leaf_refs(e.tuple_value)
        ty = type_of(e.tuple_value)
        assert isinstance(ty, ir.TupleType)
        start = sum(len(ir.tensor_leaves(f)) for f in ty.fields[: e.index])
        return refs[start : start + len(ir.tensor_leaves(ty.fields[e.index]))]
    return []
