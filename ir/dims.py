"""Dimensions: plain ints when static, sympy expressions over named or anonymous symbols when not.

Every symbol is an integer and non-negative, so sympy can prove facts such as ``n + 1 > n``.
A ``?`` dim is an *anonymous* symbol (a ``sympy.Dummy``): two of them are always different.

Comparisons answer ``True``, ``False`` or ``None`` (unknown); pass code must never call
``bool()`` on a sympy relational. They try sympy's assumptions, then the declared ranges
(``ranges.py``), then the relaxation procedure for ``// % ceil max min`` (``dim_proofs.py``):
each sound, so an answer is a proof, and ``dim_max``/``dim_min`` fold only on one. Results are
cached because sympy is slow.
"""

from __future__ import annotations

import functools
import itertools
import operator
from collections.abc import Callable, Mapping
from typing import Any, TypeAlias

import numpy as np
import sympy

from . import dim_proofs
from .errors import IRError
from .ranges import Ranges, as_ranges, bounds, simplify_under, upper_bound
from .ranges import decide as _decide_ranged

__all__ = [
    "Dim",
    "Ranges",
    "anonymous_watermark",
    "as_expr",
    "bounds",
    "check_dim",
    "compare",
    "dim_max",
    "dim_min",
    "free_symbols",
    "fresh",
    "is_anonymous",
    "is_newer",
    "is_static",
    "known_equal",
    "simplify",
    "simplify_under",
    "sym",
    "upper_bound",
]

#: A dimension: a non-negative ``int``, or a sympy expression with integer non-negative symbols.
Dim: TypeAlias = int | sympy.Expr

_ASSUMPTIONS = {"integer": True, "nonnegative": True}
_anonymous_counter = itertools.count()


def sym(name: str) -> sympy.Symbol:
    """Return the named dimension symbol ``name`` (the same object for the same name)."""
    if not name.isidentifier():
        raise IRError(f"bad symbol name {name!r}: must be an identifier")
    return sympy.Symbol(name, **_ASSUMPTIONS)


def fresh(hint: str = "any") -> sympy.Dummy:
    """Return a new anonymous dimension symbol, different from every other (printed ``?``)."""
    return sympy.Dummy(f"{hint}{next(_anonymous_counter)}", **_ASSUMPTIONS)


def anonymous_watermark() -> int:
    """A mark such that every anonymous symbol made after this call has ``is_newer(s, mark)``."""
    return int(sympy.Dummy().dummy_index) + 1


def is_newer(symbol: sympy.Basic, mark: int) -> bool:
    """True if ``symbol`` is an anonymous symbol made after ``mark`` was taken."""
    return isinstance(symbol, sympy.Dummy) and symbol.dummy_index >= mark


def is_anonymous(symbol: sympy.Basic) -> bool:
    """True if ``symbol`` is an anonymous (``?``) dimension symbol."""
    return isinstance(symbol, sympy.Dummy)


def is_static(dim: Dim) -> bool:
    """True if ``dim`` is a known integer."""
    return isinstance(dim, int)


def free_symbols(dim: Dim) -> frozenset[sympy.Symbol]:
    """The symbols a dim mentions (empty for a static dim)."""
    if isinstance(dim, int):
        return frozenset()
    return frozenset(dim.free_symbols)


def check_dim(dim: object) -> Dim:
    """Validate and normalise one dim: sympy integers become ints; symbols must be dim symbols.

    Raises IRError naming the dim when it is negative, not an integer expression, or mentions
    a symbol that is not a non-negative integer.
    """
    if isinstance(dim, (bool, np.bool_)):
        raise IRError(f"bad dim {dim!r}: a dim is an int or a symbolic expression, not a bool")
    if isinstance(dim, np.integer):
        return check_dim(int(dim))  # a numpy integer, as numpy takes it in a shape
    if isinstance(dim, int):
        if dim < 0:
            raise IRError(f"bad dim {dim}: dims are non-negative")
        return dim
    if isinstance(dim, sympy.Integer):
        return check_dim(int(dim))
    if isinstance(dim, sympy.Expr):
        return _check_symbolic(dim)
    raise IRError(f"bad dim {dim!r}: a dim is an int or a sympy expression")


