"""The generation rows of ``serve_load.py`` (issue 31 item 6): a decoder served with
``generation_deployment`` on loopback, loaded by HTTP clients that read the server-sent events
as they come (as a user's client does).

The same requests (prompts of 4 to 32 tokens, ``--new-tokens`` greedy tokens each, drawn once)
are sent one at a time (1 client), then by 4 and by 16 concurrent clients, each keeping one
generation in flight; with the batcher joining generations per decode step (continuous
batching) and, for comparison, with each generation in calls of its own (``join=False``: the
replica still interleaves them, one call per generation per step). Each row: tokens per second
(all new tokens over the wall time), the speed-up against one at a time, the p50 and p99 time
to first token (from sending the request to reading the first token's event), the mean rows of
a decode call (the replica's count), and how many generations differ from
``dynshape.generate`` run alone on the same prompt (must be 0).
"""

from __future__ import annotations

import http.client
import json
import socket
import threading
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

import dynshape

#: (clients, join): one at a time first, the baseline of the speed-ups.
ROWS = [(1, True), (4, True), (4, False), (16, True), (16, False)]
QUICK_ROWS = [(1, True), (4, True)]


def _percentile(xs: Sequence[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _stream(port: int, path: str, body: bytes) -> tuple[float, list[int]]:
    """One generation read as it streams: seconds to its first token, its tokens."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
    try:
        t0 = time.perf_counter()
        conn.request("POST", path, body, {"Content-Type": "application/json"})
        r = conn.getresponse()
        if r.status != 200:
            raise RuntimeError(f"HTTP {r.status}: {r.read()[:200]!r}")
        first, tokens = float("nan"), []
        for line in r:
            if not line.startswith(b"data: "):
                continue
            doc = json.loads(line[6:])
            if "token_id" not in doc:
                break
            if not tokens:
                first = time.perf_counter() - t0
            tokens.append(doc["token_id"])
        return first, tokens
    finally:
        conn.close()


def _load(port: int, path: str, bodies: list[bytes], clients: int) -> dict[str, Any]:
    results: list[tuple[int, float, list[int]]] = []
    lock = threading.Lock()
    work = iter(enumerate(bodies))

    def client() -> None:
        while True:
            with lock:
                item = next(work, None)
            if item is None:
                return
            i, body = item
            first, tokens = _stream(port, path, body)
            with lock:
                results.append((i, first, tokens))

    threads = [threading.Thread(target=client) for _ in range(clients)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    ttft = [r[1] for r in results]
    return {
        "tokens": sum(len(r[2]) for r in results),
        "wall": wall,
        "ttft_p50": _percentile(ttft, 0.5),
        "ttft_p99": _percentile(ttft, 0.99),
        "outputs": {i: tokens for i, _, tokens in results},
    }


def generation_rows(
    decoder: Any, *, requests: int, new_tokens: int, quick: bool, label: str
) -> None:
    """Serve ``decoder`` (an ONNX ModelProto of a decoder step) and print the rows."""
    from ray import serve

    from dynshape.serve.generation_server import generation_deployment

    session = dynshape.InferenceSession(decoder)
    rng = np.random.default_rng(0)
    prompts = [rng.integers(0, 1000, int(n)).tolist() for n in rng.integers(4, 33, requests)]
    bodies = [
        json.dumps({"input_ids": p, "parameters": {"max_new_tokens": new_tokens}}).encode()
        for p in prompts
    ]
    t0 = time.perf_counter()
    alone = [dynshape.generate(session, [p], new_tokens)[0, len(p) :].tolist() for p in prompts]
    in_process = requests * new_tokens / (time.perf_counter() - t0)
    print(
        f"\n## generation: {label}, {requests} requests of {new_tokens} new tokens, prompts of "
        f"4-32 tokens\nin process, dynshape.generate one at a time: {in_process:.0f} tokens/s"
    )
    port = _free_port()
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    columns = ("clients", "joined per step", "tokens/s", "x one at a time", "TTFT p50 ms")
    print(
        "| "
        + " | ".join((*columns, "TTFT p99 ms", "mean rows a decode call", "differ from alone"))
        + " |"
    )
    print("|" + "---|" * (len(columns) + 3))
    base = None
    for clients, join in QUICK_ROWS if quick else ROWS:
        name = f"gen{clients}{'j' if join else 's'}"
        handle = serve.run(
            generation_deployment(session.vm.exe, name=name, model_name="decoder", join=join),
            name=name,
            route_prefix=f"/{name}",
        )
        path = f"/{name}/v2/models/decoder/generate_stream"
        try:
            _load(port, path, bodies[:2], 2)  # warm: the replica decodes on first use
            before = handle.stats.remote().result()
            got = _load(port, path, bodies, clients)
            after = handle.stats.remote().result()
        finally:
            serve.delete(name)
        rate = got["tokens"] / got["wall"]
        base = base or rate
        calls = after["decode_calls"] - before["decode_calls"]
        rows = (after["decode_rows"] - before["decode_rows"]) / max(calls, 1)
        wrong = sum(got["outputs"].get(i) != a for i, a in enumerate(alone))
        print(
            f"| {clients} | {'yes' if join else 'no'} | {rate:.0f} | {rate / base:.2f} | "
            f"{got['ttft_p50'] * 1e3:.1f} | {got['ttft_p99'] * 1e3:.1f} | {rows:.2f} | "
            f"{wrong} / {requests} |",
            flush=True,
        )
