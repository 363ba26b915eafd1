"""Declared ranges of dimension symbols, and interval arithmetic over dims.

A function may declare, for some of its named symbols, an inclusive range ``[lo, hi]`` (``hi``
may be ``None``: no upper bound). ``Ranges`` is the immutable, hashable mapping that holds them
(``Function.ranges``). Ranges serve proofs: ``ir.compare(a, op, b, ranges=...)`` first asks
sympy (whose symbols are only known to be non-negative integers) and, when sympy cannot decide,

1. substitutes every symbol with a range: a one-value range by its value, a symbol with
   ``lo > 0`` by ``lo + s'`` with ``s' >= 0`` (so sympy's own reasoning sees the lower bound:
   ``n*m >= m`` for ``n >= 1``), and asks sympy again;
2. bounds the (substituted, expanded) difference ``b - a`` by interval arithmetic over
   ``+ * // % max min floor ceil`` and integer powers (``bounds``), and decides from its sign.

Both steps are sound and incomplete: an answer is a proof, ``None`` means "not proven". See
design/shapes.md, "Symbol ranges".
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable, Iterator, Mapping
from fractions import Fraction
from typing import Any, TypeAlias

import sympy

from .errors import IRError

Bound: TypeAlias = tuple[int, int | None]
"""An inclusive range ``(lo, hi)``; ``hi`` is ``None`` when there is no upper bound."""

# An interval end: an exact rational, or +/- math.inf.
_Value: TypeAlias = Fraction | float
_Interval: TypeAlias = tuple[_Value, _Value]
_INF = math.inf
_UNKNOWN: _Interval = (-_INF, _INF)
#: The bounds of a variable in interval arithmetic: a symbol's range, or the range of a
#: relaxation variable of ``dim_proofs`` (a fraction; ``None`` for no upper bound).
VarBound: TypeAlias = tuple[_Value | int, _Value | int | None]


def _range_symbol(key: object) -> sympy.Symbol:
    """The named dimension symbol for a range key (a name or a symbol)."""
    if isinstance(key, str):
        if not key.isidentifier():
            raise IRError(f"bad range: {key!r} is not a symbol name")
        return sympy.Symbol(key, integer=True, nonnegative=True)
    if isinstance(key, sympy.Dummy):
        raise IRError(f"bad range for {key}: only named symbols can have ranges, not '?' dims")
    if isinstance(key, sympy.Symbol):
        if not (key.is_integer and key.is_nonnegative):
            raise IRError(
                f"bad range for {key}: symbol {key} must be a dim symbol (use ir.sym(name))"
            )
        return key
    raise IRError(f"bad range: key {key!r} is not a symbol or a symbol name")


def _is_int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def check_bound(symbol: sympy.Symbol, value: object) -> Bound:
    """Validate a range ``(lo, hi)`` of ``symbol``: ``0 <= lo``, ``hi`` None or ``>= lo``."""
    if not isinstance(value, (tuple, list)) or len(value) != 2:
        raise IRError(f"bad range for {symbol}: expected (lo, hi) with hi an int or None")
    lo, hi = value
    if isinstance(lo, sympy.Integer):
        lo = int(lo)
    if isinstance(hi, sympy.Integer):
        hi = int(hi)
    if not _is_int(lo) or not (hi is None or _is_int(hi)):
        raise IRError(f"bad range for {symbol}: bounds must be ints (hi may be None), got {value}")
    if lo < 0:
        raise IRError(f"bad range for {symbol}: the lower bound {lo} is negative")
    if hi is not None and hi < lo:
        raise IRError(f"bad range for {symbol}: [{lo}, {hi}] is empty (hi < lo)")
    return lo, hi


def range_text(bound: Bound) -> str:
    """``[lo, hi]``, or ``[lo, ...]`` without an upper bound (the text format's spelling)."""
    lo, hi = bound
    return f"[{lo}, {'...' if hi is None else hi}]"


class Ranges(Mapping[sympy.Symbol, Bound]):
    """An immutable, hashable mapping from named dim symbols to inclusive ranges.

    Built from a mapping whose keys are symbols or names (``Ranges({"n": (1, 4096)})``);
    ordered by symbol name, so printing is deterministic.
    """

    __slots__ = ("_hash", "_items")

    def __init__(self, spec: Mapping[Any, Any] | Iterable[tuple[Any, Any]] | None = None) -> None:
        pairs = spec.items() if isinstance(spec, Mapping) else (spec or ())
        items: dict[sympy.Symbol, Bound] = {}
        for key, value in pairs:
            symbol = _range_symbol(key)
            if symbol in items:
                raise IRError(f"duplicate range for {symbol}")
            items[symbol] = check_bound(symbol, value)
        self._items = dict(sorted(items.items(), key=lambda kv: kv[0].name))
        self._hash = hash(frozenset(self._items.items()))

    def __getitem__(self, key: sympy.Symbol) -> Bound:
        return self._items[key]

    def __iter__(self) -> Iterator[sympy.Symbol]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Ranges):
            return self._hash == other._hash and self._items == other._items
        if isinstance(other, Mapping):
            return self._items == dict(other.items())
        return NotImplemented

    def __repr__(self) -> str:
        inner = ", ".join(f"{s.name!r}: {b}" for s, b in self._items.items())
        return f"Ranges({{{inner}}})"

    def __str__(self) -> str:
        """``n in [1, 4096], m in [2, ...]``: the text of a ``where`` clause."""
        return ", ".join(f"{s.name} in {range_text(b)}" for s, b in self._items.items())

    def restrict(self, symbols: Iterable[sympy.Basic]) -> Ranges:
        """The ranges of those of ``symbols`` that have one."""
        keep = [(s, self._items[s]) for s in symbols if s in self._items]
        if len(keep) == len(self._items):
            return self
        out = Ranges()
        out._items = dict(sorted(keep, key=lambda kv: kv[0].name))
        out._hash = hash(frozenset(out._items.items()))
        return out


