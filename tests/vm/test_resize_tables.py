"""``resize`` computes each axis's index and weight tables once per shape (issue 27): a bounded
LRU cache of read-only arrays, giving the same results as computing them per call."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import vm.kernels.image as image
from vm.kernels import get_kernel_factory


def attrs(mode: str, sizes: tuple[int, ...]) -> dict[str, object]:
    return {
        "sizes": sizes,
        "scales": None,
        "mode": mode,
        "coordinate_transformation_mode": "half_pixel",
        "nearest_mode": "round_prefer_floor",
        "cubic_coeff_a": -0.75,
        "exclude_outside": 0,
    }


@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
def test_tables_are_computed_once_per_shape_and_reused(mode):
    image._cached_axis_table.cache_clear()
    image.axis_matrix.cache_clear()
    # nearest takes by the tables; linear and cubic on short axes multiply by the matrices
    cache = image._cached_axis_table if mode == "nearest" else image.axis_matrix
    x = np.random.default_rng(0).standard_normal((1, 2, 5, 7)).astype(np.float32)
    kernel = get_kernel_factory("resize")(attrs(mode, (1, 2, 9, 3)))
    first = np.empty((1, 2, 9, 3), np.float32)
    kernel(x, first)
    assert cache.cache_info().misses == 2  # H and W
    assert image._cached_axis_table.cache_info().misses == 2  # the matrices' from the tables
    again = np.empty((1, 2, 9, 3), np.float32)
    kernel(x, again)
    info = cache.cache_info()
    assert (info.misses, info.hits) == (2, 2)
    np.testing.assert_array_equal(first, again)
    uncached = image._axis_table(
        mode, "half_pixel", "round_prefer_floor", -0.75, False, 5, 9, 9 / 5
    )
    cached = image.axis_table(mode, "half_pixel", "round_prefer_floor", -0.75, False, 5, 9, 9 / 5)
    for a, b in zip(uncached, cached, strict=True):
        if a is None:
            assert b is None
        else:
            np.testing.assert_array_equal(a, b)
            assert not b.flags.writeable  # shared between calls: nobody may change it


def test_long_axes_are_not_cached():
    image._cached_axis_table.cache_clear()
    n = image.CACHED_AXIS_MAX + 1
    x = np.arange(4.0).reshape(1, 4)
    out = np.empty((1, n))
    get_kernel_factory("resize")(attrs("nearest", (1, n)))(x, out)
    assert image._cached_axis_table.cache_info().currsize == 0
    np.testing.assert_array_equal(np.unique(out), x[0])


def _resized(x: np.ndarray, mode: str, shape: tuple[int, ...], **more: object) -> np.ndarray:
    out = np.empty(shape, x.dtype)
    get_kernel_factory("resize")({**attrs(mode, shape), **more})(x, out)
    return out


def _by_taps(x: np.ndarray, mode: str, shape: tuple[int, ...], **more: object) -> np.ndarray:
    """The same resize with every axis blended tap by tap in float64 (no matrix products)."""
    with pytest.MonkeyPatch.context() as m:
        m.setattr(image, "DENSE_AXIS_MAX", 0)
        return _resized(x, mode, shape, **more)


@given(
    data=st.data(),
    mode=st.sampled_from(["linear", "cubic"]),
    coord=st.sampled_from(["half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric"]),
    exclude=st.booleans(),
    dtype=st.sampled_from([np.float64, np.float32, np.float16]),
)
@settings(max_examples=60, deadline=None)
def test_matrix_products_agree_with_the_taps(data, mode, coord, exclude, dtype):
    # short axes of float32 and float16 data are blended by float32 products with their
    # interpolation matrices, within float32 rounding of the taps' float64 blend; float64 data
    # keeps the taps (the same values)
    n, c, h, w = (data.draw(st.integers(1, 3)) for _ in range(4))
    oh, ow = data.draw(st.integers(1, 9)), data.draw(st.integers(1, 9))
    x = np.random.default_rng(data.draw(st.integers(0, 99))).standard_normal((n, c, h, w))
    x = x.astype(dtype)
    more = {"coordinate_transformation_mode": coord, "exclude_outside": int(exclude)}
    got = _resized(x, mode, (n, c, oh, ow), **more)
    want = _by_taps(x, mode, (n, c, oh, ow), **more)
    if dtype == np.float64:
        np.testing.assert_array_equal(got, want)
    else:
        tol = 1e-5 if dtype == np.float32 else 2e-3
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


def test_matrices_are_taken_on_short_axes_only(monkeypatch):
    image.axis_matrix.cache_clear()
    x = np.random.default_rng(1).standard_normal((1, 1, 8, 70)).astype(np.float32)
    out = _resized(x, "linear", (1, 1, 16, 140))
    # H (8 in) by its matrix; W (70 in, past DENSE_AXIS_MAX) by taps
    info = image.axis_matrix.cache_info()
    assert (info.misses, info.currsize) == (1, 1)
    np.testing.assert_allclose(out, _by_taps(x, "linear", (1, 1, 16, 140)), rtol=1e-5, atol=1e-5)
    matrix = image.axis_matrix(
        "linear", "half_pixel", "round_prefer_floor", -0.75, False, 8, 16, 2.0
    )
    assert matrix.shape == (16, 8) and matrix.dtype == np.float32
    assert not matrix.flags.writeable
    np.testing.assert_allclose(matrix.sum(axis=1), 1.0, rtol=1e-6)  # each row's weights


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_inputs_keep_the_taps(bad):
    # a product would spread a NaN or an infinity over its whole row (0 * inf is NaN): such an
    # input is blended by taps, so only the outputs that read it see it
    x = np.random.default_rng(2).standard_normal((1, 1, 6, 6)).astype(np.float32)
    x[0, 0, 0, 0] = bad
    got = _resized(x, "linear", (1, 1, 12, 12))
    want = _by_taps(x, "linear", (1, 1, 12, 12))
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    assert np.isfinite(got[0, 0, 6:, 6:]).all()  # far from the bad element
    finite = np.isfinite(want)
    np.testing.assert_allclose(got[finite], want[finite], rtol=1e-6)


@pytest.mark.parametrize("dtype", [np.uint8, np.int32, np.float64])
def test_integers_and_float64_keep_the_taps(dtype):
    # their results are the reference's float64 blend (truncated for integers, where a last
    # bit of difference could move the truncation): no products
    image.axis_matrix.cache_clear()
    x = np.random.default_rng(3).integers(0, 256, (1, 3, 5, 5)).astype(dtype)
    got = _resized(x, "linear", (1, 3, 10, 10))
    np.testing.assert_array_equal(got, _by_taps(x, "linear", (1, 3, 10, 10)))
    assert image.axis_matrix.cache_info().misses == 0


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_matrix_products_along_every_axis(dtype):
    # the leading axes too (moved to be the rows of the product, written back in place)
    x = np.random.default_rng(5).standard_normal((3, 4, 5)).astype(dtype)
    for shape in [(6, 4, 5), (3, 7, 5), (3, 4, 2), (5, 2, 9)]:
        got = _resized(x, "linear", shape)
        want = _by_taps(x, "linear", shape)
        tol = 1e-6 if dtype == np.float32 else 2e-3
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol)
