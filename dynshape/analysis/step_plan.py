"""Where each op call of a primitive function writes its result: an output, or a scratch buffer.

Computed once, by ``manifest_alloc``, which allocates the scratch buffers in the IR (so that
memory planning sees them) and records the plan on the primitive (``fn.attrs.steps``, printed
``Steps="..."``; ``recorded_plan.py``), which the lowering reads to build the fused kernel's
steps.

The rules, with the symbolic types in hand:

- steps run in dependency order, the operand with more ops under it first (as in Sethi-Ullman
  numbering: a short operand computed last can often overwrite a value that dies with it);
- the root writes the output(s);
- an intermediate also writes the output, in place, when it has the output's type, its only
  consumer is an elementwise or broadcast op that itself writes the output (so every step of an
  elementwise chain runs in the final buffer and needs no scratch); where several operands
  qualify, the heaviest does;
- an op with a workspace (``workspace.py``) gets a new slot for it after its result's
  destinations, written by that step only;
- any other intermediate gets a scratch *slot*. Slots are reused: an elementwise or broadcast
  step writes in place into the slot of an argument that dies at that step and has the result's
  type (numpy ufuncs allow exactly overlapping operands); otherwise a free slot of the same type
  (every value in it dead), else a new slot. A GELU written as eleven ops needs one slot, not
  nine.
"""

from __future__ import annotations

from dataclasses import dataclass

import ir
from ir import Call, Dest, Expr, Function, OpPattern, TensorType
from ir.graph import post_order_uses
from ir.steps import producers, step_operands

from ..errors import CompileError
from .workspace import workspace_type

_IN_PLACE = (OpPattern.ELEMWISE, OpPattern.BROADCAST)


@dataclass
class StepPlan:
    """The steps of a primitive function and where each writes."""

    calls: list[Call]
    """The op calls, in execution (dependency) order."""
    dests: dict[Call, tuple[Dest, ...]]
    """Per call, one destination per tensor leaf of its result."""
    slots: list[TensorType]
    """The type of each scratch slot, in the primitive's own symbols."""
    first_writer: list[tuple[int, int]]
    """Per slot, the (step, leaf) that writes it first (its run-time shape comes from there)."""

    def is_workspace(self, slot: int) -> bool:
        """True if ``slot`` is a step's workspace (written past its result's leaves)."""
        step, leaf = self.first_writer[slot]
        return leaf >= len(ir.tensor_leaves(type_of(self.calls[step])))


def single_op(fn: Function) -> bool:
    """True if ``fn``'s body is one op applied to its parameters in order: a plain kernel, no
    step plan. A call with a workspace is not: its workspace is a scratch slot of a plan."""
    body = fn.body
    return (
        isinstance(body, Call)
        and body.op is not None
        and len(body.args) == len(fn.params)
        and all(a is p for a, p in zip(body.args, fn.params, strict=True))
        and workspace_type(body) is None
    )


def plan_steps(fn: Function) -> StepPlan:
    """The step plan of primitive ``fn`` (see the module docstring)."""
    body = fn.body
    weight = _weights(body)

    def heavy_first(node: Expr) -> list[tuple[Expr, None]]:
        return sorted(step_operands(node), key=lambda c: -weight[c[0]])

    order, uses = post_order_uses(body, heavy_first, None)
    calls = [n for n in order if isinstance(n, Call) and n.op is not None]
    step_of = {c: i for i, c in enumerate(calls)}
    last_use: dict[Call, int] = {}
    for i, c in enumerate(calls):
        for a in c.args:
            for producer in producers(a):
                last_use[producer] = i
    in_out = _output_chain(body, {n: len(u) for n, u in uses.items()}, weight)
    plan = StepPlan(calls, {}, [], [])
    slot_value: dict[int, Call] = {}  # slot -> the call whose value it holds now
    for i, c in enumerate(calls):
        leaves = ir.tensor_leaves(type_of(c))
        if c is body:
            plan.dests[c] = tuple(Dest("out", j) for j in range(len(leaves)))
        elif c in in_out:
            plan.dests[c] = (Dest("out", 0),)
        else:
            dests = []
            for k, leaf in enumerate(leaves):
                slot = _reuse(plan, c, leaf, i, slot_value, last_use, step_of, len(leaves))
                if slot is None:
                    slot = len(plan.slots)
                    plan.slots.append(leaf)
                    plan.first_writer.append((i, k))
                slot_value[slot] = c
                dests.append(Dest("tmp", slot))
            plan.dests[c] = tuple(dests)
        workspace = workspace_type(c)
        if workspace is not None:  # a slot of its own, written by this step only
            plan.dests[c] += (Dest("tmp", len(plan.slots)),)
            plan.slots.append(workspace)
            plan.first_writer.append((i, len(leaves)))
    return plan


