"""The worker process of a split batch (``vm/batch_split.py``): ``python -m vm.batch_worker FD``.

It loads the executable sent first on the socket ``FD``, then serves one request at a time:
the arrays of its piece of the batch in a shared block (a file in ``/dev/shm`` both processes
map), its results written back into another, with anything that does not fit sent in the
reply itself. Its kernels run alone (no worker thread of its own): the point of the process
is the second core, which the caller's process leaves to it while the split call runs.

Messages (pickled, ``multiprocessing.connection``): the caller sends ``("exe", bytes)`` once,
then ``("run", inputs, in_path, out_path, out_size, errstate)`` or ``("stop",)``; the worker
answers ``("ready",)`` or ``("failed", message)`` to the executable, and ``("ok", results,
needed, warned)`` or ``("error", class name, message)`` to a run. An input or result travels
as ``("block", offset, shape, dtype)`` or ``("value", object)``.

A piece runs as it would in the caller: under the caller's ``np.errstate`` (sent with each
run: an overflow the caller raises on fails the worker's piece too, and the caller then runs
the whole batch, which raises it), and the warnings it raises are not printed here but sent
back (``warned``: category, message, file and line each) for the caller to issue under its
own filters, as the same call unsplit would have.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import signal
import sys
import warnings
from multiprocessing.connection import Connection
from typing import Any

import numpy as np

#: Where a piece's arrays start in a shared block: cache-line aligned.
ALIGN = 64


def aligned(n: int) -> int:
    """``n`` rounded up to ``ALIGN``."""
    return -(-n // ALIGN) * ALIGN


class SharedBlock:
    """A file in ``/dev/shm`` (or the temp dir) mapped into memory: the bytes both processes
    see. The caller creates it (``create``); the worker opens it by path."""

    def __init__(self, path: str, size: int, create: bool = False) -> None:
        flags = os.O_RDWR | (os.O_CREAT | os.O_EXCL if create else 0)
        fd = os.open(path, flags, 0o600)
        try:
            if create:
                os.ftruncate(fd, size)
            self.map = mmap.mmap(fd, size)
        finally:
            os.close(fd)
        self.path = path
        self.size = size

    def array(self, offset: int, shape: tuple[int, ...], dtype: str) -> np.ndarray:
        """A view of the block's bytes at ``offset`` as an array."""
        view: np.ndarray = np.ndarray(shape, np.dtype(dtype), self.map, offset)
        return view

    def close(self) -> None:
        """Unmap (views into the block must be gone)."""
        with contextlib.suppress(BufferError):  # a view still alive: the mapping goes with it
            self.map.close()


def _serve(conn: Connection) -> None:
    from . import worker_thread
    from .executable import Executable
    from .interpreter import VirtualMachine

    worker_thread.CORES = 1  # the caller's process has the other core
    _kind, data = conn.recv()
    try:
        machine = VirtualMachine(Executable.from_bytes(data))
    except Exception as e:  # the caller runs every piece itself from then on
        conn.send(("failed", f"{type(e).__name__}: {e}"))
        return
    conn.send(("ready",))
    blocks: dict[str, SharedBlock] = {}  # by role: "in", "out"
    while True:
        message = conn.recv()
        if message[0] != "run":
            break
        _, inputs, in_path, out_path, out_size, errstate = message
        try:
            block_in = _opened(blocks, "in", in_path)
            block_out = _opened(blocks, "out", out_path)
            args = [block_in.array(*spec[1:]) if spec[0] == "block" else spec[1] for spec in inputs]
            with np.errstate(**errstate), warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")  # every one: the caller's filters choose
                result = machine.run(*args)
        except Exception as e:  # reported: the caller runs the whole batch itself
            conn.send(("error", type(e).__name__, str(e)))
            continue
        results = result if isinstance(result, tuple) else (result,)
        warned = [(w.category, str(w.message), w.filename, w.lineno) for w in caught]
        conn.send((*_write_results(results, block_out, out_size), warned))


def _opened(blocks: dict[str, SharedBlock], role: str, path: str | None) -> Any:
    """The block of ``role`` at ``path``, opened on first use (the caller makes a new one, at
    a new path, when it grows one)."""
    if path is None:
        return None
    block = blocks.get(role)
    if block is None or block.path != path:
        if block is not None:
            block.close()
        block = blocks[role] = SharedBlock(path, os.path.getsize(path))
    return block


def _write_results(
    results: tuple[Any, ...], block: SharedBlock | None, size: int
) -> tuple[Any, ...]:
    specs: list[tuple[Any, ...]] = []
    offset = 0
    for r in results:
        if isinstance(r, np.ndarray) and block is not None and offset + r.nbytes <= size:
            np.copyto(block.array(offset, r.shape, r.dtype.str), r)
            specs.append(("block", offset, r.shape, r.dtype.str))
        else:
            specs.append(("value", np.array(r) if isinstance(r, np.ndarray) else r))
        offset = aligned(offset + (r.nbytes if isinstance(r, np.ndarray) else 0))
    return ("ok", specs, offset)


def main(argv: list[str]) -> None:
    """Serve on the socket whose descriptor is ``argv[0]``."""
    # Ctrl-C in a terminal reaches the whole process group: the caller handles it, and the
    # worker stops when the caller's end of the socket closes (no second traceback)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    conn = Connection(int(argv[0]))
    try:
        _serve(conn)
    except (EOFError, OSError):
        pass  # the caller went away
    finally:
        conn.close()


if __name__ == "__main__":
    main(sys.argv[1:])
