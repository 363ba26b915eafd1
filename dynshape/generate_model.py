"""The model side of ``dynshape.generate``: a decoder step found in a model's signature.

A decoder step is what transformers' exporters write for a causal LM with its cache
(``use_cache=True``; optimum's ``with_past``; torch.onnx of ``model(input_ids, attention_mask,
position_ids, past_key_values)``):

    inputs   input_ids [batch, seq]                  integer token ids (required)
             attention_mask [batch, past + seq]      fed when the model has it
             position_ids [batch, seq]               fed when the model has it
             past_key_values.{i}.key / .value        [batch, heads, past, head_dim], i = 0..n-1
    outputs  logits [batch, seq, vocab]              (or [batch, vocab]: the last position's)
             present.{i}.key / .value                the past grown by seq, fed back as past

The names are matched exactly (``past_key_values.{i}.{key,value}`` with ``present.{i}.{same}``;
no other spelling is guessed at), and a model with another input, a past without its present
or a present without its past is refused by a ``GenerateError`` naming it: a guess could feed
the wrong tensor and decode garbage without a word.

``DecoderStep`` holds the VM that runs the step whatever form the model came in (a path, an
``InferenceSession``, an ``Executable`` or a ``VirtualMachine``), and ``run_step`` is the one
place the loop calls it.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from vm import Executable, TensorSpec, VirtualMachine, VMError, with_room
from vm.executable import Param

from .errors import GenerateError
from .session import InferenceSession

#: The cache's inputs and outputs as transformers' exporters name them.
PAST = re.compile(r"past_key_values\.(\d+)\.(key|value)")
PRESENT = re.compile(r"present\.(\d+)\.(key|value)")
#: The inputs fed besides the cache (``input_ids`` is required, the others optional).
TOKENS, MASK, POSITIONS = "input_ids", "attention_mask", "position_ids"
LOGITS = "logits"
#: The cache layout transformers writes: the past length is this axis of each past input.
PAST_AXIS = 2
SIGNATURE = (
    "a decoder step takes input_ids, optionally attention_mask and position_ids, and "
    "past_key_values.{i}.key/value, and returns logits and present.{i}.key/value"
)


def run_step(
    vm: VirtualMachine, feeds: Mapping[str, np.ndarray], donate: Sequence[str] = ()
) -> tuple[Any, ...]:
    """One call of the decoder step: its outputs in the model's order. ``donate``: the past
    inputs, dead once the step has run (the loop feeds their presents next), which the VM may
    then grow in place (``vm/donation.py``, design/memory.md "Appends")."""
    result = vm.run(dict(feeds), donate=donate)
    return result if isinstance(result, tuple) else (result,)


@dataclass(frozen=True)
class CacheEntry:
    """One past input and the output that becomes it at the next step."""

    past: str
    """The input's name (``past_key_values.0.key``)."""
    present: str
    """The output's name (``present.0.key``)."""
    dtype: np.dtype[Any]
    """The input's element type (the empty past of the prefill has it)."""
    heads: int
    """Axis 1 of the input: the key/value heads."""
    head_dim: int
    """Axis 3 of the input: the size of one head."""


class DecoderStep:
    """A model's decoder step, checked once: which inputs it takes, where its logits and
    cache come out, and the VM that runs it (``DecoderStep.of(model)``)."""

    def __init__(self, vm: VirtualMachine) -> None:
        self.vm = vm
        """The VM that runs the step (a session's own, for a session)."""
        inputs = {p.name: p for p in vm.inputs}
        outputs = [p.name for p in vm.named_outputs]
        if TOKENS not in inputs:
            raise GenerateError(
                f"the model has no input {TOKENS!r} (its inputs: {_names(inputs)}): {SIGNATURE}"
            )
        self.cache = _cache(inputs, outputs)
        """The past inputs in layer order (key then value), each with its present output."""
        fed = {TOKENS, MASK, POSITIONS, *(c.past for c in self.cache)}
        unknown = [name for name in inputs if name not in fed]
        if unknown:
            raise GenerateError(
                f"generate does not know what to feed the model's input {unknown[0]!r}: {SIGNATURE}"
            )
        if LOGITS not in outputs:
            raise GenerateError(
                f"the model has no output {LOGITS!r} (its outputs: {', '.join(outputs)}): "
                f"{SIGNATURE}"
            )
        self.token_dtype = _dtype(inputs[TOKENS])
        """The element type of ``input_ids`` (int64 for torch's exports)."""
        self.mask_dtype = _dtype(inputs[MASK]) if MASK in inputs else None
        """The element type of ``attention_mask``, None when the model takes no mask."""
        self.position_dtype = _dtype(inputs[POSITIONS]) if POSITIONS in inputs else None
        """The element type of ``position_ids``, None when the model takes none."""
        self.vocab = _vocab(vm.named_outputs[outputs.index(LOGITS)])
        """The vocabulary size when the logits' last axis is static, else None."""
        self._logits = outputs.index(LOGITS)
        self._presents = [outputs.index(c.present) for c in self.cache]
        self._donated = tuple(c.past for c in self.cache)

    @classmethod
    def of(cls, model: Any, dims: Mapping[str, Any] | None = None) -> DecoderStep:
        """The decoder step of ``model``: a path to an ONNX model (or its bytes, or an
        ``onnx.ModelProto``; imported with ``dims`` and compiled), an ``InferenceSession``,
        an ``Executable`` or a ``VirtualMachine``."""
        if isinstance(model, DecoderStep):
            return model
        if isinstance(model, VirtualMachine):
            return cls(model)
        if isinstance(model, Executable):
            return cls(VirtualMachine(model))
        if isinstance(model, InferenceSession):
            return cls(model.vm)
        if isinstance(model, (str, os.PathLike, bytes, bytearray)) or _is_model_proto(model):
            return cls(InferenceSession(model, dims).vm)
        raise GenerateError(
            "model must be a path to an ONNX decoder, a dynshape.InferenceSession, an "
            f"Executable or a VirtualMachine, got {type(model).__name__}"
        )

    def empty_cache(self, batch: int, room: int = 0) -> dict[str, np.ndarray]:
        """The past of the prefill: every past input with length 0. ``room``: the longest the
        cache will grow (the loop's last past length): each past then comes with a buffer
        that holds it (``vm.with_room``), so every step appends in place and none moves the
        cache (0, or no memory for that much room: the VM's buffers grow by doubling as the
        steps need)."""
        empty = {c.past: np.zeros((batch, c.heads, 0, c.head_dim), c.dtype) for c in self.cache}
        if room <= 0:
            return empty
        try:
            return {name: with_room(x, PAST_AXIS, room) for name, x in empty.items()}
        except VMError:  # a max_new_tokens far past what a row will reach (it stops at eos)
            return empty

    def step(self, feeds: Mapping[str, np.ndarray]) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """Run one step: the logits and the next step's past (each present under its past
        input's name)."""
        out = run_step(self.vm, feeds, self._donated)
        past = {c.past: out[i] for c, i in zip(self.cache, self._presents, strict=True)}
        return np.asarray(out[self._logits]), past


