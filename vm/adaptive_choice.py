"""Choosing between two ways of doing a piece of work by their measured speed, per size.

Used for a matmul's BLAS threads (``kernels/blas_threads.py``: one thread or the process's
setting) and for the worker thread's help (``worker_thread.py``: alone or shared). Each *bucket*
(a kind of work and the power of two of its size) keeps two running estimates of seconds per
unit of work, one per way, each the median of that way's last ``WINDOW`` calls. A way is first
measured in a *burst* of ``BURST`` calls in a row (the second way, ``one_thread`` False, first:
it is the one that pays on a quiet machine); then each call takes the way whose estimate is
lower. The way that lost is measured again, afresh, in a new burst after a pause that doubles
each time it loses (``PROBE_FIRST`` up to ``PROBE_MAX`` seconds) and restarts when it wins.

Why bursts of fresh calls: a way's old calls describe the machine as it was when they ran. A
bucket's first call is cold (the worker's first job, fresh pages, OpenBLAS's scratch), and a
neighbour that held a core for a while (another process; onnxruntime's pool spins for ~40 ms
after each of its runs) makes every call of that while look slow. Single probes judged against
a median of such calls lost until three of them had won, at pauses that doubled meanwhile: the
first second of a process could settle on the wrong way for 15 s (design/vm.md, "The adaptive
choice measures afresh").
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Hashable

#: The first pause, in seconds, before the mode that lost is tried again; it doubles each time
#: that mode loses again, up to ``PROBE_MAX``, and starts again here when it wins.
PROBE_FIRST = 0.25
PROBE_MAX = 16.0

#: How many recent calls of a mode its estimate is the median of.
WINDOW = 5
#: How many calls in a row measure a mode afresh (its first measurement and every probe): the
#: median of three ignores one cold or unlucky call.
BURST = 3


class _Estimate:
    """One bucket's recent measurements per mode (seconds per unit of work), the mode that
    leads, the mode being measured afresh and when to probe the other again. A mode's estimate
    is the median of its last ``WINDOW`` calls: on a busy machine a one-thread call also loses
    its core now and then, and one such call must not turn the choice (the collapse of two
    threads, in contrast, is in every call)."""

    __slots__ = ("leader", "one", "pause", "probe_at", "probing", "process")

    def __init__(self) -> None:
        self.one: deque[float] = deque(maxlen=WINDOW)
        self.process: deque[float] = deque(maxlen=WINDOW)
        self.leader: bool | None = None  # one thread leads (None: both not measured yet)
        self.probing: bool | None = None  # the mode in a probe's burst
        self.probe_at = 0.0
        self.pause = PROBE_FIRST


def _median(samples: deque[float]) -> float:
    return sorted(samples)[len(samples) // 2]


class AdaptivePolicy:
    """Chooses one BLAS thread or the process's setting per call, from measured speed (the
    module doc has the rule). ``clock`` is injectable so that tests can drive it."""

    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        self.clock = clock
        self._buckets: dict[Hashable, _Estimate] = {}
        self._lock = threading.Lock()

    def one_thread(self, bucket: Hashable, now: float) -> bool:
        """Whether the next call of ``bucket`` should run on one thread."""
        with self._lock:
            est = self._buckets.get(bucket)
            if est is None:
                est = self._buckets[bucket] = _Estimate()
            if len(est.process) < BURST:  # learn the process's setting first: the quiet default
                return False
            if len(est.one) < BURST:  # then one thread; or either in a probe's burst
                return True
            # both measured: the record that completed the second burst chose the leader
            assert est.leader is not None
            if est.probing is None and now >= est.probe_at:
                # time to measure the mode that lost again: its old calls are stale
                est.probing = not est.leader
                (est.one if est.probing else est.process).clear()
                return est.probing
            return est.leader

    def record(self, bucket: Hashable, one: bool, seconds_per_work: float, now: float) -> None:
        """Adds a measured call to ``bucket``'s estimates. When a probe's burst is complete, a
        mode that lost again doubles its pause, one that won restarts it; a leader whose own
        calls turn slower than the other's estimate hands over, and the old leader is probed
        after the first pause."""
        with self._lock:
            est = self._buckets[bucket]
            mine, other = (est.one, est.process) if one else (est.process, est.one)
            mine.append(seconds_per_work)
            if len(mine) < BURST or len(other) < BURST:
                return  # a mode still in its burst: nothing to compare yet
            leader = _median(est.one) < _median(est.process)
            if est.probing is not None:
                # this call completes the probe's burst: while it lasts, every other call
                # returns above (the probed mode's window is short)
                assert est.probing == one
                est.probing = None
                est.pause = PROBE_FIRST if leader == one else min(est.pause * 2, PROBE_MAX)
                est.probe_at = now + est.pause
            elif leader != est.leader:  # the first comparison, or the leader slowed down
                est.pause = PROBE_FIRST
                est.probe_at = now + est.pause
            est.leader = leader

    def estimates(self) -> dict[Hashable, tuple[float | None, float | None]]:
        """``{bucket: (one thread, process setting)}``: the estimates in seconds per unit of
        work (None for a mode not measured yet)."""
        with self._lock:
            return {
                b: (_median(e.one) if e.one else None, _median(e.process) if e.process else None)
                for b, e in sorted(self._buckets.items())
            }
