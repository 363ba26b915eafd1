"""Control flow: ``If``, whose branches are subgraphs reading the enclosing graph's values.

A condition known at import (exported models test shapes: ``If(Equal(Shape(x)[0], 1))``)
picks its branch there, and only that branch is converted. Otherwise both branches are
converted, each in its scope, and become an ``if`` (``ds.cond``): the condition is a one-element
bool tensor, the branches' results must have the same structure and dtypes.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from dynshape.builder import control, trace

from ..known import Known
from ..registry import Node, NodeError, converter
from .shape import _shape


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
    if _shape(pred) != ():
        pred = trace.apply("reshape", pred, newshape=[])
    if pred.type.dtype != "bool":
        raise NodeError(f"the condition must be bool, got {pred.type.dtype}")
    run = node.subgraph

    def branch(graph: Any) -> Any:
        outs = [node.materialize(o) if isinstance(o, Known) else o for o in run(graph)]
        return outs[0] if len(outs) == 1 else tuple(outs)

    result = control.cond(pred, lambda: branch(then_graph), lambda: branch(else_graph))
    return list(result) if isinstance(result, tuple) else [result]
