"""Bytes of storage live over a let chain, walked as the VM runs it: peak candidates as dims.

The walk adds each ``alloc_storage``'s size and subtracts it at its ``kill``; every allocation
point is a candidate for the peak. A call of a global costs what ``CallCost`` says: its own peak
on top of what is live, and what it leaves allocated (its results) from there on. An ``if`` is
walked either along one *path* (a branch chosen for each ``if``) or over both branches (peaks of
both, the larger end). A ``plan_memory`` choice, ``if (memory.holds(lhs <= rhs))`` whose
branches' peaks are exactly ``lhs`` and ``rhs`` (the planned body and the kills-only one), costs
``min(lhs, rhs)``: the VM runs the smaller.

Used by ``plan_memory`` (is the plan never worse than kills alone?) and the memory report.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field

import sympy

import ir
from ir import Call, Expr, GlobalVar, If, Var
from ir.dim_proofs import fold_roundings

from ..dialect.memory import AllocStorage, Holds, Kill, memory_op
from .dim_bounds import add_dims, defined_at, dims_le, probe_points
from .liveness import chain

CallCost = Callable[[Var, Call], "tuple[ir.Dim, ir.Dim, int] | None"]
"""``(peak, end, allocations)`` of a call of a global bound to a variable, in the caller's
symbols: the most bytes it has live at once, what it leaves allocated when it returns, and
its allocations; None when unknown (a recursive callee)."""


@dataclass
class Walk:
    """What a walk of a chain found."""

    peaks: list[ir.Dim] = field(default_factory=list)
    """Live bytes at every point that may be the peak (the peak is their max)."""
    live: ir.Dim = 0
    """Bytes live at the end."""
    allocations: int = 0
    missing: set[str] = field(default_factory=set)
    """Globals called whose cost is unknown (``CallCost`` gave None)."""

    @property
    def peak(self) -> ir.Dim:
        """The max of the candidates."""
        return max_of(self.peaks)


def walk(
    body: Expr,
    cost: CallCost,
    live: ir.Dim = 0,
    path: Mapping[Var, int] | None = None,
    tail_alone: bool = False,
) -> Walk:
    """Walk ``body`` from ``live`` bytes (see the module docstring).

    ``path``: the branch (0 then, 1 else) of each ``if`` bound to a variable; None: both.
    ``tail_alone``: a call in tail position counts its own peak only, as if the frame held
    nothing: the VM frees, at a tail call, what the replaced frame no longer reaches, so this
    is a lower bound of the true figure (for the side of a comparison that must not be
    overstated), where the default is an upper bound.
    """
    return _walk(body, cost, ir.dims.as_expr(live), path, tail_alone, tail=True)


def _walk(
    body: Expr,
    cost: CallCost,
    live: sympy.Expr,
    path: Mapping[Var, int] | None,
    tail_alone: bool,
    tail: bool,
) -> Walk:
    lets, result = chain(body)
    out = Walk()
    sizes: dict[Var, sympy.Expr] = {}
    guards: dict[Var, Holds] = {}
    last = _last_value_let(lets, result) if tail else None
    for let in lets:
        value, op = let.value, memory_op(let.value)
        if isinstance(op, AllocStorage):
            sizes[let.var] = fold_roundings(ir.dims.as_expr(op.size))  # as dims_le sees it
            live = ir.dims.as_expr(add_dims(live, sizes[let.var]))
            out.peaks.append(live)
            out.allocations += 1
        elif isinstance(op, Kill):
            if op.target in sizes:
                live = ir.dims.as_expr(add_dims(live, -sizes.pop(op.target)))
        elif isinstance(op, Holds):
            guards[let.var] = op
        elif isinstance(value, If):
            in_tail = let is last
            branches = (value.then_branch, value.else_branch)
            if path is not None:
                w = _walk(branches[path[let.var]], cost, live, path, tail_alone, in_tail)
                out.peaks += w.peaks
                live = ir.dims.as_expr(w.live)
                out.allocations += w.allocations
                out.missing |= w.missing
                continue
            a, b = (_walk(x, cost, live, path, tail_alone, in_tail) for x in branches)
            guard = guards.get(value.cond) if isinstance(value.cond, Var) else None
            out.peaks += _guarded(guard, a, b, live) or (a.peaks + b.peaks)
            live = ir.dims.as_expr(max_of([a.live, b.live]))
            out.allocations += max(a.allocations, b.allocations)
            out.missing |= a.missing | b.missing
        elif isinstance(value, Call) and isinstance(value.callee, GlobalVar):
            known = cost(let.var, value)
            if known is None:
                out.missing.add(f"@{value.callee.name}")
                continue
            peak, end = ir.dims.as_expr(known[0]), ir.dims.as_expr(known[1])
            alone = tail_alone and let is last
            out.peaks.append(peak if alone else add_dims(live, peak))
            live = ir.dims.as_expr(add_dims(live, end))
            out.allocations += known[2]
    out.live = ir.check_dim(live)
    return out


def _last_value_let(lets: list[ir.Let], result: Expr) -> ir.Let | None:
    """The let whose value the chain returns when only kills follow it (a tail position)."""
    k = len(lets)
    while k and isinstance(memory_op(lets[k - 1].value), Kill):
        k -= 1
    return lets[k - 1] if k and result is lets[k - 1].var else None


def _guarded(guard: Holds | None, a: Walk, b: Walk, live: sympy.Expr) -> list[ir.Dim] | None:
    """``[live + min(lhs, rhs)]`` when the ``if`` is plan_memory's choice (module docstring)."""
    if guard is None or guard.kind != "<=":
        return None
    lhs, rhs = ir.dims.as_expr(guard.lhs), ir.dims.as_expr(guard.rhs)
    then, other = (ir.dims.as_expr(w.peak) - live for w in (a, b))
    if ir.simplify(then - lhs) != 0 or ir.simplify(other - rhs) != 0:
        return None
    return [ir.simplify(live + sympy.Min(lhs, rhs))]


