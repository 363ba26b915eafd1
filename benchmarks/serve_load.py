"""A bounded load against a served executable (issue 18, item 5): 1 and 2 replicas, one or
two threads a replica, with and without batching, through the Ray Serve handle from a local
client on the loopback.

Two models, both ``main(x: (batch, width))`` with constant weights: ``small`` (3 dense layers
of 256: the Ray hop dominates) and ``wide`` (4 dense layers of 2048, 64 MiB of weights: one
request's call reads all the weights, so batching pays). For each configuration the same
requests (1 to 8 rows, drawn once) are sent by ``--clients`` client threads, each keeping one
request in flight, ``--requests`` in all; the script prints throughput (requests per second),
p50 and p99 latency, the model calls against the requests (summed over the replicas), the
replicas' peak memory, and the cost of the Ray hop alone: the p50 of a handle call to a method
that does nothing. Before that, without Ray, the model's own time per request (the VM against
the same layers in plain numpy, one request a call and batched by 64 rows) and what two threads
get from one shared VM against a VM each (what a replica with ``threads=2`` does). Needs the
``serve`` extra for the load (without it, it says so and measures the rest).

With ``--generation``, the generation rows instead (``serve_generation.py``): a Llama-style
decoder served with ``--generate``, tokens per second with 1, 4 and 16 concurrent streaming
clients against one at a time, with and without joining per decode step, and the p50/p99 time
to first token.

    python benchmarks/serve_load.py [--quick] [--requests N] [--clients C] [--models small,wide]
    python benchmarks/serve_load.py --generation [--quick] [--requests N] [--new-tokens N]
                                    [--layers N]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import dynshape
from dynshape.serve.local import keep_ray_on_loopback

#: name -> (width, layers)
MODELS = {"small": (256, 3), "wide": (2048, 4)}
#: (replicas, threads a replica, batching)
CONFIGS = [(1, 1, False), (1, 1, True), (1, 2, True), (2, 1, False), (2, 1, True)]
QUICK_CONFIGS = [(1, 1, False), (1, 1, True)]

Request = tuple[np.ndarray, ...]


def _percentile(xs: Sequence[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))]


def _mlp(weights: list[np.ndarray]) -> Any:
    """Dense layers with ReLU, the weights as constants: ``main(x: (batch, width))``."""
    x = dynshape.tensor("x", ("batch", weights[0].shape[0]), np.float32)
    h = x
    for w in weights:
        h = dynshape.relu(h @ dynshape.constant_of(w))
    return dynshape.compile(dynshape.build(h, inputs=[x]))


def _numpy_mlp(weights: list[np.ndarray]) -> Callable[[np.ndarray], np.ndarray]:
    def run(x: np.ndarray) -> np.ndarray:
        for w in weights:
            x = np.maximum(x @ w, 0)
        return x

    return run


def _median_time(fn: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def model_alone(exe: Any, weights: list[np.ndarray], requests: list[Request], repeats: int) -> None:
    """The model's time per request without Ray: the VM against numpy, interleaved, one
    request a call and 64 rows a call."""
    vm = dynshape.VirtualMachine(exe)
    ref = _numpy_mlp(weights)
    rows = np.concatenate([r[0] for r in requests])[:64]
    per: dict[str, list[float]] = {"vm": [], "numpy": [], "vm64": [], "numpy64": []}
    for _ in range(repeats):  # interleaved: the same moments of the machine for both
        per["vm"].append(_median_time(lambda: [vm.run(*r) for r in requests], 1) / len(requests))
        per["numpy"].append(_median_time(lambda: [ref(*r) for r in requests], 1) / len(requests))
        per["vm64"].append(_median_time(lambda: vm.run(rows), 3) / len(rows))
        per["numpy64"].append(_median_time(lambda: ref(rows), 3) / len(rows))
    m = {k: statistics.median(v) for k, v in per.items()}
    print(
        f"model alone, per request ({np.mean([len(r[0]) for r in requests]):.1f} rows): "
        f"VM {m['vm'] * 1e3:.3f} ms, numpy {m['numpy'] * 1e3:.3f} ms "
        f"({m['vm'] / m['numpy']:.2f}x); per row in calls of 64 rows: VM "
        f"{m['vm64'] * 1e3:.3f} ms, numpy {m['numpy64'] * 1e3:.3f} ms "
        f"({m['vm64'] / m['numpy64']:.2f}x); batching saves "
        f"{m['vm'] / (m['vm64'] * np.mean([len(r[0]) for r in requests])):.1f}x of the model's time"
    )


def shared_vm(exe: Any, requests: list[Request], repeats: int) -> None:
    """Two threads on one VM against two threads with a VM each and one thread: calls a
    second, medians of interleaved repeats."""
    one = dynshape.VirtualMachine(exe)
    each = [dynshape.VirtualMachine(exe), dynshape.VirtualMachine(exe)]
    for vm in (one, *each):
        vm.run(*requests[0])  # warm: decode, pool

    def run_on(vms: list[Any]) -> float:
        halves = [requests[0::2], requests[1::2]][: len(vms)] if len(vms) > 1 else [requests]
        t0 = time.perf_counter()
        with ThreadPoolExecutor(len(vms)) as pool:
            list(pool.map(lambda p: [p[0].run(*r) for r in p[1]], zip(vms, halves, strict=True)))
        return len(requests) / (time.perf_counter() - t0)

    got: dict[str, list[float]] = {
        "1 thread": [],
        "2 threads, one VM": [],
        "2 threads, a VM each": [],
    }
    for _ in range(repeats):
        got["1 thread"].append(run_on([one]))
        got["2 threads, one VM"].append(run_on([one, one]))
        got["2 threads, a VM each"].append(run_on(each))
    base = statistics.median(got["1 thread"])
    print(
        "in one process: "
        + "; ".join(
            f"{k} {statistics.median(v):.0f} calls/s ({statistics.median(v) / base:.2f}x)"
            for k, v in got.items()
        )
    )


def _load(handle: Any, requests: list[Request], clients: int) -> dict[str, float]:
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


def _replica_stats(handle: Any, replicas: int) -> dict[int, dict[str, Any]]:
    """Each replica's stats by pid: concurrent calls reach every replica (bounded tries)."""
    seen: dict[int, dict[str, Any]] = {}
    for _ in range(10):
        for s in [r.result() for r in [handle.stats.remote() for _ in range(4 * replicas)]]:
            seen[s["pid"]] = s
        if len(seen) >= replicas:
            break
    return seen


