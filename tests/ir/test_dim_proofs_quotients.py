"""Size questions that imported decoders ask, kept cheap (issue 27, items 5 and 6): a rounding of
an exact quotient is the quotient, ``y * min(1, y)`` is ``y``, a ``max`` is compared by its
arguments before any case split, a question asked twice in one proof session is searched once,
and a sample with one symbol at 0 refutes what only an empty dim breaks. Work is counted in
nodes; the identities are checked against exact values on random dims (Hypothesis)."""

from __future__ import annotations

import sympy
from hypothesis import given, settings
from hypothesis import strategies as st

import ir
from dynshape.analysis.dim_bounds import dims_le
from ir import dim_proofs
from ir.dim_proofs import Outcome, proof_session

b, p, s = ir.sym("batch"), ir.sym("past_seq"), ir.sym("seq")
_SYMBOLS = (b, p, s)


def test_a_rounding_of_an_exact_quotient_is_the_quotient() -> None:
    # A reshape's inferred -1 of (b, 4, p + s, 32) into (-1, p + s, 32), numerator expanded.
    e = sympy.floor(sympy.expand(128 * b * (p + s)) / (32 * p + 32 * s))
    assert e.has(sympy.floor)  # what sympy makes of it
    assert dim_proofs.fold_roundings(e) == 4 * b
    assert dim_proofs.fold_roundings(sympy.ceiling((6 * b * s + 6 * b) / (3 * s + 3))) == 2 * b


def test_a_rounding_of_an_inexact_quotient_stays_a_rounding() -> None:
    e = sympy.floor((3 * b * p + 5) / (2 * p))
    assert dim_proofs.fold_roundings(e).has(sympy.floor)
    # a constant denominator left by the division is folded as a conv's size is
    half = sympy.floor((4 * b * s + 2 * s) / (4 * s))
    assert dim_proofs.fold_roundings(half) == sympy.floor(b + sympy.Rational(1, 2))


def test_y_times_min_1_y_is_y() -> None:
    inner = s * sympy.Min(1, s * sympy.Min(1, s))
    assert dim_proofs.fold_roundings(512 * b * s * sympy.Min(1, inner)) == 512 * b * s
    assert dim_proofs.fold_roundings(b * s * sympy.Min(1, b * s)) == b * s
    # min(1, s) alone, or next to a factor that is not its argument, is kept
    assert dim_proofs.fold_roundings(4 * b * sympy.Min(1, s)) == 4 * b * sympy.Min(1, s)


_POLY = st.builds(
    lambda c, x, y, k: c * x * y + k,
    st.integers(1, 5),
    st.sampled_from(_SYMBOLS),
    st.sampled_from((*_SYMBOLS, sympy.Integer(1))),
    st.integers(0, 7),
)


@settings(max_examples=150, deadline=None)
@given(
    _POLY,
    _POLY,
    st.integers(0, 3),
    st.booleans(),
    st.lists(st.tuples(*(st.integers(0, 40) for _ in _SYMBOLS)), min_size=1, max_size=12),
)
def test_the_folded_quotient_and_min_have_the_exact_values(
    num: sympy.Expr,
    den: sympy.Expr,
    rest: int,
    up: bool,
    bindings: list[tuple[int, int, int]],
) -> None:
    kind = sympy.ceiling if up else sympy.floor
    quotient = kind(sympy.expand(num * den + rest) / den)  # exact when rest is 0
    unit = num * sympy.Min(1, num)
    for e in (quotient, unit, quotient + unit * den):
        folded = dim_proofs.fold_roundings(e)
        for values in bindings:
            point = dict(zip(_SYMBOLS, values, strict=True))
            exact = ir.dim_eval.value(e, point)
            if exact is None:
                continue  # a division by 0: the program refuses such a binding
            assert ir.dim_eval.value(folded, point) == exact, (e, folded, point)


def test_a_question_asked_again_in_a_session_costs_no_more_nodes() -> None:
    dim_proofs.clear_caches()
    e = sympy.floor(p / 2) + sympy.floor(s / 3) - p - s
    with proof_session() as once:
        assert dim_proofs.outcome(e, ir.Ranges()) is Outcome.PROVED
    assert once.nodes > 0
    with proof_session() as twice:
        for _ in range(5):
            assert dim_proofs.outcome(e, ir.Ranges()) is Outcome.PROVED
    assert twice.nodes == once.nodes and twice.questions == 5
    # Another session pays again (an answer may depend on the budget a session had left).
    with proof_session() as other:
        dim_proofs.outcome(e, ir.Ranges())
    assert other.nodes == once.nodes


def test_a_tensor_fits_a_grown_block_by_the_argument_the_samples_point_to() -> None:
    # A decoder's block grown to hold the scores, the keys and the hidden states.
    block = sympy.Max(
        32,
        8 * p + 8 * s,
        512 * b * p + 512 * b * s,
        16 * b * p * s + 16 * b * s**2,
        evaluate=False,
    )
    dim_proofs.clear_caches()
    with proof_session() as session:
        assert dims_le(512 * b * s, block)
        assert dims_le(sympy.Max(512 * b * s, 8 * p + 8 * s, evaluate=False), block)
        assert not dims_le(block, 512 * b * s)
    # Two polynomial questions of two nodes each (a case split of the max took 10-14 each).
    assert session.nodes <= 6


def test_an_empty_dim_refutes_without_search() -> None:
    # An encoder's peaks: the positions (min(512, s) of them) are outweighed by the activations
    # (b*s) unless the batch is empty. False there, so unprovable; the search took 27 nodes.
    dim_proofs.clear_caches()
    planned = sympy.Max(16, 512 * b * s) + 538 * sympy.Min(512, s)
    killed = 4 * b * s**2 + 2592 * b * s + 32 * b + 32 * s + 16
    with proof_session() as session:
        claim = ir.compare(planned, "<=", killed)
    assert claim is not True
    assert session.nodes == 0 and session.refuted >= 1


_TERM = st.builds(
    lambda c, x, y: c * x * y,
    st.integers(1, 600),
    st.sampled_from((*_SYMBOLS, sympy.Integer(1))),
    st.sampled_from((*_SYMBOLS, sympy.Integer(1))),
)
_SUM = st.lists(_TERM, min_size=1, max_size=3).map(lambda ts: sympy.Add(*ts))
_DIM = st.one_of(
    _SUM,
    st.lists(_SUM, min_size=2, max_size=4).map(lambda xs: sympy.Max(*xs, evaluate=False)),
    st.lists(_SUM, min_size=2, max_size=3).map(lambda xs: sympy.Min(*xs, evaluate=False)),
)


@settings(max_examples=200, deadline=None)
@given(
    _DIM,
    _DIM,
    st.lists(st.tuples(*(st.integers(0, 300) for _ in _SYMBOLS)), min_size=1, max_size=20),
)
def test_dims_le_by_structure_is_never_refuted(
    a: sympy.Expr, c: sympy.Expr, bindings: list[tuple[int, int, int]]
) -> None:
    with proof_session():
        proved = dims_le(a, c)
    if not proved:
        return
    for values in bindings:
        point = dict(zip(_SYMBOLS, values, strict=True))
        x, y = ir.dim_eval.value(a, point), ir.dim_eval.value(c, point)
        assert x is not None and y is not None and x <= y, (a, c, point)
