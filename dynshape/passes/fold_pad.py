"""Zero padding folded into the convolution that reads it: the ``fold_pad`` pass.

Assumes: a typed module (``InferTypes`` output), in graph form.
Guarantees: a typed module in which every

    nn.conv2d(P, W, padding=[t, l, b, r], ...)
    P = nn.pad(X, pad_width=[[0, 0], [0, 0], [t', b'], [l', r']], pad_value=0)
      | expand_dims(nn.pad(X, pad_width=[[0, 0], [0, 0], [l', r']], pad_value=0), axis=2)

whose ``nn.pad`` is read only by such convolutions (each ``expand_dims`` used only there) is

    nn.conv2d(X | expand_dims(X, axis=2), W, padding=[t + t', l + l', b + b', r + r'], ...)

The second form is a 1-d convolution as the ONNX importer writes it (its data given a height
of 1). Anything else (a pad of another value, of the batch or channel axes, used twice,
feeding a pool or a transposed convolution) is left as it is.

Sound because a convolution's padding is zeros around its data: padding ``X`` with ``t'``
zero rows first and the convolution with ``t`` more reads the same ``t + t'`` zero rows, on
each side alike, whatever the strides, dilation or groups. The result's type is the same
(the padded size is the same formula); the run-time check on the data's size is inferred
again for the new call.

Why: PyTorch exports ``F.pad`` before a convolution as its own ``Pad`` (causal 1-d
convolutions: temporal conv nets, WaveNet-style decoders; ``padding="same"`` with an even
kernel), which ran as a kernel of its own each call: a fill and a copy of the data, and a
call of Python glue on small inputs (design/compiler_fusion.md, "Zero padding into the
convolution"). onnxruntime folds the same pair (its ``PadFusion``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import ir
from ir import Call, Expr, Function, Module

from ..analysis.dataflow import Use, UseGraph
from .base import ModulePass
from .infer_types import CompleteTypes
from .patterns import ChainRewriter, call_of, rewrite_chains

_CONV2D = ir.get_op("nn.conv2d")
_EXPAND_DIMS = ir.get_op("expand_dims")


class FoldPadIntoConv(ModulePass):
    """Fold zero ``nn.pad`` calls into the convolutions reading them (see the module doc)."""

    name = "fold_pad"

    def __init__(self) -> None:
        self.rewritten = 0
        """How many pads the last ``run`` folded."""

    def run(self, module: Module) -> Module:
        out, self.rewritten = rewrite_chains(module, _find, _build)
        return CompleteTypes().run(out) if self.rewritten else module


@dataclass(frozen=True)
class _Match:
    data: Expr
    """The pad's operand."""
    widths: tuple[int, int, int, int]
    """What the pad adds: ``[top, left, bottom, right]``, the conv's padding order."""
    one_dimensional: bool
    """Whether the data is 3-d, given its height of 1 by ``expand_dims(axis=2)``."""


def _find(node: Expr, graph: UseGraph, fn: Function) -> tuple[Call, _Match] | None:
    conv = call_of(node, "nn.conv2d")
    if conv is None:
        return None
    data = conv.args[0]
    expand = call_of(data, "expand_dims")
    pad = call_of(data if expand is None else expand.args[0], "nn.pad")
    if pad is None or not _positive_zero(pad.attrs.pad_value):
        return None
    if not _read_by_convolutions(pad, graph):  # (which checks the expand_dims too)
        return None
    width = [list(w) for w in pad.attrs.pad_width]
    if expand is not None:
        if len(width) != 3 or width[:2] != [[0, 0], [0, 0]]:
            return None
        (left, right) = width[2]
        widths = (0, left, 0, right)
    else:
        if len(width) != 4 or width[:2] != [[0, 0], [0, 0]]:
            return None
        (top, bottom), (left, right) = width[2], width[3]
        widths = (top, left, bottom, right)
    return conv, _Match(pad.args[0], widths, expand is not None)


def _read_by_convolutions(pad: Call, graph: UseGraph) -> bool:
    """Whether every use of ``pad`` is the data of a convolution, directly or through an
    ``expand_dims(axis=2)`` used only there (WaveNet's gated units pad once for the two
    convolutions of a layer): each of them folds it, and the pad is left unused."""
    uses = graph.uses.get(pad, [])
    return bool(uses) and all(_convolution_data(pad, u, k, graph, True) for u, k in uses)


def _convolution_data(
    value: Expr, user: Expr | None, kind: Use, graph: UseGraph, expand: bool
) -> bool:
    """Whether ``user`` reads ``value`` as a convolution's data (``expand``: or through one
    ``expand_dims(axis=2)`` whose only use does)."""
    if kind is not Use.OPERAND or user is None:
        return False
    adds_height = call_of(user, "expand_dims")
    if adds_height is not None:
        uses = graph.uses.get(adds_height, [])
        return (
            expand
            and adds_height.attrs.axis == 2
            and adds_height.attrs.num_newaxis == 1
            and len(uses) == 1
            and _convolution_data(adds_height, *uses[0], graph, False)
        )
    conv = call_of(user, "nn.conv2d")
    return conv is not None and conv.args[0] is value and conv.args[1] is not value


def _positive_zero(value: float) -> bool:
    """``0.0`` itself: a ``-0.0`` pad could give a window of padding alone a sign the
    convolution's own zeros do not."""
    return value == 0.0 and math.copysign(1.0, value) > 0


def _build(rewriter: ChainRewriter, call: Call, m: _Match) -> Expr:
    """The convolution of ``call`` reading the unpadded data, padded by the pad's widths
    more."""
    data = rewriter.visit(m.data)
    if m.one_dimensional:
        data = Call(_EXPAND_DIMS, (data,), ir.Attrs({"axis": 2, "num_newaxis": 1}))
    given = tuple(int(p) for p in call.attrs.padding)
    if len(given) == 2:  # ([h, w]: the same both sides)
        given = (*given, *given)
    padding = tuple(p + w for p, w in zip(given, m.widths, strict=True))
    attrs = ir.Attrs({**call.attrs, "padding": padding})
    return Call(_CONV2D, (data, rewriter.visit(call.args[1])), attrs, span=call.span)
