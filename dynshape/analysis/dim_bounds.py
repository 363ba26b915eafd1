"""Proofs about sizes for the memory planner: ``dims_le`` and ``upper``.

``dims_le(a, b, ranges)`` answers "is ``a <= b`` for every value of the symbols?" with True only
when it is proven (False means *not proven*). It tries, in order:

1. the structure of ``max``/``min`` (issue 27: cheaper than a case split of the whole):
   ``max(a1, a2) <= b`` exactly when both are (and ``a <= min(b1, b2)``), nothing else tried
   after; ``a <= max(b1, b2)`` if ``a <= b1`` or ``a <= b2``, asked for the arguments that are
   at least ``a`` at every sample binding (and the dual for ``min`` on the left);
2. ``ir.compare(a, "<=", b, ranges)`` for polynomials: sympy alone (symbols are non-negative
   integers), then the declared symbol ranges, by substitution and interval arithmetic over
   ``+ * // % max min floor ceil`` (``ir/ranges.py``), then ``ir.dim_proofs``; for a dim with a
   max, min or rounding, ``ir.dim_proofs.decide`` at once (sympy's assumptions about those
   took milliseconds a question and proved none);
3. the structure again, after the search, and the common terms of two sums dropped.

Answers are kept for the proof session (``ir.dim_proofs.session_answers``): the planner asks
each "does it fit?" twice.

Each step is sound, so the answer is a proof; the planner reuses a block only on a proof.

Before any of them (issue 27: the planner asked thousands of these about convolution dims, and
the proofs split cases for minutes), both sides are evaluated at a few sample bindings within
the ranges (``ir.dim_proofs.sample_points``): a binding with ``a > b`` answers False at once,
since no proof can exist. Nested floor divisions are folded first (``fold_roundings``: an
identity). Every proof the steps attempt has the budget of ``ir.dim_proofs`` (``MAX_NODES`` per
question; within a ``proof_session`` with ``max_nodes``, such as a function's plan choice,
the session's too, sympy's own query about a dim with a floor or a max costing one node), past
which it answers "not proven".
"""

from __future__ import annotations

from collections.abc import Mapping

import sympy

import ir
from ir import dim_proofs

#: Symbol ranges as the planner takes them: symbol (or name) -> ``(lo, hi)``, ``hi`` None for none.
RangeMap = Mapping[sympy.Symbol, tuple[int, int | None]]


def dims_le(a: ir.Dim, b: ir.Dim, ranges: RangeMap | None = None) -> bool:
    """True if ``a <= b`` is proven for all symbol values (within ``ranges``)."""
    if isinstance(a, int) and isinstance(b, int):
        return a <= b
    return _dims_le(_folded(a), _folded(b), ir.ranges.as_ranges(ranges))


def _folded(d: ir.Dim) -> ir.Dim:
    # No ir.check_dim: folding is an identity on a valid dim, and sympy's assumptions about a
    # peak of a conv stack cost milliseconds a question.
    if isinstance(d, int):
        return d
    out = dim_proofs.fold_roundings(d)
    return int(out) if out.is_Integer else out


def _dims_le(a: ir.Dim, b: ir.Dim, ranges: ir.Ranges) -> bool:
    # Cached for the proof session only (``dim_proofs.session_answers``): an answer may
    # depend on the proof budget the session had left, so it is no answer for another one.
    if isinstance(a, int) and isinstance(b, int):
        return a <= b
    if dim_proofs.sample_order(ir.dims.as_expr(a), ir.dims.as_expr(b), ranges)[2]:
        return False  # a > b at a binding within the ranges: not provable, no search
    answers = dim_proofs.session_answers()
    key = ("dims_le", a, b, ranges)
    if answers is not None and key in answers:
        return bool(answers[key])
    out = _structural_le(a, b, ranges)
    # max(a1, a2) <= b is exactly a1 <= b and a2 <= b (and a <= min(b1, b2) the same): when
    # the structure did not prove it, a case split on the whole would only ask those again.
    if not out and not isinstance(a, sympy.Max) and not isinstance(b, sympy.Min):
        out = _proved_le(a, b, ranges or None)
    if answers is not None:
        answers[key] = out
    return out


