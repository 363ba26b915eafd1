"""Proofs by residue classes (``ir.residue_proofs``): what they prove, what they leave to the
search, where they do not apply, and, on random dims, that nothing they prove is false at a
concrete binding."""

from __future__ import annotations

import itertools

import sympy
from hypothesis import given, settings
from hypothesis import strategies as st

import ir
from ir import dim_proofs
from ir.dim_proofs import Outcome, proof_session
from ir.residue_proofs import MAX_CLASSES, prove_nonpositive_by_residues

b, h, w = ir.sym("b"), ir.sym("h"), ir.sym("w")


def _map(d: sympy.Expr, stride: int) -> sympy.Expr:
    """An axis after convolutions of total stride ``stride`` (3x3, padding 1), folded."""
    return sympy.floor((d - 1) / stride) + 1


def _size(channels: int, stride: int) -> sympy.Expr:
    return sympy.expand(channels * b * _map(h, stride) * _map(w, stride))


def test_a_map_after_more_stride_fits_where_one_after_less_did() -> None:
    # MobileNetV3's placement questions: the relaxation search ran out of budget on them.
    for (c1, s1), (c2, s2) in [((32, 4), (32, 2)), ((64, 8), (160, 4)), ((576, 32), (576, 16))]:
        assert prove_nonpositive_by_residues(_size(c1, s1) - _size(c2, s2), {}) == (True, s1 * s1)
        # The converse is false (at large maps) and not proved.
        proved, _ = prove_nonpositive_by_residues(_size(c2, s2) - _size(c1, s1), {}) or (None, 0)
        assert proved is False


def test_one_symbol_facts_with_floor_ceiling_and_mod() -> None:
    proved = [
        h // 2 - h,
        sympy.ceiling(h / 2) - h,
        sympy.Mod(h, 3) - 2,
        sympy.floor((h + 5) / 4) - h - 1,
        (h * h - h) / 2 - h * h,  # rational coefficients, integer values
    ]
    for e in proved:
        assert prove_nonpositive_by_residues(e, {})[0] is True, e  # type: ignore[index]
    for e in [h - h // 2, sympy.Mod(h, 3) - 1, sympy.floor((h + 9) / 4) - 2]:
        assert prove_nonpositive_by_residues(e, {})[0] is False, e  # type: ignore[index]


def test_the_ranges_lower_bound_is_used_and_the_upper_one_drops_empty_classes() -> None:
    assert prove_nonpositive_by_residues(1 - h, {})[0] is False  # type: ignore[index]
    assert prove_nonpositive_by_residues(1 - h, {h: (1, None)}) == (True, 1)
    # h in [0, 2]: of the 16 residues of h % 16, only 3 hold a binding, and there it is <= 2.
    assert prove_nonpositive_by_residues(sympy.Mod(h, 16) - 2, {h: (0, 2)}) == (True, 3)
    assert prove_nonpositive_by_residues(sympy.Mod(h, 16) - 2, {})[0] is False  # type: ignore[index]
    # The upper bound does not bound m: h // 16 <= 0 on [0, 2] is left to the search.
    assert prove_nonpositive_by_residues(h // 16, {h: (0, 2)}) == (False, 3)


def test_what_the_method_does_not_handle_is_left_to_the_search() -> None:
    for e in [
        sympy.Max(h, w) - h - w,  # a max
        sympy.floor(h * w / 2) - h * w,  # a rounding of a product
        sympy.floor((h + w) / 2) - h - w,  # a rounding of two symbols
        sympy.Mod(h, w) - w,  # a symbolic modulus
        sympy.floor(h / 97) * sympy.floor(w / 89) - h * w,  # 8,633 classes
        2**70 * (h // 2) - 2**70 * h,  # past int64
        sympy.sqrt(2) * h - h,  # an irrational coefficient
    ]:
        assert prove_nonpositive_by_residues(e, {}) is None, e
    assert MAX_CLASSES < 97 * 89


def test_dim_proofs_uses_it_before_relaxing_and_charges_a_node_per_64_classes() -> None:
    dim_proofs.clear_caches()
    with proof_session() as session:
        e = _size(32, 32) - _size(32, 16)  # 1,024 classes
        assert dim_proofs.outcome(e, ir.Ranges()) is Outcome.PROVED
    assert session.nodes == 1024 // dim_proofs.RESIDUE_CLASSES_PER_NODE
    # Not proved by residues: the relaxation search still runs, and proves what it can.
    dim_proofs.clear_caches()
    with proof_session() as session:
        assert dim_proofs.outcome(h - 512, ir.Ranges({"h": (0, 512)})) is Outcome.PROVED


_ATOMS = [
    h,
    w,
    b,
    sympy.floor((h - 1) / 2),
    sympy.floor((h + 3) / 4),
    sympy.ceiling(w / 3),
    sympy.floor((2 * w - 1) / 6),
    sympy.Mod(h + 1, 4),
]


@st.composite
def _dims(draw: st.DrawFn) -> sympy.Expr:
    terms = []
    for _ in range(draw(st.integers(1, 4))):
        coeff = draw(st.integers(-6, 6))  # integer values: what the method assumes of E
        factors = draw(st.lists(st.sampled_from(_ATOMS), min_size=0, max_size=3))
        terms.append(coeff * sympy.Mul(*factors))
    return sympy.Add(*terms) + draw(st.integers(-8, 8))


@settings(max_examples=300, deadline=None)
@given(_dims(), st.integers(0, 5), st.integers(0, 5))
def test_nothing_proved_is_false_at_a_binding(e: sympy.Expr, lo_h: int, lo_w: int) -> None:
    bounds = {h: (lo_h, None), w: (lo_w, None)}
    answer = prove_nonpositive_by_residues(e, bounds)
    if answer is None or not answer[0]:
        return
    for vh, vw, vb in itertools.product(range(lo_h, lo_h + 30), range(lo_w, lo_w + 30), (0, 1, 5)):
        value = ir.dim_eval.value(e, {h: vh, w: vw, b: vb})
        assert value is not None and value <= 0, (e, vh, vw, vb)
