"""A saved executable as a Ray Serve deployment (the optional extra ``serve``: Ray Serve).

    from dynshape.serve.deployment import deployment
    from ray import serve

    handle = serve.run(deployment("mlp.dsx", batch_symbol="batch", max_batch=64))
    y = handle.run.remote(x).result()                  # numpy in, numpy out
    # HTTP: the Open Inference Protocol under /v2 (dynshape/serve/inference_protocol.py),
    # and POST / with a JSON or .npz body (dynshape/serve/wire.py)

Each replica loads the executable once and keeps one ``VirtualMachine``. Requests reach it
through Ray Serve's ``@serve.batch`` (set up per replica with the deployment's options), which
hands over the requests that arrived within the wait time; ``BatchPlan`` groups those that can
share a call (the batch symbol leads every input and result, every other dim agrees or is
padded where the user allows it), each group runs as one call and each request gets its rows
back. The calls run on the replica's worker threads (``threads``, sharing its one VM, which is
thread-safe), never on its event loop: while the model runs, the replica goes on receiving
requests, which is what fills the next batch.

The application's ingress is not the model: every HTTP request and handle call goes through
the front (``front.py``, one replica with no CPU), which forwards it to a model replica
(HTTP as ``ExecutableServer.http``) and sends it again to another when that replica died; it
keeps the per-model counters of ``GET /v2/models/NAME/stats``.

A request the VM refuses (wrong dtype, rank, a broken symbolic relation) is answered with the
project's message: ``VMArgumentError`` and the like from ``run``, an HTTP 400 with
``{"error": ...}`` over HTTP (the protocol's own 404 and 405 for an unknown model or route);
a run past its step limit or timeout (``budgets.py``) is a 422 with the VM's
``StepLimitError``; anything else is a 500 with a one-line message, never a traceback. When a
joined call fails, its requests run again one by one so that each gets its own answer (a bad
request cannot fail its neighbours), unless it ran out of its budget: each again alone could
take the budget once more per request, so they all get that error.

Only this module, ``front.py``, ``grpc_loopback.py`` and ``generation_server.py`` (the
generation deployment, ``serve --generate``) import Ray; ``dynshape`` and ``dynshape.serve``
never do.
"""

from __future__ import annotations

import asyncio
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

from dynshape_errors import DynShapeError
from vm import Executable, StepLimitError, VirtualMachine
from vm.calling import positional

from ..errors import RequestError, ServeConfigError
from . import inference_protocol as v2
from .batching import BatchPlan
from .budgets import BUDGET_STATUS, DEFAULT_MAX_STEPS, DEFAULT_RETRIES, DEFAULT_TIMEOUT_S
from .front import Reply, error_reply, front_app, json_reply
from .grpc_loopback import loopback_grpc
from .scaling import replica_options
from .source import ExecutableSource, default_model_name, executable_bytes
from .wire import NPZ, inputs_from_json, inputs_from_npz, outputs_to_json, outputs_to_npz

DEFAULT_MAX_BATCH = 64
DEFAULT_WAIT_S = 0.005
#: Ray Serve's own default of requests in flight in one replica (``max_ongoing_requests``).
RAY_DEFAULT_ONGOING = 5
#: The front's deployment name is the model deployment's and this.
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
        name: str = "model",
        max_steps: int | None = DEFAULT_MAX_STEPS,
        timeout_s: float | None = DEFAULT_TIMEOUT_S,
    ) -> None:
        loopback_grpc()
        self.exe = Executable.from_bytes(executable)
        self.main = next(f for f in self.exe.functions if f.name == "main")
        self.vm = VirtualMachine(self.exe, max_steps=max_steps, timeout=timeout_s)
        self.model = v2.Model.of(self.exe, name)
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
                # Out of budget: each again alone could take the budget once more per request.
                if len(g.indices) == 1 or isinstance(e, StepLimitError):
                    for i in g.indices:
                        answers[i] = e
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
        return await self._answered(tuple(arrays))

    async def http(self, method: str, path: str, headers: Mapping[str, str], body: bytes) -> Reply:
        """One HTTP request, forwarded by the front (``front.py``) with its path below the
        route prefix and the headers of ``front.FORWARDED``: the Open Inference Protocol's
        routes under ``/v2`` (``inference_protocol.py``); anywhere else a JSON or ``.npz``
        body in, the same kind out (``wire.py``). A request of the wrong shape, dtype or form
        gets a 400 with the message."""
        if path == "/v2" or path.startswith("/v2/"):
            return await self._v2(method, path, headers, body)
        npz = NPZ in headers.get("content-type", "")
        try:
            reader = inputs_from_npz if npz else inputs_from_json
            answer = await self._answered(reader(body, self.plan.params))
            if npz:
                return Reply(200, outputs_to_npz(answer), NPZ)
            return Reply(200, outputs_to_json(answer))
        except Exception as e:
            return error_reply(*_status(e))

    async def _v2(self, method: str, path: str, headers: Mapping[str, str], body: bytes) -> Reply:
        """One request of the Open Inference Protocol."""
        try:
            kind = v2.route(method, path, self.model.name).kind
            if kind in ("generate", "generate_stream"):
                raise v2.ProtocolError(
                    f"model {self.model.name!r} is served for inference, not generation (serve "
                    "a decoder with --generate: python -m dynshape serve decoder.onnx --generate)",
                    404,
                )
            if kind == "infer":
                length = headers.get(v2.HEADER_LENGTH.lower())
                parsed = v2.parse_infer(body, length, self.model)
                answer = await self._answered(parsed.arrays)
                out, size = v2.encode_infer(self.model, parsed, answer)
                if size is None:
                    return Reply(200, out)
                return Reply(200, out, "application/octet-stream", ((v2.HEADER_LENGTH, str(size)),))
            return metadata_reply(kind, self.model)
        except Exception as e:
            return error_reply(*_status(e))

    async def _answered(self, arrays: tuple[np.ndarray, ...]) -> Any:
        """The result of one request's arrays, or its error raised."""
        answer = await self._batched(arrays)
        if isinstance(answer, Exception):
            raise answer
        return answer

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


