"""BLAS threads by matmul size (vm/kernels/blas_threads.py): same results, setting restored."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from vm.kernels import blas_threads as bt
from vm.kernels.registry import get_kernel_factory


@pytest.fixture(autouse=True)
def switching_on(monkeypatch: pytest.MonkeyPatch) -> None:
    """The switch is off by default (HIGH = 0); these tests turn it on, as
    DYNSHAPE_BLAS_SINGLE_THREAD_BELOW=1073741824 does, and look for OpenBLAS again."""
    monkeypatch.setattr(bt, "HIGH", 1 << 30)
    monkeypatch.setattr(bt, "_looked", False)
    monkeypatch.setattr(bt, "_switch", None)


def test_by_default_no_matmul_is_switched(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bt, "HIGH", 0)
    assert not bt.wants_one_thread(*_operands(8, 512, 512))
    assert bt.switch() is None


# Shapes below LOW, inside (LOW, HIGH), batched, vector-shaped, and 0-size.
SHAPES = [(8, 64, 64), (8, 512, 512), (67, 129, 65), (1, 512, 600), (0, 64, 64), (5, 0, 7)]


def _operands(m: int, k: int, n: int, dtype: type = np.float32) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(m * 1000 + k * 10 + n)
    return rng.standard_normal((m, k)).astype(dtype), rng.standard_normal((k, n)).astype(dtype)


@pytest.mark.parametrize("shape", SHAPES)
def test_switched_matmul_equals_numpy(shape: tuple[int, int, int]) -> None:
    a, b = _operands(*shape)
    out = np.full((shape[0], shape[2]), np.nan, np.float32)
    bt.matmul(a, b, out)
    np.testing.assert_allclose(out, a @ b, rtol=1e-4, atol=3e-4)


def test_the_work_bounds_decide_the_switch() -> None:
    small, mid = _operands(8, 64, 64), _operands(8, 512, 512)
    assert not bt.wants_one_thread(*small)  # 32,768 <= LOW: OpenBLAS is single-threaded there
    assert bt.wants_one_thread(*mid) == (bt.LOW < 8 * 512 * 512 < bt.HIGH)
    ints = (np.ones((64, 512), np.int64), np.ones((512, 512), np.int64))
    assert not bt.wants_one_thread(*ints)  # numpy's integer matmul is not BLAS


def test_dense_and_batch_matmul_kernels_equal_numpy() -> None:
    a, w = _operands(33, 512, 300)
    out = np.empty((33, 300), np.float32)
    get_kernel_factory("nn.dense")({})(a, w.T.copy(), out)
    np.testing.assert_allclose(out, a @ w, rtol=1e-4, atol=3e-4)
    x = np.stack([a, a[::-1]])
    y = np.stack([w, w * 2])
    bout = np.empty((2, 33, 300), np.float32)
    kernel = get_kernel_factory("nn.batch_matmul")({"transpose_a": False, "transpose_b": False})
    kernel(x, y, bout)
    np.testing.assert_allclose(bout, x @ y, rtol=1e-4, atol=3e-4)


def test_the_thread_count_is_restored() -> None:
    sw = bt.switch()
    if sw is None:
        pytest.skip("no switchable OpenBLAS (threadpoolctl missing, or another BLAS)")
    before = int(sw._get())
    a, b = _operands(8, 512, 512)
    bt.matmul(a, b, np.empty((8, 512), np.float32))
    assert int(sw._get()) == before


def test_without_a_switch_results_are_the_same(monkeypatch: pytest.MonkeyPatch) -> None:
    a, b = _operands(8, 512, 512)
    with_switch = np.empty((8, 512), np.float32)
    bt.matmul(a, b, with_switch)
    monkeypatch.setattr(bt, "switch", lambda: None)  # as without threadpoolctl
    without = np.empty((8, 512), np.float32)
    bt.matmul(a, b, without)
    # Not bit for bit: OpenBLAS splits the work differently with 2 threads (measured).
    np.testing.assert_allclose(with_switch, without, rtol=1e-4, atol=3e-4)


def test_threads_sharing_the_switch_get_their_own_answers() -> None:
    sw = bt.switch()
    before = None if sw is None else int(sw._get())
    shapes = [(8, 512, 512), (300, 64, 400), (8, 64, 64), (70, 700, 70)]
    expected = [a @ b for a, b in (_operands(*s) for s in shapes)]
    failures: list[str] = []

    def work(i: int) -> None:
        s = shapes[i % len(shapes)]
        a, b = _operands(*s)
        out = np.empty((s[0], s[2]), np.float32)
        for _ in range(20):
            bt.matmul(a, b, out)
            if not np.allclose(out, expected[i % len(shapes)], rtol=1e-4, atol=3e-4):
                failures.append(f"thread {i}: shape {s}")

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures
    if sw is not None:
        assert int(sw._get()) == before
