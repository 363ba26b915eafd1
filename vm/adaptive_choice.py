"""Choosing between two ways of doing a piece of work by their measured speed, per size.

Used for a matmul's BLAS threads (``kernels/blas_threads.py``: one thread or the process's
setting) and for the worker thread's help (``worker_thread.py``: alone or shared). Each *bucket*
(a kind of work and the power of two of its size) keeps two running estimates of seconds per
unit of work, one per way; each call takes the way whose estimate is lower and measures itself;
the other way is tried again after a pause that doubles each time it loses (``PROBE_FIRST`` up
to ``PROBE_MAX`` seconds) and restarts when it wins. The second way (``one_thread`` False) is
learnt first: it is the one that pays on a quiet machine.
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


class _Estimate:
    """One bucket's recent measurements per mode (seconds per unit of work) and when to try the
    mode that lost again. A mode's estimate is the median of its last ``WINDOW`` calls: on a busy
    machine a one-thread call also loses its core now and then, and one such call must not
    turn the choice (the collapse of two threads, in contrast, is in every call)."""

    __slots__ = ("one", "pause", "probe_at", "process")

    def __init__(self) -> None:
        self.one: deque[float] = deque(maxlen=WINDOW)
        self.process: deque[float] = deque(maxlen=WINDOW)
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
            if not est.process:  # learn the process's setting first: the quiet default
                return False
            if not est.one:
                return True
            best_one = _median(est.one) < _median(est.process)
            if now >= est.probe_at:  # time to try the mode that lost
                est.probe_at = now + est.pause
                return not best_one
            return best_one

    def record(self, bucket: Hashable, one: bool, seconds_per_work: float, now: float) -> None:
        """Adds a measured call to ``bucket``'s estimates. A mode that loses is tried again
        after the pause; a probe that lost again doubles the pause, one that won restarts it."""
        with self._lock:
            est = self._buckets[bucket]
            mine, other = (est.one, est.process) if one else (est.process, est.one)
            lost_before = bool(mine) and bool(other) and _median(mine) >= _median(other)
            mine.append(seconds_per_work)
            if not other:
                return
            if _median(mine) < _median(other):
                if lost_before:  # a probe that won: the other mode starts its pauses afresh
                    est.pause = PROBE_FIRST
            else:
                est.pause = min(est.pause * 2, PROBE_MAX) if lost_before else PROBE_FIRST
                est.probe_at = max(est.probe_at, now + est.pause)

    def estimates(self) -> dict[Hashable, tuple[float | None, float | None]]:
        """``{bucket: (one thread, process setting)}``: the estimates in seconds per unit of
        work (None for a mode not measured yet)."""
        with self._lock:
            return {
                b: (_median(e.one) if e.one else None, _median(e.process) if e.process else None)
                for b, e in sorted(self._buckets.items())
            }
