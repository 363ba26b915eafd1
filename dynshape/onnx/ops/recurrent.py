"""Recurrent ops: ``LSTM``, ``GRU`` and ``RNN``, each a ``while_loop`` over the time steps.

The sequence length is usually symbolic, so the recurrence is a loop, not unrolled. Per
direction, the input projections of all steps are one ``nn.dense`` before the loop
(``X @ W.T`` plus the biases that add outside the gates' nonlinearity); the loop carries the
step index, the state (``h``, and ``c`` for LSTM) and, when ``Y`` is wanted, the outputs so
far, which each step extends with ``concatenate`` (so their step dim is ``?`` in the loop; a
``reshape`` to ``(seq, batch, hidden)`` after it gives the symbolic type back, checked at run
time). A reverse direction walks ``t = seq - 1 - i`` and prepends its rows, so ``Y`` stays in
time order; ``bidirectional`` is two loops whose results are stacked.

``sequence_lens``: a step ``t`` past a batch entry's length leaves its state unchanged and
writes zeros to its ``Y`` rows (``where`` on ``t < sequence_lens``), as ONNX specifies; so
``Y_h`` is the state after each entry's last step (for a reverse direction, after step 0, the
entry's steps running from its length - 1 down).

Gate orders are ONNX's: LSTM ``i, o, f, c`` (peepholes ``i, o, f``), GRU ``z, r, h``. ``clip``
bounds every gate's input to its activation (after the bias and peephole terms), as
onnxruntime does. Supported activations: ``Sigmoid``, ``Tanh``, ``Relu`` (the ones without
``activation_alpha``/``beta`` parameters); ``layout`` 0 and 1; LSTM ``input_forget`` 0 and 1
(``f = 1 - i``); GRU ``linear_before_reset`` 0 and 1.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

import ir
from dynshape.builder import trace
from dynshape.builder.control import while_loop

from ..registry import Node, NodeError, Unsupported, converter
from .shape import _dtype, _shape

#: Op -> (gate count, default activations of one direction).
_OPS: dict[str, tuple[int, tuple[str, ...]]] = {
    "LSTM": (4, ("Sigmoid", "Tanh", "Tanh")),
    "GRU": (3, ("Sigmoid", "Tanh")),
    "RNN": (1, ("Tanh",)),
}

_ACTIVATIONS: dict[str, str] = {"sigmoid": "sigmoid", "tanh": "tanh", "relu": "nn.relu"}

Act = Callable[[Any], Any]


@dataclass
class _Cell:
    """What one direction's step needs: its recurrence weights and activations."""

    op: str
    hidden: int
    dtype: str
    acts: list[Act]
    clip: float | None
    r: Any
    """R of this direction, (gates * hidden, hidden)."""
    extra: dict[str, Any] = field(default_factory=dict)
    """GRU: ``r_zr``, ``r_h`` (linear_before_reset=0) or ``rb_h`` (=1); LSTM: ``p_i``,
    ``p_o``, ``p_f`` (peepholes) and ``input_forget``."""


def _int(d: int) -> Any:
    return trace.constant(np.array(d, dtype=np.int64), "int64")


def _const(value: Any, dtype: str) -> Any:
    return trace.constant(np.asarray(value, dtype=dtype), dtype)


def _rows(node: Node, i: int, d: int, lo: int, hi: int) -> Any:
    """Rows ``lo:hi`` of direction ``d`` of input ``i`` (W, R, B or P): a constant when the
    input is known, else ops on it."""
    known = node.numeric(i)
    dtype = _dtype(node.input(i))
    if known is not None:
        return _const(np.ascontiguousarray(known[d, lo:hi]), dtype)
    part = trace.apply("take", node.tensor(i), _int(d), axis=0)
    if (lo, hi) == (0, _shape(node.input(i))[1]):
        return part
    return trace.apply("strided_slice", part, begin=[lo], end=[hi])


