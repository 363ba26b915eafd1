"""The vectorised ``erf`` kernel (``vm/kernels/erf.py``: Cody's rational approximations in
float64, two float32 regions, a float64 rational for small narrow arrays) against ``math.erf``."""

from __future__ import annotations

import math
import sys

import numpy as np
import pytest

from vm.kernels import erf as erf_module
from vm.kernels.erf import ERF_CHUNK, ERF_NARROW_MAX, ERF_POWERS_MAX
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


@pytest.mark.parametrize("piece", [None, ERF_POWERS_MAX], ids=["float32 path", "small calls"])
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_narrow_floats_within_one_ulp(dtype, piece):
    x = np.linspace(-7.0, 7.0, 2_000_001).astype(dtype)
    finfo = np.finfo(dtype)
    x = np.concatenate([x, np.array([finfo.smallest_subnormal, finfo.tiny, finfo.max], dtype)])
    x = np.concatenate([x, -x])
    want = _exact(x, dtype)
    if piece is None:  # one call: chunks of ERF_CHUNK in float32 arithmetic
        got = _run(x)
    else:  # calls of at most ERF_POWERS_MAX elements: one rational function in float64
        got = np.concatenate([_run(x[i : i + piece]) for i in range(0, x.size, piece)])
    assert _ulps(got, want).max() <= 1
    # Equal to the correctly rounded value: the float64 rational (relative error 2.2e-9,
    # rounded once) on 98.8% of the float32 points; the float32 regions on 94% of all float32
    # in [-4.5, 4.5], more here, where a third of the grid lies beyond and rounds to +-1.
    assert np.mean(got == want) > (0.98 if piece or dtype == np.float16 else 0.95)


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_a_mid_sized_call_is_the_small_calls_of_its_pieces(dtype):
    # Past ERF_POWERS_MAX and up to ERF_NARROW_MAX elements, the float64 rational runs on
    # pieces of ERF_POWERS_MAX: bit for bit the small calls on those pieces, in place or not,
    # from a strided input too.
    n = ERF_POWERS_MAX + 37
    assert ERF_POWERS_MAX < n <= ERF_NARROW_MAX
    x = (np.random.default_rng(5).standard_normal(2 * n) * 2).astype(dtype)
    want = np.concatenate(
        [_run(x[::2][i : i + ERF_POWERS_MAX].copy()) for i in range(0, n, ERF_POWERS_MAX)]
    )
    np.testing.assert_array_equal(_run(x[::2]), want, strict=True)
    inplace = x[::2].copy()
    erf(inplace, inplace)
    np.testing.assert_array_equal(inplace, want, strict=True)


