"""``nn.rms_norm`` (vm/kernels/nn.py) against the float64 formula: its three paths (one row by a
dot product, rows by a matrix-vector product up to MATVEC_NORM_MAX, ufunc reduce above it or off
the last axis), random shapes and axes, float16/32/64, strided inputs, in place, and numpy's
inf and NaN where the mean square plus epsilon is no positive number."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dynshape.testing.numpy_nn import NN_OPS
from vm.kernels import nn
from vm.kernels.registry import get_kernel_factory

TOLERANCE = {"float16": 2e-3, "float32": 2e-5, "float64": 1e-12}


def _kernel(axis: int, eps: float = 1e-5):  # type: ignore[no-untyped-def]
    return get_kernel_factory("nn.rms_norm")({"axis": axis, "epsilon": eps})


def _want(x: np.ndarray, g: np.ndarray, axis: int, eps: float = 1e-5) -> np.ndarray:
    if x.size == 0:
        return x.copy()  # nothing to compute (numpy's mean of an empty axis warns)
    return np.asarray(NN_OPS["nn.rms_norm"]([x, g], {"axis": axis, "epsilon": eps}))


@settings(max_examples=60, deadline=None)
@given(
    shape=st.lists(st.integers(0, 9), min_size=1, max_size=4),
    data=st.data(),
    dtype=st.sampled_from(["float16", "float32", "float64"]),
    in_place=st.booleans(),
)
def test_rms_norm_equals_the_formula(
    shape: list[int], data: st.DataObject, dtype: str, in_place: bool
) -> None:
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    rng = np.random.default_rng(len(shape) * 31 + sum(shape))
    x = (rng.standard_normal(shape) * 3).astype(dtype)
    g = rng.standard_normal(shape[axis]).astype(dtype)
    want = _want(x, g, axis)
    out = x.copy() if in_place else np.full_like(x, np.nan)
    _kernel(axis)(out if in_place else x, g, out)
    tol = TOLERANCE[dtype]
    np.testing.assert_allclose(out, want, rtol=tol, atol=tol)


@pytest.mark.parametrize(
    "shape",
    [(1, 1, 128), (1, 1), (6, 33), (2, 3, 64), (513, 1023)],  # one row, rows, past MATVEC_NORM_MAX
)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_every_path_agrees_with_the_formula_and_the_others(
    shape: tuple[int, ...], dtype: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert 6 * 33 <= nn.MATVEC_NORM_MAX < 513 * 1023
    rng = np.random.default_rng(7)
    x = (rng.standard_normal(shape) * 2 + 1).astype(dtype)
    g = rng.standard_normal(shape[-1]).astype(dtype)
    fast, general = np.empty_like(x), np.empty_like(x)
    _kernel(-1)(x, g, fast)
    monkeypatch.setattr(nn, "ONE_ROW_NORM", False)
    monkeypatch.setattr(nn, "MATVEC_NORM_MAX", 0)
    _kernel(-1)(x, g, general)
    tol = TOLERANCE[dtype]
    np.testing.assert_allclose(fast, _want(x, g, -1), rtol=tol, atol=tol)
    np.testing.assert_allclose(general, _want(x, g, -1), rtol=tol, atol=tol)


def test_a_strided_input_and_output() -> None:
    rng = np.random.default_rng(3)
    x = rng.standard_normal((4, 10, 16)).astype(np.float32)[:, ::3, ::2]
    g = rng.standard_normal(8).astype(np.float32)
    out = np.full((4, 4, 16), np.nan, np.float32)[:, :, ::2]
    _kernel(-1)(x, g, out)
    np.testing.assert_allclose(out, _want(x, g, -1), rtol=2e-5, atol=2e-5)


def test_float16_squares_past_its_range_are_computed_in_float32() -> None:
    x = np.array([[300.0, -400.0, 500.0, 0.0]], np.float16)  # squares overflow float16
    g = np.ones(4, np.float16)
    out = np.empty_like(x)
    _kernel(-1)(x, g, out)
    assert np.isfinite(out).all()
    np.testing.assert_allclose(out, _want(x, g, -1), rtol=2e-3)


@pytest.mark.parametrize(("row", "eps"), [(0.0, 0.0), (3.0, -9.0), (3.0, -10.0)])
def test_no_positive_mean_square_gives_numpy_s_inf_and_nan_on_every_path(
    row: float, eps: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    x = np.full((1, 8), row, np.float32)
    g = np.ones(8, np.float32)
    one_row, general = np.empty_like(x), np.empty_like(x)
    with np.errstate(all="ignore"):
        _kernel(-1, eps)(x, g, one_row)
        monkeypatch.setattr(nn, "ONE_ROW_NORM", False)
        _kernel(-1, eps)(x, g, general)
        want = x / np.sqrt(np.float32(row * row + eps))
    np.testing.assert_array_equal(one_row, want)
    np.testing.assert_array_equal(general, want)
