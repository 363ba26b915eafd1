"""to_anf, text in / text out: where each value is bound, then properties of every case.

Each case is (INPUT, EXPECTED), compared structurally: the names of new variables do not
matter, but the order and nesting of the lets, and which values are bound once and shared, do.
"""

from __future__ import annotations

import pytest
from pass_helpers import assert_anf, check_pass, check_pipeline, parse_typed

import ir
from dynshape.passes.to_anf import ToANF, to_anf

CASES: dict[str, tuple[str, str]] = {
    # A chain: each call bound in evaluation order; the result is a variable.
    "chain": (
        """
        def @main(%x: Tensor[(n,), float32], %y: Tensor[(n,), float32]) {
          negative(add(multiply(%x, %y), %x))
        }
        """,
        """
        def @main(%x: Tensor[(n,), float32], %y: Tensor[(n,), float32]) {
          let %a = multiply(%x, %y);
          let %b = add(%a, %x);
          let %c = negative(%b);
          %c
        }
        """,
    ),
    # A diamond: the shared exp is bound once and used twice.
    "diamond": (
        """
        def @main(%x: Tensor[(n,), float32]) {
          %0 = exp(%x);
          subtract(add(%0, 1f), multiply(%0, 2f))
        }
        """,
        """
        def @main(%x: Tensor[(n,), float32]) {
          let %e = exp(%x);
          let %a = add(%e, 1f);
          let %m = multiply(%e, 2f);
          let %s = subtract(%a, %m);
          %s
        }
        """,
    ),
    # Values used only in one branch are bound inside it; the condition before the if.
    "if_with_branch_local_values": (
        """
        def @main(%x: Tensor[(n,), float32], %c: bool) {
          %0 = exp(%x);
          %1 = negative(%x);
          if (logical_not(%c)) { add(%0, %0) } else { %1 }
        }
        """,
        """
        def @main(%x: Tensor[(n,), float32], %c: bool) {
          let %nc = logical_not(%c);
          let %r = if (%nc) {
            let %e = exp(%x);
            let %a = add(%e, %e);
            %a
          } else {
            let %m = negative(%x);
            %m
          };
          %r
        }
        """,
    ),
    # A value used in both branches is bound once, before the if.
    "shared_value_in_both_branches": (
        """
        def @main(%x: Tensor[(n,), float32], %c: bool) {
          %0 = exp(%x);
          if (%c) { add(%0, %0) } else { negative(%0) }
        }
        """,
        """
        def @main(%x: Tensor[(n,), float32], %c: bool) {
          let %e = exp(%x);
          let %r = if (%c) {
            let %a = add(%e, %e);
            %a
          } else {
            let %m = negative(%e);
            %m
          };
          %r
        }
        """,
    ),
    # Nested ifs: %0 is used in the inner then-branch and the outer else-branch, so it is bound
    # at the top; %1 only in the inner if, so it is bound in the outer then-branch.
    "nested_if": (
        """
        def @main(%x: Tensor[(n,), float32], %c: bool, %d: bool) {
          %0 = exp(%x);
          %1 = negative(%x);
          if (%c) {
            if (%d) { add(%0, %1) } else { %1 }
          } else {
            %0
          }
        }
        """,
        """
        def @main(%x: Tensor[(n,), float32], %c: bool, %d: bool) {
          let %e = exp(%x);
          let %r = if (%c) {
            let %m = negative(%x);
            let %r2 = if (%d) {
              let %a = add(%e, %m);
              %a
            } else {
              %m
            };
            %r2
          } else {
            %e
          };
          %r
        }
        """,
    ),
    # Tuples and projections are values like calls: bound, with atoms inside.
    "tuples_and_projections": (
        """
        def @main(%x: Tensor[(n, 4), float32]) {
          %0 = split(%x, indices_or_sections=2, axis=1);
          (add(%0.0, %0.1), (%x, 1f))
        }
        """,
        """
        def @main(%x: Tensor[(n, 4), float32]) {
          let %s = split(%x, indices_or_sections=2, axis=1);
          let %s0 = %s.0;
          let %s1 = %s.1;
          let %a = add(%s0, %s1);
          let %t = (%x, 1f);
          let %r = (%a, %t);
          %r
        }
        """,
    ),
    # Recursion through a global; calls of globals are bound like any call; each global is
    # converted on its own.
    "recursion_and_global_calls": (
        """
        def @count(%i: int32, %n: int32) -> int32 {
          if (greater_equal(%i, %n)) { %i } else { @count(add(%i, 1), %n) }
        }

        def @main(%n: int32) -> int32 {
          multiply(@count(0, %n), 2)
        }
        """,
        """
        def @count(%i: int32, %n: int32) -> int32 {
          let %c = greater_equal(%i, %n);
          let %r = if (%c) {
            %i
          } else {
            let %j = add(%i, 1);
            let %k = @count(%j, %n);
            %k
          };
          %r
        }

        def @main(%n: int32) -> int32 {
          let %k = @count(0, %n);
          let %m = multiply(%k, 2);
          %m
        }
        """,
    ),
    # Existing lets keep their variables and bind their value directly; a let used as an
    # operand (a block value) is flattened into the chain.
    "existing_lets_and_let_in_value": (
        """
        def @main(%x: Tensor[(n,), float32]) {
          let %a = add(exp(%x), %x);
          negative({ let %b = abs(%a); multiply(%b, %b) })
        }
        """,
        """
        def @main(%x: Tensor[(n,), float32]) {
          let %e = exp(%x);
          let %a = add(%e, %x);
          let %b = abs(%a);
          let %m = multiply(%b, %b);
          let %r = negative(%m);
          %r
        }
        """,
    ),
    # Primitive function bodies stay in graph form and the primitive stays the callee; a
    # local non-primitive function was inlined by inference (its parameter and result are
    # annotated lets) and its body is converted in place.
    "primitives_untouched_closures_converted": (
        """
        def @main(%x: Tensor[(n,), float32]) {
          %p = fn (%p0: Tensor[(n,), float32], Primitive=1) -> Tensor[(n,), float32] {
            negative(exp(%p0))
          };
          %f = fn (%y: Tensor[(n,), float32]) -> Tensor[(n,), float32] { abs(abs(%y)) };
          %f(%p(%x))
        }
        """,
        """
        def @main(%x: Tensor[(n,), float32]) {
          %p = fn (%p0: Tensor[(n,), float32], Primitive=1) -> Tensor[(n,), float32] {
            negative(exp(%p0))
          };
          let %y: Tensor[(n,), float32] = %p(%x);
          let %a = abs(%y);
          let %result: Tensor[(n,), float32] = abs(%a);
          %result
        }
        """,
    ),
    # A value used by the condition and by a branch is bound before the if.
    "value_in_condition_and_branch": (
        """
        def @main(%x: float32) {
          %0 = less(%x, 0f);
          if (%0) { logical_not(%0) } else { %0 }
        }
        """,
        """
        def @main(%x: float32) {
          let %c = less(%x, 0f);
          let %r = if (%c) {
            let %n = logical_not(%c);
            %n
          } else {
            %c
          };
          %r
        }
        """,
    ),
}


