"""Control flow: ``If`` and ``Loop``, whose branches and bodies are subgraphs reading the
enclosing graph's values.

A condition known at import (exported models test shapes: ``If(Equal(Shape(x)[0], 1))``)
picks its branch there, and only that branch is converted. Otherwise both branches are
converted, each in its scope, and become an ``if`` (``ds.cond``): the condition is a one-element
bool tensor, the branches' results must have the same structure and dtypes.
"""

from __future__ import annotations

from typing import Any

import numpy as np

import ir
from dynshape.builder import control, trace

from ..known import Known
from ..registry import Node, NodeError, converter
from .operands import value_shape


@converter("If")
def if_(node: Node) -> Any:
    then_graph, else_graph = node.attr("then_branch"), node.attr("else_branch")
    if then_graph is None or else_graph is None or node.subgraph is None:
        raise NodeError("If needs then_branch and else_branch")
    cond = node.input(0)
    if isinstance(cond, Known) and cond.numeric() is not None:
        if cond.array.size != 1:
            raise NodeError(f"the condition must hold one value, got shape {list(cond.shape)}")
        chosen = then_graph if bool(np.asarray(cond.array).reshape(-1)[0]) else else_graph
        return node.subgraph(chosen)
    pred = node.tensor(0)
    if value_shape(pred) != ():
        pred = trace.apply("reshape", pred, newshape=[])
    if pred.type.dtype != "bool":
        raise NodeError(f"the condition must be bool, got {pred.type.dtype}")
    run = node.subgraph

    def branch(graph: Any) -> Any:
        outs = [node.materialize(o) if isinstance(o, Known) else o for o in run(graph)]
        return outs[0] if len(outs) == 1 else tuple(outs)

    result = control.cond(pred, lambda: branch(then_graph), lambda: branch(else_graph))
    return list(result) if isinstance(result, tuple) else [result]


def _append(acc: Any, one: Any, first: Any) -> Any:
    """``acc`` with ``one`` stacked after it; when ``first`` (a scalar bool) is given and
    true, ``one`` alone (``acc`` is the empty start, whose other dims may differ)."""
    row = trace.apply("expand_dims", one, axis=0)
    if first is None:
        return trace.apply("concatenate", [acc, row], axis=0)
    return control.cond(first, lambda: row, lambda: trace.apply("concatenate", [acc, row], axis=0))


def _scalar(node: Node, value: Any, dtype: str, what: str) -> Any:
    """``value`` (a one-element tensor or Known) as a 0-d run-time tensor of ``dtype``."""
    if isinstance(value, Known):
        if value.shape and int(np.prod([int(d) for d in value.shape])) != 1:
            raise NodeError(f"{what} must hold one value, got shape {list(value.shape)}")
        value = node.materialize(value)
    if value_shape(value) != ():
        if value_shape(value) != (1,):
            raise NodeError(f"{what} must hold one value, got shape {list(value_shape(value))}")
        value = trace.apply("reshape", value, newshape=[])
    if value.type.dtype != dtype:
        raise NodeError(f"{what} must be {dtype}, got {value.type.dtype}")
    return value


@converter("Loop")
def loop(node: Node) -> Any:
    body, run = node.attr("body"), node.subgraph
    if body is None or run is None:
        raise NodeError("Loop needs a body")
    initial = [node.materialize(v) if isinstance(v, Known) else v for v in node.inputs[2:]]
    if any(v is None for v in initial):
        raise NodeError("a loop-carried initial value is missing (an empty input name)")
    n = len(initial)
    if len(body.input) != n + 2:
        raise NodeError(
            f"the body takes {len(body.input)} inputs; with {n} loop-carried value(s) it must "
            f"take {n + 2} (iteration number, condition, the carried values)"
        )
    scans = len(body.output) - 1 - n
    if scans < 0:
        raise NodeError(
            f"the body returns {len(body.output)} outputs; with {n} loop-carried value(s) it "
            f"must return at least {n + 1} (condition, the carried values, scan outputs)"
        )
    trip = node.input(0)
    limit = None if trip is None else _scalar(node, trip, "int64", "the trip count M")
    cond = node.input(1)
    going = (
        trace.constant(np.array(True), "bool")
        if cond is None
        else _scalar(node, cond, "bool", "the condition")
    )
    zero = trace.constant(np.array(0, dtype=np.int64), "int64")

    def step(i: Any, keep: Any, *values: Any) -> list[Any]:
        outs = [
            node.materialize(o) if isinstance(o, Known) else o
            for o in run(body, [i, keep, *values])
        ]
        if any(o is None for o in outs):
            raise NodeError("the body leaves an output undefined")
        return [_scalar(node, outs[0], "bool", "the body's condition output"), *outs[1:]]

    types = [zero.type, going.type, *(v.type for v in initial)]
    probe = control.loop_body_types(step, types)[1 + n :]
    starts, unsettled = [], []
    for k, ty in enumerate(probe):
        if not isinstance(ty, ir.TensorType):
            raise NodeError(f"scan output {k} is not a tensor")
        inside = [any(ir.is_anonymous(s) for s in ir.free_symbols(d)) for d in ty.shape]
        # a dim known only inside the loop is 0 in the empty start, which the first
        # iteration replaces instead of appending to it
        shape = [0, *(0 if unknown else d for d, unknown in zip(ty.shape, inside, strict=True))]
        starts.append(trace.apply("zeros", shape=shape, dtype=ty.dtype))
        unsettled.append(any(inside))

    def cond_fn(i: Any, keep: Any, *rest: Any) -> Any:
        if limit is None:
            return keep
        return trace.apply("logical_and", trace.apply("less", i, limit), keep)

    def body_fn(i: Any, keep: Any, *rest: Any) -> tuple[Any, ...]:
        outs = step(i, keep, *rest[:n])
        first = trace.apply("equal", i, zero)
        grown = [
            _append(acc, one, first if replace else None)
            for acc, one, replace in zip(rest[n:], outs[1 + n :], unsettled, strict=True)
        ]
        one_more = trace.apply("add", i, trace.constant(np.array(1, dtype=np.int64), "int64"))
        return (one_more, outs[0], *outs[1 : 1 + n], *grown)

    final = control.while_loop(cond_fn, body_fn, (zero, going, *initial, *starts))
    return list(final[2:])
