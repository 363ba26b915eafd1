"""Peak bytes of one let chain, as candidates per program point, and a proof that one plan's
peak is never above another's: what lets ``PlanMemory`` coalesce only when it does not lose.

A chain's memory is a list of ``Live`` storages (``size`` bytes from the let ``start``, where it
is allocated, to the let ``end`` after which it is killed; ``NEVER`` for a storage left
allocated) and ``Extra`` costs of lets the chain does not see into (a call of a global, an
``if``): ``peak`` bytes on top of the chain's live ones while the let runs, ``after`` bytes
left allocated from then on. ``candidates`` gives the sizes live at every point where the peak
can be (an allocation, or an extra) as *terms* (their sum is the live bytes there); the peak is
the max of the sums.

``PeakProver(k, sizes, ranges).never_above(p)``: True only with a proof that
``max(sum(p_i)) <= max(sum(k_j))`` for every value of the symbols (within ``ranges``). What it
costs, and why it is cheap enough to run once per tenant:

1. Every term is evaluated once, at a few sample bindings (``dim_bounds.samples``), and cached:
   a candidate's values are integer sums. A plan whose peak is above at some sample is refuted
   without sympy (most losing plans).
2. Each ``p_i`` needs one ``k_j`` with ``sum(p_i) <= sum(k_j)`` proven (``dims_le``), on what
   is left after cancelling the terms the two share (``a + c <= b + c`` iff ``a <= b``): a
   point where the plan did not change is ``0 <= ...``, and a proof is about the few sizes that
   differ. Only the ``k_j`` not below ``p_i`` at any sample are tried (a proof holds at the
   samples, which lie in the ranges), those with the fewest terms left first.
3. Each candidate (its multiset of terms) is decided once per prover, and so is each
   comparison (the two multisets left): an incremental planner asking about a plan that
   differs from the last one in one tenant proves only the points that tenant changed.
"""

from __future__ import annotations

import operator
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import sympy

import ir

from .dim_bounds import RangeMap, dims_le, evaluate, samples

#: The end index of a storage that is never killed in the chain.
NEVER = 1 << 60

#: The sizes live at one point; the live bytes there are their sum.
Terms = tuple[ir.Dim, ...]


@dataclass(frozen=True)
class Live:
    """A storage of ``size`` bytes allocated at let ``start`` and killed after let ``end``."""

    size: ir.Dim
    start: int
    end: int


@dataclass(frozen=True)
class Extra:
    """A let whose own memory the chain does not see: ``peak`` bytes while it runs (on top of
    the chain's), ``after`` bytes it leaves allocated."""

    peak: ir.Dim
    after: ir.Dim


def candidates(storages: Sequence[Live], extras: Mapping[int, Extra]) -> tuple[list[Terms], Terms]:
    """The sizes live at every point the peak can be at, and the sizes left at the end."""
    points = sorted({s.start for s in storages} | set(extras))
    out: list[Terms] = []
    for i in points:
        terms = [s.size for s in storages if s.start <= i <= s.end]
        terms += [e.after for j, e in extras.items() if j < i]
        if i in extras:
            terms.append(extras[i].peak)
        out.append(tuple(terms))
    left = [s.size for s in storages if s.end == NEVER]
    left += [e.after for e in extras.values()]
    return out, tuple(left)


class PeakProver:
    """Proofs that a plan's peak is never above the peak of ``k`` (the candidates of the plan to
    beat), with the values and the proofs cached (see the module docstring). ``sizes``: every
    size the terms are built from (for the sample bindings; sums and ``max``es of them mention
    no other symbol)."""

    def __init__(
        self, k: Sequence[Terms], sizes: Iterable[ir.Dim], ranges: RangeMap | None
    ) -> None:
        self.ranges = ranges
        self.points = samples(list(sizes), ranges)
        self._values: dict[ir.Dim, tuple[int, ...]] = {}
        self._proofs: dict[tuple[frozenset[object], frozenset[object]], bool] = {}
        self._covered: dict[frozenset[object], bool] = {}
        """A candidate (its multiset of terms) -> some ``k_j`` is proven not below it."""
        self.k = [Counter(x) for x in k]
        self.kv = [self.values(x) for x in k]
        self.peak = [max(v[s] for v in self.kv) for s in range(len(self.points))] if k else []

    def values(self, terms: Iterable[ir.Dim]) -> tuple[int, ...]:
        """The sum of ``terms`` at every sample binding."""
        total = [0] * len(self.points)
        for t in terms:
            v = self._values.get(t)
            if v is None:
                v = tuple(evaluate(t, b) for b in self.points)
                self._values[t] = v
            total = [x + y for x, y in zip(total, v, strict=True)]
        return tuple(total)

    def le(self, a: Terms, b: Terms) -> bool:
        """True if ``sum(a) <= sum(b)`` is proven (the common terms cancelled first)."""
        if any(x > y for x, y in zip(self.values(a), self.values(b), strict=True)):
            return False
        return self._le(Counter(a), Counter(b))

    def _le(self, a: Counter[ir.Dim], b: Counter[ir.Dim]) -> bool:
        ra, rb = a - b, b - a
        key = (frozenset(ra.items()), frozenset(rb.items()))
        known = self._proofs.get(key)
        if known is None:
            known = dims_le(_sum(ra.elements()), _sum(rb.elements()), self.ranges)
            self._proofs[key] = known
        return known

    def never_above(self, p: Sequence[Terms]) -> bool:
        """True if ``max(sum(p_i)) <= max(sum(k_j))`` is proven for all symbol values."""
        if not p:
            return True
        if not self.k:
            return False
        todo = []
        for d in p:
            c = Counter(d)
            key = frozenset(c.items())
            covered = self._covered.get(key)
            if covered is False:
                return False
            if covered is None:
                v = self.values(d)
                if any(map(operator.gt, v, self.peak)):
                    self._covered[key] = False
                    return False  # a counterexample: no proof to look for
                todo.append((key, c, v))
        for key, c, v in todo:
            self._covered[key] = self._cover(c, v)
            if not self._covered[key]:
                return False
        return True

    def _cover(self, d: Counter[ir.Dim], v: tuple[int, ...]) -> bool:
        """Some ``k_j`` is proven not below ``d`` (values ``v``)."""
        above = [j for j, kv in enumerate(self.kv) if all(map(operator.le, v, kv))]
        # Fewest terms left after cancelling first (``0 <= ...`` where nothing changed).
        above.sort(key=lambda j: sum((d - self.k[j]).values()))
        return any(self._le(d, self.k[j]) for j in above)


def _sum(terms: Iterable[ir.Dim]) -> ir.Dim:
    return ir.check_dim(ir.simplify(sympy.Add(*(ir.dims.as_expr(t) for t in terms))))
