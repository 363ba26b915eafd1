"""``dynshape.analysis.dim_bounds``: sums of monomials are not expanded again (and equal what
expanding gives), other sums are; a number times a max is compared by the max's structure."""

from __future__ import annotations

import sympy
from hypothesis import given, settings
from hypothesis import strategies as st

import ir
from dynshape.analysis.dim_bounds import add_dims, dims_le

b, h, w = ir.sym("b"), ir.sym("h"), ir.sym("w")
_MONOMIALS = [1, b, h * w, b * sympy.floor((h - 1) / 2), b * sympy.floor((w - 1) / 4) ** 2]


@st.composite
def _expanded(draw: st.DrawFn) -> sympy.Expr:
    terms = [
        draw(st.integers(-5, 5)) * draw(st.sampled_from(_MONOMIALS))
        for _ in range(draw(st.integers(0, 4)))
    ]
    return sympy.expand(sympy.Add(*terms))


@settings(max_examples=200, deadline=None)
@given(_expanded(), _expanded())
def test_a_sum_of_monomials_is_what_expanding_gives(x: sympy.Expr, y: sympy.Expr) -> None:
    got, want = add_dims(x, y), ir.simplify(x + y)
    assert got == want and isinstance(got, int) == isinstance(want, int)


def test_a_sum_with_a_product_of_sums_is_expanded() -> None:
    assert add_dims(b * (h + 1), h) == b * h + b + h
    assert add_dims((h + 1) ** 2, -1) == h**2 + 2 * h
    assert add_dims(h + w, -h - w) == 0 and isinstance(add_dims(h + w, -h - w), int)


def test_a_number_times_a_max_is_compared_by_its_arguments() -> None:
    two_blocks = 2 * sympy.Max(4 * b * h, 3 * b * w)
    assert dims_le(two_blocks, sympy.Max(8 * b * h, 6 * b * w, b, evaluate=False))
    assert not dims_le(two_blocks, sympy.Max(8 * b * h, 5 * b * w, evaluate=False))
    assert dims_le(sympy.Min(h, w), 3 * sympy.Min(h, w + 1))
