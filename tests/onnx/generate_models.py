"""Decoders for the tests of ``dynshape.generate`` and the loop onnxruntime runs them with.

- ``gpt2`` and ``llama``: the decoder steps of ``examples/exported/families.py`` (written as
  PyTorch's exporter writes transformers' GPT-2 and Llama: LayerNorm and GELU, or RMSNorm,
  rotary embeddings and grouped-query attention), small (2 layers, hidden 128, vocab 1000);
  the GPT-2 one with its head untied from the embedding: a random model with the tied head
  repeats its last token forever, which a loop that fed the wrong cache would do too.
- ``successor``: a decoder of a few nodes whose greedy choice after token t is t + 1 (mod
  vocab) whatever the past, with a cache that grows as the real ones do; it compiles in a
  blink, and its names and dtypes are arguments, so a test can break one thing at a time.
- ``ort_generate``: the reference, the loop of ``transformers.generate`` written again, plainly,
  with onnxruntime running the model (its ``present`` fed back as ``past``).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples" / "exported"))

import families


def gpt2(layers: int = 2) -> onnx.ModelProto:
    """The families' GPT-2 step with an untied random head."""
    model = families.gpt2_decoder_step(layers=layers)
    (head,) = (n for n in model.graph.node if n.name == "/lm_head/MatMul")
    for init in model.graph.initializer:
        if init.name == head.input[1]:
            weight = numpy_helper.to_array(init)
            rng = np.random.default_rng(7)
            untied = rng.standard_normal(weight.shape).astype(np.float32) * 0.2
            init.CopyFrom(numpy_helper.from_array(untied, init.name))
    return model


def llama(layers: int = 2) -> onnx.ModelProto:
    """The families' Llama step (RMSNorm, rotary embeddings, 4 query heads on 2 kv heads)."""
    return families.llama_decoder_step(layers=layers)


def successor(
    *,
    layers: int = 2,
    vocab: int = 16,
    mask: bool = True,
    positions: bool = True,
    token_dtype: int = TensorProto.INT64,
    past_name: Callable[[int, str], str] = lambda i, kind: f"past_key_values.{i}.{kind}",
    present_name: Callable[[int, str], str] = lambda i, kind: f"present.{i}.{kind}",
    past_dims: Sequence[int | str] = ("batch", 1, "past_seq", 2),
    extra_inputs: Sequence[str] = (),
    logits_name: str = "logits",
) -> onnx.ModelProto:
    """Logits ``10 * onehot(t + 1 mod vocab)`` for token t; each present is its past with
    the tokens' rows of a table appended along axis 2 (the mask, positions and extra inputs
    are taken and, but for the mask's shape, unused)."""
    succ = np.roll(np.eye(vocab, dtype=np.float32) * 10.0, 1, axis=1)
    table = np.arange(vocab * 2, dtype=np.float32).reshape(vocab, 2)
    inits = [numpy_helper.from_array(succ, "succ"), numpy_helper.from_array(table, "kv_table")]
    ids = "input_ids"
    nodes = []
    if token_dtype != TensorProto.INT64:
        nodes.append(helper.make_node("Cast", [ids], ["ids64"], to=TensorProto.INT64))
        ids = "ids64"
    nodes += [
        helper.make_node("Gather", ["succ", ids], [logits_name]),
        helper.make_node("Gather", ["kv_table", ids], ["rows"]),
        helper.make_node("Unsqueeze", ["rows", "one"], ["new"]),
    ]
    inits.append(numpy_helper.from_array(np.array([1], np.int64), "one"))
    inputs = [helper.make_tensor_value_info("input_ids", token_dtype, ["batch", "seq"])]
    if mask:
        inputs.append(
            helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", "total"])
        )
    if positions:
        inputs.append(
            helper.make_tensor_value_info("position_ids", TensorProto.INT64, ["batch", "seq"])
        )
    for name in extra_inputs:
        inputs.append(helper.make_tensor_value_info(name, TensorProto.INT64, ["batch", "seq"]))
    outputs = [
        helper.make_tensor_value_info(logits_name, TensorProto.FLOAT, ["batch", "seq", vocab])
    ]
    for i in range(layers):
        for kind in ("key", "value"):
            past, present = past_name(i, kind), present_name(i, kind)
            inputs.append(helper.make_tensor_value_info(past, TensorProto.FLOAT, list(past_dims)))
            if len(past_dims) == 3:  # a cache of another layout: (batch, past, 2)
                nodes.append(helper.make_node("Concat", [past, "rows"], [present], axis=1))
            else:
                nodes.append(helper.make_node("Concat", [past, "new"], [present], axis=2))
            outputs.append(helper.make_tensor_value_info(present, TensorProto.FLOAT, None))
    graph = helper.make_graph(nodes, "successor", inputs, outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def ort_generate(
    model: onnx.ModelProto,
    input_ids: np.ndarray,
    attention_mask: np.ndarray | None,
    max_new_tokens: int,
    eos_token_id: int | None = None,
) -> np.ndarray:
    """Greedy decoding as transformers' ``generate`` does it, onnxruntime running each step."""
    import onnxruntime as ort

    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [i.name for i in sess.get_inputs()]
    outputs = [o.name for o in sess.get_outputs()]
    batch = input_ids.shape[0]
    mask = np.ones_like(input_ids) if attention_mask is None else attention_mask.astype(np.int64)
    past = {
        i.name: np.zeros((batch, i.shape[1], 0, i.shape[3]), np.float32)
        for i in sess.get_inputs()
        if i.name.startswith("past_key_values.")
    }
    sequences = input_ids.astype(np.int64)
    step_ids = sequences
    unfinished = np.ones(batch, np.int64)
    for _ in range(max_new_tokens):
        position_ids = np.cumsum(mask, axis=-1) - 1
        position_ids[mask == 0] = 1
        feeds = {"input_ids": step_ids, **past}
        if "attention_mask" in names:
            feeds["attention_mask"] = mask
        if "position_ids" in names:
            feeds["position_ids"] = position_ids[:, -step_ids.shape[1] :]
        result = dict(zip(outputs, sess.run(None, feeds), strict=True))
        next_tokens = np.argmax(result["logits"][:, -1, :], axis=-1)
        if eos_token_id is not None:
            next_tokens = next_tokens * unfinished + eos_token_id * (1 - unfinished)
            unfinished = unfinished & (next_tokens != eos_token_id)
        sequences = np.concatenate([sequences, next_tokens[:, None]], axis=1)
        if eos_token_id is not None and unfinished.max() == 0:
            break
        past = {name: result[name.replace("past_key_values", "present")] for name in past}
        mask = np.concatenate([mask, np.ones((batch, 1), np.int64)], axis=1)
        step_ids = next_tokens[:, None].astype(np.int64)
    return sequences
