"""The vectorised ``erf`` kernel (Cody's rational approximations) against ``math.erf``."""

from __future__ import annotations

import math
import sys

import numpy as np
import pytest

from vm.kernels import elementwise
from vm.kernels.elementwise import ERF_CHUNK, ERF_POWERS_MAX
from vm.kernels.registry import get_kernel_factory

erf = get_kernel_factory("erf")({})


def _exact(x: np.ndarray, dtype: type) -> np.ndarray:
    """math.erf of every element, rounded once to ``dtype``."""
    values = [math.erf(v) for v in x.astype(np.float64).ravel().tolist()]
    return np.array(values, np.float64).astype(dtype).reshape(x.shape)


def _ulps(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """|got - want| in units of the last place of ``want`` (in its own dtype)."""
    g, w = got.astype(np.float64), want.astype(np.float64)
    return np.abs(g - w) / np.spacing(np.abs(want)).astype(np.float64)


def _run(x: np.ndarray) -> np.ndarray:
    out = np.empty(x.shape, x.dtype)
    erf(x, out)
    return out


TINY = np.finfo(np.float64).smallest_subnormal
EXTREMES = [0.0, -0.0, TINY, -TINY, 1e-310, -1e-310, 2.2250738585072014e-308, 1e-300, -1e-300]
EXTREMES += [1e-17, 1e-8, 0.46875, -0.46875, 0.4687500000000001, 4.0, -4.0, 4.000000000000001]
EXTREMES += [5.9, 6.0, -6.0, 6.5, 27.0, 30.0, -30.0, sys.float_info.max, -sys.float_info.max]


def test_float64_dense_grid_within_5_ulp():
    # The grid, and a denser one where the error is largest (just above |x| = 0.46875, where
    # erf = 1 - erfc cancels a bit).
    x = np.concatenate([np.linspace(-7.0, 7.0, 2_000_001), np.linspace(0.46875, 1.2, 500_001)])
    want = _exact(x, np.float64)
    got = _run(x)
    ulps = _ulps(got, want)
    # Achieved: at most 5 ulp (4 on the first grid), relative error below 7e-16, and most
    # results bit-equal to math.erf.
    assert ulps.max() <= 5, (ulps.max(), x[ulps.argmax()])
    assert np.mean(ulps <= 1) > 0.99
    rel = np.abs(got - want) / np.maximum(np.abs(want), TINY)
    assert rel.max() < 7e-16
    assert np.mean(got == want) > 0.85
    assert np.all(np.abs(got) <= 1.0)
    assert np.all(np.diff(got[:2_000_001]) >= 0)  # monotonic on the grid


def test_float64_extremes():
    x = np.array(EXTREMES + [-v for v in EXTREMES])
    got, want = _run(x), _exact(x, np.float64)
    assert _ulps(got, want).max() <= 5
    assert np.array_equal(np.signbit(got), np.signbit(want))  # erf(-0.0) is -0.0
    special = _run(np.array([np.inf, -np.inf, np.nan, -np.nan]))
    assert special[:2].tolist() == [1.0, -1.0] and np.isnan(special[2:]).all()


def test_float64_tiny_arguments_are_exact():
    # erf(x) = 2x/sqrt(pi) for tiny x: the small-|x| formula must not lose the subnormals.
    x = np.array([TINY, 2 * TINY, 1e-320, 1e-310, 1e-300, 1e-200, 1e-20])
    assert np.array_equal(_run(x), _exact(x, np.float64))


@pytest.mark.parametrize("piece", [None, ERF_POWERS_MAX], ids=["chunks", "small calls"])
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_narrow_floats_within_one_ulp(dtype, piece):
    x = np.linspace(-7.0, 7.0, 2_000_001).astype(dtype)
    finfo = np.finfo(dtype)
    x = np.concatenate([x, np.array([finfo.smallest_subnormal, finfo.tiny, finfo.max], dtype)])
    x = np.concatenate([x, -x])
    want = _exact(x, dtype)
    if piece is None:  # Horner's steps over chunks of ERF_CHUNK
        got = _run(x)
    else:  # calls of at most ERF_POWERS_MAX elements: the powers of x^2 times the coefficients
        got = np.concatenate([_run(x[i : i + piece]) for i in range(0, x.size, piece)])
    # One rational function (relative error 2.2e-9) in float64, rounded once: within 1 ulp
    # always, and equal to the correctly rounded value almost everywhere (measured 98.8% for
    # float32; float16's ulp is wider still), however it is evaluated.
    assert _ulps(got, want).max() <= 1
    assert np.mean(got == want) > 0.98


def test_in_place_and_out():
    rng = np.random.default_rng(1)
    for dtype in (np.float64, np.float32, np.float16):
        x = (rng.standard_normal(3 * ERF_CHUNK + 7) * 3).astype(dtype)
        want = _exact(x, dtype)
        out = np.empty_like(x)
        erf(x, out)
        assert _ulps(out, want).max() <= (5 if dtype == np.float64 else 1)
        erf(x, x)  # in place: out is x itself
        assert np.array_equal(x, out)


def test_regions_mixed_in_one_chunk_and_apart():
    # All small, all large, all beyond 4, and interleaved in one chunk.
    for x in (
        np.linspace(-0.46875, 0.46875, 1001),
        np.linspace(0.5, 3.9, 1001),
        np.linspace(4.0, 40.0, 1001),
        np.tile([0.1, 2.0, -5.0, -0.3, np.nan, 4.5], 500),
    ):
        got = _run(x)
        want = _exact(x, np.float64)
        ok = ~np.isnan(want)
        assert _ulps(got[ok], want[ok]).max() <= 5
        assert np.isnan(got[~ok]).all()


def test_empty_and_scalar_shapes():
    for shape in [(0,), (3, 0), (0, 5, 2)]:
        x = np.empty(shape, np.float32)
        out = np.empty(shape, np.float32)
        erf(x, out)
    x = np.array(0.5)
    out = np.empty((), np.float64)
    erf(x, out)
    assert out == math.erf(0.5)


def test_non_contiguous_views():
    rng = np.random.default_rng(2)
    base = rng.standard_normal((64, 50)).astype(np.float32) * 2
    for view in (base[::2, ::3], base.T, base[:, 7], base[::-1]):
        out = np.empty(view.shape, view.dtype)
        erf(view, out)
        assert _ulps(out, _exact(np.ascontiguousarray(view), np.float32)).max() <= 1
    # The input is untouched, and a broadcast (zero-stride) view works too.
    before = base.copy()
    erf(base[::2], np.empty((32, 50), np.float32))
    assert np.array_equal(base, before)
    row = np.broadcast_to(np.float32(0.25), (4, 3))
    out = np.empty((4, 3), np.float32)
    erf(row, out)
    assert _ulps(out, np.full((4, 3), math.erf(0.25), np.float32)).max() <= 1


def test_wrong_output_shape_is_refused():
    with pytest.raises(ValueError, match=r"erf: input shape \(2, 3\)"):
        erf(np.zeros((2, 3)), np.empty((3, 2)))


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_small_calls_give_the_bits_of_the_chunked_path(dtype, monkeypatch):
    # _erf_narrow_small (up to ERF_POWERS_MAX elements) computes the same products in the
    # same order as the chunk path: the same bits, for any layout of input and output.
    rng = np.random.default_rng(3)
    for n in (1, 2, 255, 256, 1000, ERF_POWERS_MAX):
        x = (rng.standard_normal((2, n)) * 3).astype(dtype)
        x[0, 0] = np.nan
        views = [x[0], x[:, ::2], x[::-1], x.reshape(-1)[: n // 2 + 1]]
        fast = [_run(v) for v in views]
        in_place = x[1].copy()
        erf(in_place, in_place)
        monkeypatch.setattr(elementwise, "ERF_SMALL", False)
        for v, got in zip(views, fast, strict=True):
            assert np.array_equal(got, _run(v), equal_nan=True)
        assert np.array_equal(in_place, _run(x[1]))
        monkeypatch.setattr(elementwise, "ERF_SMALL", True)


def test_small_calls_keep_views_for_a_bounded_number_of_sizes():
    for n in range(1, 3 * elementwise.ERF_VIEWS_MAX):
        _run(np.ones(n, np.float32))
    assert 0 < len(elementwise._erf_local.views) <= elementwise.ERF_VIEWS_MAX


@pytest.mark.parametrize(
    "name", ["_ERF_R1", "_ERF_R2", "_ERF_R3", "_ERF_NARROW"], ids=lambda n: n.strip("_")
)
def test_each_rational_is_horner_on_its_full_coefficients_bit_for_bit(name):
    # _rational strips leading zero coefficients and starts a monic polynomial with an add;
    # both are exact on finite y, so it must give the bits of Horner over every coefficient,
    # one multiply and one add per degree (what the kernel computed before: tests compare its
    # results with math.erf; this pins the arithmetic).
    full = {
        "_ERF_R1": (elementwise._ERF_N1, (1.0, *elementwise._ERF_B)),
        "_ERF_R2": ((elementwise._ERF_C[8], *elementwise._ERF_C[:8]), (1.0, *elementwise._ERF_D)),
        "_ERF_R3": ((elementwise._ERF_P[5], *elementwise._ERF_P[:5]), (1.0, *elementwise._ERF_Q)),
        "_ERF_NARROW": elementwise._ERF_NARROW_NUM_DEN,
    }[name]
    y = np.concatenate(
        [[0.0, 1e-300, 1.0, 16.0, np.nan], np.random.default_rng(4).random(999) * 40]
    )

    def horner(coefs):
        acc = y * coefs[0] + coefs[1]
        for c in coefs[2:]:
            acc = acc * y + c
        return acc

    want = horner(full[0]) / horner(full[1])
    nd = np.empty((2, y.size))
    got = elementwise._rational(getattr(elementwise, name), y, nd)
    assert np.array_equal(got, want, equal_nan=True)
