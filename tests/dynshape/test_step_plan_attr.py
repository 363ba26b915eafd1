"""The step plan carried in the IR (``fn.attrs.steps``, printed ``Steps=``): written by
manifest_alloc, read by the lowering, equal to the planner's plan, and refused when text makes it
wrong: by the parser where the body alone shows it (a located ``ParseError``), by the lowering
where it takes the types (a ``CompileError`` naming the primitive)."""

from __future__ import annotations

import dataclasses
import re
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import dynshape
import ir
from dynshape.analysis.recorded_plan import recorded_plan
from dynshape.analysis.step_plan import plan_steps
from dynshape.errors import CompileError
from ir.text import module_to_text

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "e2e"))
from harness import all_cases

CASES = all_cases()

GELU_LIKE = """
def @main(%x: Tensor[(n, 4), float32]) -> Tensor[(n, 4), float32] {
  %h = exp(%x);
  multiply(multiply(0.5f, %h), tanh(add(%h, multiply(%h, %h))))
}
"""


def _primitives(module: ir.Module) -> list[ir.Function]:
    found: list[ir.Function] = []

    class Find(ir.ExprVisitor):
        def visit_function(self, fn: ir.Function) -> None:
            if fn.is_primitive:
                found.append(fn)
            super().visit_function(fn)

    for fn in module.values():
        Find().visit(fn.body)
    return found


def _manifest_text(source: str) -> str:
    return module_to_text(dynshape.stages(textwrap.dedent(source))["manifest"], show_types=False)


def _steps(text: str) -> str:
    (found,) = re.findall(r'Steps="([^"]*)"', text)
    return found


def _run_with_steps(steps: str) -> np.ndarray:
    """Compile GELU_LIKE's manifest text with its Steps attribute replaced, and run it."""
    text = _manifest_text(GELU_LIKE)
    text = text.replace(f'Steps="{_steps(text)}"', f'Steps="{steps}"')
    vm = dynshape.VirtualMachine(dynshape.compile(text, start="manifest"))
    return vm.run(np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4))


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_every_recorded_plan_reads_back_as_the_planners_plan(case: object) -> None:
    manifest = dynshape.stages(case.source)["manifest"]  # type: ignore[attr-defined]
    for fn in _primitives(manifest):
        if fn.attrs.steps is None:
            continue
        read, planned = recorded_plan(fn, "f"), plan_steps(fn)
        assert read.calls == planned.calls
        assert read.dests == planned.dests
        assert read.first_writer == planned.first_writer
        assert [str(t) for t in read.slots] == [str(t) for t in planned.slots]


def test_the_plan_prints_parses_and_is_what_the_lowering_runs() -> None:
    text = _manifest_text(GELU_LIKE)
    assert _steps(text) == (
        "0 exp -> t0; 2 multiply -> o0; 3 add -> o0; 4 tanh -> o0; 1 multiply -> t0; "
        "5 multiply -> o0"
    )
    x = np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)
    h = np.exp(x)
    want = 0.5 * h * np.tanh(h + h * h)
    np.testing.assert_allclose(_run_with_steps(_steps(text)), want, rtol=1e-6)


def test_a_plan_of_another_slot_count_is_followed_when_the_vm_allocates_the_scratch() -> None:
    # One scratch tensor per value: not what the planner chose, still a correct plan. With the
    # IR's scratch tensor passed, the counts disagree; without it, the VM allocates all three.
    steps = (
        "0 exp -> t0; 1 multiply -> t1; 2 multiply -> t2; 3 add -> t2; 4 tanh -> t2; "
        "5 multiply -> o0"
    )
    with pytest.raises(CompileError, match="the invoke passes 1 scratch buffers, but its step"):
        _run_with_steps(steps)
    text = _manifest_text(GELU_LIKE)
    text = text.replace(f'Steps="{_steps(text)}"', f'Steps="{steps}"')
    text = text.replace("(%x1, %scratch)", "(%x1,)")
    x = np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)
    got = dynshape.VirtualMachine(dynshape.compile(text, start="manifest")).run(x)
    h = np.exp(x)
    np.testing.assert_allclose(got, 0.5 * h * np.tanh(h + h * h), rtol=1e-6)


# What the body alone refutes is the parser's (every message: tests/ir/test_text_function_attrs.py).
@pytest.mark.parametrize(
    "steps, column, message",
    [
        ("0 exp -> t0; x", 13, "malformed step 'x': expected the number of an op call"),
        ("0 tanh -> t0", 0, "says call 0 is tanh, but it is exp"),
        ("0 exp -> t0; 5 multiply -> o0", None, "never runs call 1 (multiply), 2 (multiply)"),
        (
            "1 multiply -> t0; 0 exp -> t1; 2 multiply -> o0; 3 add -> o0; 4 tanh -> o0; "
            "5 multiply -> o0",
            0,
            "runs multiply (step 0) before exp (step 1), which it reads",
        ),
    ],
)
def test_a_plan_the_body_refutes_is_a_parse_error_at_the_step(
    steps: str, column: int | None, message: str
) -> None:
    text = _manifest_text(GELU_LIKE)
    old = f'Steps="{_steps(text)}"'
    text = text.replace(old, f'Steps="{steps}"')
    line = next(i for i, t in enumerate(text.split("\n"), 1) if "Steps=" in t)
    with pytest.raises(ir.ParseError) as info:
        dynshape.compile(text, start="manifest")
    assert message in info.value.message
    at = text.split("\n")[line - 1].index("Steps=") + len('Steps="') + 1
    assert (info.value.line, info.value.column) == (line, at - 1 if column is None else at + column)


