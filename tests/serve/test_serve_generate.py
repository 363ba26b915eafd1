"""Generation served (issue 31 item 6), on loopback with a local Ray: a Llama-style decoder
behind ``generation_deployment``; tokens streamed as server-sent events equal
``dynshape.generate`` run alone, also for concurrent clients (who share decode steps, counted
by the replica); ``/generate`` answers whole; a client that disconnects leaves the batch; bad
requests get the project's JSON error with a 4xx; the protocol's metadata and health routes
answer; ``python -m dynshape serve decoder.onnx --generate`` serves the same."""

from __future__ import annotations

import http.client
import json
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from serve_testlib import Lazy, post, request, start_serve, url_of

import dynshape
from dynshape.serve.generation_wire import parse_events
from tests.onnx.generate_models import llama

NEEDS = ("ray", "ray.serve")  # imported before the first test (conftest.py)
serve = Lazy("ray.serve")
generation_deployment = Lazy("dynshape.serve.generation_server", "generation_deployment")

NAME = "decoder"
#: High enough that a generation the test leaves cannot finish on its own while it waits.
LIMIT = 100_000
PROMPTS = [[5, 6, 7, 8, 9], [11, 12], [3, 4, 5, 6, 7, 8, 9, 10, 11], [1], [40, 41, 42], [7, 7]]


@pytest.fixture(scope="module")
def session() -> dynshape.InferenceSession:
    return dynshape.InferenceSession(llama())


@pytest.fixture(scope="module")
def app(cluster: int, session: dynshape.InferenceSession) -> Iterator[Any]:
    """The decoder served under /gen: yields the front's handle."""
    handle = serve.run(
        generation_deployment(session.vm.exe, name="gen", model_name=NAME, limit_new_tokens=LIMIT),
        name="gen",
        route_prefix="/gen",
    )
    try:
        yield handle
    finally:
        serve.delete("gen")


def _alone(session: Any, prompt: list[int], new: int, **options: Any) -> list[int]:
    out = dynshape.generate(session, [prompt], new, **options)
    return [int(t) for t in out[0, len(prompt) :]]


def _new(i: int) -> int:
    """The tokens client i asks for (a step takes about a millisecond: enough to overlap)."""
    return 60 + 10 * i


def _url(port: int, route: str) -> str:
    return f"http://127.0.0.1:{port}/gen/v2/models/{NAME}/{route}"