EMPTY = Ranges()
"""No declared ranges."""


def as_ranges(ranges: Mapping[Any, Any] | None) -> Ranges:
    """``ranges`` as a ``Ranges`` (``None`` is empty); names and symbols are accepted."""
    if ranges is None:
        return EMPTY
    if isinstance(ranges, Ranges):
        return ranges
    return Ranges(ranges)


# ---- interval arithmetic ---------------------------------------------------------------------


def _mul_value(a: _Value, b: _Value) -> _Value:
    if a == 0 or b == 0:
        return Fraction(0)  # a factor that is exactly 0 makes the product 0, even with an inf
    return a * b


def _mul(x: _Interval, y: _Interval) -> _Interval:
    corners = [_mul_value(a, b) for a in x for b in y]
    return min(corners), max(corners)


def _reciprocal(x: _Interval) -> _Interval:
    lo, hi = x
    if lo > 0:
        return (Fraction(0) if hi == _INF else 1 / hi), 1 / lo
    if hi < 0:
        return 1 / hi, (Fraction(0) if lo == -_INF else 1 / lo)
    return _UNKNOWN


def _floor(v: _Value) -> _Value:
    return v if math.isinf(v) else Fraction(math.floor(v))


def _ceil(v: _Value) -> _Value:
    return v if math.isinf(v) else Fraction(math.ceil(v))


def _interval(e: sympy.Basic, env: Mapping[sympy.Basic, VarBound]) -> _Interval:
    """An interval that contains every value of ``e`` when its symbols lie in their ranges
    (a symbol without a range is in ``[0, inf)``; it is a dim symbol)."""
    if e.is_Rational:
        v = Fraction(int(e.p), int(e.q))
        return v, v
    if e.is_Symbol:
        s_lo, s_hi = env.get(e, (0, None))
        return Fraction(s_lo), (_INF if s_hi is None else Fraction(s_hi))
    if e.is_Add:
        parts = [_interval(a, env) for a in e.args]
        return sum((p[0] for p in parts), Fraction(0)), sum((p[1] for p in parts), Fraction(0))
    if e.is_Mul:
        out: _Interval = (Fraction(1), Fraction(1))
        for a in e.args:
            out = _mul(out, _interval(a, env))
        return out
    if e.is_Pow:
        return _pow_interval(e, env)
    if isinstance(e, (sympy.Max, sympy.Min)):
        parts = [_interval(a, env) for a in e.args]
        pick = max if isinstance(e, sympy.Max) else min
        return pick(p[0] for p in parts), pick(p[1] for p in parts)
    if isinstance(e, sympy.floor):
        inner = _interval(e.args[0], env)
        return _floor(inner[0]), _floor(inner[1])
    if isinstance(e, sympy.ceiling):
        inner = _interval(e.args[0], env)
        return _ceil(inner[0]), _ceil(inner[1])
    if isinstance(e, sympy.Mod):
        return _mod_interval(e, env)
    return _UNKNOWN


