"""The printer's rules: where nodes print, names, numbers, dims, constants, types, attributes."""

from __future__ import annotations

import math
import textwrap

import numpy as np
import pytest
import sympy
from hypothesis import given
from hypothesis import strategies as st

import ir
from ir.text import expr_to_text, module_to_text, type_to_text

F32 = ir.TensorType((ir.sym("n"),), "float32")


def text(src: str) -> str:
    return textwrap.dedent(src).strip("\n")


def main(params: list[ir.Var], body: ir.Expr) -> str:
    return str(ir.Module({"main": ir.function(params, body)}))


# ---- where nodes print -----------------------------------------------------------------------


def test_shared_node_prints_once_before_its_first_use() -> None:
    x = ir.Var("x", F32)
    e = ir.call("exp", x)
    body = ir.call("add", e, ir.call("multiply", e, e))
    assert main([x], body) == text("""
        def @main(%x: Tensor[(n,), float32]) {
          %0 = exp(%x);
          %1 = multiply(%0, %0);
          add(%0, %1)
        }""")


def test_node_used_in_both_branches_prints_before_the_if() -> None:
    x, c = ir.Var("x", F32), ir.Var("c", ir.scalar("bool"))
    shared = ir.call("exp", x)
    only_then = ir.call("negative", x)
    body = ir.If(c, ir.call("add", shared, only_then), ir.call("log", shared))
    assert main([x, c], body) == text("""
        def @main(%x: Tensor[(n,), float32], %c: bool) {
          %0 = exp(%x);
          if (%c) {
            %1 = negative(%x);
            add(%0, %1)
          } else {
            log(%0)
          }
        }""")


def test_node_used_in_condition_and_branch_prints_before_the_if() -> None:
    c = ir.Var("c", ir.scalar("bool"))
    cond = ir.call("logical_not", c)
    body = ir.If(cond, cond, c)
    assert main([c], body) == text("""
        def @main(%c: bool) {
          %0 = logical_not(%c);
          if (%0) {
            %0
          } else {
            %c
          }
        }""")


def test_node_shared_inside_one_branch_stays_in_it() -> None:
    x, c = ir.Var("x", F32), ir.Var("c", ir.scalar("bool"))
    inner = ir.call("exp", x)
    body = ir.If(c, ir.call("add", inner, inner), x)
    assert main([x, c], body) == text("""
        def @main(%x: Tensor[(n,), float32], %c: bool) {
          if (%c) {
            %0 = exp(%x);
            add(%0, %0)
          } else {
            %x
          }
        }""")


def test_node_used_only_in_a_let_body_prints_after_the_let() -> None:
    x = ir.Var("x", F32)
    y = ir.Var("y")
    late = ir.call("exp", x)  # does not use %y, but is only needed in the body
    body = ir.Let(y, ir.call("log", x), ir.call("add", y, late))
    assert main([x], body) == text("""
        def @main(%x: Tensor[(n,), float32]) {
          let %y = log(%x);
          %0 = exp(%x);
          add(%y, %0)
        }""")


def test_let_that_is_not_a_result_prints_as_a_block() -> None:
    x, a, b = ir.Var("x", F32), ir.Var("a"), ir.Var("b")
    inner = ir.Let(a, ir.call("exp", x), a)
    body = ir.Let(b, ir.Let(ir.Var("c"), x, x), ir.call("add", inner, b))
    assert main([x], body) == text("""
        def @main(%x: Tensor[(n,), float32]) {
          let %b = {
            let %c = %x;
            %x
          };
          %0 = {
            let %a = exp(%x);
            %a
          };
          add(%0, %b)
        }""")


def test_inline_function_numbers_its_body_first() -> None:
    x = ir.Var("x", F32)
    p = ir.Var("p0", F32)
    fused = ir.function([p], ir.call("subtract", ir.call("add", p, p), p), F32, {"Primitive": 1})
    y = ir.Var("y")
    body = ir.Let(y, ir.Call(fused, (x,)), y)
    assert main([x], body) == text("""
        def @main(%x: Tensor[(n,), float32]) {
          %1 = fn (%p0: Tensor[(n,), float32], Primitive=1) -> Tensor[(n,), float32] {
            %0 = add(%p0, %p0);
            subtract(%0, %p0)
          };
          let %y = %1(%x);
          %y
        }""")


