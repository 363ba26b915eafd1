"""Bounds of the integer values the row proof reads: index arithmetic in exported models.

Exported models build gather indices from shapes: ``cumsum`` of a fill of ones (a row or
column number), ``take(shape_of(x), k)`` (a dim as a value), their sums and products, and
clamps of negative indices (``where(i < 0, i + n, i)``) whose conditions the bounds decide.
``ValueBounds.of(expr)`` gives ``(lo, hi)``, dims (sympy, possibly mentioning the batch)
with every entry of the value in ``[lo, hi]`` for every binding of the dims, or None when
unknown; ``decided(expr)`` gives True or False when a boolean value (a comparison, a logical
op of decided ones, a boolean constant) is that at every entry for every binding, else None.

Sound and incomplete, like ``ir.compare`` which decides the comparisons: None means
"not known". Only the ops listed here are read; anything else is unknown.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import numpy as np
import sympy

import ir
from ir import Call, Constant, Expr, TensorType, Tuple, Var

Bounds = tuple[Any, Any]
"""``(lo, hi)``: dims (ints or sympy expressions) bounding every entry of a value."""

#: The comparisons and the logical ops: boolean results the bounds may decide.
COMPARISONS = ("less", "less_equal", "greater", "greater_equal", "equal", "not_equal")
LOGICAL = ("logical_and", "logical_or", "logical_not")
#: Each order comparison and its negation.
_ORDER = {
    "less": "greater_equal",
    "greater_equal": "less",
    "greater": "less_equal",
    "less_equal": "greater",
}
#: Ops whose result holds the entries of their first operand, rearranged or repeated.
_SAME_ENTRIES = frozenset(
    ["expand_dims", "squeeze", "reshape", "broadcast_to", "transpose", "strided_slice", "copy"]
)


class ValueBounds:
    """Bounds of the values of one function: ``lets`` maps its let-bound vars to their values;
    ``ranges`` are the symbols' ranges the comparisons are decided under."""

    def __init__(self, lets: Mapping[Var, Expr], ranges: ir.Ranges) -> None:
        self.lets = lets
        self.ranges = ranges
        self._bounds: dict[Expr, Bounds | None] = {}
        self._decided: dict[Expr, bool | None] = {}

    def definition(self, expr: Expr) -> Expr:
        """The expression a let-bound var stands for (followed through chains of vars)."""
        while isinstance(expr, Var) and expr in self.lets:
            expr = self.lets[expr]
        return expr

    def compare(self, a: Any, op: str, b: Any) -> bool | None:
        """``a op b`` for dims, under the function's ranges: True, False or None (unknown)."""
        return ir.compare(a, op, b, ranges=self.ranges)

    def exact(self, expr: Expr) -> Any | None:
        """The one value every entry of ``expr`` has, when its bounds say so, else None."""
        b = self.of(expr)
        if b is None or self.compare(b[0], "==", b[1]) is not True:
            return None
        return b[0]

    def picked_field(self, take: Call) -> Expr | None:
        """The field of a ``concatenate`` that a ``take`` at one constant index along the
        joined axis reads (dynamo's exports join an index's components that way and take
        them apart again): the take is a take of that field alone. None otherwise."""
        source, index = self.definition(take.args[0]), self.definition(take.args[1])
        if not (
            isinstance(source, Call)
            and source.op is not None
            and source.op.name == "concatenate"
            and take.attrs.axis is not None
            and isinstance(index, Constant)
            and np.ndim(index.value) == 0
        ):
            return None
        fields = self.definition(source.args[0])
        ty = take.args[0].ty
        if not isinstance(fields, Tuple) or not isinstance(ty, TensorType):
            return None
        rank = len(ty.shape)
        if rank == 0:
            return None
        axis = take.attrs.axis % rank
        if source.attrs.axis % rank != axis:
            return None
        sizes: list[int] = []
        for f in fields.fields:
            n = f.ty.shape[axis] if isinstance(f.ty, TensorType) else None
            if not isinstance(n, int):
                return None
            sizes.append(n)
        at = int(index.value) + (sum(sizes) if int(index.value) < 0 else 0)
        for field, n in zip(fields.fields, sizes, strict=True):
            if 0 <= at < n:
                return field
            at -= n
        return None

    # -- bounds ---------------------------------------------------------------------------

    def of(self, expr: Expr) -> Bounds | None:
        """``(lo, hi)`` with every entry of ``expr`` in it, or None when unknown."""
        return _memo(self._bounds, self._compute, self.definition(expr))

    def _compute(self, node: Expr) -> Bounds | None:
        if isinstance(node, Constant):
            return _constant_bounds(node.value)
        if isinstance(node, Tuple):
            return self._hull([self.of(f) for f in node.fields])
        if not isinstance(node, Call) or node.op is None:
            return None
        name = node.op.name
        if name in COMPARISONS or name in LOGICAL:
            verdict = self.decided(node)
            return (0, 1) if verdict is None else (int(verdict), int(verdict))
        rule = _RULES.get(name)
        return rule(self, node) if rule is not None else None

    def _hull(self, parts: list[Bounds | None]) -> Bounds | None:
        if not parts or any(p is None for p in parts):
            return None
        los = [p[0] for p in parts if p is not None]
        his = [p[1] for p in parts if p is not None]
        return _smallest(self, los), _largest(self, his)

    def refined(self, value: Expr, cond: Expr, holds: bool) -> Bounds | None:
        """Bounds of ``value`` at the entries where ``cond`` is ``holds``: its own bounds
        narrowed by the comparisons of ``value`` itself that ``cond`` is made of (the
        clamp ``where(i < 0 or i >= n, bad, i)`` keeps ``i`` in ``[0, n - 1]``)."""
        own = self.of(value)
        lo, hi = (None, None) if own is None else own
        for name, bound in self._conditions(self.definition(value), cond, holds):
            if name in ("greater_equal", "greater"):  # value >= bound (or > bound)
                floor = bound[0] + int(name == "greater")
                lo = floor if lo is None else _largest(self, [lo, floor])
            else:  # value <= bound (or < bound)
                ceiling = bound[1] - int(name == "less")
                hi = ceiling if hi is None else _smallest(self, [hi, ceiling])
        return None if lo is None or hi is None else (lo, hi)

    def _conditions(self, value: Expr, cond: Expr, holds: bool) -> list[tuple[str, Bounds]]:
        """What ``cond`` being ``holds`` says of ``value``: (comparison, other side's bounds)
        pairs, the comparison read as ``value <op> other``."""
        node = self.definition(cond)
        if not isinstance(node, Call) or node.op is None:
            return []
        name = node.op.name
        if name == "logical_not":
            return self._conditions(value, node.args[0], not holds)
        if (name == "logical_or" and not holds) or (name == "logical_and" and holds):
            return [c for a in node.args for c in self._conditions(value, a, holds)]
        if name not in _ORDER or self.definition(node.args[0]) is not value:
            return []
        other = self.of(node.args[1])
        if other is None:
            return []
        return [(name if holds else _ORDER[name], other)]

    # -- decisions -----------------------------------------------------------------------

    def decided(self, expr: Expr) -> bool | None:
        """True or False when the boolean ``expr`` is that at every entry, else None."""
        return _memo(self._decided, self._decide, self.definition(expr))

    def _decide(self, node: Expr) -> bool | None:
        if isinstance(node, Constant):
            value = np.asarray(node.value)
            if value.dtype != np.bool_ or value.size == 0:
                return None
            return bool(value.flat[0]) if value.all() or not value.any() else None
        if not isinstance(node, Call) or node.op is None:
            return None
        name = node.op.name
        if name in COMPARISONS:
            a, b = self.of(node.args[0]), self.of(node.args[1])
            return None if a is None or b is None else self._compare_bounds(a, name, b)
        if name == "logical_not":
            verdict = self.decided(node.args[0])
            return None if verdict is None else not verdict
        if name in ("logical_and", "logical_or"):
            verdicts = [self.decided(a) for a in node.args]
            absorbing = name == "logical_or"  # True absorbs an or, False an and
            if absorbing in verdicts:
                return absorbing
            return None if None in verdicts else not absorbing
        if name == "cast" and _is_bool(node):
            b = self.of(node.args[0])
            if b is None:
                return None
            if self.compare(b[0], ">", 0) or self.compare(b[1], "<", 0):
                return True
            both_zero = self.compare(b[0], "==", 0) and self.compare(b[1], "==", 0)
            return False if both_zero else None
        return None

    def _compare_bounds(self, a: Bounds, name: str, b: Bounds) -> bool | None:
        (alo, ahi), (blo, bhi) = a, b
        if name in ("greater", "greater_equal"):
            (alo, ahi), (blo, bhi) = (blo, bhi), (alo, ahi)
            name = "less" if name == "greater" else "less_equal"
        if name == "less":
            if self.compare(ahi, "<", blo):
                return True
            return False if self.compare(alo, ">=", bhi) else None
        if name == "less_equal":
            if self.compare(ahi, "<=", blo):
                return True
            return False if self.compare(alo, ">", bhi) else None
        apart = self.compare(ahi, "<", blo) or self.compare(alo, ">", bhi)
        one = all(self.compare(x, "==", y) for x, y in ((alo, ahi), (ahi, blo), (blo, bhi)))
        equal = True if one else (False if apart else None)
        if equal is None or name == "equal":
            return equal
        return not equal


