"""A saved executable as a Ray Serve deployment (the optional extra ``serve``: Ray Serve).

    from dynshape.serve.deployment import deployment
    from ray import serve

    handle = serve.run(deployment("mlp.dsx", batch_symbol="batch", max_batch=64))
    y = handle.run.remote(x).result()                  # numpy in, numpy out
    # HTTP: POST / with a JSON or .npz body (dynshape/serve/wire.py)

Each replica loads the executable once and keeps one ``VirtualMachine``. Requests reach it
through Ray Serve's ``@serve.batch`` (set up per replica with the deployment's options), which
hands over the requests that arrived within the wait time; ``BatchPlan`` groups those that can
share a call (the batch symbol leads every input and result, every other dim agrees or is
padded where the user allows it), each group runs as one call and each request gets its rows
back. The calls run on the replica's worker threads (``threads``, sharing its one VM, which is
thread-safe), never on its event loop: while the model runs, the replica goes on receiving
requests, which is what fills the next batch.

A request the VM refuses (wrong dtype, rank, a broken symbolic relation) is answered with the
project's message: ``VMArgumentError`` and the like from ``run``, an HTTP 400 with
``{"error": ...}`` over HTTP; anything else is a 500 with a one-line message, never a
traceback. When a joined call fails, its requests run again one by one so that each gets its
own answer (a bad request cannot fail its neighbours).

Only this module imports Ray; ``dynshape`` and ``dynshape.serve`` never do.
"""

from __future__ import annotations

import asyncio
import json
import os
import resource
import sys
import threading
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import ray
from ray import serve
from starlette.requests import Request
from starlette.responses import Response

from dynshape_errors import DynShapeError
from vm import Executable, VirtualMachine
from vm.calling import positional

from ..errors import RequestError, ServeConfigError
from .batching import BatchPlan
from .source import ExecutableSource, executable_bytes
from .wire import NPZ, inputs_from_json, inputs_from_npz, outputs_to_json, outputs_to_npz

DEFAULT_MAX_BATCH = 64
DEFAULT_WAIT_S = 0.005
#: Ray Serve's own default of requests in flight in one replica (``max_ongoing_requests``).
RAY_DEFAULT_ONGOING = 5
# getrusage's ru_maxrss is in KiB on Linux, in bytes on macOS.
_RSS_PER_MIB = 1 << 20 if sys.platform == "darwin" else 1 << 10


class ExecutableServer:
    """One replica: the executable, its VM, its batch plan and its worker threads (see the
    module doc)."""

    def __init__(
        self,
        executable: bytes,
        batch_symbol: str | None,
        max_batch: int,
        wait_s: float,
        threads: int,
        pad: Mapping[str, float] | None = None,
    ) -> None:
        self.exe = Executable.from_bytes(executable)
        self.main = next(f for f in self.exe.functions if f.name == "main")
        self.vm = VirtualMachine(self.exe)
        self.plan = BatchPlan.for_executable(self.exe, batch_symbol, pad)
        self.max_batch = max_batch if self.plan.batches else 1
        self.pool = ThreadPoolExecutor(threads, thread_name_prefix="dynshape-vm")
        # Per replica, so that every option is this deployment's: serve.batch on the bound
        # method is the decorator's own mechanism, applied when the options are known.
        self._batched: Any = serve.batch(
            max_batch_size=self.max_batch,
            batch_wait_timeout_s=wait_s,
            max_concurrent_batches=threads,
        )(self._run_batch)
        self._lock = threading.Lock()  # the counters: the worker threads update them
        self.calls = 0
        self.requests = 0

    async def _run_batch(self, requests: list[tuple[np.ndarray, ...]]) -> list[Any]:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.pool, self._answer, requests)

    def _answer(self, requests: list[tuple[np.ndarray, ...]]) -> list[Any]:
        """Each request's result or error (on a worker thread)."""
        groups, refused = self.plan.group(requests, self.max_batch)
        answers: list[Any] = [None] * len(requests)
        for i, message in refused.items():
            answers[i] = RequestError(message)
        calls = 0
        for g in groups:
            try:
                calls += 1
                result = self.vm.run(*self.plan.join(requests, g))
                for i, part in zip(g.indices, self.plan.split(result, g), strict=True):
                    answers[i] = part
            except Exception as e:  # not only ours: a failed call must not fail its neighbours
                if len(g.indices) == 1:
                    answers[g.indices[0]] = e
                    continue
                for i in g.indices:  # who was wrong: each alone
                    calls += 1
                    answers[i] = self._alone(requests[i])
        with self._lock:
            self.requests += len(requests)
            self.calls += calls
        return answers

    def _alone(self, inputs: tuple[np.ndarray, ...]) -> Any:
        try:
            return self.vm.run(*inputs)
        except Exception as e:  # the request's own answer: raised to it, a 400 or a 500
            return e

    async def run(self, *arrays: Any, **named: Any) -> Any:
        """Run the model on one request: arrays by position, by name, or one mapping of names
        to arrays; returns what ``VirtualMachine.run`` returns, or raises its error."""
        if named or (len(arrays) == 1 and isinstance(arrays[0], dict)):
            arrays = positional(self.main, arrays, named)
        answer = await self._batched(tuple(arrays))
        if isinstance(answer, Exception):
            raise answer
        return answer

    async def __call__(self, request: Request) -> Response:
        """HTTP: a JSON or ``.npz`` body in, the same kind out; 400 with the message for a
        request of the wrong shape, dtype or form."""
        npz = NPZ in request.headers.get("content-type", "")
        try:
            body = await request.body()
            reader = inputs_from_npz if npz else inputs_from_json
            answer = await self._batched(reader(body, self.plan.params))
            if isinstance(answer, Exception):
                raise answer
            if npz:
                return Response(outputs_to_npz(answer), media_type=NPZ)
            return Response(outputs_to_json(answer), media_type="application/json")
        except DynShapeError as e:
            return _error(400, str(e))
        except Exception as e:  # ours to fix, but never a traceback to the client
            return _error(500, f"internal error: {type(e).__name__}: {e}".splitlines()[0])

    def stats(self) -> dict[str, Any]:
        """This replica's counts (requests answered, model calls made: batching makes fewer),
        where it runs (``node``, ``pid``) and its peak resident memory in MiB."""
        with self._lock:
            counts = {"requests": self.requests, "calls": self.calls}
        return {
            **counts,
            "node": ray.get_runtime_context().get_node_id(),
            "pid": os.getpid(),
            "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / _RSS_PER_MIB,
        }


