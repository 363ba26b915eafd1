"""``nn.attention``'s softmax: one shift for every row where that is exact enough
(``_one_shift``), each row's own maximum otherwise (``_softmax_rows``).

The oracle is the unfused program in numpy, in the operands' dtype (scores, scale, mask added,
softmax with each row's maximum, product by ``v``, ``nan_to_zero``'s where): the kernel must
agree within float rounding, NaN for NaN, on every kind of mask a model passes (none, padding
with ``finfo.min`` or ``-inf``, rows masked entirely, biases, NaN and infinities) and must
take the path the rule says (counted), so neither path can hide behind the other."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vm.kernels import attention as attention_module
from vm.kernels import get_kernel_factory

MASKS = ("none", "padding", "padding_inf", "fully_masked", "fully_masked_inf", "bias", "causal")


def _mask(kind: str, rng: np.random.Generator, b: int, n: int, m: int, dtype: str) -> np.ndarray:
    low = np.finfo(dtype).min
    if kind == "none":
        return np.zeros((), dtype)
    if kind == "bias":  # an additive bias per key (ALiBi, T5-style), far below 0 in a row
        offset = rng.uniform(-250, -100, (b, 1, 1, 1))  # exp(offset) alone would underflow
        return (rng.uniform(-8, 0, (b, 1, 1, m)) + offset).astype(dtype)
    if kind == "causal":  # every query row keeps its first keys
        keep = np.arange(m)[None, :] <= np.arange(n)[:, None] + max(m - n, 0)
        return np.where(keep, 0, low).astype(dtype)[None, None]
    keep = rng.random((b, 1, 1, m)) > 0.3
    keep[..., 0] = True  # every row keeps a key
    if kind.startswith("fully_masked"):
        keep[0] = False  # the first batch row masks every key
    fill = -np.inf if kind.endswith("inf") else low
    return np.where(keep, 0, fill).astype(dtype)


def _unfused(
    q: np.ndarray, k: np.ndarray, v: np.ndarray, mask: np.ndarray, scale: float, nan_to_zero: bool
) -> np.ndarray:
    with np.errstate(invalid="ignore", over="ignore"):
        s = (q @ k.swapaxes(-1, -2)) * q.dtype.type(scale) + mask
        s = np.exp(s - s.max(axis=-1, keepdims=True))
        p = s / s.sum(axis=-1, keepdims=True)
        if nan_to_zero:
            p = np.where(np.isnan(p), 0, p).astype(q.dtype)
        return p @ v


def _counting(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    calls = {"rows": 0}
    real = attention_module._softmax_rows

    def counted(s: np.ndarray) -> np.ndarray:
        calls["rows"] += 1
        return real(s)

    monkeypatch.setattr(attention_module, "_softmax_rows", counted)
    return calls


def _attention(
    q: np.ndarray, k: np.ndarray, v: np.ndarray, mask: np.ndarray, scale: float, nan_to_zero: bool
) -> np.ndarray:
    attrs: dict[str, Any] = {
        "scale": scale,
        "q_axes": None,
        "k_axes": None,
        "v_axes": None,
        "out_axes": None,
        "nan_to_zero": nan_to_zero,
    }
    out = np.full(q.shape[:-1] + v.shape[-1:], np.nan, q.dtype)
    with np.errstate(invalid="ignore", over="ignore"):
        get_kernel_factory("nn.attention")(attrs)(q, k, v, mask, out)
    return out


@settings(max_examples=60, deadline=None)
@given(
    b=st.integers(1, 3),
    h=st.integers(1, 3),
    n=st.sampled_from([1, 3, 17, 40]),
    m=st.sampled_from([1, 5, 33, 130]),
    mask_kind=st.sampled_from(MASKS),
    spread=st.sampled_from([0.5, 4.0, 40.0]),
    dtype=st.sampled_from(["float32", "float64"]),
    nan_to_zero=st.booleans(),
    few_rows=st.booleans(),
    seed=st.integers(0, 2**32 - 1),
)
def test_the_kernel_is_the_unfused_program(
    b: int,
    h: int,
    n: int,
    m: int,
    mask_kind: str,
    spread: float,
    dtype: str,
    nan_to_zero: bool,
    few_rows: bool,
    seed: int,
) -> None:
    rng = np.random.default_rng(seed)
    q, k, v = (rng.standard_normal((b, h, r, 16)).astype(dtype) for r in (n, m, m))
    q *= np.asarray(spread, dtype)  # scores over a range from ~2 to ~600 wide
    mask = _mask(mask_kind, rng, b, n, m, dtype)
    bound = attention_module.ONE_SHIFT_MIN_ROWS
    try:  # the one shift for these few rows too, or as the kernel decides
        attention_module.ONE_SHIFT_MIN_ROWS = 1 if few_rows else bound
        got = _attention(q, k, v, mask, 0.25, nan_to_zero)
    finally:
        attention_module.ONE_SHIFT_MIN_ROWS = bound
    want = _unfused(q, k, v, mask, 0.25, nan_to_zero)
    np.testing.assert_allclose(got, want, rtol=2e-4, atol=2e-5)  # NaN where it has NaN


def _ordinary(dtype: str = "float32") -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((2, 4, 64, 32)).astype(dtype) for _ in range(3))
    return q, k, v


@pytest.mark.parametrize("mask_kind", ["none", "padding", "padding_inf", "bias", "causal"])
def test_ordinary_scores_take_one_shift(monkeypatch: pytest.MonkeyPatch, mask_kind: str) -> None:
    calls = _counting(monkeypatch)
    q, k, v = _ordinary()
    mask = _mask(mask_kind, np.random.default_rng(1), 2, 64, 64, "float32")
    got = _attention(q, k, v, mask, 0.125, False)
    assert calls["rows"] == 0
    np.testing.assert_allclose(got, _unfused(q, k, v, mask, 0.125, False), rtol=1e-4, atol=1e-5)


def test_few_rows_keep_their_own_maxima(monkeypatch: pytest.MonkeyPatch) -> None:
    """A decode step's scores (one query a head) are few rows: the per-row path is cheaper
    there (ONE_SHIFT_MIN_ROWS), and taken."""
    calls = _counting(monkeypatch)
    rng = np.random.default_rng(4)
    q, k, v = (rng.standard_normal((2, 4, r, 32)).astype(np.float32) for r in (1, 300, 300))
    mask = _mask("padding", rng, 2, 1, 300, "float32")
    got = _attention(q, k, v, mask, 0.125, False)
    assert calls["rows"] == 1
    np.testing.assert_allclose(got, _unfused(q, k, v, mask, 0.125, False), rtol=1e-4, atol=1e-5)


def _special(kind: str) -> tuple[np.ndarray, ...]:
    q, k, v = _ordinary()
    mask = np.zeros((2, 1, 1, 64), np.float32)
    if kind == "wide":
        q *= 100.0  # scores ~ +-400 after the scale: past SHIFT_RANGE
    elif kind == "nan_score":
        q[1, 2, 3, 4] = np.nan
    elif kind == "inf_score":
        q[0, 0, 0, 0] = np.inf
    elif kind == "min_mask_row":  # finfo.min everywhere: the unfused rounding makes it uniform
        mask[1] = np.finfo(np.float32).min
    elif kind == "inf_mask_row":
        mask[1] = -np.inf
    elif kind == "nan_mask":
        mask[0, 0, 0, 5] = np.nan
    elif kind == "plus_inf_mask":
        mask[0, 0, 0, 5] = np.inf
    elif kind == "full_size_mask":
        mask = np.random.default_rng(2).uniform(-1, 0, (2, 4, 64, 64)).astype(np.float32)
    return q, k, v, mask


@pytest.mark.parametrize(
    "kind",
    [
        "wide",
        "nan_score",
        "inf_score",
        "min_mask_row",
        "inf_mask_row",
        "nan_mask",
        "plus_inf_mask",
        "full_size_mask",
    ],
)
@pytest.mark.parametrize("nan_to_zero", [False, True])
def test_the_rows_take_their_own_maxima_where_one_shift_would_not_do(
    monkeypatch: pytest.MonkeyPatch, kind: str, nan_to_zero: bool
) -> None:
    calls = _counting(monkeypatch)
    q, k, v, mask = _special(kind)
    got = _attention(q, k, v, mask, 0.125, nan_to_zero)
    assert calls["rows"] == 1
    np.testing.assert_allclose(
        got, _unfused(q, k, v, mask, 0.125, nan_to_zero), rtol=1e-4, atol=1e-5
    )
    finite = kind in ("wide", "min_mask_row", "full_size_mask")
    assert np.isnan(got).any() == (not finite and not nan_to_zero)
    if kind == "min_mask_row":  # every key weighs the same
        uniform = np.broadcast_to(v[1].mean(axis=-2, keepdims=True), got[1].shape)
        np.testing.assert_allclose(got[1], uniform, rtol=1e-4, atol=1e-5)


def test_float16_takes_one_shift_in_float32(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _counting(monkeypatch)
    q, k, v = (x.astype(np.float16) for x in _ordinary())
    mask = _mask("padding", np.random.default_rng(3), 2, 64, 64, "float16")
    got = _attention(q, k, v, mask, 0.125, False)
    assert calls["rows"] == 0 and got.dtype == np.float16
    want = _unfused(*(x.astype(np.float32) for x in (q, k, v, mask)), 0.125, False)
    np.testing.assert_allclose(got.astype(np.float32), want, rtol=2e-3, atol=2e-3)
