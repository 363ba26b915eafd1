"""The recurrent kernels: ONNX's ``LSTM``, ``GRU`` and ``RNN``, the whole sequence in one call.

Operands as ONNX's: ``x`` ``(seq, batch, input)``, ``w`` ``(dirs, gates * hidden, input)``,
``r`` ``(dirs, gates * hidden, hidden)``, then ``b``, ``sequence_lens``, ``initial_h`` (and for
LSTM ``initial_c``, ``p``), each absent when 0-d. ``layout=1`` makes ``x``, ``Y`` and the states
batch-major; the kernel reads and writes them through transposed views, never a copy.

Steps: the input projections of every step and both directions are one matmul before the loop
(``x @ [W_fwd; W_rev]^T``, into ``gx``), plus the biases that add outside the gates' products
(``Wb + Rb``; GRU with ``linear_before_reset`` keeps ``Rb_h`` for inside the reset product).
Each step then does one matmul, ``h @ R^T`` (BLAS, broadcast over the gates: the weights and the
gates are laid out gate-major, ``(gates, [2,] ...)``, so that each gate is a contiguous array,
see ``_Step``; ``R^T`` is a contiguous copy, made once per VM when ``r`` is a constant,
``constant_layouts.py``), and the gates with numpy ufuncs in place, in scratch allocated
once per call (the gates' views are made once too: a step is its ufunc calls and little
else); the new ``h`` is written straight into its slice of ``Y``, which the next step reads
as its state (no concatenation, no copy). Where that slice cannot be the state (float16 outputs, or
``sequence_lens`` masking), the state lives in a float32/native buffer and the step copies it
out. A bidirectional layer without those (and without LSTM peepholes) runs both directions in
lockstep as one stacked cell, ``(2, batch, ...)`` (``_both_directions``).

BLAS threads: a step's product is small and latency-bound, and there are hundreds of them. Under
the default ``one`` policy (``blas_threads``) the kernel lowers OpenBLAS to one thread once for
the whole recurrence instead of per step (switching costs ~10 us, a step's matmul 5-20 us);
under the other policies each step goes through ``blas_threads.matmul``.

``sequence_lens``: a step ``t`` is active for a batch entry when ``t < len``; an inactive step
holds the entry's state and writes zeros to its ``Y`` rows, so a reverse direction starts each
entry at its own ``len - 1``. An entry of length 0 has zero final states, as onnxruntime gives
(its initial state is not passed through), and so does every entry when ``seq`` is 0. Lengths
outside ``[0, seq]`` are a ValueError.

Memory: ``gx`` is ``seq * batch * dirs * gates * hidden`` elements (``gates`` times ``Y``), plus
its gate-major copy (a direction's at a time, or both for the stacked run, with their states),
the per-step scratch a few ``(batch, gates * hidden)`` arrays; float16 inputs add float32
copies of the operands. All of it is bounded by the operands' and results' sizes. ``gx`` and
the copies are carved from the call's workspace (its last argument, planned by the compiler
from the op's rule, ``shape_funcs/ops/nn.py`` ``_recurrent_workspace``; ``workspace.py``) when
it has room, else allocated: per call they were megabytes of fresh pages whenever the C
allocator returned the previous call's to the system (seen as 1,250 page faults a call of the
tagger at (128, 8), 11.1 against 7.1 ms).

float16 is computed in float32 and rounded once into the outputs; float32 and float64 natively.
Activations: ``sigmoid`` (``1 / (1 + exp(-x))``), ``tanh``, ``relu``; ``clip`` bounds each
gate's input to its activation (after the bias and peephole terms), as onnxruntime does. An
LSTM with the default activations (and no clip, peepholes or coupled gates) computes its i, o
and f gates halved (their rows of W^T, R^T and the biases laid out times 0.5, exactly) and
takes all four gates by one tanh, ``sigmoid(x) = (1 + tanh(x / 2)) / 2`` (``_halved``): 10
ufunc calls a step where 13 were (the tagger 0.93-0.97x a call, measured). A GRU with a
sigmoid ``f`` and no clip computes its z and r gates halved alike and takes their sigmoid as
one tanh, a multiply and an add, where the exp form took four calls (an exp among them).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from . import blas_threads
from .against_value import against_value
from .blas_threads import matmul as _matmul
from .constant_layouts import ConstantLayouts
from .registry import Kernel, register_kernel
from .workspace import Workspace

_F16 = np.dtype(np.float16)

Act = Callable[[np.ndarray], None]
MatMul = Callable[[np.ndarray, np.ndarray, np.ndarray], Any]


def _sigmoid(x: np.ndarray) -> None:
    # 1 / (1 + exp(-x)): numpy's exp is cheaper than its tanh (the ``sigmoid`` kernel's form),
    # and this form keeps the relative accuracy of small results. exp overflows to inf below
    # x = -88 (float32), giving the right 0; ``_run`` silences that warning. Not np.negative:
    # numpy 2.4's in-place negative on a (n, 1) column view (hidden = 1) reads the wrong
    # elements (np.negative(v, v) with v = a[:, :1]); multiply has no such bug.
    np.multiply(x, -1.0, x)
    np.exp(x, x)
    np.add(x, 1.0, x)
    np.reciprocal(x, x)


def _sigmoid_of_half(x: np.ndarray) -> None:
    # sigmoid(2 x) = (1 + tanh(x)) / 2, for gates whose weights and biases were halved
    # (``_halved``): one tanh, a multiply and an add, where the exp form takes four calls.
    np.tanh(x, x)
    np.multiply(x, 0.5, x)
    np.add(x, 0.5, x)


def _tanh(x: np.ndarray) -> None:
    np.tanh(x, x)


def _relu(x: np.ndarray) -> None:
    against_value(np.maximum, x, 0, x)


_ACTS: dict[str, Act] = {"sigmoid": _sigmoid, "tanh": _tanh, "relu": _relu}


def _act(attrs: Mapping[str, Any], key: str, clip: float | None) -> Act:
    """The activation ``act_<key>``, applied in place after ``clip`` (when set)."""
    fn = _ACTS[attrs[f"act_{key}"]]
    if clip is None:
        return fn

    def clipped(x: np.ndarray) -> None:
        x.clip(-clip, clip, out=x)  # the method: np.clip's wrappers cost as much a step
        fn(x)

    return clipped


def _given(a: np.ndarray) -> bool:
    """An optional operand is absent when 0-d."""
    return a.ndim != 0


def _plain_matmul(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> None:
    np.matmul(a, b, out=out)


class _Step:
    """One direction's cell, or both directions' stacked (every state then ``(2, batch,
    hidden)``: the arithmetic is the same on a leading axis). Gate-major: ``rt`` is R^T per
    gate, ``(gates, [2,] hidden, hidden)``, so one broadcast matmul of ``h`` by it writes the
    gates ``g`` as ``(gates, [2,] batch, hidden)`` and each gate (``parts``) is a contiguous
    array: numpy's ufuncs take twice as long on the strided column slices of a ``(2, batch,
    gates * hidden)`` product (a stacked LSTM step 35 -> 26 us, batch 1, hidden 128; 77 -> 57
    at batch 4). ``gx_t``, a step's input projections, is gate-major too. ``step(gx_t, h, c,
    h_out, c_out)`` writes the new state: ``h_out`` is never ``h``; ``c_out`` may be ``c``;
    both ``c`` are None but for LSTM. ``tmp`` is one state-shaped temporary."""

    def __init__(
        self, mm: MatMul, rt: np.ndarray, batch: int, dtype: np.dtype, scratch: bool = True
    ) -> None:
        self.mm = mm
        self.rt = rt  # R^T per gate of the direction(s), (gates, [2,] hidden, hidden)
        gates, k = rt.shape[0], rt.shape[-1]
        rows = (*rt.shape[1:-2], batch if scratch else 0)
        self.g = np.empty((gates, *rows, k), dtype)
        self.parts = [self.g[j] for j in range(gates)]
        self.tmp = np.empty((*rows, k), dtype)

    def __call__(
        self,
        gx: np.ndarray,
        h: np.ndarray,
        c: np.ndarray | None,
        h_out: np.ndarray,
        c_out: np.ndarray | None,
    ) -> None:
        raise NotImplementedError


class _RNN(_Step):
    def __init__(self, mm: MatMul, rt: np.ndarray, batch: int, dtype: np.dtype, f: Act) -> None:
        super().__init__(mm, rt, batch, dtype, scratch=False)  # the step works in h_out
        self.f = f
        self.rt1 = rt[0]  # the one gate's R^T

    def __call__(
        self,
        gx: np.ndarray,
        h: np.ndarray,
        c: np.ndarray | None,
        h_out: np.ndarray,
        c_out: np.ndarray | None,
    ) -> None:
        self.mm(h, self.rt1, h_out)
        np.add(h_out, gx[0], h_out)
        self.f(h_out)


class _GRU(_Step):
    def __init__(
        self,
        mm: MatMul,
        rt: np.ndarray,
        batch: int,
        dtype: np.dtype,
        acts: tuple[Act, Act],
        lbr: bool,
        rb_h: np.ndarray | None,
        halved: bool,
    ) -> None:
        super().__init__(mm, rt, batch, dtype)
        self.f, self.act_g = acts
        if halved:  # z and r arrive halved: their sigmoid by one tanh (_halved)
            self.f = _sigmoid_of_half
        self.lbr = lbr
        self.rb_h = rb_h  # linear_before_reset: Rb_h, added to h @ R_h^T inside the reset
        self.zr = self.g[:2]
        self.rt_zr, self.rt_h = rt[:2], rt[2]

    def __call__(
        self,
        gx: np.ndarray,
        h: np.ndarray,
        c: np.ndarray | None,
        h_out: np.ndarray,
        c_out: np.ndarray | None,
    ) -> None:
        z, r, n = self.parts
        zr, tmp = self.zr, self.tmp
        if self.lbr:
            self.mm(h, self.rt, self.g)
            if self.rb_h is not None:
                np.add(n, self.rb_h, n)
            np.add(zr, gx[:2], zr)
            self.f(zr)
            np.multiply(n, r, n)  # r * (h @ R_h^T + Rb_h)
        else:
            self.mm(h, self.rt_zr, zr)
            np.add(zr, gx[:2], zr)
            self.f(zr)
            np.multiply(r, h, tmp)  # (r * h) @ R_h^T
            self.mm(tmp, self.rt_h, n)
        np.add(n, gx[2], n)
        self.act_g(n)
        # h' = (1 - z) * n + z * h, as n + z * (h - n): no (1 - z) temporary.
        np.subtract(h, n, tmp)
        np.multiply(z, tmp, tmp)
        np.add(n, tmp, h_out)


class _LSTM(_Step):
    def __init__(
        self,
        mm: MatMul,
        rt: np.ndarray,
        batch: int,
        dtype: np.dtype,
        acts: tuple[Act, Act, Act],
        p: np.ndarray | None,
        input_forget: bool,
        halved: bool,
    ) -> None:
        super().__init__(mm, rt, batch, dtype)
        self.f, self.act_g, self.act_h = acts
        self.p = p  # (3, hidden): the peepholes of i, o, f
        self.input_forget = input_forget
        # i, o and f in one pass when o has no peephole term to wait for.
        self.iof = self.g[:3] if p is None and not input_forget else None
        self.halved = halved  # i, o and f arrive halved: every gate by one tanh (_halved)

    def __call__(
        self,
        gx: np.ndarray,
        h: np.ndarray,
        c: np.ndarray | None,
        h_out: np.ndarray,
        c_out: np.ndarray | None,
    ) -> None:
        assert c is not None and c_out is not None
        g, tmp, p = self.g, self.tmp, self.p
        i, o, f, cc = self.parts
        self.mm(h, self.rt, g)
        np.add(g, gx, g)
        if self.halved:
            # sigmoid(x) = (1 + tanh(x / 2)) / 2 with x / 2 what i, o and f hold, and cc's
            # tanh: one tanh over the four gates (10 ufunc calls a step where the exp form of
            # the sigmoid and the copy of c made 13).
            iof = self.iof
            assert iof is not None  # (no peepholes, no coupled gates: _halved)
            np.tanh(g, g)
            np.multiply(iof, 0.5, iof)
            np.add(iof, 0.5, iof)
            np.multiply(i, cc, i)
            np.multiply(f, c, c_out)
            np.add(c_out, i, c_out)
            np.tanh(c_out, cc)
            np.multiply(o, cc, h_out)
            return
        if self.iof is not None:
            self.f(self.iof)
        else:
            if p is not None:
                np.multiply(c, p[0], tmp)
                np.add(i, tmp, i)
            self.f(i)
            if self.input_forget:
                np.subtract(1.0, i, f)
            else:
                if p is not None:
                    np.multiply(c, p[2], tmp)
                    np.add(f, tmp, f)
                self.f(f)
        self.act_g(cc)
        np.multiply(i, cc, i)
        np.multiply(f, c, c_out)
        np.add(c_out, i, c_out)
        if p is not None:
            np.multiply(c_out, p[1], tmp)  # o's peephole reads the new c
            np.add(o, tmp, o)
            self.f(o)
        elif self.input_forget:
            self.f(o)
        np.copyto(cc, c_out)
        self.act_h(cc)
        np.multiply(o, cc, h_out)


def _lengths(lens: np.ndarray, seq: int) -> np.ndarray | None:
    """``sequence_lens`` as int64, or None when absent or every entry is ``seq``."""
    if not _given(lens):
        return None
    out = lens.astype(np.int64)
    if out.size and (int(out.min()) < 0 or int(out.max()) > seq):
        raise ValueError(f"sequence_lens must be in [0, {seq}], got {lens.tolist()}")
    return None if bool(np.all(out == seq)) else out


def _direction(
    step: _Step,
    gx: np.ndarray,
    y: np.ndarray,
    h: np.ndarray,
    c: np.ndarray | None,
    lens: np.ndarray | None,
    reverse: bool,
    native: bool,
) -> tuple[np.ndarray, np.ndarray | None]:
    """One direction over every step: ``gx`` ``(seq, gates, batch, hidden)``, ``y`` its
    ``(seq, batch, hidden)`` part of Y, ``h`` the initial state (only read), ``c`` LSTM's
    (updated in place). Returns the final ``(h, c)``."""
    seq = gx.shape[0]
    order = range(seq - 1, -1, -1) if reverse else range(seq)
    if lens is None and native:
        # The state is Y's previous slice: each step writes h straight into Y.
        for t in order:
            y_t = y[t]
            step(gx[t], h, c, y_t, c)
            h = y_t
        return h, c
    # The state in its own buffers (float32 for a float16 Y; held where an entry is past its
    # length). The step writes into scratch, which becomes the state where the entry is active.
    h = np.array(h, dtype=gx.dtype, copy=True)
    h_new = np.empty_like(h)
    c_new = None if c is None else np.empty_like(c)
    for t in order:
        step(gx[t], h, c, h_new, c_new)
        active = None if lens is None else (lens > t)[:, None]
        if active is None or bool(active.all()):
            np.copyto(y[t], h_new)
            h, h_new = h_new, h
            if c_new is not None:
                c, c_new = c_new, c
            continue
        y[t].fill(0)
        np.copyto(y[t], h_new, where=active)
        np.copyto(h, h_new, where=active)
        if c is not None and c_new is not None:
            np.copyto(c, c_new, where=active)
    return h, c


def _copied(a: np.ndarray, ws: Workspace) -> np.ndarray:
    """A C-contiguous copy of ``a``, carved from ``ws`` when it has room."""
    copy = ws.empty(a.shape, a.dtype)
    np.copyto(copy, a)
    return copy


def _both_directions(
    step: _Step,
    gx: np.ndarray,
    y: np.ndarray,
    h: np.ndarray,
    c: np.ndarray | None,
    ws: Workspace,
) -> tuple[np.ndarray, np.ndarray | None]:
    """Both directions in lockstep, one stacked step for both: the forward one at position
    ``t``, the reverse one at ``seq - 1 - t`` (half the ufunc calls of one direction after the
    other, each of which costs about a microsecond at a tagger's batch). ``gx`` ``(seq, batch,
    2 * gates * hidden)``, copied gate-major; ``y`` ``(seq, 2, batch, hidden)``; ``h`` and
    ``c`` the stacked initial states (``c`` updated in place). The reverse direction's inputs
    are gathered in its order before the loop, and its outputs put back in position order
    after it (a copy of ``gx`` and of ``Y`` each: the memory bound of the module doc doubles).
    Returns the final stacked ``(h, c)``."""
    seq, batch, gh = gx.shape[0], gx.shape[1], gx.shape[2] // 2
    k = h.shape[-1]
    gates = gh // k
    stacked = ws.empty((seq, gates, 2, batch, k), gx.dtype)  # gate-major (see _Step)
    np.copyto(stacked[:, :, 0], _gate_major(gx[:, :, :gh], gates, k))
    np.copyto(stacked[:, :, 1], _gate_major(gx[::-1, :, gh:], gates, k))
    states = ws.empty((seq, *h.shape), y.dtype)  # the state after step t, both directions
    for t in range(seq):
        state = states[t]
        step(stacked[t], h, c, state, c)
        h = state
    np.copyto(y[:, 0], states[:, 0])
    np.copyto(y[:, 1], states[::-1, 1])
    return h, c


_DIRECTIONS = {"forward": [False], "reverse": [True], "bidirectional": [False, True]}


def _gate_major(gx: np.ndarray, gates: int, hidden: int) -> np.ndarray:
    """The ``(seq, batch, gates * hidden)`` projections of one direction viewed ``(seq,
    gates, batch, hidden)`` (splitting the last axis is a view whatever the strides)."""
    seq, batch = gx.shape[:2]
    view: np.ndarray = gx.reshape(seq, batch, gates, hidden).transpose(0, 2, 1, 3)
    return view


def _input_projections(
    x: np.ndarray,
    w: np.ndarray,
    b: np.ndarray,
    layout: int,
    sizes: tuple[int, int, int],
    ct: np.dtype,
    modes: tuple[bool, int],
    layouts: ConstantLayouts,
    ws: Workspace,
) -> tuple[np.ndarray, list[np.ndarray | None]]:
    """The input projections of every step, both directions (``sizes`` is directions, gate
    rows, hidden), with the biases added, in layout 0; and each direction's GRU ``Rb_h``,
    kept out of the sum when ``lbr`` (linear_before_reset), else None. ``W^T`` is laid out
    contiguous (kept in ``layouts`` when ``w`` is a constant): the tagger's (16, 128) x (128,
    1024) product took 88 us against 138 on the transposed view (one thread, measured).
    ``modes``: GRU's linear_before_reset, and how many leading gates come halved (``_halved``:
    LSTM's i, o and f, GRU's z and r; their weights and biases times 0.5)."""
    dirs, gh, hidden = sizes
    lbr, halved = modes
    # One matmul in x's memory order (batch-major for layout 1, so x is never copied to be
    # transposed).
    rows, n_in = x.shape[0] * x.shape[1], x.shape[2]
    gx = ws.empty((x.shape[0], x.shape[1], dirs * gh), ct)

    def transposed(w: np.ndarray) -> np.ndarray:
        view = w.astype(ct, copy=False).reshape(dirs * gh, n_in).T
        if not halved:
            return np.ascontiguousarray(view)  # may be w itself (one input): only read
        laid = np.array(view, order="C")  # a copy, always: halved in place below
        laid.reshape(n_in, dirs, gh)[:, :, : halved * hidden] *= 0.5  # of each direction
        return laid

    weights_t = layouts.get(w, ("wt", ct, halved), transposed)
    _matmul(x.astype(ct, copy=False).reshape(rows, n_in), weights_t, gx.reshape(rows, dirs * gh))
    if layout:
        gx = gx.swapaxes(0, 1)
    rb_h: list[np.ndarray | None] = [None] * dirs
    if _given(b):
        bias = b.astype(ct).reshape(dirs, 2, gh)
        if lbr:  # Rb_h is inside the reset gate's product: kept for the step
            rb_h = [bias[d, 1, 2 * hidden :].copy() for d in range(dirs)]
            bias[:, 1, 2 * hidden :] = 0
        summed = bias[:, 0] + bias[:, 1]
        if halved:
            summed[:, : halved * hidden] *= 0.5
        np.add(gx, summed.reshape(dirs * gh), gx)
    return gx, rb_h


def _cell_step(
    cell: str,
    attrs: Mapping[str, Any],
    mm: MatMul,
    rt: np.ndarray,
    batch: int,
    ct: np.dtype,
    p: np.ndarray | None,
    d: int,
    lbr: bool,
    rb_h: np.ndarray | None,
    halved: int,
) -> _Step:
    """Direction ``d``'s step of ``cell``: ``rt`` its R^T, ``p`` LSTM's peepholes (every
    direction's), ``rb_h`` GRU's recurrent bias kept for the reset gate's product, ``halved``
    how many leading gates arrive halved (``_halved``)."""
    clip = attrs["clip"]
    f = _act(attrs, "f", clip)
    if cell == "lstm":
        acts = (f, _act(attrs, "g", clip), _act(attrs, "h", None))
        pd = None if p is None else p[d]
        return _LSTM(mm, rt, batch, ct, acts, pd, attrs["input_forget"], bool(halved))
    if cell == "gru":
        return _GRU(mm, rt, batch, ct, (f, _act(attrs, "g", clip)), lbr, rb_h, bool(halved))
    return _RNN(mm, rt, batch, ct, f)


#: The direction index of both directions stepped together (``_both_directions``): a slice,
#: so that ``h0[_BOTH]`` and ``y_h[_BOTH]`` are both directions' stacked states.
_BOTH = slice(0, 2)


def _cells(
    cell: str,
    attrs: Mapping[str, Any],
    mm: MatMul,
    rts: np.ndarray,
    rows: tuple[int, np.dtype, bool],
    p: np.ndarray | None,
    lbr: bool,
    rb_h: list[np.ndarray | None],
    lens: np.ndarray | None,
    halved: int,
) -> list[tuple[_Step, Any, bool]]:
    """``(step, direction, reverse)`` for each run over the sequence: one per direction, or one
    for both (direction ``_BOTH``) where nothing differs between them but the weights (no
    ``sequence_lens`` masking, native states, no LSTM peepholes)."""
    batch, ct, native = rows
    directions = _DIRECTIONS[attrs["direction"]]
    if len(directions) == 2 and lens is None and p is None and native:
        both = _cell_step(cell, attrs, mm, rts, batch, ct, None, 0, lbr, _stack_rb(rb_h), halved)
        return [(both, _BOTH, False)]
    return [
        (
            _cell_step(cell, attrs, mm, rts[:, d], batch, ct, p, d, lbr, rb_h[d], halved),
            d,
            reverse,
        )
        for d, reverse in enumerate(directions)
    ]


def _stack_rb(rb_h: list[np.ndarray | None]) -> np.ndarray | None:
    """GRU's kept ``Rb_h`` of both directions as ``(2, 1, hidden)`` (it broadcasts over the
    batch of the stacked gates), or None where there is none."""
    if rb_h[0] is None or rb_h[1] is None:
        return None
    return np.stack([rb_h[0], rb_h[1]])[:, None, :]


def _initial_states(
    h0: np.ndarray, c0: np.ndarray | None, d: Any, shape: tuple[int, int], ct: np.dtype
) -> tuple[np.ndarray, np.ndarray | None]:
    """Direction ``d``'s initial ``h`` (only read) and LSTM's ``c`` (a new array, updated in
    place; None for the other cells, whose ``c0`` is None): zeros where not given. ``d`` may
    be ``_BOTH``: both directions' states, stacked."""
    full = (2, *shape) if d is _BOTH else shape
    h = h0[d].astype(ct, copy=False) if _given(h0) else np.zeros(full, ct)
    if c0 is None:
        return h, None
    c = np.zeros(full, ct)
    if _given(c0):
        np.copyto(c, c0[d])
    return h, c


