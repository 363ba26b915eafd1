"""The deployment speaks the Open Inference Protocol (issue 31): a real client of it
(``tritonclient.http``) checks health, reads the metadata (symbolic dims as -1 with their names)
and sends FP32 and INT64 requests, as binary data and as JSON, each answer compared with the
VM run directly; its errors are the protocol's ``{"error": ...}`` with the right status. Values
beyond a dtype are refused in both JSON bodies, and a request whose run exceeds its step limit
or timeout is answered with the VM's message while the replica goes on serving."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from serve_testlib import Lazy, post, request

import dynshape
from tests.vm.test_limits import _countdown

NEEDS = ("ray", "ray.serve", "tritonclient.http")  # imported before the first test (conftest.py)
serve = Lazy("ray.serve")
http = Lazy("tritonclient.http")
deployment = Lazy("dynshape.serve.deployment", "deployment")

MLP = """
def @main(%x: Tensor[(batch, 8), float32], %w: Tensor[(batch, 8), float32])
    -> Tensor[(batch, 8), float32] where batch in [1, 256] {
  tanh(add(multiply(%x, 2f), %w))
}
"""
IDS = """
def @main(%ids: Tensor[(batch, seq), int64]) -> (Tensor[(batch, seq), int64], Tensor[(batch,), int64]) {
  (multiply(%ids, %ids), sum(%ids, axis=[1]))
}
"""


@pytest.fixture(scope="module")
def apps(cluster: int) -> Iterator[dict[str, Any]]:
    """Two models served side by side (each under its own route prefix), and their VMs."""
    exes = {"mlp": dynshape.compile(MLP), "ids": dynshape.compile(IDS)}
    for name, exe in exes.items():
        batch = "batch" if name == "mlp" else None
        # a half CPU each: the cluster's two hold these and a test's own deployment
        app = deployment(exe, batch_symbol=batch, name=name, model_name=name, cpus_per_replica=0.5)
        serve.run(app, name=name, route_prefix=f"/{name}")
    try:
        yield {name: dynshape.VirtualMachine(exe) for name, exe in exes.items()}
    finally:
        for name in exes:
            serve.delete(name)


def _client(port: int, prefix: str) -> Any:
    return http.InferenceServerClient(f"127.0.0.1:{port}/{prefix}", connection_timeout=60.0)


def test_health_and_metadata_through_the_client(cluster: int, apps: dict[str, Any]) -> None:
    client = _client(cluster, "mlp")
    assert client.is_server_live() and client.is_server_ready()
    assert client.is_model_ready("mlp") and client.is_model_ready("mlp", "1")
    assert not client.is_model_ready("other")
    assert "binary_tensor_data" in client.get_server_metadata()["extensions"]
    meta = client.get_model_metadata("mlp")
    assert meta["inputs"] == [
        {"name": "x", "datatype": "FP32", "shape": [-1, 8], "dynshape_shape": ["batch", 8]},
        {"name": "w", "datatype": "FP32", "shape": [-1, 8], "dynshape_shape": ["batch", 8]},
    ]
    assert meta["outputs"][0]["shape"] == [-1, 8]
    assert meta["dynshape_dims"] == {"batch": {"min": 1, "max": 256}}
    ids = _client(cluster, "ids").get_model_metadata("ids")
    assert [i["shape"] for i in ids["inputs"]] == [[-1, -1]]
    assert [o["datatype"] for o in ids["outputs"]] == ["INT64", "INT64"]


@pytest.mark.parametrize("binary", [True, False])
def test_fp32_requests_get_the_vm_s_answers(
    cluster: int, apps: dict[str, Any], binary: bool
) -> None:
    client = _client(cluster, "mlp")
    rng = np.random.default_rng(1)
    for rows in (1, 3, 7):
        x = rng.standard_normal((rows, 8)).astype(np.float32)
        w = rng.standard_normal((rows, 8)).astype(np.float32)
        inputs = [http.InferInput("x", [rows, 8], "FP32"), http.InferInput("w", [rows, 8], "FP32")]
        inputs[0].set_data_from_numpy(x, binary_data=binary)
        inputs[1].set_data_from_numpy(w, binary_data=binary)
        outputs = [http.InferRequestedOutput("output0", binary_data=binary)]
        result = client.infer("mlp", inputs, outputs=outputs, request_id=f"r{rows}")
        assert result.get_response()["id"] == f"r{rows}"
        assert result.get_response()["model_name"] == "mlp"
        if binary:  # bit for bit through the bytes; JSON goes through decimal text
            np.testing.assert_array_equal(result.as_numpy("output0"), apps["mlp"].run(x, w))
        else:
            np.testing.assert_allclose(result.as_numpy("output0"), apps["mlp"].run(x, w), 1e-6)


def test_int64_requests_get_the_vm_s_answers(cluster: int, apps: dict[str, Any]) -> None:
    client = _client(cluster, "ids")
    rng = np.random.default_rng(2)
    for shape in [(1, 5), (4, 2), (2, 0)]:
        ids = rng.integers(-(2**31), 2**31, shape).astype(np.int64)
        inp = http.InferInput("ids", list(shape), "INT64")
        inp.set_data_from_numpy(ids)
        result = client.infer("ids", [inp])  # no outputs named: all, as binary data
        squares, sums = apps["ids"].run(ids)
        np.testing.assert_array_equal(result.as_numpy("output0"), squares)
        np.testing.assert_array_equal(result.as_numpy("output1"), sums)
        assert result.as_numpy("output1").dtype == np.int64


def test_the_clients_statistics_count_each_answer(cluster: int, apps: dict[str, Any]) -> None:
    """``GET /v2/models/NAME/stats`` (the front's counters) read by tritonclient."""
    client = _client(cluster, "ids")

    def counts() -> dict[str, Any]:
        (stats,) = client.get_inference_statistics("ids")["model_stats"]
        return dict(stats["dynshape_http"]["by_status"])

    before = counts()
    inp = http.InferInput("ids", [1, 2], "INT64")
    inp.set_data_from_numpy(np.array([[1, 2]], np.int64))
    client.infer("ids", [inp])
    bad = {"inputs": [{"name": "ids", "shape": [1, 2], "datatype": "FP32", "data": [1, 2]}]}
    status, _ = post(
        f"http://127.0.0.1:{cluster}/ids/v2/models/ids/infer", json.dumps(bad).encode()
    )
    assert status == 400
    after = counts()
    assert after.get("200", 0) - before.get("200", 0) == 1
    assert after.get("400", 0) - before.get("400", 0) == 1


def test_the_issue_s_curl_request(cluster: int, apps: dict[str, Any]) -> None:
    """The README's example body: JSON in, JSON out, named outputs."""
    body = {"inputs": [{"name": "ids", "shape": [1, 4], "datatype": "INT64", "data": [1, 2, 3, 4]}]}
    status, answer = post(
        f"http://127.0.0.1:{cluster}/ids/v2/models/ids/infer", json.dumps(body).encode()
    )
    assert status == 200
    assert json.loads(answer)["outputs"] == [
        {"name": "output0", "datatype": "INT64", "shape": [1, 4], "data": [1, 4, 9, 16]},
        {"name": "output1", "datatype": "INT64", "shape": [1], "data": [10]},
    ]
    status, answer = request(f"http://127.0.0.1:{cluster}/ids/v2/health/ready")
    assert status == 200


def _refusal(client: Any, model: str, inputs: list[Any]) -> tuple[int, str]:
    with pytest.raises(Exception) as e:
        client.infer(model, inputs)
    assert isinstance(e.value, http.InferenceServerException), e.value
    return int(e.value.status()), e.value.message()


def _tensor(name: str, array: np.ndarray) -> Any:
    t = http.InferInput(
        name, list(array.shape), {np.float32: "FP32", np.int64: "INT64"}[array.dtype.type]
    )
    t.set_data_from_numpy(array)
    return t


def test_errors_are_the_protocol_s_with_their_status(cluster: int, apps: dict[str, Any]) -> None:
    client = _client(cluster, "mlp")
    x, w = np.zeros((2, 8), np.float32), np.zeros((2, 8), np.float32)
    status, message = _refusal(client, "mlp", [_tensor("x", x.astype(np.int64)), _tensor("w", w)])
    assert (status, message) == (400, "input 'x': datatype INT64, the model takes FP32")
    status, message = _refusal(client, "mlp", [_tensor("x", x)])
    assert (status, message) == (400, "missing input(s) 'w' (the model takes: x, w)")
    status, message = _refusal(client, "mlp", [_tensor("x", x), _tensor("w", w[:, :4])])
    assert status == 400 and message.startswith("input 'w': shape [2, 4] has 4 on axis 1")
    status, message = _refusal(client, "other", [_tensor("x", x)])
    assert (status, message) == (404, "unknown model 'other' (this server serves 'mlp')")
    # what only the VM and the batch plan check: a relation, a declared range
    status, message = _refusal(client, "mlp", [_tensor("x", x), _tensor("w", w[:1])])
    assert status == 400 and "batch" in message, message
    big = np.zeros((300, 8), np.float32)
    status, message = _refusal(client, "mlp", [_tensor("x", big), _tensor("w", big)])
    assert status == 400 and "batch" in message and "256" in message, message
    status, answer = request(f"http://127.0.0.1:{cluster}/mlp/v2/models/mlp/infer")  # a GET
    assert status == 405
    assert json.loads(answer) == {"error": "/v2/models/mlp/infer takes POST, not GET"}
    for route in ("generate", "generate_stream"):  # a model served for inference
        status, answer = post(f"http://127.0.0.1:{cluster}/mlp/v2/models/mlp/{route}", b"{}")
        assert status == 404 and "serve a decoder with --generate" in json.loads(answer)["error"]


@pytest.mark.parametrize("literal", ["1e400", "-1e400"])
def test_numbers_beyond_float64_are_refused_in_both_bodies(
    cluster: int, apps: dict[str, Any], literal: str
) -> None:
    w = json.dumps([0.0] * 8)
    x = f"[1, {literal}, 0, 0, 0, 0, 0, 0]"
    own = f'{{"inputs": {{"x": {{"dtype": "float32", "shape": [1, 8], "data": {x}}}, '
    own += f'"w": {{"dtype": "float32", "shape": [1, 8], "data": {w}}}}}}}'
    protocol = f'{{"inputs": [{{"name": "x", "shape": [1, 8], "datatype": "FP32", "data": {x}}}, '
    protocol += f'{{"name": "w", "shape": [1, 8], "datatype": "FP32", "data": {w}}}]}}'
    base = f"http://127.0.0.1:{cluster}/mlp"
    for url, body in ((f"{base}/", own), (f"{base}/v2/models/mlp/infer", protocol)):
        status, answer = post(url, body.encode())
        assert status == 400, answer
        assert json.loads(answer) == {
            "error": f"input 'x': data do not fit float32: element 1 is {literal}, beyond even "
            "float64's range"
        }


@pytest.mark.parametrize(
    ("budget", "message"),
    [
        ({"max_steps": 10_000}, "the run exceeded max_steps=10000 steps"),
        ({"max_steps": None, "timeout_s": 0.5}, "the run exceeded its timeout of 0.5 s"),
    ],
)
def test_a_run_past_its_budget_is_answered_and_the_replica_serves_on(
    cluster: int, budget: dict[str, Any], message: str
) -> None:
    """A countdown of k steps: k = 10**15 does not end in any budget, k = 50 does."""
    exe = _countdown(tail=True).build()
    serve.run(
        deployment(exe, name="loop", model_name="loop", cpus_per_replica=0.5, **budget),
        name="loop",
        route_prefix="/loop",
    )
    try:
        url = f"http://127.0.0.1:{cluster}/loop"
        for k in (10**15, 50, 10**15, 7):
            body = {"inputs": [{"name": "k", "shape": [], "datatype": "INT64", "data": [k]}]}
            status, answer = post(f"{url}/v2/models/loop/infer", json.dumps(body).encode())
            if k > 10**6:
                assert status == 422, answer
                assert json.loads(answer)["error"].startswith(message)
            else:
                assert status == 200, answer
                (out,) = json.loads(answer)["outputs"]
                want = dynshape.VirtualMachine(exe).run(np.int64(k))
                assert out["data"] == [int(want)] and out["datatype"] == "INT64"
        own = {"inputs": {"k": {"dtype": "int64", "shape": [], "data": [10**15]}}}
        status, answer = post(f"{url}/", json.dumps(own).encode())
        assert status == 422 and json.loads(answer)["error"].startswith(message)
    finally:
        serve.delete("loop")


def test_budgets_are_checked_before_any_replica_starts() -> None:
    exe = dynshape.compile(MLP)
    with pytest.raises(dynshape.DynShapeError, match=r"max_steps \(0\) must be > 0, or None"):
        deployment(exe, max_steps=0)
    with pytest.raises(dynshape.DynShapeError, match=r"timeout_s \(-1\) must be > 0, or None"):
        deployment(exe, timeout_s=-1)
    with pytest.raises(dynshape.DynShapeError, match="model name 'a/b': a non-empty name"):
        deployment(exe, model_name="a/b")