def _cache(inputs: Mapping[str, Param], outputs: Sequence[str]) -> list[CacheEntry]:
    """The past inputs paired with their present outputs, checked as ``PAST`` and
    ``PRESENT`` say: every layer 0..n-1 with both key and value, each with its output."""
    past = {m.groups(): name for name in inputs if (m := PAST.fullmatch(name))}
    present = {m.groups(): name for name in outputs if (m := PRESENT.fullmatch(name))}
    if not past:
        raise GenerateError(
            f"the model has no past_key_values.{{i}}.key/value inputs (its inputs: "
            f"{_names(inputs)}): generate needs a decoder exported with its key/value cache "
            "(transformers' use_cache=True, optimum's with_past)"
        )
    layers = 1 + max(int(i) for i, _ in past)
    expected = [(str(i), kind) for i in range(layers) for kind in ("key", "value")]
    for key in expected:
        if key not in past:
            raise GenerateError(
                f"the model has no input 'past_key_values.{key[0]}.{key[1]}' but has "
                f"past_key_values up to layer {layers - 1}: {SIGNATURE}"
            )
        if key not in present:
            raise GenerateError(
                f"the model has the input {past[key]!r} but no output "
                f"'present.{key[0]}.{key[1]}' to feed back as it (its outputs: "
                f"{', '.join(outputs)})"
            )
    extra = sorted(set(present) - set(past))
    if extra:
        raise GenerateError(
            f"the model has the output {present[extra[0]]!r} but no input "
            f"'past_key_values.{extra[0][0]}.{extra[0][1]}' to feed it back to"
        )
    return [_entry(inputs[past[key]], present[key]) for key in expected]


def _entry(param: Param, present: str) -> CacheEntry:
    spec = param.type
    shape = spec.shape if isinstance(spec, TensorSpec) else ()
    if len(shape) != 4:
        raise GenerateError(
            f"{param.name} is {spec}: generate takes the cache as transformers lays it out, "
            "(batch, heads, past_seq, head_dim)"
        )
    heads, past, head_dim = shape[1], shape[PAST_AXIS], shape[3]
    if not isinstance(heads, int) or not isinstance(head_dim, int):
        raise GenerateError(
            f"{param.name} is {spec}: the prefill's empty past is made from this type, so "
            "its heads (axis 1) and head size (axis 3) must be static"
        )
    if isinstance(past, int):
        raise GenerateError(
            f"{param.name} is {spec}: its past length (axis {PAST_AXIS}) is fixed at {past}, "
            "and generate grows it by one each step (export it with a dynamic axis)"
        )
    return CacheEntry(param.name, present, _dtype(param), heads, head_dim)


def _dtype(param: Param) -> np.dtype[Any]:
    if not isinstance(param.type, TensorSpec):
        raise GenerateError(f"the model's input {param.name} is {param.type}, not a tensor")
    return np.dtype(param.type.dtype)


def _vocab(param: Param) -> int | None:
    spec = param.type
    if not isinstance(spec, TensorSpec) or len(spec.shape) not in (2, 3):
        raise GenerateError(
            f"the model's output {param.name} is {spec}: generate takes logits as "
            "(batch, seq, vocab) or (batch, vocab)"
        )
    last = spec.shape[-1]
    return last if isinstance(last, int) else None


def _names(params: Mapping[str, Param]) -> str:
    return ", ".join(params) or "none"


def _is_model_proto(model: Any) -> bool:
    """An ``onnx.ModelProto``, told without importing onnx (an optional extra)."""
    return type(model).__name__ == "ModelProto" and hasattr(model, "graph")
