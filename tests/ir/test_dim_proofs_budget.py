"""The size proofs stay cheap and bounded (issue 27): nested floor divisions are folded, sample
bindings refute before any search, every search stops at its node budget, and a session's
budget and check (the compile's deadline) hold. Work is counted in nodes, never in seconds; on
random dims and bindings, no answer is refuted by a concrete value."""

from __future__ import annotations

import contextlib

import pytest
import sympy
from hypothesis import given, settings
from hypothesis import strategies as st

import ir
from ir import dim_proofs
from ir.dim_proofs import MAX_NODES, Outcome, proof_session

n, m, h = ir.sym("n"), ir.sym("m"), ir.sym("h")


def _conv(d: sympy.Expr, k: int = 3, s: int = 2, p: int = 1) -> sympy.Expr:
    """The output size of a convolution, as the shape functions write it."""
    return sympy.floor((d + 2 * p - k) / s) + 1


def _tower(d: sympy.Expr, levels: int) -> sympy.Expr:
    for _ in range(levels):
        d = _conv(d)
    return d


def test_a_tower_of_floor_divisions_folds_to_one() -> None:
    deep = _tower(h, 6)
    folded = dim_proofs.fold_roundings(deep)
    assert sum(isinstance(x, sympy.floor) for x in sympy.preorder_traversal(folded)) == 1
    for value in range(0, 300, 7):
        assert dim_proofs.value(folded, {h: value}) == dim_proofs.value(deep, {h: value})
    # ceiling folds the same way; a mixed tower, or a coefficient other than 1/q, does not.
    up = sympy.ceiling((sympy.ceiling((h + 1) / 3) - 2) / 4)
    assert dim_proofs.fold_roundings(up) == sympy.ceiling((h - 5) / 12)
    mixed = sympy.floor(sympy.ceiling(h / 3) / 2)
    assert dim_proofs.fold_roundings(mixed) == mixed
    for e in (up, mixed, sympy.floor(2 * sympy.floor(h / 3) / 5)):
        for value in range(0, 200, 3):
            point = {h: value}
            want = ir.dim_eval.value(e, point)
            assert ir.dim_eval.value(dim_proofs.fold_roundings(e), point) == want


def test_a_proof_over_deeply_nested_floor_divisions_stays_within_its_budget() -> None:
    # The peaks of a conv stack: sums of products of towers, inside a max.
    sizes = [4 * n * 16 * _tower(h, k) * _tower(m, k) for k in range(1, 8)]
    peak = sympy.Max(*(sizes[i] + sizes[i + 1] for i in range(6)), evaluate=False)
    dim_proofs.clear_caches()
    with proof_session() as session:
        for a in sizes:
            for op in ("<=", "<", "=="):
                dim_proofs.decide(a, op, peak, ir.Ranges())
                dim_proofs.decide(peak, op, a + 1, ir.Ranges({"h": (1, None)}))
    assert session.questions > 0
    # Every question is answered within MAX_NODES nodes of search.
    assert session.nodes <= MAX_NODES * session.questions
    # And the questions the samples refute cost no search at all.
    assert session.refuted > 0


def test_a_search_stops_at_max_nodes_and_says_unknown(monkeypatch: pytest.MonkeyPatch) -> None:
    # ((n - 1)//2 + 1 - 1)//2 + 1 <= max(n, m): proved in a few nodes of search (a max is
    # beyond ir.residue_proofs), "unknown" with a budget of 1.
    e = _tower(n, 2) - sympy.Max(n, m, evaluate=False)
    dim_proofs.clear_caches()
    with proof_session() as full:
        assert dim_proofs.outcome(e, ir.Ranges()) is Outcome.PROVED
    assert full.nodes > 1
    monkeypatch.setattr(dim_proofs, "MAX_NODES", 1)
    dim_proofs.clear_caches()
    with proof_session() as session:
        assert dim_proofs.outcome(e, ir.Ranges()) is Outcome.BUDGET
    assert session.nodes <= 2 and session.budget == 1
    monkeypatch.undo()
    dim_proofs.clear_caches()


