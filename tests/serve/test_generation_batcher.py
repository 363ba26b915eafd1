"""The continuous batcher of served generation (``dynshape/serve/generation.py``), without Ray:
requests that join the running batch at different steps and with different prompt lengths get,
greedy, the tokens ``dynshape.generate`` gives each alone (GPT-2- and Llama-style decoders) and,
sampled with a seed, the same draws; they share decode calls (counted); a finished or cancelled
request leaves at once and the joint past shrinks to its longest member's; a model without an
attention_mask joins equal pasts only; bad prompts and options are refused by name."""

from __future__ import annotations

import threading
from typing import Any

import pytest

pytest.importorskip("onnx")

import dynshape
from dynshape.errors import GenerateError
from dynshape.generate_model import DecoderStep
from dynshape.serve.generation import ContinuousBatcher
from dynshape.serve.generation_request import Event, GenerationOptions
from tests.onnx.generate_models import gpt2, llama, successor

PROMPTS = [[5, 6, 7, 8, 9], [11, 12], [3, 4, 5, 6, 7, 8, 9, 10, 11], [1]]
NEW = [8, 5, 12, 3]


@pytest.fixture(scope="module")
def sessions() -> dict[str, dynshape.InferenceSession]:
    return {"gpt2": dynshape.InferenceSession(gpt2()), "llama": dynshape.InferenceSession(llama())}


@pytest.fixture(scope="module")
def succ() -> dynshape.InferenceSession:
    return dynshape.InferenceSession(successor(vocab=16))


def _alone(session: Any, prompt: list[int], new: int, **options: Any) -> list[int]:
    out = dynshape.generate(session, [prompt], new, **options)
    return [int(t) for t in out[0, len(prompt) :]]


def _drain(batcher: ContinuousBatcher) -> None:
    while batcher.run_once():
        pass


@pytest.mark.parametrize("name", ["gpt2", "llama"])
def test_joined_at_different_steps_greedy_equals_alone(sessions: dict[str, Any], name: str) -> None:
    session = sessions[name]
    batcher = ContinuousBatcher(DecoderStep.of(session))
    gens = [batcher.submit(PROMPTS[0], {"max_new_tokens": NEW[0]})]
    batcher.run_once()
    batcher.run_once()
    gens.append(batcher.submit(PROMPTS[1], {"max_new_tokens": NEW[1]}))
    batcher.run_once()
    gens += [
        batcher.submit(p, {"max_new_tokens": n}) for p, n in zip(PROMPTS[2:], NEW[2:], strict=True)
    ]
    _drain(batcher)
    for prompt, new, gen in zip(PROMPTS, NEW, gens, strict=True):
        assert gen.result(timeout=1) == _alone(session, prompt, new)
        assert gen.finish_reason == "length"
    rows = list(batcher.stats.step_rows)
    assert max(rows) == 4  # all four shared decode calls
    # one token per request from its prefill, the rest from decode calls, none wasted
    assert batcher.stats.decode_rows == sum(NEW) - len(NEW)
    assert batcher.stats.prefill_calls == 3 and batcher.stats.tokens == sum(NEW)
    assert not batcher.active


def test_events_are_tokens_then_done(succ: Any) -> None:
    batcher = ContinuousBatcher(DecoderStep.of(succ))
    gen = batcher.submit([3], {"max_new_tokens": 3})
    _drain(batcher)
    assert list(gen.events(timeout=1)) == [
        Event("token", 0, 4),
        Event("token", 1, 5),
        Event("token", 2, 6),
        Event("done", 3, finish_reason="length"),
    ]


def test_eos_leaves_at_once_and_others_go_on(succ: Any) -> None:
    batcher = ContinuousBatcher(DecoderStep.of(succ))
    short = batcher.submit([3], {"max_new_tokens": 10, "eos_token_id": 5})
    long = batcher.submit([3], {"max_new_tokens": 6})
    _drain(batcher)
    assert short.result(timeout=1) == [4, 5] and short.finish_reason == "eos"
    assert long.result(timeout=1) == [4, 5, 6, 7, 8, 9]
    assert list(batcher.stats.step_rows) == [2, 1, 1, 1, 1]
    assert short.result(timeout=1) == _alone(succ, [3], 10, eos_token_id=5)


def test_eos_list_and_first_token_eos(succ: Any) -> None:
    batcher = ContinuousBatcher(DecoderStep.of(succ))
    gen = batcher.submit([3], {"max_new_tokens": 10, "eos_token_id": [9, 4]})
    _drain(batcher)
    assert gen.result(timeout=1) == [4] and gen.finish_reason == "eos"
    assert batcher.stats.decode_calls == 0  # finished by its prefill


