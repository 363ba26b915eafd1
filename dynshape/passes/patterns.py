"""What the rewriting passes share: small matchers (a call of a named op, a node's only use, a
node's tensor type, the value of a scalar constant), the rewriter that replaces matched calls
and keeps every other rebuilt node's type, and the driver of passes that replace chains of
calls (``rewrite_chains``)."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

import ir
from ir import Call, Constant, Expr, Function, If, Let, Module, TensorType, Tuple, TupleGetItem

from ..analysis.dataflow import Use, UseGraph, use_graph


def call_of(node: Expr, *names: str) -> Call | None:
    """``node`` when it is a call of one of the ops ``names``, else None."""
    if isinstance(node, Call) and node.op is not None and node.op.name in names:
        return node
    return None


def only_use(node: Expr, parent: Expr, graph: UseGraph) -> bool:
    """Whether ``node``'s one use is as an operand of ``parent``."""
    uses = graph.uses.get(node, [])
    return len(uses) == 1 and uses[0][0] is parent and uses[0][1] is Use.OPERAND


def tensor_type(node: Expr) -> TensorType | None:
    """``node``'s type when it is a tensor, else None."""
    ty = node.ty
    return ty if isinstance(ty, TensorType) else None


def scalar_value(node: Expr, dtype: str) -> float | None:
    """The value of a finite 0-d constant of ``dtype``, else None."""
    if not isinstance(node, Constant) or node.value.ndim != 0 or node.value.dtype.name != dtype:
        return None
    value = float(node.value)
    return value if math.isfinite(value) else None


class TypedRewriter(ir.ExprMutator):
    """Replaces each call for which ``replacement`` gives a node (built untyped: the pass runs
    ``CompleteTypes`` after); every other rebuilt node keeps its original's type and facts."""

    def replacement(self, call: Call) -> Expr | None:
        """The node standing for ``call``, or None to keep it (rebuilt over its operands)."""
        raise NotImplementedError

    def _typed(self, old: Expr, new: Expr) -> Expr:
        if new is old:
            return new
        return dataclasses.replace(new, ty=old.ty, facts=old.facts)

    def visit_call(self, call: Call) -> Expr:
        new = self.replacement(call)
        if new is None:
            return self._typed(call, super().visit_call(call))
        return new

    def visit_tuple(self, tup: Tuple) -> Expr:
        return self._typed(tup, super().visit_tuple(tup))

    def visit_tuple_getitem(self, item: TupleGetItem) -> Expr:
        return self._typed(item, super().visit_tuple_getitem(item))

    def visit_if(self, node: If) -> Expr:
        return self._typed(node, super().visit_if(node))

    def visit_function(self, fn: Function) -> Expr:
        if fn.is_primitive:
            return fn
        return self._typed(fn, super().visit_function(fn))


#: ``find(node, graph, fn)``: the chain ending at ``node`` of ``fn`` (whose uses are ``graph``),
#: as ``(the node it replaces, what the rewriter needs)``, or None.
Finder = Callable[[Expr, UseGraph, Function], "tuple[Call, Any] | None"]

#: ``build(rewriter, call, match)``: the node standing for the matched ``call`` (its operands
#: visited by ``rewriter``, so that chains nested in them are replaced too).
Builder = Callable[["ChainRewriter", Call, Any], Expr]


class ChainRewriter(TypedRewriter):
    """Replaces each call of ``matches`` by what ``build`` makes of its match."""

    def __init__(self, matches: dict[Call, Any], build: Builder) -> None:
        super().__init__()
        self.matches, self.build = matches, build

    def replacement(self, call: Call) -> Expr | None:
        m = self.matches.get(call)
        return None if m is None else self.build(self, call, m)


def rewrite_chains(module: Module, find: Finder, build: Builder) -> tuple[Module, int]:
    """Every chain ``find`` matches in the graph-form functions of ``module`` (functions with
    ``let``s and primitive functions are left as they are), replaced by what ``build`` makes
    of it; returns the new module (``module`` itself when nothing matched: the caller types
    the new calls) and how many chains were replaced."""
    count = 0
    out: dict[str, Function] = {}
    for name, fn in module.items():
        out[name] = fn
        if fn.is_primitive:
            continue
        graph = use_graph(fn.body)
        if any(isinstance(node, Let) for node in graph.order):
            continue
        matches: dict[Call, Any] = {}
        for node in graph.order:
            found = find(node, graph, fn)
            if found is not None:
                matches[found[0]] = found[1]
        if matches:
            new = ChainRewriter(matches, build).visit(fn)
            assert isinstance(new, Function)
            out[name] = new
            count += len(matches)
    return (Module(out) if count else module), count
