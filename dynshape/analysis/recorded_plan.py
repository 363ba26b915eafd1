"""The step plan recorded on a primitive (``fn.attrs.steps``): made from a plan, read into one.

``manifest_alloc`` plans each fused primitive once (``step_plan.plan_steps``), allocates the
plan's scratch and records the plan on the function as typed steps (``recorded_steps``), so the
lowering reads it instead of planning again, and the plan prints and parses with the rest of
the stage:

    fn (%p0: ..., %p1: ..., Primitive=1, Steps="0 add -> t0; 1 exp -> o0; 2 multiply -> o0")

(``ir.Step``: the number of an op call of the body, its op, and one destination per tensor
leaf of the call's result, ``o<j>`` output ``j`` or ``t<k>`` scratch slot ``k``, then a
``t<k>`` for its workspace when its op takes one, ``workspace.py``.)

What the body alone decides (each call once, of the stated op, after the calls it reads; slots
numbered in order of first use) the parser checked when it read the text, and
``ir.step_calls`` checks again as it resolves the steps to calls. ``recorded_plan`` then
verifies what needs types, simulating the buffers: destinations of the right count and type,
and no step overwriting a value that a later step or the result still needs (an elementwise
step may write over an operand it reads directly: numpy ufuncs allow exactly overlapping
operands). A wrong plan is a ``CompileError`` naming the primitive, never a wrong answer.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import ir
from ir import Call, Dest, Expr, Function, OpPattern, Step, TensorType, Tuple, TupleGetItem

from ..errors import CompileError
from .step_plan import StepPlan, same_type, type_of
from .workspace import step_leaves

_IN_PLACE = (OpPattern.ELEMWISE, OpPattern.BROADCAST)

Leaf = tuple[Call, int]
"""One tensor of a step's result: the call and the leaf's index in its result."""


def recorded_steps(fn: Function, plan: StepPlan) -> tuple[Step, ...]:
    """``plan`` for ``fn`` as the steps ``fn.attrs.steps`` records."""
    index = {c: i for i, c in enumerate(ir.op_calls(fn.body))}
    steps = []
    for call in plan.calls:
        assert call.op is not None
        steps.append(Step(index[call], call.op.name, plan.dests[call]))
    return tuple(steps)


def recorded_plan(fn: Function, name: str) -> StepPlan:
    """The step plan that ``fn.attrs.steps`` records, verified (see the module docstring);
    ``name`` names the primitive in errors."""
    steps = fn.attrs.steps
    assert steps is not None
    try:
        calls = ir.step_calls(fn.body, steps)
    except ir.StepsError as e:
        message = f"primitive function {name}: its Steps attribute {e.message}"
        raise CompileError(message, fn.span) from None
    plan = StepPlan(calls, {c: s.dests for c, s in zip(calls, steps, strict=True)}, [], [])
    problem = _Simulation(fn, plan).run()
    if problem is not None:
        raise CompileError(f"primitive function {name}: its Steps attribute {problem}", fn.span)
    return plan


@dataclass
class _Simulation:
    """Runs ``plan`` on buffers that remember which value they hold."""

    fn: Function
    plan: StepPlan
    outputs: list[TensorType] = field(init=False)
    last_read: dict[Leaf, int] = field(default_factory=dict)
    holder: dict[Dest, Leaf] = field(default_factory=dict)
    where: dict[Leaf, Dest] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.outputs = ir.tensor_leaves(type_of(self.fn.body))

    def run(self) -> str | None:
        """The reason running the plan would not compute the function's results, if any."""
        results = _leaf_refs(self.fn.body)
        if len(results) != len(self.outputs):
            return "cannot describe a body whose results are not all op results"
        for i, call in enumerate(self.plan.calls):
            for leaf in _reads(call):
                self.last_read[leaf] = i
        for leaf in results:
            self.last_read[leaf] = len(self.plan.calls)  # the results are read at the end
        for i, call in enumerate(self.plan.calls):
            problem = self.step(i, call)
            if problem is not None:
                return problem
        for j, leaf in enumerate(results):
            if self.holder.get(Dest("out", j)) != leaf:
                return f"does not leave result {j} in output {j}"
        return None

    def step(self, i: int, call: Call) -> str | None:
        """Run step ``i``, which computes ``call``; what goes wrong, if anything."""
        what = _what(call, i)
        leaves, dests = step_leaves(call), self.plan.dests[call]
        results = len(ir.tensor_leaves(type_of(call)))
        if len(dests) != len(leaves):
            counted = f"{results} results" + (" and its workspace" if results < len(leaves) else "")
            return f"gives {what} {len(dests)} destinations for {counted}"
        if any(d.kind != "tmp" for d in dests[results:]):
            return f"gives {what}'s workspace an output, not a scratch slot"
        reads = _reads(call)
        if any(self.holder.get(self.where[leaf]) != leaf for leaf in reads):
            return f"lets {what} read a value already overwritten"
        in_place = call.op is not None and call.op.pattern in _IN_PLACE and len(leaves) == 1
        direct = _direct_reads(call)
        for j, (d, ty) in enumerate(zip(dests, leaves, strict=True)):
            if d.kind == "out" and d.index >= len(self.outputs):
                return f"writes output {d.index} of {len(self.outputs)}"
            if d.kind == "tmp" and d.index == len(self.plan.slots):  # its first use: its type
                self.plan.slots.append(ty)
                self.plan.first_writer.append((i, j))
            want = self.outputs[d.index] if d.kind == "out" else self.plan.slots[d.index]
            if not same_type(ty, want):
                return f"writes {what}'s {ty} into a buffer of {want}"
            old = self.holder.get(d)
            needed = -1 if old is None else self.last_read.get(old, -1)
            if needed > i:
                return f"lets {what} overwrite a value still needed"
            if needed == i and not (
                in_place and old in direct and reads.count(old) == direct.count(old)
            ):
                return f"lets {what} overwrite an operand it is reading"
            self.holder[d] = (call, j)
            self.where[(call, j)] = d
        return None


def _what(call: Call, step: int) -> str:
    assert call.op is not None
    return f"{call.op.name} (step {step})"


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
