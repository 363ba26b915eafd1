"""The deployment on a cluster of two Ray nodes (issue 18): the replicas of one deployment run
on different nodes, no node needs the executable's file, and mixed-size requests sent
concurrently through the handle and over HTTP get the answers of the VM run directly.

``ray.cluster_utils.Cluster`` (Ray's own multi-node test utility) starts a head node and a
worker node on this machine: each is a raylet with its own resources, object store and worker
processes, and they reach each other and the head's GCS through their gRPC addresses only, as
nodes on different machines do; Ray schedules and routes between them the same way. What one
machine cannot show, a missing file, the test makes happen: the executable is deleted before
the replicas start. Each node has 1 CPU and each replica asks for 1, so the two replicas must
land on different nodes.

Loopback only: both nodes get ``node_ip_address="127.0.0.1"`` and Ray runs with clusters
off for its addresses (``tests/serve/conftest.py``: otherwise ``ray.init`` replaces the
cluster's address 127.0.0.1 with this machine's outward address); the HTTP proxy runs on the
head node only (``HeadOnly``: a proxy on every node would have both bind the same port of
this machine). Everything is shut down at the end of the module: the other modules start their own Ray."""

from __future__ import annotations

import json
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from serve_testlib import Lazy

import dynshape
from dynshape.serve.wire import request_to_json

NEEDS = ("ray.serve", "ray.cluster_utils")  # imported before the first test (conftest.py)
ray = Lazy("ray")
serve = Lazy("ray.serve")
Cluster = Lazy("ray.cluster_utils", "Cluster")
deployment = Lazy("dynshape.serve.deployment", "deployment")

MLP = """
def @main(%x: Tensor[(batch, 8), float32], %w: Tensor[(batch, 8), float32])
    -> Tensor[(batch, 8), float32] {
  tanh(add(multiply(%x, 2f), %w))
}
"""
LOOPBACK = "127.0.0.1"
TIMEOUT_S = 60


def _free_port() -> int:
    with socket.socket() as s:
        s.bind((LOOPBACK, 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def two_nodes() -> Iterator[int]:
    """A head node and a worker node of 1 CPU each on the loopback address, this process
    connected, Serve's HTTP proxy on the head node: yields its port."""
    cluster = Cluster()
    try:
        cluster.add_node(num_cpus=1, node_ip_address=LOOPBACK, include_dashboard=False)
        cluster.add_node(num_cpus=1, node_ip_address=LOOPBACK)
        ray.init(address=cluster.address, log_to_driver=False, configure_logging=False)
        try:
            port = _free_port()
            serve.start(proxy_location="HeadOnly", http_options={"host": LOOPBACK, "port": port})
            try:
                yield port
            finally:
                serve.shutdown()
        finally:
            ray.shutdown()
    finally:
        cluster.shutdown()


@pytest.fixture(scope="module")
def served(two_nodes: int, tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Any, str, Path]:
    """The MLP served by two replicas from a file deleted before they start: the handle, the
    VM to compare with, the HTTP URL and the (deleted) path."""
    exe = dynshape.compile(MLP)
    path = tmp_path_factory.mktemp("multinode") / "mlp.dsx"
    exe.save(path)
    app = deployment(
        path,
        batch_symbol="batch",
        replicas=2,
        cpus_per_replica=1,
        batch_wait_s=0.05,
        name="mlp",
    )
    path.unlink()  # read once above, in this process: the replicas get the bytes
    handle = serve.run(app, name="mlp", route_prefix="/mlp")
    return handle, dynshape.VirtualMachine(exe), f"http://{LOOPBACK}:{two_nodes}/mlp", path


def _alive_nodes() -> set[str]:
    return {n["NodeID"] for n in ray.nodes() if n["Alive"]}


def _replica_stats(handle: Any, want: int, burst: int = 40) -> dict[str, Any]:
    """Each replica's latest stats by node, from bursts of concurrent ``stats`` calls until
    ``want`` nodes answered or ``TIMEOUT_S`` seconds passed (on a busy 2-core machine the
    router sent ten bursts in a row to one replica once, right after a load of requests)."""
    by_node: dict[str, Any] = {}
    deadline = time.monotonic() + TIMEOUT_S
    while len(by_node) < want and time.monotonic() <= deadline:
        responses = [handle.stats.remote() for _ in range(burst)]
        for r in responses:
            s = r.result(timeout_s=TIMEOUT_S)
            if s["requests"] >= by_node.get(s["node"], {"requests": -1})["requests"]:
                by_node[s["node"]] = s
    return by_node


def _requests(sizes: list[int], seed: int) -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [
        (
            rng.standard_normal((n, 8)).astype(np.float32),
            rng.standard_normal((n, 8)).astype(np.float32),
        )
        for n in sizes
    ]


def _post_json(url: str, x: np.ndarray, w: np.ndarray) -> np.ndarray:
    req = urllib.request.Request(
        url, data=request_to_json({"x": x, "w": w}), headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(req, timeout=TIMEOUT_S) as r:
            body = r.read()
    except urllib.error.HTTPError as e:
        raise AssertionError(f"HTTP {e.code}: {e.read()!r}") from None
    (out,) = json.loads(body)["outputs"]
    return np.array(out["data"], dtype=out["dtype"]).reshape(out["shape"])


def test_the_two_replicas_run_on_the_two_nodes(served) -> None:
    handle, _, _, _ = served
    nodes = _alive_nodes()
    assert len(nodes) == 2, nodes
    by_node = _replica_stats(handle, want=len(nodes))
    assert set(by_node) == nodes
    assert len({s["pid"] for s in by_node.values()}) == 2


def test_the_executable_file_is_not_needed_on_the_nodes(served) -> None:
    handle, vm, url, path = served
    assert not path.exists()
    (x, w), (x2, w2) = _requests([3, 1], seed=0)
    np.testing.assert_array_equal(handle.run.remote(x, w).result(timeout_s=TIMEOUT_S), vm.run(x, w))
    np.testing.assert_array_equal(_post_json(url, x2, w2), vm.run(x2, w2))


def test_mixed_sizes_through_the_handle_and_http_at_once(served) -> None:
    handle, vm, url, _ = served
    before = _replica_stats(handle, want=2)
    by_handle = _requests([1, 3, 2, 5, 1, 4, 2, 7, 1, 1, 6, 3] * 3, seed=1)
    by_http = _requests([2, 1, 4, 3, 1, 2, 5, 1, 6, 2, 1, 3], seed=2)
    with ThreadPoolExecutor(8) as pool:
        posted = [pool.submit(_post_json, url, x, w) for x, w in by_http]
        responses = [handle.run.remote(x, w) for x, w in by_handle]
        for (x, w), r in zip(by_handle, responses, strict=True):
            np.testing.assert_array_equal(r.result(timeout_s=TIMEOUT_S), vm.run(x, w))
        for (x, w), f in zip(by_http, posted, strict=True):
            np.testing.assert_array_equal(f.result(timeout=TIMEOUT_S), vm.run(x, w))
    after = _replica_stats(handle, want=2)
    assert set(after) == set(before) == _alive_nodes()
    answered = sum(after[n]["requests"] - before[n]["requests"] for n in after)
    assert answered == len(by_handle) + len(by_http)
