"""Unit axes kept through elementwise ops: the ``sink_squeezes`` pass moves a ``squeeze`` below
the elementwise ops that read it, so that it meets the ``expand_dims`` that undoes it.

Assumes: a typed module (``InferTypes`` output), in graph form.
Guarantees: a typed module computing the same values, in which an elementwise op (unary, or
a broadcasting one: ``add``, ``multiply``, ``where``, comparisons, ...; without attributes or
with value-only ones: ``cast``, ``clip``, ``nn.leaky_relu``) whose operand is ``squeeze(X,
axis=A)`` (static axes, ``X``'s rank that of the op's result plus ``|A|``) runs on ``X``
instead, followed by ``squeeze(., axis=A)``; its other operands get the unit axes their
broadcast needs (a constant reshaped, another ``squeeze(Y, axis=A)`` replaced by ``Y``, any
other value ``expand_dims``-ed), and ``expand_dims(squeeze(X, axis=A), axis=a,
num_newaxis=n)`` with ``A = (a, ..., a + n - 1)`` is ``X``. Ops with other attributes
(``nn.bias_add``'s axis, ``broadcast_to``'s shape, ``bitcast``, a custom op's) and operands
that broadcast a squeezed value to a higher rank are left alone.

Why: ONNX's and PyTorch's 1-d convolutions import as 2-d ones over a unit axis,
``squeeze(conv2d(expand_dims(x)))``, and an exported Conv1d block (a TCN's, wav2vec2's and
Whisper's front ends) is ``expand_dims``, ``conv2d``, ``bias_add``, ``squeeze``, ``relu``, the
residual ``add``, ``expand_dims`` again for the next convolution. The squeeze between the
convolution and its activation is not elementwise, so the fuser cannot give the convolution
its epilogue (``fuse_ops`` rule 4): every convolution is two kernels and two buffers, and the
layout ops between them two more instructions. With the squeezes sunk, consecutive blocks stay
on the 4-d layout and each convolution takes its bias, activation and residual add as one
kernel (design/compiler_fusion.md, "Squeezes sunk through elementwise ops").

Sound because a squeeze only drops unit axes: an elementwise op on ``X`` then squeezed gives
the values the op gives on the squeezed ``X``, once every other operand has unit axes where
the result does (numpy's broadcasting aligns trailing axes).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

import ir
from ir import Call, Constant, Expr, Function, Let, Module, OpPattern, TensorType

from ..analysis.dataflow import use_graph
from .base import ModulePass
from .infer_types import CompleteTypes
from .patterns import TypedRewriter, tensor_type

_SQUEEZE = ir.get_op("squeeze")
_EXPAND_DIMS = ir.get_op("expand_dims")

#: Elementwise ops whose attributes are values only (a dtype, bounds, a slope): sunk like the
#: ops without attributes. Any other op with attributes (``nn.bias_add``'s axis,
#: ``broadcast_to``'s shape, ``bitcast``, a custom op's) is left alone.
_VALUE_ATTRS = frozenset({"cast", "clip", "nn.leaky_relu"})


@dataclass(frozen=True)
class _Squeezed:
    """A value that is ``squeeze(x, axis=axes)``: ``x`` of rank ``rank``, ``axes`` sorted and
    non-negative."""

    x: Expr
    axes: tuple[int, ...]
    rank: int


class SinkSqueezes(ModulePass):
    """Move squeezes below elementwise ops and cancel them against ``expand_dims`` (see the
    module docstring)."""

    name = "sink_squeezes"

    def __init__(self) -> None:
        self.sunk = 0
        """How many elementwise ops the last ``run`` moved a squeeze below."""
        self.cancelled = 0
        """How many ``expand_dims`` of a squeeze the last ``run`` replaced by the value."""

    def run(self, module: Module) -> Module:
        self.sunk = self.cancelled = 0
        out: dict[str, Function] = {}
        for name, fn in module.items():
            out[name] = fn
            if fn.is_primitive or any(isinstance(n, Let) for n in use_graph(fn.body).order):
                continue
            sinker = _Sinker()
            new = sinker.visit(fn)
            assert isinstance(new, Function)
            if sinker.sunk or sinker.cancelled:
                out[name] = new
                self.sunk += sinker.sunk
                self.cancelled += sinker.cancelled
        if not (self.sunk or self.cancelled):
            return module
        return CompleteTypes().run(Module(out))


def _rank(node: Expr) -> int | None:
    ty = tensor_type(node)
    return None if ty is None else len(ty.shape)


def _squeezed_axes(call: Call) -> tuple[int, ...] | None:
    """The sorted non-negative axes a typed ``squeeze`` drops, or None when not static."""
    ty = tensor_type(call.args[0])
    axis = call.attrs.get("axis")
    if ty is None or axis is None:
        return None
    rank = len(ty.shape)
    axes = sorted({int(a) + rank if int(a) < 0 else int(a) for a in axis})
    if not axes or any(not 0 <= a < rank for a in axes):
        return None
    return tuple(axes)


def _sinkable(call: Call) -> bool:
    op = call.op
    if op is None or not isinstance(call.ty, TensorType):
        return False
    if len(call.attrs) and op.name not in _VALUE_ATTRS:
        return False
    unary = op.pattern == OpPattern.ELEMWISE and len(call.args) == 1
    return unary or op.pattern == OpPattern.BROADCAST


class _Sinker(TypedRewriter):
    def __init__(self) -> None:
        super().__init__()
        self.squeezed: dict[Expr, _Squeezed] = {}
        self.sunk = 0
        self.cancelled = 0

    def replacement(self, call: Call) -> Expr | None:
        if call.op is _SQUEEZE:
            return self._squeeze(call)
        if call.op is _EXPAND_DIMS:
            return self._expand_dims(call)
        if _sinkable(call):
            return self._sink(call)
        return None

    def _squeeze(self, call: Call) -> Expr | None:
        axes = _squeezed_axes(call)
        rank = _rank(call.args[0])
        if axes is None or rank is None:
            return None
        x = self.visit(call.args[0])
        new = self._typed(call, Call(_SQUEEZE, (x,), call.attrs, span=call.span))
        self.squeezed[new] = _Squeezed(x, axes, rank)
        return new

    def _expand_dims(self, call: Call) -> Expr | None:
        arg = self.visit(call.args[0])
        s = self.squeezed.get(arg)
        rank = _rank(call)
        if s is None or rank is None or rank != s.rank:
            return None
        axis, n = int(call.attrs["axis"]), int(call.attrs.get("num_newaxis", 1))
        axis = axis + rank if axis < 0 else axis
        if s.axes != tuple(range(axis, axis + n)):
            return None
        self.cancelled += 1
        return s.x

    def _sink(self, call: Call) -> Expr | None:
        args = [self.visit(a) for a in call.args]
        found = [self.squeezed[a] for a in args if a in self.squeezed]
        result_rank = _rank(call)
        if not found or result_rank is None:
            return None
        first = found[0]
        if any(s.axes != first.axes or s.rank != first.rank for s in found):
            return None
        if first.rank != result_rank + len(first.axes):
            return None
        unsqueezed = _Unsqueezed(result_rank, first.axes)
        operands: list[Expr] = []
        for old, new in zip(call.args, args, strict=True):
            s = self.squeezed.get(new)
            if s is not None:
                if _rank(old) != result_rank:
                    return None  # the squeezed value broadcasts to a higher rank: left alone
                operands.append(s.x)
                continue
            rank = _rank(old)
            if rank is None:
                return None
            operands.append(unsqueezed.operand(new, rank))
        assert call.op is not None  # _sinkable
        sunk = Call(call.op, tuple(operands), call.attrs, span=call.span)
        out = Call(_SQUEEZE, (sunk,), ir.Attrs({"axis": list(first.axes)}), span=call.span)
        self.squeezed[out] = _Squeezed(sunk, first.axes, first.rank)
        self.sunk += 1
        return out


@dataclass(frozen=True)
class _Unsqueezed:
    """The result of an op of rank ``rank`` with the unit axes ``axes`` put back (its rank
    ``rank + len(axes)``), and what its operands need to broadcast to it."""

    rank: int
    axes: tuple[int, ...]

    def operand(self, node: Expr, rank: int) -> Expr:
        """``node`` (of rank ``rank``, aligned to the result's trailing axes) with unit axes
        where the result has them inside its span: as it is when none are, a constant
        reshaped, any other value ``expand_dims``-ed."""
        if rank == 0:
            return node
        full = self.rank + len(self.axes)
        kept = [a for a in range(full) if a not in self.axes]  # squeezed index -> full index
        start = kept[self.rank - rank]
        inside = [a - start for a in self.axes if a > start]
        if not inside:
            return node
        if isinstance(node, Constant):
            return Constant(np.expand_dims(node.value, tuple(inside)), span=node.span)
        for a in inside:  # ascending: each axis is where the result has it
            attrs = ir.Attrs({"axis": a, "num_newaxis": 1})
            node = Call(_EXPAND_DIMS, (node,), attrs, span=node.span)
        return node
