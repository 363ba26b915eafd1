"""A saved executable as a Ray Serve deployment (the optional extra ``serve``: Ray Serve).

    from dynshape.serve.deployment import deployment
    from ray import serve

    handle = serve.run(deployment("mlp.dsx", batch_symbol="batch", max_batch=64))
    y = handle.run.remote(x).result()                  # numpy in, numpy out
    # HTTP: POST / with a JSON or .npz body (dynshape/serve/wire.py)

Each replica loads the executable once and keeps one ``VirtualMachine``; requests reach it
through ``@serve.batch``, which hands the replica the requests that arrived within the wait
time; ``BatchPlan`` groups those that can share a call (the batch symbol leads every input and
result, every other dim agrees), each group runs as one call and each request gets its rows
back. A request the VM refuses (wrong dtype, rank, a broken symbolic relation) is answered with
the project's message: ``VMArgumentError`` and the like from ``run``, an HTTP 400 with
``{"error": ...}`` over HTTP; anything else is a 500 with a one-line message, never a
traceback. When a joined call fails, its requests run again one by one so that each gets its
own answer (a bad request cannot fail its neighbours).

Only this module imports Ray; ``dynshape`` and ``dynshape.serve`` never do.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
from ray import serve
from starlette.requests import Request
from starlette.responses import Response

from dynshape_errors import DynShapeError
from vm import Executable, VirtualMachine
from vm.calling import positional

from ..errors import RequestError, ServeConfigError
from .batching import BatchPlan
from .wire import NPZ, inputs_from_json, inputs_from_npz, outputs_to_json, outputs_to_npz

#: ``@serve.batch``'s bounds until a replica sets its own (``set_max_batch_size``...).
DEFAULT_MAX_BATCH = 64
DEFAULT_WAIT_S = 0.005


class ExecutableServer:
    """One replica: the executable, its VM and its batch plan (see the module doc)."""

    def __init__(
        self, executable: bytes, batch_symbol: str | None, max_batch: int, wait_s: float
    ) -> None:
        self.exe = Executable.from_bytes(executable)
        self.main = next(f for f in self.exe.functions if f.name == "main")
        self.vm = VirtualMachine(self.exe)
        self.plan = BatchPlan.for_executable(self.exe, batch_symbol)
        self.max_batch = max_batch if self.plan.batches else 1
        batched: Any = self._batched  # serve.batch's wrapper: its bounds are set per replica
        batched.set_max_batch_size(self.max_batch)
        batched.set_batch_wait_timeout_s(wait_s)
        self.calls = 0
        self.requests = 0

    @serve.batch(max_batch_size=DEFAULT_MAX_BATCH, batch_wait_timeout_s=DEFAULT_WAIT_S)
    async def _batched(self, requests: list[tuple[np.ndarray, ...]]) -> list[Any]:
        self.requests += len(requests)
        groups, refused = self.plan.group(requests, self.max_batch)
        answers: list[Any] = [None] * len(requests)
        for i, message in refused.items():
            answers[i] = RequestError(message)
        for g in groups:
            try:
                result = self.vm.run(*self.plan.join(requests, g))
                self.calls += 1
                for i, part in zip(g.indices, self.plan.split(result, g), strict=True):
                    answers[i] = part
            except DynShapeError as e:
                if len(g.indices) == 1:
                    answers[g.indices[0]] = e
                    continue
                for i in g.indices:  # who was wrong: each alone
                    answers[i] = self._alone(requests[i])
        return answers

    def _alone(self, inputs: tuple[np.ndarray, ...]) -> Any:
        try:
            self.calls += 1
            return self.vm.run(*inputs)
        except DynShapeError as e:
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

    def stats(self) -> dict[str, int]:
        """Requests answered and model calls made by this replica (batching: fewer calls)."""
        return {"requests": self.requests, "calls": self.calls}


def _error(status: int, message: str) -> Response:
    return Response(
        json.dumps({"error": message}), status_code=status, media_type="application/json"
    )


def deployment(
    executable: str | Path | bytes | Executable,
    *,
    batch_symbol: str | None = None,
    max_batch: int = DEFAULT_MAX_BATCH,
    batch_wait_s: float = DEFAULT_WAIT_S,
    replicas: int = 1,
    cpus_per_replica: float = 1.0,
    name: str = "dynshape",
) -> Any:
    """The Ray Serve application serving ``executable`` (a path, the bytes of a saved file, or
    an ``Executable``): ``serve.run(deployment(...))``. The file and the batch symbol are
    checked here, in the caller's process, before any replica starts (``FormatError``,
    ``ServeConfigError``)."""
    if isinstance(executable, Executable):
        data = executable.to_bytes()
    elif isinstance(executable, (bytes, bytearray)):
        data = bytes(executable)
    else:
        try:
            data = Path(executable).read_bytes()
        except OSError as e:
            raise ServeConfigError(
                f"cannot read the executable {executable}: {e.strerror}"
            ) from None
    exe = Executable.from_bytes(data)
    BatchPlan.for_executable(exe, batch_symbol)
    if max_batch < 1 or replicas < 1 or batch_wait_s < 0:
        raise ServeConfigError(
            f"max_batch ({max_batch}) and replicas ({replicas}) must be >= 1 and batch_wait_s "
            f"({batch_wait_s}) >= 0"
        )
    app: Any = serve.deployment(
        ExecutableServer,
        name=name,
        num_replicas=replicas,
        ray_actor_options={"num_cpus": cpus_per_replica},
    )
    return app.bind(data, batch_symbol, max_batch, batch_wait_s)
