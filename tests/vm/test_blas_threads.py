"""BLAS threads chosen per matmul (vm/kernels/blas_threads.py): the adaptive policy's choices
on a driven clock, the same results under every policy, the process's setting restored."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from vm_testlib import run_in_threads

from vm import adaptive_choice
from vm.kernels import blas_threads as bt
from vm.kernels.registry import get_kernel_factory


@pytest.fixture(autouse=True)
def fresh_policy(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test starts from the default policy with nothing measured, and looks for OpenBLAS
    again."""
    monkeypatch.setattr(bt, "_policy", "one")
    monkeypatch.setattr(bt, "_adaptive", bt.AdaptivePolicy())
    monkeypatch.setattr(bt, "_looked", False)
    monkeypatch.setattr(bt, "_switch", None)


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
        pytest.skip("no switchable OpenBLAS (another BLAS, or its OpenMP layer)")
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

    run_in_threads(work, 8)
    assert not failures
    if sw is not None:
        assert int(sw._get()) == before


class _Machine:
    """A driven clock and a fake matmul: one thread costs ``one`` seconds per unit of work, the
    process's setting ``process``; ``run`` advances the clock by what the policy chose."""

    def __init__(self, one: float, process: float) -> None:
        self.now = 0.0
        self.one, self.process = one, process
        self.policy = bt.AdaptivePolicy(clock=lambda: self.now)

    def run(self, bucket: int = 20, work: int = 1 << 20) -> bool:
        one = self.policy.one_thread(bucket, self.now)
        self.now += (self.one if one else self.process) * work
        self.policy.record(bucket, one, self.one if one else self.process, self.now)
        return one


def test_quiet_machine_keeps_the_process_setting_and_probes_rarely() -> None:
    m = _Machine(one=1e-9, process=0.6e-9)  # two threads 0.6x of one: the quiet machine
    choices = [m.run() for _ in range(2000)]
    burst = adaptive_choice.BURST
    assert choices[: 2 * burst] == [False] * burst + [True] * burst  # each mode, a burst
    probes = sum(choices[2 * burst :])
    # Each probe (a burst) that loses doubles the pause (0.25 s up to 16 s); 2,000 calls of
    # ~0.6 ms last ~1.3 s of the driven clock: a handful of bursts, not one per call.
    assert burst <= probes <= 3 * burst and probes % burst == 0, probes


def test_busy_machine_runs_on_one_thread() -> None:
    m = _Machine(one=1e-9, process=200e-9)  # two threads collapsed: the busy machine
    choices = [m.run() for _ in range(3000)]
    collapsed = choices.count(False)
    assert choices[-1] is True
    # The first burst learns the process's setting; then only probes, paused ever longer: over
    # ~3 s of driven time (3,000 calls of ~1 ms) 0.25 + 0.5 + 1 + ... gives at most a few.
    assert collapsed <= 4 * adaptive_choice.BURST, collapsed


def test_the_choice_follows_the_load_both_ways() -> None:
    m = _Machine(one=1e-9, process=0.6e-9)
    for _ in range(500):
        m.run()
    m.process = 200e-9  # another process starts using the cores
    for _ in range(500):
        m.run()
    assert [m.run() for _ in range(20)].count(True) >= 19
    m.process = 0.6e-9  # and stops
    for _ in range(20000):  # ~20 s of driven time: the probes find two threads pay again
        m.run()
    assert [m.run() for _ in range(20)].count(False) >= 19


def test_one_slow_call_does_not_turn_the_choice() -> None:
    m = _Machine(one=1e-9, process=200e-9)
    for _ in range(100):
        m.run()
    m.one = 400e-9  # one call of one thread loses its core for a while
    m.run()
    m.one = 1e-9
    assert m.policy.estimates()[20][0] == 1e-9  # the median of the last 5 ignores it
    # The slow call itself lasted 0.4 s of driven time, so a probe came due: one burst at most.
    assert [m.run() for _ in range(50)].count(False) <= adaptive_choice.BURST