def test_float32_every_value_around_the_split_within_one_ulp():
    # Every float32 in [0.9, 1.1] and its negative: where the two float32 regions meet and
    # their errors are largest (benchmarks/erf_float32.py checks every float32 the same way).
    lo, hi = np.array([0.9, 1.1], np.float32).view(np.int32)
    x = np.arange(lo, hi + 1, dtype=np.int32).view(np.float32)
    x = np.concatenate([x, -x])
    assert x.size > ERF_NARROW_MAX
    assert _ulps(_run(x), _exact(x, np.float32)).max() <= 1


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_narrow_special_values_without_floating_point_errors(dtype):
    finfo = np.finfo(dtype)
    special = [0.0, -0.0, np.inf, -np.inf, finfo.smallest_subnormal, -finfo.smallest_subnormal]
    special += [finfo.tiny, finfo.max, -finfo.max, 1.0, -1.0, 3.92, -3.92, 3.93, 1e-20, 2.0]
    for n in (len(special), ERF_POWERS_MAX + 1, ERF_NARROW_MAX + 1):  # every path
        x = np.resize(np.array(special, dtype), n)
        # nothing overflows, divides by zero or is invalid (tiny |x| underflow in x^2: IEEE's
        # gradual underflow, ignored under numpy's default errstate)
        with np.errstate(over="raise", divide="raise", invalid="raise"):
            got = _run(x)
        assert _ulps(got, _exact(x, dtype)).max() <= 1
        assert np.array_equal(np.signbit(got), np.signbit(x))  # erf(-0.0) is -0.0
        nan = _run(np.resize(np.array([np.nan, -np.nan, 1.0], dtype), n))
        assert np.isnan(nan[0::3]).all() and np.isnan(nan[1::3]).all()


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
def test_small_calls_are_the_float64_rational_rounded_once(dtype):
    # _erf_narrow_small (up to ERF_POWERS_MAX elements) sums the rational function's terms by
    # one matrix product: within float64's rounding of Horner's evaluation, so the same bits
    # once rounded, for any layout of input and output.
    num, den = erf_module._ERF_NARROW_NUM_DEN
    rng = np.random.default_rng(3)

    def horner(coefs, y):
        acc = np.zeros_like(y)
        for c in coefs:
            acc = acc * y + c
        return acc

    def reference(v):
        b = np.clip(v.astype(np.float64), -erf_module._ERF_NARROW_CLIP, erf_module._ERF_NARROW_CLIP)
        y = b * b
        return (b * (horner(num, y) / horner(den, y))).astype(dtype)

    for n in (1, 2, 255, 256, 1000, ERF_POWERS_MAX // 2):
        x = (rng.standard_normal((2, n)) * 3).astype(dtype)
        x[0, 0] = np.nan
        for v in (x[0], x[:, ::2], x[::-1], x.reshape(-1)[: n // 2 + 1], x.reshape(-1)):
            assert np.array_equal(_run(v), reference(v), equal_nan=True)
        in_place = x[1].copy()
        erf(in_place, in_place)
        assert np.array_equal(in_place, reference(x[1]))


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_float32_path_bits_do_not_depend_on_the_chunks(dtype, monkeypatch):
    # Each element is computed by the same steps whatever chunk holds it (and whichever thread
    # takes the chunk: tests/vm/test_worker_thread.py).
    x = (np.random.default_rng(5).standard_normal(3 * ERF_CHUNK + 11) * 2).astype(dtype)
    x[::977] = np.nan
    whole = _run(x)
    monkeypatch.setattr(erf_module, "ERF_CHUNK", 1000)
    assert np.array_equal(_run(x), whole, equal_nan=True)
    monkeypatch.undo()
    assert np.array_equal(_run(x), whole, equal_nan=True)  # the full-size scratch again


def test_small_calls_keep_views_for_a_bounded_number_of_sizes():
    for n in range(1, 3 * erf_module.ERF_VIEWS_MAX):
        _run(np.ones(n, np.float32))
    assert 0 < len(erf_module._erf_local.views) <= erf_module.ERF_VIEWS_MAX


@pytest.mark.parametrize("name", ["_ERF_R1", "_ERF_R2", "_ERF_R3"], ids=lambda n: n.strip("_"))
def test_each_rational_is_horner_on_its_full_coefficients_bit_for_bit(name):
    # _rational strips leading zero coefficients and starts a monic polynomial with an add;
    # both are exact on finite y, so it must give the bits of Horner over every coefficient,
    # one multiply and one add per degree (what the kernel computed before: tests compare its
    # results with math.erf; this pins the arithmetic).
    full = {
        "_ERF_R1": (erf_module._ERF_N1, (1.0, *erf_module._ERF_B)),
        "_ERF_R2": ((erf_module._ERF_C[8], *erf_module._ERF_C[:8]), (1.0, *erf_module._ERF_D)),
        "_ERF_R3": ((erf_module._ERF_P[5], *erf_module._ERF_P[:5]), (1.0, *erf_module._ERF_Q)),
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
    got = erf_module._rational(getattr(erf_module, name), y, nd)
    assert np.array_equal(got, want, equal_nan=True)