def test_a_session_budget_makes_every_question_unknown_once_spent() -> None:
    dim_proofs.clear_caches()
    e = sympy.floor(n / 2) - n  # n // 2 <= n: needs one relaxation
    with proof_session(max_nodes=0) as session:
        assert dim_proofs.outcome(e, ir.Ranges()) is Outcome.BUDGET
        assert ir.compare(n // 2, "<=", n) is None  # unknown, never a guess
        assert dim_proofs.afford() is False
    assert session.budget >= 3 and session.nodes == 0
    with proof_session() as free:
        assert dim_proofs.outcome(e, ir.Ranges()) is Outcome.PROVED
    assert free.nodes > 0


def test_answers_cost_the_same_nodes_whether_cached_or_not() -> None:
    # So a compile's choices do not depend on what the process compiled before it.
    dim_proofs.clear_caches()
    e = _tower(n, 4) - sympy.Max(_tower(n, 2), m, evaluate=False)
    with proof_session() as cold:
        first = dim_proofs.outcome(e, ir.Ranges())
    with proof_session() as warm:
        second = dim_proofs.outcome(e, ir.Ranges())
    assert first is second and cold.nodes == warm.nodes
    with proof_session(max_nodes=max(cold.nodes - 1, 0)) as short:
        assert dim_proofs.outcome(e, ir.Ranges()) in (Outcome.BUDGET, first)
        if cold.nodes:
            assert short.budget == 1


def test_the_session_check_runs_inside_the_search_and_its_error_passes_through() -> None:
    class Deadline(Exception):
        pass

    calls = []

    def check() -> None:
        calls.append(1)
        raise Deadline

    dim_proofs.clear_caches()
    e = sympy.Max(*(_tower(n, k) for k in range(1, 6)), evaluate=False) - _tower(m, 5) * n
    with proof_session(check=check):
        try:
            for k in range(40):
                dim_proofs.outcome(e - k, ir.Ranges())
        except Deadline:
            pass
        else:  # a search of fewer than CHECK_EVERY nodes never checks: checkpoint() does
            with contextlib.suppress(Deadline):
                dim_proofs.checkpoint()
    assert calls
    # Not cached as an answer: without the check the same question is searched and answered.
    with proof_session():
        assert dim_proofs.outcome(e, ir.Ranges()) in tuple(Outcome)


def test_samples_refute_what_is_false_somewhere_without_search() -> None:
    dim_proofs.clear_caches()
    with proof_session() as session:
        assert ir.compare(_tower(h, 3), ">=", h) is None  # false for h >= 2
    assert session.nodes == 0 and session.refuted >= 1
    assert dim_proofs.refuted_at_samples(h - 5, {}) is True
    assert dim_proofs.refuted_at_samples(h - 5, {h: (0, 5)}) is False  # within the range


# ---- random affine / floor-division dims, random bindings ----------------------------------

_SYMBOLS = [n, m, h]


@st.composite
def _affine_floor_dims(draw: st.DrawFn, depth: int = 3) -> sympy.Expr:
    """A random dim: an affine form of the symbols, convolved (floor division) up to ``depth``
    times, maybe times a symbol, maybe inside a max or min."""
    terms = draw(st.lists(st.sampled_from(_SYMBOLS), min_size=1, max_size=2))
    e: sympy.Expr = sum((draw(st.integers(1, 4)) * s for s in terms), sympy.Integer(0))
    e += draw(st.integers(-3, 3))
    for _ in range(draw(st.integers(0, depth))):
        k, s, p = draw(st.integers(1, 7)), draw(st.integers(1, 5)), draw(st.integers(0, 3))
        e = _conv(e, k, s, p)
    if draw(st.booleans()):
        e = e * draw(st.sampled_from(_SYMBOLS))
    wrap = draw(st.sampled_from(["none", "max", "min"]))
    if wrap != "none":
        other = draw(st.integers(0, 9)) + draw(st.sampled_from(_SYMBOLS))
        e = (sympy.Max if wrap == "max" else sympy.Min)(e, other)
    return e


_RANGES = st.sampled_from(
    [{}, {"n": (1, None)}, {"h": (7, 512)}, {"n": (1, 64), "m": (2, 9), "h": (1, None)}]
)


def _in_range(value: int, bound: tuple[int, int | None] | None) -> bool:
    if bound is None:
        return True
    lo, hi = bound
    return lo <= value and (hi is None or value <= hi)


@settings(max_examples=300, deadline=None)
@given(
    _affine_floor_dims(),
    _affine_floor_dims(),
    _RANGES,
    st.sampled_from(["<=", "<", "==", ">=", ">", "!="]),
    st.lists(st.tuples(*(st.integers(0, 600) for _ in _SYMBOLS)), min_size=1, max_size=25),
)
def test_no_verdict_is_refuted_by_a_concrete_binding(
    a: sympy.Expr,
    b: sympy.Expr,
    ranges: dict[str, tuple[int, int | None]],
    op: str,
    bindings: list[tuple[int, int, int]],
) -> None:
    verdict = ir.compare(a, op, b, ranges)
    if verdict is None:
        return
    for values in bindings:
        point = dict(zip(_SYMBOLS, values, strict=True))
        if not all(_in_range(point[s], ranges.get(s.name)) for s in _SYMBOLS):
            continue
        x, y = ir.dim_eval.value(a, point), ir.dim_eval.value(b, point)
        if x is None or y is None:
            continue
        assert ir.dims.COMPARE[op](x, y) is verdict, (a, op, b, ranges, point, x, y)


@settings(max_examples=200, deadline=None)
@given(
    _affine_floor_dims(depth=5),
    st.lists(st.tuples(*(st.integers(0, 10**6) for _ in _SYMBOLS)), min_size=1, max_size=10),
)
def test_folding_and_the_int_evaluator_agree_with_the_exact_values(
    e: sympy.Expr, bindings: list[tuple[int, int, int]]
) -> None:
    folded = dim_proofs.fold_roundings(e)
    for values in bindings:
        point = dict(zip(_SYMBOLS, values, strict=True))
        exact = ir.dim_eval.value(e, point)
        assert dim_proofs.value(e, point) == exact
        assert dim_proofs.value(folded, point) == exact
