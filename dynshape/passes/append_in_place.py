"""Concatenations onto a parameter that leave the function become ``append``: grown in place.

Assumes: a typed module in graph form (``InferTypes`` output). Guarantees: a typed module in
which every ``concatenate((p, y), axis)`` whose first field ``p`` is a parameter of the
enclosing function, whose axis is a symbolic dim of ``p``, and whose result *escapes* (it is the
function's result or part of it, or an argument of the function's call of itself: a loop's next
iteration)
is ``append(p, y, axis=a)`` with ``a`` non-negative. ``manifest_alloc`` makes that
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
from .base import ModulePass
from .infer_types import InferTypes


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
            out[name] = dataclasses.replace(fn, body=_Rewriter(found).visit(fn.body))
            changed = True
        # The rewriter builds untyped nodes: re-typed as merge_matmuls does.
        return InferTypes().run(Module(out)) if changed else module


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
    """Replaces each found concatenation by an ``append`` of its two fields."""

    def __init__(self, found: dict[Call, int]) -> None:
        super().__init__()
        self.found = found

    def visit_call(self, node: Call) -> Expr:
        axis = self.found.get(node)
        if axis is None:
            return super().visit_call(node)
        data = node.args[0]
        assert isinstance(data, Tuple)
        x, y = (self.visit(f) for f in data.fields)
        return ir.call("append", x, y, axis=axis, span=node.span)
