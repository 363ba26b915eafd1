"""``softmax_rows``: one shift for every row where the range allows, each row its own maximum
elsewhere; both against a float64 softmax, with the non-finite rows of the textbook formula."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vm.kernels import row_softmax


def _reference(x: np.ndarray) -> np.ndarray:
    """The textbook formula in float64 (per-row maximum), as numpy would give it."""
    x = x.astype(np.float64)
    with np.errstate(invalid="ignore"):
        e = np.exp(x - x.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True)


@settings(max_examples=60, deadline=None)
@given(
    rows=st.sampled_from(
        [1, 7, row_softmax.ONE_SHIFT_MIN_ROWS - 1, row_softmax.ONE_SHIFT_MIN_ROWS, 700]
    ),
    n=st.sampled_from([1, 3, 64, 200]),
    spread=st.sampled_from([0.1, 5.0, 30.0, 60.0, 200.0]),
    dtype=st.sampled_from(["float32", "float64"]),
    in_place=st.booleans(),
    seed=st.integers(0, 2**32 - 1),
)
def test_close_to_the_float64_softmax(rows, n, spread, dtype, in_place, seed):
    rng = np.random.default_rng(seed)
    # rows at different heights: the one shift puts some rows far below the largest value
    x = (rng.standard_normal((rows, n)) + rng.uniform(-1, 1, (rows, 1)) * spread / 2).astype(dtype)
    want = _reference(x)
    out = x if in_place else np.empty_like(x)
    inverse = row_softmax.softmax_rows(x, out)
    # float32: the shift's subtraction rounds at the range's ulp (2^-18 at 64): 2e-6 relative
    rtol = 4e-6 if dtype == "float32" else 1e-13
    np.testing.assert_allclose(out, want, rtol=rtol, atol=1e-30)
    assert inverse.shape == (rows, 1) and (inverse > 0).all() and np.isfinite(inverse).all()


@pytest.mark.parametrize("rows", [4, 300])
def test_non_finite_rows_take_the_textbook_formula(rows):
    x = np.random.default_rng(rows).standard_normal((rows, 8)).astype(np.float32)
    x[0, 2] = np.nan
    x[1] = -np.inf  # a row masked entirely: NaN
    x[2, :4] = -np.inf  # half masked: the other half
    x[3, 5] = np.inf
    out = np.empty_like(x)
    with np.errstate(invalid="ignore"):
        inverse = row_softmax.softmax_rows(x, out)
        want = _reference(x)
    np.testing.assert_allclose(out, want, rtol=1e-6, atol=1e-30)  # NaNs where numpy's are
    assert np.isnan(inverse[0, 0]) and np.isnan(out[0]).all()
    assert np.isnan(out[1]).all() and np.isnan(out[3]).all()
    assert np.array_equal(out[2, :4], np.zeros(4)) and np.isclose(out[2].sum(), 1.0)


def test_one_shift_is_taken_only_within_its_range(monkeypatch):
    calls = []
    real = row_softmax._matmul
    monkeypatch.setattr(row_softmax, "_matmul", lambda *a: (calls.append(1), real(*a)))
    rows = row_softmax.ONE_SHIFT_MIN_ROWS
    narrow = np.linspace(0, row_softmax.SHIFT_RANGE, rows * 4, dtype=np.float32).reshape(rows, 4)
    row_softmax.softmax_rows(narrow, np.empty_like(narrow))
    assert calls == [1]
    wide = narrow * 1.01
    row_softmax.softmax_rows(wide, np.empty_like(wide))
    few = narrow[: rows - 1]
    row_softmax.softmax_rows(few, np.empty_like(few))
    assert calls == [1]
