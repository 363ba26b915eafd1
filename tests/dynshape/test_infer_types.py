"""Type inference, text in / text out, plus its compile-time errors and deferred checks."""

from __future__ import annotations

import textwrap

import pytest
from infer_helpers import check_infer, infer_text

import ir
from dynshape import CompileError


def test_broadcasting_symbols_against_one_and_static_dims() -> None:
    infer = check_infer(
        """
        def @main(%x: Tensor[(n, 4), float32], %b: Tensor[(1, 4), float32], %c: Tensor[(4,), float32], %s: float32) {
          %0 = add(%x, %b);
          %1 = multiply(%0, %c);
          %2 = subtract(%1, %s);
          %3 = add(%x, %x);
          (%2, %3)
        }
        """,
        """
        def @main(%x: Tensor[(n, 4), float32], %b: Tensor[(1, 4), float32], %c: Tensor[(4,), float32], %s: float32) {
          %0 = add(%x, %b) /* ty=Tensor[(n, 4), float32] */;
          %1 = multiply(%0, %c) /* ty=Tensor[(n, 4), float32] */;
          %2 = subtract(%1, %s) /* ty=Tensor[(n, 4), float32] */;
          %3 = add(%x, %x) /* ty=Tensor[(n, 4), float32] */;
          (%2, %3) /* ty=(Tensor[(n, 4), float32], Tensor[(n, 4), float32]) */
        }
        """,
    )
    assert infer.deferred == {"main": []}


def test_outer_broadcast_of_two_symbols() -> None:
    check_infer(
        """
        def @main(%x: Tensor[(n, 1), float32], %y: Tensor[(1, m), float32]) {
          add(%x, %y)
        }
        """,
        """
        def @main(%x: Tensor[(n, 1), float32], %y: Tensor[(1, m), float32]) {
          add(%x, %y) /* ty=Tensor[(n, m), float32] */
        }
        """,
    )


def test_broadcasting_two_symbols_is_a_deferred_check() -> None:
    """n and m must be equal or one of them 1: undecidable, so a run-time check, counted."""
    printed, infer = infer_text(
        """
        def @main(%x: Tensor[(n, 4), float32], %y: Tensor[(m, 4), float32]) {
          add(%x, %y)
        }
        """
    )
    assert "ty=Tensor[(max(m, n)*min(1, m, n), 4), float32]" in printed
    (check,) = infer.deferred["main"]
    assert check.kind == "broadcast"
    assert str(check) == "add: a.shape[0] with b.shape[0]: n == m or n == 1 or m == 1"
    n, m = ir.sym("n"), ir.sym("m")
    assert check.holds({n: 3, m: 1}) and check.holds({n: 5, m: 5})
    assert not check.holds({n: 3, m: 2})


def test_reshape_and_concatenate_give_symbolic_dims() -> None:
    check_infer(
        """
        def @main(%x: Tensor[(n, 10), float32]) {
          %0 = reshape(%x, newshape=[-1, 5]);
          %1 = concatenate((%0, %0), axis=1);
          %2 = reshape(%1, newshape=[0, 2, 5]);
          sum(%2, axis=[1], keepdims=True)
        }
        """,
        """
        def @main(%x: Tensor[(n, 10), float32]) {
          %0 = reshape(%x, newshape=[-1, 5]) /* ty=Tensor[(2*n, 5), float32] */;
          %1 = concatenate((%0, %0), axis=1) /* ty=Tensor[(2*n, 10), float32] */;
          %2 = reshape(%1, newshape=[0, 2, 5]) /* ty=Tensor[(2*n, 2, 5), float32] */;
          sum(%2, axis=[1], keepdims=True) /* ty=Tensor[(2*n, 1, 5), float32] */
        }
        """,
    )


def test_call_of_a_global_with_two_n() -> None:
    check_infer(
        """
        def @double(%v: Tensor[(k,), float32]) -> Tensor[(k,), float32] {
          add(%v, %v)
        }
        def @main(%x: Tensor[(n,), float32]) {
          %0 = concatenate((%x, %x));
          @double(%0)
        }
        """,
        """
        def @double(%v: Tensor[(k,), float32]) -> Tensor[(k,), float32] {
          add(%v, %v) /* ty=Tensor[(k,), float32] */
        }

        def @main(%x: Tensor[(n,), float32]) {
          %0 = concatenate((%x, %x)) /* ty=Tensor[(2*n,), float32] */;
          @double(%0) /* ty=Tensor[(2*n,), float32] */
        }
        """,
    )