@functools.lru_cache(maxsize=65536)
def _check_symbolic(dim: sympy.Expr) -> Dim:
    for s in dim.free_symbols:
        if not (s.is_integer and s.is_nonnegative):
            raise IRError(
                f"bad dim {dim}: symbol {s} must be declared integer and non-negative "
                "(use ir.sym(name))"
            )
    # The structural test first: sympy's ``is_integer`` on a product of floors of sums asks
    # its assumptions about every factor pair (a second on a detector's arena sizes).
    if not _integer_valued(dim) and dim.is_integer is not True:
        raise IRError(f"bad dim {dim}: not an integer expression")
    if _proved_negative(dim):
        raise IRError(f"bad dim {dim}: dims are non-negative")
    return dim


#: The size (nodes of its tree) up to which a dim is given to sympy's ``is_negative``: on the
#: compiler's own sums of products of floors (a detector's arena sizes) it takes tens of seconds
#: and can say nothing; the dims a user writes are far smaller.
NEGATIVITY_PROOF_NODES = 60


def _proved_negative(dim: sympy.Expr) -> bool:
    """True if ``dim`` is negative for every value of its symbols, as far as a bounded proof
    sees (a dim too large to ask sympy about counts as not negative)."""
    if _nonnegative_by_structure(dim):
        return False
    for nodes, _ in enumerate(sympy.preorder_traversal(dim)):
        if nodes >= NEGATIVITY_PROOF_NODES:
            return False
    return dim.is_negative is True


def _nonnegative_by_structure(expr: sympy.Basic) -> bool:
    """True if a lower bound of ``expr`` from its structure (``_lower_bound``) is at least 0:
    cheaper than sympy's ``is_negative``, which on the planner's arena sizes asks its
    assumptions about every factor of every term, and on a convolution's
    ``floor(h/2 - 1/2) + 1`` took milliseconds a dim."""
    low = _lower_bound(expr)
    return low is not None and low >= 0


def _lower_bound(expr: sympy.Basic) -> sympy.Rational | None:
    """A lower bound of ``expr`` for every value of its (non-negative) symbols, from numbers,
    symbols, ``+``, products and powers of non-negative parts, floor, ceiling, max and min;
    None where the structure gives none."""
    if isinstance(expr, sympy.Rational):
        return expr
    if isinstance(expr, sympy.Symbol):
        return sympy.S.Zero if expr.is_nonnegative is True else None
    if isinstance(expr, (sympy.floor, sympy.ceiling)):
        low = _lower_bound(expr.args[0])
        return None if low is None else type(expr)(low)
    if isinstance(expr, sympy.Max):
        known = [b for b in map(_lower_bound, expr.args) if b is not None]
        return max(known) if known else None
    found = [_lower_bound(a) for a in expr.args]
    lows = [b for b in found if b is not None]
    if len(lows) < len(found):
        return None
    if isinstance(expr, sympy.Add):
        return sympy.Add(*lows)
    if isinstance(expr, sympy.Min):
        return min(lows)
    if isinstance(expr, sympy.Mul) and all(b >= 0 for b in lows):
        return sympy.Mul(*lows)
    if isinstance(expr, sympy.Pow) and lows[0] >= 0 and expr.exp.is_Integer and expr.exp >= 0:
        return lows[0] ** int(expr.exp)
    return None


def _integer_valued(expr: sympy.Basic) -> bool:
    """True if ``expr`` is built from integers with + * floor Mod Max Min and no true division.

    sympy cannot always prove ``floor(n/m)`` an integer (m may be 0), but such a dim is one
    wherever it is defined; ``n/2`` is not.
    """
    if isinstance(expr, (sympy.floor, sympy.ceiling, sympy.Mod)):
        return True
    if isinstance(expr, sympy.Rational):
        return expr.is_integer is True
    if isinstance(expr, sympy.Pow):
        return (
            expr.exp.is_integer is True
            and expr.exp.is_nonnegative is True
            and _integer_valued(expr.base)
        )
    if isinstance(expr, sympy.Symbol):
        return expr.is_integer is True
    return all(_integer_valued(a) for a in expr.args)


