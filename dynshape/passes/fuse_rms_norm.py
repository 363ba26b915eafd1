"""RMSNorm as one op: the ``fuse_rms_norm`` pass turns the exported pattern into
``nn.rms_norm``.

Assumes: a typed module (``InferTypes`` output), in graph form.
Guarantees: a typed module in which every chain

    Z = multiply(Y, W) | multiply(W, Y)
    Y = multiply(X, R) | multiply(R, X) | divide(X, S)
    R = rsqrt(A) | divide(1, S)
    S = sqrt(A)
    A = add(M, eps) | add(eps, M)
    M = mean(Q, axis=[last], keepdims=True)
    Q = multiply(X, X) | power(X, 2)

whose intermediates ``Q``, ``M``, ``A``, ``S``, ``R``, ``Y`` have no other use, whose ``X`` is
float32 or float64, whose ``eps`` is a finite non-negative scalar constant of that dtype and
whose weight ``W`` is 1-d, of that dtype, its length proved equal to ``X``'s last dim (so that
``Y`` and ``Z`` have ``X``'s type: nothing broadcasts wider), is one call
``nn.rms_norm(X, W, axis=-1, epsilon=eps)``. That is what PyTorch exports for transformers'
``LlamaRMSNorm`` (and the RMS norms of Mistral, Qwen, Gemma, T5's ``T5LayerNorm``) and what the
ONNX importer makes of ``RMSNormalization`` over the last axis.

Anything else (a norm over other axes, no weight, a weight of another shape, float16 chains:
exporters cast those to float32 first, and the float32 chain is matched) is left as it is.

Sound because ``nn.rms_norm`` computes the same formula; the results differ within float
rounding (the kernel reduces with a dot product, adds ``eps`` and takes the root in float64 on
one row).

Why: the unfused chain is 7 kernels, each a numpy call or two on a tensor or its reduced
column; on a decoder step's one row, the numpy calls are the time (19 us a norm against 7 for
``nn.rms_norm``'s 3 calls; design/compiler_fusion.md, "RMSNorm as one op").
"""

from __future__ import annotations

import dataclasses
from typing import Any

import ir
from ir import Call, Constant, Expr, Function, Module
from ir.dims import known_equal

from ..analysis.dataflow import UseGraph
from .base import ModulePass
from .infer_types import CompleteTypes
from .patterns import (
    ChainRewriter,
    call_of,
    only_use,
    rewrite_chains,
    scalar_value,
    tensor_type,
)

_RMS_NORM = ir.get_op("nn.rms_norm")
_FLOATS = frozenset({"float32", "float64"})


class FuseRMSNorm(ModulePass):
    """Rewrite the RMSNorm chains into ``nn.rms_norm`` (see the module docstring)."""

    name = "fuse_rms_norm"

    def __init__(self) -> None:
        self.rewritten = 0
        """How many chains the last ``run`` rewrote."""

    def run(self, module: Module) -> Module:
        out, self.rewritten = rewrite_chains(module, _find, _build)
        return CompleteTypes().run(out) if self.rewritten else module


def _find(node: Expr, graph: UseGraph, fn: Function) -> tuple[Call, _Match] | None:
    found = _match(node, graph, fn.ranges)
    return None if found is None else (found.replaces, found)


@dataclasses.dataclass
class _Match:
    replaces: Call
    """The weight's multiply, which the ``nn.rms_norm`` call stands for."""
    x: Expr
    weight: Expr
    epsilon: float


def _pair(call: Call) -> list[tuple[Expr, Expr]]:
    """A commutative call's operands in both orders."""
    a, b = call.args
    return [(a, b), (b, a)]


def _match(node: Expr, graph: UseGraph, ranges: Any) -> _Match | None:
    """The chain ending at the weight's multiply ``node``, or None (see the module doc)."""
    z = call_of(node, "multiply")
    z_ty = tensor_type(node)
    if z is None or z_ty is None or z_ty.dtype not in _FLOATS or not z_ty.shape:
        return None
    for y, weight in _pair(z):
        found = _normalised(y, z, graph)
        if found is None:
            continue
        x, eps = found
        w_ty, x_ty = tensor_type(weight), tensor_type(x)
        if w_ty is None or x_ty is None or str(x_ty) != str(z_ty) or w_ty.dtype != z_ty.dtype:
            continue
        if len(w_ty.shape) != 1 or not known_equal(w_ty.shape[0], x_ty.shape[-1], ranges):
            continue
        return _Match(z, x, weight, eps)
    return None


