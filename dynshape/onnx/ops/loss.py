"""The losses: ``NegativeLogLikelihoodLoss`` and ``SoftmaxCrossEntropyLoss``, composed.

For an input ``(N, C, d1, .., dk)`` and a target ``(N, d1, .., dk)``, the loss of each position
is ``-input[n, target[n, d..], d..] * weight[target[n, d..]]``: one ``GatherElements`` along
axis 1 (the converter of ``indexing.py``, on the target with a 1-dim inserted) and one ``take``
of the optional weights. A position whose target is ``ignore_index`` weighs 0 and its loss is 0
(ONNX allows that index to be any value, outside ``[0, C)`` too: it is replaced by 0 before the
gather). Any other target outside ``[0, C)`` makes the gather raise at run time (a negative one
is not counted from the end). ``reduction``: ``none`` keeps the target's shape, ``sum`` adds
up, ``mean`` divides the sum by the total weight (the count of positions not ignored when there
are no weights); with nothing counted that is 0/0, NaN, as in the ONNX reference.
``SoftmaxCrossEntropyLoss`` is the same on ``log_softmax`` along axis 1, whose result is the
optional second output ``log_prob``.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

import ir
from dynshape.builder import trace

from ..known import Known
from ..registry import Node, NodeError, converter
from .indexing import gather_elements
from .operands import value_dtype, value_shape

_FLOATS = ("float16", "float32", "float64")
_REDUCTIONS = ("none", "sum", "mean")


def _int64_scalar(node: Node, value: Any) -> Any:
    """A 0-d int64 tensor: a number, or a dim computed from the input shapes."""
    return node.materialize(Known.of(value, "int64"))


def _check(node: Node, what: str) -> tuple[str, str]:
    """The input's dtype and the reduction, after checking ranks, dims and types."""
    x_shape, t_shape = value_shape(node.input(0)), value_shape(node.input(1))
    if len(x_shape) < 2:
        raise NodeError(f"the {what} must have rank >= 2 (N, C, ...), got rank {len(x_shape)}")
    if len(t_shape) != len(x_shape) - 1:
        raise NodeError(
            f"the target must have rank {len(x_shape) - 1} (the {what}'s without C), "
            f"got shape {list(t_shape)}"
        )
    for i, (a, b) in enumerate(zip([x_shape[0], *x_shape[2:]], t_shape, strict=True)):
        if ir.compare(a, "==", b) is False:
            raise NodeError(
                f"target dim {i} is {b}, the {what}'s is {a} (shapes {list(x_shape)}, "
                f"{list(t_shape)})"
            )
    dtype = value_dtype(node.input(0))
    if dtype not in _FLOATS:
        raise NodeError(f"the {what} must be float16, float32 or float64, got {dtype}")
    t_dtype = value_dtype(node.input(1))
    if t_dtype not in ("int32", "int64"):
        raise NodeError(f"the target must be int32 or int64, got {t_dtype}")
    if node.input(2) is not None:
        w_shape = value_shape(node.input(2))
        if len(w_shape) != 1 or ir.compare(w_shape[0], "==", x_shape[1]) is False:
            raise NodeError(
                f"the weights must have shape [C] = [{x_shape[1]}], got {list(w_shape)}"
            )
        if value_dtype(node.input(2)) != dtype:
            raise NodeError(f"the weights are {value_dtype(node.input(2))}, the {what} {dtype}")
    reduction = node.attr("reduction", "mean")
    if reduction not in _REDUCTIONS:
        raise NodeError(f"reduction={reduction!r} is not one of none, sum, mean")
    return dtype, str(reduction)


def _nll(node: Node, x: Any, dtype: str, reduction: str) -> Any:
    """The loss of ``x`` (log-probabilities) at the node's target, weights and ignore_index."""

    def const(value: Any, dt: str = dtype) -> Any:
        return trace.constant(np.asarray(value, dtype=dt), dt)

    classes = value_shape(node.input(0))[1]
    target = node.tensor(1)
    if value_dtype(node.input(1)) != "int64":
        target = trace.apply("cast", target, dtype="int64")
    ignore = node.attr("ignore_index")
    ignored = None if ignore is None else trace.apply("equal", target, const(ignore, "int64"))
    index = target if ignored is None else trace.apply("where", ignored, const(0, "int64"), target)
    # A negative target is out of range (GatherElements would count it from the end): C is
    # out of range too, so the gather raises on it.
    negative = trace.apply("less", index, const(0, "int64"))
    index = trace.apply("where", negative, _int64_scalar(node, classes), index)
    picked_node = dataclasses.replace(
        node,
        op_type="GatherElements",
        inputs=[x, trace.apply("expand_dims", index, axis=1)],
        attrs={"axis": 1},
        num_outputs=1,
    )
    picked = trace.apply("squeeze", gather_elements(picked_node), axis=[1])
    loss = trace.apply("negative", picked)
    if ignored is not None:
        loss = trace.apply("where", ignored, const(0), loss)
    weight = None
    if node.input(2) is not None:
        weight = trace.apply("take", node.tensor(2), index, axis=0)
        if ignored is not None:
            weight = trace.apply("where", ignored, const(0), weight)
        loss = trace.apply("multiply", loss, weight)
    elif ignored is not None:
        weight = trace.apply("cast", trace.apply("logical_not", ignored), dtype=dtype)
    if reduction == "none":
        return loss
    total = trace.apply("sum", loss, axis=None)
    if reduction == "sum":
        return total
    if weight is None:
        return trace.apply("mean", loss, axis=None)
    return trace.apply("divide", total, trace.apply("sum", weight, axis=None))


@converter("NegativeLogLikelihoodLoss")
def negative_log_likelihood_loss(node: Node) -> Any:
    """``-input[n, target, d..] * weight[target]``, reduced (module docstring)."""
    dtype, reduction = _check(node, "input")
    return _nll(node, node.tensor(0), dtype, reduction)


@converter("SoftmaxCrossEntropyLoss")
def softmax_cross_entropy_loss(node: Node) -> Any:
    """The NLL loss of ``log_softmax(scores, axis=1)``; that is the optional ``log_prob``."""
    dtype, reduction = _check(node, "scores")
    log_prob = trace.apply("nn.log_softmax", node.tensor(0), axis=1)
    loss = _nll(node, log_prob, dtype, reduction)
    return [loss, log_prob if node.wants(1) else None][: max(node.num_outputs, 1)]
