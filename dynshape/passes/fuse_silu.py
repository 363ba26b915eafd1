"""SiLU as one op: the ``fuse_silu`` pass turns ``x * sigmoid(x)`` into ``silu(x)``.

Assumes: a typed module (``InferTypes`` output), in graph form.
Guarantees: a typed module in which every ``multiply(X, S)`` or ``multiply(S, X)`` with
``S = sigmoid(X)`` (the same ``X``), ``S`` used by that multiply alone and ``X`` of a float
dtype and of the product's type (nothing broadcasts), is one call ``silu(X)``. That is what
PyTorch exports for ``nn.SiLU`` / ``F.silu`` (EfficientNet's and YOLO's activations, the gate
of Llama's, Mistral's and Qwen's MLPs), what ONNX's ``Swish`` with ``alpha = 1`` is, and what
the torch.export frontend writes for ``aten.silu``.

A sigmoid with other uses (its value is needed anyway) and a sigmoid of another value (a
gated linear unit, ``a * sigmoid(b)``; or ``x * sigmoid(1.702 x)``, the quick GELU) are left as
they are.

Sound because ``silu`` computes the same formula as the two ops (``(x / 2) (1 + tanh(x / 2))``
against ``x * ((1 + tanh(x / 2)) / 2)``); the results differ within float rounding.

Why: the two kernels are five numpy passes over the tensor; ``silu`` is four, over chunks
that stay in the cache (``vm/kernels/silu.py``; design/compiler_fusion.md, "SiLU as one op").
"""

from __future__ import annotations

import ir
from ir import Call, Expr, Function, Module

from ..analysis.dataflow import UseGraph
from .base import ModulePass
from .infer_types import CompleteTypes
from .patterns import ChainRewriter, call_of, only_use, rewrite_chains, tensor_type

_SILU = ir.get_op("silu")
_FLOATS = frozenset({"float16", "float32", "float64"})


class FuseSiLU(ModulePass):
    """Rewrite ``x * sigmoid(x)`` into ``silu(x)`` (see the module docstring)."""

    name = "fuse_silu"

    def __init__(self) -> None:
        self.rewritten = 0
        """How many products the last ``run`` rewrote."""

    def run(self, module: Module) -> Module:
        out, self.rewritten = rewrite_chains(module, _find, _build)
        return CompleteTypes().run(out) if self.rewritten else module


def _find(node: Expr, graph: UseGraph, fn: Function) -> tuple[Call, Expr] | None:
    """``(the multiply, X)`` when ``node`` is ``X * sigmoid(X)`` (either order) as the module
    doc says, else None."""
    product = call_of(node, "multiply")
    ty = tensor_type(node)
    if product is None or ty is None or ty.dtype not in _FLOATS:
        return None
    a, b = product.args
    for x, s in ((a, b), (b, a)):
        sigmoid = call_of(s, "sigmoid")
        if sigmoid is None or sigmoid.args[0] is not x or not only_use(s, product, graph):
            continue
        if str(tensor_type(x)) == str(ty):
            return product, x
    return None


def _build(rewriter: ChainRewriter, call: Call, x: Expr) -> Expr:
    """The ``silu`` call standing for the matched multiply ``call``."""
    return Call(_SILU, (rewriter.visit(x),), ir.Attrs({}), span=call.span)
