"""Exact proofs for dims whose roundings each depend on one symbol: one polynomial per residue.

A convolution stack's sizes are polynomials in its symbols and in roundings of one symbol each:
``32*b*(floor((h - 1)/4) + 1)*(floor((w - 1)/4) + 1)``, expanded. Relaxing each rounding to
``x - t`` with ``t`` in an interval (``dim_proofs``) loses what ties the roundings of one symbol
together, and "the map after a stride-4 stage is no larger than after a stride-2 one" then
fails to prove, after dozens of nodes (issue 27: MobileNetV3's plan ran out of its budget on
such questions and was dropped).

Writing each symbol as ``h = lo + L*m + r`` with ``m >= 0`` and a residue ``0 <= r < L``, where
``L`` is a multiple of ``q / gcd(q, A)`` for every rounding ``floor((A*h + K)/q)`` of ``h``,
makes every rounding linear in ``m``, exactly::

    floor((A*h + K)/q) = (A*L/q)*m + floor((A*(lo + r) + K)/q)

(``ceiling`` alike, and ``(A*h + K) % q`` the constant ``(A*(lo + r) + K) % q``). So for each
combination of residues, ``E`` is a polynomial in the ``m``s with exact coefficients, and since
every ``m`` is at least 0, ``E <= 0`` holds on that class of bindings when no coefficient of a
non-constant monomial is positive and the constant is below 1 (``E`` takes integer values). When
that holds for every class, ``E <= 0`` holds for every binding: a proof. Otherwise the method
says nothing (a positive coefficient may be outweighed where an upper bound limits ``m``), and
the caller searches as before.

It applies to a polynomial in symbols and such roundings (no ``max``/``min``, a rounding of one
symbol at a time whose argument is linear in it, ``%`` by a constant), with at most
``MAX_CLASSES`` combinations of residues. The classes are evaluated together, with numpy: per
term, the outer product over the symbols of each symbol's coefficients per residue (int64,
after a bound on the magnitudes shows nothing can overflow; else the method does not apply).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from fractions import Fraction

import numpy as np
import sympy

__all__ = ["MAX_CLASSES", "clear_caches", "prove_nonpositive_by_residues"]

#: Combinations of residues (classes of bindings) evaluated at most per question: a 2-d conv
#: stack with five stride-2 stages has periods of 32 in the height and the width (1,024).
MAX_CLASSES = 4096

#: Entries of the coefficient tensor (classes times monomials) built at most per question.
MAX_ENTRIES = 1 << 20

#: Magnitudes up to which int64 sums of products are exact (with room for the sum).
_SAFE = 1 << 62

_ROUNDINGS = (sympy.floor, sympy.ceiling, sympy.Mod)


class _NotApplicable(Exception):
    """``E`` is not a polynomial in symbols and one-symbol roundings the method handles."""


class _Atom:
    """A factor of one symbol: the symbol itself, or a rounding of ``(A*s + K)/q``."""

    __slots__ = ("a", "k", "kind", "q")

    def __init__(self, kind: str, a: int, k: int, q: int) -> None:
        self.kind, self.a, self.k, self.q = kind, a, k, q

    def period(self) -> int:
        """The least period of residues that makes this atom linear in ``m``."""
        return 1 if self.kind == "symbol" else self.q // math.gcd(self.q, abs(self.a)) or 1

    def linear(self, lo: int, period: int, r: int) -> tuple[int, int]:
        """``(slope, constant)``: the atom is ``slope*m + constant`` at ``lo + period*m + r``."""
        if self.kind == "symbol":
            return period, lo + r
        top = self.a * (lo + r) + self.k
        slope = self.a * period // self.q  # exact: period is a multiple of q / gcd(q, a)
        if self.kind == "floor":
            return slope, top // self.q
        if self.kind == "ceiling":
            return slope, -(-top // self.q)
        return 0, top % self.q  # Mod: the m part is a multiple of q


def prove_nonpositive_by_residues(
    e: sympy.Expr, bounds: Mapping[sympy.Basic, tuple[object, object]]
) -> tuple[bool, int] | None:
    """Whether ``e <= 0`` is proved for every integer binding within ``bounds`` (symbol ->
    ``(lo, hi)``, ``[0, inf)`` when absent) by the residue classes (module docstring), and how
    many classes were evaluated; None when the method does not apply to ``e``, which must be
    expanded (a product of sums is not parsed: None)."""
    try:
        terms, symbols = _terms(e)
    except _NotApplicable:
        return None
    ranges = []
    for s in symbols:
        lo, hi = bounds.get(s, (0, None))
        if not isinstance(lo, int) or not (hi is None or isinstance(hi, int)):
            return None
        ranges.append((lo, hi))
    periods = [1] * len(symbols)
    for _, factors in terms:
        for i, atoms in factors.items():
            for atom, _ in atoms:
                periods[i] = math.lcm(periods[i], atom.period())
    residues = [
        range(p if hi is None else max(0, min(p, hi - lo + 1)))
        for p, (lo, hi) in zip(periods, ranges, strict=True)
    ]
    classes = math.prod(len(r) for r in residues)
    if classes == 0:
        return True, 1  # no binding at all within the bounds
    if classes > MAX_CLASSES:
        return None
    degrees = [
        1 + max((sum(x for _, x in f.get(i, ())) for _, f in terms), default=0)
        for i in range(len(symbols))
    ]
    if classes * math.prod(degrees) > MAX_ENTRIES:
        return None
    scale = math.lcm(*(c.denominator for c, _ in terms))
    total = _coefficients(terms, symbols, ranges, periods, residues, degrees, scale)
    if total is None:
        return None
    # ``total[r1, e1, r2, e2, ...]``: the coefficient of m1**e1 * m2**e2 ... in class (r1, r2,
    # ...), times ``scale``. The constants are where every exponent is 0.
    constant = total[(slice(None), 0) * len(symbols)] if symbols else total
    rest = total.copy()
    rest[(slice(None), 0) * len(symbols)] = 0
    return bool((constant < scale).all() and (rest <= 0).all()), classes


def clear_caches() -> None:
    """Forget the parsed factors (for tests that count work)."""
    _atom.cache_clear()


def _coefficients(
    terms: list[tuple[Fraction, dict[int, list[tuple[_Atom, int]]]]],
    symbols: list[sympy.Basic],
    ranges: list[tuple[int, int | None]],
    periods: list[int],
    residues: list[range],
    degrees: list[int],
    scale: int,
) -> np.ndarray | None:
    """The sum over the terms of their outer products (module docstring), or None if int64
    could overflow."""
    shape = [n for r, d in zip(residues, degrees, strict=True) for n in (len(r), d)]
    total = np.zeros(shape, np.int64)
    largest = 0
    for coeff, factors in terms:
        c = int(coeff * scale)
        magnitude = abs(c)
        if magnitude >= _SAFE:
            return None
        product = np.array(c, np.int64)
        for i, (lo, _) in enumerate(ranges):
            table = _table(factors.get(i, []), lo, periods[i], residues[i], degrees[i])
            magnitude *= max(abs(x) for row in table for x in row)
            if magnitude >= _SAFE:
                return None
            product = np.multiply.outer(product, np.array(table, np.int64))
        largest += magnitude
        if largest >= _SAFE:
            return None
        total += product
    return total


def _table(
    atoms: list[tuple[_Atom, int]], lo: int, period: int, residues: range, degree: int
) -> list[list[int]]:
    """Per residue, the coefficients (by power of ``m``, ``degree`` of them) of the product of
    one term's atoms of one symbol."""
    rows = []
    for r in residues:
        poly = [1]
        for atom, power in atoms:
            slope, constant = atom.linear(lo, period, r)
            for _ in range(power):
                poly = [
                    (poly[j] if j < len(poly) else 0) * constant
                    + (poly[j - 1] * slope if j >= 1 else 0)
                    for j in range(len(poly) + 1)
                ]
        rows.append(poly + [0] * (degree - len(poly)))
    return rows


