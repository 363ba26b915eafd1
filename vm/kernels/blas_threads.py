"""BLAS threads chosen per matmul: one thread for a matmul below a measured size.

OpenBLAS (numpy's BLAS) splits a GEMM over all its threads once the product is past its own
small threshold (``m * n * k > 65536 * GEMM_MULTITHREAD_THRESHOLD``, 262,144 by default; a
GEMV past 9,216). On this 2-core machine, shared with other processes, the second thread then
waits for a core: a (256, 64) x (64, 64) product took 8 ms with 2 threads and 56 us with one,
(64, 512) x (512, 512) 24 ms against 0.9 ms (design/compiler_fusion.md, "BLAS threads", has the
table). So a matmul whose per-matrix work ``m * n * k`` lies in ``(LOW, HIGH)`` runs with one
BLAS thread, and the process's own setting is restored when the last such call returns.

The switch is optional and lazy: it needs ``threadpoolctl`` (the ``blas`` extra) only to find
the loaded OpenBLAS and its ``openblas_set_num_threads`` symbol, which is then called
directly through ctypes (threadpoolctl's own ``set_num_threads`` adds its Python bookkeeping).
Without threadpoolctl, without OpenBLAS, or with OpenBLAS's OpenMP layer (whose limit is per
calling thread), nothing is switched and matmuls run as numpy runs them.

Threads: the thread count is process-wide, so calls from several Python threads share one
counter under a lock: the first single-thread call saves and lowers it, the last one restores
it. A large matmul running while a small one is in flight may thus run on one thread: that
changes its speed, and its result only within float rounding (OpenBLAS partitions the work
differently on 1 and 2 threads; the results are not bit for bit the same, measured), as any
change of ``OPENBLAS_NUM_THREADS`` does (``tests/vm/test_blas_threads.py``).

Off by default. On the same machine without other load (2026-12-01 21:31, load 1.0), two
threads were never slower than one, from (1, 512, 512) to (512, 512, 512) (0.61-1.02x of one
thread's time), and the MLP of ``benchmarks/compare_numpy.py`` ran 1.55-1.87x numpy-with-out=
with the switch and 1.04-1.29x without: it pays only where the cores are oversubscribed (other
processes, several VM processes on one host). ``DYNSHAPE_BLAS_SINGLE_THREAD_BELOW`` (an
integer, read at import) turns it on, up to that per-matrix work (``1073741824``, 2**30, is
what the loaded measurements above support); ``0``, the default, leaves BLAS alone.
"""

from __future__ import annotations

import importlib
import os
import threading
from collections.abc import Callable
from typing import Any

import numpy as np

#: At or below this per-matrix work OpenBLAS already runs a GEMM on one thread (65536 *
#: GEMM_MULTITHREAD_THRESHOLD), and a GEMV this small (1 x 512 x 512) measured no faster on one
#: thread: switching would only cost the pair of calls (~4 us: OpenBLAS's setter locks).
LOW = 65536 * 4

#: From this per-matrix work up, the process's BLAS setting is used; 0 (the default): always
#: (see the module doc for both measurements: quiet, and oversubscribed).
HIGH = int(os.environ.get("DYNSHAPE_BLAS_SINGLE_THREAD_BELOW", "0"))

_BLAS_DTYPES = frozenset(np.dtype(t) for t in (np.float32, np.float64, np.complex64, np.complex128))


class _Switch:
    """Lowers OpenBLAS to one thread while at least one caller is inside ``single``."""

    def __init__(self, get: Callable[[], int], set_: Callable[[int], None]) -> None:
        self._get = get
        self._set = set_
        self._lock = threading.Lock()
        self._inside = 0
        self._saved = 1

    def enter(self) -> None:
        with self._lock:
            if self._inside == 0:
                self._saved = int(self._get())
                if self._saved > 1:
                    self._set(1)
            self._inside += 1

    def leave(self) -> None:
        with self._lock:
            self._inside -= 1
            if self._inside == 0 and self._saved > 1:
                self._set(self._saved)


def _find_switch() -> _Switch | None:
    """The switch for the loaded OpenBLAS (pthreads layer), or None."""
    try:
        threadpoolctl: Any = importlib.import_module("threadpoolctl")
        controllers = threadpoolctl.ThreadpoolController().select(internal_api="openblas")
    except Exception:  # not installed, or it failed to inspect the process: no switching
        return None
    for lib in controllers.lib_controllers:
        if getattr(lib, "threading_layer", None) != "pthreads":
            continue
        dynlib = getattr(lib, "dynlib", None)
        for prefix in ("", "scipy_"):
            for suffix in ("", "64_", "_64"):
                get = getattr(dynlib, f"{prefix}openblas_get_num_threads{suffix}", None)
                set_ = getattr(dynlib, f"{prefix}openblas_set_num_threads{suffix}", None)
                if get is not None and set_ is not None:
                    return _Switch(get, set_)
    return None


_switch: _Switch | None = None
_looked = False
_look_lock = threading.Lock()


def switch() -> _Switch | None:
    """The process's switch, found on first use (None when switching is unavailable or off)."""
    global _switch, _looked
    if not _looked:
        with _look_lock:
            if not _looked:
                _switch = _find_switch() if HIGH > 0 else None
                _looked = True
    return _switch


def wants_one_thread(a: np.ndarray, b: np.ndarray) -> bool:
    """True if ``np.matmul(a, b)`` (its last two axes: (m, k) x (k, n)) should run on one
    BLAS thread: a BLAS dtype and per-matrix work in ``(LOW, HIGH)``."""
    if a.dtype not in _BLAS_DTYPES or a.ndim < 1 or b.ndim < 1:
        return False
    m = a.shape[-2] if a.ndim >= 2 else 1
    n = b.shape[-1] if b.ndim >= 2 else 1
    work = int(m) * int(a.shape[-1]) * int(n)
    return LOW < work < HIGH


def matmul(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> None:
    """``np.matmul(a, b, out=out)``, on one BLAS thread when ``wants_one_thread`` says so."""
    if HIGH <= 0:  # off (the default): not even the size test (~0.4 us a call, measured)
        np.matmul(a, b, out=out)
        return
    sw = switch() if wants_one_thread(a, b) else None
    if sw is None:
        np.matmul(a, b, out=out)
        return
    sw.enter()
    try:
        np.matmul(a, b, out=out)
    finally:
        sw.leave()
