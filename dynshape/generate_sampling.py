"""Choosing the next token from a step's logits: greedy, or sampled as transformers samples.

Greedy takes the most likely token (``argmax``, the first on a tie, as ``torch.argmax``).
Sampling applies transformers' warpers in its order, temperature then top-k (``scores /
temperature``; the scores below the k-th largest set to -inf, ties with it kept), then draws
from the softmax with a ``numpy.random.Generator`` seeded once per ``generate`` call: one
uniform per row per step, every row drawing whether it has finished or not, so a seed gives
the same tokens on every machine numpy runs on (the draw is an inverse-CDF lookup in float64,
not a call whose algorithm numpy may change).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .errors import GenerateError


@dataclass
class TokenChooser:
    """Picks one token per row from ``[batch, vocab]`` logits (``chooser(logits)``)."""

    do_sample: bool = False
    """Sample (True) or take the most likely token (False)."""
    temperature: float = 1.0
    """Divides the logits before sampling (below 1 sharpens, above flattens)."""
    top_k: int | None = None
    """Sample among the k most likely tokens only (None: all)."""
    seed: int | None = None
    """Seeds the generator (None: fresh entropy, a different draw each call)."""
    rng: np.random.Generator = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if not isinstance(self.do_sample, (bool, np.bool_)):
            raise GenerateError(f"do_sample must be True or False, got {self.do_sample!r}")
        t = self.temperature
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not t > 0 or t == np.inf:
            raise GenerateError(f"temperature must be a positive finite number, got {t!r}")
        k = self.top_k
        if k is not None and (isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1):
            raise GenerateError(f"top_k must be a positive int or None, got {k!r}")
        if not self.do_sample and (t != 1.0 or k is not None):
            what = f"temperature={t!r}" if t != 1.0 else f"top_k={k!r}"
            raise GenerateError(
                f"{what} is for sampling: pass do_sample=True (--sample; greedy decoding "
                "takes the most likely token and would ignore it)"
            )
        s = self.seed
        if s is not None and (isinstance(s, bool) or not isinstance(s, (int, np.integer)) or s < 0):
            raise GenerateError(f"seed must be a non-negative int or None, got {s!r}")
        self.rng = np.random.default_rng(s)

    def __call__(self, logits: np.ndarray, step: int) -> np.ndarray:
        """The chosen token of each row (int64); ``step`` names the step in errors."""
        if np.isnan(logits).any():
            row = int(np.argwhere(np.isnan(logits))[0][0])
            raise GenerateError(f"the model's logits hold NaN at step {step} (row {row})")
        if not self.do_sample:
            greedy: np.ndarray[Any, Any] = np.argmax(logits, axis=-1).astype(np.int64)
            return greedy
        return self._sample(logits.astype(np.float64), step)

    def _sample(self, scores: np.ndarray, step: int) -> np.ndarray:
        if np.isposinf(scores).any():
            row = int(np.argwhere(np.isposinf(scores))[0][0])
            raise GenerateError(
                f"cannot sample: the model's logits hold +inf at step {step} (row {row})"
            )
        scores = scores / self.temperature
        k = self.top_k
        if k is not None and k < scores.shape[-1]:
            kth = np.partition(scores, -k, axis=-1)[:, -k, None]
            scores = np.where(scores < kth, -np.inf, scores)
        top = scores.max(axis=-1, keepdims=True)
        if np.isneginf(top).any():
            row = int(np.argwhere(np.isneginf(top))[0][0])
            raise GenerateError(f"cannot sample: every logit of row {row} is -inf at step {step}")
        cdf = np.cumsum(np.exp(scores - top), axis=-1)
        # The first token whose cumulative weight exceeds u * total: a token of weight 0 never
        # is (its cdf equals its predecessor's), and u < 1 makes the last one reachable.
        u = self.rng.random(len(cdf))[:, None] * cdf[:, -1:]
        chosen: np.ndarray[Any, Any] = np.argmax(cdf > u, axis=-1).astype(np.int64)
        return chosen
