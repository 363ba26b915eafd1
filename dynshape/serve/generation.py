"""Generations served with continuous batching over one decoder step (issue 31 item 6; numpy
only, no Ray: the deployment in ``generation_server.py`` runs this in its replica).

    batcher = ContinuousBatcher(DecoderStep.of(session))
    batcher.start()                                    # one thread steps the joint batch
    gen = batcher.submit([5, 6, 7], {"max_new_tokens": 8, "eos_token_id": 2})
    for event in gen.events(): ...                     # a token each step, then "done"
    batcher.close()

Every request is a ``Generation`` (``generation_request.py``): its prompt, its options
(``GenerationOptions``), its own ``TokenChooser`` (so a seeded sampled request draws what it
draws alone) and where its events go. One scheduler iteration (``run_once``):

1. requests that were cancelled leave; waiting requests are admitted (up to ``max_batch``
   rows in all) and **prefilled** together: left-padded to their longest prompt with
   attention_mask 0 over the padding, exactly as ``dynshape.generate`` pads a batch; each gets
   its first token from the prefill;
2. the prefilled rows **join** the running batch: caches and masks left-padded (zeros, mask 0)
   to the longer past, then stacked, so sequences at different past lengths share one call;
3. **one decode step** for every row of the running batch (each its last token, positions
   ``cumsum(mask) - 1`` as ``generate`` feeds them), a token to each;
4. rows that finished (eos, ``max_new_tokens``, an error) or were cancelled leave at once:
   their rows are taken out of the cache, and leading columns that are padding in every
   remaining row are dropped, so the joint past is as long as its longest member's.

A model without an ``attention_mask`` input cannot hide padding, so only sequences of equal
past length share a call there: each prefill group has one prompt length, and batches merge
only when their pasts are equally long (else they are stepped one after the other).

Greedy tokens equal ``dynshape.generate`` run alone on the same prompt: the padding is masked
and the positions are the row's own, as in ``generate``'s left-padded batches (tested with
GPT-2- and Llama-style decoders, requests joining at different steps). A decode step that
fails fails every row of its batch (their caches were donated to the call and cannot be run
again); a prefill that fails is run again for each request alone, so a bad request cannot
fail its neighbours.
"""

from __future__ import annotations

import itertools
import threading
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from vm import StepLimitError

from ..errors import GenerateError
from ..generate_loop import checked_token_ids, step_feeds
from ..generate_model import DecoderStep
from .budgets import BUDGET_STATUS, LIMIT_NEW_TOKENS, LIMIT_PROMPT_TOKENS
from .generation_request import Event, Generation, GenerationOptions

DEFAULT_MAX_ROWS = 64
#: How many decode steps' batch sizes ``ContinuousBatcher.step_rows`` keeps.
TRACE = 10_000


@dataclass
class _Batch:
    """Rows that share decode steps: their generations, their joint cache (every past
    ``[rows, heads, past, head_dim]``) and mask ``[rows, past]`` (0 over left padding)."""

    rows: list[Generation]
    cache: dict[str, np.ndarray]
    mask: np.ndarray

    @property
    def past(self) -> int:
        return int(self.mask.shape[1])

    def keep(self, keep: Sequence[int]) -> None:
        """Only these rows stay; columns that are padding in every one of them go."""
        index = np.asarray(keep, np.int64)
        mask = self.mask[index]
        first = int(np.argmax(mask.any(axis=0))) if len(index) else 0
        self.rows = [self.rows[i] for i in keep]
        self.mask = np.ascontiguousarray(mask[:, first:])
        self.cache = {
            k: np.ascontiguousarray(v[index][:, :, first:]) for k, v in self.cache.items()
        }