def test_a_cold_start_does_not_settle_the_choice() -> None:
    """The first calls of a bucket are slow whichever mode runs them (the worker's first job,
    fresh pages), and a neighbour may hold a core for a while: what was measured then must not
    decide for long. A probe measures the losing mode afresh, and one burst that wins turns
    the choice back."""
    m = _Machine(one=1e-9, process=0.6e-9)
    m.process = 50e-9  # the start: two threads look slow for a while (~0.5 s of calls)
    choices = []
    while m.now < 0.5:
        choices.append(m.run())
    assert choices.count(False) <= 3 * adaptive_choice.BURST  # the first burst, a probe or two
    m.process = 0.6e-9  # the machine is quiet: the next probe, at most 1 s away, finds it
    start = m.now
    while m.now < start + 1.0:
        m.run()
    assert [m.run() for _ in range(20)].count(False) >= 19


def test_threads_sharing_a_policy_keep_its_bursts_whole() -> None:
    """Calls of one bucket from many threads at once, their records interleaved with other
    threads' choices: every probe still completes its burst (the invariants the policy
    asserts hold), and the quiet machine's mode leads at the end."""
    now = [0.0]
    lock = threading.Lock()
    policy = bt.AdaptivePolicy(clock=lambda: now[0])
    errors: list[BaseException] = []

    def work(k: int) -> None:
        try:
            for _ in range(400):
                with lock:
                    now[0] += 0.01
                    start = now[0]
                one = policy.one_thread(20, start)
                cost = 2e-9 if one else 1e-9  # two threads pay: the process's setting leads
                policy.record(20, one, cost, start + 0.001)
        except BaseException as e:  # reported below
            errors.append(e)

    run_in_threads(work, 8)
    assert errors == []
    one_est, process_est = policy.estimates()[20]
    assert one_est == 2e-9 and process_est == 1e-9
    assert policy._buckets[20].leader is False  # (a probe of one thread may be under way)


def test_buckets_are_measured_apart() -> None:
    m = _Machine(one=1e-9, process=0.5e-9)
    for _ in range(50):
        m.run(bucket=20)
    assert m.policy.estimates() == {20: (1e-9, 0.5e-9)}
    assert m.run(bucket=30) is False  # a new size learns the process's setting first


@pytest.mark.parametrize("policy", bt.POLICIES)
def test_every_policy_gives_numpys_answer(policy: str) -> None:
    bt.set_policy(policy)
    for shape in SHAPES:
        a, b = _operands(*shape)
        out = np.full((shape[0], shape[2]), np.nan, np.float32)
        for _ in range(3):  # adaptive: the process's setting, then one thread, then the best
            bt.matmul(a, b, out)
            np.testing.assert_allclose(out, a @ b, rtol=1e-4, atol=3e-4)


def test_an_unknown_policy_is_named() -> None:
    with pytest.raises(ValueError, match="must be one of adaptive, process, one, got 'two'"):
        bt.set_policy("two")


def test_the_switch_is_found_without_threadpoolctl(monkeypatch: pytest.MonkeyPatch) -> None:
    """The core install has no threadpoolctl: the loaded OpenBLAS is found from the process's
    shared objects, and reports the same thread count."""
    with_tpc = bt.switch()
    if with_tpc is None:
        pytest.skip("no switchable OpenBLAS (another BLAS, or its OpenMP layer)")
    monkeypatch.setattr(bt, "_openblas_by_threadpoolctl", lambda: None)
    found = bt._find_switch()
    assert found is not None
    assert found.threads() == with_tpc.threads()


def test_the_default_gives_the_same_bits_on_every_call() -> None:
    """One thread above LOW whatever the load: a call repeated gives the same bits (OpenBLAS's
    one- and two-thread partitions do not, for these shapes)."""
    assert bt.policy() == "one"
    for shape in [(8, 512, 512), (128, 128, 128), (300, 64, 400)]:
        a, b = _operands(*shape)
        first = np.empty((shape[0], shape[2]), np.float32)
        bt.matmul(a, b, first)
        for _ in range(5):
            again = np.empty_like(first)
            bt.matmul(a, b, again)
            assert np.array_equal(first, again), shape


