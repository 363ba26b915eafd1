"""A batch cut in two, the second piece run in a worker process: the second core, without the GIL.

On this project's 2-core hosts a worker *thread* gains nothing on a whole model (the
interpreter holds the GIL between numpy calls; design/vm.md, "Session 31"), while the same
work in a second *process* ran ResNet-18 at 0.61-0.70x, MobileNetV3 at 0.71x, a speech encoder
at 0.61-0.64x and an MLP at batch 256 at 0.76x of one process's time. ``BatchSplit`` does that
for any executable whose rows the compiler proved independent
(``dynshape.analysis.batch_rows``), given as ``RowAxes``: each input's and result's row axis.

A call with ``n`` rows (``n >= 2 * min_rows``) for which ``worth(args)`` holds:

1. the last ``n // 2`` rows of each input with rows (and every input without) are copied
   into a shared block and sent to the worker, which runs them;
2. the caller runs the first ``n - n // 2`` rows itself, its kernels alone (no worker thread:
   ``worker_thread.alone``);
3. the worker's results come back through a second shared block, and each result is the two
   pieces joined along its row axis (a result without rows is the caller's piece's). A worker
   that has not answered within ``GRACE_RATIO`` of the caller's own piece's time is late (its
   core is busy: another process): the caller runs that piece itself and drops the reply when
   it comes, and runs both pieces itself until it has come.

Whether a call is split, and where, depends on the input shapes only (``worth`` must too), and
which process runs a piece does not change its bits (the same executable, shape and
one-thread kernels), so a shape always gives the same bits; they may differ from an unsplit
run's by the kernels' rounding (a piece may take other kernel paths than the whole batch).

Errors: a piece that fails (a wrong dtype, a failed run-time check) makes the caller run the
whole batch itself, so the error, or the answer, is the one the unsplit run gives. The
worker's piece runs under the caller's ``np.errstate`` (an overflow the caller raises on fails
that piece, and so the whole batch), and its warnings (``log(0)``'s "divide by zero") are
issued in the caller, under the caller's filters, not printed by the worker. A worker
that dies is replaced on the next call, its piece run by the caller meanwhile; a worker that
cannot load the executable (a custom op registered in the caller only) turns the split off
(``disabled`` says why). A forked child starts a worker of its own. Calls from several threads
take turns at the worker. POSIX only (the worker's socket is passed by descriptor).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import subprocess
import sys
import tempfile
import threading
import time
import warnings
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection
from socket import socketpair
from typing import Any

import numpy as np

from . import worker_thread
from .batch_worker import SharedBlock, aligned
from .calling import positional
from .interpreter import VirtualMachine

#: How long ``close`` waits for the worker to stop before killing it (seconds).
STOP_WAIT = 2.0


@dataclass(frozen=True)
class RowAxes:
    """Where the rows are: each input's row axis (None: the input goes whole to each piece),
    each result's (None: every piece computes it alike), and the fewest rows a piece may
    have (the batch symbol's declared lower bound)."""

    inputs: tuple[int | None, ...]
    outputs: tuple[int | None, ...]
    min_rows: int = 1


class BatchSplit:
    """Runs ``machine``'s ``main`` with the batch cut in two, the second piece in a worker
    process that runs ``machine.exe`` (see the module doc). ``worth(args)`` says whether a
    call is large enough to pay for the hand-off; it must depend on the shapes only."""

    def __init__(
        self,
        machine: VirtualMachine,
        axes: RowAxes,
        worth: Callable[[Sequence[np.ndarray]], bool],
    ) -> None:
        if os.name != "posix":
            raise OSError("a split batch needs a POSIX system (the worker's socket)")
        if len(axes.inputs) != len(machine.inputs) or len(axes.outputs) != len(machine.outputs):
            raise ValueError("the row axes do not match the executable's inputs and outputs")
        self.machine = machine
        self.axes = axes
        self.worth = worth
        self.disabled: str | None = None
        """Why calls are no longer split (the worker could not load the executable)."""
        self.splits = 0
        """Calls split so far (a count tests read)."""
        self._main = next(f for f in machine.exe.functions if f.name == "main")
        self._exe_bytes = machine.exe.to_bytes()
        self._lock = threading.Lock()
        self._worker: _Worker | None = None
        self._blocks: dict[str, SharedBlock] = {}
        self._linked: set[str] = set()
        self._out_needed = 0  # bytes of the worker's last results
        self._late = False  # a request whose reply has not been read (its piece ran here)
        self._owner = os.getpid()  # the process whose worker and blocks these are
        self.late = 0
        """Split calls whose second piece ran here, the worker late (a count tests read)."""
        self._finalizer = weakref.finalize(self, _close_all, self.__dict__)
        try:  # started now: its start-up (~0.3 s) overlaps whatever the caller does next
            self._worker = _Worker(self._exe_bytes)
        except OSError:
            self._worker = None

    def run(self, args: Sequence[Any] | Mapping[str, Any]) -> Any:
        """``machine.run(*args)`` (or ``machine.run(args)`` for a mapping of names to
        arrays), split when the shapes say so."""
        if isinstance(args, Mapping):
            args = positional(self._main, (args,), {})
        rows = self._rows(args)
        if rows is None:
            return self.machine.run(*args)
        with self._lock:
            return self._split_run(list(args), rows)

    def close(self) -> None:
        """Stop the worker and remove the shared blocks (also done when collected)."""
        with self._lock:
            _close_all(self.__dict__)

    # -- one split call ---------------------------------------------------------------------

    def _rows(self, args: Sequence[Any]) -> int | None:
        if self.disabled is not None or self.machine.profiler is not None:
            return None
        if len(args) != len(self.axes.inputs):
            return None  # the VM names what is missing
        rows = None
        for a, axis in zip(args, self.axes.inputs, strict=True):
            if axis is None:
                continue
            if not isinstance(a, np.ndarray) or a.ndim <= axis:
                return None
            if rows is not None and a.shape[axis] != rows:
                return None
            rows = int(a.shape[axis])
        if rows is None or rows < 2 * self.axes.min_rows or not self.worth(args):
            return None
        return rows

    def _split_run(self, args: list[Any], rows: int) -> Any:
        # the caller's piece is the first rows - rows // 2 (the larger); the worker's the rest
        cut = rows - rows // 2
        worker = self._ready_worker()
        if self.disabled is not None:  # from now on no call is split: nor this one
            return self.machine.run(*args)
        sent = False
        if worker is not None and self._worker_free():
            try:
                worker.send(self._request(args, cut, rows))
                sent = True
            except OSError:
                self._drop_worker()
        start = time.perf_counter()
        mine = self._run_here(args, 0, cut)
        grace = GRACE_RATIO * (time.perf_counter() - start) + GRACE_S
        theirs = self._reply(sent, grace, args, cut, rows)
        if mine is _FAILED or theirs is None:
            # the whole batch's run says what is wrong (or that nothing is)
            return self.machine.run(*args)
        self.splits += 1
        joined = self._joined(mine, theirs)
        del theirs  # views of the out block, which may now grow for the next call's results
        out = self._blocks.get("out")
        if self._out_needed > (out.size if out is not None else 0) and not self._late:
            self._block("out", self._out_needed)
        return joined

    def _worker_free(self) -> bool:
        """Whether the worker has answered every request (a late piece's reply is read and
        dropped here); while it has not, both pieces run here."""
        if not self._late:
            return True
        assert self._worker is not None
        try:
            if not self._worker.conn.poll(0):
                return False
            self._worker.recv()
        except (EOFError, OSError):
            self._drop_worker()
            return False
        self._late = False
        self._unlink_opened()
        return True

    def _piece(self, args: list[Any], start: int, stop: int) -> list[Any]:
        """The arguments of rows ``[start, stop)``: views of the inputs with rows, the others
        whole."""
        return [
            _rows_of(a, axis, start, stop) for a, axis in zip(args, self.axes.inputs, strict=True)
        ]

    def _run_here(self, args: list[Any], start: int, stop: int) -> Any:
        """The results of rows ``[start, stop)`` run in this process, its kernels alone (the
        other core has the worker); ``_FAILED`` if the run raised."""
        try:
            with worker_thread.alone():
                return self.machine.run(*self._piece(args, start, stop))
        except Exception:
            return _FAILED

    def _request(self, args: list[Any], start: int, stop: int) -> tuple[Any, ...]:
        pieces = self._piece(args, start, stop)
        arrays = [p for p in pieces if isinstance(p, np.ndarray)]
        block = self._block("in", sum(aligned(p.nbytes) for p in arrays))
        specs: list[tuple[Any, ...]] = []
        offset = 0
        for p in pieces:
            if isinstance(p, np.ndarray):
                np.copyto(block.array(offset, p.shape, p.dtype.str), p)
                specs.append(("block", offset, p.shape, p.dtype.str))
                offset = aligned(offset + p.nbytes)
            else:
                specs.append(("value", p))
        out = self._blocks.get("out")
        return (
            "run",
            specs,
            block.path,
            out.path if out else None,
            out.size if out else 0,
            np.geterr(),  # the piece runs under the caller's floating-point handling
        )

    def _reply(
        self, sent: bool, grace: float, args: list[Any], start: int, stop: int
    ) -> tuple[Any, ...] | None:
        """The second piece's results: the worker's (views of the out block) if it answers
        within ``grace`` seconds, else the piece run here (the same bits: the same executable,
        shape and one-thread kernels; the worker's reply, when it comes, is dropped: on a
        machine whose other core is busy that is faster than waiting). None when a piece
        failed: the caller then runs the whole batch."""
        if sent:
            assert self._worker is not None
            try:
                ready = self._worker.conn.poll(grace)
                reply = self._worker.recv() if ready else None
            except (EOFError, OSError):
                self._drop_worker()
            else:
                if reply is None:
                    self._late = True
                    self.late += 1
                elif reply[0] != "ok":
                    return None
                else:
                    self._unlink_opened()
                    _, specs, needed, warned = reply
                    for category, message, filename, lineno in warned:
                        # issued here, under the caller's filters, from where the kernel was
                        warnings.warn_explicit(message, category, filename, lineno)
                    out = self._blocks.get("out")
                    self._out_needed = needed
                    return tuple(
                        out.array(*s[1:]) if s[0] == "block" and out else s[1] for s in specs
                    )
        result = self._run_here(args, start, stop)
        if result is _FAILED:
            return None
        return result if isinstance(result, tuple) else (result,)

    def _joined(self, mine: Any, theirs: tuple[Any, ...]) -> Any:
        mine_t = mine if isinstance(mine, tuple) else (mine,)
        out = tuple(
            a if axis is None else np.concatenate((a, b), axis=axis)
            for a, b, axis in zip(mine_t, theirs, self.axes.outputs, strict=True)
        )
        return out if isinstance(mine, tuple) else out[0]

    # -- the worker and the blocks --------------------------------------------------------

    def _ready_worker(self) -> _Worker | None:
        if self._owner != os.getpid():  # a forked child: the worker and blocks are the parent's
            self._worker, self._blocks, self._linked = None, {}, set()
            self._late, self._owner = False, os.getpid()
        if self._worker is None:
            try:
                self._worker = _Worker(self._exe_bytes)
            except OSError:
                return None
        failure = self._worker.wait_ready()
        if failure is not None:
            self.disabled = f"the worker process could not load the executable: {failure}"
            self._drop_worker()
            return None
        if not self._worker.alive():
            self._drop_worker()
            return None
        return self._worker

    def _drop_worker(self) -> None:
        if self._worker is not None:
            self._worker.stop()
        self._worker = None
        self._late = False
        for block in self._blocks.values():
            block.close()
            _unlink(block.path)  # (most are gone already: see _unlink_opened)
        self._blocks, self._linked = {}, set()

    def _block(self, role: str, size: int) -> SharedBlock:
        size = max(size, 1)
        block = self._blocks.get(role)
        if block is not None and block.size >= size:
            return block
        if block is not None:
            block.close()
            _unlink(block.path)
        size = max(size, 2 * block.size) if block is not None else size
        path = os.path.join(_SHM_DIR, f"dynshape-{role}-{os.getpid()}-{secrets.token_hex(8)}")
        block = SharedBlock(path, size, create=True)
        self._blocks[role] = block
        self._linked.add(path)
        return block

    def _unlink_opened(self) -> None:
        """Remove the files of the blocks the worker has opened (after its reply to a request
        that named them): both mappings stay, and nothing is left behind if a process dies."""
        for path in self._linked:
            _unlink(path)
        self._linked.clear()


#: How long the caller waits for the worker's piece after its own, as a share of its own
#: piece's time (plus ``GRACE_S``), before it runs that piece itself: the worker's piece is
#: never the larger one, so on a free core it is done about when the caller's is.
GRACE_RATIO = 0.25
GRACE_S = 0.0002


class _Worker:
    """The worker process and the caller's end of its socket."""

    def __init__(self, exe_bytes: bytes) -> None:
        ours, theirs = socketpair()
        package_root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (package_root, env.get("PYTHONPATH", "")) if p
        )
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "vm.batch_worker", str(theirs.fileno())],
                pass_fds=(theirs.fileno(),),
                env=env,
                stdin=subprocess.DEVNULL,
            )
        finally:
            theirs.close()
        self.conn = Connection(ours.detach())
        self.pid_of_owner = os.getpid()
        self._ready: str | bool | None = False
        self.conn.send(("exe", exe_bytes))

    def wait_ready(self) -> str | None:
        """None once the worker has loaded the executable, else why it could not."""
        if self._ready is False:
            try:
                reply = self.conn.recv()
            except (EOFError, OSError) as e:
                reply = ("failed", f"the worker exited ({e or 'no reply'})")
            self._ready = None if reply[0] == "ready" else str(reply[1])
        return self._ready if isinstance(self._ready, str) else None

    def alive(self) -> bool:
        return self.process.poll() is None

    def send(self, message: Any) -> None:
        self.conn.send(message)

    def recv(self) -> Any:
        return self.conn.recv()

    def stop(self) -> None:
        """Ask the worker to stop; kill it if it does not within ``STOP_WAIT``."""
        if self.pid_of_owner != os.getpid():
            return  # a forked child's copy: the parent owns the process
        with contextlib.suppress(OSError):
            self.conn.send(("stop",))
        self.conn.close()
        try:
            self.process.wait(STOP_WAIT)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


_SHM_DIR = "/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir()


#: What ``_run_here`` returns for a piece whose run raised.
_FAILED = object()


def _rows_of(a: Any, axis: int | None, start: int, stop: int) -> Any:
    if axis is None:
        return a
    index = [slice(None)] * a.ndim
    index[axis] = slice(start, stop)
    return a[tuple(index)]


def _unlink(path: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)


def _close_all(state: dict[str, Any]) -> None:
    if state.get("_owner") != os.getpid():
        return  # a forked child that never split: the worker and the blocks are the parent's
    worker = state.get("_worker")
    if worker is not None:
        worker.stop()
        state["_worker"] = None
    for block in state.get("_blocks", {}).values():
        block.close()
        _unlink(block.path)
    state["_blocks"] = {}
    state.get("_linked", set()).clear()
