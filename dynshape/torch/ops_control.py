"""Higher-order ops: ``torch.cond`` as an ``if`` (``ds.cond``) and ``while_loop`` as a
``ds.while_loop``, each branch or body a subgraph converted in the scope of the enclosing
values (a loop's additional inputs are captured by the builder's loop). A predicate on sizes
(``x.shape[0] > 4``, a ``SymBool``) that the ranges decide converts one branch only; an
undecided one is computed at run time from the input shapes."""

from __future__ import annotations

from typing import Any

import sympy

import ir
from dynshape.builder import Value, trace
from dynshape.builder.control import cond as build_cond
from dynshape.builder.control import while_loop as build_while_loop

from .registry import Call, NodeError, Unsupported, converter

_OPS = {"==": "equal", "!=": "not_equal", ">": "greater", ">=": "greater_equal",
        "<": "less", "<=": "less_equal"}  # fmt: skip


def predicate(call: Call, pred: Any) -> bool | Value:
    """``pred`` as a bool (decided at import) or a 0-d bool tensor."""
    if isinstance(pred, bool):
        return pred
    if isinstance(pred, Value):
        if pred.dtype != "bool":
            pred = trace.apply("not_equal", pred, trace.constant(0, pred.dtype))
        if pred.ndim:
            pred = trace.apply("reshape", pred, newshape=[])
        out: Value = pred
        return out
    expr = getattr(getattr(pred, "node", None), "expr", None)
    if expr is sympy.true or expr is sympy.false:
        return bool(expr)
    if not isinstance(expr, sympy.core.relational.Relational) or expr.rel_op not in _OPS:
        raise Unsupported(f"a predicate {pred!r} (a tensor or a relation of sizes)")
    symbols = call.importer.symbols
    lhs, rhs = symbols.expr(expr.lhs), symbols.expr(expr.rhs)
    try:
        verdict = ir.compare(lhs, expr.rel_op, rhs, symbols.ranges)
    except (ir.IRError, TypeError):
        verdict = None
    if verdict is not None:
        return verdict
    a, b = call.scalar(lhs, "int64"), call.scalar(rhs, "int64")
    computed: Value = trace.apply(_OPS[expr.rel_op], a, b)
    return computed


@converter("higher_order.cond")
def cond(call: Call) -> Any:
    """``cond(pred, true_fn, false_fn, operands)``: its results as a tuple."""
    args = list(call.args.values())
    if len(args) != 4:
        raise NodeError(f"cond takes 4 arguments, got {len(args)}")
    pred, then_graph, else_graph, operands = args
    operands = list(operands)
    chosen = predicate(call, pred)
    subgraph = call.importer.subgraph
    if isinstance(chosen, bool):
        return tuple(subgraph(then_graph if chosen else else_graph, operands))

    def branch(graph: Any) -> Any:
        results = subgraph(graph, operands)
        return results[0] if len(results) == 1 else tuple(results)

    out = build_cond(chosen, lambda: branch(then_graph), lambda: branch(else_graph))
    return tuple(out) if isinstance(out, (tuple, list)) else (out,)


@converter("higher_order.while_loop")
def while_loop(call: Call) -> Any:
    """``while_loop(cond_fn, body_fn, carried, additional)``: the final carried values."""
    args = list(call.args.values())
    if len(args) != 4:
        raise NodeError(f"while_loop takes 4 arguments, got {len(args)}")
    cond_graph, body_graph, carried, additional = args
    carried, additional = list(carried), list(additional)
    if not carried or not all(isinstance(v, Value) for v in carried):
        raise Unsupported("a while_loop carrying values that are not tensors")
    subgraph = call.importer.subgraph

    def cond_fn(*values: Any) -> Any:
        (result,) = subgraph(cond_graph, [*values, *additional])
        chosen = predicate(call, result)
        if isinstance(chosen, bool):
            raise Unsupported("a while_loop whose condition does not depend on its values")
        return chosen

    def body_fn(*values: Any) -> Any:
        return tuple(subgraph(body_graph, [*values, *additional]))

    out = build_while_loop(cond_fn, body_fn, tuple(carried))
    return tuple(out) if isinstance(out, (tuple, list)) else (out,)
