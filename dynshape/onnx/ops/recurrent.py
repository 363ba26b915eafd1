"""Recurrent ops: ``LSTM``, ``GRU`` and ``RNN``, each one op (``nn.lstm``, ``nn.gru``,
``nn.rnn``) whose kernel runs the whole recurrence (``vm/kernels/recurrent.py``).

The ops take ONNX's inputs, attributes and output shapes as they are: gate orders (LSTM ``i, o,
f, c``, peepholes ``i, o, f``; GRU ``z, r, h``), ``direction``, ``layout`` 0 and 1, ``clip``,
LSTM ``input_forget``, GRU ``linear_before_reset``. An omitted optional input (``B``,
``sequence_lens``, the initial states, ``P``) is passed as a 0-d constant, which the op reads as
absent; ``sequence_lens`` known to be ``seq`` everywhere is omitted too. The op computes every
output; one the node leaves unnamed is simply not read.

``sequence_lens``: a step ``t`` past a batch entry's length leaves its state unchanged and writes
zeros to its ``Y`` rows, as ONNX specifies; an entry of length 0 has zero final states, as
onnxruntime gives.

Supported activations: ``Sigmoid``, ``Tanh``, ``Relu`` (the ones without
``activation_alpha``/``beta`` parameters). A bidirectional node whose two directions name
different activations becomes two one-direction ops, their results concatenated.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

import ir
from dynshape.builder import trace
from shape_funcs.declarations import BUILTIN_OPS

from ..registry import Node, NodeError, Unsupported, converter
from .operands import value_dtype, value_shape

#: Op -> (the dynshape op, gate count, default activations of one direction).
_OPS: dict[str, tuple[str, int, tuple[str, ...]]] = {
    "LSTM": ("nn.lstm", 4, ("Sigmoid", "Tanh", "Tanh")),
    "GRU": ("nn.gru", 3, ("Sigmoid", "Tanh")),
    "RNN": ("nn.rnn", 1, ("Tanh",)),
}

_ACTIVATIONS = BUILTIN_OPS["nn.lstm"].choices("act_f")  # every recurrent op takes the same

#: The op's activation attributes, in ONNX's order of one direction's activations.
_ACT_ATTRS = ("act_f", "act_g", "act_h")


def _activations(node: Node, dirs: int, defaults: tuple[str, ...]) -> list[list[str]]:
    """Per direction, the activations' names (checked, case-insensitive, lower-cased)."""
    names = node.attr("activations")
    if names is None:
        names = list(defaults) * dirs
    names = list(names)
    if len(names) != len(defaults) * dirs:
        raise NodeError(
            f"activations={names} must name {len(defaults)} function(s) per direction "
            f"({len(defaults) * dirs} for {dirs} direction(s))"
        )
    if node.attr("activation_alpha") is not None or node.attr("activation_beta") is not None:
        raise Unsupported(
            "activation_alpha/activation_beta are not supported (only the activations "
            "Sigmoid, Tanh and Relu, which take no parameters)"
        )
    lowered: list[str] = []
    for name in names:
        low = str(name).lower()
        if low not in _ACTIVATIONS:
            raise Unsupported(f"activation {name!r} is not supported (only Sigmoid, Tanh and Relu)")
        lowered.append(low)
    k = len(defaults)
    return [lowered[d * k : (d + 1) * k] for d in range(dirs)]


def _check(node: Node, i: int, what: str, want: Sequence[ir.Dim]) -> None:
    """Input ``i`` (when given) has shape ``want``: a dim provably different is a NodeError."""
    value = node.input(i)
    if value is None:
        return
    got = value_shape(value)
    bad = len(got) != len(want) or any(
        ir.compare(g, "==", w) is False for g, w in zip(got, want, strict=True)
    )
    if bad:
        shown = [str(w) for w in want]
        raise NodeError(f"{what} (input {i}) has shape {list(got)}, expected [{', '.join(shown)}]")