@pytest.mark.parametrize("name", ["gpt2", "llama"])
def test_cancelled_leaves_the_batch_at_the_next_step(sessions: dict[str, Any], name: str) -> None:
    session = sessions[name]
    batcher = ContinuousBatcher(DecoderStep.of(session))
    long = batcher.submit(PROMPTS[2], {"max_new_tokens": 10})  # the longer prompt
    other = batcher.submit(PROMPTS[1], {"max_new_tokens": 10})
    batcher.run_once()
    batcher.run_once()
    assert batcher.active == 2
    sent = len(long.tokens)
    long.cancel()
    batcher.run_once()
    assert batcher.active == 1 and list(batcher.stats.step_rows)[-1] == 1
    assert len(long.tokens) == sent  # nothing more for it
    # its padding columns went with it: the joint past is the other's own length
    (batch,) = batcher._batches
    assert batch.past == len(PROMPTS[1]) + len(other.tokens) - 1
    assert batch.mask.all()
    _drain(batcher)
    assert other.result(timeout=1) == _alone(session, PROMPTS[1], 10)
    assert batcher.stats.cancelled == 1


def test_cancelled_while_waiting_is_never_run(succ: Any) -> None:
    batcher = ContinuousBatcher(DecoderStep.of(succ))
    gen = batcher.submit([3], {"max_new_tokens": 4})
    gen.cancel()
    assert not batcher.run_once()
    assert batcher.stats.prefill_calls == 0 and batcher.stats.cancelled == 1


def test_sampled_with_a_seed_draws_as_alone(sessions: dict[str, Any]) -> None:
    session = sessions["gpt2"]
    options = {"do_sample": True, "temperature": 0.8, "top_k": 50, "seed": 11}
    batcher = ContinuousBatcher(DecoderStep.of(session))
    greedy = batcher.submit(PROMPTS[0], {"max_new_tokens": 6})
    batcher.run_once()
    sampled = batcher.submit(PROMPTS[1], {"max_new_tokens": 6, **options})
    again = batcher.submit(PROMPTS[1], {"max_new_tokens": 6, **options})
    _drain(batcher)
    expected = _alone(session, PROMPTS[1], 6, **options)
    assert sampled.result(timeout=1) == expected == again.result(timeout=1)
    assert greedy.result(timeout=1) == _alone(session, PROMPTS[0], 6)


def test_without_a_mask_only_equal_pasts_share_calls() -> None:
    session = dynshape.InferenceSession(successor(vocab=16, mask=False))
    batcher = ContinuousBatcher(DecoderStep.of(session))
    a = batcher.submit([1, 2], {"max_new_tokens": 4})
    b = batcher.submit([7], {"max_new_tokens": 4})
    c = batcher.submit([9, 10], {"max_new_tokens": 4})
    batcher.run_once()
    # two prefill calls (lengths 2 and 1), two batches: a and c together, b alone
    assert batcher.stats.prefill_calls == 2 and sorted(len(x.rows) for x in batcher._batches) == [
        1,
        2,
    ]
    _drain(batcher)
    assert a.result(timeout=1) == [3, 4, 5, 6]
    assert b.result(timeout=1) == [8, 9, 10, 11]
    assert c.result(timeout=1) == [11, 12, 13, 14]
    assert max(batcher.stats.step_rows) == 2


def test_at_most_max_rows_share_a_call(succ: Any) -> None:
    batcher = ContinuousBatcher(DecoderStep.of(succ), max_rows=2)
    gens = [batcher.submit([i], {"max_new_tokens": 3}) for i in range(5)]
    _drain(batcher)
    assert [g.result(timeout=1) for g in gens] == [[i + 1, i + 2, i + 3] for i in range(5)]
    assert max(batcher.stats.step_rows) == 2


def test_not_joined_runs_each_request_in_its_own_calls(succ: Any) -> None:
    batcher = ContinuousBatcher(DecoderStep.of(succ), join=False)
    gens = [batcher.submit([i], {"max_new_tokens": 3}) for i in range(3)]
    _drain(batcher)
    assert [g.result(timeout=1) for g in gens] == [[i + 1, i + 2, i + 3] for i in range(3)]
    assert set(batcher.stats.step_rows) == {1} and batcher.stats.prefill_calls == 3


def test_no_new_tokens_is_done_at_once(succ: Any) -> None:
    batcher = ContinuousBatcher(DecoderStep.of(succ))
    gen = batcher.submit([3], {"max_new_tokens": 0})
    assert gen.result(timeout=1) == [] and gen.finish_reason == "length"
    assert not batcher.run_once()