def simplify(dim: Dim) -> Dim:
    """Return a canonical form of ``dim`` (constants folded, like terms collected)."""
    if isinstance(dim, int):
        return dim
    return _simplify(dim)


@functools.lru_cache(maxsize=65536)
def _simplify(dim: sympy.Expr) -> Dim:
    out = sympy.expand(dim)
    if isinstance(out, sympy.Integer):
        return int(out)
    return out


def as_expr(dim: Dim) -> sympy.Expr:
    """The dim as a sympy expression (ints become ``sympy.Integer``)."""
    return sympy.Integer(dim) if isinstance(dim, int) else dim


def compare(a: Dim, op: str, b: Dim, ranges: Mapping[Any, Any] | None = None) -> bool | None:
    """Decide ``a op b`` for ``op`` in ``== != < <= > >=``: True, False, or None if unknown.

    ``ranges`` (symbol or name -> ``(lo, hi)``, ``hi`` None for no upper bound; see
    ``ir.ranges``) are used when sympy alone cannot decide: with ``n`` in ``[4, 4]``,
    ``n == 4`` is proven; with ``n`` in ``[1, 10]``, ``n <= 16`` is.
    """
    if isinstance(a, int) and isinstance(b, int):
        return COMPARE[op](a, b)
    ea, eb = as_expr(a), as_expr(b)
    verdict = _compare_symbolic(ea, op, eb)
    if verdict is not None:
        return verdict
    relevant = as_ranges(ranges).restrict(ea.free_symbols | eb.free_symbols)
    if relevant:
        if op in (">", ">="):
            ea, eb, op = eb, ea, "<" if op == ">" else "<="
        verdict = _decide_ranged(ea, op, eb, relevant)
        if verdict is not None:
            return verdict
    # floor, ceil, mod, min and max, which sympy and plain intervals do not see through.
    return dim_proofs.decide(ea, op, eb, relevant)


#: The comparisons of dims, by name, on ints (the compiler's one table; below ``ir``,
#: ``shape_funcs.context.COMPARE`` is the same for the VM).
COMPARE: dict[str, Callable[[int, int], bool]] = {
    "==": operator.eq,
    "!=": operator.ne,
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
}


@functools.lru_cache(maxsize=65536)
def _compare_symbolic(a: sympy.Expr, op: str, b: sympy.Expr) -> bool | None:
    if op not in COMPARE:
        raise ValueError(f"unknown comparison {op!r}")
    if op in (">", ">="):
        a, b, op = b, a, "<" if op == ">" else "<="
    diff = sympy.expand(b - a)  # the question becomes a fact about diff = b - a
    if op in ("==", "!="):
        equal = _is_zero(diff)
        return equal if equal is None or op == "==" else not equal
    if op == "<":
        return _fuzzy(diff.is_positive)
    return _fuzzy(diff.is_nonnegative)


def _is_zero(diff: sympy.Expr) -> bool | None:
    if diff == 0:
        return True
    return _fuzzy(diff.is_zero)


def _fuzzy(value: bool | None) -> bool | None:
    return None if value is None else bool(value)


def known_equal(a: Dim, b: Dim, ranges: Mapping[Any, Any] | None = None) -> bool:
    """True only if ``a == b`` is proven (False means 'not proven', not 'different')."""
    return compare(a, "==", b, ranges) is True


def dim_max(a: Dim, b: Dim, ranges: Mapping[Any, Any] | None = None) -> Dim:
    """The larger of two dims, simplified when the order is provable (under ``ranges``)."""
    if compare(a, ">=", b, ranges):
        return a
    if compare(b, ">=", a, ranges):
        return b
    return sympy.Max(as_expr(a), as_expr(b))


def dim_min(a: Dim, b: Dim, ranges: Mapping[Any, Any] | None = None) -> Dim:
    """The smaller of two dims, simplified when the order is provable (under ``ranges``)."""
    if compare(a, "<=", b, ranges):
        return a
    if compare(b, "<=", a, ranges):
        return b
    return sympy.Min(as_expr(a), as_expr(b))
