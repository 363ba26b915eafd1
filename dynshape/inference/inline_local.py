"""Inlining of local function values, done by type inference (``InferTypes``).

A local function (``%f = fn (%a: Tensor[(k,), float32]) { add(%a, %a) }``, or ``let %f = fn
...``) that is only ever called is replaced at each call by its body, its parameters let-bound
to the arguments: ``%f(%x)`` with ``%x: Tensor[(n,), float32]`` becomes ``let %a: Tensor[(n,),
float32] = %x; add(%a, %a)``. Two steps:

1. ``calls_in_place`` (before inference, untyped): a call through the variable of a let-bound
   local function becomes a call of the function itself (``fn (...) {...}(%x)``, what the text
   ``%f = fn ...; %f(%x)`` parses to), and the let goes. A local function used as a value
   (returned, stored in a tuple, passed as an argument) is refused with a ``CompileError``
   naming it: the VM has no closures. So is a call with the wrong number of arguments.
2. ``inline_call`` (during inference, at each such call, once its arguments are typed): the
   body, with fresh variables (a variable is bound in one place only), as lets of the
   parameters around it. The function's *own* symbols, those of its parameter types that are
   not the global's parameter symbols, are bound by the call like a global's: to the
   argument's dim where a parameter axis is exactly the symbol (first occurrence), in every
   annotation of the copy. So ``%f`` may be called at several shapes, and the global's symbols
   (``fn (%a: Tensor[(n,), float32])`` inside ``def @main(%x: Tensor[(n,), ...])``) keep
   meaning the global's. The parameter annotations stay on the lets, so each argument is
   checked against its annotation as a let's value is; a declared result type becomes an
   annotated let around the body.

Why inline at all: afterwards the module has only calls of ops, of globals and of primitives,
which is all fusion, ``manifest_alloc`` and the lowering handle. Primitive functions
(``Primitive=1``, from the ``fused`` stage on) are closed and left alone. Nodes of a body that
use no parameter stay shared between its copies, which the IR's DAG semantics allows (values
are pure). Symbol ranges declared on a local function are not kept (inference reads only the
global's ranges, as it did before inlining).
"""

from __future__ import annotations

from collections.abc import Sequence

import sympy

import ir
from ir import Call, Expr, Function, Let, Module, Type, Var
from ir.text import function_to_text

from ..errors import CompileError
from .type_relations import substitute_type


def is_local_function(expr: object) -> bool:
    """True for a function value that is not a primitive (the functions inlined here)."""
    return isinstance(expr, Function) and not expr.is_primitive


# ---- step 1: calls through let-bound variables become calls in place ------------------------
def calls_in_place(module: Module) -> Module:
    """``module`` with every call of a let-bound local function made a call of the function
    itself and the let dropped; local functions used as values refused (module docstring).

    The same module object when it has no local function (the common case, and every stage
    after ``types``), so running this before each inference costs one walk.
    """
    changed = {}
    for name, fn in module.items():
        if _has_local_function(fn.body):
            changed[name] = _calls_in_place(name, fn)
    if not changed:
        return module
    return Module({name: changed.get(name, fn) for name, fn in module.items()})


class _Finder(ir.ExprVisitor):
    def __init__(self) -> None:
        super().__init__()
        self.found = False

    def visit_function(self, fn: Function) -> None:
        if is_local_function(fn):
            self.found = True  # a primitive is closed and holds op calls only: not entered


def _has_local_function(body: Expr) -> bool:
    finder = _Finder()
    finder.visit(body)
    return finder.found


def _calls_in_place(name: str, fn: Function) -> Function:
    body = _InPlace(name, fn).visit(fn.body)
    rewritten = Function(fn.params, body, fn.ret_type, fn.attrs, fn.ranges, span=fn.span)
    _refuse_escapes(name, rewritten)
    return rewritten


class _InPlace(ir.ExprMutator):
    """Rebuilds one global's body with calls through local-function variables made in place."""

    def __init__(self, name: str, fn: Function) -> None:
        super().__init__()
        self.name = name
        self.fn = fn
        self.local: dict[Var, Function] = {}
        """let-bound local functions (their bodies already rewritten), by variable."""
        self.escaped: set[Var] = set()
        """Variables of ``local`` that occur other than as a callee."""

    def error(self, message: str, node: Expr) -> CompileError:
        listing = function_to_text(self.name, self.fn, show_types=False, notes={node: "error"})
        return CompileError(f"in @{self.name}: {message}", node.span, listing)

    def visit_var(self, var: Var) -> Expr:
        if var in self.local:
            self.escaped.add(var)  # a callee position never visits the variable
        return var

    def visit_function(self, fn: Function) -> Expr:
        return fn if fn.is_primitive else super().visit_function(fn)

    def visit_let(self, let: Let) -> Expr:
        # Iterated along the chain, as ExprMutator.visit_let, for ANF chains of any length.
        lets, _ = ir.let_chain(let, self.memo.__contains__)
        chain: list[tuple[Let, Expr]] = []
        for node in lets:
            if node in self.memo:
                break
            value = self.visit(node.value)
            if isinstance(value, Function) and is_local_function(value):
                self.local[node.var] = value
            chain.append((node, value))
        body = self.visit(chain[-1][0].body)
        for old, value in reversed(chain):
            if old.var in self.local:
                if old.var in self.escaped:
                    what = f"the local function %{old.var.name_hint}"
                    raise self.error(_escape_message(what), old)
                # Every use was a call, now of the function itself: the binding is dead.
            elif value is old.value and body is old.body:
                body = old
            else:
                body = Let(old.var, value, body, span=old.span)
            self.memo[old] = body
        return body

    def visit_call(self, call: Call) -> Expr:
        callee = call.callee
        if isinstance(callee, Var) and callee in self.local:
            target, label = self.local[callee], f"the local function %{callee.name_hint}"
        elif isinstance(callee, Function) and is_local_function(callee):
            processed = self.visit(callee)
            assert isinstance(processed, Function)
            target, label = processed, "the local function"
        else:
            return super().visit_call(call)
        if len(call.args) != len(target.params):
            n = len(target.params)
            raise self.error(
                f"{label} takes {n} argument{'s' * (n != 1)}, got {len(call.args)}", call
            )
        args = tuple([self.visit(a) for a in call.args])  # a list: see ir/functor.py
        return Call(target, args, span=call.span)


