"""The step plan of a fused primitive: where each op writes, and how scratch slots are shared."""

from __future__ import annotations

import textwrap

import dynshape
import ir
from dynshape.analysis.step_plan import StepPlan, plan_steps
from dynshape.passes.infer_types import InferTypes
from ir import Dest


def _plan(source: str) -> tuple[StepPlan, ir.Function]:
    """The step plan of the largest fused primitive of ``source``'s @main."""
    fused = dynshape.stages(textwrap.dedent(source))["fused"]["main"]
    prims = []

    class Find(ir.ExprVisitor):
        def visit_function(self, fn: ir.Function) -> None:
            if fn.is_primitive:
                prims.append(fn)
            super().visit_function(fn)

    Find().visit(fused.body)
    prim = max(prims, key=lambda p: len(plan_steps(p).calls))
    return plan_steps(prim), prim


def _ops(plan: StepPlan) -> list[tuple[str, tuple[Dest, ...]]]:
    return [(c.op.name, plan.dests[c]) for c in plan.calls if c.op is not None]


TMP0, TMP1, OUT = Dest("tmp", 0), Dest("tmp", 1), Dest("out", 0)


def test_a_gelu_of_eleven_ops_needs_one_slot() -> None:
    plan, _ = _plan(
        """
        def @main(%x: Tensor[(n, 8), float32], %w: Tensor[(8, 8), float32]) -> Tensor[(n, 8), float32] {
          %h = nn.dense(%x, %w);
          %c = add(%h, multiply(0.044715f, multiply(%h, multiply(%h, %h))));
          multiply(multiply(0.5f, %h), add(1f, tanh(multiply(0.7978846f, %c))))
        }
        """
    )
    assert len(plan.slots) == 1
    ops = _ops(plan)
    assert ops[0] == ("nn.dense", (TMP0,))  # h: read four times, so in a slot
    # The long operand of the root runs first in the output buffer; 0.5 * h, computed last,
    # overwrites h's slot in place (h dies there), then the root multiplies them.
    assert ops[-2] == ("multiply", (TMP0,)) and ops[-1] == ("multiply", (OUT,))
    assert all(d == (OUT,) for _, d in ops[1:-2])


def test_a_slot_is_reused_once_its_value_is_dead_and_not_in_place_for_a_reduction() -> None:
    module = InferTypes().run(
        ir.parse(
            textwrap.dedent(
                """
                def @main(%x: Tensor[(n, 4), float32]) -> Tensor[(n, 4), float32] {
                  %f = fn (%p: Tensor[(n, 4), float32], Primitive=1) -> Tensor[(n, 4), float32] {
                    %a = exp(%p);
                    %s = sum(%a, axis=[1], keepdims=True);
                    %b = subtract(%a, %s);
                    %m = max(%b, axis=[1], keepdims=True);
                    exp(subtract(%b, %m))
                  };
                  %f(%x)
                }
                """
            )
        )
    )
    body = module["main"].body
    assert isinstance(body, ir.Call) and isinstance(body.callee, ir.Function)
    plan = plan_steps(body.callee)
    # exp -> slot 0 (read twice); sum -> slot 1; subtract(a, s) overwrites a's slot in place
    # (a dies there, same type); max, a reduction, takes the dead slot 1 (s's) but never
    # writes over its own input; the last two run in the output.
    assert _ops(plan) == [
        ("exp", (TMP0,)),
        ("sum", (TMP1,)),
        ("subtract", (TMP0,)),
        ("max", (TMP1,)),
        ("subtract", (OUT,)),
        ("exp", (OUT,)),
    ]
    assert [str(t) for t in plan.slots] == ["Tensor[(n, 4), float32]", "Tensor[(n, 1), float32]"]
    assert plan.first_writer == [(0, 0), (1, 0)]


def test_a_reduction_prologue_runs_in_one_slot_and_the_reduction_writes_the_output() -> None:
    plan, _ = _plan(
        """
        def @main(%x: Tensor[(n, m), float32], %y: Tensor[(m,), float32]) -> Tensor[(n,), float32] {
          sum(multiply(exp(%x), %y), axis=[1])
        }
        """
    )
    # exp takes a slot; multiply overwrites it in place (exp dies there, same type); the sum
    # reads the slot and writes the output.
    assert _ops(plan) == [("exp", (TMP0,)), ("multiply", (TMP0,)), ("sum", (OUT,))]
    assert [str(t) for t in plan.slots] == ["Tensor[(n, m), float32]"]


def test_a_prologue_never_writes_the_output_even_of_its_own_type() -> None:
    """keepdims over an axis of size 1: the prologue's values have the output's type, but the
    output chain stops at the reduction, so they stay in a slot and the epilogue's add, after
    the sum, runs in the output."""
    plan, _ = _plan(
        """
        def @main(%x: Tensor[(n, 1), float32]) -> Tensor[(n, 1), float32] {
          add(max(negative(exp(%x)), axis=[1], keepdims=True), 1f)
        }
        """
    )
    assert _ops(plan) == [
        ("exp", (TMP0,)),
        ("negative", (TMP0,)),
        ("max", (OUT,)),
        ("add", (OUT,)),
    ]