def _structural_le(a: ir.Dim, b: ir.Dim, ranges: ir.Ranges) -> bool:
    """``a <= b`` proved from the structure of a ``max`` or ``min`` on either side, by
    questions about their arguments, before any case split (issue 27). ``max(a1, a2) <= b`` is
    exactly ``a1 <= b`` and ``a2 <= b``; ``a <= max(b1, b2)`` follows from ``a <= b1``, tried
    for the arguments that are at least ``a`` at every sample binding (the others cannot
    prove it). A block grown to ``max(512*b*s, 16*b*s**2, ...)`` holds a ``512*b*s`` tensor by
    its first argument: two nodes, where splitting the cases of the max took 10-14 per
    question, and a decoder's placements ran out of the function's budget."""
    a, b = _distributed(a), _distributed(b)
    if isinstance(a, sympy.Max):
        return all(dims_le(x, b, ranges) for x in a.args)
    if isinstance(b, sympy.Min):
        return all(dims_le(a, x, ranges) for x in b.args)
    ea = ir.dims.as_expr(a)
    for side, args in ((b, sympy.Max), (a, sympy.Min)):
        if not isinstance(side, args):
            continue
        for x in side.args:
            lhs, rhs = (ea, x) if side is b else (x, ir.dims.as_expr(b))
            if dim_proofs.sample_order(lhs, rhs, ranges)[2]:
                continue  # refuted at a sample: it cannot prove the claim
            if dims_le(_as_dim(lhs), _as_dim(rhs), ranges):
                return True
    return False


def _distributed(d: ir.Dim) -> ir.Dim:
    """``c * max(x, y)`` as ``max(c*x, c*y)`` for a number ``c > 0`` (and ``min`` alike), so
    that the structure of the max answers: two blocks of a plan sized as the largest of their
    tenants are ``2 * max(...)``."""
    if isinstance(d, sympy.Mul) and len(d.args) == 2:
        c, inner = d.args
        if c.is_Number and c > 0 and isinstance(inner, (sympy.Max, sympy.Min)):
            return inner.func(*(c * x for x in inner.args), evaluate=False)
    return d


def _as_dim(e: sympy.Expr) -> ir.Dim:
    return int(e) if e.is_Integer else e


def _proved_le(a: ir.Dim, b: ir.Dim, ranges: RangeMap | None) -> bool:
    # With the ranges at once: a proof without them is a proof with them, and each attempt of
    # the case-splitting procedure costs. sympy's own query about a floor or a max costs too
    # (seconds on the peaks of a conv stack): one node of the session's budget, so that past
    # it only samples are asked (about polynomials, sympy is quick and free).
    if dim_proofs.piecewise(a) or dim_proofs.piecewise(b):
        # Straight to the case-splitting procedure: sympy's assumptions about a difference
        # of maxes took ~8 ms a question on a Llama step's blocks (1.4 s of its compile) and
        # proved none of them; the procedure relaxes the max and bounds the cases itself.
        if not dim_proofs.afford():
            return False
        relevant = ir.ranges.as_ranges(ranges).restrict(ir.free_symbols(a) | ir.free_symbols(b))
        if dim_proofs.decide(ir.dims.as_expr(a), "<=", ir.dims.as_expr(b), relevant) is True:
            return True
    elif ir.compare(a, "<=", b, ranges) is True:
        return True
    if isinstance(b, sympy.Max) and any(dims_le(a, x, ranges) for x in b.args):
        return True
    if isinstance(a, sympy.Min) and any(dims_le(x, b, ranges) for x in a.args):
        return True
    if isinstance(a, sympy.Add) and isinstance(b, sympy.Add):
        # Sums of aligned blocks: drop the common terms (offsets share prefixes).
        common = set(a.args) & set(b.args)
        if common:
            rest_a = sympy.Add(*(x for x in a.args if x not in common))
            rest_b = sympy.Add(*(x for x in b.args if x not in common))
            return dims_le(ir.check_dim(rest_a), ir.check_dim(rest_b), ranges)
    return False