def _activations(node: Node, dirs: int, defaults: tuple[str, ...]) -> list[list[Act]]:
    """Per direction, the activation functions (names checked, case-insensitive)."""
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
    fns: list[Act] = []
    for name in names:
        op = _ACTIVATIONS.get(str(name).lower())
        if op is None:
            raise Unsupported(f"activation {name!r} is not supported (only Sigmoid, Tanh and Relu)")
        fns.append(_activation(op))
    k = len(defaults)
    return [fns[d * k : (d + 1) * k] for d in range(dirs)]


def _activation(op: str) -> Act:
    return lambda v: trace.apply(op, v)


def _check(node: Node, i: int, what: str, want: Sequence[ir.Dim]) -> None:
    """Input ``i`` (when given) has shape ``want``: a dim provably different is a NodeError."""
    value = node.input(i)
    if value is None:
        return
    got = _shape(value)
    bad = len(got) != len(want) or any(
        ir.compare(g, "==", w) is False for g, w in zip(got, want, strict=True)
    )
    if bad:
        shown = [str(w) for w in want]
        raise NodeError(f"{what} (input {i}) has shape {list(got)}, expected [{', '.join(shown)}]")


def _recurrent(node: Node) -> list[Any]:
    op = node.op_type
    gates, defaults = _OPS[op]
    x_value = node.input(0)
    if x_value is None or node.input(1) is None or node.input(2) is None:
        raise NodeError("X, W and R (inputs 0, 1, 2) are required")
    dtype = _dtype(x_value)
    if np.dtype(dtype).kind != "f":
        raise NodeError(f"X must be floating-point, got {dtype}")
    x_shape = _shape(x_value)
    if len(x_shape) != 3:
        raise NodeError(f"X must be 3-d, got shape {list(x_shape)}")
    layout = int(node.attr("layout", 0))
    if layout not in (0, 1):
        raise NodeError(f"layout={layout} is not 0 or 1")
    seq, batch, input_size = (x_shape[1], x_shape[0], x_shape[2]) if layout else x_shape
    direction = node.attr("direction", "forward")
    reverses = {"forward": [False], "reverse": [True], "bidirectional": [False, True]}.get(
        direction
    )
    if reverses is None:
        raise NodeError(f"direction={direction!r} is not forward, reverse or bidirectional")
    dirs = len(reverses)
    w_shape = _shape(node.input(1))
    r_shape = _shape(node.input(2))
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
    input_forget = int(node.attr("input_forget", 0)) if op == "LSTM" else 0
    lbr = int(node.attr("linear_before_reset", 0)) if op == "GRU" else 0
    clip = node.attr("clip")
    clip = None if clip is None else float(clip)
    acts = _activations(node, dirs, defaults)

    x = node.tensor(0)
    if layout:
        x = trace.apply("transpose", x, axes=[1, 0, 2])
    lens = _sequence_lens(node, seq, batch)
    init_h = _initial(node, 5, layout)
    init_c = _initial(node, 6, layout) if op == "LSTM" else None
    want_y = node.wants(0)

    ys, hs, cs = [], [], []
    for d, reverse in enumerate(reverses):
        cell = _Cell(op, hidden, dtype, acts[d], clip, _rows(node, 2, d, 0, gh))
        bias = _input_bias(node, cell, d, gh)
        gx = trace.apply("nn.dense", x, _rows(node, 1, d, 0, gh))
        if bias is not None:
            gx = trace.apply("add", gx, bias)
        _extras(node, cell, d, lbr, input_forget)
        h0 = _state0(init_h, d, batch, hidden, dtype)
        c0 = _state0(init_c, d, batch, hidden, dtype) if op == "LSTM" else None
        y, h, c = _loop(cell, gx, h0, c0, lens, reverse, want_y, [seq, batch, hidden])
        ys.append(y)
        hs.append(h)
        cs.append(c)

    outs: list[Any] = [None, None, None]
    if want_y:
        y = trace.apply("stack", ys, axis=1)  # (seq, dirs, batch, hidden)
        outs[0] = trace.apply("transpose", y, axes=[2, 0, 1, 3]) if layout else y
    for k, states in ((1, hs), (2, cs)):
        if node.wants(k):
            s = trace.apply("stack", states, axis=0)  # (dirs, batch, hidden)
            outs[k] = trace.apply("transpose", s, axes=[1, 0, 2]) if layout else s
    return outs[: max(node.num_outputs, 1)]