def _run(
    cell: str,
    attrs: Mapping[str, Any],
    ins: list[np.ndarray],
    outs: list[np.ndarray],
    layouts: ConstantLayouts,
    workspace: np.ndarray | None = None,
) -> None:
    """The recurrence of ``cell`` (``lstm``, ``gru``, ``rnn``) into ``outs``; ``layouts`` keeps
    ``W^T`` and ``R^T`` when ``w`` and ``r`` are constants; the projections and their copies
    are carved from ``workspace`` when it has room (see the module doc)."""
    lstm = cell == "lstm"
    x, w, r, b, lens_in, h0 = ins[:6]
    c0, p_in = (ins[6], ins[7]) if lstm else (None, None)
    y, y_h = outs[0], outs[1]
    y_c = outs[2] if lstm else None
    layout = attrs["layout"]
    # Everything below reads layout 0: x (seq, batch, input), Y (seq, dirs, batch, hidden), the
    # states (dirs, batch, hidden); for layout 1 these are views of the batch-major arrays.
    if layout:
        y = y.transpose(1, 2, 0, 3)
        y_h = y_h.swapaxes(0, 1)
        y_c = None if y_c is None else y_c.swapaxes(0, 1)
        h0 = h0.swapaxes(0, 1) if _given(h0) else h0
        c0 = c0.swapaxes(0, 1) if c0 is not None and _given(c0) else c0
    seq, dirs, batch, hidden = y.shape
    gh = r.shape[1]
    lens = _lengths(lens_in, seq)
    finals = [y_h] if y_c is None else [y_h, y_c]
    if y_h.size == 0:
        return
    if seq == 0:
        for s in finals:  # no step: zero states, as onnxruntime gives
            s.fill(0)
        return
    ct = np.dtype(np.float32) if y.dtype == _F16 else y.dtype
    native = ct == y.dtype

    lbr = cell == "gru" and bool(attrs["linear_before_reset"])
    halved = 0 if p_in is not None and _given(p_in) else _halved(cell, attrs)
    sizes = (dirs, gh, hidden)
    ws = Workspace(workspace, *ins, *outs)
    gx, rb_h = _input_projections(x, w, b, layout, sizes, ct, (lbr, halved), layouts, ws)

    # One BLAS thread for the whole recurrence (see the module doc), or each step's choice.
    held = None
    if blas_threads.policy() == "one" and batch * hidden * gh > blas_threads.LOW:
        held = blas_threads.switch()
    mm: MatMul = (
        _plain_matmul if held is not None or blas_threads.policy() == "process" else _matmul
    )

    # R^T per gate and direction, (gates, dirs, hidden, hidden), laid out contiguous as the
    # products read it: a step's h @ R^T took 0.72x the time of the transposed view's
    # (measured, (2, 4, 128) x (2, 128, 512)). A constant R is laid out once per VM; another
    # is copied per call, which costs more than it saves on short sequences (lstm_tagger, seq
    # 16 x batch 1: 983 -> 1,176 us) but keeps the bits one layout gives (BLAS rounds a
    # transposed operand differently).
    gates = gh // hidden
    rts = layouts.get(
        r, ("rt", ct, halved), lambda r: _r_transposed(r, ct, dirs, gates, hidden, halved)
    )
    p = None
    if p_in is not None and _given(p_in):
        p = p_in.astype(ct, copy=False).reshape(dirs, 3, hidden)
    if held is not None:
        blas_threads.lower(held)
    try:
        with np.errstate(over="ignore"):  # the sigmoid's exp overflows to inf, rightly
            for step, d, reverse in _cells(
                cell, attrs, mm, rts, (batch, ct, native), p, lbr, rb_h, lens, halved
            ):
                h, c = _initial_states(h0, c0 if lstm else None, d, (batch, hidden), ct)
                if d is _BOTH:
                    h, c = _both_directions(step, gx, y, h, c, ws)
                else:
                    part = _gate_major(gx[:, :, d * gh : (d + 1) * gh], gates, hidden)
                    if not part.flags.c_contiguous:  # a step's add reads it contiguous
                        part = _copied(part, ws)
                    h, c = _direction(step, part, y[:, d], h, c, lens, reverse, native)
                np.copyto(y_h[d], h)
                if y_c is not None and c is not None:
                    np.copyto(y_c[d], c)
    finally:
        if held is not None:
            held.leave()
    if lens is not None and not lens.all():
        for s in finals:  # an entry of length 0 has zero states, as onnxruntime gives
            s[:, lens == 0] = 0


