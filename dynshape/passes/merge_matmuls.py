"""Merge matmuls that share an input and have constant weights (q/k/v projections).

Assumes: a typed module (``InferTypes`` output), in graph form. Guarantees: a typed module in
which every set of two or more ``nn.dense(X, C_i)`` (or ``nn.matmul(X, C_i)``) calls with the
*same* input node ``X``, 2-d constant weights ``C_i`` of one dtype, and as users only
``INJECTIVE`` op calls (layout: reshape, transpose, ...), directly or after one bias ``add``
(see ``_layout_users``), is one call against the concatenated constant,
``nn.dense(X, concat(C_i, axis=0))`` (``nn.matmul``: ``axis=1``), and each old call is the
columns it owned: ``take(merged, const([o_i, ..., o_i + n_i - 1]), axis=-1)``. When every
call of a set is used only by ``add(call, b_i)`` with ``b_i`` a constant of shape ``(n_i,)``
(a bias), the biases are merged too: ``add(merged, concat(b_i))``, and the ``take``s replace
the adds (the bias is then the matmul's in-place epilogue, and each user group keeps the
number of steps it had: the ``take`` stands where the ``add`` was).

Why: one BLAS call of width ``sum(n_i)`` instead of ``len(C_i)`` calls (each a kernel
dispatch in the VM, and a narrow GEMM that uses the BLAS poorly), as onnxruntime's
"MatMul with shared input" fusion does. The ``take`` is injective, so ``fuse_ops`` puts it in
the group of its users. The users must be layout ops because only then was each matmul
alone in its group before (an elementwise user takes the matmul as its epilogue's anchor, an
anchor as user would leave the ``take`` a copy kernel of its own): 2n dispatches become n + 1,
where otherwise n would become n + 1. The
``take`` kernel recognises a constant contiguous range and copies a strided slice
(``vm/kernels/transform.py``).

Weights that are function parameters are left alone: concatenating them would be a copy of
every weight on every call. Matmuls in different ``if`` branches are merged too (the merged
call is placed before the ``if``, as any shared value is), which is correct but computes the
branch not taken; groups are formed per function, deterministically in post-order.
"""

from __future__ import annotations

import dataclasses

import numpy as np

import ir
from ir import Attrs, Call, Constant, Expr, Module, OpPattern, TensorType

from ..analysis.dataflow import Use, UseGraph, use_graph
from .base import ModulePass
from .infer_types import InferTypes

#: The ops merged, and the axis of their weight along which outputs are concatenated.
_WEIGHT_AXIS = {"nn.dense": 0, "nn.matmul": 1}


class MergeSharedMatmuls(ModulePass):
    """Merge matmuls sharing an input and having constant weights (see the module docstring)."""

    name = "merge_matmuls"

    def run(self, module: Module) -> Module:
        out = {}
        changed = False
        for name, fn in module.items():
            if fn.is_primitive:
                out[name] = fn
                continue
            graph = use_graph(fn.body)
            groups = _groups(graph)
            if not groups:
                out[name] = fn
                continue
            out[name] = dataclasses.replace(fn, body=_Rewriter(groups, graph).visit(fn.body))
            changed = True
        if not changed:
            return module
        # The rewriter builds untyped nodes; a function whose matmuls merged is re-typed (the
        # others keep their types: InferTypes infers every global alike).
        return InferTypes().run(Module(out))


def merge_shared_matmuls(module: Module) -> Module:
    """``MergeSharedMatmuls().run(module)``."""
    return MergeSharedMatmuls().run(module)


def _candidate(call: Expr, graph: UseGraph) -> bool:
    """A dense/matmul with a 2-d constant weight, a typed result, and only users that the
    ``take`` replacing it can fuse into."""
    if not isinstance(call, Call) or call.op is None or call.op.name not in _WEIGHT_AXIS:
        return False
    data, weight = call.args
    if not isinstance(weight, Constant) or weight.value.ndim != 2 or isinstance(data, Constant):
        return False
    if not isinstance(call.ty, TensorType) or not call.ty.shape:
        return False
    bias = _bias(call, graph)
    return _layout_users(bias[0] if bias is not None else call, graph)