def test_callee_inferred_first_and_its_unknowns_are_fresh_per_call() -> None:
    printed, _ = infer_text(
        """
        def @main(%x: Tensor[(n, 4), float32]) {
          (@nonzero(%x), @nonzero(%x))
        }
        def @nonzero(%a: Tensor[(k, 4), float32]) {
          argwhere(%a)
        }
        """
    )
    # Two calls, two different unknowns (printed ?0 and ?1 because each occurs twice).
    assert "(%0, %1) /* ty=(Tensor[(?0, 2), int64], Tensor[(?1, 2), int64]) */" in printed


def test_if_with_differing_branches_joins_to_fresh_dims() -> None:
    check_infer(
        """
        def @main(%c: bool, %x: Tensor[(n, 4), float32]) {
          if (%c) { %x } else { reshape(%x, newshape=[-1, 2]) }
        }
        """,
        """
        def @main(%c: bool, %x: Tensor[(n, 4), float32]) {
          if (%c) {
            %x
          } else {
            reshape(%x, newshape=[-1, 2]) /* ty=Tensor[(2*n, 2), float32] */
          } /* ty=Tensor[(?, ?), float32] */
        }
        """,
    )


def test_if_with_equal_branches_keeps_the_type() -> None:
    printed, _ = infer_text(
        """
        def @main(%c: bool, %x: Tensor[(n, 4), float32]) {
          if (%c) { exp(%x) } else { negative(%x) }
        }
        """
    )
    assert printed.strip().endswith("} /* ty=Tensor[(n, 4), float32] */\n}")


def test_recursive_loop_growing_a_tensor() -> None:
    check_infer(
        """
        def @loop(%i: int32, %acc: Tensor[(?, 1), int32]) -> Tensor[(?, 1), int32] {
          if (less(%i, 10)) {
            %r = reshape(%i, newshape=[1, 1]);
            @loop(add(%i, 1), concatenate((%acc, %r), axis=0))
          } else { %acc }
        }
        def @main(%n: int32) {
          @loop(%n, zeros(shape=[0, 1], dtype="int32"))
        }
        """,
        """
        def @loop(%i: int32, %acc: Tensor[(?0, 1), int32]) -> Tensor[(?, 1), int32] {
          %0 = less(%i, 10) /* ty=bool */;
          if (%0) {
            %1 = add(%i, 1) /* ty=int32 */;
            %2 = reshape(%i, newshape=[1, 1]) /* ty=Tensor[(1, 1), int32] */;
            %3 = concatenate((%acc, %2)) /* ty=Tensor[(?0 + 1, 1), int32] */;
            @loop(%1, %3) /* ty=Tensor[(?, 1), int32] */
          } else {
            %acc
          } /* ty=Tensor[(?, 1), int32] */
        }

        def @main(%n: int32) {
          %0 = zeros(shape=[0, 1], dtype="int32") /* ty=Tensor[(0, 1), int32] */;
          @loop(%n, %0) /* ty=Tensor[(?, 1), int32] */
        }
        """,
    )


def test_data_dependent_ops_get_fresh_dims_and_constants_give_exact_ones() -> None:
    printed, _ = infer_text(
        """
        def @main(%x: Tensor[(n, 3), float32]) {
          %0 = argwhere(%x);
          %1 = dyn.reshape(%x, const([3, -1], int64));
          %2 = arange(0f, 10f, 2f, dtype="float32");
          (%0, %1, %2)
        }
        """
    )
    assert "argwhere(%x) /* ty=Tensor[(?0, 2), int64] */" in printed
    assert "/* ty=Tensor[(3, n), float32] */" in printed
    assert "/* ty=Tensor[(5,), float32] */" in printed


def test_annotation_may_be_more_general_but_not_contradictory() -> None:
    printed, infer = infer_text(
        """
        def @main(%x: Tensor[(n, 4), float32]) {
          let %z: Tensor[(?, 4), float32] = exp(%x);
          negative(%z)
        }
        """
    )
    assert "negative(%z) /* ty=Tensor[(n, 4), float32] */" in printed
    assert infer.deferred["main"] == []


def test_undecided_annotation_becomes_a_check_and_is_used() -> None:
    printed, infer = infer_text(
        """
        def @main(%x: Tensor[(n, 4), float32], %y: Tensor[(m, 4), float32]) {
          let %z: Tensor[(n, 4), float32] = %y;
          add(%x, %z)
        }
        """
    )
    assert "add(%x, %z) /* ty=Tensor[(n, 4), float32] */" in printed
    (check,) = infer.deferred["main"]
    assert str(check).endswith("m == n")