def _padded(batch: _Batch, past: int) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """The batch's cache and mask left-padded to ``past`` columns (zeros, mask 0)."""
    extra = past - batch.past
    if extra == 0:
        return batch.cache, batch.mask
    rows = len(batch.rows)
    mask = np.concatenate([np.zeros((rows, extra), batch.mask.dtype), batch.mask], axis=1)
    cache = {}
    for k, v in batch.cache.items():
        pad = np.zeros((rows, v.shape[1], extra, v.shape[3]), v.dtype)
        cache[k] = np.concatenate([pad, v], axis=2)
    return cache, mask


def join(a: _Batch, b: _Batch) -> _Batch:
    """One batch of both: the shorter past left-padded to the longer (see the module doc)."""
    past = max(a.past, b.past)
    (ca, ma), (cb, mb) = _padded(a, past), _padded(b, past)
    cache = {k: np.concatenate([ca[k], cb[k]], axis=0) for k in ca}
    return _Batch([*a.rows, *b.rows], cache, np.concatenate([ma, mb], axis=0))


@dataclass
class BatcherStats:
    """What the batcher did: model calls, rows they carried, requests and tokens."""

    prefill_calls: int = 0
    decode_calls: int = 0
    decode_rows: int = 0
    requests: int = 0
    tokens: int = 0
    finished: int = 0
    cancelled: int = 0
    failed: int = 0
    step_rows: deque[int] = field(default_factory=lambda: deque(maxlen=TRACE))
    """The rows of each recent decode call, oldest first."""

    def as_dict(self) -> dict[str, Any]:
        """The counts as JSON-ready numbers (without the trace)."""
        out = {k: v for k, v in self.__dict__.items() if k != "step_rows"}
        out["mean_decode_rows"] = self.decode_rows / self.decode_calls if self.decode_calls else 0
        return out


