"""Peak bytes of one let chain, as candidates per program point, and a proof that one plan's
peak is never above another's: what lets ``PlanMemory`` coalesce only when it does not lose.

A chain's memory is a list of ``Live`` storages (``size`` bytes from the let ``start``, where it
is allocated, to the let ``end`` after which it is killed; ``NEVER`` for a storage left
allocated) and ``Extra`` costs of lets the chain does not see into (a call of a global, an
``if``): ``peak`` bytes on top of the chain's live ones while the let runs, ``after`` bytes
left allocated from then on. ``candidates`` gives the sizes live at every point where the peak
can be (an allocation, or an extra) as *terms* (their sum is the live bytes there); the peak is
the max of the sums.

``PeakProver(sizes, ranges).never_above(p, k)``: True only with a proof that
``max(sum(p_i)) <= max(sum(k_j))`` for every value of the symbols (within ``ranges``). What it
costs, and why it is cheap enough to run once per tenant:

1. Every term is evaluated once, at a few sample bindings (``dim_bounds.samples``), and cached:
   a candidate's values are integer sums. A plan whose peak is above at some sample is refuted
   without sympy (most losing plans).
2. Each ``p_i`` needs one ``k_j`` with ``sum(p_i) <= sum(k_j)`` proven (``dims_le``). Only the
   ``k_j`` not below ``p_i`` at any sample are tried (a proof holds at the samples, which lie in
   the ranges), the largest first. The terms the two share are cancelled first (``a + c <= b +
   c`` iff ``a <= b``): a point where the plan did not change is ``0 <= ...``, and the proof is
   about the few sizes that differ.
3. Each comparison, keyed by the two multisets of terms left, is proven once per prover: an
   incremental planner asking about a plan that differs from the last one in one tenant proves
   only the points that tenant changed.
"""

from __future__ import annotations

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
    """Proofs about the sums of ``Terms`` (see the module docstring), with the values and the
    proofs cached. ``sizes``: every size the terms are built from (for the sample bindings;
    sums and ``max``es of them mention no other symbol)."""

    def __init__(self, sizes: Iterable[ir.Dim], ranges: RangeMap | None) -> None:
        self.ranges = ranges
        self.points = samples(list(sizes), ranges)
        self._values: dict[ir.Dim, tuple[int, ...]] = {}
        self._proofs: dict[tuple[frozenset[object], frozenset[object]], bool] = {}

    def values(self, terms: Terms) -> tuple[int, ...]:
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
        ca, cb = Counter(a), Counter(b)
        ra, rb = ca - cb, cb - ca
        key = (frozenset(ra.items()), frozenset(rb.items()))
        known = self._proofs.get(key)
        if known is None:
            known = dims_le(_sum(ra.elements()), _sum(rb.elements()), self.ranges)
            self._proofs[key] = known
        return known

    def never_above(self, p: Sequence[Terms], k: Sequence[Terms]) -> bool:
        """True if ``max(sum(p_i)) <= max(sum(k_j))`` is proven for all symbol values."""
        if not p:
            return True
        if not k:
            return False
        pv = [self.values(d) for d in p]
        kv = [self.values(x) for x in k]
        for s in range(len(self.points)):
            if max(v[s] for v in pv) > max(v[s] for v in kv):
                return False  # a counterexample: no proof to look for
        order = sorted(range(len(k)), key=lambda j: kv[j][::-1], reverse=True)
        for d, dv in zip(p, pv, strict=True):
            above = (j for j in order if all(x <= y for x, y in zip(dv, kv[j], strict=True)))
            if not any(self.le(d, k[j]) for j in above):
                return False
        return True


def _sum(terms: Iterable[ir.Dim]) -> ir.Dim:
    return ir.check_dim(ir.simplify(sympy.Add(*(ir.dims.as_expr(t) for t in terms))))
