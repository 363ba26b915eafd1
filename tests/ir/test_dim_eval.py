"""``ir.dim_eval``: exact values of dims at bindings, against sympy's own substitution."""

from __future__ import annotations

import sympy
from hypothesis import given, settings
from hypothesis import strategies as st

import ir
from ir import dim_eval

N, M, K = ir.sym("n"), ir.sym("m"), ir.sym("k")
EXPRS = [
    N * M + 3,
    sympy.floor(N / 3) + sympy.Mod(M, 4),
    sympy.Max(N, 2 * M - 1, sympy.Min(K, 40)),
    sympy.ceiling((N - 1) / M),
    (N + 1) ** 2,
    sympy.floor((N * K + M) / (2 * M + 1)),
    sympy.Mod(N * K, M + 1) * sympy.Min(N, M),
    sympy.Max(0, sympy.ceiling((N - K) / 2)),
]


def _by_sympy(expr: sympy.Expr, binding: dict[sympy.Symbol, int]) -> int | None:
    out = expr.xreplace({s: sympy.Integer(binding[s]) for s in expr.free_symbols})
    return int(out) if out.is_Integer else None


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(EXPRS), st.integers(0, 60), st.integers(0, 60), st.integers(0, 200))
def test_values_equal_sympy_substitution(expr: sympy.Expr, n: int, m: int, k: int) -> None:
    binding = {N: n, M: m, K: k}
    assert dim_eval.value(expr, binding) == _by_sympy(expr, binding)


def test_a_division_by_a_zero_symbol_has_no_value() -> None:
    assert dim_eval.value(sympy.floor(N / M), {N: 3, M: 0}) is None
    assert dim_eval.value(sympy.Mod(N, M), {N: 3, M: 0}) is None
    assert dim_eval.value(sympy.floor(N / M), {N: 7, M: 2}) == 3


def test_ints_are_their_own_value() -> None:
    assert dim_eval.value(12, {}) == 12