def if_vars(body: Expr) -> list[Var]:
    """The variables bound to an ``if`` in ``body`` and its branches, outermost first."""
    out: list[Var] = []
    stack = [body]
    while stack:
        for let in chain(stack.pop())[0]:
            if isinstance(let.value, If):
                out.append(let.var)
                stack += [let.value.then_branch, let.value.else_branch]
    return out


def paths(body: Expr, limit: int) -> Iterator[dict[Var, int]] | None:
    """Every choice of branches of the ``if``s of ``body`` (None past ``limit`` paths)."""
    ifs = if_vars(body)
    if 2 ** len(ifs) > limit:
        return None
    return (
        dict(zip(ifs, bits, strict=True)) for bits in itertools.product((0, 1), repeat=len(ifs))
    )


def max_of(dims: list[ir.Dim]) -> ir.Dim:
    """The max of ``dims``, without the ones provably dominated by another (a proof is tried
    only where sample bindings agree: proofs are slow, evaluation is not)."""
    unique = list(dict.fromkeys(dims))
    _, values = defined_at(unique, probe_points(unique, None))

    def le(a: ir.Dim, b: ir.Dim) -> bool:
        below = all(x <= y for x, y in zip(values[a], values[b], strict=True))
        return below and dims_le(a, b)

    kept: list[ir.Dim] = []
    for d in unique:
        if any(le(d, k) for k in kept):
            continue
        kept = [k for k in kept if not le(k, d)] + [d]
    if not kept:
        return 0
    if len(kept) == 1:
        return kept[0]
    # No candidate dominates another (proved, or seen at a sample): sympy's own search for
    # dominated arguments would only repeat that, slowly (seconds for a few dozen).
    return ir.check_dim(sympy.Max(*(ir.dims.as_expr(k) for k in kept), evaluate=False))
