"""Work shared with the worker thread (``vm/worker_thread.py``): every item done once, the same
results as one thread computes, errors and numpy's error state carried over, and no deadlock
when the worker itself (or several threads at once) asks for help."""

from __future__ import annotations

import itertools
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pytest

from vm import adaptive_choice, worker_thread
from vm.adaptive_choice import AdaptivePolicy
from vm.kernels import elementwise
from vm.kernels import erf as erf_module
from vm.kernels.registry import get_kernel_factory
from vm.worker_thread import shared

RNG = np.random.default_rng(20261203)


@pytest.fixture(autouse=True)
def fresh_help(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test starts with nothing measured: the worker helps on a bucket's first call."""
    monkeypatch.setattr(worker_thread, "_help", AdaptivePolicy())


def _items_done(count: int) -> tuple[list[int], set[str]]:
    items = iter(range(count))
    done: list[int] = []
    threads: set[str] = set()
    lock = threading.Lock()

    def work() -> None:
        for i in items:
            with lock:
                done.append(i)
                threads.add(threading.current_thread().name)

    shared(work, "items", count)
    return done, threads


def test_every_item_is_done_once() -> None:
    done, _ = _items_done(10_000)
    assert sorted(done) == list(range(10_000))


def test_one_core_runs_everything_on_the_calling_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(worker_thread, "CORES", 1)
    done, threads = _items_done(1_000)
    assert sorted(done) == list(range(1_000))
    assert threads == {threading.current_thread().name}


def test_cores_are_the_ones_the_process_may_run_on(monkeypatch: pytest.MonkeyPatch) -> None:
    # A process pinned to one core of many (taskset, a container's cpuset) shares no work.
    monkeypatch.setattr(worker_thread.os, "sched_getaffinity", lambda pid: {3}, raising=False)
    monkeypatch.setattr(worker_thread.os, "cpu_count", lambda: 64)
    assert worker_thread._usable_cores() == 1
    monkeypatch.delattr(worker_thread.os, "sched_getaffinity", raising=False)
    assert worker_thread._usable_cores() == 64


def test_an_error_of_either_thread_is_raised() -> None:
    items = iter(range(100))

    def work() -> None:
        for i in items:
            if i == 50:
                raise ArithmeticError("item 50")

    with pytest.raises(ArithmeticError, match="item 50"):
        shared(work, "failing", 100)


def test_help_asked_from_the_worker_itself_does_not_deadlock() -> None:
    """A kernel running on the worker thread (a blocked kernel's step) shares its own work:
    the queued help cannot start until it returns, so it is cancelled, not waited for."""
    results: list[list[int]] = []

    def outer() -> None:
        results.append(sorted(_items_done(500)[0]))

    worker_thread._worker_pool().submit(outer).result(timeout=60)
    assert results == [list(range(500))]


def test_the_callers_floating_point_error_state_reaches_the_worker() -> None:
    items = iter(range(300))
    seen: list[tuple[str, str]] = []

    def work() -> None:
        for _ in items:
            time.sleep(0.001)  # slow items: the worker surely takes some
            seen.append((threading.current_thread().name, np.geterr()["over"]))

    with np.errstate(over="raise"):
        shared(work, "errstate", 300)
    assert len(seen) == 300
    assert {state for _, state in seen} == {"raise"}
    assert len({name for name, _ in seen}) == 2  # both threads took items


def test_an_overflow_raises_under_the_callers_errstate() -> None:
    exp = get_kernel_factory("exp")({})
    x = np.zeros(8 * elementwise.SHARED_CHUNK, np.float32)
    x[-1] = 100.0  # only the last chunk overflows, whichever thread takes it
    out = np.empty_like(x)
    with np.errstate(over="raise"), pytest.raises(FloatingPointError, match="overflow"):
        exp(x, out)
    with np.errstate(over="ignore"):
        exp(x, out)
    assert np.isinf(out[-1]) and not np.isinf(out[:-1]).any()


@pytest.mark.parametrize("name", sorted(elementwise.TRANSCENDENTAL))
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_shared_transcendentals_equal_numpy_bit_for_bit(name: str, dtype: type) -> None:
    kernel = get_kernel_factory(name)({})
    ufunc = elementwise.TRANSCENDENTAL[name]
    n = elementwise.SHARED_MIN * 2 + 12_345  # a last, shorter chunk
    x = RNG.uniform(0.05, 0.95, (n // 5, 5)).astype(dtype)  # in every function's domain
    if name == "acosh":
        x += 1
    out = np.empty_like(x)
    with np.errstate(all="ignore"):
        kernel(x, out)
        np.testing.assert_array_equal(out, ufunc(x))
        inplace = x.copy()
        kernel(inplace, inplace)
        np.testing.assert_array_equal(inplace, ufunc(x))
        strided = np.empty((n // 5, 10), dtype)[:, ::2]  # not contiguous: numpy's own call
        kernel(x, strided)
        np.testing.assert_array_equal(strided, ufunc(x))
        row = np.empty((3, *x.shape), dtype)  # broadcast input
        kernel(x[0], row[:, 0])
        np.testing.assert_array_equal(row[:, 0], np.broadcast_to(ufunc(x[0]), row[:, 0].shape))


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_shared_erf_equals_erf_on_one_thread(dtype: type, monkeypatch: pytest.MonkeyPatch) -> None:
    erf = get_kernel_factory("erf")({})
    x = RNG.normal(0, 2, 5 * erf_module.ERF_CHUNK + 77).astype(dtype)
    x[::1001] = np.nan
    shared_out = np.empty_like(x)
    erf(x, shared_out)
    monkeypatch.setattr(erf_module, "ERF_THREAD_MIN", 1 << 62)
    alone = np.empty_like(x)
    erf(x, alone)
    np.testing.assert_array_equal(shared_out, alone)


def test_threads_sharing_at_once_each_get_their_answer() -> None:
    tanh = get_kernel_factory("tanh")({})
    inputs = [RNG.normal(size=3 * elementwise.SHARED_MIN).astype(np.float32) for _ in range(8)]

    def one(x: np.ndarray) -> bool:
        out = np.empty_like(x)
        for _ in range(5):
            tanh(x, out)
        return bool(np.array_equal(out, np.tanh(x)))

    with ThreadPoolExecutor(4) as pool:
        assert all(pool.map(one, inputs, timeout=120))


def _without_sharing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(elementwise, "SHARED_MIN", 1 << 62)


def test_softmax_sigmoid_and_attention_are_the_same_shared_or_not(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Their exp and tanh go through the shared kernels on large tensors: bit for bit what one
    thread computes (and the attention within float rounding of numpy's formula)."""
    softmax = get_kernel_factory("nn.softmax")({"axis": -1})
    sigmoid = get_kernel_factory("sigmoid")({})
    attention = get_kernel_factory("nn.attention")(
        {"scale": 0.125, "q_axes": None, "k_axes": None, "v_axes": None, "out_axes": None}
    )
    x = RNG.normal(size=(4, 96, 256)).astype(np.float32)
    q, k, v = (RNG.normal(size=(2, 4, 128, 16)).astype(np.float32) for _ in range(3))
    mask = np.where(RNG.random((2, 1, 128, 128)) < 0.2, -np.inf, 0).astype(np.float32)
    mask[..., 0] = 0  # no row fully masked

    def outputs() -> list[np.ndarray]:
        results = [np.empty_like(x), np.empty_like(x), np.empty_like(q)]
        softmax(x, results[0])
        sigmoid(x, results[1])
        attention(q, k, v, mask, results[2])
        return results

    shared_results = outputs()
    _without_sharing(monkeypatch)
    for got, alone in zip(shared_results, outputs(), strict=True):
        np.testing.assert_array_equal(got, alone)
    scores = q @ k.swapaxes(-1, -2) * np.float32(0.125) + mask
    p = np.exp(scores - scores.max(-1, keepdims=True))
    want = p / p.sum(-1, keepdims=True) @ v
    np.testing.assert_allclose(shared_results[2], want, rtol=1e-5, atol=1e-6)


class _NoHelper:
    """A worker pool that records the help asked for and gives none (cancellable futures)."""

    def __init__(self) -> None:
        self.asked = 0

    def submit(self, *args: object) -> Any:
        from concurrent.futures import Future

        self.asked += 1
        return Future()  # never started: cancel() succeeds


def test_help_that_measures_slower_is_given_up_and_probed_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The choice follows the measurements (a fake clock): help that costs more than working
    alone is asked for rarely (probes at doubling pauses), and again at once when it pays."""
    now = [0.0]
    monkeypatch.setattr(worker_thread, "_help", AdaptivePolicy(clock=lambda: now[0]))
    pool = _NoHelper()
    monkeypatch.setattr(worker_thread, "_worker_pool", lambda: pool)
    ready = threading.Event()
    ready.set()  # the fake pool has no thread to prepare
    monkeypatch.setattr(worker_thread, "_ready", ready)
    cost = {"helped": 2.0, "alone": 1.0}

    def call() -> bool:
        before = pool.asked

        def work() -> None:
            now[0] += cost["helped" if pool.asked > before else "alone"]

        shared(work, "probe", 1000)
        return pool.asked > before

    burst = adaptive_choice.BURST
    helped = [call() for _ in range(60)]
    # help is learnt first, then working alone, a burst of calls each
    assert helped[: 2 * burst] == [True] * burst + [False] * burst
    starts = [i for i in range(2 * burst, 60) if helped[i] and not helped[i - 1]]
    assert all(helped[i : i + burst] == [True] * burst for i in starts)  # probes: bursts
    gaps = [b - a for a, b in itertools.pairwise(starts)]
    assert len(starts) >= 3 and gaps == sorted(gaps) and gaps[-1] > gaps[0]  # ever rarer
    cost["helped"] = 0.5  # the other core is free again
    now[0] += 20.0  # past the longest pause: the next call probes, measuring help afresh
    helped = [call() for _ in range(40)]
    # one winning burst is enough (its old, slow calls are forgotten): help is the choice,
    # and working alone is now the mode probed, in bursts ever rarer
    assert helped[: burst + 1] == [True] * (burst + 1)
    alone = [i for i in range(1, 40) if not helped[i] and helped[i - 1]]
    assert all(helped[i : i + burst] == [False] * burst for i in alone[:-1])
    gaps = [b - a for a, b in itertools.pairwise(alone)]
    assert len(alone) >= 3 and gaps == sorted(gaps) and gaps[-1] > gaps[0]


def test_the_worker_prepares_before_any_work_and_nothing_waits_for_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Start hooks run on the worker thread before its first job; while they run, ``shared``
    works alone and measures nothing (a slow preparation must not teach it that help is
    slow), and a failing hook does not stop the worker."""
    monkeypatch.setattr(worker_thread, "_pool", None)
    monkeypatch.setattr(worker_thread, "_ready", threading.Event())
    monkeypatch.setattr(worker_thread, "_worker_tid", None)  # this test's worker is its own
    release = threading.Event()
    events: list[tuple[str, str]] = []

    def slow_hook() -> None:
        events.append(("hook", threading.current_thread().name))
        assert release.wait(60)

    def failing_hook() -> None:
        raise RuntimeError("a preparation that fails")

    monkeypatch.setattr(worker_thread, "_start_hooks", [failing_hook, slow_hook])
    policy = AdaptivePolicy()
    monkeypatch.setattr(worker_thread, "_help", policy)
    done, threads = _items_done(1_000)  # the worker is preparing: all on this thread
    assert sorted(done) == list(range(1_000)) and threads == {threading.current_thread().name}
    assert policy._buckets == {}  # nothing measured
    release.set()
    assert worker_thread._ready.wait(60)
    assert events == [("hook", events[0][1])] and events[0][1].startswith("dynshape-worker")
    names = worker_thread._worker_pool().submit(lambda: threading.current_thread().name)
    assert names.result(timeout=60) == events[0][1]  # the same thread then takes the work
    _items_done(100)
    assert list(policy._buckets) == [("items", 7)]  # ready: calls are measured again
    worker_thread._worker_pool().shutdown(wait=True)


def _helped_once() -> None:
    """One ``shared`` call in which the worker is asked to help (a bucket's first call)."""
    done, _ = _items_done(1_000)
    assert sorted(done) == list(range(1_000))


@pytest.mark.skipif(
    worker_thread._current_cpu is None or len(worker_thread._ALLOWED) < 2,
    reason="needs sched_getcpu and two usable CPUs",
)
def test_the_worker_is_kept_off_the_callers_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """Woken on the caller's CPU, the worker would preempt the caller there and the two halves
    of the work would run one after the other: before it is asked to help, its affinity
    excludes the CPU the caller runs on, and is set again only when that CPU changes."""
    assert worker_thread._ready.wait(60)
    calls: list[set[int]] = []
    real = worker_thread.os.sched_setaffinity

    def recording(tid: int, cpus: set[int]) -> None:
        calls.append(set(cpus))
        real(tid, cpus)

    monkeypatch.setattr(worker_thread.os, "sched_setaffinity", recording)
    monkeypatch.setattr(worker_thread, "_kept_off", None)
    _helped_once()
    kept_off = worker_thread._kept_off
    assert kept_off in worker_thread._ALLOWED
    assert calls == [set(worker_thread._ALLOWED) - {kept_off}]
    tid = worker_thread._worker_tid
    assert tid is not None and kept_off not in os.sched_getaffinity(tid)
    monkeypatch.setattr(worker_thread, "_current_cpu", lambda: kept_off)
    monkeypatch.setattr(worker_thread, "_help", AdaptivePolicy())
    _helped_once()
    assert len(calls) == 1  # the same CPU: nothing to set again
    other = min(worker_thread._ALLOWED - {kept_off})
    monkeypatch.setattr(worker_thread, "_current_cpu", lambda: other)
    monkeypatch.setattr(worker_thread, "_help", AdaptivePolicy())
    _helped_once()
    assert calls[-1] == set(worker_thread._ALLOWED) - {other} and len(calls) == 2


def test_a_refused_affinity_leaves_the_worker_as_it_is(monkeypatch: pytest.MonkeyPatch) -> None:
    """A mask the OS refuses (the process's CPUs changed under it) or no way to read the CPU:
    the work is shared as before."""

    def refused(tid: int, cpus: set[int]) -> None:
        raise OSError(22, "Invalid argument")

    monkeypatch.setattr(worker_thread.os, "sched_setaffinity", refused)
    monkeypatch.setattr(worker_thread, "_kept_off", None)
    _helped_once()
    monkeypatch.setattr(worker_thread, "_current_cpu", None)
    monkeypatch.setattr(worker_thread, "_help", AdaptivePolicy())
    _helped_once()