@pytest.mark.parametrize("name", CASES)
def test_to_anf(name: str) -> None:
    source, expected = CASES[name]
    out = check_pass(ToANF(), source, expected)
    assert_anf(out)


@pytest.mark.parametrize("name", CASES)
def test_every_case_keeps_the_guarantees(name: str) -> None:
    """fuse_ops then to_anf on every case (pass_helpers.check_pipeline)."""
    check_pipeline(CASES[name][0])


def test_seed_after_both_passes() -> None:
    """The seed's unfused program ends up as the proposal printed it before allocation."""
    anf = check_pipeline(
        """
        def @main(%x: Tensor[(10,), float32], %y: Tensor[(10,), float32]) -> Tensor[(10,), float32] {
          subtract(add(%x, %x), %y)
        }
        """
    )
    want = ir.parse(
        """
        def @main(%x: Tensor[(10,), float32], %y: Tensor[(10,), float32]) -> Tensor[(10,), float32] {
          %1 = fn (%p0: Tensor[(10,), float32], %p1: Tensor[(10,), float32], Primitive=1) -> Tensor[(10,), float32] {
            %0 = add(%p0, %p0);
            subtract(%0, %p1)
          };
          let %x1 = %1(%x, %y);
          %x1
        }
        """
    )
    assert ir.structurally_equal(anf, want)


def test_new_variables_carry_types_and_hint() -> None:
    typed, _ = parse_typed("def @main(%x: Tensor[(n,), float32]) { exp(%x) }")
    body = to_anf(typed).main.body
    assert isinstance(body, ir.Let)
    assert body.var.name_hint == "x"
    assert body.var.ty == ir.TensorType((ir.sym("n"),), "float32")
    assert ToANF(var_hint="t").run(typed).main.body.var.name_hint == "t"  # type: ignore[attr-defined]


def test_untyped_input_gives_untyped_output() -> None:
    module = ir.parse("def @main(%x: float32) { negative(exp(%x)) }")
    out = to_anf(module)
    assert_anf(out)
    assert out.main.body.ty is None


def test_deep_graph_and_long_let_chains() -> None:
    """5000 nested calls in graph form, then the 5000-let chain itself: no recursion per node."""
    lines = ["def @main(%x: Tensor[(n,), float32]) {", "  %0 = add(%x, 1f);"]
    lines += [f"  %{i} = add(%{i - 1}, 1f);" for i in range(1, 5000)]
    lines += ["  %4999", "}"]
    module = ir.parse("\n".join(lines))
    anf = to_anf(module)
    assert_anf(anf)
    assert ir.structurally_equal(to_anf(anf), anf)
