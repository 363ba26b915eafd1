"""Every mistake ``dynshape.generate`` can be handed, each a ``GenerateError`` whose message
names it: models that are not decoder steps with a cache (no past, a past without its present,
a present without its past, an input it cannot feed, a cache laid out otherwise), and
arguments that do not fit (ids, mask, eos, counts, sampling options)."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

from generate_models import successor  # noqa: E402

import dynshape  # noqa: E402
from dynshape.generate_sampling import TokenChooser  # noqa: E402


def _error(model: Any, *args: Any, **options: Any) -> str:
    with pytest.raises(dynshape.GenerateError) as info:
        dynshape.generate(model, *args, **options)
    return str(info.value)


@pytest.fixture(scope="module")
def succ() -> dynshape.InferenceSession:
    return dynshape.InferenceSession(successor(vocab=16))


def test_a_model_without_past_inputs() -> None:
    model = successor(layers=0)
    assert _error(model, [[1]], 2) == (
        "the model has no past_key_values.{i}.key/value inputs (its inputs: input_ids, "
        "attention_mask, position_ids): generate needs a decoder exported with its key/value "
        "cache (transformers' use_cache=True, optimum's with_past)"
    )


def test_a_past_without_its_present() -> None:
    def present(i: int, kind: str) -> str:
        return "present.1.val" if (i, kind) == (1, "value") else f"present.{i}.{kind}"

    message = _error(successor(present_name=present), [[1]], 2)
    assert message.startswith(
        "the model has the input 'past_key_values.1.value' but no output 'present.1.value' to "
        "feed back as it (its outputs: logits, present.0.key, present.0.value, present.1.key, "
        "present.1.val)"
    )


def test_a_missing_layer_of_past() -> None:
    def past(i: int, kind: str) -> str:
        return f"past_key_values.{2 * i}.{kind}"

    message = _error(successor(past_name=past), [[1]], 2)
    assert message.startswith(
        "the model has no input 'past_key_values.1.key' but has past_key_values up to layer 2"
    )


def test_a_present_without_its_past() -> None:
    def past(i: int, kind: str) -> str:  # layer 1's past under a name generate does not match
        return f"past_cache.{i}.{kind}" if i == 1 else f"past_key_values.{i}.{kind}"

    def present(i: int, kind: str) -> str:
        return f"present.{2 * i}.{kind}"

    assert _error(successor(past_name=past, present_name=present), [[1]], 2) == (
        "the model has the output 'present.2.key' but no input 'past_key_values.2.key' to "
        "feed it back to"
    )


def test_an_input_generate_cannot_feed() -> None:
    message = _error(successor(extra_inputs=["token_type_ids"]), [[1]], 2)
    assert message == (
        "generate does not know what to feed the model's input 'token_type_ids': a decoder "
        "step takes input_ids, optionally attention_mask and position_ids, and "
        "past_key_values.{i}.key/value, and returns logits and present.{i}.key/value"
    )


def test_no_logits_output() -> None:
    message = _error(successor(logits_name="scores"), [[1]], 2)
    assert message.startswith("the model has no output 'logits' (its outputs: scores, ")


def test_a_cache_laid_out_otherwise() -> None:
    assert _error(successor(past_dims=("batch", "past_seq", 2)), [[1]], 2) == (
        "past_key_values.0.key is Tensor[(batch, past_seq, 2), float32]: generate takes the "
        "cache as transformers lays it out, (batch, heads, past_seq, head_dim)"
    )
    assert _error(successor(past_dims=("batch", "h", "past_seq", 2)), [[1]], 2) == (
        "past_key_values.0.key is Tensor[(batch, h, past_seq, 2), float32]: the prefill's "
        "empty past is made from this type, so its heads (axis 1) and head size (axis 3) must "
        "be static"
    )
    assert "its past length (axis 2) is fixed at 4" in _error(
        successor(past_dims=("batch", 1, 4, 2)), [[1]], 2
    )


def test_a_model_of_the_wrong_kind() -> None:
    assert _error(42, [[1]], 2) == (
        "model must be a path to an ONNX decoder, a dynshape.InferenceSession, an Executable "
        "or a VirtualMachine, got int"
    )
    with pytest.raises(dynshape.ModelImportError, match="no such model file"):
        dynshape.generate("missing.onnx", [[1]], 2)


@pytest.mark.parametrize(
    ("ids", "message"),
    [
        (
            [[1.0, 2.0]],
            "input_ids must be integer token ids, got float64 values",
        ),
        ([[True]], "input_ids must be integer token ids, got bool values"),
        (
            [[1, 2], [3]],
            "input_ids: the prompts differ in length; pad them on the left to one length and "
            "pass attention_mask (0 over the padding)",
        ),
        ([[1, -2]], "input_ids[0, 1] = -2 is not a token id of the model (0..15)"),
        ([[1], [16]], "input_ids[1, 0] = 16 is not a token id of the model (0..15)"),
        (np.zeros((1, 0), np.int64), "input_ids is empty (shape (1, 0)): a prompt needs a token"),
        (
            np.zeros((1, 1, 1), np.int64),
            "input_ids must be [batch, prompt] (or one prompt), got shape (1, 1, 1)",
        ),
    ],
)
def test_bad_token_ids(succ: dynshape.InferenceSession, ids: Any, message: str) -> None:
    assert _error(succ, ids, 2) == message


@pytest.mark.parametrize(
    ("mask", "message"),
    [
        ([[1, 1]], "attention_mask has shape (1, 2) but input_ids (2, 3): one entry per token"),
        ([[1, 2, 1], [1, 1, 1]], "attention_mask must hold 0 (padding) and 1 (a token) only"),
        ([[0, 0, 0], [1, 1, 1]], "attention_mask row 0 is all 0: the prompt has no token"),
        (
            [[1, 1, 1], [1, 1, 0]],
            "attention_mask row 1 has a 0 after a 1: generate takes prompts padded on the left "
            "(the new tokens follow the last column)",
        ),
    ],
)
def test_bad_masks(succ: dynshape.InferenceSession, mask: Any, message: str) -> None:
    assert _error(succ, [[1, 2, 3], [4, 5, 6]], 2, attention_mask=mask) == message


def test_padding_for_a_model_without_a_mask() -> None:
    sess = dynshape.InferenceSession(successor(mask=False))
    assert _error(sess, [[0, 1]], 2, attention_mask=[[0, 1]]) == (
        "attention_mask pads a prompt but the model has no attention_mask input: it would "
        "attend to the padding"
    )


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"eos_token_id": 16}, "eos_token_id 16 is not a token id of the model (0..15)"),
        ({"eos_token_id": [2, -1]}, "eos_token_id -1 is not a token id of the model (0..15)"),
        ({"eos_token_id": []}, "eos_token_id is an empty list: give an id, or None"),
        ({"eos_token_id": 2.0}, "eos_token_id must be an int or a list of ints, got 2.0"),
        ({"eos_token_id": True}, "eos_token_id must be an int or a list of ints, got True"),
        ({"do_sample": 1}, "do_sample must be True or False, got 1"),
        (
            {"do_sample": True, "temperature": 0.0},
            "temperature must be a positive finite number, got 0.0",
        ),
        (
            {"do_sample": True, "temperature": float("nan")},
            "temperature must be a positive finite number, got nan",
        ),
        ({"do_sample": True, "top_k": 0}, "top_k must be a positive int or None, got 0"),
        ({"do_sample": True, "seed": -1}, "seed must be a non-negative int or None, got -1"),
        (
            {"temperature": 0.7},
            "temperature=0.7 is for sampling: pass do_sample=True (--sample; greedy decoding "
            "takes the most likely token and would ignore it)",
        ),
        ({"top_k": 5}, "top_k=5 is for sampling: pass do_sample=True"),
    ],
)
def test_bad_options(succ: dynshape.InferenceSession, options: Any, message: str) -> None:
    assert _error(succ, [[1]], 2, **options).startswith(message)


@pytest.mark.parametrize("count", [-1, 2.0, True, None])
def test_bad_max_new_tokens(succ: dynshape.InferenceSession, count: Any) -> None:
    assert _error(succ, [[1]], count) == (
        f"max_new_tokens must be a non-negative int, got {count!r}"
    )


def test_logits_that_cannot_be_decoded() -> None:
    logits = np.array([[0.0, 1.0], [np.nan, 0.0]], np.float32)
    with pytest.raises(dynshape.GenerateError, match=re.escape("NaN at step 3 (row 1)")):
        TokenChooser()(logits, 3)
    logits = np.array([[0.0, np.inf]], np.float32)
    assert TokenChooser()(logits, 0).tolist() == [1]  # greedy takes it
    with pytest.raises(dynshape.GenerateError, match=re.escape("+inf at step 0 (row 0)")):
        TokenChooser(do_sample=True)(logits, 0)
    logits = np.array([[-np.inf, -np.inf]], np.float32)
    with pytest.raises(dynshape.GenerateError, match="every logit of row 0 is -inf at step 0"):
        TokenChooser(do_sample=True)(logits, 0)