def _recurrent(node: Node) -> list[Any]:
    op = node.op_type
    ds_op, gates, defaults = _OPS[op]
    x_value = node.input(0)
    if x_value is None or node.input(1) is None or node.input(2) is None:
        raise NodeError("X, W and R (inputs 0, 1, 2) are required")
    dtype = value_dtype(x_value)
    if np.dtype(dtype).kind != "f":
        raise NodeError(f"X must be floating-point, got {dtype}")
    x_shape = value_shape(x_value)
    if len(x_shape) != 3:
        raise NodeError(f"X must be 3-d, got shape {list(x_shape)}")
    layout = int(node.attr("layout", 0))
    if layout not in (0, 1):
        raise NodeError(f"layout={layout} is not 0 or 1")
    seq, batch, input_size = (x_shape[1], x_shape[0], x_shape[2]) if layout else x_shape
    direction = node.attr("direction", "forward")
    if direction not in BUILTIN_OPS["nn.lstm"].choices("direction"):
        raise NodeError(f"direction={direction!r} is not forward, reverse or bidirectional")
    dirs = 2 if direction == "bidirectional" else 1
    w_shape = value_shape(node.input(1))
    r_shape = value_shape(node.input(2))
    hidden = node.attr("hidden_size")
    if hidden is None:
        hidden = r_shape[-1] if len(r_shape) == 3 else None
    if not isinstance(hidden, int) or hidden <= 0:
        raise NodeError(
            f"hidden_size must be a positive int (from the attribute or R), got {hidden}"
        )
    gh = gates * hidden
    _check(node, 1, "W", [dirs, gh, input_size])
    _check(node, 2, "R", [dirs, gh, hidden])
    _check(node, 3, "B", [dirs, 2 * gh])
    if not all(isinstance(d, int) for d in (*w_shape[1:], *r_shape[1:])):
        raise NodeError(f"W {list(w_shape)} and R {list(r_shape)} need static sizes")
    state_shape = [batch, dirs, hidden] if layout else [dirs, batch, hidden]
    _check(node, 5, "initial_h", state_shape)
    if op == "LSTM":
        _check(node, 6, "initial_c", state_shape)
        _check(node, 7, "P", [dirs, 3 * hidden])
    acts = _activations(node, dirs, defaults)
    attrs: dict[str, Any] = {"layout": layout}
    clip = node.attr("clip")
    if clip is not None:
        attrs["clip"] = float(clip)
    if op == "LSTM":
        attrs["input_forget"] = bool(int(node.attr("input_forget", 0)))
    elif op == "GRU":
        attrs["linear_before_reset"] = bool(int(node.attr("linear_before_reset", 0)))

    absent = trace.constant(np.zeros((), dtype), dtype)
    args = [node.tensor(0), node.tensor(1), node.tensor(2)]
    args.append(absent if node.input(3) is None else node.tensor(3))
    args.append(_sequence_lens(node, seq, batch))
    for i in (5, 6, 7) if op == "LSTM" else (5,):
        args.append(absent if node.input(i) is None else node.tensor(i))

    if acts[0] == acts[-1]:
        outs = list(trace.apply(ds_op, *args, direction=direction, **attrs, **_named(acts[0])))
    else:
        given = [i for i in (1, 2, 3, 5, 6, 7) if i < len(args) and node.input(i) is not None]
        outs = _per_direction(ds_op, args, given, acts, layout, attrs)
    return [o if node.wants(k) else None for k, o in enumerate(outs)][: max(node.num_outputs, 1)]


def _named(acts: list[str]) -> dict[str, str]:
    return dict(zip(_ACT_ATTRS, acts, strict=False))


def _per_direction(
    ds_op: str,
    args: list[Any],
    given: list[int],
    acts: list[list[str]],
    layout: int,
    attrs: dict[str, Any],
) -> list[Any]:
    """A bidirectional node whose directions have different activations: one op per direction
    on its slices of the ``given`` inputs (weights and initial states, the dirs axis kept),
    the results concatenated along that axis."""
    results = []
    for d, direction in enumerate(("forward", "reverse")):
        part = list(args)
        for i in given:
            axis = 1 if layout and i in (5, 6) else 0  # batch-major initial states
            part[i] = _direction_of(args[i], d, axis)
        results.append(trace.apply(ds_op, *part, direction=direction, **attrs, **_named(acts[d])))
    y_axis, state_axis = (2, 1) if layout else (1, 0)
    outs = [trace.apply("concatenate", [results[0][0], results[1][0]], axis=y_axis)]
    for k in range(1, len(results[0])):
        pair = [results[0][k], results[1][k]]
        outs.append(trace.apply("concatenate", pair, axis=state_axis))
    return outs


def _direction_of(value: Any, d: int, axis: int) -> Any:
    """``value``'s direction ``d`` along ``axis``, the axis kept (size 1)."""
    return trace.apply("expand_dims", trace.apply("take", value, _int(d), axis=axis), axis=axis)


def _int(d: int) -> Any:
    return trace.constant(np.array(d, dtype=np.int64), "int64")


def _sequence_lens(node: Node, seq: ir.Dim, batch: ir.Dim) -> Any:
    """``sequence_lens`` as given, or a 0-d (absent) int32 when omitted or known to be ``seq``
    for every entry."""
    absent = trace.constant(np.zeros((), np.int32), "int32")
    if node.input(4) is None:
        return absent
    _check(node, 4, "sequence_lens", [batch])
    known = node.numeric(4)
    if known is not None and isinstance(seq, int) and bool(np.all(known == seq)):
        return absent
    return node.tensor(4)


@converter("LSTM", "GRU", "RNN")
def recurrent(node: Node) -> list[Any]:
    """LSTM, GRU and RNN (see the module docstring)."""
    return _recurrent(node)
