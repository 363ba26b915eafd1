"""Proofs about dims with floor division, modulo, ceiling, min and max: ``decide(a, op, b)``.

sympy decides ``n + 1 > n`` but not ``n // 2 <= n``, ``n % 3 < 3`` or ``ceil(n/2) <= n``: its
assumptions do not see through ``floor``, ``Mod``, ``Max`` and ``Min``. This module proves such
facts by one sound procedure, which ``ir.dims.compare`` (and so ``dim_max``, ``dim_min`` and the
memory planner's ``dims_le``) falls back to when sympy and the declared ranges say nothing.

To prove ``E <= 0`` for the integer-valued ``E = a - b``:

1. **Relax** each non-polynomial part into a polynomial with fresh bounded variables, in a way
   that holds for every value of the symbols (so a proof about the relaxation is a proof about
   ``E``): ``floor(x) = x - t`` and ``ceil(x) = x + t`` with ``t`` in ``[0, (q-1)/q]`` when ``x``
   is a polynomial whose coefficients have denominators dividing ``q`` (else ``[0, 1]``);
   ``a % b`` is some ``r`` in ``[0, b_hi - 1]``, or ``b - 1 - s`` with ``s >= 0`` (when
   ``b >= 1``), or ``a - s`` with ``s >= 0`` (when ``a >= 0``): any one relaxation that proves
   the fact is enough, so each is tried.
2. **Split cases** for ``max`` and ``min``: ``max(x, y)`` is ``x`` or ``y``, and the fact must
   hold in every case; or relax ``max(x, y)`` to ``x + s`` (or ``y + s``) with ``s >= 0``, and
   ``min(x, y)`` to ``x - s``.
3. **Bound** each case's polynomial by interval arithmetic over the symbols' ranges (``[0, inf)``
   unless declared; ``ir/ranges.py``), on the expanded and the unexpanded form (both sound: keep
   the tighter). Since ``E`` is an integer, an upper bound below 1 proves ``E <= 0``.

``a < b`` is ``a - b + 1 <= 0``; ``a == b`` is both ``a <= b`` and ``b <= a``; a fact is refuted
when its negation is proved. The work is capped (``MAX_CASES`` combinations): past it the answer
is "unknown", never a guess.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Iterator
from fractions import Fraction

import sympy

from .ranges import Ranges, VarBound, _interval

__all__ = ["MAX_CASES", "coefficient_denominator", "decide", "divisible_by", "prove_nonpositive"]

#: At most this many (relaxation, case) combinations are bounded per question.
MAX_CASES = 64

Env = dict[sympy.Basic, VarBound]
Case = tuple[sympy.Expr, Env]
Alternative = list[Case]
"""One way to relax an expression: the cases, every one of which must be proved."""


def decide(a: sympy.Expr, op: str, b: sympy.Expr, ranges: Ranges) -> bool | None:
    """``a op b`` for ``op`` in ``== != < <= > >=``: True or False when proved, else None."""
    if op in (">", ">="):
        a, b, op = b, a, "<" if op == ">" else "<="
    if op == "<=":
        return _verdict(a - b, b - a + 1, ranges)
    if op == "<":
        return _verdict(a - b + 1, b - a, ranges)
    le, ge = _verdict(a - b, b - a + 1, ranges), _verdict(b - a, a - b + 1, ranges)
    if le is True and ge is True:
        equal: bool | None = True
    elif le is False or ge is False:
        equal = False
    else:
        equal = None
    if equal is None or op == "==":
        return equal
    return not equal


def _verdict(holds: sympy.Expr, fails: sympy.Expr, ranges: Ranges) -> bool | None:
    """True if ``holds <= 0`` is proved, False if ``fails <= 0`` is, else None."""
    if prove_nonpositive(holds, ranges):
        return True
    if prove_nonpositive(fails, ranges):
        return False
    return None


def prove_nonpositive(e: sympy.Expr, ranges: Ranges) -> bool:
    """True if the integer-valued dim expression ``e`` is ``<= 0`` for every value of its
    symbols in ``ranges`` (see the module docstring); False means *not proved*."""
    return _prove(sympy.expand(e), ranges)


@functools.lru_cache(maxsize=65536)
def _prove(e: sympy.Expr, ranges: Ranges) -> bool:
    if e.is_Number:
        return bool(e <= 0)
    env: Env = {s: ranges.get(s, (0, None)) for s in e.free_symbols}
    budget = [MAX_CASES]
    for alternative in _alternatives(e, env, budget):
        if all(_upper(x, case_env) < 1 for x, case_env in alternative):
            return True
        if budget[0] <= 0:
            return False
    return False


def _upper(e: sympy.Expr, env: Env) -> Fraction | float:
    """An upper bound of ``e`` (the tighter of its expanded and its given form)."""
    hi = _interval(e, env)[1]
    expanded = sympy.expand(e)
    if expanded != e:
        other = _interval(expanded, env)[1]
        hi = other if other < hi else hi
    return hi


def _alternatives(e: sympy.Expr, env: Env, budget: list[int]) -> Iterator[Alternative]:
    """The relaxations of ``e``, each as its cases (see the module docstring)."""
    if not _needs_relaxing(e):
        budget[0] -= 1
        yield [(e, env)]
        return
    if isinstance(e, (sympy.floor, sympy.ceiling)):
        down = isinstance(e, sympy.floor)
        for inner in _alternatives(e.args[0], env, budget):
            yield [_round(x, case_env, down) for x, case_env in inner]
        return
    if isinstance(e, sympy.Mod):
        yield from _mod_alternatives(e, env, budget)
        return
    if isinstance(e, (sympy.Max, sympy.Min)):
        # Also relaxed as one argument plus (max) or minus (min) some s >= 0: what proves
        # max(m, n) >= n, where the case split would need m >= n too.
        sign = 1 if isinstance(e, sympy.Max) else -1
        for arg in e.args:
            for alternative in itertools.islice(_alternatives(arg, env, budget), 4):
                cases = []
                for x, case_env in alternative:
                    s, s_env = _fresh(case_env, 0, None)
                    cases.append((x + sign * s, s_env))
                yield cases
    # A max or min is one of its arguments: every case must be proved. A sum, product or power
    # combines one relaxation of each argument (their cases multiply).
    per_arg = [list(itertools.islice(_alternatives(a, env, budget), 4)) for a in e.args]
    for choice in itertools.product(*per_arg):
        if isinstance(e, (sympy.Max, sympy.Min)):
            yield [case for alternative in choice for case in alternative]
        else:
            combined: Alternative = []
            for picked in itertools.product(*choice):
                merged: Env = dict(env)
                for _, case_env in picked:
                    merged.update(case_env)
                combined.append((e.func(*(x for x, _ in picked)), merged))
                budget[0] -= 1
            yield combined
        if budget[0] <= 0:
            return


_RELAXED = (sympy.floor, sympy.ceiling, sympy.Mod, sympy.Max, sympy.Min)


def _needs_relaxing(e: sympy.Basic) -> bool:
    return any(isinstance(x, _RELAXED) for x in sympy.preorder_traversal(e))


def _fresh(
    env: Env, lo: Fraction | float | int, hi: Fraction | float | int | None
) -> tuple[sympy.Dummy, Env]:
    """A new relaxation variable in ``[lo, hi]`` (real-valued: sympy assumes nothing)."""
    t = sympy.Dummy("t")
    return t, {**env, t: (lo, hi)}


def _round(x: sympy.Expr, env: Env, down: bool) -> Case:
    """``floor(x)`` as ``x - t`` (``ceil(x)`` as ``x + t``), ``t`` in ``[0, (q-1)/q]``."""
    q = _denominator(x)
    t, env = _fresh(env, 0, Fraction(q - 1, q) if q is not None else 1)
    return (x - t if down else x + t), env


def _denominator(x: sympy.Expr) -> int | None:
    """``q`` such that ``q*x`` is an integer for all integer values of its symbols, or None
    when that is not known (a relaxation variable is not an integer)."""
    expanded = sympy.expand(x)
    terms = sympy.Add.make_args(expanded)
    if not all(_integer_monomial(term.as_coeff_Mul()[1]) for term in terms):
        return None
    return coefficient_denominator(expanded)


def coefficient_denominator(e: sympy.Expr) -> int:
    """The least common denominator of the rational coefficients of ``e``'s terms (1 when they
    are all integers, or not rational): ``q*e`` has integer coefficients."""
    q = 1
    for term in sympy.Add.make_args(e):
        coeff = term.as_coeff_Mul()[0]
        if coeff.is_Rational:
            q = q * int(coeff.q) // math.gcd(q, int(coeff.q))
    return q


def divisible_by(e: sympy.Expr | int, k: int) -> bool:
    """True only if the integer-valued dim ``e`` is a multiple of ``k`` for every value of its
    symbols, proved from its structure: a sum of multiples, a product with a multiple among its
    factors (the coefficient's common factor counts), a max or min of multiples. sympy's ``Mod``
    does not see through ``Max`` (``max(8, 8*n) % 4`` stays unevaluated).
    """
    if k == 1:
        return True
    e = sympy.sympify(e)
    if e.is_Integer:
        return int(e) % k == 0
    if isinstance(e, (sympy.Add, sympy.Max, sympy.Min)):
        return all(divisible_by(a, k) for a in e.args)
    if isinstance(e, sympy.Mul):
        coeff, rest = e.as_coeff_Mul()
        if not coeff.is_Integer:
            return False
        need = k // math.gcd(int(coeff), k)
        return need == 1 or any(
            _integer_valued(f) and divisible_by(f, need) for f in sympy.Mul.make_args(rest)
        )
    return False


def _integer_valued(e: sympy.Expr) -> bool:
    """``e`` takes integer values: an integer, an integer symbol, or built from them by
    ``floor``, ``ceiling``, ``Mod``, ``Max``, ``Min``, sums and products."""
    if e.is_Integer or (e.is_Symbol and e.is_integer):
        return True
    if isinstance(e, (sympy.floor, sympy.ceiling)):
        return True
    if isinstance(e, (sympy.Add, sympy.Mul, sympy.Max, sympy.Min, sympy.Mod)):
        return all(_integer_valued(a) for a in e.args)
    return isinstance(e, sympy.Pow) and e.exp.is_Integer and e.exp >= 0 and _integer_valued(e.base)


def _integer_monomial(m: sympy.Expr) -> bool:
    """True if ``m`` is a product of non-negative integer powers of integer symbols."""
    for f in sympy.Mul.make_args(m):
        if f == 1:
            continue
        base, exp = f.as_base_exp()
        if not (base.is_Symbol and base.is_integer and exp.is_Integer and exp >= 0):
            return False
    return True


def _mod_alternatives(e: sympy.Mod, env: Env, budget: list[int]) -> Iterator[Alternative]:
    """``a % b`` relaxed: ``r`` in its interval; ``b - 1 - s`` (``b >= 1``); ``a - s``
    (``a >= 0``), with ``s >= 0``. Any one that proves the fact is enough."""
    a, b = e.args
    (a_lo, _), (b_lo, _) = _interval(a, env), _interval(b, env)
    lo, hi = _interval(e, env)
    if not math.isinf(lo):
        r, r_env = _fresh(env, lo, None if math.isinf(hi) else hi)
        budget[0] -= 1
        yield [(r, r_env)]
    for applies, operand, offset in ((b_lo >= 1, b, 1), (a_lo >= 0, a, 0)):
        if not applies:
            continue
        for alternative in _alternatives(operand, env, budget):
            cases = []
            for x, case_env in alternative:
                s, s_env = _fresh(case_env, 0, None)
                cases.append((x - offset - s, s_env))
            yield cases
