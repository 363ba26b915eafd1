"""A decoder with its key/value cache served for generation (``python -m dynshape serve
decoder.onnx --generate``; the optional extra ``serve``: Ray Serve).

    from dynshape.serve.generation_server import generation_deployment
    serve.run(generation_deployment("decoder.dsx"), route_prefix="/")
    # POST /v2/models/decoder/generate_stream {"input_ids": [5, 6, 7],
    #      "parameters": {"max_new_tokens": 8}}   -> server-sent events, a token each
    # POST /v2/models/decoder/generate            -> {"output_ids": [...], ...}

Each replica keeps one ``ContinuousBatcher`` (``generation.py``) over one VM, stepped by a
thread of its own: requests that arrive while others are generating join the running batch
at its next step. The batcher's thread hands each token to the request's coroutine on the
replica's event loop (``call_soon_threadsafe``), and the request's stream yields it at once.

A stream is a generator method called through the handle with ``stream=True``: its first
item is a ``Reply``, the status (200 for the events that follow, else the project's JSON error
of a request refused before it started), then the events' bytes. The front (``front.py``)
waits for that first item, retrying on another replica when the first one died before it (no
token was sent), and answers with a ``StreamingResponse`` of the rest. A client that goes away
cancels the front's request, the front cancels the stream, and the replica's generator, closed,
cancels the generation: it leaves the batch at the next step. The metadata and health routes
of the Open Inference Protocol answer as for inference; ``/infer`` is a 404 naming the
generate routes.

This module imports Ray; ``dynshape.serve`` does not import it.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Mapping
from typing import Any

import ray
from ray import serve

from vm import Executable, VirtualMachine

from ..errors import ServeConfigError
from ..generate_model import DecoderStep
from . import inference_protocol as v2
from .budgets import (
    DEFAULT_MAX_STEPS,
    DEFAULT_RETRIES,
    DEFAULT_TIMEOUT_S,
    LIMIT_NEW_TOKENS,
    LIMIT_PROMPT_TOKENS,
)
from .deployment import RAY_DEFAULT_ONGOING, _status, metadata_reply
from .front import Reply, error_reply, front_app, json_reply
from .generation import DEFAULT_MAX_ROWS, ContinuousBatcher
from .generation_request import Event, Generation
from .generation_wire import SSE, event_bytes, final, parse_request
from .grpc_loopback import loopback_grpc
from .source import ExecutableSource, default_model_name, executable_bytes


class GenerationServer:
    """One replica: the decoder's VM and the batcher that steps it (see the module doc)."""

    def __init__(
        self,
        executable: bytes,
        name: str,
        max_rows: int = DEFAULT_MAX_ROWS,
        limit_new_tokens: int = LIMIT_NEW_TOKENS,
        limit_prompt_tokens: int = LIMIT_PROMPT_TOKENS,
        max_steps: int | None = DEFAULT_MAX_STEPS,
        timeout_s: float | None = DEFAULT_TIMEOUT_S,
        join: bool = True,
    ) -> None:
        loopback_grpc()
        exe = Executable.from_bytes(executable)
        self.model = v2.Model.of(exe, name)
        vm = VirtualMachine(exe, max_steps=max_steps, timeout=timeout_s)
        self.batcher = ContinuousBatcher(
            DecoderStep(vm),
            max_rows=max_rows,
            limit_new_tokens=limit_new_tokens,
            limit_prompt_tokens=limit_prompt_tokens,
            join=join,
        )
        self.batcher.start()

    def __del__(self) -> None:
        batcher = getattr(self, "batcher", None)  # None when __init__ failed before it
        if batcher is not None:
            batcher.close()

    def _submit(self, body: bytes) -> tuple[Generation, asyncio.Queue[Event], str | None]:
        """Parse and queue a request: its generation, the queue its events arrive in on this
        event loop, its id. Raises the request's error (a 400) before anything runs."""
        request = parse_request(body)
        loop = asyncio.get_running_loop()
        events: asyncio.Queue[Event] = asyncio.Queue()

        def deliver(event: Event) -> None:  # on the batcher's thread
            loop.call_soon_threadsafe(events.put_nowait, event)

        gen = self.batcher.submit(request.input_ids, request.parameters, deliver)
        return gen, events, request.id

    async def stream(self, body: bytes) -> AsyncIterator[Reply | bytes]:
        """A generation as server-sent events: a ``Reply`` first (200, or the error of a
        request refused), then each event's bytes (``generation_wire.py``)."""
        try:
            gen, events, ident = self._submit(body)
        except Exception as e:
            yield error_reply(*_status(e))
            return
        try:
            yield Reply(200, b"", SSE)
            while True:
                # The events that arrived meanwhile go as one item: each item is a Ray object
                # passed on twice (front, proxy), the dearest part of a token's way.
                ready = [await events.get()]
                while ready[-1].kind == "token" and not events.empty():
                    ready.append(events.get_nowait())
                name, tokens = self.model.name, gen.tokens
                yield b"".join(event_bytes(e, name, tokens[: e.index], ident) for e in ready)
                if ready[-1].kind != "token":
                    return
        finally:  # finished, or the client went away and the stream was closed: leave
            gen.cancel()

    async def http(self, method: str, path: str, headers: Mapping[str, str], body: bytes) -> Reply:
        """A request other than a stream: the protocol's metadata and health routes, and
        ``/generate``'s whole answer."""
        gen = None
        try:
            kind = v2.route(method, path, self.model.name).kind
            if kind == "generate":
                gen, events, ident = self._submit(body)
                while (event := await events.get()).kind == "token":
                    pass
                if event.kind == "error":
                    return error_reply(event.status, event.message or "the generation failed")
                doc = final(self.model.name, event.finish_reason, gen.tokens)
                return json_reply(doc if ident is None else {**doc, "id": ident})
            if kind in ("infer", "generate_stream"):  # generate_stream: the front's own
                raise v2.ProtocolError(
                    f"model {self.model.name!r} is served for generation: POST "
                    f"/v2/models/{self.model.name}/generate or .../generate_stream",
                    404,
                )
            return metadata_reply(kind, self.model)
        except Exception as e:
            return error_reply(*_status(e))
        finally:
            if gen is not None:  # answered, or cancelled with its client
                gen.cancel()

    def stats(self) -> dict[str, Any]:
        """This replica's batcher counts (requests, tokens, prefill and decode calls and the
        rows they carried) and where it runs."""
        return {
            **self.batcher.stats.as_dict(),
            "active": self.batcher.active,
            "waiting": self.batcher.waiting,
            "recent_decode_rows": list(self.batcher.stats.step_rows)[-100:],
            "node": ray.get_runtime_context().get_node_id(),
            "pid": os.getpid(),
        }


