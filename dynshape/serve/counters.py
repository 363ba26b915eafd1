"""Per-model request, error and latency counters, kept by the deployment's front (numpy-free,
no Ray) and answered at ``GET /v2/models/NAME/stats``.

The answer has the shape of Triton's statistics extension of the Open Inference Protocol
(``{"model_stats": [{"name", "version", "inference_count", "inference_stats": {"success":
{"count", "ns"}, "fail": {"count", "ns"}}}]}``), so that its clients read it, and the
extension field ``dynshape_http``: requests by HTTP status, the retries made after a replica
died, the requests answered 503 when no replica could answer, and a latency histogram (the
count of requests at most each bound, in milliseconds, cumulative as Prometheus buckets are).
Latency is measured in the front, from the request's arrival there to its answer, retries
included.
"""

from __future__ import annotations

import bisect
import time
from collections import Counter
from typing import Any

#: The latency histogram's upper bounds, in milliseconds (the last bucket is everything else).
BUCKETS_MS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000)


class Counters:
    """One model's counts since the front started (one event loop updates them: no lock)."""

    def __init__(self, name: str, version: str) -> None:
        self.name, self.version = name, version
        self.statuses: Counter[int] = Counter()
        self.success = [0, 0]  # count, ns
        self.fail = [0, 0]
        self.retries = 0
        self.unavailable = 0
        self.buckets = [0] * (len(BUCKETS_MS) + 1)
        self.last_ms = 0

    def record(self, status: int, seconds: float) -> None:
        """One inference answered with ``status`` after ``seconds``."""
        self.statuses[status] += 1
        side = self.success if status < 400 else self.fail
        side[0] += 1
        side[1] += int(seconds * 1e9)
        self.buckets[bisect.bisect_left(BUCKETS_MS, seconds * 1e3)] += 1
        self.last_ms = int(time.time() * 1e3)

    def stats(self) -> dict[str, Any]:
        """The ``GET /v2/models/NAME/stats`` answer."""
        cumulative, total = {}, 0
        for bound, n in zip((*map(str, BUCKETS_MS), "+Inf"), self.buckets, strict=True):
            total += n
            cumulative[bound] = total
        count = self.success[0] + self.fail[0]
        return {
            "model_stats": [
                {
                    "name": self.name,
                    "version": self.version,
                    "last_inference": self.last_ms,
                    "inference_count": count,
                    "inference_stats": {
                        "success": {"count": self.success[0], "ns": self.success[1]},
                        "fail": {"count": self.fail[0], "ns": self.fail[1]},
                    },
                    "dynshape_http": {
                        "requests": count,
                        "by_status": {str(s): n for s, n in sorted(self.statuses.items())},
                        "retries": self.retries,
                        "unavailable": self.unavailable,
                        "latency_ms_buckets": cumulative,
                    },
                }
            ]
        }
