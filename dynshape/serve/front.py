"""The deployment's front: the application's ingress, which receives every HTTP request and
handle call and forwards it to a model replica, again to another replica when the first died
(inference has no side effects), up to ``DEFAULT_RETRIES`` times; it also keeps the per-model
counters (``counters.py``) and answers ``GET /v2/models/NAME/stats`` itself.

Why a front: Ray Serve 2.60's HTTP proxy sends a request to the ingress deployment's replica
once; when that replica dies with the request in flight, the proxy answers a bare 500 with
the text "Internal Server Error" (``ray.serve._private.proxy``, measured: 5 of 8 clients'
requests lost when a replica was killed). Ray's router retries only a request that no replica
has accepted yet; nothing retries one in flight (the HAProxy ingress and its ``retry-on`` knobs
are another, opt-in, proxy). Only a caller that holds a ``DeploymentHandle`` can see the
replica's death (``RayActorError``: ``ActorDiedError``, ``ActorUnavailableError``) and send the
request again; so the ingress is this small deployment, and the model replicas sit behind it.
When every attempt met a dead replica the answer is a 503 with the project's JSON error and a
``Retry-After`` header, never Ray's bare 500.

For a generation server (``generation_server.py``) the front streams ``generate_stream``:
it awaits the replica's first item, the status (retried like any request while no token was
sent), then passes the server-sent events on as they come, and cancels the replica's stream
when its client goes away.

The front is one replica with no CPU claim: it only awaits. It imports Ray; ``dynshape.serve``
does not import it.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from ray.exceptions import RayActorError
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from dynshape_errors import DynShapeError

from . import inference_protocol as v2
from .budgets import BACKOFF_S, DEFAULT_RETRIES, RETRY_AFTER_S
from .counters import Counters
from .grpc_loopback import loopback_grpc

#: Requests the front lets in at once: it only awaits, the model replicas bound the work.
FRONT_ONGOING = 1000
#: The front deployment's name is the model deployment's with this suffix.
FRONT_SUFFIX = "-front"
#: The routes whose requests the counters count.
COUNTED = ("infer", "generate", "generate_stream")
#: The request headers the model replica reads.
FORWARDED = ("content-type", v2.HEADER_LENGTH.lower())

T = TypeVar("T")


class ReplicaUnavailableError(DynShapeError):
    """Every replica a request was sent to died before answering (HTTP: 503)."""


@dataclass(frozen=True)
class Reply:
    """An HTTP answer as plain data: what a model replica sends back to the front."""

    status: int
    body: bytes
    media_type: str = "application/json"
    headers: tuple[tuple[str, str], ...] = ()


def error_reply(status: int, message: str, headers: tuple[tuple[str, str], ...] = ()) -> Reply:
    """The project's JSON error, ``{"error": message}``."""
    return Reply(status, v2.error_body(message), headers=headers)


def json_reply(doc: Any) -> Reply:
    """A JSON document, 200."""
    return Reply(200, json.dumps(doc).encode())


async def retried(
    call: Callable[[], Awaitable[T]],
    retries: int,
    on_retry: Callable[[], None] = lambda: None,
    backoff_s: tuple[float, ...] = BACKOFF_S,
) -> T:
    """``call()``'s answer, called again (up to ``retries`` more times, ``on_retry`` before
    each) while the replica it reached died; ReplicaUnavailableError once every attempt did.
    Any other error is the request's own and is raised as it came."""
    for attempt in range(retries + 1):
        try:
            return await call()
        except RayActorError as e:  # the replica died or cannot be reached: nothing was done
            if attempt == retries:
                raise ReplicaUnavailableError(
                    f"no replica answered: {attempt + 1} attempts met a replica that died "
                    f"({type(e).__name__}); retry in {RETRY_AFTER_S} s"
                ) from None
            on_retry()
            await asyncio.sleep(backoff_s[min(attempt, len(backoff_s) - 1)])
    raise AssertionError("unreachable")  # the loop returns or raises


