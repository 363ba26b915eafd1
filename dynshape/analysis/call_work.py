"""How much arithmetic a call of a function does, as a formula of its symbols.

``call_work(fn)`` counts, over ``@main``'s op calls, two operations per multiply-add of the
contractions (``nn.conv2d``: per output element, input channels per group times the window;
``nn.dense``, ``nn.matmul``, ``nn.batch_matmul``, ``nn.attention``: the contracted length) and
one per output element of every other op. It is a rough figure, used where a decision must
depend on the shapes alone and only its order of magnitude matters (whether a call is large
enough to split its batch across processes, ``dynshape/batch_processes.py``).
"""

from __future__ import annotations

from typing import Any

import sympy

import ir
from ir import Call, Function, TensorType

from .dataflow import use_graph


def call_work(fn: Function) -> sympy.Expr:
    """Operations in one call of ``fn`` (typed), as a formula of its symbols."""
    total: Any = sympy.Integer(0)
    for node in use_graph(fn.body).order:
        if not isinstance(node, Call) or node.op is None or node.ty is None:
            continue
        leaves = ir.tensor_leaves(node.ty)
        if node.op.name in _RECURRENT:
            total += _recurrent(node, leaves[0])
            continue
        out = sum((_elements(t) for t in leaves), sympy.Integer(0))
        total += out * _per_output(node)
    return sympy.expand(total)


def _per_output(call: Call) -> Any:
    name = call.op.name if call.op is not None else ""
    args = [a.ty for a in call.args]
    if name in ("nn.conv2d", "nn.conv3d", "nn.conv2d_transpose") and isinstance(
        args[1], TensorType
    ):
        w = args[1].shape  # (O, I / groups, [KD,] KH, KW) for conv2d/3d: the window counts
        return 2 * _product(w[1:]) if name != "nn.conv2d_transpose" else 2 * _product(w[2:]) * w[0]
    if name in ("nn.dense", "nn.matmul", "nn.batch_matmul") and isinstance(args[0], TensorType):
        a = args[0].shape
        transposed = name == "nn.batch_matmul" and call.attrs.transpose_a
        k = a[-2] if transposed else a[-1]
        return 2 * k if a else 1
    if name == "nn.attention" and isinstance(args[1], TensorType):
        return 4 * args[1].shape[-2]  # scores and their use: keys' length each
    return 1


_RECURRENT = ("nn.lstm", "nn.gru", "nn.rnn")


def _recurrent(call: Call, y: TensorType) -> Any:
    """Per element of the output sequence ``Y``: the gates' products with the step's input
    and the previous state (``W`` is ``(dirs, gates * hidden, in)``, ``R`` ``(.., hidden)``)."""
    w, r = call.args[1].ty, call.args[2].ty
    if not (isinstance(w, TensorType) and isinstance(r, TensorType)):
        return _elements(y)
    return _elements(y) * 2 * w.shape[1] * (w.shape[2] + r.shape[2]) / r.shape[2]


def _elements(t: TensorType) -> Any:
    return _product(t.shape)


def _product(dims: Any) -> Any:
    out: Any = sympy.Integer(1)
    for d in dims:
        out *= d
    return out
