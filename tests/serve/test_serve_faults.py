"""A replica killed under load (issue 31, item 2): two replicas, eight client threads sending
HTTP requests without pause (the protocol's and the old JSON body), one replica SIGKILLed
mid-load. Every request is answered right (its replica's death made the front send it to
the other replica) or, when the retries are turned off, with the project's JSON 503 and a
``Retry-After``: none lost, no bare 500. The front's counters say how many were retried."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
from serve_testlib import Lazy, request

import dynshape

NEEDS = ("ray", "ray.serve")  # imported before the first test (conftest.py), not at collection
serve = Lazy("ray.serve")
deployment = Lazy("dynshape.serve.deployment", "deployment")

# 1500 steps of a loop (about 35 ms a request): requests wait at the replica, so some are in
# flight there when it is killed (a model of a few microseconds left the replica idle, its
# requests all in the proxy and the front: nothing to retry).
MODEL = """
def @loop(%i: int32, %acc: Tensor[(batch, 8), float32], %x: Tensor[(batch, 8), float32])
    -> Tensor[(batch, 8), float32] {
  %0 = less(%i, 1500);
  if (%0) {
    @loop(add(%i, 1), tanh(add(multiply(%acc, 0.5f), %x)), %x)
  } else {
    %acc
  }
}

def @main(%x: Tensor[(batch, 8), float32]) -> Tensor[(batch, 8), float32] { @loop(0, %x, %x) }
"""
CLIENTS = 8
#: Answers before the kill, and after the replica is back.
WARM, AFTER = 40, 40


def _pids(handle: Any) -> set[int]:
    """The pids of the model replicas that answer a burst of ``stats()``."""
    return {s["pid"] for s in [r.result() for r in [handle.stats.remote() for _ in range(16)]]}


def _send(url: str, rng: np.random.Generator, x: np.ndarray, want: np.ndarray) -> tuple[str, int]:
    """One request of ``x``, checked against ``want``: ("ok", 200), ("503", 503) for the
    project's JSON 503 with a Retry-After, else what went wrong."""
    if rng.integers(2):
        doc: Any = {
            "inputs": [
                {
                    "name": "x",
                    "shape": list(x.shape),
                    "datatype": "FP32",
                    "data": x.ravel().tolist(),
                }
            ]
        }
        path = "/v2/models/mlp/infer"
    else:
        doc = {
            "inputs": {
                "x": {"dtype": "float32", "shape": list(x.shape), "data": x.ravel().tolist()}
            }
        }
        path = "/"
    req = urllib.request.Request(
        url + path, data=json.dumps(doc).encode(), headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            (out,) = json.loads(r.read())["outputs"]
    except urllib.error.HTTPError as e:
        body = e.read()
        try:
            error = json.loads(body)["error"]
        except (ValueError, KeyError, TypeError):
            return f"bare {e.code}: {body[:80]!r}", e.code
        if e.code == 503 and e.headers.get("Retry-After") and error:
            return "503", 503
        return f"{e.code}: {error}", e.code
    except Exception as e:  # a lost request: connection reset, timeout
        return f"lost: {type(e).__name__}: {e}", 0
    got = np.array(out["data"], np.float32).reshape(x.shape)
    return ("ok", 200) if np.array_equal(got, want) else ("wrong", 200)


def _kill_under_load(port: int, name: str, retries: int) -> tuple[Counter[str], dict[str, Any]]:
    exe = dynshape.compile(MODEL)
    vm = dynshape.VirtualMachine(exe)
    app = deployment(exe, name=name, model_name="mlp", replicas=2, retries=retries)
    handle = serve.run(app, name=name, route_prefix=f"/{name}")
    url = f"http://127.0.0.1:{port}/{name}"
    outcomes: Counter[str] = Counter()
    lock, stop = threading.Lock(), threading.Event()

    def client(seed: int) -> None:
        rng = np.random.default_rng(seed)
        xs = [rng.standard_normal((n, 8)).astype(np.float32) for n in (1, 2, 3)]
        cases = [(x, vm.run(x)) for x in xs]  # answers known before the load starts
        while not stop.is_set():
            x, want = cases[int(rng.integers(len(cases)))]
            outcome, _ = _send(url, rng, x, want)
            with lock:
                outcomes[outcome] += 1

    try:
        before = _pids(handle)
        assert len(before) == 2, before
        with ThreadPoolExecutor(CLIENTS) as pool:
            futures = [pool.submit(client, seed) for seed in range(CLIENTS)]
            while sum(outcomes.values()) < WARM:
                time.sleep(0.05)
            victim = min(before)
            os.kill(victim, signal.SIGKILL)
            killed_at, answered = time.monotonic(), sum(outcomes.values())
            # until Serve has started a replica in the dead one's place, and a while after
            deadline = killed_at + 120
            while time.monotonic() < deadline:
                now = _pids(handle)
                if len(now) == 2 and victim not in now:
                    break
                time.sleep(0.5)
            recovered_s = time.monotonic() - killed_at
            during = sum(outcomes.values()) - answered
            while sum(outcomes.values()) < answered + during + AFTER:
                time.sleep(0.05)
            stop.set()
            for f in futures:
                f.result()
        status, body = request(f"{url}/v2/models/mlp/stats")
        assert status == 200, body
        (stats,) = json.loads(body)["model_stats"]
        stats["recovered_s"], stats["answered_while_recovering"] = recovered_s, during
        print(
            f"\n{name}: {dict(outcomes)}; recovered in {recovered_s:.1f} s, {during} "
            f"answered meanwhile; front: {stats['dynshape_http']}"
        )
        return outcomes, stats
    finally:
        serve.delete(name)


def test_a_killed_replicas_requests_are_retried_on_the_other(cluster: int) -> None:
    outcomes, stats = _kill_under_load(cluster, "killed", retries=3)
    assert set(outcomes) == {"ok"}, outcomes  # none lost, none wrong, no 500, no 503
    http = stats["dynshape_http"]
    assert http["by_status"] == {"200": sum(outcomes.values())}
    assert http["unavailable"] == 0
    assert http["retries"] >= 1, "no request was in flight at the killed replica"
    assert stats["recovered_s"] < 120, "Serve did not start a replica in the dead one's place"


def test_without_retries_a_killed_replicas_requests_get_a_json_503(cluster: int) -> None:
    outcomes, stats = _kill_under_load(cluster, "noretry", retries=0)
    assert set(outcomes) <= {"ok", "503"}, outcomes  # never a bare 500, never lost
    http = stats["dynshape_http"]
    assert http["retries"] == 0 and http["unavailable"] == outcomes["503"]
    assert outcomes["503"] >= 1, "no request was in flight at the killed replica"