def add_dims(a: ir.Dim | sympy.Expr, b: ir.Dim | sympy.Expr) -> ir.Dim:
    """``a + b`` simplified as ``ir.simplify`` does (expanded), except where a term is a max or
    a min: expanding rebuilds it evaluated, and sympy then compares every pair of its
    arguments (the planner's grown blocks and the peaks over them: a second per walk of a conv
    stack). The terms of a sum are collected either way, so ``x + m - m`` is ``x``; a sum
    whose terms are all monomials is not expanded again."""
    total = ir.dims.as_expr(a) + ir.dims.as_expr(b)
    terms = sympy.Add.make_args(total)
    if not any(isinstance(x, (sympy.Max, sympy.Min)) for x in terms) and not all(
        map(_monomial, terms)
    ):
        return ir.simplify(total)
    # A sum of monomials is expanded already (sympy's ``Add`` collected the like terms): the
    # peak walk adds every allocation to a running sum of hundreds of terms, and expanding it
    # again each time was a third of a conv stack's plan choice (0.5 s for 60 sizes).
    return int(total) if total.is_Integer else total


def _monomial(term: sympy.Expr) -> bool:
    """No sum among the factors of ``term`` (nor as the base of a power of one)."""
    return not any(f.is_Add or (f.is_Pow and f.base.is_Add) for f in sympy.Mul.make_args(term))


def upper(dim: ir.Dim, ranges: RangeMap | None) -> int | None:
    """The largest value ``dim`` takes within ``ranges`` (None if unbounded or unknown)."""
    if isinstance(dim, int):
        return dim
    if not ranges:
        return None
    return ir.ranges.upper_bound(dim, ranges)


def evaluate(dim: ir.Dim, values: Mapping[sympy.Basic, int]) -> int:
    """The integer value of ``dim`` for concrete symbol values (every symbol must have one)."""
    out = dim_proofs.value(dim, values)  # ir.dim_eval's value, with ints where it can
    if out is None:
        raise ValueError(f"the dim {dim} has no integer value at {dict(values)}")
    return out


def value_at(dim: ir.Dim, values: Mapping[sympy.Basic, int]) -> int | None:
    """The integer value of ``dim`` at ``values``, or None where it has none (a division by a
    symbol that is 0 there: the run-time checks refuse such bindings)."""
    return dim_proofs.value(dim, values)


def defined_at(
    dims: list[ir.Dim], points: list[dict[sympy.Basic, int]]
) -> tuple[list[dict[sympy.Basic, int]], dict[ir.Dim, list[int]]]:
    """The points at which every dim of ``dims`` has a value, and those values by dim."""
    rows = [[value_at(d, v) for d in dims] for v in points]
    kept = [(v, row) for v, row in zip(points, rows, strict=True) if None not in row]
    by_dim = {d: [int(row[i]) for _, row in kept] for i, d in enumerate(dims)}  # type: ignore[arg-type]
    return [v for v, _ in kept], by_dim


def clip(symbol: sympy.Basic, value: int, ranges: RangeMap | None) -> int:
    """``value`` moved into ``symbol``'s range (``[0, inf)`` when none is declared)."""
    lo, hi = (ranges or {}).get(symbol, (0, None))
    return max(lo, value if hi is None else min(hi, value))


#: Values a symbol takes in ``samples`` when its range says nothing more.
_TYPICAL = (1, 8, 64, 512, 4096)


def samples(dims: list[ir.Dim], ranges: RangeMap | None) -> list[dict[sympy.Basic, int]]:
    """A few symbol bindings spread over the ranges (log-spaced typical sizes, clipped to each
    symbol's range): for *choosing* between plans by their sizes, never for proofs."""
    symbols = set().union(*(ir.free_symbols(d) for d in dims))
    out = []
    for typical in _TYPICAL:
        binding = {}
        for s in symbols:
            binding[s] = clip(s, typical, ranges)
        out.append(binding)
    return out


#: Values every symbol takes together in ``probe_points``: plans tend to lose at tiny sizes.
_SMALL = (0, 1, 2, 3, 5)


def probe_points(dims: list[ir.Dim], ranges: RangeMap | None) -> list[dict[sympy.Basic, int]]:
    """Sample bindings to refute a claim about ``dims`` before trying to prove it (a failed
    proof is what costs): every symbol at one small value, each symbol small while the others
    are large and large while the others are small, and ``samples``. Clipped to the ranges."""
    symbols = sorted(set().union(*(ir.free_symbols(d) for d in dims)), key=str)
    out = [{s: clip(s, v, ranges) for s in symbols} for v in _SMALL]
    out += [{s: clip(s, 2 if s is t else 64, ranges) for s in symbols} for t in symbols]
    out += [{s: clip(s, 4096 if s is t else 1, ranges) for s in symbols} for t in symbols]
    return out + samples(dims, ranges)
