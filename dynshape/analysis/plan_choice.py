"""The planner's guarantee: a planned body runs only where it needs no more memory than kills.

A plan packs a function's storages into arenas; that usually lowers the peak (one arena, blocks
reused, outputs written over dying inputs), but it can raise it: a block is as large as its
largest tenant, and an arena lives from its first tenant to its last. So for each function,
``choose`` compares the peak of the planned body, ``P``, with the peak of the body with kills
alone, ``K`` (``analysis/peak.py``), and keeps

1. the planned body, when ``P <= K`` is proved for every binding (``ir.compare`` with the
   function's ranges), along every path through its ``if``s, each call of a global counting
   the same unknown cost in both (so the callee's own choice does not matter);
2. else the fallback: the plan of the groups (arenas) that can be kept together with
   ``P <= K`` proved, taken greedily in program order (one more plan per group), or the body
   with kills alone;
3. and, for a body without ``if``s or calls whose two peaks depend only on symbols bound at
   entry, when the full plan needs no more than the fallback at some sample binding, *both*
   bodies, behind ``if (memory.holds(P <= P_fallback))``: the VM evaluates the two formulas
   from the argument shapes (a few integer operations per call) and runs the one that needs
   less (the transformer encoder: kills alone at ``seq = 8``, where the plan needs 10% more,
   the plan at ``seq = 1024``, where it needs 45% less).

Sample bindings (small sizes first: plans tend to lose there) refute a claim before a proof is
tried, and decide whether a test can pay; they never make a choice unsafe.

**A budget** (issue 27). The proofs of one function's choice, the planner's own placement
proofs included, may search ``PLAN_PROOF_NODES`` nodes in all (``ir.dim_proofs``
``proof_session``; each question at most ``MAX_NODES``). A question past its budget is
"unknown", which is never unsafe: a block not proved large enough is not reused, a plan not
proved never worse is not kept. When the plan's proof ran out of budget, no partial plans are
tried (each would be as costly) and the choice is what needs no proof: both bodies behind the
run-time test where one can be made, else kills alone (freeing after last use). The pass
records it (``PlanMemory.notes``, in the compile report: ``dynshape.CompileReport``), so a user
sees why a function runs unplanned.

So for every function and every binding, the peak that runs is at most the peak with kills
alone. The comparisons are sound in one direction only, and that is the one used: the planned
side is an upper bound (a tail call counts on top of the frame), the kills side a lower bound
(a tail call counts alone, the VM having freed the frame).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import sympy

import ir
from ir import Call, Expr, If, TensorType, Var, dim_proofs

from ..dialect.memory import Holds
from .dim_bounds import defined_at, dims_le, probe_points
from .peak import if_vars, max_of, paths, walk

#: Paths through ``if``s compared at most, per function (2**4: four ``if``s).
MAX_PATHS = 16

#: Nodes the proofs of one function's choice may search in all (module docstring). The
#: example models and the test corpus need at most 153 (measured when it was set); the conv
#: stacks of issue 27 spent 3,000-18,000 on proofs that failed, in 10-100 s.
PLAN_PROOF_NODES = 500


Plan = Callable[[frozenset[int]], tuple[Expr, int]]
"""The planner on one function: the planned body with the given groups left unplanned, and
how many groups it planned or left."""


def choose(
    plan: Plan,
    killed: Expr,
    ranges: Mapping[Any, Any],
    bound: frozenset[sympy.Basic],
    notes: list[str] | None = None,
    name: str = "main",
) -> Expr:
    """The body to keep (see the module docstring): a plan, ``killed``, or two behind a test.
    A choice made for want of proof budget is described in ``notes`` (``@name: ...``)."""
    with dim_proofs.proof_session(max_nodes=PLAN_PROOF_NODES) as session:
        body, kind = _choose(plan, killed, ranges, bound, session)
    if session.budget and notes is not None:
        notes.append(
            f"@{name}: memory plan {kind}: {session.budget} of its size proofs ran out of "
            f"their budget ({session.nodes:,} nodes searched, at most {PLAN_PROOF_NODES:,} per "
            f"function and {dim_proofs.MAX_NODES} per question)"
        )
    return body


def _choose(
    plan: Plan,
    killed: Expr,
    ranges: Mapping[Any, Any],
    bound: frozenset[sympy.Basic],
    session: dim_proofs.ProofSession,
) -> tuple[Expr, str]:
    full, count = plan(frozenset())
    costs = _CallCosts()
    proof = _Proof(killed, costs, ranges)
    if proof.holds(full):
        return full, "kept (proved)"
    fallback, kept = killed, frozenset[int]()
    out_of_budget = session.budget > 0
    everything = frozenset(range(count))
    # One group: the full plan was that. Out of budget: each partial plan's proof would cost as
    # much as the full one's; the fallback is what needs no proof.
    for group in range(count if count > 1 and not out_of_budget else 0):
        dim_proofs.checkpoint()
        partial = plan(everything - (kept | {group}))[0]
        if proof.holds(partial):
            fallback, kept = partial, kept | {group}
    what = "partly kept (the groups proved)" if kept else "not kept: kills alone"
    if if_vars(killed) or costs.seen:
        return fallback, what
    # Whether a test could pay first, on the peak candidates evaluated (their max at each
    # sample): simplifying the two maxes (``max_of``, proofs of dominance) cost more than the
    # rest of an encoder's choice, and a decoder's test never pays.
    # The symbols too, of every candidate (a test whose dominated candidate alone has a
    # symbol bound later is not made: rare, and only a test forgone).
    most_peaks, least_peaks = walk(full, costs).peaks, walk(fallback, costs).peaks
    symbols = set().union(*(ir.free_symbols(d) for d in [*most_peaks, *least_peaks]))
    if not symbols <= bound:
        return fallback, what  # the test cannot be made at entry
    if not _sometimes_no_more(most_peaks, least_peaks, ranges):
        return fallback, what  # the plan gains nothing
    most, least = max_of(most_peaks), max_of(least_peaks)
    return _versioned(full, fallback, most, least), "chosen at run time (a test of the peaks)"


class _Proof:
    """Whether a body's peak is provably at most that of ``killed`` along every path."""

    def __init__(self, killed: Expr, costs: _CallCosts, ranges: Mapping[Any, Any]) -> None:
        self.costs, self.ranges = costs, ranges
        choices = paths(killed, MAX_PATHS)
        self.paths = list(choices) if choices is not None else None
        self.bounds = [walk(killed, costs, path=p, tail_alone=True).peaks for p in self.paths or []]

    def holds(self, body: Expr) -> bool:
        if self.paths is None:
            return False
        for path, bound in zip(self.paths, self.bounds, strict=True):
            if not _le(walk(body, self.costs, path=path).peaks, bound, self.ranges):
                return False
        return True


