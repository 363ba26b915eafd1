"""The HTTP bodies of served generation (numpy only): the request's JSON and the answers,
whole (``POST /v2/models/NAME/generate``) or as server-sent events (``.../generate_stream``,
the route names of Triton's generate extension).

A request is ``{"input_ids": [5, 6, 7], "parameters": {"max_new_tokens": 8, "eos_token_id":
2, "do_sample": false, "temperature": 1.0, "top_k": null, "seed": null}}`` (``parameters``
optional; ``dynshape.serve.generation_request.OPTIONS``) and optionally an ``"id"`` echoed back.

The stream (``text/event-stream``) is one event per new token, then one final event::

    data: {"model_name": "decoder", "index": 0, "token_id": 751}

    data: {"model_name": "decoder", "index": 1, "token_id": 579}

    data: {"model_name": "decoder", "finish_reason": "length", "output_ids": [751, 579]}

or, when the generation fails after it started, ``event: error`` with ``data: {"error": ...}``
(the status was already sent). The whole answer is the final event's object; an error before
any token is the project's JSON error with its HTTP status.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import RequestError
from .generation_request import Event

SSE = "text/event-stream"
#: The fields a request may have.
FIELDS = ("id", "input_ids", "parameters")


@dataclass(frozen=True)
class GenerateRequest:
    """A parsed request body: the prompt as sent (checked by the batcher), the options, the
    client's id (None when not given)."""

    input_ids: Any
    parameters: Any
    id: str | None = None


def parse_request(body: bytes) -> GenerateRequest:
    """The request of a JSON body; ``RequestError`` naming what is wrong (a 400)."""
    try:
        doc = json.loads(body)
    except (ValueError, UnicodeDecodeError) as e:
        raise RequestError(f"the body is not JSON: {e}") from None
    if not isinstance(doc, dict):
        raise RequestError(
            f'the body must be a JSON object {{"input_ids": [...], "parameters": {{...}}}}, '
            f"got {type(doc).__name__}"
        )
    unknown = sorted(set(doc) - set(FIELDS))
    if unknown:
        raise RequestError(f"unknown field {unknown[0]!r} (known: {', '.join(FIELDS)})")
    if "input_ids" not in doc:
        raise RequestError("the body has no 'input_ids': the prompt's token ids, a list")
    ident = doc.get("id")
    if ident is not None and not isinstance(ident, str):
        raise RequestError(f"'id' must be a string, got {ident!r}")
    return GenerateRequest(doc["input_ids"], doc.get("parameters"), ident)


def event_bytes(event: Event, model: str, tokens: Sequence[int], ident: str | None) -> bytes:
    """One server-sent event of ``event`` (``tokens``: the generation's tokens so far)."""
    if event.kind == "error":
        return b"event: error\ndata: " + _json({"error": event.message}) + b"\n\n"
    doc: dict[str, Any] = (
        {"model_name": model, "index": event.index, "token_id": event.token_id}
        if event.kind == "token"
        else final(model, event.finish_reason, tokens)
    )
    if ident is not None:
        doc["id"] = ident
    return b"data: " + _json(doc) + b"\n\n"


def final(model: str, finish_reason: str | None, tokens: Sequence[int]) -> dict[str, Any]:
    """The answer of a finished generation (the last event, or ``/generate``'s body)."""
    return {"model_name": model, "finish_reason": finish_reason, "output_ids": list(tokens)}


def _json(doc: Any) -> bytes:
    return json.dumps(doc, separators=(",", ":")).encode()


def parse_events(stream: bytes) -> list[tuple[str, Any]]:
    """The events of a server-sent event stream as (event name, decoded data): what a client
    reads back (the tests and the benchmark use it)."""
    out = []
    for block in stream.decode().split("\n\n"):
        if not block.strip():
            continue
        name, data = "message", ""
        for line in block.splitlines():
            field, _, value = line.partition(": ")
            if field == "event":
                name = value
            elif field == "data":
                data += value
        out.append((name, json.loads(data)))
    return out
