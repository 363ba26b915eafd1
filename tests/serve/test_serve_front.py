"""The front's retry rule and counters (``dynshape/serve/front.py``, ``counters.py``) without a
Ray cluster: a call that meets a dead replica is made again, up to the bound, then refused
with ``ReplicaUnavailableError`` (the front's 503); the request's own errors are not retried;
the counters say what happened (tests/serve/test_serve_faults.py kills real replicas)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from serve_testlib import Lazy

from dynshape.serve.counters import BUCKETS_MS, Counters
from vm import VMArgumentError

NEEDS = ("ray.exceptions", "starlette")  # imported before the first test (conftest.py)
exceptions = Lazy("ray.exceptions")
front = Lazy("dynshape.serve.front")


class Flaky:
    """A call whose first ``deaths`` attempts meet a dead replica, then answers ``answer``."""

    def __init__(self, deaths: int, error: Any, answer: Any = "ok") -> None:
        self.deaths, self.error, self.answer, self.calls = deaths, error, answer, 0

    async def __call__(self) -> Any:
        self.calls += 1
        if self.calls <= self.deaths:
            raise self.error
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


def _run(call: Flaky, retries: int, retried: list[int]) -> Any:
    return asyncio.run(front.retried(call, retries, lambda: retried.append(1), backoff_s=(0.0,)))


@pytest.mark.parametrize(
    "error",
    [
        lambda: exceptions.ActorDiedError(),
        lambda: exceptions.ActorUnavailableError("connection lost", b"1" * 16),
    ],
)
def test_a_request_whose_replica_died_is_sent_again(error: Any) -> None:
    call, retried = Flaky(2, error()), []
    assert _run(call, 3, retried) == "ok"
    assert call.calls == 3 and len(retried) == 2


def test_after_the_bound_the_request_is_refused_as_unavailable() -> None:
    call, retried = Flaky(10, exceptions.ActorDiedError()), []
    with pytest.raises(front.ReplicaUnavailableError) as info:
        _run(call, 2, retried)
    assert call.calls == 3 and len(retried) == 2
    assert str(info.value) == (
        "no replica answered: 3 attempts met a replica that died (ActorDiedError); "
        f"retry in {front.RETRY_AFTER_S} s"
    )


def test_the_requests_own_error_is_not_retried() -> None:
    call, retried = Flaky(0, None, VMArgumentError("expected dtype float32")), []
    with pytest.raises(VMArgumentError, match="expected dtype float32"):
        _run(call, 3, retried)
    assert call.calls == 1 and not retried


def test_a_503_is_the_projects_json_error_with_retry_after() -> None:
    reply = front.error_reply(503, "no replica answered", (("Retry-After", "20"),))
    response = front.to_response(reply)
    assert response.status_code == 503 and response.headers["retry-after"] == "20"
    assert response.headers["content-type"] == "application/json"
    assert json.loads(response.body) == {"error": "no replica answered"}


@pytest.mark.parametrize(
    ("method", "path", "kind"),
    [
        ("POST", "/", "infer"),
        ("POST", "/v2/models/m/infer", "infer"),
        ("GET", "/v2/models/m/stats", "stats"),
        ("GET", "/v2/models/m/versions/1/stats", "stats"),
        ("GET", "/v2/models/m", None),
        ("GET", "/", None),
        ("GET", "/v2/models/other/stats", None),  # the model replica answers the 404
        ("POST", "/v2/models/m/stats", None),  # and the 405
    ],
)
def test_the_front_tells_inference_and_stats_from_the_rest(
    method: str, path: str, kind: str | None
) -> None:
    assert front.request_kind(method, path, "m") == kind


def test_the_counters_count_successes_failures_and_latency() -> None:
    c = Counters("m", "1")
    for status, seconds in ((200, 0.0005), (200, 0.003), (400, 0.015), (503, 30.0)):
        c.record(status, seconds)
    c.retries += 4
    c.unavailable += 1
    (stats,) = c.stats()["model_stats"]
    assert stats["name"] == "m" and stats["version"] == "1"
    assert stats["inference_count"] == 4
    assert stats["inference_stats"]["success"] == {"count": 2, "ns": 3_500_000}
    assert stats["inference_stats"]["fail"]["count"] == 2
    http = stats["dynshape_http"]
    assert http["by_status"] == {"200": 2, "400": 1, "503": 1}
    assert http["retries"] == 4 and http["unavailable"] == 1
    buckets = http["latency_ms_buckets"]
    assert list(buckets) == [*map(str, BUCKETS_MS), "+Inf"]
    assert (buckets["1"], buckets["2"], buckets["5"], buckets["20"]) == (1, 1, 2, 3)
    assert buckets["10000"] == 3 and buckets["+Inf"] == 4
    json.dumps(c.stats())