def _sequence_lens(node: Node, seq: ir.Dim, batch: ir.Dim) -> Any:
    """``sequence_lens`` as an int32 ``(batch, 1)`` tensor, or None when absent or known to
    be ``seq`` for every entry."""
    if node.input(4) is None:
        return None
    _check(node, 4, "sequence_lens", [batch])
    known = node.numeric(4)
    if known is not None and isinstance(seq, int) and bool(np.all(known == seq)):
        return None
    lens = node.tensor(4)
    if lens.dtype != "int32":
        lens = trace.apply("cast", lens, dtype="int32")
    return trace.apply("expand_dims", lens, axis=1)


def _initial(node: Node, i: int, layout: int) -> Any:
    if node.input(i) is None:
        return None
    v = node.tensor(i)
    return trace.apply("transpose", v, axes=[1, 0, 2]) if layout else v


def _state0(init: Any, d: int, batch: ir.Dim, hidden: int, dtype: str) -> Any:
    if init is None:
        return trace.apply("zeros", shape=[batch, hidden], dtype=dtype)
    return trace.apply("take", init, _int(d), axis=0)


def _input_bias(node: Node, cell: _Cell, d: int, gh: int) -> Any:
    """The bias added to the input projections: ``Wb + Rb``, except GRU's ``Rb_h`` with
    ``linear_before_reset=1`` (it is inside the reset gate's product)."""
    if node.input(3) is None:
        return None
    wb = _rows(node, 3, d, 0, gh)
    known = node.numeric(3)
    if cell.op == "GRU" and int(node.attr("linear_before_reset", 0)):
        h = cell.hidden
        if known is not None:
            rb = np.array(known[d, gh : 2 * gh], copy=True)
            rb[2 * h :] = 0
            return trace.apply("add", wb, _const(rb, cell.dtype))
        rb_zr = _rows(node, 3, d, gh, gh + 2 * h)
        zeros = trace.apply("zeros", shape=[h], dtype=cell.dtype)
        return trace.apply("add", wb, trace.apply("concatenate", [rb_zr, zeros], axis=0))
    if known is not None:
        return _const(known[d, :gh] + known[d, gh : 2 * gh], cell.dtype)
    return trace.apply("add", wb, _rows(node, 3, d, gh, 2 * gh))


def _extras(node: Node, cell: _Cell, d: int, lbr: int, input_forget: int) -> None:
    h = cell.hidden
    if cell.op == "GRU":
        cell.extra["lbr"] = lbr
        if lbr:
            cell.extra["rb_h"] = (
                _rows(node, 3, d, 5 * h, 6 * h) if node.input(3) is not None else None
            )
        else:
            cell.extra["r_zr"] = _rows(node, 2, d, 0, 2 * h)
            cell.extra["r_h"] = _rows(node, 2, d, 2 * h, 3 * h)
    elif cell.op == "LSTM":
        cell.extra["input_forget"] = input_forget
        if node.input(7) is not None:
            for k, name in enumerate(("p_i", "p_o", "p_f")):
                cell.extra[name] = _rows(node, 7, d, k * h, (k + 1) * h)


