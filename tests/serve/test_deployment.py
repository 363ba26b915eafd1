"""Serving an executable on Ray Serve (issue 18): a local Ray instance (2 CPUs, loopback only,
shut down at the end), an MLP batched along ``batch`` and a data-dependent model served one
request per call, mixed-size requests sent concurrently through the handle and over HTTP, each
answer compared with the VM run directly; bad requests get a 400 with the project's message;
batching is observed (fewer model calls than requests) and never mixes rows."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

import numpy as np
import pytest
from serve_testlib import Lazy, post

import dynshape
from dynshape.serve.wire import request_to_json
from vm import VMArgumentError

NEEDS = ("ray", "ray.serve")  # imported before the first test (conftest.py), not at collection
ray = Lazy("ray")
serve = Lazy("ray.serve")
deployment = Lazy("dynshape.serve.deployment", "deployment")

MLP = """
def @main(%x: Tensor[(batch, 8), float32], %w: Tensor[(batch, 8), float32])
    -> Tensor[(batch, 8), float32] {
  tanh(add(multiply(%x, 2f), %w))
}
"""
SELECT = """
def @main(%x: Tensor[(n,), float32]) {
  take(%x, squeeze(argwhere(greater(%x, 0f)), axis=[1]), axis=0)
}
"""


@pytest.fixture(scope="module")
def mlp(cluster: int) -> tuple[Any, Any, str]:
    exe = dynshape.compile(MLP)
    handle = serve.run(
        deployment(exe, batch_symbol="batch", max_batch=64, batch_wait_s=0.05, name="mlp"),
        name="mlp",
        route_prefix="/mlp",
    )
    return handle, dynshape.VirtualMachine(exe), f"http://127.0.0.1:{cluster}/mlp"


@contextmanager
def _deployed(app: Any, name: str) -> Iterator[Any]:
    """A test's own application, deleted after it: the cluster's 2 CPUs hold two replicas."""
    handle = serve.run(app, name=name, route_prefix=f"/{name}")
    try:
        yield handle
    finally:
        serve.delete(name)


def _requests(sizes: list[int], seed: int = 0) -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [
        (
            rng.standard_normal((n, 8)).astype(np.float32),
            rng.standard_normal((n, 8)).astype(np.float32),
        )
        for n in sizes
    ]


def test_handle_calls_are_batched_and_each_gets_its_own_rows(mlp) -> None:
    handle, vm, _ = mlp
    before = handle.stats.remote().result()
    sizes = [1, 3, 2, 5, 1, 4, 2, 7, 1, 1, 6, 3] * 2
    requests = _requests(sizes)
    responses = [handle.run.remote(x, w) for x, w in requests]
    for (x, w), response in zip(requests, responses, strict=True):
        np.testing.assert_array_equal(response.result(), vm.run(x, w))
    after = handle.stats.remote().result()
    made, answered = after["calls"] - before["calls"], after["requests"] - before["requests"]
    assert answered == len(requests)
    assert made < answered, (made, answered)  # batching happened
    # by name too
    x, w = requests[0]
    np.testing.assert_array_equal(handle.run.remote(x=x, w=w).result(), vm.run(x, w))


def test_http_json_and_npz_bodies_concurrently(mlp) -> None:
    _, vm, url = mlp
    requests = _requests([2, 1, 4, 3, 1, 2, 5, 1], seed=1)

    def send(req: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
        status, body = post(url, request_to_json({"x": req[0], "w": req[1]}))
        assert status == 200, body
        (out,) = json.loads(body)["outputs"]
        return np.array(out["data"], dtype=out["dtype"]).reshape(out["shape"])

    with ThreadPoolExecutor(8) as pool:
        got = list(pool.map(send, requests))
    for (x, w), g in zip(requests, got, strict=True):
        np.testing.assert_allclose(g, vm.run(x, w), rtol=1e-6)
    buf = io.BytesIO()
    x, w = requests[2]
    np.savez(buf, x=x, w=w)
    status, body = post(url, buf.getvalue(), "application/x-npz")
    assert status == 200
    with np.load(io.BytesIO(body)) as data:
        np.testing.assert_array_equal(data["out"], vm.run(x, w))


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"not json", "the body is not JSON"),
        (b'{"inputs": {"x": 1}}', "input 'x': expected {dtype, shape, data}"),
        ("f64", "expected dtype float32, got float64"),
        ("rank", "expected rank 2"),
        ("disagree", "the inputs disagree on batch (x axis 0: 2, w axis 0: 3)"),
        ("missing", "missing input(s) 'w' (the model takes: x, w)"),
    ],
)
def test_bad_requests_get_a_400_with_the_projects_message(mlp, body, message) -> None:
    _, _, url = mlp
    x = np.ones((2, 8), np.float32)
    bodies = {
        "f64": request_to_json({"x": x.astype(np.float64), "w": x.astype(np.float64)}),
        "rank": request_to_json(
            {"x": np.ones((2, 8, 1), np.float32), "w": np.ones((2, 8, 1), np.float32)}
        ),
        "disagree": request_to_json({"x": x, "w": np.ones((3, 8), np.float32)}),
        "missing": request_to_json({"x": x}),
    }
    status, reply = post(url, bodies.get(body, body) if isinstance(body, str) else body)
    assert status == 400, reply
    error = json.loads(reply)["error"]
    assert message in error and "Traceback" not in error


def test_a_bad_request_batched_with_good_ones_fails_alone(mlp) -> None:
    handle, vm, _ = mlp
    good = _requests([2, 3], seed=2)
    bad = (np.ones((2, 8), np.float64), np.ones((2, 8), np.float64))
    responses = [handle.run.remote(*r) for r in (good[0], bad, good[1])]
    np.testing.assert_array_equal(responses[0].result(), vm.run(*good[0]))
    np.testing.assert_array_equal(responses[2].result(), vm.run(*good[1]))
    with pytest.raises(Exception) as info:
        responses[1].result()
    assert "expected dtype float32, got float64" in str(info.value)
    assert isinstance(info.value, VMArgumentError) or "VMArgumentError" in repr(info.value)


def test_a_data_dependent_model_is_served_one_request_per_call(cluster: int) -> None:
    exe = dynshape.compile(SELECT)
    vm = dynshape.VirtualMachine(exe)
    rng = np.random.default_rng(3)
    xs = [rng.standard_normal(n).astype(np.float32) for n in (5, 0, 9, 1)]
    with _deployed(deployment(exe, batch_symbol="n", name="select"), "select") as handle:
        responses = [handle.run.remote(x) for x in xs]
        for x, r in zip(xs, responses, strict=True):
            np.testing.assert_array_equal(r.result(), vm.run(x))
        stats = handle.stats.remote().result()
    assert stats["calls"] == stats["requests"] == len(xs)


PADDED = """
def @main(%x: Tensor[(batch, seq, 4), float32], %mask: Tensor[(batch, seq), float32])
    -> (Tensor[(batch, seq, 4), float32], Tensor[(batch,), float32]) {
  %h = tanh(multiply(%x, 2f));
  (%h, sum(multiply(sum(%h, axis=[2]), %mask), axis=[1]))
}
"""


def test_padded_requests_share_calls_on_threads_and_get_their_own_extent(cluster: int) -> None:
    exe = dynshape.compile(PADDED)
    vm = dynshape.VirtualMachine(exe)
    rng = np.random.default_rng(4)
    requests = [
        (
            rng.standard_normal((n, s, 4)).astype(np.float32),
            (rng.random((n, s)) > 0.3).astype(np.float32),
        )
        for n, s in zip(rng.integers(1, 4, 24), rng.integers(1, 9, 24), strict=True)
    ]
    app = deployment(
        exe, batch_symbol="batch", pad={"seq": 0}, threads=2, batch_wait_s=0.2, name="padded"
    )
    with _deployed(app, "padded") as handle:
        responses = [handle.run.remote(*r) for r in requests]
        answers = [r.result() for r in responses]
        stats = handle.stats.remote().result()
    for req, (h, pooled) in zip(requests, answers, strict=True):
        alone = vm.run(*req)
        assert h.shape == alone[0].shape and pooled.shape == alone[1].shape
        np.testing.assert_array_equal(h, alone[0])
        np.testing.assert_allclose(pooled, alone[1], rtol=1e-6, atol=1e-6)
    assert stats["requests"] == len(requests)
    # Ray Serve lets 5 requests into a replica unless told otherwise: 24 in fewer than 5
    # calls means the batches were not capped there, and requests of other seq shared them
    assert stats["calls"] < 5, stats


def test_stats_say_where_the_replica_runs(mlp) -> None:
    handle, _, _ = mlp
    stats = handle.stats.remote().result()
    assert stats["node"] == ray.get_runtime_context().get_node_id()  # one node here
    assert isinstance(stats["pid"], int) and stats["peak_rss_mib"] > 10
    assert ray.nodes()[0]["NodeManagerAddress"] == "127.0.0.1"  # tests/serve/conftest.py


class _FailsOnNaN:
    """A VM whose call fails with an error that is not ours when a row holds NaN (a bug, a
    MemoryError): what a joined call containing one bad request does."""

    def __init__(self, vm: Any) -> None:
        self.vm = vm

    def run(self, *arrays: np.ndarray) -> Any:
        if any(np.isnan(a).any() for a in arrays):
            raise RuntimeError("a failure of the VM itself")
        return self.vm.run(*arrays)


def test_a_joined_call_failing_otherwise_fails_only_its_culprit() -> None:
    from dynshape.serve.deployment import ExecutableServer

    exe = dynshape.compile(MLP)
    server = ExecutableServer(exe.to_bytes(), "batch", 64, 0.0, 1)
    vm = server.vm
    server.vm = _FailsOnNaN(vm)
    good = _requests([2, 3], seed=5)
    poisoned = (np.full((1, 8), np.nan, np.float32), np.ones((1, 8), np.float32))
    answers = server._answer([good[0], poisoned, good[1]])
    np.testing.assert_array_equal(answers[0], vm.run(*good[0]))
    np.testing.assert_array_equal(answers[2], vm.run(*good[1]))
    assert isinstance(answers[1], RuntimeError)
    assert server.stats()["calls"] == 4  # the joined call, then each of the three alone


SEQ = """
def @main(%x: Tensor[(batch, seq, 4), float32], %mask: Tensor[(batch, seq), float32])
    -> Tensor[(batch, seq), float32] {
  multiply(sum(%x, axis=[2]), %mask)
}
"""


def test_a_broken_symbolic_relation_is_a_400_with_the_vms_message(cluster: int) -> None:
    exe = dynshape.compile(SEQ)
    good = (np.ones((2, 3, 4), np.float32), np.ones((2, 3), np.float32))
    broken = (np.ones((1, 3, 4), np.float32), np.ones((1, 4), np.float32))  # seq 3 and 4
    url = f"http://127.0.0.1:{cluster}/seq"
    app = deployment(exe, batch_symbol="batch", batch_wait_s=0.05, name="seq")
    with _deployed(app, "seq"), ThreadPoolExecutor(2) as pool:
        bodies = [request_to_json({"x": x, "mask": m}) for x, m in (good, broken)]
        (ok, ok_body), (status, reply) = pool.map(lambda b: post(url, b), bodies)
    assert ok == 200, ok_body
    (out,) = json.loads(ok_body)["outputs"]
    np.testing.assert_array_equal(
        np.array(out["data"], np.float32).reshape(out["shape"]), 4.0 * good[1]
    )
    assert status == 400, reply
    assert json.loads(reply)["error"].startswith(
        "mask.shape[1] = 4 but seq = 3 was bound by x.shape[1]"
    )