Rule = Callable[[ValueBounds, Call], "Bounds | None"]


T = TypeVar("T")


def _memo(table: dict[Expr, T], compute: Callable[[Expr], T], node: Expr) -> T:
    if node not in table:
        table[node] = compute(node)
    return table[node]


#: The range of each integer dtype numpy has.
_INT_LIMITS = {
    name: (int(np.iinfo(name).min), int(np.iinfo(name).max))
    for name in ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")
}


def _constant_bounds(value: Any) -> Bounds | None:
    a = np.asarray(value)
    if a.size == 0 or a.dtype.kind not in "biu":
        return None
    return int(a.min()), int(a.max())


def _is_bool(node: Expr) -> bool:
    ty = node.ty
    return isinstance(ty, TensorType) and ty.dtype == "bool"


def _smallest(vb: ValueBounds, dims: list[Any]) -> Any:
    return _extreme(vb, dims, "<", sympy.Min)


def _largest(vb: ValueBounds, dims: list[Any]) -> Any:
    return _extreme(vb, dims, ">", sympy.Max)


def _extreme(vb: ValueBounds, dims: list[Any], beats: str, both: Any) -> Any:
    """The one of ``dims`` that ``beats`` the others where that is proved, else ``both`` of
    those not proved beaten (``Min`` or ``Max``)."""
    loses = {"<": ">=", ">": "<="}[beats]
    best = dims[0]
    for d in dims[1:]:
        if vb.compare(d, beats, best):
            best = d
        elif vb.compare(d, loses, best) is not True:
            best = both(best, d)
    return best


