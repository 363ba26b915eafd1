"""A bounded load against a served executable (issue 18, item 5): 1 and 2 replicas, with and
without batching, through the Ray Serve handle from a local client on the loopback.

For each configuration the same requests (an MLP of 3 dense layers of 256 with constant
weights, 1 to 8 rows per request, drawn once) are sent by ``--clients`` concurrent client
threads, each keeping one request in flight, ``--requests`` in all; the script prints
throughput (requests per second), p50 and p99 latency, the model calls the replicas made, and
the cost of the Ray hop alone: the p50 of a handle call to a method that does nothing, beside
the model's own time per request measured on a VM in this process. Needs the ``serve`` extra
(without it, it says so and exits 0).

    python benchmarks/serve_load.py [--quick] [--requests N] [--clients C]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import dynshape


def _percentile(xs: Sequence[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))]


def _load(handle: Any, requests: list[tuple[np.ndarray, ...]], clients: int) -> dict[str, float]:
    latencies: list[float] = []
    lock = threading.Lock()
    work = iter(requests)

    def client() -> None:
        while True:
            with lock:
                req = next(work, None)
            if req is None:
                return
            t0 = time.perf_counter()
            handle.run.remote(*req).result()
            dt = time.perf_counter() - t0
            with lock:
                latencies.append(dt)

    threads = [threading.Thread(target=client) for _ in range(clients)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    return {
        "rps": len(latencies) / wall,
        "p50": _percentile(latencies, 0.5),
        "p99": _percentile(latencies, 0.99),
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a short load, 1 replica (CI)")
    parser.add_argument("--requests", type=int, default=400)
    parser.add_argument("--clients", type=int, default=16)
    args = parser.parse_args(argv)
    try:
        import ray
        from ray import serve

        from dynshape.serve.deployment import deployment
    except ImportError as e:
        print(f"serve_load: needs the serve extra (pip install -e '.[serve]'): {e}")
        return 0
    n_requests = 40 if args.quick else args.requests
    rng = np.random.default_rng(0)
    weights = [rng.standard_normal((256, 256)).astype(np.float32) / 16 for _ in range(3)]
    exe = _mlp(weights)  # main(x: (batch, 256)): the weights are constants, x alone is batched
    requests = [
        (rng.standard_normal((int(n), 256)).astype(np.float32),)
        for n in rng.integers(1, 9, n_requests)
    ]
    vm = dynshape.VirtualMachine(exe)
    t0 = time.perf_counter()
    for r in requests:
        vm.run(*r)
    model_s = (time.perf_counter() - t0) / len(requests)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    load = uptime_load()
    print(f"machine load before: {load}; {len(requests)} requests, {args.clients} clients")
    print(f"model alone (a VM in this process): {model_s * 1e3:.3f} ms per request")
    columns = ("replicas", "batching", "req/s", "p50 ms", "p99 ms", "one replica: calls / requests")
    print("| " + " | ".join((*columns, "hop p50 ms")) + " |")
    print("|---|---|---|---|---|---|---|")
    try:
        configs = (
            [(1, False), (1, True)]
            if args.quick
            else [(1, False), (1, True), (2, False), (2, True)]
        )
        for replicas, batching in configs:
            name = f"mlp{replicas}{'b' if batching else ''}"
            app = deployment(
                exe,
                batch_symbol="batch" if batching else None,
                max_batch=64,
                batch_wait_s=0.002,
                replicas=replicas,
                name=name,
            )
            handle = serve.run(app, name=name, route_prefix=f"/{name}")
            handle.run.remote(*requests[0]).result()  # warm
            hop = [_timed(handle.stats.remote) for _ in range(50)]
            before = handle.stats.remote().result()
            got = _load(handle, requests, args.clients)
            after = handle.stats.remote().result()
            # stats() reaches one replica (the handle routes it): its own counts
            calls = after["calls"] - before["calls"]
            answered = after["requests"] - before["requests"]
            print(
                f"| {replicas} | {'yes' if batching else 'no'} | {got['rps']:.0f} | "
                f"{got['p50'] * 1e3:.2f} | {got['p99'] * 1e3:.2f} | {calls} / {answered} | "
                f"{statistics.median(hop) * 1e3:.2f} |"
            )
            serve.delete(name)
    finally:
        serve.shutdown()
        ray.shutdown()
    print(f"machine load after: {uptime_load()}")
    return 0


def _mlp(weights: list[np.ndarray]) -> Any:
    """Three dense layers with ReLU, the weights as constants: ``main(x: (batch, 256))``."""
    x = dynshape.tensor("x", ("batch", 256), np.float32)
    h = x
    for w in weights:
        h = dynshape.relu(h @ dynshape.constant_of(np.ascontiguousarray(w.T)))
    return dynshape.compile(dynshape.build(h, inputs=[x]))


def _timed(call: Any) -> float:
    """Seconds of one handle call and its result."""
    t0 = time.perf_counter()
    call().result()
    return time.perf_counter() - t0


def uptime_load() -> str:
    try:
        return Path("/proc/loadavg").read_text().split()[0]
    except OSError:
        return "unknown"


if __name__ == "__main__":
    sys.exit(main())