def _reuse(
    plan: StepPlan,
    call: Call,
    leaf: TensorType,
    step: int,
    slot_value: dict[int, Call],
    last_use: dict[Call, int],
    step_of: dict[Call, int],
    num_leaves: int,
) -> int | None:
    """A slot ``call``'s result leaf may take at ``step``, or None for a new one."""
    taken = {d.index for d in plan.dests.get(call, ())}

    def dead_before(slot: int) -> bool:
        holder = slot_value[slot]
        return last_use.get(holder, step_of[holder]) < step

    def fits(slot: int) -> bool:
        return slot not in taken and same_type(plan.slots[slot], leaf)

    assert call.op is not None
    if call.op.pattern in _IN_PLACE and num_leaves == 1:
        for a in call.args:
            for producer in producers(a):
                for d in plan.dests.get(producer, ()):
                    if (
                        d.kind == "tmp"
                        and slot_value.get(d.index) is producer
                        and last_use.get(producer) == step
                        and fits(d.index)
                        and not _read_twice_elsewhere(call, producer)
                    ):
                        return d.index
    return next((s for s in slot_value if fits(s) and dead_before(s)), None)


def _read_twice_elsewhere(call: Call, producer: Call) -> bool:
    """True if ``producer``'s value reaches ``call`` other than as a direct argument (through a
    tuple), where overlapping it with the output would not be a plain elementwise overlap."""
    return any(a is not producer and producer in producers(a) for a in call.args)


def _weights(root: Expr) -> dict[Expr, int]:
    """Op calls under each node (shared ones counted once per path: a heuristic only)."""
    weight: dict[Expr, int] = {}
    for node in post_order_uses(root, step_operands, None)[0]:
        own = 1 if isinstance(node, Call) and node.op is not None else 0
        weight[node] = own + sum(weight[c] for c, _ in step_operands(node))
    return weight


def _output_chain(root: Expr, uses: dict[Expr, int], weight: dict[Expr, int]) -> set[Expr]:
    """The intermediates that can live in the (single) output buffer: a chain down from the
    root, through the heaviest qualifying argument at each step (the longest chain in place)."""
    out: set[Expr] = set()
    out_ty = type_of(root)
    if not isinstance(out_ty, TensorType):
        return out
    node: Expr = root
    while isinstance(node, Call) and node.op is not None:
        if node.op.pattern not in _IN_PLACE:
            return out
        candidates = [
            a
            for a in node.args
            if isinstance(a, Call)
            and a.op is not None
            and uses.get(a, 0) == 1
            and same_type(type_of(a), out_ty)
        ]
        if not candidates:
            return out
        nxt = max(candidates, key=lambda a: weight[a])  # the first of the heaviest
        out.add(nxt)
        node = nxt
    return out


def type_of(e: Expr) -> ir.Type:
    """``e``'s type; the plan needs typed primitive functions."""
    if e.ty is None:
        raise CompileError("the step plan needs typed primitive functions (run infer_types)")
    return e.ty


def same_shape(a: ir.Type | None, b: TensorType) -> bool:
    """``a`` is a tensor whose shape is provably ``b``'s."""
    return (
        isinstance(a, TensorType)
        and a.rank == b.rank
        and all(ir.known_equal(x, y) for x, y in zip(a.shape, b.shape, strict=True))
    )


def same_type(a: ir.Type | None, b: TensorType) -> bool:
    """``a`` is a tensor of ``b``'s dtype whose shape is provably ``b``'s."""
    return same_shape(a, b) and isinstance(a, TensorType) and a.dtype == b.dtype