def _layout_users(node: Expr, graph: UseGraph) -> bool:
    """True if every user of ``node`` is an ``INJECTIVE`` op call (reshape, transpose, ...).

    Then the matmul was alone in its group before the rewrite (an injective consumer is not an
    elementwise epilogue), and the ``take`` joins its users' group after it: one dispatch per
    projection saved. An elementwise user would have taken the matmul as its epilogue anchor,
    and the merged form (one matmul, then one ``take`` group per projection) would dispatch
    one kernel *more*."""
    uses = graph.uses[node]
    for parent, use in uses:
        if use is not Use.OPERAND or not isinstance(parent, Call) or parent.op is None:
            return False
        if parent.op.pattern != OpPattern.INJECTIVE:
            return False
    return bool(uses)


def _groups(graph: UseGraph) -> list[list[Call]]:
    """Sets of two or more candidates with one op, one input node and one weight dtype."""
    by_key: dict[tuple[str, Expr, str], list[Call]] = {}
    for node in graph.order:
        if _candidate(node, graph):
            assert isinstance(node, Call) and node.op is not None
            weight = node.args[1]
            assert isinstance(weight, Constant)
            key = (node.op.name, node.args[0], weight.value.dtype.name)
            by_key.setdefault(key, []).append(node)
    return [calls for calls in by_key.values() if len(calls) >= 2]


def _bias(call: Call, graph: UseGraph) -> tuple[Call, Constant] | None:
    """The ``add`` of a ``(n,)`` constant that is ``call``'s only user, and that constant."""
    uses = graph.uses[call]
    if len(uses) != 1 or not isinstance(call.ty, TensorType):
        return None
    parent = uses[0][0]
    if not isinstance(parent, Call) or parent.op is None or parent.op.name != "add":
        return None
    a, b = parent.args
    other = b if a is call else a
    n = call.ty.shape[-1]
    if (
        not isinstance(other, Constant)
        or other.value.ndim != 1
        or other.value.dtype.name != call.ty.dtype
        or str(parent.ty) != str(call.ty)
        or other.value.shape[0] != n
    ):
        return None
    return parent, other


class _Rewriter(ir.ExprMutator):
    """Replaces each grouped call by a ``take`` of its columns from the group's merged call."""

    def __init__(self, groups: list[list[Call]], graph: UseGraph) -> None:
        super().__init__()
        self.group_of: dict[Call, list[Call]] = {}
        """The group of each call replaced: a matmul, or the bias add of one."""
        self.matmul_of: dict[Call, Call] = {}
        """The matmul of each call replaced (itself, or the one the add adds a bias to)."""
        self.biases: dict[int, list[Constant]] = {}
        """Per group (by id) whose every call has a bias add: the biases, in group order."""
        for g in groups:
            found = [_bias(c, graph) for c in g]
            if all(f is not None for f in found):
                self.biases[id(g)] = [f[1] for f in found if f is not None]
                for c, f in zip(g, found, strict=True):
                    assert f is not None
                    self.group_of[f[0]] = g  # the add is what the take replaces
                    self.matmul_of[f[0]] = c
            else:
                for c in g:
                    self.group_of[c] = g
                    self.matmul_of[c] = c
        self.merged: dict[int, Call] = {}

    def visit_call(self, node: Call) -> Expr:
        group = self.group_of.get(node)
        if group is None:
            return super().visit_call(node)
        call = self.matmul_of[node]
        assert call.op is not None
        axis = _WEIGHT_AXIS[call.op.name]
        merged = self.merged.get(id(group))
        if merged is None:
            weights = []
            for c in group:
                w = c.args[1]
                assert isinstance(w, Constant)
                weights.append(w.value)
            both = Constant(np.concatenate(weights, axis=axis), span=call.span)
            merged = Call(call.op, (self.visit(call.args[0]), both), call.attrs, span=call.span)
            biases = self.biases.get(id(group))
            if biases is not None:
                bias = Constant(np.concatenate([b.value for b in biases]), span=node.span)
                merged = Call(ir.get_op("add"), (merged, bias), span=node.span)
            self.merged[id(group)] = merged
        offset = 0
        for c in group:
            if c is call:
                break
            w = c.args[1]
            assert isinstance(w, Constant)
            offset += w.value.shape[axis]
        weight = call.args[1]
        assert isinstance(weight, Constant)
        columns = np.arange(offset, offset + weight.value.shape[axis], dtype=np.int64)
        return Call(
            ir.get_op("take"), (merged, Constant(columns)), Attrs({"axis": -1}), span=node.span
        )