class Front:
    """The ingress replica (see the module doc): ``model`` is the handle of the model
    deployment, ``name`` the model's name in the protocol's routes."""

    def __init__(
        self, model: Any, name: str, retries: int = DEFAULT_RETRIES, generates: bool = False
    ) -> None:
        loopback_grpc()  # as every replica: its gRPC server on 127.0.0.1 when Ray is local
        self.model = model
        self.name = name
        self.retries = retries
        self.generates = generates
        """The model replicas are ``GenerationServer``s: ``generate_stream`` is streamed."""
        self.counters = Counters(name, v2.VERSION)

    def _retry(self) -> None:
        self.counters.retries += 1

    async def __call__(self, request: Request) -> Response:
        """HTTP: the stats route answered here, anything else forwarded to a model replica's
        ``http`` (retried when that replica dies)."""
        start = time.perf_counter()
        path = _path(request)
        kind = request_kind(request.method, path, self.name)
        if kind == "stats":
            return to_response(json_reply(self.counters.stats()))
        if kind == "generate_stream" and self.generates:
            return await self._stream(request, start)
        try:
            body = await request.body()
            headers = {k: v for k in FORWARDED if (v := request.headers.get(k)) is not None}
            reply = await retried(
                lambda: self.model.http.remote(request.method, path, headers, body),
                self.retries,
                self._retry,
            )
        except ReplicaUnavailableError as e:
            self.counters.unavailable += 1
            reply = error_reply(503, str(e), (("Retry-After", str(RETRY_AFTER_S)),))
        except Exception as e:  # never Ray's bare 500: one line of JSON
            reply = error_reply(500, f"internal error: {type(e).__name__}: {e}".splitlines()[0])
        if kind in COUNTED:
            self.counters.record(reply.status, time.perf_counter() - start)
        return to_response(reply)

    async def _stream(self, request: Request, start: float) -> Response:
        """A generation streamed from a model replica (``generation_server.py``): its first
        item, the status, is awaited here (retried while the replica it reached died before
        it), then the events are passed on as they come. Counted when the stream ends, with
        the time it took."""
        body = await request.body()

        async def first() -> tuple[Any, Reply]:
            stream = self.model.options(stream=True).stream.remote(body)
            try:
                head: Reply = await stream.__anext__()
            except BaseException:
                stream.cancel()
                raise
            return stream, head

        try:
            stream, head = await retried(first, self.retries, self._retry)
        except ReplicaUnavailableError as e:
            self.counters.unavailable += 1
            head = error_reply(503, str(e), (("Retry-After", str(RETRY_AFTER_S)),))
        except Exception as e:  # never Ray's bare 500: one line of JSON
            head = error_reply(500, f"internal error: {type(e).__name__}: {e}".splitlines()[0])
        if head.status != 200:
            self.counters.record(head.status, time.perf_counter() - start)
            return to_response(head)

        async def events() -> Any:
            status = 200
            try:
                async for chunk in stream:
                    yield chunk
            except RayActorError as e:  # the status is sent: the stream ends with the error
                status = 503
                message = f"the replica died mid-generation ({type(e).__name__}); send it again"
                yield b"event: error\ndata: " + v2.error_body(message) + b"\n\n"
            finally:  # also when the client went away: the replica's generation leaves
                stream.cancel()
                self.counters.record(status, time.perf_counter() - start)

        return StreamingResponse(
            events(), media_type=head.media_type, headers={"Cache-Control": "no-cache"}
        )

    async def run(self, *arrays: Any, **named: Any) -> Any:
        """The model replica's ``run`` (see ``ExecutableServer.run``), retried when its
        replica dies; ReplicaUnavailableError when no replica answered."""
        return await retried(
            lambda: self.model.run.remote(*arrays, **named), self.retries, self._retry
        )

    async def stats(self) -> dict[str, Any]:
        """One model replica's ``stats()`` (the replica the router picks)."""
        answer: dict[str, Any] = await retried(
            lambda: self.model.stats.remote(), self.retries, self._retry
        )
        return answer

    def counts(self) -> dict[str, Any]:
        """The front's counters, as ``GET /v2/models/NAME/stats`` answers them."""
        return self.counters.stats()


def front_app(
    model_app: Any, deployment: str, model: str, retries: int, generates: bool = False
) -> Any:
    """The application's ingress, bound: a ``Front`` deployment named ``deployment`` plus
    ``FRONT_SUFFIX`` (one replica, no CPU claim) of the model deployment ``model_app``, whose
    model is ``model`` in the protocol's routes."""
    from ray import serve

    front: Any = serve.deployment(
        Front,
        name=f"{deployment}{FRONT_SUFFIX}",
        num_replicas=1,
        max_ongoing_requests=FRONT_ONGOING,
        ray_actor_options={"num_cpus": 0},
    )
    return front.bind(model_app, model, retries, generates)


def request_kind(method: str, path: str, model: str) -> str | None:
    """``infer`` for an inference request (the protocol's or the old ``POST /``), ``stats``
    for the stats route, ``generate`` and ``generate_stream`` for generations, None for
    anything else (the model replica answers, errors too)."""
    if path != "/v2" and not path.startswith("/v2/"):
        return "infer" if method == "POST" else None
    try:
        kind = v2.route(method, path, model).kind
    except v2.ProtocolError:
        return None
    return kind if kind in (*COUNTED, "stats") else None


def to_response(reply: Reply) -> Response:
    """The starlette response of a reply."""
    return Response(
        reply.body,
        status_code=reply.status,
        headers=dict(reply.headers),
        media_type=reply.media_type,
    )


def _path(request: Request) -> str:
    """The request's path below the application's route prefix."""
    path: str = request.url.path
    root: str = request.scope.get("root_path", "")
    return (path[len(root) :] or "/") if root and path.startswith(root) else path
