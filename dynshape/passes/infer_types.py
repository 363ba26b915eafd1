"""Symbolic type inference: the ``infer_types`` pass.

Assumes: a module as parsed or built (types only where the user wrote them).
Guarantees: a new module in which every expression node carries its type (``node.ty``) with
dims simplified; every op call's output type came from the op's shape function run in symbolic
mode; every fact that could not be decided at compile time is recorded as a deferred (run-time)
check, counted per function in ``InferTypes.deferred``; a provably impossible program raises
CompileError naming the function, the expression and the dims.

How symbols work: the symbols in a function's parameter types are bound at entry (by the VM,
from the argument shapes); every other occurrence of a symbol is a relation on that binding.
Calls of global functions bind the callee's symbols to the caller's dims.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import sympy

import ir
from ir import (
    Call,
    Constant,
    Expr,
    Function,
    FuncType,
    GlobalVar,
    If,
    Let,
    Module,
    TensorType,
    Tuple,
    TupleGetItem,
    TupleType,
    Type,
    Var,
)
from ir.attrs import has_symbolic_entries
from ir.text import function_to_text
from ir.text.constants_text import attr_text
from shape_funcs import ShapeError

from ..dialect.memory import memory_op
from ..errors import CompileError
from ..inference.inline_local import calls_in_place, inline_call, is_local_function
from ..inference.op_result import op_result_type
from ..inference.symbolic_context import DeferredCheck, SymbolicContext
from ..inference.type_relations import instantiate_call, join, refine
from .base import ModulePass


class InferTypes(ModulePass):
    """Infer the symbolic type of every expression of a module (see the module docstring)."""

    name = "infer_types"

    def __init__(self) -> None:
        self.deferred: dict[str, list[DeferredCheck]] = {}
        """Run-time checks recorded per global function, filled by ``run`` (each check is
        also on the typed node that needs it: ``node.facts``)."""

    def run(self, module: Module) -> Module:
        # Calls of local function values are inlined (inference/inline_local.py): first made
        # calls in place here, then replaced by the body in visit_call.
        state = _ModuleInference(calls_in_place(module))
        typed = state.infer_all()
        self.deferred = state.deferred
        return typed


def infer_types(module: Module) -> Module:
    """Infer types of ``module`` (see ``InferTypes``)."""
    return InferTypes().run(module)


class CompleteTypes(ModulePass):
    """Type the nodes a pass built without a type, keeping every node that has one.

    Assumes: a module that was typed by ``InferTypes`` and then rewritten by code whose new
    nodes may lack types (a node it copied keeps its type, trusted as still right).
    Guarantees: every node typed, as ``InferTypes`` would type it, at the cost of the new
    nodes only: a typed node is neither re-inferred nor rebuilt unless one of its children was
    (the symbolic shape functions, most of inference's time, run only for the new nodes).
    The pipeline's passes build typed nodes, so it does not run this between them; it is for
    modules rewritten outside the pipeline (``manifest_alloc`` completes an input that has
    none). ``debug=True`` compares every stage with a full ``InferTypes``.
    """

    name = "complete_types"

    def run(self, module: Module) -> Module:
        return _ModuleInference(module, complete=True).infer_all()


class _ModuleInference:
    """Infers globals in dependency order; callees first unless their signature is declared."""

    def __init__(self, module: Module, complete: bool = False) -> None:
        self.module = module
        self.complete = complete
        """Keep typed nodes (``CompleteTypes``) instead of inferring everything."""
        self.typed: dict[str, Function] = {}
        self.signatures: dict[str, FuncType] = {}
        self.in_progress: list[str] = []
        self.deferred: dict[str, list[DeferredCheck]] = {}

    def infer_all(self) -> Module:
        for name in self.module:
            self.function(name)
        return Module({name: self.typed[name] for name in self.module})

    def signature(self, name: str, span: ir.Span | None) -> FuncType:
        """The type of global ``name`` as seen by a caller."""
        if name in self.signatures:
            return self.signatures[name]
        if name not in self.module:
            raise CompileError(f"call of undefined global @{name}", span)
        fn = self.module[name]
        declared = _declared_signature(fn)
        if declared is not None:
            return declared
        if name in self.in_progress:
            cycle = " -> ".join("@" + n for n in [*self.in_progress, name])
            raise CompileError(
                f"recursive function @{name} needs annotated parameter and result types "
                f"(cycle: {cycle})",
                fn.span,
            )
        self.function(name)
        return self.signatures[name]

    def function(self, name: str) -> None:
        if name in self.typed:
            return
        self.in_progress.append(name)
        fn = self.module[name]
        for p in fn.params:
            if p.type_annotation is None:
                raise CompileError(
                    f"parameter %{p.name_hint} of @{name} needs a type annotation", p.span
                )
        inference = (_TypeCompletion if self.complete else _FunctionInference)(self, name)
        typed = inference.visit(fn)
        assert isinstance(typed, Function) and isinstance(typed.ty, FuncType)
        self.typed[name] = typed
        self.signatures[name] = typed.ty
        self.deferred[name] = inference.deferred
        self.in_progress.pop()


def _declared_signature(fn: Function) -> FuncType | None:
    params = [p.type_annotation for p in fn.params]
    if fn.ret_type is None or any(p is None for p in params):
        return None
    return FuncType(tuple(p for p in params if p is not None), fn.ret_type)


class _FunctionInference(ir.ExprFunctor[Expr]):
    """Builds a typed copy of one global function; shared nodes stay shared."""

    def __init__(self, module: _ModuleInference, name: str) -> None:
        super().__init__()
        self.module = module
        self.name = name
        self.deferred: list[DeferredCheck] = []
        """Every run-time check of the function, each once, in the order found."""
        self._facts: list[DeferredCheck] = []
        self.vars: dict[Var, Var] = {}
        self.ranges = module.module[name].ranges
        """The declared symbol ranges of the global function, used in every proof."""

    # ---- helpers ---------------------------------------------------------------------------
    def fail(self, message: str, node: Expr) -> CompileError:
        """An error at ``node``: its location, and the function with the node marked."""
        listing = function_to_text(
            self.name, self.module.module[self.name], show_types=False, notes={node: "error"}
        )
        return CompileError(f"in @{self.name}: {message}", node.span, listing)

    def check_attr_symbols(self, call: Call) -> None:
        """A dim in an attribute (``newshape=[n, m]``) may use only the symbols the global's
        parameters bind at entry: nothing else gives them a value before the op runs."""
        assert call.op is not None
        bound = None
        for key, value in call.attrs.items():
            if not has_symbolic_entries(value):
                continue
            if bound is None:
                bound = self.module.module[self.name].param_symbols()
            free = set().union(*(ir.free_symbols(d) for d in value if isinstance(d, sympy.Expr)))
            unbound = sorted(
                ("?" if ir.is_anonymous(s) else str(s)) for s in free if s not in bound
            )
            if unbound:
                data = (
                    "; a ? (a size computed from data, argwhere's count) is passed as a tensor "
                    "instead: dyn.strided_slice, dyn.reshape"
                    if "?" in unbound
                    else ""
                )
                raise self.fail(
                    f"op {call.op.name}: attribute {key}={attr_text(value)} uses "
                    f"{', '.join(unbound)}, which no parameter of @{self.name} binds (a dim in "
                    f"an attribute may use only the symbols of the parameter types){data}",
                    call,
                )

    def checked(self, node: Expr, run: Any) -> Any:
        """Run ``run(ctx)`` with a fresh symbolic context; keep the facts it defers for the node
        being built (see ``site``); turn a shape or IR error into a located CompileError.

        One context per site, so that a fact needed at two places is checked at both.
        """
        ctx = SymbolicContext(self.ranges)
        try:
            result = run(ctx)
            self._facts.extend(ctx.deferred)
            return result
        except (ShapeError, ir.IRError) as e:
            raise self.fail(str(e), node) from None
        except CompileError as e:
            if e.is_located:
                raise
            raise self.fail(e.message, node) from None

    def site(self, typed: Expr) -> Expr:
        """Attach the facts deferred while building ``typed`` to it (``typed.facts``);
        ``typed`` is the node just built, not yet seen by anyone else."""
        if self._facts:
            object.__setattr__(typed, "facts", tuple(self._facts))
            seen = {(c.kind, c.dims) for c in self.deferred}
            self.deferred.extend(c for c in self._facts if (c.kind, c.dims) not in seen)
            self._facts = []
        return typed

    def bind(self, var: Var, ty: Type) -> Var:
        new = Var(var.name_hint, var.type_annotation, span=var.span, ty=ty)
        self.vars[var] = new
        return new

    def type_of(self, expr: Expr) -> Type:
        ty = expr.ty
        assert ty is not None, "visited nodes are typed"
        return ty

    # ---- nodes -----------------------------------------------------------------------------
    def visit_var(self, var: Var) -> Expr:
        try:
            return self.vars[var]
        except KeyError:
            raise self.fail(f"variable %{var.name_hint} is not defined here", var) from None

    def visit_global_var(self, gv: GlobalVar) -> Expr:
        sig = self.module.signature(gv.name, gv.span)
        return GlobalVar(gv.name, span=gv.span, ty=sig)

    def visit_constant(self, const: Constant) -> Expr:
        return Constant(const.value, span=const.span, ty=const.tensor_type)

    def visit_tuple(self, tup: Tuple) -> Expr:
        fields = tuple([self.visit(f) for f in tup.fields])  # a list: see ir/functor.py
        return Tuple(fields, span=tup.span, ty=TupleType(tuple(self.type_of(f) for f in fields)))

    def visit_tuple_getitem(self, item: TupleGetItem) -> Expr:
        value = self.visit(item.tuple_value)
        ty = self.type_of(value)
        if not isinstance(ty, TupleType):
            raise self.fail(f"projection .{item.index} of a non-tuple of type {ty}", item)
        if item.index >= len(ty.fields):
            raise self.fail(
                f"projection .{item.index} out of range for a tuple of {len(ty.fields)}", item
            )
        return TupleGetItem(value, item.index, span=item.span, ty=ty.fields[item.index])

    def visit_let(self, let: Let) -> Expr:
        # Long let chains are iterated, not recursed, so ANF programs of any length work.
        chain: list[tuple[Let, Var, Expr, list[DeferredCheck]]] = []
        lets, node = ir.let_chain(let, stop=self.memo.__contains__)
        for old in lets:
            var, value = self.let_binding(old)
            facts, self._facts = self._facts, []  # the annotation's checks belong to this let
            chain.append((old, var, value, facts))
        body = self.visit(node)
        for old, var, value, facts in reversed(chain):
            self._facts = facts
            body = self.site(Let(var, value, body, span=old.span, ty=self.type_of(body)))
            self.memo[old] = body
        return body

    def let_binding(self, node: Let) -> tuple[Var, Expr]:
        """The typed value of ``node`` and its variable, refined by its annotation."""
        mark = ir.dims.anonymous_watermark()
        value = self.visit(node.value)
        ty = self.type_of(value)
        ann = node.var.type_annotation
        if ann is not None:
            what = f"%{node.var.name_hint}"
            ty = self.checked(
                node, lambda ctx, a=ann, t=ty, w=what, m=mark: refine(a, t, ctx, w, m)
            )
        return self.bind(node.var, ty), value

    def visit_if(self, node: If) -> Expr:
        cond = self.visit(node.cond)
        cty = self.type_of(cond)
        if not (isinstance(cty, TensorType) and cty.rank == 0 and cty.dtype == "bool"):
            raise self.fail(f"the condition of an if must be a bool scalar, got {cty}", node)
        then_b = self.visit(node.then_branch)
        else_b = self.visit(node.else_branch)
        ty = self.checked(
            node,
            lambda ctx: join(self.type_of(then_b), self.type_of(else_b), "the branches of an if"),
        )
        return self.site(If(cond, then_b, else_b, span=node.span, ty=ty))

    def visit_function(self, fn: Function) -> Expr:
        # A function value not called in place: its parameters must be annotated.
        for p in fn.params:
            if p.type_annotation is None:
                raise self.fail(f"parameter %{p.name_hint} needs a type annotation", p)
        return self.function_body(fn, [p.type_annotation for p in fn.params])  # type: ignore[misc]

    def function_body(self, fn: Function, param_types: Sequence[Type]) -> Function:
        params = tuple(self.bind(p, t) for p, t in zip(fn.params, param_types, strict=True))
        body = self.visit(fn.body)
        ret = self.type_of(body)
        if fn.ret_type is not None:
            what = "the result"
            ret = self.checked(fn, lambda ctx: refine(fn.ret_type, ret, ctx, what))
        fty = FuncType(tuple(p.ty for p in params if p.ty is not None), ret)
        typed = Function(
            params, body, fn.ret_type, fn.attrs, ranges=fn.ranges, span=fn.span, ty=fty
        )
        self.site(typed)
        return typed

    def visit_call(self, call: Call) -> Expr:
        args = tuple([self.visit(a) for a in call.args])  # a list: see ir/functor.py
        arg_types = [self.type_of(a) for a in args]
        op = call.op
        mem = memory_op(call)
        if mem is not None and op is not None:
            ty = self.checked(call, lambda ctx: mem.result_type(arg_types))
            return self.site(Call(op, args, call.attrs, span=call.span, ty=ty))
        if op is not None:
            self.check_attr_symbols(call)
            ty = self.checked(
                call, lambda ctx: op_result_type(ctx, op, call.attrs, args, arg_types)
            )
            return self.site(Call(op, args, call.attrs, span=call.span, ty=ty))
        callee = call.callee
        assert isinstance(callee, Expr)
        if isinstance(callee, Function) and is_local_function(callee):
            # The body replaces the call, its own symbols bound by these arguments' types.
            outer = self.module.module[self.name].param_symbols()
            return self.visit(inline_call(callee, call, arg_types, outer))
        if isinstance(callee, Function) and callee not in self.memo:
            new_fn, facts = self.inline_function(callee, arg_types, call)
            self.memo[callee] = new_fn
            assert isinstance(new_fn.ty, FuncType)
            self._facts = facts
            return self.site(Call(new_fn, args, span=call.span, ty=new_fn.ty.ret))
        new_callee = self.visit(callee)
        sig = self.type_of(new_callee)
        if not isinstance(sig, FuncType):
            raise self.fail(f"cannot call a value of type {sig}", call)
        names = _param_names(callee, self.module.module, len(sig.params))
        label = f"@{callee.name}" if isinstance(callee, GlobalVar) else "the function"
        ty = self.checked(call, lambda ctx: instantiate_call(sig, arg_types, ctx, label, names))
        return self.site(Call(new_callee, args, span=call.span, ty=ty))

    def inline_function(
        self, fn: Function, arg_types: Sequence[Type], call: Call
    ) -> tuple[Function, list[DeferredCheck]]:
        """Type a function value called in place (a primitive): parameters take the args' types.

        Also returns the checks that the arguments must pass (they belong to the call, not to
        the function's body).
        """
        if len(arg_types) != len(fn.params):
            raise self.fail(
                f"the function takes {len(fn.params)} arguments, got {len(arg_types)}", call
            )
        param_types = []
        for p, t in zip(fn.params, arg_types, strict=True):
            ann = p.type_annotation
            if ann is not None:
                what = f"argument %{p.name_hint}"
                t = self.checked(call, lambda ctx, a=ann, t=t, w=what: refine(a, t, ctx, w))
            param_types.append(t)
        facts, self._facts = self._facts, []
        return self.function_body(fn, param_types), facts


class _TypeCompletion(_FunctionInference):
    """``CompleteTypes`` for one global: typed nodes are kept (and shared), untyped ones are
    inferred by the base class, whose visits of children come back here."""

    def bind(self, var: Var, ty: Type) -> Var:
        if var.ty is not None:
            self.vars[var] = var
            return var
        return super().bind(var, ty)

    def let_binding(self, node: Let) -> tuple[Var, Expr]:
        if node.var.ty is None:
            return super().let_binding(node)
        value = self.visit(node.value)
        return self.bind(node.var, node.var.ty), value

    def visit_constant(self, const: Constant) -> Expr:
        return const if const.ty is not None else super().visit_constant(const)

    def visit_global_var(self, gv: GlobalVar) -> Expr:
        return gv if gv.ty is not None else super().visit_global_var(gv)

    def visit_tuple(self, tup: Tuple) -> Expr:
        if tup.ty is None:
            return super().visit_tuple(tup)
        fields = [self.visit(f) for f in tup.fields]
        if _same(fields, tup.fields):
            return tup
        return Tuple(tuple(fields), span=tup.span, ty=tup.ty, facts=tup.facts)

    def visit_tuple_getitem(self, item: TupleGetItem) -> Expr:
        if item.ty is None:
            return super().visit_tuple_getitem(item)
        value = self.visit(item.tuple_value)
        if value is item.tuple_value:
            return item
        return TupleGetItem(value, item.index, span=item.span, ty=item.ty, facts=item.facts)

    def visit_call(self, call: Call) -> Expr:
        callee = call.callee
        if call.ty is None and isinstance(callee, Function) and callee.ty is not None:
            # A typed primitive called in place (fuse_ops builds these): its result type is
            # the call's, as fuse_ops instantiated it for these arguments.
            fn = self.visit(callee)
            assert isinstance(fn.ty, FuncType)
            typed_args = tuple([self.visit(a) for a in call.args])
            return Call(fn, typed_args, span=call.span, ty=fn.ty.ret, facts=call.facts)
        if call.ty is None:
            return super().visit_call(call)
        new_callee = self.visit(callee) if isinstance(callee, Expr) else callee
        args = [self.visit(a) for a in call.args]
        if new_callee is callee and _same(args, call.args):
            return call
        return Call(
            new_callee, tuple(args), call.attrs, span=call.span, ty=call.ty, facts=call.facts
        )

    def visit_if(self, node: If) -> Expr:
        if node.ty is None:
            return super().visit_if(node)
        parts = [self.visit(e) for e in (node.cond, node.then_branch, node.else_branch)]
        if _same(parts, (node.cond, node.then_branch, node.else_branch)):
            return node
        return If(*parts, span=node.span, ty=node.ty, facts=node.facts)

    def visit_function(self, fn: Function) -> Expr:
        if fn.ty is None:
            return super().visit_function(fn)
        for p in fn.params:
            self.bind(p, p.ty)  # type: ignore[arg-type]
        body = self.visit(fn.body)
        if body is fn.body:
            return fn
        return dataclasses.replace(fn, body=body)  # type and facts kept

    def visit_let(self, let: Let) -> Expr:
        # Iterated, as in the base class: let chains can be thousands long.
        chain: list[tuple[Let, Var, Expr, list[DeferredCheck]]] = []
        lets, node = ir.let_chain(let, stop=self.memo.__contains__)
        for old in lets:
            var, value = self.let_binding(old)  # a typed variable is kept (``bind``)
            chain.append((old, var, value, self._facts))
            self._facts = []
        body = self.visit(node)
        for old, var, value, facts in reversed(chain):
            if old.ty is None:
                self._facts = facts
                body = self.site(Let(var, value, body, span=old.span, ty=self.type_of(body)))
            elif not _same((var, value, body), (old.var, old.value, old.body)):
                body = Let(var, value, body, span=old.span, ty=self.type_of(body), facts=old.facts)
            else:
                body = old
            self.memo[old] = body
        return body


def stale_type(kept: Module, full: Module) -> tuple[Expr, Type | None] | None:
    """The deepest node of ``kept`` whose type (or deferred facts) differs from the same
    node's in ``full`` (the same module fully re-inferred), with the type inference gives it;
    or None.

    Dims with anonymous symbols compare as unknown (a full inference renumbers them, and types
    a primitive's ``?`` parameters with fresh dims where the kept types share the caller's),
    and the bodies of primitive functions are not compared (their kept types are more precise
    than their annotations give)."""
    for name in kept:
        found: tuple[Expr, Type | None] | None = None
        stack: list[tuple[Expr, Expr]] = [(kept[name], full[name])]
        seen: set[tuple[int, int]] = set()
        while stack:
            a, b = stack.pop()
            if (id(a), id(b)) in seen:
                continue
            seen.add((id(a), id(b)))
            if _erased(a.ty) != _erased(b.ty) or _erased_facts(a) != _erased_facts(b):
                found, stack = (a, b.ty), []  # the culprit is below it, or it: go deeper
            if isinstance(a, Function) and a.is_primitive:
                continue
            stack.extend(zip(_children(a), _children(b), strict=True))
        if found is not None:
            return found
    return None


def _children(e: Expr) -> list[Expr]:
    if isinstance(e, Call):
        return ([e.callee] if isinstance(e.callee, Expr) else []) + list(e.args)
    if isinstance(e, Let):
        return [e.var, e.value, e.body]
    if isinstance(e, If):
        return [e.cond, e.then_branch, e.else_branch]
    if isinstance(e, Tuple):
        return list(e.fields)
    if isinstance(e, TupleGetItem):
        return [e.tuple_value]
    if isinstance(e, Function):
        return [*e.params, e.body]
    return []


def _erased_facts(node: Expr) -> list[tuple[str, str, Any]]:
    """The deferred facts of ``node``, comparable across inferences (as ``_erased``)."""
    return sorted(
        (f.kind, f.op_name, tuple("?" if _anonymous(d) else str(d) for d in f.dims))
        for f in node.facts
    )


def _anonymous(d: ir.Dim) -> bool:
    return any(ir.dims.is_anonymous(x) for x in ir.free_symbols(d))


def _erased(ty: Type | None) -> Any:
    """``ty`` with each dim that has an anonymous symbol replaced by ``"?"``."""
    if isinstance(ty, TensorType):
        return (tuple("?" if _anonymous(d) else d for d in ty.shape), ty.dtype)
    if isinstance(ty, TupleType):
        return tuple(_erased(f) for f in ty.fields)
    if isinstance(ty, FuncType):
        return ("fn", tuple(_erased(p) for p in ty.params), _erased(ty.ret))
    return ty


def _same(new: Sequence[Expr], old: Sequence[Expr]) -> bool:
    return all(a is b for a, b in zip(new, old, strict=True))


def _param_names(callee: Expr, module: Module, count: int) -> list[str]:
    if isinstance(callee, GlobalVar) and callee.name in module:
        return [p.name_hint for p in module[callee.name].params]
    return [f"arg{i}" for i in range(count)]
