"""Exact values of dims at concrete symbol values, without sympy at evaluation time.

``xreplace`` of a symbolic dim rebuilds the expression (every ``Max``/``Min`` re-simplifies its
arguments), a millisecond a dim; the memory planner evaluates thousands at sample bindings.
``evaluator(dim)`` turns the expression once into a Python closure over exact arithmetic
(ints and ``Fraction``s, so ``floor(n/3)`` is exact), cached per dim; calling it costs
microseconds. Compile time only: the VM evaluates dims with its own shape programs.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping
from fractions import Fraction

import sympy

Number = int | Fraction
Evaluator = Callable[[Mapping[sympy.Basic, int]], Number]


class Undefined(ArithmeticError):
    """The dim has no value at the binding (a division or ``Mod`` by zero there)."""


def value(dim: int | sympy.Expr, values: Mapping[sympy.Basic, int]) -> int | None:
    """The integer value of ``dim`` at ``values`` (every free symbol bound), or None where it
    has none (a division by a symbol that is 0 there) or is not an integer."""
    if isinstance(dim, int):
        return dim
    try:
        out = evaluator(dim)(values)
    except Undefined:
        return None
    if isinstance(out, Fraction):
        return int(out) if out.denominator == 1 else None
    return out


@functools.lru_cache(maxsize=65536)
def evaluator(expr: sympy.Expr) -> Evaluator:
    """A closure computing ``expr`` exactly from a binding of its symbols."""
    if isinstance(expr, sympy.Integer):
        n = int(expr)
        return lambda v: n
    if isinstance(expr, sympy.Rational):
        q = Fraction(int(expr.p), int(expr.q))
        return lambda v: q
    if isinstance(expr, sympy.Symbol):
        return lambda v: v[expr]
    parts = [evaluator(a) for a in expr.args]
    if isinstance(expr, sympy.Add):
        return lambda v: sum(p(v) for p in parts)
    if isinstance(expr, sympy.Mul):
        return lambda v: math.prod(p(v) for p in parts)
    if isinstance(expr, sympy.Pow):
        base, exp = parts
        return lambda v: _power(base(v), exp(v))
    if isinstance(expr, sympy.Max):
        return lambda v: max(p(v) for p in parts)
    if isinstance(expr, sympy.Min):
        return lambda v: min(p(v) for p in parts)
    if isinstance(expr, sympy.floor):
        (inner,) = parts
        return lambda v: math.floor(inner(v))
    if isinstance(expr, sympy.ceiling):
        (inner,) = parts
        return lambda v: math.ceil(inner(v))
    if isinstance(expr, sympy.Mod):
        a, b = parts
        return lambda v: _mod(a(v), b(v))
    if isinstance(expr, sympy.Abs):
        (inner,) = parts
        return lambda v: _abs(inner(v))
    # Anything else (a function sympy made up): its own substitution, slow but exact.
    return lambda v: _by_sympy(expr, v)


def _power(base: Number, exp: Number) -> Number:
    if not isinstance(exp, int) and exp.denominator != 1:
        raise Undefined(f"a fractional power {base}**{exp}")
    e = int(exp)
    if e >= 0:
        return base**e
    if base == 0:
        raise Undefined("a division by zero")
    return Fraction(1) / Fraction(base) ** -e


def _abs(x: Number) -> Number:
    return -x if x < 0 else x


def _mod(a: Number, b: Number) -> Number:
    if b == 0:
        raise Undefined("Mod by zero")
    return a % b  # sympy's Mod takes the sign of the divisor, as Python's %


def _by_sympy(expr: sympy.Expr, v: Mapping[sympy.Basic, int]) -> Number:
    out = expr.xreplace({s: sympy.Integer(v[s]) for s in expr.free_symbols})
    if out.is_Integer:
        return int(out)
    if out.is_Rational:
        return Fraction(int(out.p), int(out.q))
    raise Undefined(f"{expr} has no value at {dict(v)}")