def test_numbering_restarts_per_global() -> None:
    x = ir.Var("x", F32)
    f = ir.function([x], ir.call("exp", ir.call("exp", x)))
    y = ir.Var("y", F32)
    g = ir.function([y], ir.call("log", ir.call("log", y)))
    assert str(ir.Module({"f": f, "g": g})) == text("""
        def @f(%x: Tensor[(n,), float32]) {
          %0 = exp(%x);
          exp(%0)
        }

        def @g(%y: Tensor[(n,), float32]) {
          %0 = log(%y);
          log(%0)
        }""")


def test_atoms_print_inline_and_tuples_and_projections_are_bound() -> None:
    x = ir.Var("x", F32)
    t = ir.tuple_of([x, ir.const(2, "int64"), ir.GlobalVar("main")])
    body = ir.tuple_of([ir.TupleGetItem(t, 0), ir.tuple_of([x])])
    assert main([x], body) == text("""
        def @main(%x: Tensor[(n,), float32]) {
          %0 = (%x, 2i64, @main);
          %1 = %0.0;
          %2 = (%x,);
          (%1, %2)
        }""")


def test_projection_of_a_constant_is_parenthesised() -> None:
    body = ir.TupleGetItem(ir.const(0, "int32"), 1)
    assert main([], body).splitlines()[1] == "  (0).1"


# ---- names -----------------------------------------------------------------------------------


def test_variable_names_are_made_unique_and_never_numeric() -> None:
    a, b, c, d, e = (ir.Var(h) for h in ["x", "x", "0", "x1", "a.b"])
    body = ir.tuple_of([a, b, c, d, e])
    assert main([a, b, c, d, e], body).splitlines()[0] == ("def @main(%x, %x1, %v0, %x11, %a_b) {")


def test_let_shadowing_gets_a_new_name() -> None:
    x = ir.Var("x", F32)
    x2 = ir.Var("x")
    body = ir.Let(x2, ir.call("exp", x), x2)
    assert "let %x1 = exp(%x);" in main([x], body)


# ---- anonymous and symbolic dims -------------------------------------------------------------


def test_anonymous_dims_print_as_question_marks_or_numbered_labels() -> None:
    a, b, c = ir.fresh(), ir.fresh(), ir.fresh()
    x = ir.Var("x", ir.TensorType((a, b, c)))
    y = ir.Var("y", ir.TensorType((b, 3)))
    fn = ir.function([x, y], x, ir.TensorType((a + 1,)))
    assert str(ir.Module({"f": fn, "g": fn})) == text("""
        def @f(%x: Tensor[(?0, ?1, ?), float32], %y: Tensor[(?1, 3), float32]) -> Tensor[(?0 + 1,), float32] {
          %x
        }

        def @g(%x: Tensor[(?0, ?1, ?), float32], %y: Tensor[(?1, 3), float32]) -> Tensor[(?0 + 1,), float32] {
          %x
        }""")


n, m, k = ir.sym("n"), ir.sym("m"), ir.sym("k")