def serve_load(
    exe: Any, requests: list[Request], clients: int, configs: list[tuple[int, int, bool]]
) -> None:
    from ray import serve

    from dynshape.serve.deployment import deployment

    columns = ("replicas", "threads", "batching", "req/s", "p50 ms", "p99 ms", "calls / requests")
    print("| " + " | ".join((*columns, "peak MiB (replicas)", "hop p50 ms")) + " |")
    print("|" + "---|" * (len(columns) + 2))
    for replicas, threads, batching in configs:
        name = f"load{replicas}{threads}{'b' if batching else ''}"
        app = deployment(
            exe,
            batch_symbol="batch" if batching else None,
            max_batch=64,
            batch_wait_s=0.002,
            replicas=replicas,
            threads=threads,
            name=name,
        )
        handle = serve.run(app, name=name, route_prefix=f"/{name}")
        try:
            for r in requests[:8]:
                handle.run.remote(*r).result()  # warm: every replica decodes on first use
            hop = [_timed(handle.stats.remote) for _ in range(50)]
            before = _replica_stats(handle, replicas)
            got = _load(handle, requests, clients)
            after = _replica_stats(handle, replicas)
        finally:
            serve.delete(name)
        calls = sum(s["calls"] - before.get(p, {"calls": 0})["calls"] for p, s in after.items())
        answered = sum(
            s["requests"] - before.get(p, {"requests": 0})["requests"] for p, s in after.items()
        )
        memory = sum(s["peak_rss_mib"] for s in after.values())
        print(
            f"| {replicas} | {threads} | {'yes' if batching else 'no'} | {got['rps']:.0f} | "
            f"{got['p50'] * 1e3:.2f} | {got['p99'] * 1e3:.2f} | {calls} / {answered} | "
            f"{memory:.0f} ({len(after)}) | {statistics.median(hop) * 1e3:.2f} |",
            flush=True,
        )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a short load, small model (CI)")
    parser.add_argument("--requests", type=int, help="requests in all (400; 48 with --generation)")
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--models", default="small,wide", help="of: " + ", ".join(MODELS))
    parser.add_argument(
        "--generation", action="store_true", help="the generation rows (serve_generation.py)"
    )
    parser.add_argument("--new-tokens", type=int, default=64, help="with --generation (64)")
    parser.add_argument("--layers", type=int, default=2, help="the decoder's, --generation (2)")
    args = parser.parse_args(argv)
    if args.generation:
        return generation_main(args)
    names = ["small"] if args.quick else args.models.split(",")
    unknown = [n for n in names if n not in MODELS]
    if unknown:
        parser.error(f"unknown model(s) {', '.join(unknown)}; of: {', '.join(MODELS)}")
    n_requests = 40 if args.quick else args.requests or 400
    keep_ray_on_loopback()  # before Ray is imported: it reads the switch then
    try:
        import ray
    except ImportError as e:
        ray = None
        print(f"serve_load: the load needs the serve extra (pip install -e '.[serve]'): {e}")
    print(f"machine load before: {uptime_load()}; {n_requests} requests, {args.clients} clients")
    if ray is not None:
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    try:
        for name in names:
            width, layers = MODELS[name]
            rng = np.random.default_rng(0)
            weights = [
                (rng.standard_normal((width, width)) / np.sqrt(width)).astype(np.float32)
                for _ in range(layers)
            ]
            exe = _mlp(weights)
            requests = [
                (rng.standard_normal((int(n), width)).astype(np.float32),)
                for n in rng.integers(1, 9, n_requests)
            ]
            print(f"\n## {name}: {layers} dense layers of {width}")
            model_alone(exe, weights, requests[:40], repeats=1 if args.quick else 5)
            # 200 calls a run: with fewer, starting the threads is a large part of the time
            shared_vm(exe, requests[: 20 if args.quick else 200], repeats=1 if args.quick else 5)
            if ray is not None:
                serve_load(exe, requests, args.clients, QUICK_CONFIGS if args.quick else CONFIGS)
    finally:
        if ray is not None:
            from ray import serve

            serve.shutdown()
            ray.shutdown()
    print(f"machine load after: {uptime_load()}")
    return 0


def generation_main(args: argparse.Namespace) -> int:
    """The generation rows (``--generation``)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "onnx"))
    from generate_models import llama
    from serve_generation import generation_rows

    keep_ray_on_loopback()  # before Ray is imported: it reads the switch then
    import ray
    from ray import serve

    requests = 8 if args.quick else args.requests or 48
    new = 16 if args.quick else args.new_tokens
    print(f"machine load before: {uptime_load()}")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    try:
        generation_rows(
            llama(layers=args.layers),
            requests=requests,
            new_tokens=new,
            quick=args.quick,
            label=f"Llama-style decoder ({args.layers} layers, hidden 128, vocab 1000)",
        )
    finally:
        serve.shutdown()
        ray.shutdown()
    print(f"machine load after: {uptime_load()}")
    return 0


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
