"""Local function values: calls inlined by type inference (``dynshape/inference/inline_local.py``).

Text in, text out at the ``types`` stage (where the calls have become the bodies, the function's
own symbols bound per call), numbers against the reference interpreter at every stage, and the
message of each program that stays refused.
"""

from __future__ import annotations

import textwrap

import numpy as np
import pytest

import dynshape
import ir
from dynshape import CompileError
from dynshape.inference.inline_local import calls_in_place, is_local_function
from dynshape.testing.differential import compile_checked
from ir.text import module_to_text


def _types(source: str) -> str:
    return module_to_text(dynshape.stages(textwrap.dedent(source))["types"], show_types=True)


def test_a_call_becomes_the_body_with_the_parameter_let_bound() -> None:
    source = """
    def @main(%x: Tensor[(n,), float32]) {
      %f = fn (%a: Tensor[(n,), float32]) { add(%a, %a) };
      %f(%x)
    }
    """
    assert _types(source) == textwrap.dedent("""\
        def @main(%x: Tensor[(n,), float32]) {
          let %a: Tensor[(n,), float32] = %x;
          add(%a, %a) /* ty=Tensor[(n,), float32] */
        }""")


def test_own_symbols_are_bound_per_call_and_the_result_annotation_kept() -> None:
    # k is the local function's own symbol: n at the first call, 2*m at the second (as a
    # global's parameter symbol would be), so the types stay exact and no check is left.
    source = """
    def @main(%x: Tensor[(n,), float32], %y: Tensor[(m, 2), float32]) {
      let %f = fn (%a: Tensor[(k,), float32]) -> Tensor[(k,), float32] { multiply(%a, 3f) };
      (%f(%x), %f(reshape(%y, newshape=[-1])))
    }
    """
    assert _types(source) == textwrap.dedent("""\
        def @main(%x: Tensor[(n,), float32], %y: Tensor[(m, 2), float32]) {
          %0 = {
            let %a: Tensor[(n,), float32] = %x;
            let %result: Tensor[(n,), float32] = multiply(%a, 3f) /* ty=Tensor[(n,), float32] */;
            %result
          } /* ty=Tensor[(n,), float32] */;
          %1 = {
            let %a1: Tensor[(2*m,), float32] = reshape(%y, newshape=[-1]) /* ty=Tensor[(2*m,), float32] */;
            let %result1: Tensor[(2*m,), float32] = multiply(%a1, 3f) /* ty=Tensor[(2*m,), float32] */;
            %result1
          } /* ty=Tensor[(2*m,), float32] */;
          (%0, %1) /* ty=(Tensor[(n,), float32], Tensor[(2*m,), float32]) */
        }""")


NESTED = """
def @main(%c: bool, %x: Tensor[(n, 4), float32], %y: Tensor[(4,), float32]) {
  let %scale = fn (%a: Tensor[(r, 4), float32]) {
    let %shift = fn (%b: Tensor[(r, 4), float32]) { subtract(%b, %y) };
    multiply(%shift(%a), %y)
  };
  if (%c) { %scale(exp(%x)) } else { add(%scale(%x), %scale(%x)) }
}
"""


def test_nested_capturing_calls_in_branches_get_fresh_variables() -> None:
    assert module_to_text(dynshape.stages(NESTED)["types"], show_types=False) == textwrap.dedent(
        """\
        def @main(%c: bool, %x: Tensor[(n, 4), float32], %y: Tensor[(4,), float32]) {
          if (%c) {
            let %a: Tensor[(n, 4), float32] = exp(%x);
            %0 = {
              let %b: Tensor[(n, 4), float32] = %a;
              subtract(%b, %y)
            };
            multiply(%0, %y)
          } else {
            %2 = {
              let %a1: Tensor[(n, 4), float32] = %x;
              %1 = {
                let %b1: Tensor[(n, 4), float32] = %a1;
                subtract(%b1, %y)
              };
              multiply(%1, %y)
            };
            %4 = {
              let %a2: Tensor[(n, 4), float32] = %x;
              %3 = {
                let %b2: Tensor[(n, 4), float32] = %a2;
                subtract(%b2, %y)
              };
              multiply(%3, %y)
            };
            add(%2, %4)
          }
        }"""
    )


class _Locals(ir.ExprVisitor):
    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def visit_function(self, fn: ir.Function) -> None:
        self.count += is_local_function(fn)
        super().visit_function(fn)


@pytest.mark.parametrize("cond", [True, False])
@pytest.mark.parametrize("n", [0, 1, 5])
def test_nested_local_functions_run_as_numpy(cond: bool, n: int) -> None:
    rng = np.random.default_rng(n)
    x = rng.standard_normal((n, 4)).astype(np.float32)
    y = rng.standard_normal(4).astype(np.float32)
    inputs = [np.bool_(cond), x, y]
    exe = compile_checked(NESTED, inputs)  # every stage against the reference interpreter
    want = (np.exp(x) - y) * y if cond else 2 * ((x - y) * y)
    np.testing.assert_allclose(dynshape.VirtualMachine(exe).run(*inputs), want, rtol=1e-6)
    for stage in ("types", "fused", "manifest"):
        locals_left = _Locals()
        locals_left.visit(dynshape.stages(NESTED)[stage]["main"].body)
        assert locals_left.count == 0, stage


def test_a_module_without_local_functions_is_returned_as_is() -> None:
    module = ir.parse("def @main(%x: Tensor[(n,), float32]) { add(%x, %x) }")
    assert calls_in_place(module) is module


ESCAPE = (
    "is used as a value (returned, stored in a tuple or passed as an argument); a local "
    "function can only be called (its calls are inlined): make it a global function, or call "
    "it where its value is needed"
)


@pytest.mark.parametrize(
    ("source", "message"),
    [
        (
            """
            def @main(%x: Tensor[(n,), float32]) {
              let %f = fn (%a: Tensor[(n,), float32]) { add(%a, %a) };
              %f
            }
            """,
            f"<string>:3:3: in @main: the local function %f {ESCAPE}",
        ),
        (
            """
            def @main(%x: Tensor[(n,), float32]) {
              %f = fn (%a: Tensor[(n,), float32]) { add(%a, %a) };
              (%f, %f(%x))
            }
            """,
            f"<string>:3:8: in @main: a local function {ESCAPE}",
        ),
        (
            """
            def @g(%h: fn (Tensor[(n,), float32]) -> Tensor[(n,), float32], %x: Tensor[(n,), float32]) {
              %h(%x)
            }
            def @main(%x: Tensor[(n,), float32]) {
              let %f = fn (%a: Tensor[(n,), float32]) { add(%a, %a) };
              @g(%f, %x)
            }
            """,
            f"<string>:6:3: in @main: the local function %f {ESCAPE}",
        ),
        (
            """
            def @main(%x: Tensor[(n,), float32]) {
              let %f = fn (%a: Tensor[(n,), float32]) { add(%a, %a) };
              %f(%x, %x)
            }
            """,
            "<string>:4:3: in @main: the local function %f takes 1 argument, got 2",
        ),
        (
            """
            def @main(%x: Tensor[(4,), float32]) {
              let %f = fn (%a: Tensor[(3,), float32]) { add(%a, %a) };
              %f(%x)
            }
            """,
            "<string>:4:3: in @main: expected %a.shape[0] == its annotation in "
            "Tensor[(3,), float32], got 4 != 3",
        ),
    ],
)
def test_refused_local_functions_say_why(source: str, message: str) -> None:
    with pytest.raises(CompileError) as info:
        dynshape.compile(textwrap.dedent(source))
    assert str(info.value).splitlines()[0] == message