DIMS = [
    (n, "n"),
    (2 * n, "2*n"),
    (n + 1, "n + 1"),
    (n - 1, "n - 1"),
    (m - n + 5, "m - n + 5"),
    (n * m, "m*n"),
    (n * n, "n*n"),
    (n // 2, "n // 2"),
    ((n + 1) // 2, "(n + 1) // 2"),
    ((n * m) // (k + 1), "m*n // (k + 1)"),
    (n // (2 * m + 1), "n // (2*m + 1)"),
    (sympy.Mod(n, 3), "n % 3"),
    (sympy.Mod(n + 1, m + 1), "(n + 1) % (m + 1)"),
    (m * (n // 2), "m*(n // 2)"),
    (n - n // 2, "n - n // 2"),
    (sympy.Max(n, m), "max(m, n)"),
    (sympy.Min(n, 4), "min(4, n)"),
    (sympy.Max(n, m, k + 1), "max(m, n, k + 1)"),
    (sympy.ceiling(n / 4), "ceil(n / 4)"),
    (sympy.floor((n + m) / (k + 2)), "(m + n) // (k + 2)"),
]


@pytest.mark.parametrize(("dim", "expected"), DIMS, ids=[t for _, t in DIMS])
def test_dim_printing(dim: sympy.Expr, expected: str) -> None:
    ty = ir.TensorType((dim,))
    assert type_to_text(ty) == f"Tensor[({expected},), float32]"
    assert ir.structurally_equal(ir.parse_type(type_to_text(ty)), ty)


# ---- types -----------------------------------------------------------------------------------

TYPES = [
    (ir.scalar("float32"), "float32"),
    (ir.TensorType((), "int8"), "int8"),
    (ir.TensorType((3,), "bool"), "Tensor[(3,), bool]"),
    (ir.TensorType((n, 10), "float16"), "Tensor[(n, 10), float16]"),
    (ir.TupleType(()), "()"),
    (ir.TupleType((ir.scalar(),)), "(float32,)"),
    (ir.TupleType((ir.scalar(), ir.TupleType((ir.scalar("int64"),)))), "(float32, (int64,))"),
    (ir.FuncType((), ir.scalar()), "fn () -> float32"),
    (
        ir.FuncType((ir.scalar(), ir.TensorType((n,))), ir.TupleType(())),
        "fn (float32, Tensor[(n,), float32]) -> ()",
    ),
]


@pytest.mark.parametrize(("ty", "expected"), TYPES, ids=[t for _, t in TYPES])
def test_type_printing(ty: ir.Type, expected: str) -> None:
    assert str(ty) == expected
    assert ir.structurally_equal(ir.parse_type(expected), ty)


# ---- constants -------------------------------------------------------------------------------

SCALARS = [
    (1.0, "float32", "1f"),
    (1.5, "float32", "1.5f"),
    (-0.25, "float32", "-0.25f"),
    (0.1, "float32", "0.1f"),
    (1e20, "float32", "1e+20f"),
    (0.1, "float64", "0.1f64"),
    (2.0, "float16", "2f16"),
    (float("nan"), "float32", "nanf"),
    (float("inf"), "float64", "inff64"),
    (float("-inf"), "float16", "-inff16"),
    (2, "int32", "2"),
    (-3, "int32", "-3"),
    (2, "int8", "2i8"),
    (2, "int16", "2i16"),
    (2, "int64", "2i64"),
    (200, "uint8", "200u8"),
    (True, "bool", "True"),
    (False, "bool", "False"),
]


@pytest.mark.parametrize(("value", "dtype", "expected"), SCALARS, ids=[t for *_, t in SCALARS])
def test_scalar_constants(value: object, dtype: str, expected: str) -> None:
    assert expr_to_text(ir.const(value, dtype)) == expected


TENSORS = [
    (np.array([[1.0, 2.0], [3.0, 4.5]], "float32"), "const([[1.0, 2.0], [3.0, 4.5]], float32)"),
    (np.array([1, 2, 3], "int64"), "const([1, 2, 3], int64)"),
    (np.array([True, False]), "const([True, False], bool)"),
    (np.array([np.nan, np.inf, -np.inf], "float64"), "const([nan, inf, -inf], float64)"),
    (np.zeros((0, 3), "float32"), "const([], float32, shape=(0, 3))"),
    (np.zeros((2, 0), "int32"), "const([], int32, shape=(2, 0))"),
    (np.zeros((0,), "uint8"), "const([], uint8, shape=(0,))"),
]


@pytest.mark.parametrize(("value", "expected"), TENSORS, ids=[t for _, t in TENSORS])
def test_tensor_constants(value: np.ndarray, expected: str) -> None:
    const = ir.Constant(value)
    assert expr_to_text(const) == expected
    back = ir.parse(f"def @main() {{ {expected} }}").main.body
    assert ir.structurally_equal(back, const)


@given(st.sampled_from(["float16", "float32", "float64"]), st.data())
def test_floats_print_exactly(dtype: str, data: st.DataObject) -> None:
    value = data.draw(st.floats(width=int(dtype[5:])))  # type: ignore[arg-type]
    const = ir.const(value, dtype)
    back = ir.parse(f"def @main() {{ {expr_to_text(const)} }}").main.body
    assert isinstance(back, ir.Constant) and back.value.dtype == const.value.dtype
    got, want = back.value.item(), const.value.item()
    assert got == want or (math.isnan(got) and math.isnan(want))
    assert math.copysign(1, got) == math.copysign(1, want) or math.isnan(want)


# ---- attributes and types of nodes ------------------------------------------------------------


def test_default_attributes_are_omitted() -> None:
    x = ir.Var("x", F32)
    assert expr_to_text(ir.call("sum", x)) == "sum(%x)"
    assert expr_to_text(ir.call("sum", x, axis=[0, 1], keepdims=True)) == (
        "sum(%x, axis=[0, 1], keepdims=True)"
    )
    assert expr_to_text(ir.call("clip", x, a_min=0, a_max=6)) == "clip(%x, a_min=0.0, a_max=6.0)"
    assert expr_to_text(ir.call("topk", x, k=1, ret_type="values")) == (
        'topk(%x, k=1, ret_type="values")'
    )
    assert expr_to_text(ir.call("cast", x, dtype="int64")) == 'cast(%x, dtype="int64")'


def test_types_of_nodes_print_as_comments() -> None:
    x = ir.Var("x", F32)
    e = ir.call("exp", x).with_type(F32)
    y = ir.Var("y")
    body = ir.Let(y, ir.call("log", e).with_type(F32), ir.call("add", y, e).with_type(F32))
    m = ir.Module({"main": ir.function([x], body)})
    assert str(m) == text("""
        def @main(%x: Tensor[(n,), float32]) {
          %0 = exp(%x) /* ty=Tensor[(n,), float32] */;
          let %y = log(%0) /* ty=Tensor[(n,), float32] */;
          add(%y, %0) /* ty=Tensor[(n,), float32] */
        }""")
    assert module_to_text(m, show_types=False) == text("""
        def @main(%x: Tensor[(n,), float32]) {
          %0 = exp(%x);
          let %y = log(%0);
          add(%y, %0)
        }""")
    assert ir.structurally_equal(ir.parse(str(m)), m)


def test_expr_to_text_prints_statements_without_braces() -> None:
    x = ir.Var("x", F32)
    e = ir.call("exp", x)
    assert expr_to_text(ir.call("add", e, e)) == "%0 = exp(%x);\nadd(%0, %0)"
    fn = ir.function([x], e, F32)
    assert (
        expr_to_text(fn) == "fn (%x: Tensor[(n,), float32]) -> Tensor[(n,), float32] {\n"
        "  exp(%x)\n}"
    )


def test_printing_is_deterministic() -> None:
    x = ir.Var("x", ir.TensorType((ir.fresh(), ir.fresh())))
    m = ir.Module({"main": ir.function([x], ir.call("exp", x))})
    assert str(m) == str(m) == module_to_text(m)


def test_empty_module_prints_as_nothing() -> None:
    assert str(ir.Module()) == ""
    assert len(ir.parse("")) == 0


def test_a_large_constant_prints_as_its_bytes_and_reads_back_exactly() -> None:
    values = np.arange(-40, 40, dtype=np.float32).reshape(4, 20) / 3
    values[0, :3] = [np.nan, -0.0, np.inf]
    text = ir.text.constants_text.constant_text(ir.Constant(values))
    assert text.startswith('const("') and text.endswith('", float32, shape=(4, 20))')
    assert len(text) < 4 * values.size * 4 / 3 + 40  # base64: 4/3 of the raw bytes
    back = ir.parse(f"def @main() {{ {text} }}")["main"].body.value
    assert back.dtype == np.float32 and back.shape == (4, 20)
    assert back.tobytes() == values.tobytes()  # NaN and -0.0 included
    small = ir.text.constants_text.constant_text(ir.Constant(np.arange(64, dtype=np.int64)))
    assert small.startswith("const([0, 1, 2")