def _pow_interval(e: sympy.Basic, env: Mapping[sympy.Basic, VarBound]) -> _Interval:
    """``_interval`` of ``base ** k``: an integer ``k`` only (a negative one through the
    reciprocal), unknown otherwise."""
    exp = e.exp
    if not exp.is_Integer:
        return _UNKNOWN
    base = _interval(e.base, env)
    k = int(exp)
    if k < 0:
        base = _reciprocal(base)
        k = -k
    if k % 2 == 0 and base[0] >= 0:
        return base[0] ** k, base[1] ** k
    out: _Interval = (Fraction(1), Fraction(1))
    for _ in range(k):
        out = _mul(out, base)
    return out


def _mod_interval(e: sympy.Basic, env: Mapping[sympy.Basic, VarBound]) -> _Interval:
    """``_interval`` of ``Mod(a, b)``: bounded only for a divisor that is at least 1."""
    (a_lo, a_hi), (b_lo, b_hi) = (_interval(x, env) for x in e.args)
    if b_lo < 1:  # a divisor that may be 0 or negative: no bound
        return _UNKNOWN
    if a_lo >= 0 and a_hi < b_lo:
        return a_lo, a_hi  # a < b: Mod(a, b) is a
    m_hi = b_hi - 1
    if a_lo >= 0:
        m_hi = min(m_hi, a_hi)
    return Fraction(0), m_hi


def _simplify_under(e: sympy.Basic, env: Mapping[sympy.Basic, Bound]) -> sympy.Basic:
    """``e`` with the ``% // ceil max min`` that the ranges decide folded away: ``n % 16`` is
    ``n`` when ``n <= 15``, ``max(n, 4)`` is ``n`` when ``n >= 4``. Sound: each rewrite holds
    for every value in the ranges. Lets the sign of ``n % 16 - n`` be seen as 0."""
    if not e.args or e.is_Atom:
        return e
    args = [_simplify_under(a, env) for a in e.args]
    if isinstance(e, sympy.Mod):
        (a_lo, a_hi), (b_lo, _) = _interval(args[0], env), _interval(args[1], env)
        if a_lo >= 0 and b_lo >= 1 and a_hi < b_lo:
            return args[0]
    elif isinstance(e, (sympy.floor, sympy.ceiling)):
        lo, hi = _interval(args[0], env)
        if not (math.isinf(lo) or math.isinf(hi)):
            f = math.floor if isinstance(e, sympy.floor) else math.ceil
            if f(lo) == f(hi):
                return sympy.Integer(f(lo))
    elif isinstance(e, (sympy.Max, sympy.Min)):
        parts = [_interval(a, env) for a in args]
        for i, (lo, hi) in enumerate(parts):
            others = [p for j, p in enumerate(parts) if j != i]
            if isinstance(e, sympy.Max) and all(lo >= o_hi for _, o_hi in others):
                return args[i]
            if isinstance(e, sympy.Min) and all(hi <= o_lo for o_lo, _ in others):
                return args[i]
    if all(x is y for x, y in zip(args, e.args, strict=True)):
        return e
    return e.func(*args)


def simplify_under(dim: int | sympy.Basic, ranges: Mapping[Any, Any] | None) -> int | sympy.Basic:
    """``dim`` with the ``% floor ceil max min`` that ``ranges`` decide folded away
    (``max(0, n - 3)`` is ``n - 3`` for ``n >= 3``): equal to ``dim`` at every binding within
    the ranges, which is all a program's types speak of (an input outside them is refused at
    the entry). Cheap interval arithmetic, no search: for shape functions' results, so that a
    clamp the ranges make moot (a slice's ``min(1, t)`` with ``t >= 1``) does not reach every
    later proof."""
    if isinstance(dim, int) or not dim.has(
        sympy.Min, sympy.Max, sympy.floor, sympy.ceiling, sympy.Mod
    ):
        return dim
    relevant = as_ranges(ranges).restrict(dim.free_symbols)
    if not relevant:
        return dim
    out = _simplified_under(dim, relevant)
    return int(out) if out.is_Integer else out


@functools.lru_cache(maxsize=65536)
def _simplified_under(dim: sympy.Basic, ranges: Ranges) -> sympy.Basic:
    return _simplify_under(dim, ranges)