def _compile_error(source: str) -> str:
    with pytest.raises(CompileError) as info:
        infer_text(source)
    return str(info.value)


@pytest.mark.parametrize(
    ("source", "message"),
    [
        (
            """
            def @main(%x: Tensor[(n, 3), float32], %y: Tensor[(n, 4), float32]) {
              %0 = exp(%x);
              add(%0, %y)
            }
            """,
            "<string>:4:3: in @main: add: cannot broadcast a.shape[1] with b.shape[1]: 3 vs 4 "
            "(inputs: a (n, 3), b (n, 4))",
        ),
        (
            """
            def @main(%x: Tensor[(n, 3), float32], %y: Tensor[(n, 4), float32]) {
              concatenate((%x, %y), axis=0)
            }
            """,
            "<string>:3:3: in @main: concatenate: expected data[1].shape[1] == data[0].shape[1], "
            "got 4 != 3",
        ),
        (
            """
            def @main(%x: Tensor[(3, 4), float32]) {
              reshape(%x, newshape=[-1, 5])
            }
            """,
            "reshape: expected the element count of x divisible by the other dims of newshape, "
            "got 12 not divisible by 5",
        ),
        (
            """
            def @main(%x: Tensor[(n, 4), float32]) {
              let %z: Tensor[(n, 5), float32] = %x;
              %z
            }
            """,
            "expected %z.shape[1] == its annotation in Tensor[(n, 5), float32], got 4 != 5",
        ),
        (
            """
            def @f(%v: Tensor[(k, 3), float32]) { %v }
            def @main(%x: Tensor[(n, 4), float32]) { @f(%x) }
            """,
            "expected argument %v of @f: shape[1] == the declared 3, got 4 != 3",
        ),
        (
            """
            def @main(%x: Tensor[(n, 4), int32]) { add(%x, 1f) }
            """,
            "add: inputs must have the same dtype, got int32, float32 (cast explicitly)",
        ),
        (
            """
            def @main(%x: Tensor[(n, 4), float32]) { if (%x) { %x } else { %x } }
            """,
            "the condition of an if must be a bool scalar, got Tensor[(n, 4), float32]",
        ),
        (
            """
            def @main(%c: bool, %x: Tensor[(n, 4), float32]) {
              if (%c) { %x } else { cast(%x, dtype="int32") }
            }
            """,
            "the branches of an if: expected dtype float32, got int32",
        ),
        (
            """
            def @main(%x) { %x }
            """,
            "parameter %x of @main needs a type annotation",
        ),
        (
            """
            def @f(%x: Tensor[(n,), float32]) { @f(%x) }
            """,
            "recursive function @f needs annotated parameter and result types (cycle: @f -> @f)",
        ),
        (
            """
            def @main(%x: Tensor[(n,), float32]) { %x.0 }
            """,
            "projection .0 of a non-tuple of type Tensor[(n,), float32]",
        ),
        (
            # numpy averages bools as 0/1; the catalogue refuses it, as sum of bool.
            """
            def @main(%x: Tensor[(n,), bool]) { mean(%x) }
            """,
            "mean: expects a numeric input, got bool (cast it to an integer or float dtype)",
        ),
        (
            """
            def @main(%x: Tensor[(n, 2), bool]) { sum(%x, axis=1) }
            """,
            "sum: expects a numeric input, got bool",
        ),
    ],
)
def test_provably_wrong_programs_fail_at_compile_time(source: str, message: str) -> None:
    assert message in _compile_error(textwrap.dedent(source))


def test_compile_error_prints_the_function_with_the_failing_expression_marked() -> None:
    message = _compile_error(
        textwrap.dedent(
            """
            def @main(%x: Tensor[(n, 3), float32], %y: Tensor[(n, 4), float32]) {
              %0 = exp(%x);
              %1 = add(%0, %y);
              negative(%1)
            }
            """
        )
    )
    assert message.splitlines()[0].startswith("<string>:4:8: in @main: add: cannot broadcast")
    assert message.splitlines()[1:] == [
        "def @main(%x: Tensor[(n, 3), float32], %y: Tensor[(n, 4), float32]) {",
        "  %0 = exp(%x);",
        "  %1 = add(%0, %y);  // <-- error",
        "  negative(%1)",
        "}",
    ]