def _nonnegative(vb: ValueBounds, b: Bounds | None) -> bool:
    return b is not None and vb.compare(b[0], ">=", 0) is True


def _same_entries(vb: ValueBounds, node: Call) -> Bounds | None:
    return vb.of(node.args[0])


def _fill(vb: ValueBounds, node: Call) -> Bounds | None:
    name = node.op.name if node.op is not None else ""
    if name == "zeros":
        return 0, 0
    if name == "ones":
        return 1, 1
    return vb.of(node.args[0])


def _cast(vb: ValueBounds, node: Call) -> Bounds | None:
    source = node.args[0].ty
    if not isinstance(source, TensorType) or source.dtype.startswith("float"):
        return None  # a float cast to an int truncates: not read
    if _is_bool(node):
        verdict = vb.decided(node)
        return (0, 1) if verdict is None else (int(verdict), int(verdict))
    bounds = vb.of(node.args[0])
    target = node.ty
    limits = _INT_LIMITS.get(target.dtype) if isinstance(target, TensorType) else None
    if bounds is None or limits is None:
        return None  # a float, or an int type numpy does not name (ml_dtypes' int4)
    # a narrower int wraps what it cannot hold
    fits = vb.compare(bounds[0], ">=", limits[0]) and vb.compare(bounds[1], "<=", limits[1])
    return bounds if fits else None