@pytest.mark.parametrize(
    "steps, message",
    [
        (
            "0 exp -> t0; 1 multiply -> t0; 2 multiply -> o0; 3 add -> o0; 4 tanh -> o0; "
            "5 multiply -> o0",
            "lets multiply (step 1) overwrite a value still needed",
        ),
        (
            "0 exp -> o0; 1 multiply -> t0; 2 multiply -> t1; 3 add -> t1; 4 tanh -> t1; "
            "5 multiply -> o1",
            "writes output 1 of 1",
        ),
        (
            "0 exp -> t0; 1 multiply -> t1; 2 multiply -> o0; 3 add -> o0; 4 tanh -> o0; "
            "5 multiply -> t1",
            "does not leave result 0 in output 0",
        ),
        (
            "0 exp -> t0,t1; 2 multiply -> o0; 3 add -> o0; 4 tanh -> o0; 1 multiply -> t0; "
            "5 multiply -> o0",
            "gives exp (step 0) 2 destinations for 1 results",
        ),
    ],
)
def test_a_plan_the_types_refute_is_a_compile_error_naming_what_is_wrong(
    steps: str, message: str
) -> None:
    with pytest.raises(CompileError) as info:
        _run_with_steps(steps)
    assert "its Steps attribute" in str(info.value)
    assert message in str(info.value)


def test_steps_built_in_code_are_checked_against_the_body_by_the_lowering() -> None:
    # Built in code, not parsed: the lowering resolves the steps and names what does not fit.
    manifest = dynshape.stages(textwrap.dedent(GELU_LIKE))["manifest"]
    (fn,) = _primitives(manifest)
    assert fn.attrs.steps is not None
    wrong = fn.attrs.steps[1:]
    bad = dataclasses.replace(fn, attrs=dataclasses.replace(fn.attrs, steps=wrong))
    with pytest.raises(CompileError, match="its Steps attribute never runs call 0 \\(exp\\)"):
        recorded_plan(bad, "f")


def test_a_plan_that_lets_a_non_elementwise_step_overwrite_its_operand_is_refused() -> None:
    source = """
    def @main(%x: Tensor[(4, 4), float32]) -> Tensor[(4, 4), float32] {
      %a = exp(%x);
      exp(transpose(%a))
    }
    """
    text = _manifest_text(source)
    assert _steps(text) == "0 exp -> t0; 1 transpose -> o0; 2 exp -> o0"
    # A transpose reads its operand while it writes: only elementwise steps may write over it.
    bad = text.replace(_steps(text), "0 exp -> t0; 1 transpose -> t0; 2 exp -> o0")
    with pytest.raises(CompileError, match=r"lets transpose \(step 1\) overwrite an operand it"):
        dynshape.compile(bad, start="manifest")


def test_a_plan_with_a_buffer_of_another_type_is_refused() -> None:
    source = """
    def @main(%x: Tensor[(n, 4), float32]) -> Tensor[(n, 4), float32] {
      %a = exp(%x);
      %s = sum(%a, axis=[1], keepdims=True);
      exp(subtract(%a, %s))
    }
    """
    text = _manifest_text(source)
    assert _steps(text) == "0 sum -> t0; 1 subtract -> o0; 2 exp -> o0"
    bad = text.replace(_steps(text), "0 sum -> t0; 1 subtract -> t0; 2 exp -> o0")
    with pytest.raises(
        CompileError,
        match=r"writes subtract \(step 1\)'s Tensor\[\(n, 4\), float32\] into a buffer of "
        r"Tensor\[\(n, 1\), float32\]",
    ):
        dynshape.compile(bad, start="manifest")


def test_a_steps_attribute_that_is_not_a_string_is_refused() -> None:
    text = _manifest_text(GELU_LIKE)
    bad = text.replace(f'Steps="{_steps(text)}"', "Steps=3")
    with pytest.raises(ir.ParseError, match="function attribute Steps=3 must be a string"):
        dynshape.compile(bad, start="manifest")


def test_a_manifest_text_without_steps_is_planned_by_the_lowering() -> None:
    text = _manifest_text(GELU_LIKE)
    plain = text.replace(f', Steps="{_steps(text)}"', "")
    x = np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)
    got = dynshape.VirtualMachine(dynshape.compile(plain, start="manifest")).run(x)
    np.testing.assert_allclose(got, _run_with_steps(_steps(text)), rtol=1e-6)
