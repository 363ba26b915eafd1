"""The vectorised ``erf`` kernel (``vm/kernels/erf.py``: Cody's rational approximations in
float64, ``tanh(x R(x^2))`` in float32 for float32 and float16) against ``math.erf``."""

from __future__ import annotations

import math
import sys

import numpy as np
import pytest

from vm.kernels import erf as erf_module
from vm.kernels.erf import ERF_CHUNK
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


#: The float32 evaluation's bound. benchmarks/erf_float32.py checks every float32 of [-4.5,
#: 4.5]: 4 ulp at most, 0.67% of them 2 ulp off and 0.004% 3 or 4: the rounding of H's float32
#: steps and of ``x H`` before numpy's float32 tanh (itself within 1 ulp); 4 just above the
#: powers of two, where ``x H`` has rounded in the binade above tanh's result.
NARROW_ULPS = {np.float32: 4, np.float16: 1}


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_narrow_floats_within_their_bound(dtype):
    x = np.linspace(-7.0, 7.0, 2_000_001).astype(dtype)
    finfo = np.finfo(dtype)
    x = np.concatenate([x, np.array([finfo.smallest_subnormal, finfo.tiny, finfo.max], dtype)])
    x = np.concatenate([x, -x])
    want = _exact(x, dtype)
    got = _run(x)
    ulps = _ulps(got, want)
    assert ulps.max() <= NARROW_ULPS[dtype], (ulps.max(), x[ulps.argmax()])
    # Most results equal to the correctly rounded value or one ulp off (float32: 98.4% of the
    # grid, where a third lies beyond 3.92 and rounds to +-1; float16 results are float32 ones
    # rounded once, so nearly all are the correctly rounded value).
    assert np.mean(ulps <= 1) > 0.98
    if dtype == np.float16:
        assert np.mean(got == want) > 0.995
    assert np.all(np.diff(got[: x.size // 2][:2_000_001]) >= 0)  # monotonic on the grid


@pytest.mark.parametrize("lo, hi", [(0.0, 0.01), (0.05, 0.06), (0.4, 0.5), (3.8, 4.0)])
def test_float32_every_value_where_the_error_peaks_within_the_bound(lo, hi):
    # Every float32 in [lo, hi] (every 512th below 0.01, where there are a billion) and its
    # negative: tiny arguments (where
    # the result is mostly the rounding of x H and of tanh), erf just below 2^-4 (where x H
    # has rounded in the binade above: the 4 ulp), |x| near 0.43 (where H's fit error peaks)
    # and the clip at 3.92 (where erf and tanh reach +-1).
    first, last = np.array([lo, hi], np.float32).view(np.int32)
    x = np.arange(first, last + 1, 512 if lo == 0.0 else 1, dtype=np.int32).view(np.float32)
    assert x.size < 4_000_000
    x = np.concatenate([x, -x])
    assert _ulps(_run(x), _exact(x, np.float32)).max() <= NARROW_ULPS[np.float32]


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_an_elements_bits_do_not_depend_on_the_call(dtype):
    # One evaluation for every size: an element's result is the same in a call of one
    # element, of a few, of one chunk or of many (and in place, from a strided input).
    x = (np.random.default_rng(5).standard_normal(2 * ERF_CHUNK + 37) * 2).astype(dtype)
    whole = _run(x)
    for piece in (1, 7, 256, ERF_CHUNK - 3):
        parts = [_run(x[i : i + piece]) for i in range(0, min(x.size, 200 * piece), piece)]
        np.testing.assert_array_equal(np.concatenate(parts), whole[: 200 * piece], strict=True)
    doubled = np.repeat(x, 2)
    np.testing.assert_array_equal(_run(doubled[::2]), whole, strict=True)
    inplace = x.copy()
    erf(inplace, inplace)
    np.testing.assert_array_equal(inplace, whole, strict=True)


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_narrow_special_values_without_floating_point_errors(dtype):
    finfo = np.finfo(dtype)
    special = [0.0, -0.0, np.inf, -np.inf, finfo.smallest_subnormal, -finfo.smallest_subnormal]
    special += [finfo.tiny, finfo.max, -finfo.max, 1.0, -1.0, 3.92, -3.92, 3.93, 1e-20, 2.0]
    for n in (len(special), ERF_CHUNK + 1):  # one chunk, and several
        x = np.resize(np.array(special, dtype), n)
        # nothing overflows, divides by zero or is invalid (tiny |x| underflow in x^2: IEEE's
        # gradual underflow, ignored under numpy's default errstate)
        with np.errstate(over="raise", divide="raise", invalid="raise"):
            got = _run(x)
        assert _ulps(got, _exact(x, dtype)).max() <= NARROW_ULPS[dtype]
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
        assert _ulps(out, want).max() <= NARROW_ULPS.get(dtype, 5)
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
        assert (
            _ulps(out, _exact(np.ascontiguousarray(view), np.float32)).max()
            <= NARROW_ULPS[np.float32]
        )
    # The input is untouched, and a broadcast (zero-stride) view works too.
    before = base.copy()
    erf(base[::2], np.empty((32, 50), np.float32))
    assert np.array_equal(base, before)
    row = np.broadcast_to(np.float32(0.25), (4, 3))
    out = np.empty((4, 3), np.float32)
    erf(row, out)
    assert _ulps(out, np.full((4, 3), math.erf(0.25), np.float32)).max() <= NARROW_ULPS[np.float32]


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.float16])
def test_non_contiguous_outputs_get_the_contiguous_result(dtype):
    x = (np.random.default_rng(6).standard_normal((40, 30)) * 2).astype(dtype)
    want = _run(x)
    for n in (1, 40):  # one chunk and more (a chunk is far larger than 30 elements)
        base = np.full((2 * n, 30), np.nan, dtype)
        erf(x[:n], base[::2])  # every other row: a strided output
        np.testing.assert_array_equal(base[::2], want[:n], strict=True)
        assert np.isnan(base[1::2]).all()  # the rows between are untouched
        big = np.full((2, 3 * ERF_CHUNK), np.nan, dtype)
        wide = (np.random.default_rng(n).standard_normal(3 * ERF_CHUNK) * 2).astype(dtype)
        erf(wide, big.T[:, 0])
        np.testing.assert_array_equal(big[0], _run(wide), strict=True)
        assert np.isnan(big[1]).all()


def test_wrong_output_shape_is_refused():
    with pytest.raises(ValueError, match=r"erf: input shape \(2, 3\)"):
        erf(np.zeros((2, 3)), np.empty((3, 2)))


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_narrow_floats_are_tanh_of_x_r_in_float32_steps(dtype):
    # The arithmetic pinned: |x| clipped, P and Q by Horner in float32 (one multiply and one
    # add a degree; Q is monic, so its first step is an add), their quotient, times x, float32
    # tanh, rounded once into the output's dtype; for any layout.
    p = [np.float32(c) for c in erf_module._ERF32_P]
    q = [np.float32(c) for c in erf_module._ERF32_Q]
    clip = np.float32(erf_module._ERF32_CLIP)
    assert q[0] == 1.0

    def reference(v):
        a = np.clip(v.astype(np.float32), -clip, clip)
        y = a * a
        num = y * p[0] + p[1]
        for c in p[2:]:
            num = num * y + c
        den = y + q[1]
        for c in q[2:]:
            den = den * y + c
        return np.tanh(num / den * a).astype(dtype)

    rng = np.random.default_rng(3)
    for n in (1, 2, 255, 1000, ERF_CHUNK + 5):
        x = (rng.standard_normal((2, n)) * 3).astype(dtype)
        x[0, 0] = np.nan
        for v in (x[0], x[:, ::2], x[::-1], x.reshape(-1)[: n // 2 + 1], x.reshape(-1)):
            assert np.array_equal(_run(v), reference(v), equal_nan=True)


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
    assert all(c.shape == () for c in erf_module._ERF_R1[0])  # 0-d operands, the same values
    assert np.array_equal(got, want, equal_nan=True)