def _take(vb: ValueBounds, node: Call) -> Bounds | None:
    picked = vb.picked_field(node)
    if picked is not None:
        return vb.of(picked)
    data, index = vb.definition(node.args[0]), vb.definition(node.args[1])
    if (
        isinstance(data, Call)
        and data.op is not None
        and data.op.name == "shape_of"
        and isinstance(index, Constant)
        and np.ndim(index.value) == 0
    ):
        shape = data.args[0].ty
        at = int(index.value)
        if isinstance(shape, TensorType) and -shape.rank <= at < shape.rank:
            dim = shape.shape[at]
            return dim, dim
        return None  # the run fails: no bound is read from it
    return vb.of(node.args[0])


def _join(vb: ValueBounds, node: Call) -> Bounds | None:
    return vb.of(node.args[0])


def _add(vb: ValueBounds, node: Call) -> Bounds | None:
    a, b = vb.of(node.args[0]), vb.of(node.args[1])
    if a is None or b is None:
        return None
    return a[0] + b[0], a[1] + b[1]


def _subtract(vb: ValueBounds, node: Call) -> Bounds | None:
    a, b = vb.of(node.args[0]), vb.of(node.args[1])
    if a is None or b is None:
        return None
    return a[0] - b[1], a[1] - b[0]


def _multiply(vb: ValueBounds, node: Call) -> Bounds | None:
    a, b = vb.of(node.args[0]), vb.of(node.args[1])
    if not (_nonnegative(vb, a) and _nonnegative(vb, b)):
        return None  # signs unknown: the corners would need Min/Max of four products
    assert a is not None and b is not None
    return a[0] * b[0], a[1] * b[1]


def _cumsum(vb: ValueBounds, node: Call) -> Bounds | None:
    """Running sums of non-negative entries along an axis of ``n``: at most ``n`` of them."""
    x = vb.of(node.args[0])
    ty = node.args[0].ty
    if not _nonnegative(vb, x) or not isinstance(ty, TensorType) or node.attrs.axis is None:
        return None
    assert x is not None
    n = ty.shape[node.attrs.axis]
    if node.attrs.exclusive:
        return 0, (n - 1) * x[1]
    return x[0], n * x[1]


def _arange(vb: ValueBounds, node: Call) -> Bounds | None:
    start, stop = vb.of(node.args[0]), vb.of(node.args[1])
    if start is None or stop is None or vb.exact(node.args[2]) != 1:
        return None
    return start[0], stop[1] - 1


def _where(vb: ValueBounds, node: Call) -> Bounds | None:
    verdict = vb.decided(node.args[0])
    if verdict is not None:
        return vb.of(node.args[1] if verdict else node.args[2])
    return vb._hull([vb.of(node.args[1]), vb.of(node.args[2])])


_RULES: dict[str, Rule] = {
    **{name: _same_entries for name in _SAME_ENTRIES},
    "full": _fill,
    "zeros": _fill,
    "ones": _fill,
    "cast": _cast,
    "take": _take,
    "concatenate": _join,
    "stack": _join,
    "add": _add,
    "subtract": _subtract,
    "multiply": _multiply,
    "cumsum": _cumsum,
    "arange": _arange,
    "where": _where,
}
