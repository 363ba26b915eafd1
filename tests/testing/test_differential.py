"""Differential checking: a deliberately broken pass is caught and named."""

from __future__ import annotations

import numpy as np
import pytest

import ir
from dynshape.passes.base import ModulePass
from dynshape.pipeline import default_passes
from dynshape.testing import StageMismatch, check_stages, compile_checked

PROGRAM = """
def @main(%x: Tensor[(n, 3), float32], %y: Tensor[(n, 3), float32]) {
  %d = subtract(%x, %y);
  sum(multiply(%d, %d), axis=1)
}
"""


class SwapSubtract(ModulePass):
    """Broken on purpose: swaps the operands of every ``subtract`` (of a typed module)."""

    name = "swap_subtract"

    def run(self, module: ir.Module) -> ir.Module:
        class Swap(ir.ExprMutator):
            def visit_call(self, call: ir.Call) -> ir.Expr:
                new = super().visit_call(call)
                assert isinstance(new, ir.Call)
                if new.op is not None and new.op.name == "subtract":
                    return ir.Call(new.callee, (new.args[1], new.args[0]), new.attrs)
                return new

        return ir.Module({k: Swap().visit(fn) for k, fn in module.items()})  # type: ignore[misc]


def _inputs() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    return rng.standard_normal((4, 3)).astype(np.float32), rng.standard_normal((4, 3)).astype(
        np.float32
    )


def test_correct_pipeline_passes_every_stage() -> None:
    results = check_stages(PROGRAM, *_inputs())
    assert list(results.outputs) == [*results.modules, "vm"]
    assert results.executable is not None


def test_a_pass_that_changes_meaning_is_named() -> None:
    # Squaring hides the swap: the broken pass is caught only where it changes a result.
    passes = default_passes()
    passes.insert([stage for stage, _ in passes].index("fused") + 1, ("broken", SwapSubtract()))
    check_stages(PROGRAM, *_inputs(), passes=passes)
    program = PROGRAM.replace("multiply(%d, %d)", "multiply(%d, %x)")
    with pytest.raises(StageMismatch) as info:
        check_stages(program, *_inputs(), passes=passes)
    assert info.value.stage == "broken"
    assert "stage 'broken' changes the program's results" in str(info.value)
    assert "--- the IR after broken ---" in str(info.value)
    # Swapped, in the one fused primitive (subtract, multiply and the sum: a prologue).
    assert "subtract(%p1, %p0)" in info.value.ir_text


def test_compile_checked() -> None:
    exe = compile_checked(PROGRAM, _inputs())
    assert exe is not None and compile_checked(PROGRAM) is not None
