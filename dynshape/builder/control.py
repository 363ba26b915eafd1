"""Control flow: ``ds.cond`` builds an ``if``; ``ds.while_loop`` builds a recursive global.

``cond(pred, then_fn, else_fn)`` calls both Python functions (each returns a Value or a tuple
of Values) and joins their types as ``infer_types`` does: equal dims stay, others become ``?``.

``while_loop(cond_fn, body_fn, init)`` becomes

    def @loop(%v0: T0, ..., %c0: C0, ...) -> (T0', ...) {
      if (cond(%v0, ...)) { @loop(body(%v0, ...), %c0, ...) } else { (%v0, ...) }
    }

called with ``init`` and the captured values ``%c*``: a global function cannot see its caller's
values, so every value the two functions use but did not make (weights, an outer input) is
passed along unchanged. Loop-carried dims the body changes (a growing concatenation) are
``?``: the body is traced with the init types, every dim the body does not provably keep is
made a fresh ``?`` in the parameter types, and the trace is repeated until no more dims change.
A result dim that changed is a different ``?`` from the parameter's (it is the final value's).

Until ``ds.build`` the loop lives in the graph it is part of, not in a table: the returned
Value is a call of the loop's ``Function`` itself, whose body calls itself through a
``GlobalVar`` (``loop_self``). ``build`` lifts every such function it reaches into a global and
renames the calls. So a loop belongs to the values that use it: two programs built at once (in
two threads too) see only their own loops, and a loop nobody uses any more is freed with them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import sympy

import ir
from ir import Constant, Expr, Function, GlobalVar, TensorType, TupleType, Type, Var

from ..inference.symbolic_context import SymbolicContext
from ..inference.type_relations import instantiate_call, join
from .location import errors_at, fail, user_span
from .trace import as_operand, made, pop_scope, push_scope, type_of, wrap
from .value import Value


def cond(pred: Any, then_fn: Callable[[], Any], else_fn: Callable[[], Any]) -> Any:
    """``then_fn()`` if ``pred`` (a scalar bool) is true, else ``else_fn()``; both branches
    return a Value or a tuple of Values of the same structure."""
    span = user_span()
    if not isinstance(pred, Value) or pred.type != TensorType((), "bool"):
        got = pred.type if isinstance(pred, Value) else type(pred).__name__
        raise fail(f"ds.cond's predicate must be a scalar bool tensor, got {got}")
    then_expr, then_ty = _pack(then_fn(), "then_fn")
    else_expr, else_ty = _pack(else_fn(), "else_fn")
    with errors_at(span):
        ty = join(then_ty, else_ty, "the branches of ds.cond")
    return wrap(ir.If(pred.expr, then_expr, else_expr, span=span), ty)


def _pack(result: Any, what: str) -> tuple[Expr, Type]:
    """A branch's result as one expression and its type."""
    if isinstance(result, Value):
        return result.expr, result.type
    if isinstance(result, (tuple, list)) and all(isinstance(v, Value) for v in result):
        node = made(ir.Tuple(tuple(v.expr for v in result), span=user_span()))
        return node, TupleType(tuple(v.type for v in result))
    raise fail(f"{what} must return a Value or a tuple of Values, got {type(result).__name__}")


def while_loop(cond_fn: Callable[..., Any], body_fn: Callable[..., Any], init: Any) -> Any:
    """Run ``body_fn`` while ``cond_fn`` is true, starting from ``init`` (a Value or a tuple of
    them); both functions take the loop values as arguments. Returns the final values (a Value
    if ``init`` is one, else a tuple)."""
    span = user_span()
    single = not isinstance(init, (tuple, list))
    values = [as_operand(v, False, None, span) for v in ([init] if single else init)]
    types = [_entry_type(v.type) for v in values]
    widened: set[tuple[int, int]] = set()
    for _ in range(1 + sum(t.rank for t in types)):
        traced = _trace(cond_fn, body_fn, types, single, span)
        grown = _changed_dims(types, traced.out_types, widened)
        if not grown:
            break
        widened |= grown
        types = [
            TensorType(
                tuple(ir.fresh("loop") if (i, a) in grown else d for a, d in enumerate(t.shape)),
                t.dtype,
            )
            for i, t in enumerate(types)
        ]
    ret_types = [
        TensorType(
            tuple(ir.fresh("out") if (i, a) in widened else d for a, d in enumerate(t.shape)),
            t.dtype,
        )
        for i, t in enumerate(types)
    ]
    # The name is provisional: ``build`` names the loops of a program ``loop``, ``loop1``, ...
    self_ref = GlobalVar("loop", span=span)
    captured_vars = [v for _, v in traced.captured]
    recurse = ir.Call(self_ref, (*traced.body, *captured_vars), span=span)
    params = traced.params
    done: Expr = params[0] if single else ir.Tuple(tuple(params), span=span)
    ret: Type = ret_types[0] if single else TupleType(tuple(ret_types))
    definition = Function(
        (*params, *captured_vars),
        ir.If(traced.cond, recurse, done, span=span),
        ret,
        span=span,
    )
    outer = [v.expr for v in values] + [node for node, _ in traced.captured]
    sig = ir.FuncType(tuple(p.type_annotation for p in (*params, *captured_vars)), ret)  # type: ignore[misc]
    arg_types = [v.type for v in values] + [type_of(node) for node, _ in traced.captured]
    names = [p.name_hint for p in (*params, *captured_vars)]
    with errors_at(span):
        ty = instantiate_call(sig, arg_types, SymbolicContext(), "ds.while_loop", names)
    return wrap(ir.Call(made(definition), tuple(outer), span=span), ty)


