"""The ``list[int | dim]`` attribute kind (reshape's newshape, split's indices): what it accepts,
how it prints and parses back, and the located errors for ill-typed values and unbound symbols."""

from __future__ import annotations

import pytest

import ir
from ir.attrs import INT_LIST, INT_OR_DIM_LIST, has_symbolic_entries

n, m = ir.sym("n"), ir.sym("m")


def test_the_kind_keeps_ints_of_any_sign_and_normalises_dims() -> None:
    assert INT_OR_DIM_LIST.normalize([0, -1, 3]) == (0, -1, 3)
    assert INT_OR_DIM_LIST.normalize([n, 2 * n, n + m - m]) == (n, 2 * n, n)
    assert INT_OR_DIM_LIST.normalize([n - n + 4]) == (4,)  # a folded dim is an int
    assert has_symbolic_entries((n, -1)) and not has_symbolic_entries((1, -1))
    with pytest.raises(TypeError, match="expected an int or a dim"):
        INT_OR_DIM_LIST.normalize([1.5])
    with pytest.raises(TypeError, match="expected an int or a dim"):
        INT_OR_DIM_LIST.normalize([True])
    with pytest.raises(TypeError, match="expected an int"):
        INT_LIST.normalize([n])  # every other list attribute stays ints only


@pytest.mark.parametrize(
    "text",
    [
        "reshape(%x, newshape=[n, m])",
        "reshape(%x, newshape=[n, -1])",
        "reshape(%x, newshape=[0, m, 1])",
        "reshape(%x, newshape=[2*n, (m // 2)])",
        "reshape(%x, newshape=[(n % 3), -1])",
        "split(%x, indices_or_sections=[(n // 2)])",
        "split(%x, indices_or_sections=[(n // 2), m + 1, -1], axis=1)",
        "split(%x, indices_or_sections=[max(m, n), 2])",
        "split(%x, indices_or_sections=[(-m + max(m, n))])",  # a leading '-' is not a number
    ],
)
def test_symbolic_attributes_print_and_parse_back(text: str) -> None:
    source = f"def @main(%x: Tensor[(n, m), float32]) {{\n  {text}\n}}"
    module = ir.parse(source)
    printed = str(module)
    assert text in printed
    again = ir.parse(printed)
    assert ir.structurally_equal(again, module)
    assert str(again) == printed


def test_the_dims_inside_attributes_also_parse_without_parentheses() -> None:
    a = ir.parse("def @main(%x: Tensor[(n, m), float32]) { reshape(%x, newshape=[m // 2, n]) }")
    b = ir.parse("def @main(%x: Tensor[(n, m), float32]) { reshape(%x, newshape=[(m // 2), n]) }")
    assert ir.structurally_equal(a, b)
    call = a["main"].body
    assert isinstance(call, ir.Call) and call.attrs["newshape"] == (m // 2, n)


def test_a_primitive_may_use_the_symbols_of_its_global() -> None:
    source = (
        "def @main(%x: Tensor[(m, 4), float32], %y: Tensor[(n,), float32]) {\n"
        "  %f = fn (%p: Tensor[(m, 4), float32], Primitive=1) {\n"
        "    split(%p, indices_or_sections=[(n % 3), m])\n"
        "  };\n"
        "  %f(%x)\n"
        "}"
    )
    module = ir.parse(source)
    assert ir.structurally_equal(ir.parse(str(module)), module)


@pytest.mark.parametrize(
    ("text", "column", "message"),
    [
        (
            "reshape(%x, newshape=[k, -1])",
            24,
            "op reshape: attribute newshape uses k, which no parameter of the function binds "
            "(a dim in an attribute may use only the symbols of the parameter types)",
        ),
        (
            "split(%x, indices_or_sections=[n, j + k])",
            33,
            "op split: attribute indices_or_sections uses j, k, which no parameter",
        ),
        (
            'reshape(%x, newshape=[n, "a"])',
            24,
            "op reshape: attribute newshape=[n, 'a'] is ill-typed: expected an int or a dim",
        ),
        (
            "split(%x, indices_or_sections=[n, 1.5])",
            33,
            "op split: attribute indices_or_sections=[n, 1.5] is ill-typed: expected int or "
            "list[int | dim]",
        ),
        ("transpose(%x, axes=[n, 0])", 22, "op transpose: attribute axes=[n, 0] is ill-typed"),
    ],
)
def test_bad_symbolic_attributes_are_located(text: str, column: int, message: str) -> None:
    source = f"def @main(%x: Tensor[(n, m), float32]) {{\n  {text}\n}}"
    with pytest.raises(ir.ParseError) as info:
        ir.parse(source)
    assert (info.value.line, info.value.column) == (2, column)
    assert message in str(info.value)
