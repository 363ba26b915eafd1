"""Constant dense weights laid out for BLAS: the ``dense_layout`` pass turns
``nn.dense(x, C)`` into ``nn.matmul(x, C^T)`` with ``C^T`` a new, contiguous constant.

Assumes: a typed module (``InferTypes`` output), in graph form.
Guarantees: a typed module in which every ``nn.dense(X, C)`` whose weight ``C`` is a 2-d
float32 or float64 constant, whose data ``X`` has a known rank of at least 2, and where every
use of ``C`` in the module is as the weight of such a call, is ``nn.matmul(X, T)``, ``T`` the
constant ``C`` transposed and copied C-contiguous (one ``T`` per ``C``, shared by its calls).
Anything else (a weight that is a parameter or a computed value, a constant with another use:
rewriting it would keep both layouts in the executable; integer and float16 weights, which do
not go through BLAS; a 1-d ``X``) is left as it is.

Sound because ``X @ C.T`` and ``X @ T`` are the same product of the same values; BLAS reads
the one operand transposed, the other not, and may order a dot product's sums differently, so
the results agree within float rounding (bit for bit in 128 of 140 shapes tried, 1 to 1,000
rows, one and two threads).

Why: ONNX ``Gemm(transB=1)`` (what PyTorch exports for ``nn.Linear`` on 2-d inputs) keeps the
weight ``(out, in)``, so the VM's dense kernel multiplied by a transposed view on every call.
OpenBLAS is slower on that view when the product has few rows: with one thread, a (4, 1024) x
(1024, 1000) product took 713 us through the view and 492 us from the contiguous copy, 0.65-0.9x
the time from 2 to 32 rows over the weights of the benchmark models and within 1% from 256
rows up (design/vm.md, "Constant weights laid out by the compiler"). Laying a constant out once
at compile time is the compiler's job (TVM's ``alter_op_layout``): a cache in the kernel could
not prove a constant's buffer unchanged since the copy.
"""

from __future__ import annotations

from typing import Any

import numpy as np

import ir
from ir import Call, Constant, Expr, Function, Module

from ..analysis.dataflow import Use, UseGraph, use_graph
from .base import ModulePass
from .infer_types import CompleteTypes
from .patterns import ChainRewriter, call_of, rewrite_chains, tensor_type

_MATMUL = ir.get_op("nn.matmul")
_BLAS_DTYPES = frozenset({"float32", "float64"})


class DenseWeightLayout(ModulePass):
    """Rewrite ``nn.dense`` by a constant weight into ``nn.matmul`` by its contiguous
    transpose (see the module docstring)."""

    name = "dense_layout"

    def __init__(self) -> None:
        self.rewritten = 0
        """How many ``nn.dense`` calls the last ``run`` rewrote."""

    def run(self, module: Module) -> Module:
        weights = _dense_only_weights(module)
        if not weights:
            self.rewritten = 0
            return module
        transposed: dict[int, Constant] = {}

        def find(node: Expr, graph: UseGraph, fn: Function) -> tuple[Call, Any] | None:
            call = call_of(node, "nn.dense")
            if call is None or id(call.args[1]) not in weights:
                return None
            data = tensor_type(call.args[0])
            if data is None or data.rank < 2:
                return None
            return call, call.args[1]

        def build(rewriter: ChainRewriter, call: Call, weight: Constant) -> Expr:
            layout = transposed.get(id(weight))
            if layout is None:
                value = np.ascontiguousarray(weight.value.T)
                layout = transposed[id(weight)] = Constant(value, span=weight.span)
            return Call(_MATMUL, (rewriter.visit(call.args[0]), layout), span=call.span)

        out, self.rewritten = rewrite_chains(module, find, build)
        return CompleteTypes().run(out) if self.rewritten else module


def dense_layout(module: Module) -> Module:
    """``DenseWeightLayout().run(module)``."""
    return DenseWeightLayout().run(module)


def _dense_only_weights(module: Module) -> dict[int, Constant]:
    """The 2-d float32/float64 constants (by ``id``) of the module's non-primitive functions
    whose every use, in every function, is as the weight of an ``nn.dense`` call."""
    found: dict[int, Constant] = {}
    refused: set[int] = set()
    for fn in module.values():
        if fn.is_primitive:
            continue
        graph = use_graph(fn.body)
        for node in graph.order:
            if not isinstance(node, Constant):
                continue
            key = id(node)
            value = node.value
            ok = value.ndim == 2 and value.dtype.name in _BLAS_DTYPES
            for parent, how in graph.uses.get(node, []):
                dense = None if parent is None else call_of(parent, "nn.dense")
                if how is not Use.OPERAND or dense is None or dense.args[0] is node:
                    ok = False
            if ok and key not in refused:
                found[key] = node
            else:
                refused.add(key)
                found.pop(key, None)
    return found
