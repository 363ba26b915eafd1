"""BatchSplit: the second piece of a batch in a worker process gives the whole batch's answers,
under errors, a dead worker, a worker that cannot load the executable, threads and a fork."""

from __future__ import annotations

import glob
import os
import threading
import warnings

import numpy as np
import pytest

import dynshape
from vm.batch_split import BatchSplit, RowAxes

pytestmark = pytest.mark.skipif(os.name != "posix", reason="the worker's socket is POSIX")

#: Rows through a product, a row-wise softmax and a sum per row; ``w`` has no rows.
PROGRAM = """
def @main(%x: Tensor[(n, 6), float32], %w: Tensor[(6, 3), float32]) {
  %0 = nn.matmul(%x, %w);
  %1 = nn.softmax(%0, axis=1);
  (%1, sum(%1, axis=[1]), %w)
}
"""
AXES = RowAxes(inputs=(0, None), outputs=(0, 0, None))


@pytest.fixture(scope="module")
def machine() -> dynshape.VirtualMachine:
    return dynshape.VirtualMachine(dynshape.compile(PROGRAM))


@pytest.fixture()
def split(machine):
    runner = BatchSplit(machine, AXES, worth=lambda args: args[0].shape[0] >= 4)
    yield runner
    runner.close()


def _args(rows: int, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [
        rng.standard_normal((rows, 6)).astype(np.float32),
        rng.standard_normal((6, 3)).astype(np.float32),
    ]


def _same(got, want) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("rows", [4, 5, 9, 64])
def test_split_calls_give_the_whole_batch_answers(machine, split, rows):
    args = _args(rows, seed=rows)
    _same(split.run(args), machine.run(*args))
    assert split.splits == 1


def test_names_and_positions_both_work(machine, split):
    x, w = _args(8)
    _same(split.run({"x": x, "w": w}), machine.run(x, w))
    assert split.splits == 1


def test_small_calls_and_too_few_rows_are_not_split(machine):
    one_row = BatchSplit(machine, RowAxes((0, None), (0, 0, None), min_rows=3), lambda a: True)
    try:
        _same(one_row.run(_args(5)), machine.run(*_args(5)))  # 5 < 2 * 3
        assert one_row.splits == 0
        _same(one_row.run(_args(6)), machine.run(*_args(6)))
        assert one_row.splits == 1
    finally:
        one_row.close()


def test_worth_is_asked(machine, split):
    _same(split.run(_args(3)), machine.run(*_args(3)))
    assert split.splits == 0


def test_a_bad_input_gets_the_unsplit_error(machine, split):
    x, w = _args(8)
    with pytest.raises(dynshape.VMError) as unsplit:
        machine.run(x.astype(np.float64), w)
    with pytest.raises(type(unsplit.value)) as got:
        split.run([x.astype(np.float64), w])
    assert str(got.value) == str(unsplit.value)
    with pytest.raises(dynshape.VMError) as wrong_width:
        split.run([np.zeros((8, 5), np.float32), w])
    assert "got shape (8, 5)" in str(wrong_width.value)  # the whole batch, not a piece
    _same(split.run([x, w]), machine.run(x, w))  # the worker still answers


LOG = """
def @main(%x: Tensor[(n, 6), float32]) {
  log(%x)
}
"""


@pytest.fixture()
def log_split():
    machine = dynshape.VirtualMachine(dynshape.compile(LOG))
    runner = BatchSplit(machine, RowAxes(inputs=(0,), outputs=(0,)), worth=lambda args: True)
    yield machine, runner
    runner.close()


def _zero_in_the_workers_rows() -> np.ndarray:
    x = np.ones((8, 6), np.float32)
    x[-1, 2] = 0.0  # log(0): numpy's "divide by zero", in the last rows (the worker's piece)
    return x


def test_the_workers_warnings_are_the_callers(log_split, capfd):
    """The worker's piece warns in the caller, under the caller's filters; the worker prints
    nothing of its own."""
    machine, split = log_split
    x = _zero_in_the_workers_rows()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = split.run([x])
    assert split.splits == 1 and got[-1, 2] == -np.inf
    assert [str(w.message) for w in caught] == ["divide by zero encountered in log"]
    assert caught[0].category is RuntimeWarning
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # any warning would raise here
        with np.errstate(divide="ignore"):
            np.testing.assert_array_equal(split.run([x]), machine.run(x))
    assert "RuntimeWarning" not in capfd.readouterr().err


def test_the_callers_errstate_holds_in_the_worker(log_split):
    """``divide="raise"`` fails the worker's piece as it fails the whole batch: the split
    call raises the unsplit call's error."""
    machine, split = log_split
    x = _zero_in_the_workers_rows()
    with np.errstate(divide="raise"):
        with pytest.raises(dynshape.DynShapeError) as unsplit:
            machine.run(x)
        with pytest.raises(type(unsplit.value)) as got:
            split.run([x])
    assert str(got.value) == str(unsplit.value)
    assert split._worker is not None  # a failed piece, not a dead worker


def test_a_killed_worker_is_replaced(machine, split):
    args = _args(8)
    _same(split.run(args), machine.run(*args))
    first = split._worker.process
    first.kill()
    first.wait()
    _same(split.run(args), machine.run(*args))  # the caller ran the second piece
    _same(split.run(args), machine.run(*args))
    assert split._worker is not None and split._worker.process.pid != first.pid
    assert split.splits == 3


def test_a_worker_without_the_custom_op_turns_the_split_off():
    name = "test_split.twice"
    dynshape.register_op(
        name,
        pattern="elementwise",
        kernel=lambda x, out: np.multiply(x, 2, out=out),
    )
    try:
        exe = dynshape.compile(f"def @main(%x: Tensor[(n, 4), float32]) {{ {name}(%x) }}")
        machine = dynshape.VirtualMachine(exe)
        runner = BatchSplit(machine, RowAxes((0,), (0,)), lambda a: True)
        try:
            x = np.arange(32, dtype=np.float32).reshape(8, 4)
            np.testing.assert_array_equal(runner.run([x]), 2 * x)
            assert runner.disabled is not None and name in runner.disabled
            np.testing.assert_array_equal(runner.run([x]), 2 * x)
            assert runner.splits == 0
        finally:
            runner.close()
    finally:
        dynshape.unregister_op(name)


def test_threads_sharing_a_split_get_their_own_answers(machine, split):
    inputs = [_args(4 + 3 * i, seed=i) for i in range(6)]
    want = [machine.run(*a) for a in inputs]
    errors: list[BaseException] = []

    def worker(i: int) -> None:
        try:
            for _ in range(5):
                _same(split.run(inputs[i]), want[i])
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(len(inputs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]
    assert split.splits == 30


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork")
def test_a_forked_child_starts_its_own_worker(machine, split):
    args = _args(8)
    _same(split.run(args), machine.run(*args))
    parent_worker = split._worker.process.pid
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: split again, report 1 if right and on a worker of its own
        ok = 0
        try:
            got = split.run(args)
            ok = int(
                all(np.allclose(g, w) for g, w in zip(got, machine.run(*args), strict=True))
                and split._worker.process.pid != parent_worker
            )
            split.close()
        finally:
            os.write(write, bytes([ok]))
            os._exit(0)
    os.close(write)
    assert os.read(read, 1) == b"\x01"
    os.close(read)
    os.waitpid(pid, 0)
    _same(split.run(args), machine.run(*args))  # the parent's worker is untouched
    assert split._worker.process.pid == parent_worker


def test_close_stops_the_worker_and_leaves_no_files(machine):
    runner = BatchSplit(machine, AXES, lambda a: True)
    _same(runner.run(_args(8)), machine.run(*_args(8)))
    _same(runner.run(_args(8)), machine.run(*_args(8)))
    process = runner._worker.process
    runner.close()
    assert process.wait(5) == 0
    assert not glob.glob(f"/dev/shm/dynshape-*-{os.getpid()}-*")
    _same(runner.run(_args(8)), machine.run(*_args(8)))  # runs on, with a new worker
    runner.close()


def test_axes_must_match_the_executable(machine):
    with pytest.raises(ValueError, match="row axes"):
        BatchSplit(machine, RowAxes((0,), (0,)), lambda a: True)


class _LateOnce:
    """The worker's connection, whose first wait for a reply times out (a worker whose core
    is busy); everything else is the real connection's."""

    def __init__(self, conn):
        self._conn = conn
        self.first = True

    def poll(self, timeout=0.0):
        if self.first:
            self.first = False
            return False
        return self._conn.poll(timeout)

    def __getattr__(self, name):
        return getattr(self._conn, name)


def test_a_late_worker_piece_runs_here_with_the_same_bits(machine, split):
    """A worker that does not answer within the grace: its piece runs here (the same piece,
    kernels and bits), its late reply is dropped, and the replies stay in step."""
    inputs = [_args(9 + i, seed=i) for i in range(5)]
    by_worker = [split.run(a) for a in inputs]
    late = split.late  # (a busy test machine may make the worker late on its own)
    split._worker.conn = _LateOnce(split._worker.conn)
    for a, want in zip(inputs, by_worker, strict=True):  # each call its own inputs: in step
        for g, w in zip(split.run(a), want, strict=True):
            np.testing.assert_array_equal(g, w)
    assert split.late > late and split.splits == 10
