"""What the parser builds: sharing, lets and scopes, dims, spans, literals and the syntax forms."""

from __future__ import annotations

import numpy as np
import pytest
import sympy

import ir


def body_of(src: str) -> ir.Expr:
    return ir.parse(src).main.body


def test_graph_bindings_name_shared_nodes() -> None:
    body = body_of("def @main(%x: float32) { %0 = exp(%x); add(%0, %0) }")
    assert isinstance(body, ir.Call)
    a, b = body.args
    assert a is b and isinstance(a, ir.Call) and a.op is ir.get_op("exp")


def test_graph_binding_creates_no_let_and_no_var() -> None:
    body = body_of("def @main(%x: float32) { %y = exp(%x); %y }")
    assert isinstance(body, ir.Call)


def test_let_builds_let_and_var() -> None:
    body = body_of("def @main(%x: float32) { let %y: float32 = exp(%x); let %z = %y; %z }")
    assert isinstance(body, ir.Let)
    assert body.var.name_hint == "y" and body.var.type_annotation == ir.scalar()
    inner = body.body
    assert isinstance(inner, ir.Let)
    assert inner.value is body.var and inner.var.type_annotation is None
    assert inner.body is inner.var


def test_let_may_shadow_and_its_value_sees_the_outer_name() -> None:
    fn = ir.parse("def @main(%x: float32) { let %x = exp(%x); %x }").main
    body = fn.body
    assert isinstance(body, ir.Let) and isinstance(body.value, ir.Call)
    assert body.value.args[0] is fn.params[0]
    assert body.body is body.var and body.var is not fn.params[0]


def test_inner_scopes_see_outer_bindings() -> None:
    fn = ir.parse("""
        def @main(%x: float32, %c: bool) {
          %0 = exp(%x);
          %1 = fn (%y: float32) { add(%y, %0) };
          if (%c) { %1(%0) } else { %0 }
        }""").main
    body = fn.body
    assert isinstance(body, ir.If)
    call = body.then_branch
    assert isinstance(call, ir.Call) and isinstance(call.callee, ir.Function)
    assert call.args[0] is body.else_branch
    assert call.callee.body.args[1] is body.else_branch  # type: ignore[attr-defined]


def test_named_anonymous_dims_are_shared_within_a_global_only() -> None:
    m = ir.parse("""
        def @f(%a: Tensor[(?0, ?, ?), float32], %b: Tensor[(?0 + 1,), float32]) { %a }
        def @g(%a: Tensor[(?0,), float32]) { %a }""")
    a, b = (p.type_annotation for p in m["f"].params)
    assert isinstance(a, ir.TensorType) and isinstance(b, ir.TensorType)
    d0, q1, q2 = a.shape
    assert all(ir.is_anonymous(d) for d in (d0, q1, q2))
    assert q1 != q2 and d0 not in (q1, q2)
    assert b.shape == (d0 + 1,)
    g_type = m["g"].params[0].type_annotation
    assert isinstance(g_type, ir.TensorType) and g_type.shape[0] != d0


def test_named_dims_are_dim_symbols() -> None:
    ty = ir.parse_type(
        "Tensor[(n, 2*n, n // 2, n % 3, max(n, m, 2), min(n, 1), ceil(n / 2)), int8]"
    )
    n, m = ir.sym("n"), ir.sym("m")
    assert isinstance(ty, ir.TensorType)
    assert ty.shape == (
        n,
        2 * n,
        n // 2,
        sympy.Mod(n, 3),
        sympy.Max(n, m, 2),
        sympy.Min(n, 1),
        sympy.ceiling(n / 2),
    )
    assert ty.dtype == "int8"


def test_rank_zero_spellings_are_equal() -> None:
    assert ir.parse_type("Tensor[(), float32]") == ir.parse_type("float32") == ir.scalar()
    assert ir.parse_type("Tensor[(n), float32]") == ir.parse_type("Tensor[(n,), float32]")