def _normalised(y: Expr, user: Call, graph: UseGraph) -> tuple[Expr, float] | None:
    """``(X, eps)`` when ``y`` is ``X / sqrt(mean(X * X, last axis) + eps)`` in one of the
    spellings of the module doc, each intermediate used once, ``y`` of ``X``'s type."""
    call = call_of(y, "multiply", "divide")
    y_ty = tensor_type(y)
    if call is None or y_ty is None or not only_use(y, user, graph):
        return None
    assert call.op is not None
    if call.op.name == "divide":
        x, root = call.args
        candidates = [(x, root, "sqrt")]
    else:
        candidates = [(x, r, "rsqrt") for x, r in _pair(call)]
    for x, r, how in candidates:
        if str(tensor_type(x)) != str(y_ty):
            continue
        added = _root(r, call, how, graph)
        if added is None:
            continue
        found = _mean_square_plus(added, graph, y_ty.dtype)
        if found is not None and found[0] is x:
            return found
    return None


def _root(node: Expr, user: Call, how: str, graph: UseGraph) -> Expr | None:
    """``A`` when ``node`` is ``sqrt(A)`` (``how="sqrt"``) or ``rsqrt(A)`` / ``1 / sqrt(A)``
    (``how="rsqrt"``), each intermediate used once."""
    if not only_use(node, user, graph):
        return None
    root = call_of(node, "sqrt" if how == "sqrt" else "rsqrt")
    if root is not None:
        return root.args[0] if only_use(root.args[0], root, graph) else None
    if how == "sqrt":
        return None
    d = call_of(node, "divide")
    d_ty = None if d is None else tensor_type(d)
    if d is None or d_ty is None:
        return None
    one, below = d.args
    if scalar_value(one, d_ty.dtype) != 1.0:
        return None
    return _root(below, d, "sqrt", graph)


def _mean_square_plus(node: Expr, graph: UseGraph, dtype: str) -> tuple[Expr, float] | None:
    """``(X, eps)`` when ``node`` is ``mean(X * X or X ** 2, last axis, keepdims) + eps``,
    the mean and the square used once (``node``'s own use was checked by its user)."""
    add = call_of(node, "add")
    if add is None:
        return None
    for mean_node, c in _pair(add):
        eps = _epsilon(c, dtype)
        mean = call_of(mean_node, "mean")
        if eps is None or eps < 0 or mean is None or not only_use(mean, add, graph):
            continue
        (square,) = mean.args
        q_ty = tensor_type(square)
        if q_ty is None or q_ty.dtype != dtype or not _last_axis(mean, len(q_ty.shape)):
            continue
        x = _squared(square, mean, graph, dtype)
        if x is not None:
            return x, eps
    return None


def _epsilon(node: Expr, dtype: str) -> float | None:
    """The scalar constant's value as the shortest decimal that rounds to it in ``dtype``
    (float32's ``1e-06f`` is the attribute ``1e-06``, as written, not its float64 widening
    ``9.99999997e-07``: float32 arithmetic rounds both to the constant; the kernel's one-row
    path, which adds it in float64, sees them differ in the 16th digit)."""
    if scalar_value(node, dtype) is None:
        return None
    assert isinstance(node, Constant)
    return float(str(node.value[()]))


def _last_axis(mean: Call, rank: int) -> bool:
    attrs = mean.attrs
    axis = attrs["axis"]
    if attrs["exclude"] or not attrs["keepdims"] or axis is None or len(axis) != 1:
        return False
    return rank > 0 and int(axis[0]) % rank == rank - 1


def _squared(node: Expr, user: Call, graph: UseGraph, dtype: str) -> Expr | None:
    """``X`` when ``node`` is ``X * X`` or ``X ** 2`` used once, of ``X``'s type."""
    if not only_use(node, user, graph):
        return None
    m = call_of(node, "multiply")
    if m is not None and m.args[0] is m.args[1]:
        x = m.args[0]
    else:
        p = call_of(node, "power")
        if p is None or scalar_value(p.args[1], dtype) != 2.0:
            return None
        x = p.args[0]
    return x if str(tensor_type(x)) == str(tensor_type(node)) else None


def _build(rewriter: ChainRewriter, call: Call, m: _Match) -> Expr:
    """The ``nn.rms_norm`` call standing for the matched multiply ``call``."""
    attrs = ir.Attrs({"axis": -1, "epsilon": m.epsilon})
    args = (rewriter.visit(m.x), rewriter.visit(m.weight))
    return Call(_RMS_NORM, args, attrs, span=call.span)