def generation_deployment(
    executable: ExecutableSource,
    *,
    max_rows: int = DEFAULT_MAX_ROWS,
    limit_new_tokens: int = LIMIT_NEW_TOKENS,
    limit_prompt_tokens: int = LIMIT_PROMPT_TOKENS,
    replicas: int = 1,
    cpus_per_replica: float = 1.0,
    name: str = "dynshape",
    model_name: str | None = None,
    max_steps: int | None = DEFAULT_MAX_STEPS,
    timeout_s: float | None = DEFAULT_TIMEOUT_S,
    retries: int = DEFAULT_RETRIES,
    join: bool = True,
) -> Any:
    """The Ray Serve application generating with the decoder ``executable`` (a path, the
    bytes of a saved file, or an ``Executable`` of a decoder step with its key/value cache,
    ``dynshape/generate_model.py``): ``serve.run(generation_deployment(...))``.

    Each of ``replicas`` replicas joins up to ``max_rows`` generations in one decode step
    (``join=False``: each its own calls, the baseline); a request may ask for at most
    ``limit_new_tokens`` tokens after a prompt of at most ``limit_prompt_tokens``; each model
    call stops past ``max_steps`` steps or ``timeout_s`` seconds. The decoder's signature
    and the options are checked here, before any replica starts (``GenerateError``,
    ``ServeConfigError``)."""
    model = model_name if model_name is not None else default_model_name(executable)
    if not model or "/" in model:
        raise ServeConfigError(f"model name {model!r}: a non-empty name without '/' is needed")
    if min(max_rows, replicas, limit_new_tokens, limit_prompt_tokens) < 1 or retries < 0:
        raise ServeConfigError(
            f"max_rows ({max_rows}), replicas ({replicas}), limit_new_tokens "
            f"({limit_new_tokens}) and limit_prompt_tokens ({limit_prompt_tokens}) must be "
            f">= 1, retries ({retries}) >= 0"
        )
    data = executable_bytes(executable)
    DecoderStep(VirtualMachine(Executable.from_bytes(data)))  # a decoder step, or say why not
    # Every client streaming from the replica holds a request in flight for its whole
    # generation: let in the rows of a step and as many waiting.
    ongoing = max(2 * max_rows, RAY_DEFAULT_ONGOING)
    server: Any = serve.deployment(
        GenerationServer,
        name=name,
        num_replicas=replicas,
        max_ongoing_requests=ongoing,
        ray_actor_options={"num_cpus": cpus_per_replica},
    )
    app = server.bind(
        data, model, max_rows, limit_new_tokens, limit_prompt_tokens, max_steps, timeout_s, join
    )
    return front_app(app, name, model, retries, generates=True)
