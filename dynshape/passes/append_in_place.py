"""Concatenations onto a parameter that leave the function become ``append``: grown in place.

Assumes: a typed module in graph form (``InferTypes`` output). Guarantees: a typed module (the
new calls typed by inference's rule) in which every ``concatenate((p, y), axis)`` whose first
field ``p`` is a parameter of the enclosing function, whose axis is a symbolic dim of ``p``,
and whose result *escapes* (it is the function's result or part of it, or an argument of the
function's call of itself: a loop's next iteration) is ``append(p, y, axis=a)`` with ``a``
non-negative. ``manifest_alloc`` makes that
``memory.append`` (no allocation in the IR), which the VM runs by writing ``y`` past ``p``'s
end when ``p``'s storage has room there, and otherwise into a new storage with room to grow
(design/memory.md, "Appends").

Why these three conditions. A KV cache is the case: ``present = concatenate((past, new))`` is
returned, and the caller feeds it back as the next call's ``past``; a loop that grows an
accumulator (``acc = concatenate((acc, x))`` passed to the next iteration's call) is the same
shape of program. A parameter's storage is the caller's, so the function never frees or reuses
it, and writing *past its end* changes no element any earlier view shows; a result that does
not escape dies in the call, where a plain concatenation into planned memory costs less than a
storage with room to grow; a static axis cannot grow from call to call.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import ir
from ir import (
    Call,
    Expr,
    Function,
    GlobalVar,
    If,
    Let,
    Module,
    TensorType,
    Tuple,
    TupleGetItem,
    Var,
)

from ..analysis.dataflow import use_graph
from ..inference.op_result import op_result_type
from ..inference.symbolic_context import SymbolicContext
from .base import ModulePass


class AppendInPlace(ModulePass):
    """Rewrite escaping concatenations onto a parameter as ``append`` (module docstring)."""

    name = "append_in_place"

    def run(self, module: Module) -> Module:
        out = {}
        changed = False
        for name, fn in module.items():
            found = {} if fn.is_primitive else _appends(fn, name)
            if not found:
                out[name] = fn
                continue
            out[name] = dataclasses.replace(fn, body=_Rewriter(found, fn.ranges).visit(fn.body))
            changed = True
        return Module(out) if changed else module


def _appends(fn: Function, name: str) -> dict[Call, int]:
    """The concatenations of ``fn`` to rewrite, each with its non-negative axis."""
    params = set(fn.params)
    escaping = _escaping(fn, name)
    found: dict[Call, int] = {}
    for node in use_graph(fn.body).order:
        if not isinstance(node, Call) or node.op is None or node.op.name != "concatenate":
            continue
        data = node.args[0]
        if not isinstance(data, Tuple) or len(data.fields) != 2 or node not in escaping:
            continue
        first = data.fields[0]
        ty = first.ty
        if not (isinstance(first, Var) and first in params and isinstance(ty, TensorType)):
            continue
        rank = len(ty.shape)
        axis = int(node.attrs["axis"])
        axis = axis + rank if axis < 0 else axis
        if 0 <= axis < rank and not isinstance(ty.shape[axis], int):
            found[node] = axis
    return found


def _escaping(fn: Function, name: str) -> set[Expr]:
    """The nodes of ``fn``'s body whose value may leave the call: its result (fields of a tuple
    result, branches of an ``if`` result, the value of a let whose variable leaves) and the
    arguments of its calls of itself (a loop passing a value to its next iteration). Arguments
    of other calls are not followed: whether the callee keeps them is its business, and a
    storage with room would cost twice the bytes for nothing when it does not."""
    bound = {n.var: n.value for n in use_graph(fn.body).order if isinstance(n, Let)}
    out: set[Expr] = set()
    work: list[Expr] = [fn.body]
    while work:
        node = work.pop()
        if node in out:
            continue
        out.add(node)
        if isinstance(node, Tuple):
            work.extend(node.fields)
        elif isinstance(node, If):
            work.extend((node.then_branch, node.else_branch))
        elif isinstance(node, Let):
            work.append(node.body)
        elif isinstance(node, Var) and node in bound:
            work.append(bound[node])
        elif isinstance(node, TupleGetItem):
            work.append(node.tuple_value)
        elif isinstance(node, Call) and _calls(node, name):
            work.extend(node.args)
    return out


def _calls(node: Call, name: str) -> bool:
    return isinstance(node.callee, GlobalVar) and node.callee.name == name


class _Rewriter(ir.ExprMutator):
    """Replaces each found concatenation by an ``append`` of its two fields.

    Typed as it builds: an ``append`` is typed by inference's rule for that one call (its
    concatenation's type), so every node rebuilt above it keeps its own type and facts, and
    the pipeline infers types once (``tests/e2e/test_type_completion.py``)."""

    def __init__(
        self, found: dict[Call, int], ranges: Mapping[Any, tuple[int, int | None]]
    ) -> None:
        super().__init__()
        self.found = found
        self.ranges = ranges

    def visit(self, expr: Expr) -> Expr:
        new = super().visit(expr)
        if new is not expr and new.ty is None:
            object.__setattr__(new, "ty", expr.ty)  # a new node nothing shares yet
            object.__setattr__(new, "facts", expr.facts)
        return new

    def visit_call(self, node: Call) -> Expr:
        axis = self.found.get(node)
        if axis is None:
            return super().visit_call(node)
        data = node.args[0]
        assert isinstance(data, Tuple)
        x, y = (self.visit(f) for f in data.fields)
        call = ir.call("append", x, y, axis=axis, span=node.span)
        # Typed by inference's own rule, with the facts inference would defer (the same
        # agreement of dims as the concatenation's, stated as append's).
        ctx = SymbolicContext(self.ranges)
        assert call.op is not None and x.ty is not None and y.ty is not None
        ty = op_result_type(ctx, call.op, call.attrs, call.args, [x.ty, y.ty])
        object.__setattr__(call, "ty", ty)  # a new node nothing shares yet
        object.__setattr__(call, "facts", tuple(ctx.deferred))
        return call
