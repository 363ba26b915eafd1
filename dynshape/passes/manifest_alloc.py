"""The allocation pass, ``manifest_alloc``: every allocation and kernel call made explicit in IR.

Assumes: a fused module in A-normal form (``fuse_ops`` then ``to_anf``): every op call is inside
a ``Primitive=1`` function and every intermediate is let-bound. Types are inferred here.

Guarantees: each let-bound call of a primitive function becomes, in order,

1. the run-time checks that type inference deferred for it (``memory.check``);
2. when an output dim depends on a symbol not bound yet (a data-dependent op's result):
   ``memory.shape_of`` of the inputs read by shape, and ``memory.shape_func(fn, (inputs...),
   data_dependent=[...], out_shapes=[...])``, which runs the op's shape function and binds
   the new symbols of ``out_shapes``;
3. per output tensor: ``memory.alloc_storage(size=<bytes>, alignment=64, dtype_hint=...)`` and
   ``memory.alloc_tensor(storage, offset=0, shape=[...], dtype=...)``, where the size and the
   shape are dims over bound symbols (the lowering compiles them into shape programs);
4. per scratch slot of the primitive's step plan (``step_plan.py``: an intermediate that
   cannot be computed in the output buffer), a storage and a tensor too, passed to the
   invoke *after* the outputs, so that memory planning places scratch like any other tensor
   (it lives during the invoke only). A slot that is an op's workspace (``nn.conv2d``'s
   im2col buffers, ``analysis/workspace.py``) is named ``%workspace``. This holds when every
   slot's shape is a dim over bound symbols; otherwise none is passed and the VM allocates
   that kernel's scratch itself (a workspace then is empty: the kernel allocates per call);
5. ``memory.invoke(fn, (inputs...), (outputs..., scratch...))``; the call's value is the output
   tensor (or the tuple of them, rebuilt with the call's structure).

A primitive marked ``Reshape=1`` becomes ``memory.reshape_tensor`` (a view: no allocation).
Calls of global functions and ``if`` are kept (a callee allocates its own outputs); their
branches are processed recursively. Symbols are *bound* at function entry (plain-symbol dims of
the parameters), by a value whose type has a new plain-symbol dim (the result of a call or an
``if``: the lowering reads it from the value), or by ``memory.shape_func``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence

import sympy

import ir
from ir import (
    Call,
    Constant,
    Expr,
    Function,
    GlobalVar,
    If,
    Module,
    TensorType,
    Tuple,
    TupleGetItem,
    TupleType,
    Type,
    Var,
)
from shape_funcs import get_shape_func

from ..analysis.entry_binding import entry_plan
from ..analysis.recorded_plan import recorded_plan, recorded_steps
from ..analysis.step_plan import StepPlan, plan_steps, single_op
from ..dialect.memory import (
    ALIGNMENT,
    AllocStorage,
    AllocTensor,
    Append,
    Check,
    Invoke,
    ReshapeTensor,
    ShapeFunc,
    ShapeOf,
)
from ..errors import CompileError
from ..inference.symbolic_context import DeferredCheck
from ..inference.type_relations import bind_plain_symbols, substitute_type
from .base import ModulePass
from .infer_types import CompleteTypes


class ManifestAlloc(ModulePass):
    """Make allocations explicit (see the module docstring)."""

    name = "manifest_alloc"

    def run(self, module: Module) -> Module:
        # The input's types and facts stay from inference (types stage); a module that a
        # caller built without them is typed first.
        typed = module
        if any(fn.ty is None for fn in module.values()):
            typed = CompleteTypes().run(module)
        return Module({name: _FunctionManifest(name).function(fn) for name, fn in typed.items()})


def manifest_alloc(module: Module) -> Module:
    """Make allocations explicit (see ``ManifestAlloc``)."""
    return ManifestAlloc().run(module)


def _is_append(fn: Function) -> bool:
    """True for a primitive whose body is one ``append`` (it becomes ``memory.append``)."""
    body = fn.body
    return single_op(fn) and isinstance(body, Call) and getattr(body.op, "name", "") == "append"


def _symbols(dims: Iterable[ir.Dim]) -> set[sympy.Basic]:
    return set().union(*(ir.free_symbols(d) for d in dims))


class _Block:
    """Collects the let bindings of one scope, then nests them around a result."""

    def __init__(self) -> None:
        self.bindings: list[ir.Binding] = []

    def let(
        self,
        hint: str,
        value: Expr,
        annotation: Type | None = None,
        *,
        ty: Type | None = None,
        facts: tuple[DeferredCheck, ...] = (),
    ) -> Var:
        """Bind ``value`` to a new variable, typed ``ty`` (default: the value's type); ``facts``
        are those of the let it replaces (its annotation's checks, emitted as ops too)."""
        var = Var(hint, annotation, ty=ty or value.ty)
        self.bindings.append((var, value, None, facts))
        return var

    def finish(self, result: Expr) -> Expr:
        return ir.nest_lets(self.bindings, result)


class _FunctionManifest:
    """Rewrites one global function."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.subst: dict[Var, Expr] = {}
        self.functions: dict[Var, Function] = {}  # let-bound primitive functions
        self.plans: dict[Function, StepPlan] = {}  # the step plan of each fused primitive
        self.ranges: dict[sympy.Basic, tuple[int, int | None]] = {}  # the function's

    def function(self, fn: Function) -> Function:
        self.ranges = dict(fn.ranges)
        # The symbols the parameters bind, plain or derived (2*n + 1 binds n): the rule and
        # its compile errors are the lowering's, so a program is refused here already.
        params = [(p.name_hint, p.ty or p.type_annotation) for p in fn.params]
        bound = set(entry_plan(params, f"@{self.name}", fn.span).bound)
        body = self.block(fn.body, bound, tail_checks=fn.facts)
        return dataclasses.replace(fn, body=body)  # type and facts kept

    # ---- scopes --------------------------------------------------------------------------------
    def block(
        self, expr: Expr, bound: set[sympy.Basic], tail_checks: Sequence[DeferredCheck] = ()
    ) -> Expr:
        """Rewrite a let chain (a function body or an ``if`` branch)."""
        b = _Block()
        lets, node = ir.let_chain(expr)
        for let in lets:
            self.binding(b, let.var, let.value, bound, let.facts)
            self.emit_checks(b, let.facts)
        if not isinstance(node, (Var, Constant, GlobalVar)):
            # A non-atomic result (not produced by to_anf, but legal): bind it like a let.
            result = Var("result", ty=node.ty)
            self.binding(b, result, node, bound)
            node = result
        self.emit_checks(b, tail_checks)
        return b.finish(self.atom(node))

    def binding(
        self,
        b: _Block,
        var: Var,
        value: Expr,
        bound: set[sympy.Basic],
        facts: tuple[DeferredCheck, ...] = (),
    ) -> None:
        """Rewrite ``let var = value`` (whose let has ``facts``) into ``b``."""
        if isinstance(value, Function):
            value = self.with_steps(value)
            self.functions[var] = value
            self.subst[var] = b.let(var.name_hint, value, var.type_annotation, ty=var.ty)
            return
        if isinstance(value, Call):
            fn = self.primitive(value.callee)
            if fn is not None:
                self.subst[var] = self.primitive_call(b, var, value, fn, bound)
                return
            self.emit_checks(b, value.facts)
        new_value = self.rewrite(value, bound)
        annotation = var.type_annotation
        if ir.plain_symbols(value.ty) - bound:
            # The value introduces unknowns (a callee's or an if's '?' dims) that later
            # sizes and checks refer to: the annotation names them, so they survive printing
            # and re-inference; the lowering binds them from the value's shape.
            annotation = value.ty
        self.subst[var] = b.let(var.name_hint, new_value, annotation, ty=var.ty, facts=facts)
        bound |= ir.plain_symbols(value.ty)

    def rewrite(self, value: Expr, bound: set[sympy.Basic]) -> Expr:
        """A let value other than a primitive call, with its operands substituted (its type and
        facts kept: the facts are emitted as checks before it, and stay as inference has them)."""
        if isinstance(value, If):
            return dataclasses.replace(
                value,
                cond=self.atom(value.cond),
                then_branch=self.block(value.then_branch, set(bound)),
                else_branch=self.block(value.else_branch, set(bound)),
            )
        if isinstance(value, Call):
            if value.op is not None:
                raise CompileError(
                    f"in @{self.name}: op {value.op.name} is not inside a primitive function "
                    "(run fuse_ops before manifest_alloc)",
                    value.span,
                )
            callee = value.callee
            assert isinstance(callee, Expr)
            args = tuple(self.atom(a) for a in value.args)
            return dataclasses.replace(value, callee=self.atom(callee), args=args)
        if isinstance(value, Tuple):
            return dataclasses.replace(value, fields=tuple(self.atom(f) for f in value.fields))
        if isinstance(value, TupleGetItem):
            return dataclasses.replace(value, tuple_value=self.atom(value.tuple_value))
        return self.atom(value)

    def atom(self, node: Expr) -> Expr:
        if isinstance(node, Var):
            return self.subst.get(node, node)
        if isinstance(node, Tuple):  # to_anf keeps tuples of atoms as arguments
            fields = tuple(self.atom(f) for f in node.fields)
            return Tuple(fields, span=node.span, ty=node.ty, facts=node.facts)
        return node

    def primitive(self, callee: object) -> Function | None:
        if isinstance(callee, Function) and callee.is_primitive:
            return self.with_steps(callee)
        if isinstance(callee, Var) and callee in self.functions:
            fn = self.functions[callee]
            return fn if fn.is_primitive else None
        return None

    def with_steps(self, fn: Function) -> Function:
        """``fn`` with its step plan recorded in the IR (``fn.attrs.steps``, which the lowering
        reads) if it is a fused primitive; a plan already there is verified, kept."""
        if not fn.is_primitive or single_op(fn) or fn.attrs.reshape:
            return fn
        if fn.attrs.steps is not None:
            self.plans[fn] = recorded_plan(fn, f"in @{self.name}")
            return fn
        plan = plan_steps(fn)
        attrs = dataclasses.replace(fn.attrs, steps=recorded_steps(fn, plan))
        planned = dataclasses.replace(fn, attrs=attrs)
        self.plans[planned] = plan
        return planned

    # ---- checks -----------------------------------------------------------------------------
    def emit_checks(self, b: _Block, checks: Iterable[DeferredCheck]) -> None:
        for check in checks:
            lhs, rhs = check.dims
            b.let("check", Check.make(check.kind, lhs, rhs, check.message_template()))

    def checks_inside(self, fn: Function) -> list[DeferredCheck]:
        """The deferred checks of every node of a primitive's body, in evaluation order."""
        collect = _CollectFacts()
        collect.visit(fn.body)
        return [*collect.found, *fn.facts]

    # ---- primitive calls --------------------------------------------------------------------
    def primitive_call(
        self, b: _Block, var: Var, call: Call, fn: Function, bound: set[sympy.Basic]
    ) -> Expr:
        """Allocate the outputs of ``call`` and invoke ``fn``; return the call's new value."""
        self.emit_checks(b, [*self.checks_inside(fn), *call.facts])
        fn_ref = self.atom(call.callee) if isinstance(call.callee, Var) else fn  # with Steps
        args = tuple(self.atom(a) for a in call.args)
        out_ty = call.ty
        assert out_ty is not None
        leaves = ir.tensor_leaves(out_ty)
        if fn.attrs.reshape and isinstance(out_ty, TensorType) and len(args) == 1:
            self.require_bound(leaves, bound, call)
            return b.let(var.name_hint, ReshapeTensor.make(args[0], out_ty.shape))
        body = fn.body
        if _is_append(fn) and isinstance(body, Call) and isinstance(out_ty, TensorType):
            self.require_bound(leaves, bound, call)
            return b.let(var.name_hint, self.append(args, out_ty, int(body.attrs["axis"])))
        if not _symbols(d for leaf in leaves for d in leaf.shape) <= bound:
            self.shape_func(b, fn, fn_ref, args, leaves, bound, call)
        outputs = [
            _alloc(b, leaf, f"{var.name_hint}{suffix}", f"storage{suffix}")
            for i, leaf in enumerate(leaves)
            for suffix in ["" if len(leaves) == 1 else str(i)]
        ]
        plan = self.plans.get(fn)
        scratch = [
            _alloc(b, ty, "workspace" if plan and plan.is_workspace(j) else "scratch", "storage")
            for j, ty in enumerate(self.scratch(fn, call, bound))
        ]
        b.let("invoke", Invoke.make(fn_ref, args, outputs + scratch))
        if len(outputs) == 1 and isinstance(out_ty, TensorType):
            return outputs[0]
        return b.let(var.name_hint, _rebuild(out_ty, outputs))

    def append(self, args: tuple[Expr, ...], out_ty: TensorType, axis: int) -> Call:
        """``memory.append`` of ``append(x, y, axis)``: room for the axis's upper bound under
        the function's ranges when it has one (a declared ``seq <= 2048`` allocates once),
        else 0 (the VM doubles the length it needs)."""
        axis = axis + len(out_ty.shape) if axis < 0 else axis
        bound = ir.ranges.upper_bound(out_ty.shape[axis], self.ranges)
        return Append.make(args[0], args[1], axis, out_ty.shape, bound or 0)

    def scratch(self, fn: Function, call: Call, bound: set[sympy.Basic]) -> list[TensorType]:
        """The scratch slots of ``fn``'s step plan in the caller's terms, or [] if one of them
        has a dim the caller cannot compute (then the VM allocates them at run time)."""
        plan = self.plans.get(fn)
        slots = plan.slots if plan is not None else []
        if not slots:
            return []
        binding: dict[sympy.Basic, sympy.Expr] = {}
        params = [(p.ty, a.ty) for p, a in zip(fn.params, call.args, strict=True)]
        for p_ty, a_ty in params:
            bind_plain_symbols(p_ty, a_ty, binding)
        for p_ty, a_ty in params:  # the binding must explain every parameter, or no scratch
            if isinstance(p_ty, TensorType) and isinstance(a_ty, TensorType):
                p_in_caller = substitute_type(p_ty, binding)
                assert isinstance(p_in_caller, TensorType)
                if not all(map(ir.known_equal, p_in_caller.shape, a_ty.shape)):
                    return []
        out = []
        for ty in slots:
            t = substitute_type(ty, binding)
            assert isinstance(t, TensorType)
            if not _symbols(t.shape) <= bound:
                return []
            out.append(t)
        return out

    def shape_func(
        self,
        b: _Block,
        fn: Function,
        fn_ref: Expr,
        args: Sequence[Expr],
        leaves: Sequence[TensorType],
        bound: set[sympy.Basic],
        call: Call,
    ) -> None:
        """Emit the run-time shape function of a lone data-dependent op and bind its symbols."""
        body = fn.body
        if not isinstance(body, Call) or body.op is None:
            raise CompileError(
                f"in @{self.name}: an output shape depends on a run-time value, but the "
                "primitive function is not a single op call (fuse_ops keeps such ops alone)",
                call.span,
            )
        sf = get_shape_func(body.op.name)
        reads_value = [False] * len(fn.params)
        for i, a in enumerate(body.args):
            if isinstance(a, Var) and a in fn.params and i < len(sf.data_dependent):
                reads_value[fn.params.index(a)] |= sf.data_dependent[i]
        inputs = [
            a if value else b.let("shape", ShapeOf.make(a))
            for a, value in zip(args, reads_value, strict=True)
        ]
        out_shapes = [list(leaf.shape) for leaf in leaves]
        b.let("shapes", ShapeFunc.make(fn_ref, inputs, [int(v) for v in reads_value], out_shapes))
        bound |= {d for leaf in leaves for d in leaf.shape if isinstance(d, sympy.Symbol)}
        self.require_bound(leaves, bound, call)

    def require_bound(
        self, leaves: Sequence[TensorType], bound: set[sympy.Basic], call: Call
    ) -> None:
        missing = _symbols(d for leaf in leaves for d in leaf.shape) - bound
        if missing:
            names = ", ".join(sorted(str(s) for s in missing))
            raise CompileError(
                f"in @{self.name}: the output shape "
                f"{', '.join(str(leaf) for leaf in leaves)} uses {names}, which no argument "
                "shape or run-time shape function binds",
                call.span,
            )


class _CollectFacts(ir.ExprVisitor):
    """The facts of every call under a node, in evaluation order."""

    def __init__(self) -> None:
        super().__init__()
        self.found: list[DeferredCheck] = []

    def visit_call(self, call: Call) -> None:
        super().visit_call(call)
        self.found.extend(call.facts)


def _alloc(b: _Block, ty: TensorType, hint: str, storage_hint: str) -> Var:
    """A storage of ``ty``'s size and a tensor of ``ty`` at offset 0 in it; returns the tensor."""
    storage = b.let(storage_hint, AllocStorage.make(ty.size_bytes(), ALIGNMENT, ty.dtype))
    return b.let(hint, AllocTensor.make(storage, 0, ty.shape, ty.dtype))


def _rebuild(ty: Type, leaves: Iterable[Var]) -> Expr:
    """The value of type ``ty`` whose tensor leaves are ``leaves``, in order."""
    it = iter(leaves)

    def build(t: Type) -> Expr:
        if isinstance(t, TupleType):
            return Tuple(tuple(build(f) for f in t.fields), ty=t)
        return next(it)

    return build(ty)
