"""One served generation's request side (numpy only): its options (``GenerationOptions``,
checked as ``dynshape.generate`` checks its arguments), the events its client receives
(``Event``) and its state (``Generation``: prompt, own token chooser, tokens so far, where the
events go). The batcher (``generation.py``) owns the model calls; this module owns what one
request is and hears.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import GenerateError
from ..generate_loop import checked_eos_ids, checked_token_count
from ..generate_sampling import TokenChooser
from .budgets import LIMIT_NEW_TOKENS

#: The options a request may give (``GenerationOptions.parse``), as ``dynshape.generate``
#: names them.
OPTIONS = ("max_new_tokens", "eos_token_id", "do_sample", "temperature", "top_k", "seed")
DEFAULT_MAX_NEW_TOKENS = 16


@dataclass(frozen=True)
class GenerationOptions:
    """One request's generation options, checked (``parse``)."""

    max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS
    eos_token_id: tuple[int, ...] | None = None
    do_sample: bool = False
    temperature: float = 1.0
    top_k: int | None = None
    seed: int | None = None

    @classmethod
    def parse(
        cls,
        parameters: Mapping[str, Any] | None,
        vocab: int | None,
        limit_new_tokens: int = LIMIT_NEW_TOKENS,
    ) -> GenerationOptions:
        """The options of a request's ``parameters`` (``OPTIONS``; None or {} for greedy
        with ``DEFAULT_MAX_NEW_TOKENS``): ``GenerateError`` naming an unknown or bad one."""
        if not isinstance(parameters, Mapping) and parameters is not None:
            raise GenerateError(f"parameters must be an object, got {type(parameters).__name__}")
        given = dict(parameters or {})
        unknown = sorted(set(given) - set(OPTIONS))
        if unknown:
            raise GenerateError(
                f"unknown generation parameter {unknown[0]!r} (known: {', '.join(OPTIONS)})"
            )
        new = checked_token_count(given.get("max_new_tokens", DEFAULT_MAX_NEW_TOKENS))
        if new > limit_new_tokens:
            raise GenerateError(
                f"max_new_tokens {new} is beyond this server's limit of {limit_new_tokens}"
            )
        eos = checked_eos_ids(given.get("eos_token_id"), vocab)
        options = cls(
            new,
            None if eos is None else tuple(int(e) for e in eos),
            given.get("do_sample", False),
            given.get("temperature", 1.0),
            given.get("top_k"),
            given.get("seed"),
        )
        options.chooser()  # the sampling options are checked where they are used
        return options

    def chooser(self) -> TokenChooser:
        """A fresh token chooser of these options (its own generator, seeded)."""
        return TokenChooser(self.do_sample, self.temperature, self.top_k, self.seed)


@dataclass(frozen=True)
class Event:
    """What a generation sends its client: ``token`` (``token_id`` is the ``index``-th new
    token), then one ``done`` (``finish_reason`` ``eos`` or ``length``) or one ``error``
    (``message``; also for a generation cancelled by the server's stop)."""

    kind: str
    index: int = 0
    token_id: int | None = None
    finish_reason: str | None = None
    message: str | None = None
    status: int = 500
    """An ``error``'s HTTP status: 500 for the model's failure, 422 for a run past its
    budget (``budgets.py``), 503 when the server stops."""


class Generation:
    """One request's generation: its state in the batcher and its events. With no
    ``deliver`` the events are queued here for ``events()`` and ``result()``."""

    def __init__(
        self,
        number: int,
        prompt: np.ndarray,
        options: GenerationOptions,
        deliver: Callable[[Event], None] | None,
    ) -> None:
        self.number = number
        """The batcher's count of this request (1, 2, ...)."""
        self.prompt = prompt
        """The prompt's token ids, 1-d int64."""
        self.options = options
        self.chooser = options.chooser()
        self.tokens: list[int] = []
        """The new tokens so far."""
        self.finish_reason: str | None = None
        """``eos``, ``length`` or ``error`` once finished."""
        self.error: str | None = None
        """The message of an ``error``."""
        self._queue: queue.SimpleQueue[Event] = queue.SimpleQueue()
        self._deliver = deliver or self._queue.put
        self._cancelled = threading.Event()

    @property
    def finished(self) -> bool:
        """Whether the generation has ended (it sends nothing more)."""
        return self.finish_reason is not None

    def cancel(self) -> None:
        """Leave the batch at the scheduler's next iteration (a client that went away); no
        more events are sent. Safe from any thread."""
        self._cancelled.set()

    @property
    def cancelled(self) -> bool:
        """Whether ``cancel`` was called."""
        return self._cancelled.is_set()

    def events(self, timeout: float | None = None) -> Iterator[Event]:
        """The queued events up to the last (``done`` or ``error``); only without ``deliver``."""
        while True:
            event = self._queue.get(timeout=timeout)
            yield event
            if event.kind != "token":
                return

    def result(self, timeout: float | None = None) -> list[int]:
        """The new tokens once done; ``GenerateError`` with the message of an ``error``.
        Waits on the queued events (only without ``deliver``) unless already finished."""
        if not self.finished:
            for _ in self.events(timeout):
                pass
        if self.error is not None:
            raise GenerateError(self.error)
        return list(self.tokens)

    def _send(self, event: Event) -> None:
        if self.cancelled:
            return
        try:
            self._deliver(event)
        except Exception:  # the receiver is gone (its event loop closed): nobody listens
            self.cancel()

    def add_token(self, token: int) -> None:
        """Record and send the next token; finish at eos or at max_new_tokens."""
        self.tokens.append(token)
        self._send(Event("token", len(self.tokens) - 1, token))
        eos = self.options.eos_token_id
        if eos is not None and token in eos:
            self.finish("eos")
        elif len(self.tokens) >= self.options.max_new_tokens:
            self.finish("length")

    def finish(self, reason: str) -> None:
        """End the generation with ``reason`` (``eos``, ``length``, ``cancelled``)."""
        self.finish_reason = reason
        self._send(Event("done", len(self.tokens), finish_reason=reason))

    def fail(self, message: str, status: int = 500) -> None:
        """End the generation with an error event (``status`` is the HTTP status it maps to)."""
        if not self.finished:
            self.error = message
            self.finish_reason = "error"
            self._send(Event("error", len(self.tokens), message=message, status=status))
