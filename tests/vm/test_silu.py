"""The ``silu`` kernel (``vm/kernels/silu.py``) against float64 numpy on drawn shapes and
values: its error bound, in place and into views, the chunk boundaries, the worker thread's
share (same bits), and a clear error on mismatched operands."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from vm_testlib import KERNEL_SETTINGS, run_in_threads

import vm.kernels.silu as silu_module
from vm.kernels.registry import get_kernel_factory

silu = get_kernel_factory("silu")({})

#: Relative bound where the value is not small, and absolute bound as a multiple of |x| (the
#: cancellation of h + h tanh(h) where tanh(h) nears -1; module doc of the kernel).
BOUND = {
    np.float16: (2.0**-11 + 2.0**-22, 2.0**-11),
    np.float32: (3 * 2.0**-23, 2.0**-23),
    np.float64: (4 * 2.0**-52, 2.0**-52),
}


def _within_bound(got: np.ndarray, x: np.ndarray) -> None:
    wide = x.astype(np.float64)
    want = wide / (1 + np.exp(-wide))
    rel, absolute = BOUND[x.dtype.type]
    err = np.abs(got.astype(np.float64) - want)
    bad = err > rel * np.abs(want) + absolute * np.maximum(np.abs(wide), 1)
    assert not bad.any(), (x[bad][:5], got[bad][:5], want[bad][:5])


@pytest.mark.parametrize("dtype", sorted(BOUND, key=lambda t: np.dtype(t).itemsize))
@KERNEL_SETTINGS
@given(data=st.data())
def test_silu_is_x_times_its_sigmoid_within_the_bound(dtype, data):
    shape = data.draw(hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=12))
    width = {np.float16: 16, np.float32: 32, np.float64: 64}[dtype]
    x = data.draw(hnp.arrays(dtype, shape, elements=st.floats(-80, 80, width=width)))
    out = np.full(shape, np.nan, dtype)
    silu(x, out)
    _within_bound(out, x)
    silu(x, x)  # in place: the same values
    np.testing.assert_array_equal(x, out)


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_the_chunks_boundaries_and_the_whole_tensor(dtype):
    # sizes around one and two chunks; every element's value does not depend on its chunk
    n = silu_module.SILU_CHUNK
    rng = np.random.default_rng(5)
    for size in (n - 1, n, n + 1, 2 * n + 3, 5 * n):
        x = (rng.standard_normal(size) * 6).astype(dtype)
        out = np.empty_like(x)
        silu(x, out)
        _within_bound(out, x)
        one_by_one = np.empty_like(x)
        for i in range(0, size, 1000):  # small calls: one chunk each
            silu(x[i : i + 1000], one_by_one[i : i + 1000])
        np.testing.assert_array_equal(out, one_by_one)


def test_non_contiguous_operands():
    rng = np.random.default_rng(6)
    x = (rng.standard_normal((40, 30)) * 4).astype(np.float32)
    want = np.empty_like(x)
    silu(x, want)
    view = np.empty((40, 60), np.float32)[:, ::2]  # a strided output gets the same values
    silu(x.T.copy().T, view)
    np.testing.assert_array_equal(view, want)
    out = np.empty((30, 40), np.float32)
    silu(x.T, out)  # a transposed input
    np.testing.assert_array_equal(out, want.T)


def test_special_values():
    x = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-30, -1e-30, 100, -100], np.float32)
    out = np.empty_like(x)
    with np.errstate(invalid="ignore"):
        silu(x, out)
    assert out[0] == 0 and out[2] == np.inf and np.isnan(out[4])
    # -inf * sigmoid(-inf) is -inf * 0: NaN, as the product the op stands for
    assert np.isnan(out[3])
    assert out[5] == np.float32(5e-31) and out[6] == np.float32(-5e-31)  # x / 2 near 0
    assert out[7] == 100 and abs(out[8]) < 1e-5


def test_threads_and_the_worker_get_the_bits_of_one_thread(monkeypatch):
    # large enough to be shared with the worker thread; four threads calling at once
    rng = np.random.default_rng(9)
    x = (rng.standard_normal(6 * silu_module.SILU_CHUNK + 17) * 5).astype(np.float32)
    monkeypatch.setattr(silu_module, "SILU_THREAD_MIN", 1 << 62)  # one thread: the reference
    want = np.empty_like(x)
    silu(x, want)
    monkeypatch.setattr(silu_module, "SILU_THREAD_MIN", 1)
    start = threading.Barrier(4)
    failures: list[int] = []

    def work(index: int) -> None:
        start.wait()
        for _ in range(5):
            out = np.empty_like(x)
            silu(x, out)
            if not np.array_equal(out, want):
                failures.append(index)

    run_in_threads(work, 4)
    assert failures == []


def test_mismatched_operands_are_refused_with_both_named():
    with pytest.raises(ValueError, match=r"silu: input float32\[3\] but output float32\[4\]"):
        silu(np.ones(3, np.float32), np.empty(4, np.float32))
    with pytest.raises(ValueError, match=r"input float32\[3\] but output float64\[3\]"):
        silu(np.ones(3, np.float32), np.empty(3, np.float64))