class ContinuousBatcher:
    """Continuous batching of generations over one decoder step (see the module doc).

    ``max_rows`` bounds the rows of one call (more requests wait), ``limit_new_tokens`` and
    ``limit_prompt_tokens`` one request's work. ``join=False`` never shares a call between
    requests (each request its own batch: the one-at-a-time baseline the benchmark compares
    with). ``submit`` may be called from any thread; ``run_once`` is the scheduler's
    iteration, run by ``start``'s thread (or called directly, one thread at a time)."""

    def __init__(
        self,
        decoder: DecoderStep,
        *,
        max_rows: int = DEFAULT_MAX_ROWS,
        limit_new_tokens: int = LIMIT_NEW_TOKENS,
        limit_prompt_tokens: int = LIMIT_PROMPT_TOKENS,
        join: bool = True,
    ) -> None:
        if max_rows < 1 or limit_new_tokens < 1 or limit_prompt_tokens < 1:
            raise GenerateError(
                f"max_rows ({max_rows}), limit_new_tokens ({limit_new_tokens}) and "
                f"limit_prompt_tokens ({limit_prompt_tokens}) must be >= 1"
            )
        self.decoder = decoder
        self.max_rows = max_rows
        self.limit_new_tokens = limit_new_tokens
        self.limit_prompt_tokens = limit_prompt_tokens
        self.joins = join
        self.stats = BatcherStats()
        self._numbers = itertools.count(1)
        self._waiting: deque[Generation] = deque()
        self._batches: list[_Batch] = []
        self._cond = threading.Condition()
        self._closed = False
        self._thread: threading.Thread | None = None

    # -- requests ---------------------------------------------------------------------

    def submit(
        self,
        input_ids: Any,
        parameters: Mapping[str, Any] | None = None,
        deliver: Callable[[Event], None] | None = None,
    ) -> Generation:
        """Queue a generation of one prompt (a list of token ids) with ``parameters``
        (``GenerationOptions.parse``); its events go to ``deliver`` (called on the
        scheduler's thread; it must not block) or are queued on the returned
        ``Generation``. A bad prompt or option raises ``GenerateError`` here."""
        prompt = self.check_prompt(input_ids)
        options = GenerationOptions.parse(parameters, self.decoder.vocab, self.limit_new_tokens)
        gen = Generation(next(self._numbers), prompt, options, deliver)
        with self._cond:
            if self._closed:
                raise GenerateError("the generation server is stopping")
            self.stats.requests += 1
            if options.max_new_tokens == 0:  # generate returns the prompt alone: nothing to run
                gen.finish("length")
                self.stats.finished += 1
                return gen
            self._waiting.append(gen)
            self._cond.notify()
        return gen

    def check_prompt(self, input_ids: Any) -> np.ndarray:
        """One prompt's token ids as 1-d int64 (``GenerateError`` naming what is wrong)."""
        if isinstance(input_ids, (str, bytes)) or (
            isinstance(input_ids, Sequence) and any(isinstance(v, bool) for v in input_ids)
        ):
            raise GenerateError(f"input_ids must be a list of token ids, got {input_ids!r:.80}")
        if np.ndim(input_ids) != 1:
            raise GenerateError(
                f"input_ids must be one prompt, a list of token ids (shape {np.shape(input_ids)} "
                "given): send one request a prompt"
            )
        if len(input_ids) == 0:
            raise GenerateError("input_ids is empty: a prompt needs a token")
        if len(input_ids) > self.limit_prompt_tokens:
            raise GenerateError(
                f"the prompt has {len(input_ids)} tokens, beyond this server's limit of "
                f"{self.limit_prompt_tokens}"
            )
        prompt: np.ndarray = checked_token_ids(input_ids, self.decoder.vocab)[0]
        return prompt

    @property
    def active(self) -> int:
        """Rows in the running batches."""
        return sum(len(b.rows) for b in self._batches)

    @property
    def waiting(self) -> int:
        """Requests not yet admitted."""
        with self._cond:
            return len(self._waiting)

    # -- the scheduler ----------------------------------------------------------------

    def run_once(self) -> bool:
        """One iteration (see the module doc); False when there was nothing to do."""
        self._leave()
        with self._cond:
            room = self.max_rows - self.active
            new = [self._waiting.popleft() for _ in range(min(room, len(self._waiting)))]
        new = self._without_cancelled(new)
        if not new and not self._batches:
            return False
        for group in self._groups(new):
            self._prefill(group)
        for batch in list(self._batches):
            self._decode(batch)
        self._leave()
        return True

    def _without_cancelled(self, gens: list[Generation]) -> list[Generation]:
        live = [g for g in gens if not g.cancelled]
        self.stats.cancelled += len(gens) - len(live)
        return live

    def _groups(self, new: list[Generation]) -> list[list[Generation]]:
        """Who is prefilled together: all (padded, masked), or one prompt length a group for
        a model without a mask; each alone when joining is off."""
        if not self.joins:
            return [[g] for g in new]
        if self.decoder.mask_dtype is not None:
            return [new] if new else []
        by_length: dict[int, list[Generation]] = {}
        for g in new:
            by_length.setdefault(len(g.prompt), []).append(g)
        return list(by_length.values())

    def _prefill(self, group: list[Generation]) -> None:
        width = max(len(g.prompt) for g in group)
        ids = np.zeros((len(group), width), np.int64)
        mask = np.zeros((len(group), width), np.int64)
        for i, g in enumerate(group):
            ids[i, width - len(g.prompt) :] = g.prompt
            mask[i, width - len(g.prompt) :] = 1
        decoder = self.decoder
        try:
            self.stats.prefill_calls += 1
            logits, past = decoder.step(
                step_feeds(decoder, ids, mask, decoder.empty_cache(len(group)))
            )
        except Exception as e:  # which request was wrong: each alone
            if len(group) > 1:
                for g in group:
                    self._prefill([g])
                return
            self._fail_all(group, f"the model failed on the prompt: {_line(e)}", _status(e))
            return
        batch = _Batch(group, past, mask)
        self._choose(batch, logits)
        self._merge(batch)

    def _merge(self, batch: _Batch) -> None:
        """Into a running batch it can share calls with, else as a batch of its own."""
        self._keep_unfinished(batch)
        if not batch.rows:
            return
        if self.joins:
            for i, other in enumerate(self._batches):
                if self.decoder.mask_dtype is not None or other.past == batch.past:
                    self._batches[i] = join(other, batch)
                    return
        self._batches.append(batch)

    def _decode(self, batch: _Batch) -> None:
        if not batch.rows:
            return
        decoder = self.decoder
        last = np.array([[g.tokens[-1]] for g in batch.rows], np.int64)
        mask = np.concatenate([batch.mask, np.ones((len(batch.rows), 1), np.int64)], axis=1)
        self.stats.decode_calls += 1
        self.stats.decode_rows += len(batch.rows)
        self.stats.step_rows.append(len(batch.rows))
        try:
            logits, past = decoder.step(step_feeds(decoder, last, mask, batch.cache))
        except Exception as e:  # the cache was donated to the call: no row can go on
            self._fail_all(batch.rows, f"the model failed at a decode step: {_line(e)}", _status(e))
            batch.rows, batch.cache = [], {}
            batch.mask = np.zeros((0, 0), np.int64)
            return
        batch.cache, batch.mask = past, mask
        self._choose(batch, logits)

    def _choose(self, batch: _Batch, logits: np.ndarray) -> None:
        """Each row's next token, chosen by its own chooser from its own logits."""
        last = logits[:, -1] if logits.ndim == 3 else logits
        for i, g in enumerate(batch.rows):
            if g.cancelled:
                continue
            try:
                token = int(g.chooser(last[i : i + 1], len(g.tokens))[0])
            except GenerateError as e:
                self._fail_all([g], str(e))
                continue
            self.stats.tokens += 1
            g.add_token(token)
            if g.finished:
                self.stats.finished += 1

    def _leave(self) -> None:
        """Finished and cancelled rows leave their batches; empty batches go."""
        for batch in self._batches:
            self._keep_unfinished(batch)
        self._batches = [b for b in self._batches if b.rows]

    def _keep_unfinished(self, batch: _Batch) -> None:
        keep = [i for i, g in enumerate(batch.rows) if not g.finished and not g.cancelled]
        gone = len(batch.rows) - len(keep)
        if gone:
            self.stats.cancelled += sum(1 for g in batch.rows if g.cancelled and not g.finished)
            batch.keep(keep)

    def _fail_all(self, gens: Sequence[Generation], message: str, status: int = 500) -> None:
        for g in gens:
            if not g.finished:
                self.stats.failed += 1
                g.fail(message, status)

    # -- the thread -------------------------------------------------------------------

    def start(self) -> None:
        """Step the batch on a thread of its own until ``close``."""
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._loop, name="dynshape-generate", daemon=True
            )
            self._thread.start()

    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self._closed and not self._waiting and not self._batches:
                    self._cond.wait()
                if self._closed:
                    return
            try:
                self.run_once()
            except Exception as e:  # a bug of ours: every generation hears of it, none hangs
                rows = [g for b in self._batches for g in b.rows]
                self._fail_all(rows, f"internal error: {_line(e)}")
                self._batches = []

    def close(self) -> None:
        """Stop the thread; generations not finished get an ``error`` event."""
        with self._cond:
            self._closed = True
            waiting = list(self._waiting)
            self._waiting.clear()
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join()
        rows = [g for b in self._batches for g in b.rows]
        self._fail_all([*waiting, *rows], "the generation server is stopping", 503)
        self._batches = []


def _status(e: Exception) -> int:
    """A failed run's HTTP status: its budget's (422) when it ran out of it, else 500."""
    return BUDGET_STATUS if isinstance(e, StepLimitError) else 500


def _line(e: Exception) -> str:
    return f"{type(e).__name__}: {e}".splitlines()[0]
