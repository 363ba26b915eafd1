"""The process's one worker thread, with which a kernel shares a large piece of work.

numpy releases the GIL in its loops, so two threads that each run ufuncs over their own part of
an array use both cores. The work is a loop over items taken from one shared iterator (``next``
on it is atomic under the GIL): on a busy machine the thread that gets the CPU does more items,
where fixed halves would wait for the slower one. One worker for the whole process, made on
first use; a kernel shares with it only from sizes where the hand-off (tens of microseconds)
is small against the work (``fused_blocked.THREAD_MIN_ELEMENTS``, ``erf.ERF_THREAD_MIN``,
``blas_threads.SPLIT_MIN``), and only while that measures faster than working alone
(``shared``). The worker starts with the pool, prepares (``on_worker_start``) and then
serves.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from .adaptive_choice import AdaptivePolicy

_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()
#: What the worker thread runs when it starts, before any work (``on_worker_start``).
_start_hooks: list[Callable[[], None]] = []


def on_worker_start(hook: Callable[[], None]) -> None:
    """Run ``hook`` on the worker thread when it starts, before it takes any work: a thread's
    one-time preparation (``blas_threads`` warms the thread's OpenBLAS scratch, an ~11 ms
    product) is then done there and not inside the first piece of work shared with it, whose
    time decides whether later ones are shared (``shared`` measures every call: a first
    helped matmul measured 3.5-4.4x slower than the next ones, and working alone was chosen
    until a probe ~0.25-0.5 s later). Until the hooks are done ``shared`` works alone and
    measures nothing, so nobody waits for them. Register at import: the thread runs the hooks
    registered when it starts (a failing one is skipped)."""
    _start_hooks.append(hook)


#: Set once the worker thread has run its start hooks; until then ``shared`` works alone
#: and measures nothing (the help it would ask for could not start anyway).
_ready = threading.Event()


def _prepare_worker() -> None:
    global _worker_tid
    _worker_tid = threading.get_native_id()
    try:
        for hook in _start_hooks:
            # a preparation only saves time: the worker works without it
            with contextlib.suppress(Exception):
                hook()
    finally:
        _ready.set()


def _worker_pool() -> ThreadPoolExecutor:
    global _pool
    if _pool is None:
        with _pool_lock:
            if _pool is None:
                pool = ThreadPoolExecutor(
                    1, thread_name_prefix="dynshape-worker", initializer=_prepare_worker
                )
                pool.submit(int)  # the thread starts with a first job: it prepares at once
                _pool = pool
    return _pool


def _forget_pool() -> None:
    # A forked child has no worker thread, but would inherit a pool that believes it has an
    # idle one and never starts another: the child makes its own pool on first use.
    global _pool, _ready, _worker_tid, _kept_off
    _pool = None
    _ready = threading.Event()
    _worker_tid, _kept_off = None, None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_pool)


def _usable_cores() -> int:
    """The cores this process may run on (its affinity mask where the OS has one)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0)) or 1
    return os.cpu_count() or 1


#: Counted once: ``os.cpu_count()`` reads ``/sys`` on Linux (6-15 us, measured), which a kernel
#: sharing work paid on every call. A process pinned to one core (``taskset``, a container's
#: cpuset) counts one, so it never hands work to a thread that would wait for the same core.
CORES = _usable_cores()


_alone = threading.local()


def use_threads() -> bool:
    """Whether kernels share work with the worker thread: only with 2+ usable cores, and not
    on a thread inside ``alone()``."""
    return CORES >= 2 and not getattr(_alone, "on", False)


@contextlib.contextmanager
def alone() -> Iterator[None]:
    """Kernels of the calling thread work alone inside: its process's other core is busy with
    a piece of the same call (``vm/batch_split.py``). The results are the same either way
    (``shared``'s items give the same bits whichever thread does them)."""
    before = getattr(_alone, "on", False)
    _alone.on = True
    try:
        yield
    finally:
        _alone.on = before


#: The worker thread's id for the OS (set when it starts), and the CPU its affinity keeps it
#: off (``_keep_off``; None: not set, every usable CPU).
_worker_tid: int | None = None
_kept_off: int | None = None
#: The CPUs this process may use, as counted for ``CORES``.
_ALLOWED = frozenset(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else frozenset()


def _cpu_reader() -> Callable[[], int] | None:
    """libc's ``sched_getcpu`` (the CPU the calling thread runs on; a vDSO read, ~0.1 us), or
    None where there is none."""
    if not _ALLOWED:
        return None
    try:
        reader = ctypes.CDLL(None).sched_getcpu
    except (OSError, AttributeError):
        return None
    reader.restype = ctypes.c_int
    reader.argtypes = []
    return reader


_current_cpu = _cpu_reader()


def _keep_off() -> None:
    """Keep the worker off the CPU the calling thread runs on before waking it. Linux wakes a
    thread on the CPU of the thread that wakes it when that looks cheaper (wake-affine), and
    a woken thread preempts the one running there: measured, the helper ran its half of a
    (1024, 512) x (512, 128) product in 0.70 ms while the caller's half took 1.36, the two
    halves one after the other on one core (the other idle), where with the worker kept off
    the caller's CPU both halves took 0.70 ms side by side. The affinity is set again only
    when the caller's CPU changes (a system call of ~1.5 us for a sleeping thread); any
    failure (a mask changed under the process, no such call) leaves the worker as it is."""
    global _kept_off
    if _current_cpu is None or _worker_tid is None:
        return
    cpu = _current_cpu()
    if cpu == _kept_off or cpu not in _ALLOWED or len(_ALLOWED) < 2:
        return
    _kept_off = cpu
    with contextlib.suppress(OSError):
        os.sched_setaffinity(_worker_tid, _ALLOWED - {cpu})


#: Chooses, per kind of work and power of two of its size, whether the worker helps, by the
#: measured seconds per unit of work each way (``adaptive_choice``): on a quiet machine help
#: halves the time, with the other core taken by another process it costs 10-16% (the two
#: threads share one core, and the caller waits for the worker's last item).
_help = AdaptivePolicy()


def shared(work: Callable[[], None], kind: str, amount: int) -> None:
    """Run ``work`` on the calling thread and on the worker thread at once; return when both
    are done (an exception of either is raised). ``work`` must take its items from an iterator
    both calls share, so that each item is done once, whichever thread takes it, and must give
    the same result whichever thread does which item: then whether the worker helps changes
    the time only. ``kind`` and ``amount`` (elements, or a product's ``m * k * n``) name the
    bucket whose measurements decide that (``_help``): a call is timed either way.

    The worker may be busy (another thread's kernel, or this very call made from the worker
    itself, as a blocked kernel's step does): the calling thread then does every item, and the
    queued call, not started, is cancelled rather than waited for, so a kernel never waits on
    work that only the thread waiting could run. The worker runs under the caller's numpy
    floating-point error handling (``np.errstate`` is per thread): an overflow the caller
    would have raised is raised from either thread's items."""
    if not use_threads():
        work()
        return
    pool = _worker_pool()
    if not _ready.is_set():  # the worker is still preparing (``on_worker_start``)
        work()
        return
    bucket = (kind, amount.bit_length())
    clock = _help.clock
    start = clock()
    alone = _help.one_thread(bucket, start)
    if alone:
        work()
    else:
        _keep_off()
        helper = pool.submit(_under_errstate, np.geterr(), work)
        try:
            work()
        finally:
            if not helper.cancel():
                helper.result()
    end = clock()
    _help.record(bucket, alone, (end - start) / max(amount, 1), end)


def _under_errstate(state: Any, work: Callable[[], None]) -> None:
    with np.errstate(**state):
        work()