def _stream(port: int, body: dict[str, Any]) -> tuple[int, str, list[tuple[str, Any]]]:
    """POST a generate_stream request: status, content type and its events."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    try:
        conn.request(
            "POST",
            f"/gen/v2/models/{NAME}/generate_stream",
            json.dumps(body),
            {"Content-Type": "application/json"},
        )
        r = conn.getresponse()
        data = r.read()
        if r.status != 200:
            return r.status, r.getheader("content-type") or "", [("error", json.loads(data))]
        return r.status, r.getheader("content-type") or "", parse_events(data)
    finally:
        conn.close()


def _tokens(events: list[tuple[str, Any]]) -> list[int]:
    *tokens, last = events
    assert all(name == "message" for name, _ in events), events
    assert [doc["index"] for _, doc in tokens] == list(range(len(tokens)))
    ids = [doc["token_id"] for _, doc in tokens]
    assert last[1]["output_ids"] == ids and last[1]["model_name"] == NAME
    return ids


def test_a_stream_equals_generate_alone(cluster: int, app: Any, session: Any) -> None:
    status, ctype, events = _stream(
        cluster, {"input_ids": PROMPTS[0], "parameters": {"max_new_tokens": 8}, "id": "a"}
    )
    assert status == 200 and ctype.startswith("text/event-stream")
    assert _tokens(events) == _alone(session, PROMPTS[0], 8)
    assert events[-1][1]["finish_reason"] == "length" and events[-1][1]["id"] == "a"


def test_concurrent_streams_share_steps_and_equal_alone(
    cluster: int, app: Any, session: Any
) -> None:
    results: dict[int, list[int]] = {}
    errors: list[BaseException] = []

    def client(i: int) -> None:
        try:
            time.sleep(0.005 * i)  # they join the running batch at different steps
            prompt, new = PROMPTS[i % len(PROMPTS)], _new(i)
            status, _, events = _stream(
                cluster, {"input_ids": prompt, "parameters": {"max_new_tokens": new}}
            )
            assert status == 200, events
            results[i] = _tokens(events)
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    for i in range(8):
        assert results[i] == _alone(session, PROMPTS[i % len(PROMPTS)], _new(i)), i
    stats = app.stats.remote().result()
    assert max(stats["recent_decode_rows"]) > 1  # generations shared decode calls
    assert stats["failed"] == 0


def test_generate_answers_whole_with_eos(cluster: int, app: Any, session: Any) -> None:
    expected = _alone(session, PROMPTS[1], 10)
    eos = expected[3]
    body = {"input_ids": PROMPTS[1], "parameters": {"max_new_tokens": 10, "eos_token_id": eos}}
    status, out = post(_url(cluster, "generate"), json.dumps(body).encode())
    doc = json.loads(out)
    assert status == 200, doc
    assert doc["output_ids"] == _alone(session, PROMPTS[1], 10, eos_token_id=eos)
    assert doc["output_ids"][-1] == eos and doc["finish_reason"] == "eos"


def test_sampled_with_a_seed_streams_what_it_draws_alone(
    cluster: int, app: Any, session: Any
) -> None:
    options = {"do_sample": True, "temperature": 0.7, "top_k": 20, "seed": 5}
    body = {"input_ids": PROMPTS[2], "parameters": {"max_new_tokens": 6, **options}}
    status, _, events = _stream(cluster, body)
    assert status == 200
    assert _tokens(events) == _alone(session, PROMPTS[2], 6, **options)


def test_a_client_that_disconnects_leaves_the_batch(cluster: int, app: Any) -> None:
    before = app.stats.remote().result()
    conn = http.client.HTTPConnection("127.0.0.1", cluster, timeout=60)
    body = {"input_ids": PROMPTS[0], "parameters": {"max_new_tokens": LIMIT}}
    conn.request("POST", f"/gen/v2/models/{NAME}/generate_stream", json.dumps(body))
    r = conn.getresponse()
    assert r.status == 200
    assert r.readline().startswith(b"data: ")  # the first token came
    conn.close()  # the client goes away
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        stats = app.stats.remote().result()
        if stats["active"] == 0 and stats["cancelled"] > before["cancelled"]:
            break
        time.sleep(0.2)
    else:
        raise AssertionError(f"the generation did not leave the batch: {stats}")
    # it left long before its tokens were all made
    assert stats["tokens"] - before["tokens"] < LIMIT // 10
    assert stats["finished"] == before["finished"]


@pytest.mark.parametrize(
    ("body", "status", "message"),
    [
        (b"{", 400, "the body is not JSON"),
        (b"[1, 2]", 400, "the body must be a JSON object"),
        (b'{"prompt": [1]}', 400, "unknown field 'prompt' (known: id, input_ids, parameters)"),
        (b'{"parameters": {}}', 400, "the body has no 'input_ids'"),
        (b'{"input_ids": [1, 5000]}', 400, "input_ids[0, 1] = 5000 is not a token id"),
        (b'{"input_ids": []}', 400, "input_ids is empty"),
        (
            b'{"input_ids": [1], "parameters": {"max_new_tokens": 100001}}',
            400,
            "max_new_tokens 100001 is beyond this server's limit of 100000",
        ),
        (
            b'{"input_ids": [1], "parameters": {"temperature": 0.5}}',
            400,
            "temperature=0.5 is for sampling: pass do_sample=True",
        ),
    ],
)
@pytest.mark.parametrize("route", ["generate", "generate_stream"])
def test_bad_requests_get_a_json_4xx(
    cluster: int, app: Any, route: str, body: bytes, status: int, message: str
) -> None:
    got, out = post(_url(cluster, route), body)
    assert got == status, out
    assert message in json.loads(out)["error"]


def test_protocol_routes_answer(cluster: int, app: Any) -> None:
    base = f"http://127.0.0.1:{cluster}/gen/v2"
    assert request(f"{base}/health/ready")[0] == 200
    assert request(f"{base}/models/{NAME}/ready")[0] == 200
    status, out = request(f"{base}/models/{NAME}")
    meta = json.loads(out)
    assert status == 200 and meta["name"] == NAME
    assert "input_ids" in {t["name"] for t in meta["inputs"]}
    status, out = post(f"{base}/models/{NAME}/infer", b"{}")
    assert status == 404 and "is served for generation" in json.loads(out)["error"]
    status, out = request(f"{base}/models/{NAME}/generate_stream")
    assert status == 405 and "takes POST, not GET" in json.loads(out)["error"]
    status, out = request(f"{base}/models/{NAME}/stats")
    counts = json.loads(out)["model_stats"][0]
    assert status == 200 and counts["inference_count"] > 0


def test_cli_serves_a_decoder_onnx_with_generate(tmp_path: Path, session: Any) -> None:
    import onnx

    onnx.save(llama(), tmp_path / "decoder.onnx")
    proc, line = start_serve(tmp_path, "decoder.onnx", "--generate", "--port", "0")
    try:
        assert "as /v2/models/decoder/generate_stream " in line, line
        url = url_of(line)
        body = {"input_ids": PROMPTS[4], "parameters": {"max_new_tokens": 5}}
        status, out = post(f"{url}/v2/models/decoder/generate", json.dumps(body).encode())
        assert status == 200, out
        assert json.loads(out)["output_ids"] == _alone(session, PROMPTS[4], 5)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err[-2000:]