def _r_transposed(
    r: np.ndarray, ct: np.dtype, dirs: int, gates: int, hidden: int, halved: int
) -> np.ndarray:
    """R^T per gate and direction as a new C-contiguous ``(gates, dirs, hidden, hidden)``
    array in ``ct`` (R's rows are the gates' units); the first ``halved`` gates' weights times
    0.5 (exact: a power of two)."""
    view = r.astype(ct, copy=False).reshape(dirs, gates, hidden, hidden).transpose(1, 0, 3, 2)
    if not halved:
        return np.ascontiguousarray(view)  # may be r itself (hidden 1): only read
    laid = np.array(view, order="C")  # a copy, always: halved in place below
    laid[:halved] *= 0.5
    return laid


#: LSTM with the default activations, and GRU with a sigmoid ``f``, step their sigmoid gates by
#: tanh (``_halved``); switches for tests and measurements.
LSTM_TANH_GATES = True
GRU_TANH_GATES = True


def _halved(cell: str, attrs: Mapping[str, Any]) -> int:
    """How many leading gates of ``cell`` are computed halved (0: none), so that a step takes
    their sigmoids by tanh, ``sigmoid(x) = (1 + tanh(x / 2)) / 2`` (the ``sigmoid`` kernel's own
    form). LSTM: i, o and f, whose sigmoids and cc's tanh are then one tanh over the four
    gates, with the default activations (sigmoid, tanh, tanh), no clip, no coupled input and
    forget gates (and, checked by the caller, no peepholes). GRU: z and r, with a sigmoid
    ``f`` and no clip. Halving is exact (the weights and biases times 0.5, a power of two): the
    results differ from the exp form's within float rounding (absolute, near 0)."""
    if cell == "gru":
        return 2 if GRU_TANH_GATES and attrs["act_f"] == "sigmoid" and attrs["clip"] is None else 0
    plain = (
        LSTM_TANH_GATES
        and cell == "lstm"
        and attrs["act_f"] == "sigmoid"
        and attrs["act_g"] == "tanh"
        and attrs["act_h"] == "tanh"
        and attrs["clip"] is None
        and not attrs["input_forget"]
    )
    return 3 if plain else 0


