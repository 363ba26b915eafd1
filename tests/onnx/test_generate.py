"""``dynshape.generate`` (issue 30 items 4 and 6): greedy tokens equal onnxruntime's running
the same loop, for a GPT-2- and a Llama-style decoder (RMSNorm, rotary embeddings,
grouped-query attention), batch 1 and a left-padded batch of 2; the loop's calls (an empty
past first, then one token a step, each present fed back); eos; reproducible sampling and its
distribution; every model form (path, session, executable, VM)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from generate_models import gpt2, llama, ort_generate, successor  # noqa: E402

import dynshape  # noqa: E402
from dynshape.generate_loop import positions  # noqa: E402
from dynshape.generate_sampling import TokenChooser  # noqa: E402

PROMPTS = np.array([[5, 6, 7, 8, 9], [0, 0, 0, 11, 12]], np.int64)
MASK = np.array([[1, 1, 1, 1, 1], [0, 0, 0, 1, 1]], np.int64)
NEW = 8


@pytest.fixture(scope="module")
def models() -> dict[str, Any]:
    return {"gpt2": gpt2(), "llama": llama()}


@pytest.fixture(scope="module")
def sessions(models: dict[str, Any]) -> dict[str, dynshape.InferenceSession]:
    return {name: dynshape.InferenceSession(m) for name, m in models.items()}


@pytest.fixture(scope="module")
def succ() -> dynshape.InferenceSession:
    return dynshape.InferenceSession(successor())


@pytest.mark.parametrize("name", ["gpt2", "llama"])
def test_greedy_tokens_are_onnxruntime_s_batch_1(
    models: dict[str, Any], sessions: dict[str, Any], name: str
) -> None:
    got = dynshape.generate(sessions[name], PROMPTS[:1], NEW)
    expected = ort_generate(models[name], PROMPTS[:1], None, NEW)
    np.testing.assert_array_equal(got, expected)
    assert got.shape == (1, 5 + NEW) and got.dtype == np.int64
    assert len(set(got[0, 5:].tolist())) > 3  # the model does not just repeat a token


@pytest.mark.parametrize("name", ["gpt2", "llama"])
def test_greedy_tokens_are_onnxruntime_s_left_padded_batch_2(
    models: dict[str, Any], sessions: dict[str, Any], name: str
) -> None:
    got = dynshape.generate(sessions[name], PROMPTS, NEW, attention_mask=MASK)
    np.testing.assert_array_equal(got, ort_generate(models[name], PROMPTS, MASK, NEW))
    # the padding changes nothing: the padded row continues as its prompt alone does
    alone = dynshape.generate(sessions[name], PROMPTS[1:, 3:], NEW)
    np.testing.assert_array_equal(got[1, 3:], alone[0])


def test_position_ids_are_transformers_s() -> None:
    mask = np.array([[1, 1, 1, 1], [0, 0, 1, 1], [0, 1, 1, 1]])
    np.testing.assert_array_equal(positions(mask), [[0, 1, 2, 3], [1, 1, 0, 1], [1, 0, 1, 2]])


class _Recording(dynshape.VirtualMachine):
    """A VM that keeps what each call was given and returned."""

    calls: list[tuple[dict[str, Any], tuple[Any, ...]]]

    def run(self, *args: Any, **named: Any) -> Any:
        result = super().run(*args, **named)
        self.calls.append((dict(args[0]), result))
        return result


def test_prefill_on_an_empty_past_then_one_token_a_step_each_present_fed_back(
    succ: dynshape.InferenceSession,
) -> None:
    vm = _Recording(succ.vm.exe)
    vm.calls = []
    out = dynshape.generate(vm, [[0, 3, 4], [5, 6, 7]], 4, attention_mask=[[0, 1, 1], [1, 1, 1]])
    np.testing.assert_array_equal(out, [[0, 3, 4, 5, 6, 7, 8], [5, 6, 7, 8, 9, 10, 11]])
    assert len(vm.calls) == 4  # the last token is chosen, not fed
    first, _ = vm.calls[0]
    assert first["past_key_values.0.key"].shape == (2, 1, 0, 2)
    np.testing.assert_array_equal(first["position_ids"], [[1, 0, 1], [0, 1, 2]])
    for step, ((feeds, _), (_, previous)) in enumerate(zip(vm.calls[1:], vm.calls, strict=False)):
        np.testing.assert_array_equal(feeds["input_ids"], out[:, 3 + step, None])
        np.testing.assert_array_equal(feeds["position_ids"], [[2 + step], [3 + step]])
        assert feeds["attention_mask"].shape == (2, 4 + step)
        assert feeds["attention_mask"][:, 3:].all()
        names = [p.name for p in vm.named_outputs]
        for i, name in enumerate(names):
            if name.startswith("present."):
                assert feeds[name.replace("present", "past_key_values")] is previous[i]


def test_a_row_stops_at_eos_and_is_padded_with_it(succ: dynshape.InferenceSession) -> None:
    out = dynshape.generate(succ, [[3], [5]], 10, eos_token_id=6)
    # row 1 meets 6 first and is padded; the loop ends when row 0 meets it too
    np.testing.assert_array_equal(out, [[3, 4, 5, 6], [5, 6, 6, 6]])
    assert dynshape.generate(succ, [[3], [5]], 2, eos_token_id=6).shape == (2, 3)
    # any of several eos ids; the padding is the first
    np.testing.assert_array_equal(
        dynshape.generate(succ, [[3], [9]], 10, eos_token_id=[12, 5]),
        [[3, 4, 5, 12], [9, 10, 11, 12]],
    )
    assert dynshape.generate(succ, [[3]], 0).tolist() == [[3]]


@pytest.mark.parametrize("name", ["gpt2", "llama"])
def test_eos_as_onnxruntime_s_loop(
    models: dict[str, Any], sessions: dict[str, Any], name: str
) -> None:
    free = dynshape.generate(sessions[name], PROMPTS, NEW, attention_mask=MASK)
    eos = int(free[0, 5 + 2])  # row 0 meets it at its third token
    got = dynshape.generate(sessions[name], PROMPTS, NEW, attention_mask=MASK, eos_token_id=eos)
    np.testing.assert_array_equal(got, ort_generate(models[name], PROMPTS, MASK, NEW, eos))
    assert (got[0, 5 + 2 :] == eos).all()


def test_sampling_is_reproducible_with_a_seed_and_differs_across_seeds(
    sessions: dict[str, Any],
) -> None:
    sess = sessions["llama"]

    def sample(seed: int, **options: Any) -> np.ndarray:
        return dynshape.generate(
            sess, PROMPTS, NEW, attention_mask=MASK, do_sample=True, seed=seed, **options
        )

    np.testing.assert_array_equal(sample(1), sample(1))
    assert not np.array_equal(sample(1), sample(2))
    # top_k=1 leaves one token to draw: greedy's
    greedy = dynshape.generate(sess, PROMPTS, NEW, attention_mask=MASK)
    np.testing.assert_array_equal(sample(3, top_k=1), greedy)
    np.testing.assert_array_equal(sample(4, temperature=1e-3), greedy)
    assert not np.array_equal(sample(5, temperature=5.0), greedy)


def test_samples_follow_the_softmax_of_the_warped_logits() -> None:
    logits = np.log(np.array([[0.1, 0.2, 0.3, 0.4, 1e-9]], np.float32)).repeat(4000, axis=0)
    draws = TokenChooser(do_sample=True, seed=0)(logits, 0)
    freq = np.bincount(draws, minlength=5) / len(draws)
    np.testing.assert_allclose(freq, [0.1, 0.2, 0.3, 0.4, 0.0], atol=0.025)
    # temperature 0.5 squares the odds (then normalised); top_k=2 keeps the two most likely
    draws = TokenChooser(do_sample=True, temperature=0.5, top_k=2, seed=0)(logits, 0)
    freq = np.bincount(draws, minlength=5) / len(draws)
    np.testing.assert_allclose(freq, [0, 0, 9 / 25, 16 / 25, 0], atol=0.025)


def test_every_model_form_gives_the_same_tokens(
    models: dict[str, Any], sessions: dict[str, Any], tmp_path: Path
) -> None:
    sess = sessions["llama"]
    expected = dynshape.generate(sess, PROMPTS, 4, attention_mask=MASK)
    path = tmp_path / "llama.onnx"
    onnx.save(models["llama"], str(path))
    exe = dynshape.compile(str(path))
    for model in (str(path), path, exe, sess.vm, models["llama"]):
        got = dynshape.generate(model, PROMPTS, 4, attention_mask=MASK)
        np.testing.assert_array_equal(got, expected, err_msg=type(model).__name__)


def test_token_ids_of_any_integer_type_and_a_1d_prompt(succ: dynshape.InferenceSession) -> None:
    out = dynshape.generate(succ, np.array([3, 4], np.int32), 2)
    assert out.dtype == np.int64 and out.tolist() == [[3, 4, 5, 6]]
    assert dynshape.generate(succ, [[np.uint8(3)]], 1).tolist() == [[3, 4]]


def test_a_model_without_mask_or_positions_and_int32_ids() -> None:
    model = successor(mask=False, positions=False, token_dtype=onnx.TensorProto.INT32)
    sess = dynshape.InferenceSession(model)
    assert dynshape.generate(sess, [[1, 2]], 3).tolist() == [[1, 2, 3, 4, 5]]
    ones = np.ones((1, 2), np.int64)  # a mask of ones asks nothing of the model
    assert dynshape.generate(sess, [[1, 2]], 1, attention_mask=ones).tolist() == [[1, 2, 3]]


@pytest.mark.parametrize("name", ["gpt2", "llama"])
def test_the_cache_is_appended_in_place_step_after_step(models: dict[str, Any], name: str) -> None:
    """The loop makes the empty cache with room for the whole generation (it knows the prompt
    and max_new_tokens) and donates each past: every step, the prefill included, appends its
    tokens' keys and values in place, and the cache never moves."""
    import dynshape.onnx
    from vm import VirtualMachine

    exe = dynshape.compile(dynshape.onnx.load(models[name]))
    vm = VirtualMachine(exe)
    steps = 40
    got = dynshape.generate(vm, PROMPTS[:1], steps)
    np.testing.assert_array_equal(got, ort_generate(models[name], PROMPTS[:1], None, steps))
    s = vm.allocator.stats
    per_step = 4  # two layers, a key and a value each
    assert (s.appends_in_place, s.appends_moved) == (per_step * steps, 0)
    # bytes of one position of every cache tensor, from the prefill's 5 positions
    vm2 = VirtualMachine(exe)
    dynshape.generate(vm2, PROMPTS[:1], 1)
    position = vm2.allocator.stats.bytes_appended // 5
    assert position > 0 and vm2.allocator.stats.appends_moved == 0
    # the prompt's positions, then one a step: nothing is copied twice
    assert s.bytes_appended == position * (5 + steps - 1)


def test_without_memory_for_the_room_the_cache_grows_by_doubling(
    models: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A max_new_tokens whose room cannot be had (a row is expected to stop at eos long
    before) still generates: the VM's buffers grow as the steps need."""
    import dynshape.generate_model as generate_model
    import dynshape.onnx
    from vm import VirtualMachine, VMError

    def no_memory(x: np.ndarray, axis: int, length: int) -> np.ndarray:
        raise VMError("with_room: no memory")

    monkeypatch.setattr(generate_model, "with_room", no_memory)
    vm = VirtualMachine(dynshape.compile(dynshape.onnx.load(models["gpt2"])))
    got = dynshape.generate(vm, PROMPTS[:1], 12)
    np.testing.assert_array_equal(got, ort_generate(models["gpt2"], PROMPTS[:1], None, 12))
    s = vm.allocator.stats
    assert s.appends_moved >= 4 and s.appends_in_place > 0  # the prefill's buffers, a doubling
