"""Peak bytes of one let chain, as candidates per program point, and a proof that one plan's
peak is never above another's: what lets ``PlanMemory`` coalesce only when it does not lose.

A chain's memory is a list of ``Live`` storages (``size`` bytes from the let ``start``, where it
is allocated, to the let ``end`` after which it is killed; ``NEVER`` for a storage left
allocated) and ``Extra`` costs of lets the chain does not see into (a call of a global, an
``if``): ``peak`` bytes on top of the chain's live ones while the let runs, ``after`` bytes
left allocated from then on. ``candidates`` gives the live bytes at every point where the peak
can be (an allocation, or an extra); the peak is their max.

``never_above(p, k, ranges)``: True only with a proof that ``max(p) <= max(k)`` for every value
of the symbols (``dims_le`` on each candidate of ``p`` against some candidate of ``k``), after a
cheap numeric test at sample sizes that rejects most plans that do lose.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import sympy

import ir

from .dim_bounds import RangeMap, dims_le, evaluate, samples

#: The end index of a storage that is never killed in the chain.
NEVER = 1 << 60


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


def candidates(
    storages: Sequence[Live], extras: Mapping[int, Extra]
) -> tuple[list[ir.Dim], ir.Dim]:
    """The live bytes at every point the peak can be at, and the bytes left at the end."""
    points = sorted({s.start for s in storages} | set(extras))
    out: list[ir.Dim] = []
    for i in points:
        terms = [ir.dims.as_expr(s.size) for s in storages if s.start <= i <= s.end]
        terms += [ir.dims.as_expr(e.after) for j, e in extras.items() if j < i]
        if i in extras:
            terms.append(ir.dims.as_expr(extras[i].peak))
        out.append(ir.check_dim(ir.simplify(sympy.Add(*terms))))
    left = [ir.dims.as_expr(s.size) for s in storages if s.end == NEVER]
    left += [ir.dims.as_expr(e.after) for e in extras.values()]
    return out, ir.check_dim(ir.simplify(sympy.Add(*left)))


def never_above(p: Sequence[ir.Dim], k: Sequence[ir.Dim], ranges: RangeMap | None) -> bool:
    """True if ``max(p) <= max(k)`` is proven for all symbol values (within ``ranges``)."""
    if not p:
        return True
    if not k:
        return False
    for values in samples([*p, *k], ranges):
        if max(evaluate(d, values) for d in p) > max(evaluate(d, values) for d in k):
            return False  # a counterexample: no proof to look for
    return all(any(dims_le(d, x, ranges) for x in k) for d in p)
