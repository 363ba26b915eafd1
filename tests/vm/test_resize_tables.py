"""``resize`` computes each axis's index and weight tables once per shape (issue 27): a bounded
LRU cache of read-only arrays, giving the same results as computing them per call."""

from __future__ import annotations

import numpy as np
import pytest

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
    x = np.random.default_rng(0).standard_normal((1, 2, 5, 7))
    kernel = get_kernel_factory("resize")(attrs(mode, (1, 2, 9, 3)))
    first = np.empty((1, 2, 9, 3))
    kernel(x, first)
    misses = image._cached_axis_table.cache_info().misses
    assert misses == 2  # H and W
    again = np.empty((1, 2, 9, 3))
    kernel(x, again)
    info = image._cached_axis_table.cache_info()
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