def loop_body_types(body_fn: Callable[..., Any], types: Sequence[TensorType]) -> list[Type]:
    """The types of what ``body_fn`` returns when traced over loop values of ``types`` (as
    ``while_loop`` would trace it), leaving nothing behind: a frontend reads them before it
    builds the loop (an ONNX ``Loop``'s scan outputs start as empty tensors of their shape)."""
    scope = push_scope()
    try:
        entry = [_entry_type(t) for t in types]
        params = [Var(f"v{i}", t) for i, t in enumerate(entry)]
        outs = body_fn(*[wrap(made(p), t) for p, t in zip(params, entry, strict=True)])
    finally:
        pop_scope(scope)
    outs = [outs] if isinstance(outs, Value) else list(outs)
    if not all(isinstance(v, Value) for v in outs):
        raise fail("the loop body must return Values")
    return [v.type for v in outs]


def loop_self(fn: Function) -> GlobalVar | None:
    """The global through which ``fn`` calls itself, if ``fn`` is a loop ``while_loop`` made
    (its body is ``if (cond) { @self(...) } else { ... }``); None for any other function."""
    body = fn.body
    if isinstance(body, ir.If) and isinstance(body.then_branch, ir.Call):
        callee = body.then_branch.callee
        if isinstance(callee, GlobalVar):
            return callee
    return None


def _entry_type(ty: TensorType) -> TensorType:
    """A loop parameter's type: dims that are not ints or plain symbols become ``?`` (a
    parameter dim like ``2*n`` could not be bound at the loop's entry)."""
    dims = [d if isinstance(d, (int, sympy.Symbol)) else ir.fresh("loop") for d in ty.shape]
    return TensorType(tuple(dims), ty.dtype)


def _changed_dims(
    types: Sequence[TensorType], outs: Sequence[TensorType], widened: set[tuple[int, int]]
) -> set[tuple[int, int]]:
    """The (value, axis) positions whose dim the body does not provably keep."""
    grown = set()
    for i, (t, o) in enumerate(zip(types, outs, strict=True)):
        if t.dtype != o.dtype or t.rank != o.rank:
            raise fail(
                f"ds.while_loop's body changes loop value {i} from {t} to {o}: the dtype and "
                "rank of a loop value must stay the same"
            )
        for a, (d, e) in enumerate(zip(t.shape, o.shape, strict=True)):
            if (i, a) not in widened and not ir.known_equal(d, e):
                grown.add((i, a))
    return grown


class _Traced:
    """One trace of a loop's condition and body over parameters of given types."""

    def __init__(self) -> None:
        self.params: list[Var] = []
        self.cond: Expr = ir.Tuple(())
        self.body: list[Expr] = []
        self.out_types: list[TensorType] = []
        self.captured: list[tuple[Expr, Var]] = []
        """Values made outside the loop, each with the parameter that passes it in."""


def _trace(
    cond_fn: Callable[..., Any],
    body_fn: Callable[..., Any],
    types: Sequence[TensorType],
    single: bool,
    span: ir.Span | None,
) -> _Traced:
    traced = _Traced()
    scope = push_scope()
    try:
        traced.params = [Var(f"v{i}", t, span=span) for i, t in enumerate(types)]
        args = [wrap(made(p), t) for p, t in zip(traced.params, types, strict=True)]
        c = cond_fn(*args)
        if not isinstance(c, Value) or c.type != TensorType((), "bool"):
            got = c.type if isinstance(c, Value) else type(c).__name__
            raise fail(f"ds.while_loop's cond_fn must return a scalar bool tensor, got {got}")
        out = body_fn(*args)
        outs = [out] if single and isinstance(out, Value) else out
        if not isinstance(outs, (tuple, list)) or len(outs) != len(types):
            raise fail(f"ds.while_loop's body_fn must return {len(types)} value(s) like init")
        if not all(isinstance(v, Value) for v in outs):
            raise fail("ds.while_loop's body_fn must return Values")
    finally:
        pop_scope(scope)
    lift = _Lift(scope.made)
    traced.cond = lift.visit(c.expr)
    traced.body = [lift.visit(v.expr) for v in outs]
    traced.out_types = [v.type for v in outs]
    traced.captured = list(lift.captured.items())
    return traced


class _Lift(ir.ExprMutator):
    """Replaces each node made outside the loop (not in ``made``) by a new parameter.

    An inner loop's function is left as it is: it is closed (what it captured is passed in as
    arguments, which are lifted like any other operand)."""

    def __init__(self, made: set[Expr]) -> None:
        super().__init__()
        self.made = made
        self.captured: dict[Expr, Var] = {}

    def visit(self, expr: Expr) -> Expr:
        if expr in self.made or isinstance(expr, (Constant, GlobalVar)):
            return super().visit(expr)
        if expr not in self.captured:
            ty = type_of(expr)
            if isinstance(ty, TensorType):
                ty = _entry_type(ty)
            self.captured[expr] = Var(f"c{len(self.captured)}", ty, span=expr.span)
        return self.captured[expr]

    def visit_function(self, fn: Function) -> Expr:
        return fn