#: (a's shape, b's shape) past SPLIT_MIN: rows of a plain product, a last part shorter than the
#: others, rows of a batch too short to cut, and batches: both operands batched, and a
#: convolution's (groups, out channels, taps) weight against (images, groups, taps, pixels);
#: columns where the output has more of them than rows: a small plane's convolution, a last
#: part shorter, and a batch too short to cut.
SPLIT_CASES = [
    ((1024, 256), (256, 256)),
    ((1000, 300), (300, 130)),
    ((2, 4, 200, 128), (128, 256)),
    ((8, 64, 256), (8, 256, 300)),
    ((2, 32, 72), (8, 2, 72, 1200)),
    ((36, 4608), (4608, 512)),
    ((64, 1024), (1024, 1000)),
    ((2, 32, 600), (600, 1200)),
]


def _expected_parts(a: np.ndarray, b: np.ndarray, out_shape: tuple[int, ...]) -> np.ndarray:
    """The product as ``_split`` cuts it, each part a single-threaded GEMM."""
    if len(out_shape) >= 3 and out_shape[0] >= bt.SPLIT_PARTS:
        step = -(-out_shape[0] // bt.SPLIT_PARTS)

        def cut(x: np.ndarray, i: int) -> np.ndarray:
            return x[i : i + step] if x.ndim == len(out_shape) and x.shape[0] > 1 else x

        return np.concatenate([cut(a, i) @ cut(b, i) for i in range(0, out_shape[0], step)], axis=0)
    rows, cols = out_shape[-2], out_shape[-1]
    if cols > rows:
        step = -(-cols // bt.SPLIT_PARTS)
        step = -(-step // bt.SPLIT_ALIGN) * bt.SPLIT_ALIGN
        return np.concatenate([a @ b[..., j : j + step] for j in range(0, cols, step)], axis=-1)
    step = -(-rows // bt.SPLIT_PARTS)
    step = -(-step // bt.SPLIT_ALIGN) * bt.SPLIT_ALIGN
    return np.concatenate([a[..., r : r + step, :] @ b for r in range(0, rows, step)], axis=-2)


@pytest.mark.parametrize(("a_shape", "b_shape"), SPLIT_CASES)
def test_large_products_split_in_parts_are_repeatable_and_numpys(
    a_shape: tuple[int, ...], b_shape: tuple[int, ...]
) -> None:
    """Past SPLIT_MIN the ``one`` policy computes fixed parts of the batch, the rows or the
    columns on two threads: the bits of each part's own single-threaded GEMM, on every call and from every
    thread."""
    sw = bt.switch()
    if sw is None:
        pytest.skip("no switchable OpenBLAS (another BLAS, or its OpenMP layer)")
    rng = np.random.default_rng(sum(a_shape) + sum(b_shape))
    a = rng.standard_normal(a_shape).astype(np.float32)
    b = rng.standard_normal(b_shape).astype(np.float32)
    want = a @ b
    assert want.size * a_shape[-1] >= bt.SPLIT_MIN
    first = np.full(want.shape, np.nan, np.float32)
    bt.matmul(a, b, first)
    np.testing.assert_allclose(first, want, rtol=1e-4, atol=3e-4)
    sw.enter()
    try:
        np.testing.assert_array_equal(first, _expected_parts(a, b, want.shape))
    finally:
        sw.leave()

    def again() -> bool:
        out = np.empty_like(first)
        for _ in range(3):
            bt.matmul(a, b, out)
        return bool(np.array_equal(out, first))

    results: list[bool] = []
    threads = [threading.Thread(target=lambda: results.append(again())) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [True] * 4


@pytest.mark.parametrize(
    ("a_shape", "b_shape", "parts"),
    [
        ((36, 4608), (4608, 512), [((36, 4608), (4608, 128))] * 4),  # columns: more of them
        ((1024, 256), (256, 256), [((256, 256), (256, 256))] * 4),  # rows: at least as many
        # little work, but 9 MB of weight read (SPLIT_MIN_BYTES): split all the same
        ((512, 4608), (4608, 4), [((128, 4608), (4608, 4))] * 4),
        ((512, 4608), (4608, 1), [((512, 4608), (4608, 1))]),  # a single column: not split
    ],
)
def test_a_split_cuts_the_longer_side_of_the_output(
    monkeypatch: pytest.MonkeyPatch,
    a_shape: tuple[int, ...],
    b_shape: tuple[int, ...],
    parts: list[tuple[tuple[int, ...], tuple[int, ...]]],
) -> None:
    # parts of the rows would each read all of the right operand: past SPLIT_MIN an output
    # with more columns than rows is cut into columns (each part reads its own of b)
    if bt.switch() is None:
        pytest.skip("no switchable OpenBLAS (another BLAS, or its OpenMP layer)")
    seen: list[tuple[tuple[int, ...], tuple[int, ...]]] = []
    real = np.matmul

    def spy(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> np.ndarray:
        seen.append((a.shape, b.shape))
        return real(a, b, out=out)

    rng = np.random.default_rng(3)
    a = rng.standard_normal(a_shape).astype(np.float32)
    b = rng.standard_normal(b_shape).astype(np.float32)
    out = np.empty((a_shape[0], b_shape[1]), np.float32)
    monkeypatch.setattr(bt, "_warm_up", lambda: None)
    monkeypatch.setattr(bt.np, "matmul", spy)
    bt.matmul(a, b, out)
    monkeypatch.undo()
    assert sorted(seen) == sorted(parts)
    np.testing.assert_allclose(out, a @ b, rtol=1e-4, atol=1e-3)


def test_an_output_overlapping_an_operand_is_not_split(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    monkeypatch.setattr(bt, "_split", lambda *args: calls.append(1))
    square = np.random.default_rng(1).standard_normal((512, 512)).astype(np.float32)
    want = square @ square
    bt.matmul(square, square, square)  # numpy copies an overlapping operand first
    np.testing.assert_allclose(square, want, rtol=1e-4, atol=3e-4)
    assert calls == []
    other = np.empty_like(square)
    bt.matmul(want, want, other)
    assert calls == ([1] if bt.switch() is not None else [])


class _CountingSwitch(bt._Switch):
    """A switch over a fake thread count of 2 that records every change."""

    def __init__(self) -> None:
        self.count = 2
        self.sets: list[int] = []

        def set_(n: int) -> None:
            self.sets.append(n)
            self.count = n

        super().__init__(lambda: self.count, set_)


@pytest.fixture
def counting(monkeypatch: pytest.MonkeyPatch) -> _CountingSwitch:
    sw = _CountingSwitch()
    monkeypatch.setattr(bt, "_switch", sw)
    monkeypatch.setattr(bt, "_looked", True)
    return sw


CHAIN = """
def @main(%a: Tensor[(8, 512), float32], %w: Tensor[(512, 512), float32], %i: Tensor[(2,), int64]) {
  take(nn.matmul(nn.matmul(nn.matmul(%a, %w), %w), %w), %i, axis=0)
}
"""


def test_a_vm_call_switches_once_and_restores_at_its_end(counting: _CountingSwitch) -> None:
    # Three products above LOW in one call: lowered at the first, restored when the call ends
    # (each switch costs microseconds); a product run on its own switches around itself.
    import dynshape
    from vm import KernelError, VirtualMachine

    vm = VirtualMachine(dynshape.compile(CHAIN))
    a, w = _operands(8, 512, 512)
    w = np.ascontiguousarray(w[:, :512])
    got = vm.run(a, w, np.array([0, 7]))
    np.testing.assert_allclose(got, (a @ w @ w @ w)[[0, 7]], rtol=1e-3, atol=1e-2)
    assert counting.sets == [1, 2] and counting.count == 2
    vm.run(a, w, np.array([1, 2]))
    assert counting.sets == [1, 2, 1, 2]
    # a call that fails after its products restores the count too
    with pytest.raises(KernelError):
        vm.run(a, w, np.array([0, 99]))
    assert counting.sets == [1, 2, 1, 2, 1, 2] and counting.count == 2
    assert bt._calls.depth == 0 and bt._calls.held is None
    out = np.empty((8, 512), np.float32)
    bt.matmul(a, w, out)
    bt.matmul(a, w, out)
    assert counting.sets[6:] == [1, 2, 1, 2]


def test_each_thread_warms_its_scratch_once_on_one_thread(
    counting: _CountingSwitch, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The first product a thread runs on one BLAS thread is preceded by the WARM_UP product
    # (OpenBLAS's cold scratch pages, module doc), run while the count is lowered; later
    # products, and products below LOW, run without it.
    warm_ups: list[tuple[str, int]] = []
    monkeypatch.setattr(bt, "_warm", threading.local())
    monkeypatch.setattr(
        bt, "_warm_up", lambda: warm_ups.append((threading.current_thread().name, counting.count))
    )
    a, w = _operands(8, 512, 512)
    out = np.empty((8, 512), np.float32)
    small = np.empty((8, 8), np.float32)
    bt.matmul(a[:, :8], w[:8, :8], small)  # below LOW: nothing lowered, nothing warmed
    assert warm_ups == []
    for _ in range(3):
        bt.matmul(a, w, out)
    np.testing.assert_allclose(out, a @ w, rtol=1e-4, atol=1e-3)
    assert warm_ups == [("MainThread", 1)]
    other = threading.Thread(target=bt.matmul, args=(a, w, np.empty_like(out)), name="second")
    other.start()
    other.join()
    assert warm_ups == [("MainThread", 1), ("second", 1)]


def test_the_worker_thread_warms_its_scratch_when_it_starts(
    counting: _CountingSwitch, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The worker's warm-up runs when the thread starts (worker_thread.on_worker_start), not
    # inside the first product split with it, whose time decides whether to split again.
    from vm import worker_thread

    warm_ups: list[str] = []
    monkeypatch.setattr(bt, "_warm", threading.local())
    monkeypatch.setattr(bt, "_warm_up", lambda: warm_ups.append(threading.current_thread().name))
    monkeypatch.setattr(worker_thread, "_pool", None)
    monkeypatch.setattr(worker_thread, "_ready", threading.Event())
    monkeypatch.setattr(worker_thread, "_worker_tid", None)  # this test's worker is its own
    pool = worker_thread._worker_pool()
    assert worker_thread._ready.wait(60)
    assert len(warm_ups) == 1 and warm_ups[0].startswith("dynshape-worker")
    assert counting.count == 2  # lowered for the warm-up, restored after it
    warmed = pool.submit(lambda: getattr(bt._warm, "done", False))
    assert warmed.result(timeout=60)
    pool.shutdown(wait=True)


# Small products of two matrices (at most LOW): np.dot where it takes them, np.matmul's bits.


def _counted_dot(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """np.dot, counting its calls in the returned list."""
    calls: list[int] = []
    real = np.dot

    def dot(*args: np.ndarray) -> object:
        calls.append(1)
        return real(*args)

    monkeypatch.setattr(np, "dot", dot)
    return calls


SMALL_PRODUCTS = [(1, 1, 1), (576, 1, 1), (576, 96, 1), (1, 96, 576), (16, 27, 64), (3, 7, 5)]


@pytest.mark.parametrize("shape", SMALL_PRODUCTS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("order", ["C", "a transposed", "b transposed"])
def test_small_products_give_np_matmuls_bits(
    shape: tuple[int, int, int], dtype: type, order: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b = _operands(*shape, dtype=dtype)
    if order == "a transposed":
        a = np.ascontiguousarray(a.T).T
    elif order == "b transposed":
        b = np.ascontiguousarray(b.T).T
    dots = _counted_dot(monkeypatch)
    out = np.full((shape[0], shape[2]), np.nan, dtype)
    bt.matmul(a, b, out)
    want = np.empty_like(out)
    np.matmul(a, b, out=want)
    assert dots == [1]  # taken by np.dot
    np.testing.assert_array_equal(out, want)


def test_small_products_np_dot_cannot_take_go_by_np_matmul(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    dots = _counted_dot(monkeypatch)
    a, b = _operands(16, 27, 64)
    cases: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = [
        (a, b, np.empty((64, 16), np.float32).T),  # an output np.dot refuses (not C-ordered)
        (a, b, np.empty((16, 64), np.float64)),  # mixed dtypes
        (a.astype(np.float16), b.astype(np.float16), np.empty((16, 64), np.float16)),
        (np.stack([a, a]), b, np.empty((2, 16, 64), np.float32)),  # batched
        (a, b, np.empty(16 * 64 * 4 + 1, np.uint8)[1:].view(np.float32).reshape(16, 64)),
    ]
    assert not cases[-1][2].flags.aligned  # an output np.dot refuses (misaligned)
    for x, y, out in cases:
        bt.matmul(x, y, out)
        want = np.empty_like(out)
        np.matmul(x, y, out=want)
        np.testing.assert_array_equal(out, want)
    assert dots == []
