"""The dim decision procedure (ir/dim_proofs.py, through ir.compare, dim_max and dim_min):
the facts the issue names are proved, and on random dims and random bindings no answer is ever
refuted (a wrong proof would be a silent wrong plan or a skipped check)."""

from __future__ import annotations

import sympy
from hypothesis import given, settings
from hypothesis import strategies as st

import ir
from ir.dims import COMPARE

n, m = ir.sym("n"), ir.sym("m")


def test_the_facts_exported_models_need_are_proved() -> None:
    assert ir.compare(n // 2, "<=", n) is True
    assert ir.compare(n % 3, "<", 3) is True
    assert ir.compare((n - 1) // 2 + 1, "<=", n, {"n": (1, None)}) is True
    assert ir.compare(sympy.ceiling(n / 2), "<=", n) is True
    assert ir.compare(n % m, "<", m, {"m": (1, None)}) is True
    assert ir.compare(sympy.Max(n, m), ">=", n) is True
    assert ir.compare(sympy.Min(n, m), "<=", m) is True
    assert ir.compare(n // 2, "==", n, {"n": (1, None)}) is False  # refuted, not unknown


def test_folds_agree_with_compare() -> None:
    assert ir.dim_max(n, n // 2) == n
    assert ir.dim_max(4 * n, 4 * (n // 2)) == 4 * n
    assert ir.dim_min(n % 8, 8) == n % 8
    assert ir.dim_max(n % 8, 7) == 7
    # Undecidable without more facts: stays a max.
    assert isinstance(ir.dim_max(n, m), sympy.Max)


def test_what_does_not_hold_everywhere_stays_unknown() -> None:
    assert ir.compare(n // 2, "==", n) is None  # true at n = 0 only
    assert ir.compare(n % m, "<", m) is None  # m may be 0
    assert ir.compare(n, "<=", m) is None


# ---- random dims, random bindings -------------------------------------------------------------

_ATOMS = st.sampled_from([n, m, sympy.Integer(0), sympy.Integer(1), sympy.Integer(3)])


def _dims(leaf: st.SearchStrategy[sympy.Expr]) -> st.SearchStrategy[sympy.Expr]:
    def extend(inner: st.SearchStrategy[sympy.Expr]) -> st.SearchStrategy[sympy.Expr]:
        k = st.integers(1, 5)
        return st.one_of(
            st.tuples(inner, inner).map(lambda p: p[0] + p[1]),
            st.tuples(inner, k).map(lambda p: p[0] * p[1]),
            st.tuples(inner, inner).map(lambda p: p[0] * p[1]),
            st.tuples(inner, k).map(lambda p: sympy.floor(p[0] / p[1])),
            st.tuples(inner, k).map(lambda p: sympy.ceiling(p[0] / p[1])),
            st.tuples(inner, k).map(lambda p: sympy.Mod(p[0], p[1])),
            st.tuples(inner, inner).map(lambda p: sympy.Max(p[0], p[1])),
            st.tuples(inner, inner).map(lambda p: sympy.Min(p[0], p[1])),
            st.tuples(inner, k).map(lambda p: p[0] - p[1]),  # may go negative: still sound
        )

    return st.recursive(leaf, extend, max_leaves=6)


_RANGES = st.sampled_from([{}, {"n": (1, None)}, {"n": (2, 9), "m": (1, 5)}, {"m": (3, 3)}])


def _bindings(ranges: dict[str, tuple[int, int | None]]) -> list[dict[sympy.Basic, int]]:
    out = []
    for vn in (0, 1, 2, 3, 5, 8, 9, 17, 64):
        for vm in (0, 1, 2, 3, 5, 7, 16):
            values = {n: vn, m: vm}
            if all(
                lo <= values[ir.sym(name)] and (hi is None or values[ir.sym(name)] <= hi)
                for name, (lo, hi) in ranges.items()
            ):
                out.append(values)
    return out


def _value(e: sympy.Expr, binding: dict[sympy.Basic, int]) -> int:
    return int(e.xreplace({s: sympy.Integer(v) for s, v in binding.items()}))


@settings(max_examples=300, deadline=None)
@given(_dims(_ATOMS), _dims(_ATOMS), _RANGES, st.sampled_from(sorted(COMPARE)))
def test_no_answer_is_refuted_by_a_binding(
    a: sympy.Expr, b: sympy.Expr, ranges: dict[str, tuple[int, int | None]], op: str
) -> None:
    verdict = ir.dims.dim_proofs.decide(sympy.sympify(a), op, sympy.sympify(b), ir.Ranges(ranges))
    if verdict is None:
        return
    for binding in _bindings(ranges):
        assert COMPARE[op](_value(a, binding), _value(b, binding)) is verdict, (a, op, b, binding)


@settings(max_examples=200, deadline=None)
@given(_dims(_ATOMS), _dims(_ATOMS), _RANGES)
def test_dim_max_and_dim_min_are_the_max_and_min_at_every_binding(
    a: sympy.Expr, b: sympy.Expr, ranges: dict[str, tuple[int, int | None]]
) -> None:
    top, bottom = ir.dim_max(a, b, ranges), ir.dim_min(a, b, ranges)
    for binding in _bindings(ranges):
        va, vb = _value(a, binding), _value(b, binding)
        assert _value(sympy.sympify(top), binding) == max(va, vb)
        assert _value(sympy.sympify(bottom), binding) == min(va, vb)