def _as_expr(dim: int | sympy.Basic) -> sympy.Expr:
    return sympy.Integer(dim) if isinstance(dim, int) else dim


def bounds(
    dim: int | sympy.Basic, ranges: Mapping[Any, Any] | None = None
) -> tuple[int, int | None]:
    """``(lo, hi)`` such that ``lo <= dim <= hi`` whenever the symbols are in ``ranges``.

    ``hi`` is ``None`` when no upper bound can be shown. Symbols without a range are in
    ``[0, inf)``. Sound, not always tight: ``n - n`` gives ``(0, 0)`` (sympy folds it) but
    ``Max(n, m) - n`` is bounded only through the ranges of ``n`` and ``m``.
    """
    if isinstance(dim, int):
        return dim, dim
    return _bounds(_as_expr(dim), as_ranges(ranges).restrict(_as_expr(dim).free_symbols))


@functools.lru_cache(maxsize=65536)
def _bounds(dim: sympy.Expr, ranges: Ranges) -> tuple[int, int | None]:
    lo, hi = _interval(dim, ranges)
    for other in (sympy.expand(dim), sympy.expand(_simplify_under(dim, ranges))):
        if other != dim:  # several sound intervals: keep the tighter of each end
            lo2, hi2 = _interval(other, ranges)
            lo, hi = max(lo, lo2), min(hi, hi2)
    low = 0 if lo == -_INF else max(0, math.ceil(lo))
    high = None if hi == _INF else math.floor(hi)
    return low, high


def upper_bound(dim: int | sympy.Basic, ranges: Mapping[Any, Any] | None = None) -> int | None:
    """The largest value ``dim`` can take under ``ranges``, or ``None`` if it is not bounded.

    An upper bound, not always the least one (interval arithmetic): safe for sizing a static
    arena.
    """
    return bounds(dim, ranges)[1]


# ---- deciding comparisons under ranges -------------------------------------------------------

_shift_symbols: dict[sympy.Symbol, sympy.Dummy] = {}


def _shift_symbol(s: sympy.Symbol) -> sympy.Dummy:
    out = _shift_symbols.get(s)
    if out is None:
        out = _shift_symbols[s] = sympy.Dummy(f"{s.name}_above", integer=True, nonnegative=True)
    return out


def decide(a: sympy.Expr, op: str, b: sympy.Expr, ranges: Ranges) -> bool | None:
    """Decide ``a op b`` (``op`` in ``== != < <=``) using ``ranges``; None when not proven.

    Callers (``ir.dims.compare``) ask sympy without ranges first and restrict ``ranges`` to
    the symbols involved (so the cache is shared).
    """
    return _decide(a, op, b, ranges)


@functools.lru_cache(maxsize=65536)
def _decide(a: sympy.Expr, op: str, b: sympy.Expr, ranges: Ranges) -> bool | None:
    subst: dict[sympy.Basic, sympy.Expr] = {}
    env: dict[sympy.Basic, Bound] = {}
    for s, (lo, hi) in ranges.items():
        if lo == hi:
            subst[s] = sympy.Integer(lo)
        elif lo > 0:
            shifted = _shift_symbol(s)
            subst[s] = lo + shifted
            env[shifted] = (0, None if hi is None else hi - lo)
        else:
            env[s] = (lo, hi)
    # The question is the sign of b - a; with the ranges substituted, and the operations the
    # ranges decide folded away.
    diff = sympy.expand(_simplify_under(sympy.expand((b - a).xreplace(subst)), env))
    if op in ("==", "!="):
        equal: bool | None = True if diff == 0 else _fuzzy(diff.is_zero)
    else:
        equal = None
        verdict = _fuzzy(diff.is_positive if op == "<" else diff.is_nonnegative)
        if verdict is not None:
            return verdict
    d_lo, d_hi = _interval(diff, env)
    if op == "<":
        return True if d_lo > 0 else False if d_hi <= 0 else None
    if op == "<=":
        return True if d_lo >= 0 else False if d_hi < 0 else None
    if equal is None:
        if d_lo == d_hi == 0:
            equal = True
        elif d_lo > 0 or d_hi < 0:
            equal = False
    if equal is None:
        return None
    return equal if op == "==" else not equal


def _fuzzy(value: bool | None) -> bool | None:
    return None if value is None else bool(value)