def _terms(
    e: sympy.Expr,
) -> tuple[list[tuple[Fraction, dict[int, list[tuple[_Atom, int]]]]], list[sympy.Basic]]:
    """``e`` as terms ``(coefficient, {symbol index: [(atom, power)]})`` and its symbols."""
    symbols: list[sympy.Basic] = []
    index: dict[sympy.Basic, int] = {}
    terms = []
    for term in sympy.Add.make_args(e):
        coeff, rest = term.as_coeff_Mul()
        if not coeff.is_Rational:
            raise _NotApplicable
        factors: dict[int, list[tuple[_Atom, int]]] = {}
        for factor in sympy.Mul.make_args(rest):
            if factor == 1:
                continue
            base, power = factor.as_base_exp()
            if not (power.is_Integer and power > 0):
                raise _NotApplicable
            found = _atom(base)
            if found is None:
                raise _NotApplicable
            symbol, atom = found
            if symbol not in index:
                index[symbol] = len(symbols)
                symbols.append(symbol)
            factors.setdefault(index[symbol], []).append((atom, int(power)))
        terms.append((Fraction(int(coeff.p), int(coeff.q)), factors))
    return terms, symbols


@functools.lru_cache(maxsize=16384)
def _atom(base: sympy.Expr) -> tuple[sympy.Basic, _Atom] | None:
    """The symbol of one factor and the factor as an ``_Atom``; None if it is neither an
    integer symbol nor a rounding of one (cached: a model's questions share their factors)."""
    try:
        if base.is_Symbol:
            return (base, _Atom("symbol", 1, 0, 1)) if base.is_integer else None
        if isinstance(base, sympy.Mod):
            top, q = base.args
            if not (q.is_Integer and q > 0):
                return None
            symbol, a, k, d = _linear(top)
            return (symbol, _Atom("mod", a, k, int(q))) if d == 1 else None
        if isinstance(base, (sympy.floor, sympy.ceiling)):
            symbol, a, k, q = _linear(base.args[0])
            return symbol, _Atom("floor" if isinstance(base, sympy.floor) else "ceiling", a, k, q)
    except _NotApplicable:
        return None
    return None


def _linear(arg: sympy.Expr) -> tuple[sympy.Basic, int, int, int]:
    """``arg`` as ``(A*s + K)/q`` with integers ``A``, ``K``, ``q >= 1`` and one integer symbol
    (sympy keeps such a sum with a number factor distributed: ``h/2 - 1/2``)."""
    symbol, slope, constant = None, sympy.S.Zero, sympy.S.Zero
    for term in sympy.Add.make_args(arg):
        coeff, rest = term.as_coeff_Mul()
        if not coeff.is_Rational:
            raise _NotApplicable
        if rest is sympy.S.One:
            constant += coeff
        elif rest.is_Symbol and rest.is_integer and symbol in (None, rest):
            symbol, slope = rest, slope + coeff
        else:
            raise _NotApplicable
    if symbol is None or slope == 0:
        raise _NotApplicable
    q = math.lcm(int(slope.q), int(constant.q))
    return symbol, int(slope * q), int(constant * q), q