class _EscapeFinder(ir.ExprVisitor):
    """Finds a local function that is not a callee."""

    def __init__(self) -> None:
        super().__init__()
        self.escape: Function | None = None

    def visit_call(self, call: Call) -> None:
        callee = call.callee
        if isinstance(callee, Function) and is_local_function(callee):
            self.visit(callee.body)  # called in place: not an escape (its body may hold one)
            for a in call.args:
                self.visit(a)
            return
        super().visit_call(call)

    def visit_function(self, fn: Function) -> None:
        if is_local_function(fn) and self.escape is None:
            self.escape = fn


def _refuse_escapes(name: str, fn: Function) -> None:
    """Raise for a local function of ``fn`` used as a value (one not called in place)."""
    finder = _EscapeFinder()
    finder.visit(fn.body)
    if finder.escape is not None:
        listing = function_to_text(name, fn, show_types=False, notes={finder.escape: "error"})
        message = _escape_message("a local function")
        raise CompileError(f"in @{name}: {message}", finder.escape.span, listing)


def _escape_message(what: str) -> str:
    return (
        f"{what} is used as a value (returned, stored in a tuple or passed as an argument); "
        "a local function can only be called (its calls are inlined): make it a global "
        "function, or call it where its value is needed"
    )


# ---- step 2: one call becomes the body ------------------------------------------------------
def inline_call(
    fn: Function, call: Call, arg_types: Sequence[Type], outer: frozenset[sympy.Basic]
) -> Expr:
    """The untyped expression that replaces ``call``, a call of the local function ``fn`` in
    place whose arguments have ``arg_types``: the parameters let-bound to the call's (untyped)
    arguments around a fresh copy of the body, ``fn``'s own symbols (not in ``outer``, the
    global's parameter symbols) bound to the arguments' dims (see the module docstring)."""
    copier = _FreshCopy(_own_binding(fn, arg_types, outer))
    params = [copier.fresh(p) for p in fn.params]
    body = copier.visit(fn.body)
    if fn.ret_type is not None:
        result = Var("result", copier.annotation(fn.ret_type), span=fn.span)
        body = Let(result, body, result, span=fn.span)
    for p, a in reversed(list(zip(params, call.args, strict=True))):
        body = Let(p, a, body, span=call.span)
    return body


def _own_binding(
    fn: Function, arg_types: Sequence[Type], outer: frozenset[sympy.Basic]
) -> dict[sympy.Basic, sympy.Expr]:
    """Each own symbol of ``fn`` -> the argument dim at its first plain occurrence in a
    parameter annotation. Structures that do not match are skipped: the let's annotation check
    reports them."""
    binding: dict[sympy.Basic, sympy.Expr] = {}
    for p, got in zip(fn.params, arg_types, strict=True):
        if p.type_annotation is None:
            continue
        want_leaves, got_leaves = ir.tensor_leaves(p.type_annotation), ir.tensor_leaves(got)
        if len(want_leaves) != len(got_leaves):
            continue
        for want, have in zip(want_leaves, got_leaves, strict=True):
            if want.rank != have.rank:
                continue
            for w, g in zip(want.shape, have.shape, strict=True):
                own = isinstance(w, sympy.Symbol) and not ir.dims.is_anonymous(w)
                if own and w not in outer and w not in binding:
                    binding[w] = ir.dims.as_expr(g)
    return binding


class _FreshCopy(ir.ExprMutator):
    """A copy of a function body in which every variable it binds is a new one and every
    annotation has the function's own symbols replaced by the call's dims."""

    def __init__(self, symbols: dict[sympy.Basic, sympy.Expr]) -> None:
        super().__init__()
        self.vars: dict[Var, Var] = {}
        self.symbols = symbols

    def annotation(self, ty: Type | None) -> Type | None:
        """``ty`` in the caller's terms."""
        return ty if ty is None or not self.symbols else substitute_type(ty, self.symbols)

    def fresh(self, var: Var) -> Var:
        """A new variable for ``var``, used for it in the copy from now on."""
        new = Var(var.name_hint, self.annotation(var.type_annotation), span=var.span)
        self.vars[var] = new
        return new

    def visit_var(self, var: Var) -> Expr:
        return self.vars.get(var, var)  # a free variable (a capture) stays as it is

    def visit_let(self, let: Let) -> Expr:
        lets, _ = ir.let_chain(let, self.memo.__contains__)
        chain: list[tuple[Let, Var, Expr]] = []
        for node in lets:
            if node in self.memo:
                break
            value = self.visit(node.value)
            chain.append((node, self.fresh(node.var), value))
        body = self.visit(chain[-1][0].body)
        for old, var, value in reversed(chain):
            body = Let(var, value, body, span=old.span)
            self.memo[old] = body
        return body

    def visit_function(self, fn: Function) -> Expr:
        if fn.is_primitive:
            return fn  # closed: nothing in it refers to the copied variables
        # A nested local function called in place: copied too (it is inlined when reached).
        params = [self.fresh(p) for p in fn.params]
        body = self.visit(fn.body)
        ret = self.annotation(fn.ret_type)
        return Function(tuple(params), body, ret, fn.attrs, fn.ranges, span=fn.span)