def test_threaded_concurrent_requests(sessions: dict[str, Any]) -> None:
    session = sessions["llama"]
    batcher = ContinuousBatcher(DecoderStep.of(session))
    batcher.start()
    results: dict[int, list[int]] = {}

    def client(i: int) -> None:
        prompt = PROMPTS[i % len(PROMPTS)]
        results[i] = batcher.submit(prompt, {"max_new_tokens": 4 + i}).result(timeout=60)

    try:
        threads = [threading.Thread(target=client, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        batcher.close()
    for i in range(8):
        assert results[i] == _alone(session, PROMPTS[i % len(PROMPTS)], 4 + i)


def test_close_fails_what_is_not_finished(succ: Any) -> None:
    batcher = ContinuousBatcher(DecoderStep.of(succ))
    gen = batcher.submit([3], {"max_new_tokens": 4})
    batcher.close()
    with pytest.raises(GenerateError, match="the generation server is stopping"):
        gen.result(timeout=1)
    with pytest.raises(GenerateError, match="stopping"):
        batcher.submit([3], {"max_new_tokens": 4})


def test_a_failing_decode_step_fails_its_rows_with_the_model_s_message(succ: Any) -> None:
    decoder = DecoderStep.of(succ)
    batcher = ContinuousBatcher(decoder)
    gen = batcher.submit([3], {"max_new_tokens": 4})
    batcher.run_once()

    def broken(feeds: Any) -> Any:
        raise dynshape.VMError("kernel exploded")

    decoder.step = broken  # type: ignore[method-assign]
    batcher.run_once()
    with pytest.raises(
        GenerateError, match=r"the model failed at a decode step: .*kernel exploded"
    ):
        gen.result(timeout=1)
    assert batcher.stats.failed == 1 and not batcher.active


@pytest.mark.parametrize(
    ("prompt", "message"),
    [
        ([], r"input_ids is empty"),
        ([1, 99], r"input_ids\[0, 1\] = 99 is not a token id of the model \(0..15\)"),
        ([1, -1], r"input_ids\[0, 1\] = -1 is not a token id"),
        ([[1, 2]], r"input_ids must be one prompt"),
        ("1,2", r"input_ids must be a list of token ids"),
        ([1.5, 2], r"input_ids must be integer token ids"),
        ([True, 2], r"input_ids must be a list of token ids"),
        (list(range(5000)), r"the prompt has 5000 tokens, beyond this server's limit of 4096"),
    ],
)
def test_bad_prompts_are_refused_by_name(succ: Any, prompt: Any, message: str) -> None:
    batcher = ContinuousBatcher(DecoderStep.of(succ))
    with pytest.raises(GenerateError, match=message):
        batcher.submit(prompt, {"max_new_tokens": 2})


@pytest.mark.parametrize(
    ("parameters", "message"),
    [
        ({"max_tokens": 3}, r"unknown generation parameter 'max_tokens' \(known: max_new_tokens"),
        ({"max_new_tokens": -1}, r"max_new_tokens must be a non-negative int, got -1"),
        ({"max_new_tokens": "3"}, r"max_new_tokens must be a non-negative int, got '3'"),
        ({"max_new_tokens": 2000}, r"max_new_tokens 2000 is beyond this server's limit of 1024"),
        ({"eos_token_id": 16}, r"eos_token_id 16 is not a token id of the model \(0..15\)"),
        ({"eos_token_id": "2"}, r"eos_token_id must be an int or a list of ints"),
        ({"temperature": 0.5}, r"temperature=0.5 is for sampling: pass do_sample=True"),
        ({"do_sample": True, "temperature": 0}, r"temperature must be a positive finite"),
        ({"do_sample": True, "top_k": 0}, r"top_k must be a positive int or None, got 0"),
        ({"do_sample": "yes"}, r"do_sample must be True or False, got 'yes'"),
        ({"do_sample": True, "seed": -3}, r"seed must be a non-negative int or None, got -3"),
    ],
)
def test_bad_options_are_refused_by_name(
    succ: Any, parameters: dict[str, Any], message: str
) -> None:
    batcher = ContinuousBatcher(DecoderStep.of(succ))
    with pytest.raises(GenerateError, match=message):
        batcher.submit([1, 2], parameters)
    assert batcher.waiting == 0


def test_options_default_to_greedy_16_tokens() -> None:
    assert GenerationOptions.parse(None, 16) == GenerationOptions(16, None, False, 1.0, None, None)
    with pytest.raises(GenerateError, match="parameters must be an object, got list"):
        GenerationOptions.parse([1], 16)  # type: ignore[arg-type]