def _loop(
    cell: _Cell,
    gx: Any,
    h0: Any,
    c0: Any,
    lens: Any,
    reverse: bool,
    want_y: bool,
    y_shape: list[ir.Dim],
) -> tuple[Any, Any, Any]:
    """One direction's recurrence; returns ``(Y (seq, batch, hidden) or None, Y_h, Y_c)``."""
    seq = trace.apply("take", trace.apply("shape_of", gx), _int(0), axis=0)
    lstm = c0 is not None
    init = [_int(0), h0]
    if lstm:
        init.append(c0)
    if want_y:
        init.append(trace.apply("zeros", shape=[0, *y_shape[1:]], dtype=cell.dtype))

    def cond(i: Any, *_: Any) -> Any:
        return trace.apply("less", i, seq)

    def body(i: Any, *state: Any) -> tuple[Any, ...]:
        h = state[0]
        c = state[1] if lstm else None
        t = trace.apply("subtract", trace.apply("subtract", seq, _int(1)), i) if reverse else i
        x_t = trace.apply("take", gx, t, axis=0)  # (batch, gates * hidden)
        h_new, c_new = _step(cell, x_t, h, c)
        y_t = h_new
        if lens is not None:
            mask = trace.apply("less", trace.apply("cast", t, dtype="int32"), lens)
            h_new = trace.apply("where", mask, h_new, h)
            if lstm:
                c_new = trace.apply("where", mask, c_new, c)
            y_t = trace.apply("where", mask, y_t, _const(0, cell.dtype))
        out = [trace.apply("add", i, _int(1)), h_new]
        if lstm:
            out.append(c_new)
        if want_y:
            row = trace.apply("expand_dims", y_t, axis=0)
            parts = [row, state[-1]] if reverse else [state[-1], row]
            out.append(trace.apply("concatenate", parts, axis=0))
        return tuple(out)

    final = while_loop(cond, body, tuple(init))
    h = final[1]
    c = final[2] if lstm else None
    y = trace.apply("reshape", final[-1], newshape=y_shape) if want_y else None
    return y, h, c


def _gate(cell: _Cell, act: Act, v: Any) -> Any:
    if cell.clip is not None:
        v = trace.apply("clip", v, a_min=-cell.clip, a_max=cell.clip)
    return act(v)


def _step(cell: _Cell, x_t: Any, h: Any, c: Any) -> tuple[Any, Any]:
    """One step of the cell: the new ``(h, c)`` (``c`` None but for LSTM)."""
    add, mul = (lambda a, b: trace.apply("add", a, b)), (lambda a, b: trace.apply("multiply", a, b))
    one = _const(1, cell.dtype)
    if cell.op == "RNN":
        return _gate(cell, cell.acts[0], add(x_t, trace.apply("nn.dense", h, cell.r))), None
    if cell.op == "LSTM":
        f_act, g_act, h_act = cell.acts
        g_i, g_o, g_f, g_c = trace.apply(
            "split", add(x_t, trace.apply("nn.dense", h, cell.r)), indices_or_sections=4, axis=1
        )
        p_i, p_o, p_f = (cell.extra.get(k) for k in ("p_i", "p_o", "p_f"))
        i = _gate(cell, f_act, g_i if p_i is None else add(g_i, mul(p_i, c)))
        if cell.extra["input_forget"]:
            f = trace.apply("subtract", one, i)
        else:
            f = _gate(cell, f_act, g_f if p_f is None else add(g_f, mul(p_f, c)))
        c_new = add(mul(f, c), mul(i, _gate(cell, g_act, g_c)))
        o = _gate(cell, f_act, g_o if p_o is None else add(g_o, mul(p_o, c_new)))
        return mul(o, h_act(c_new)), c_new
    f_act, g_act = cell.acts
    x_z, x_r, x_h = trace.apply("split", x_t, indices_or_sections=3, axis=1)
    if cell.extra["lbr"]:
        h_z, h_r, h_h = trace.apply(
            "split", trace.apply("nn.dense", h, cell.r), indices_or_sections=3, axis=1
        )
        if cell.extra["rb_h"] is not None:
            h_h = add(h_h, cell.extra["rb_h"])
        z = _gate(cell, f_act, add(x_z, h_z))
        r = _gate(cell, f_act, add(x_r, h_r))
        n = _gate(cell, g_act, add(x_h, mul(r, h_h)))
    else:
        h_z, h_r = trace.apply(
            "split", trace.apply("nn.dense", h, cell.extra["r_zr"]), indices_or_sections=2, axis=1
        )
        z = _gate(cell, f_act, add(x_z, h_z))
        r = _gate(cell, f_act, add(x_r, h_r))
        n = _gate(cell, g_act, add(x_h, trace.apply("nn.dense", mul(r, h), cell.extra["r_h"])))
    h_new = add(mul(trace.apply("subtract", one, z), n), mul(z, h))
    return h_new, None


@converter("LSTM", "GRU", "RNN")
def recurrent(node: Node) -> list[Any]:
    """LSTM, GRU and RNN (see the module docstring)."""
    return _recurrent(node)