def test_tuple_and_function_types() -> None:
    assert ir.parse_type("()") == ir.TupleType(())
    assert ir.parse_type("(int8,)") == ir.TupleType((ir.scalar("int8"),))
    ty = ir.parse_type("fn (float32, (bool, bool)) -> fn () -> int64")
    assert ty == ir.FuncType(
        (ir.scalar(), ir.TupleType((ir.scalar("bool"),) * 2)), ir.FuncType((), ir.scalar("int64"))
    )


def test_floor_division_in_dims_is_not_a_comment() -> None:
    m = ir.parse("def @main(%x: Tensor[(n // 2,), float32]) { %x // a comment\n}")
    ty = m.main.params[0].type_annotation
    assert ty == ir.TensorType((ir.sym("n") // 2,))


def test_comments_and_version_header() -> None:
    m = ir.parse("/* c */ v0.0.3 // c\n def /* c */ @main() { /* ty=float32 */ 1f // c\n }")
    assert isinstance(m.main.body, ir.Constant)


def test_bare_fn_is_main_and_may_recurse() -> None:
    m = ir.parse("v0.0.3\nfn (%x: float32) { @main(%x) }")
    assert list(m) == ["main"]
    call = m.main.body
    assert isinstance(call, ir.Call) and isinstance(call.callee, ir.GlobalVar)
    assert call.callee.name == "main"


def test_globals_may_be_used_before_they_are_defined() -> None:
    m = ir.parse("def @a() { @b() }\ndef @b() { @a() }")
    assert list(m) == ["a", "b"]


def test_tuples_parentheses_and_projections() -> None:
    body = body_of("def @main(%x: float32) { ((%x), (%x,), (), (%x, %x,)) }")
    assert isinstance(body, ir.Tuple)
    grouped, one, empty, two = body.fields
    assert isinstance(grouped, ir.Var)
    assert isinstance(one, ir.Tuple) and len(one.fields) == 1
    assert isinstance(empty, ir.Tuple) and not empty.fields
    assert isinstance(two, ir.Tuple) and len(two.fields) == 2
    proj = body_of("def @main(%t: ((float32, float32),)) { %t.0.1 }")
    assert isinstance(proj, ir.TupleGetItem) and proj.index == 1
    assert isinstance(proj.tuple_value, ir.TupleGetItem) and proj.tuple_value.index == 0
    proj = body_of("def @main(%t: (float32,)) { (%t).0 }")
    assert isinstance(proj, ir.TupleGetItem)


def test_projection_binds_tighter_than_call() -> None:
    body = body_of("def @main(%t: (fn (float32) -> float32,)) { %t.0(1f) }")
    assert isinstance(body, ir.Call) and isinstance(body.callee, ir.TupleGetItem)


def test_calls_of_values() -> None:
    body = body_of("def @main(%f: fn () -> float32) { (%f, fn () { 1f }(), @main()) }")
    assert isinstance(body, ir.Tuple)
    a, b, c = body.fields
    assert isinstance(a, ir.Var)
    assert isinstance(b, ir.Call) and isinstance(b.callee, ir.Function)
    assert isinstance(c, ir.Call) and isinstance(c.callee, ir.GlobalVar)


def test_attribute_values() -> None:
    body = body_of(
        "def @main(%x: float32) { nn.pad(%x, pad_width=[[0, 1], [2, 3]], pad_value=-1e-05) }"
    )
    assert isinstance(body, ir.Call)
    assert body.attrs.pad_width == ((0, 1), (2, 3)) and body.attrs.pad_value == -1e-05
    body = body_of('def @main(%x: float32) { topk(%x, k=2, ret_type="values", is_ascend=True) }')
    assert isinstance(body, ir.Call)
    assert body.attrs.ret_type == "values" and body.attrs.is_ascend is True
    body = body_of("def @main(%x: float32) { sum(%x, axis=None) }")
    assert isinstance(body, ir.Call) and body.attrs.axis is None


def test_function_attributes_and_optional_types() -> None:
    fn = ir.parse('def @main(%p, Primitive=1, Name="f\\n\\"x\\"", Scale=0.5, Flag=True) { %p }')
    main = fn.main
    assert main.attrs == ir.FunctionAttrs(
        primitive=True, others=(("Name", 'f\n"x"'), ("Scale", 0.5), ("Flag", True))
    )
    assert main.params[0].type_annotation is None and main.ret_type is None
    assert ir.structurally_equal(ir.parse(str(fn)), fn)


SCALARS = [
    ("1f", 1.0, "float32"),
    ("1.5f", 1.5, "float32"),
    ("-1f", -1.0, "float32"),
    ("1f16", 1.0, "float16"),
    ("1f32", 1.0, "float32"),
    ("1e-3f64", 1e-3, "float64"),
    ("2", 2, "int32"),
    ("-2", -2, "int32"),
    ("2i8", 2, "int8"),
    ("2i16", 2, "int16"),
    ("2i32", 2, "int32"),
    ("2i64", 2, "int64"),
    ("2u8", 2, "uint8"),
    ("True", True, "bool"),
    ("False", False, "bool"),
    ("inff", np.inf, "float32"),
    ("-inff64", -np.inf, "float64"),
]


@pytest.mark.parametrize(("src", "value", "dtype"), SCALARS, ids=[s for s, *_ in SCALARS])
def test_scalar_literals(src: str, value: object, dtype: str) -> None:
    const = body_of(f"def @main() {{ {src} }}")
    assert isinstance(const, ir.Constant)
    assert const.value.shape == () and const.value.dtype.name == dtype
    assert const.value.item() == value


def test_nan_literal() -> None:
    const = body_of("def @main() { nanf16 }")
    assert isinstance(const, ir.Constant) and const.value.dtype.name == "float16"
    assert np.isnan(const.value)


def test_tensor_constants() -> None:
    const = body_of("def @main() { const([[1, 2], [3, 4]], float64) }")
    assert isinstance(const, ir.Constant)
    np.testing.assert_array_equal(const.value, np.array([[1.0, 2.0], [3.0, 4.0]]))
    assert const.value.dtype.name == "float64"
    empty = body_of("def @main() { const([], int64, shape=(0, 3)) }")
    assert isinstance(empty, ir.Constant)
    assert empty.value.shape == (0, 3) and empty.value.dtype.name == "int64"


def test_every_node_has_a_span() -> None:
    src = """def @main(%x: float32, %c: bool) {
  %0 = (%x, 1f);
  let %y = %0.1;
  if (%c) { exp(%y) } else { @main(%x, %c) }
}"""
    m = ir.parse(src, source_name="prog.txt")
    fn = m.main

    class Spans(ir.ExprVisitor):
        def visit(self, expr: ir.Expr) -> None:
            assert expr.span is not None, expr
            assert expr.span.source == "prog.txt"
            super().visit(expr)

    Spans().visit(fn)
    assert fn.span == ir.Span(1, 1, "prog.txt")
    let = fn.body
    assert isinstance(let, ir.Let)
    assert let.span == ir.Span(3, 3, "prog.txt")
    assert let.var.span == ir.Span(3, 7, "prog.txt")
    assert let.value.span == ir.Span(3, 12, "prog.txt")  # the projection starts at %0
    assert isinstance(let.value, ir.TupleGetItem)
    assert let.value.tuple_value.span == ir.Span(2, 8, "prog.txt")
    branch = let.body
    assert isinstance(branch, ir.If) and branch.span == ir.Span(4, 3, "prog.txt")
    assert branch.then_branch.span == ir.Span(4, 13, "prog.txt")
    assert fn.params[1].span == ir.Span(1, 24, "prog.txt")


def test_seed_after_allocation_names_parse_as_ops_with_dots() -> None:
    # Dotted op names are one token; an unknown one is reported whole.
    with pytest.raises(ir.ParseError, match=r"unknown op 'annotation\.alloc_storage'"):
        ir.parse("def @main() { annotation.alloc_storage(64i64) }")