#: The operand positions of ``w`` and ``r`` (the input and recurrent weights), every cell's.
_W, _R = 1, 2


def _factory(cell: str, arity: int, results: int) -> Callable[[Mapping[str, Any]], Kernel]:
    def factory(attrs: Mapping[str, Any]) -> Kernel:
        if attrs["direction"] not in _DIRECTIONS:
            raise ValueError(f"direction={attrs['direction']!r} is not one of {list(_DIRECTIONS)}")
        if attrs["layout"] not in (0, 1):
            raise ValueError(f"layout={attrs['layout']} is not 0 or 1")

        def build(layouts: ConstantLayouts) -> Kernel:
            def kernel(*args: np.ndarray) -> None:
                # the inputs, the results, and maybe the workspace (``_run``)
                outs = list(args[arity : arity + results])
                workspace = args[arity + results] if len(args) > arity + results else None
                _run(cell, attrs, list(args[:arity]), outs, layouts, workspace)

            def prepared(constants: Mapping[int, np.ndarray]) -> Kernel:
                kept = [constants[i] for i in (_W, _R) if i in constants]
                return build(ConstantLayouts(kept)) if kept else kernel

            kernel.with_constants = prepared  # type: ignore[attr-defined]
            return kernel

        return build(ConstantLayouts())

    factory.__doc__ = (
        f"ONNX's {cell.upper()} over the whole sequence: {arity} operands (absent ones 0-d) "
        "-> Y and the final states (see the module doc)."
    )
    return factory


register_kernel("nn.lstm")(_factory("lstm", 8, 3))
register_kernel("nn.gru")(_factory("gru", 6, 2))
register_kernel("nn.rnn")(_factory("rnn", 6, 2))