def _le(planned: list[ir.Dim], killed: list[ir.Dim], ranges: Mapping[Any, Any]) -> bool:
    """Proved: the max of ``planned`` is at most the max of ``killed``, for every binding.

    Sample bindings first (``dim_bounds.probe_points``): a planned candidate above every kills
    candidate at one of them refutes the claim at once. Then each planned candidate against the
    kills candidates at least as large at every sample (the identical one is enough), and
    against their max only if none alone is proved: a sympy ``Max`` of many symbolic terms is
    slow to build, and past what case splitting affords.
    """
    a_list, k_list = list(dict.fromkeys(planned)), list(dict.fromkeys(killed))
    _, values = defined_at([*a_list, *k_list], probe_points([*a_list, *k_list], ranges))
    k_values = [values[k] for k in k_list]
    tops = [max(column, default=0) for column in zip(*k_values, strict=True)] if k_list else []
    for a in a_list:
        a_values = values[a]
        if not k_list or any(x > top for x, top in zip(a_values, tops, strict=True)):
            return False
        if a in k_list:
            continue
        above = [
            k
            for k, values in zip(k_list, k_values, strict=True)
            if all(y >= x for x, y in zip(a_values, values, strict=True))
        ]
        if any(_affordable(a, k) and ir.compare(a, "<=", k, ranges) is True for k in above):
            continue
        rivals = [
            k
            for k, values in zip(k_list, k_values, strict=True)
            if any(y >= x for x, y in zip(a_values, values, strict=True))
        ]
        # Their max, unevaluated and unpruned (``max_of`` proved dominance pairwise: most of
        # an encoder's plan choice): ``dims_le`` asks about its arguments first, as above.
        if len(rivals) < 2:
            return False  # the one rival is in ``above``: already asked
        rival = sympy.Max(*(ir.dims.as_expr(k) for k in rivals), evaluate=False)
        if not dims_le(a, rival, ranges):
            return False
    return True


def _affordable(a: ir.Dim, b: ir.Dim) -> bool:
    """Whether the proof budget pays for asking ``a <= b`` (one node where sympy's own query
    is slow: ``dim_bounds.dims_le``)."""
    return not (dim_proofs.piecewise(a) or dim_proofs.piecewise(b)) or dim_proofs.afford()


def _sometimes_no_more(a: list[ir.Dim], b: list[ir.Dim], ranges: Mapping[Any, Any]) -> bool:
    """``max(a) <= max(b)`` at one of the sample bindings (``probe_points``) where no symbol
    is 0 and ``max(b)`` is not 0: a run-time test can pay (a plan needing as much as kills
    alone still makes fewer allocations). Not at a binding with an empty dim: a GPT-2 step's
    plan needs no more than kills alone only when every dim is 0 (80 bytes each), and the test
    it made there cost every call a shape program and the executable a second body, for a case
    no caller runs."""
    points = [
        point for point in probe_points([*a, *b], ranges) if all(v > 0 for v in point.values())
    ]
    _, values = defined_at([*a, *b], points)
    count = len(next(iter(values.values()), []))
    for i in range(count):
        x = max((values[d][i] for d in a), default=0)
        y = max((values[d][i] for d in b), default=0)
        if x <= y and y > 0:
            return True
    return False


def _versioned(planned: Expr, killed: Expr, most: ir.Dim, least: ir.Dim) -> Expr:
    """``let %fits = memory.holds(most <= least); let %r = if (%fits) {planned} else {killed};
    %r`` (the ``if`` bound, so that its branches stay in tail position)."""
    ty = planned.ty
    fits = Var("fits", ty=TensorType((), "bool"))
    result = Var("result", ty=ty)
    choice = If(fits, planned, ir.fresh_binders(killed), ty=ty)
    return ir.nest_lets(
        [(fits, Holds.make("<=", most, least), None, ()), (result, choice, None, ())], result
    )


class _CallCosts:
    """A call's cost as unknowns of its own, the same in both bodies (keyed by its variable,
    which the planner keeps)."""

    def __init__(self) -> None:
        self.seen: dict[Var, tuple[ir.Dim, ir.Dim, int]] = {}

    def __call__(self, var: Var, call: Call) -> tuple[ir.Dim, ir.Dim, int]:
        if var not in self.seen:
            self.seen[var] = (ir.dims.fresh("peak"), ir.dims.fresh("left"), 0)
        return self.seen[var]
