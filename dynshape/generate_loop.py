"""``dynshape.generate``: autoregressive decoding with a key/value cache (issue 30 item 4).

The loop transformers' ``generate`` runs for a decoder-only model, over a decoder step
exported to ONNX (``generate_model.py`` says which signature):

    prefill   input_ids = the prompts, past = empty (length 0), mask = the prompts' mask
    step t    input_ids = the token chosen at t - 1, past = the present of t - 1,
              mask = the previous mask with a column of ones appended

``position_ids`` are what transformers' ``prepare_inputs_for_generation`` makes of the mask
(GPT-2, Llama and the generic one since 4.45 alike): ``cumsum(mask) - 1``, set to 1 where the
mask is 0, the last ``seq`` columns fed. A left-padded batch therefore numbers each row's
tokens from 0 at its first real token, and every row's padding stays masked at every step.

A row that chooses an ``eos_token_id`` has finished: it gets the first eos id at every later
step (transformers pads with ``pad_token_id``, which defaults to the eos id) and the loop
stops once every row has finished, so the result may have fewer than ``max_new_tokens`` new
columns. Finished rows still run through the model (the batch keeps its shape), as they do in
transformers.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from .errors import GenerateError
from .generate_model import MASK, POSITIONS, TOKENS, DecoderStep
from .generate_sampling import TokenChooser


def generate(
    model: Any,
    input_ids: Any,
    max_new_tokens: int,
    *,
    attention_mask: Any = None,
    eos_token_id: int | Sequence[int] | None = None,
    do_sample: bool = False,
    temperature: float = 1.0,
    top_k: int | None = None,
    seed: int | None = None,
) -> np.ndarray:
    """Continue each prompt of ``input_ids`` by up to ``max_new_tokens`` tokens.

    ``model`` is a decoder step with a key/value cache: a path to an ONNX export (inputs
    ``input_ids``, ``past_key_values.{i}.key/value`` and, when it has them, ``attention_mask``
    and ``position_ids``; outputs ``logits`` and ``present.{i}.key/value``, as transformers'
    exporters name them), a ``dynshape.InferenceSession``, or a compiled ``Executable`` (or
    ``VirtualMachine``) of that signature. A path is imported and compiled on every call: make
    a session once to generate more than once.

    ``input_ids`` is ``[batch, prompt]`` integer token ids (one prompt may be 1-d); a batch
    of prompts of different lengths is padded on the left with ``attention_mask`` 0 there
    (``[batch, prompt]``, 0 and 1). Decoding is greedy (the most likely token) unless
    ``do_sample``, which draws from the softmax of ``logits / temperature`` over the
    ``top_k`` most likely tokens (all for None) with a numpy generator seeded by ``seed``:
    the same seed gives the same tokens. A row stops at an ``eos_token_id`` (an int or a list)
    and is padded with it after; the loop stops when every row has.

    Returns the ``[batch, prompt + new]`` int64 ids: the prompts followed by the new tokens,
    ``new`` being ``max_new_tokens`` or fewer if every row met an eos. Errors in what is given
    are ``GenerateError``s naming it; the model's run errors are the VM's.
    """
    decoder = DecoderStep.of(model)
    ids = checked_token_ids(input_ids, decoder.vocab)
    mask = _mask(attention_mask, ids.shape, decoder)
    eos = checked_eos_ids(eos_token_id, decoder.vocab)
    choose = TokenChooser(do_sample, temperature, top_k, seed)
    steps = checked_token_count(max_new_tokens)
    tokens = [ids]
    unfinished = np.ones(len(ids), bool)
    # the last step's past holds every token but the one it chooses: room for that, once
    feed, past = ids, decoder.empty_cache(len(ids), room=int(ids.shape[1] + steps - 1))
    for step in range(steps):
        logits, past = decoder.step(step_feeds(decoder, feed, mask, past))
        chosen = choose(logits[:, -1] if logits.ndim == 3 else logits, step)
        if eos is not None:
            chosen = np.where(unfinished, chosen, eos[0])
            unfinished &= ~np.isin(chosen, eos)
        tokens.append(chosen[:, None])
        if not unfinished.any():
            break
        feed = chosen[:, None]
        mask = np.concatenate([mask, np.ones((len(mask), 1), mask.dtype)], axis=1)
    return np.concatenate(tokens, axis=1)


def step_feeds(
    decoder: DecoderStep, ids: np.ndarray, mask: np.ndarray, past: Mapping[str, np.ndarray]
) -> dict[str, np.ndarray]:
    """One step's inputs, each in the model's dtype."""
    feeds = {TOKENS: ids.astype(decoder.token_dtype, copy=False), **past}
    if decoder.mask_dtype is not None:
        feeds[MASK] = mask.astype(decoder.mask_dtype, copy=False)
    if decoder.position_dtype is not None:
        feeds[POSITIONS] = positions(mask)[:, -ids.shape[1] :].astype(decoder.position_dtype)
    return feeds


def positions(mask: np.ndarray) -> np.ndarray:
    """transformers' position ids of an attention mask: ``cumsum(mask) - 1`` along the
    sequence, 1 where the mask is 0 (``position_ids.masked_fill_(attention_mask == 0, 1)``)."""
    pos = np.cumsum(mask, axis=-1, dtype=np.int64) - 1
    return np.where(mask == 0, 1, pos)


def checked_token_ids(value: Any, vocab: int | None) -> np.ndarray:
    """``value`` as a ``[batch, prompt]`` int64 array of ids below ``vocab``, or a
    GenerateError saying what is wrong with it (also the served requests' check)."""
    try:
        ids = np.asarray(value)
    except ValueError:  # numpy refuses ragged nested lists
        raise GenerateError(
            "input_ids: the prompts differ in length; pad them on the left to one length and "
            "pass attention_mask (0 over the padding)"
        ) from None
    if ids.dtype == object:
        raise GenerateError(
            "input_ids: the prompts differ in length or are not numbers; pad them on the left "
            "to one length and pass attention_mask (0 over the padding)"
        )
    if ids.dtype.kind not in "iu":
        raise GenerateError(f"input_ids must be integer token ids, got {ids.dtype} values")
    if ids.ndim == 1:
        ids = ids[None, :]
    if ids.ndim != 2:
        raise GenerateError(
            f"input_ids must be [batch, prompt] (or one prompt), got shape {ids.shape}"
        )
    if ids.shape[0] == 0 or ids.shape[1] == 0:
        raise GenerateError(f"input_ids is empty (shape {ids.shape}): a prompt needs a token")
    bad = (ids < 0) | (ids >= vocab if vocab is not None else False)
    if bad.any():
        row, col = (int(i) for i in np.argwhere(bad)[0])
        span = f"0..{vocab - 1}" if vocab is not None else "non-negative"
        raise GenerateError(
            f"input_ids[{row}, {col}] = {ids[row, col]} is not a token id of the model ({span})"
        )
    return ids.astype(np.int64)


def _mask(value: Any, shape: tuple[int, ...], decoder: DecoderStep) -> np.ndarray:
    if value is None:
        return np.ones(shape, np.int64)
    mask = np.asarray(value)
    if mask.ndim == 1 and len(shape) == 2 and shape[0] == 1:
        mask = mask[None, :]
    if mask.shape != shape:
        raise GenerateError(
            f"attention_mask has shape {mask.shape} but input_ids {shape}: one entry per token"
        )
    if mask.dtype.kind not in "biuf" or not np.isin(mask, (0, 1)).all():
        raise GenerateError("attention_mask must hold 0 (padding) and 1 (a token) only")
    mask = mask.astype(np.int64)
    for row, m in enumerate(mask):
        if not m.any():
            raise GenerateError(f"attention_mask row {row} is all 0: the prompt has no token")
        if (np.diff(m) < 0).any():
            raise GenerateError(
                f"attention_mask row {row} has a 0 after a 1: generate takes prompts padded on "
                "the left (the new tokens follow the last column)"
            )
    if decoder.mask_dtype is None and not mask.all():
        raise GenerateError(
            "attention_mask pads a prompt but the model has no attention_mask input: it would "
            "attend to the padding"
        )
    return mask


def checked_eos_ids(value: Any, vocab: int | None) -> np.ndarray | None:
    """``eos_token_id`` (an int or a list of them, or None) as an array of ids, checked."""
    if value is None:
        return None
    ids = [value] if isinstance(value, (int, np.integer)) else value
    if not isinstance(ids, Sequence) and not isinstance(ids, np.ndarray):
        raise GenerateError(f"eos_token_id must be an int or a list of ints, got {value!r}")
    out = []
    for v in ids:
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
            raise GenerateError(f"eos_token_id must be an int or a list of ints, got {value!r}")
        if v < 0 or (vocab is not None and v >= vocab):
            span = f"0..{vocab - 1}" if vocab is not None else "non-negative"
            raise GenerateError(f"eos_token_id {v} is not a token id of the model ({span})")
        out.append(int(v))
    if not out:
        raise GenerateError("eos_token_id is an empty list: give an id, or None")
    return np.array(out, np.int64)


def checked_token_count(value: Any) -> int:
    """``max_new_tokens``, checked to be a non-negative int."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
        raise GenerateError(f"max_new_tokens must be a non-negative int, got {value!r}")
    return int(value)
