"""``ir.roundings``: floors and ceilings built without sympy's assumption queries are the very
expressions ``sympy.floor`` and ``sympy.ceiling`` build (equal, same type), on random dim
polynomials; other arguments go to sympy."""

from __future__ import annotations

import sympy
from hypothesis import given, settings
from hypothesis import strategies as st

import ir
from ir.roundings import ceiling_of, floor_of

h, w, b = ir.sym("h"), ir.sym("w"), ir.sym("b")
_ATOMS = [1, h, w, b, h * w, h**2, sympy.floor(h / 3), sympy.ceiling((w - 1) / 2)]


@st.composite
def _arguments(draw: st.DrawFn) -> sympy.Expr:
    terms = [
        sympy.Rational(draw(st.integers(-9, 9)), draw(st.sampled_from([1, 1, 2, 3, 4, 8])))
        * draw(st.sampled_from(_ATOMS))
        for _ in range(draw(st.integers(1, 4)))
    ]
    return sympy.Add(*terms)


@settings(max_examples=300, deadline=None)
@given(_arguments())
def test_the_same_expression_as_sympy_builds(arg: sympy.Expr) -> None:
    for fast, kind in ((floor_of, sympy.floor), (ceiling_of, sympy.ceiling)):
        got, want = fast(arg), kind(arg)
        assert got == want and type(got) is type(want), (arg, got, want)


def test_integer_terms_come_out_and_numbers_are_rounded() -> None:
    assert floor_of((h - 1) / 2) == sympy.floor(h / 2 - sympy.Rational(1, 2))
    assert floor_of(h / 2 + 3) == sympy.floor(h / 2) + 3
    assert floor_of(2 * h + sympy.Rational(1, 2)) == 2 * h
    assert ceiling_of(2 * h + sympy.Rational(1, 2)) == 2 * h + 1
    assert floor_of(7) == 7 and ceiling_of(sympy.Rational(-7, 2)) == -3


def test_other_arguments_go_to_sympy() -> None:
    x = sympy.Symbol("x")  # not an integer
    for arg in (x / 2, sympy.Max(h, w) / 2, sympy.sqrt(2) * h):
        assert floor_of(arg) == sympy.floor(arg)
        assert ceiling_of(arg) == sympy.ceiling(arg)
