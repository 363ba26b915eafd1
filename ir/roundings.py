"""``floor`` and ``ceiling`` of dims, built without sympy's assumption queries.

``sympy.floor(h/2 - 1/2)`` asks whether its argument is an integer, imaginary, or real times
``I``, and for a sum with a symbol each question walks sympy's assumption rules (derivatives
included): 10-20 ms for every new rounding (sympy 1.14; answers are cached per expression
afterwards). A convolution stack's shapes, and the folding of their towers
(``dim_proofs.fold_roundings``), create dozens of new ones: a third of a MobileNet's import.

For an argument that is a sum of terms, each a rational coefficient times integer symbols and
roundings (and their positive powers), the evaluated form is known without asking: the terms
with an integer coefficient are integers and come out of the rounding; the others stay inside,
unevaluated (a numbers-only rest is rounded as a number). That is the form sympy's own
evaluation returns for such an argument (tested for equality), so expressions built either way
are the same expression. Any other argument goes to sympy.
"""

from __future__ import annotations

import sympy

__all__ = ["ceiling_of", "floor_of"]


def floor_of(arg: sympy.Expr | int) -> sympy.Expr:
    """``sympy.floor(arg)``, without assumption queries for dim polynomials (module doc)."""
    return _rounded(sympy.floor, sympy.sympify(arg))


def ceiling_of(arg: sympy.Expr | int) -> sympy.Expr:
    """``sympy.ceiling(arg)``, without assumption queries for dim polynomials (module doc)."""
    return _rounded(sympy.ceiling, sympy.sympify(arg))


def _rounded(kind: type[sympy.Function], arg: sympy.Expr) -> sympy.Expr:
    if arg.is_Number:
        return kind(arg)
    outside: list[sympy.Expr] = []
    inside: list[sympy.Expr] = []
    for term in sympy.Add.make_args(arg):
        coeff, rest = term.as_coeff_Mul()
        if not (coeff.is_Rational and _integer_product(rest)):
            return kind(arg)
        (outside if coeff.is_Integer else inside).append(term)
    whole = sympy.Add(*outside)
    if not inside:
        return whole
    rest = sympy.Add(*inside)
    if rest.is_Number:
        return whole + kind(rest)
    return whole + kind(rest, evaluate=False)


def _integer_product(e: sympy.Expr) -> bool:
    """``e`` is a product of integer symbols and roundings (or their positive powers): an
    integer at every binding, by structure."""
    for factor in sympy.Mul.make_args(e):
        base, power = factor.as_base_exp()
        if not (power.is_Integer and power > 0):
            return False
        if base.is_Symbol:
            if base.is_integer is not True:
                return False
        elif not (base is sympy.S.One or isinstance(base, (sympy.floor, sympy.ceiling))):
            return False
    return True