def metadata_reply(kind: str, model: Any) -> Reply:
    """The answer to a protocol route that reads no body: the server's or the model's metadata,
    or an empty 200 for the health routes (live, ready, model ready: the replica answers, so
    its model is loaded)."""
    if kind == "server":
        return json_reply(v2.server_metadata(_version()))
    if kind == "model":
        return json_reply(model.metadata())
    return json_reply({})


def _status(e: Exception) -> tuple[int, str]:
    """The HTTP status and message of a request's error: the protocol's own status, 422 for a
    run stopped by its budget, 400 for anything else of ours (the request's fault), 500 with
    one line for the rest (ours to fix, but never a traceback to the client)."""
    if isinstance(e, v2.ProtocolError):
        return e.status, str(e)
    if isinstance(e, StepLimitError):
        return BUDGET_STATUS, str(e)
    if isinstance(e, DynShapeError):
        return 400, str(e)
    return 500, f"internal error: {type(e).__name__}: {e}".splitlines()[0]


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("dynshape")
    except PackageNotFoundError:  # run from a checkout that was never installed
        return "unknown"


def deployment(
    executable: ExecutableSource,
    *,
    batch_symbol: str | None = None,
    pad: Mapping[str, float] | None = None,
    max_batch: int = DEFAULT_MAX_BATCH,
    batch_wait_s: float = DEFAULT_WAIT_S,
    replicas: int | None = None,
    threads: int = 1,
    cpus_per_replica: float = 1.0,
    name: str = "dynshape",
    model_name: str | None = None,
    max_steps: int | None = DEFAULT_MAX_STEPS,
    timeout_s: float | None = DEFAULT_TIMEOUT_S,
    min_replicas: int | None = None,
    max_replicas: int | None = None,
    target_requests: float | None = None,
    retries: int = DEFAULT_RETRIES,
) -> Any:
    """The Ray Serve application serving ``executable`` (a path, the bytes of a saved file, or
    an ``Executable``): ``serve.run(deployment(...))``.

    ``batch_symbol`` joins requests along that symbol (None: one request per call), ``pad``
    lets requests that differ in the named symbols share a call, padded with the given fill
    values (``{"seq": 0}``: only for models a padded position cannot change), at most
    ``max_batch`` rows a call after waiting at most ``batch_wait_s`` for them; ``replicas``
    processes (1 by default), each running up to ``threads`` calls at once on its one VM, or
    between ``min_replicas`` and ``max_replicas`` scaled by Ray Serve to keep about
    ``target_requests`` requests in flight per replica (``scaling.py``). ``model_name`` is
    the model's name in the Open Inference Protocol's routes (the file's stem by default, else
    ``model``); ``name`` is the Ray Serve deployment's. Each run stops past ``max_steps`` steps
    or ``timeout_s`` seconds (None: no bound), answered with the VM's ``StepLimitError``. The
    application's ingress is the front (``front.py``): a request whose replica dies is sent
    to another up to ``retries`` more times, else answered 503 with ``Retry-After``. The
    file, the batch symbol, the padding and the options are checked here, in the caller's
    process, before any replica starts (``FormatError``, ``ServeConfigError``)."""
    model = model_name if model_name is not None else default_model_name(executable)
    if not model or "/" in model:
        raise ServeConfigError(f"model name {model!r}: a non-empty name without '/' is needed")
    for option, value in (("max_steps", max_steps), ("timeout_s", timeout_s)):
        if value is not None and (isinstance(value, bool) or not value > 0):
            raise ServeConfigError(f"{option} ({value}) must be > 0, or None for no bound")
    data = executable_bytes(executable)
    exe = Executable.from_bytes(data)
    plan = BatchPlan.for_executable(exe, batch_symbol, pad)
    if min(max_batch, threads) < 1 or min(batch_wait_s, cpus_per_replica, retries) < 0:
        raise ServeConfigError(
            f"max_batch ({max_batch}) and threads ({threads}) must be >= 1, batch_wait_s "
            f"({batch_wait_s}), cpus_per_replica ({cpus_per_replica}) and retries ({retries}) "
            ">= 0"
        )
    # Ray Serve's cap on a replica's requests in flight would starve batching: let in what
    # the threads' batches can take and one batch being collected. Without batching, Ray's
    # own cap, so that the router spreads requests over the replicas instead of queueing them.
    per_call = max_batch if plan.batches else 1
    ongoing = max(per_call * (threads + 1), RAY_DEFAULT_ONGOING)
    scaling = replica_options(replicas, min_replicas, max_replicas, target_requests, ongoing)
    server: Any = serve.deployment(
        ExecutableServer,
        name=name,
        max_ongoing_requests=ongoing,
        ray_actor_options={"num_cpus": cpus_per_replica},
        **scaling,
    )
    model_app = server.bind(
        data,
        batch_symbol,
        max_batch,
        batch_wait_s,
        threads,
        dict(pad or {}),
        model,
        max_steps,
        timeout_s,
    )
    return front_app(model_app, name, model, retries)