def _error(status: int, message: str) -> Response:
    return Response(
        json.dumps({"error": message}), status_code=status, media_type="application/json"
    )


def deployment(
    executable: ExecutableSource,
    *,
    batch_symbol: str | None = None,
    pad: Mapping[str, float] | None = None,
    max_batch: int = DEFAULT_MAX_BATCH,
    batch_wait_s: float = DEFAULT_WAIT_S,
    replicas: int = 1,
    threads: int = 1,
    cpus_per_replica: float = 1.0,
    name: str = "dynshape",
) -> Any:
    """The Ray Serve application serving ``executable`` (a path, the bytes of a saved file, or
    an ``Executable``): ``serve.run(deployment(...))``.

    ``batch_symbol`` joins requests along that symbol (None: one request per call), ``pad``
    lets requests that differ in the named symbols share a call, padded with the given fill
    values (``{"seq": 0}``: only for models a padded position cannot change), at most
    ``max_batch`` rows a call after waiting at most ``batch_wait_s`` for them; ``replicas``
    processes, each running up to ``threads`` calls at once on its one VM. The file, the
    batch symbol, the padding and the options are checked here, in the caller's process,
    before any replica starts (``FormatError``, ``ServeConfigError``)."""
    data = executable_bytes(executable)
    exe = Executable.from_bytes(data)
    plan = BatchPlan.for_executable(exe, batch_symbol, pad)
    if min(max_batch, replicas, threads) < 1 or min(batch_wait_s, cpus_per_replica) < 0:
        raise ServeConfigError(
            f"max_batch ({max_batch}), replicas ({replicas}) and threads ({threads}) must be "
            f">= 1, batch_wait_s ({batch_wait_s}) and cpus_per_replica ({cpus_per_replica}) "
            ">= 0"
        )
    # Ray Serve's cap on a replica's requests in flight would starve batching: let in what
    # the threads' batches can take and one batch being collected. Without batching, Ray's
    # own cap, so that the router spreads requests over the replicas instead of queueing them.
    per_call = max_batch if plan.batches else 1
    ongoing = max(per_call * (threads + 1), RAY_DEFAULT_ONGOING)
    app: Any = serve.deployment(
        ExecutableServer,
        name=name,
        num_replicas=replicas,
        max_ongoing_requests=ongoing,
        ray_actor_options={"num_cpus": cpus_per_replica},
    )
    return app.bind(data, batch_symbol, max_batch, batch_wait_s, threads, dict(pad or {}))
