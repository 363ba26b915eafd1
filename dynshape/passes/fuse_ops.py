"""Operator fusion: the ``fuse_ops`` pass groups op calls into ``Primitive=1`` functions.

Assumes: a typed module (the output of ``InferTypes``: every node has ``ty``), in graph form or
not. Guarantees: a new module in which every op call of a global function (including those in
``if`` branches, let values and bodies, and non-primitive inline functions) is inside exactly
one primitive function, called in place: ``fn (%p0: T0, ..., Primitive=1) -> R { ... }(args)``.
Outside primitives, functions only call primitives, globals and function values, and build
``if``, tuples, projections, lets, constants and variables. Primitive functions already in the
input are kept as they are. The output is typed too: new nodes carry the types their originals
had, so ``InferTypes`` on the output infers the same types (and the same deferred checks).

The fusion rules (TVM's FuseOps, simplified; design/compiler_fusion.md has the reasoning):

1. Groups are formed consumers first. An op call *joins* the group of its consumers when all of
   its uses are operands of op calls in one and the same group, and the patterns allow it (2-5).
   Otherwise it starts a group of its own, as its root. So a value used by anything else (an
   ``if``, a tuple, a let, a global call, a call of a function value) or by two groups ends its
   group: a group has exactly one output, its root, and never spans two scopes.
2. ``OPAQUE`` ops (creation, ``shape_of``, data-dependent ops) are alone in their group.
3. An ``ELEMWISE``/``BROADCAST``/``INJECTIVE`` op joins when every consumer is ``<= INJECTIVE``:
   injective chains fuse, whatever their order, and side inputs join an epilogue. Into an
   anchor's inputs only rule 5 fuses.
4. An *anchor* (``REDUCTION`` or ``OUT_ELEMWISE_FUSABLE``: sums, dense, matmul, conv, softmax,
   layer_norm, pooling) starts a group or joins one as its only anchor when every path from it
   to the group's root is ``ELEMWISE``/``BROADCAST`` ops: an elementwise epilogue. Of two
   anchors under one epilogue, the first met walking back from the root (the last operand)
   joins. (Option ``epilogues=False``: anchors stay alone.)
5. A *prologue* fuses into a ``REDUCTION`` anchor's inputs, as in TVM (elementwise ->
   reduction is fusable): an ``ELEMWISE``/``BROADCAST`` op joins when each of its consumers is
   the group's reduction or already in its prologue. So a prologue computes only the
   reduction's inputs: a value also used by the epilogue, or an injective op, ends it (it is
   materialised), and the dense/conv-like anchors take no prologue (their kernels are library
   calls on a materialised input). (Option ``prologues=False``: nothing fuses in front.)
6. The tuple literal given to a tuple operand (``concatenate((%a, %b))``) is part of the op
   call: its fields are the op's operands for rules 1-5, and it is rebuilt inside the primitive.
   Any other tuple-valued operand is passed in field by field (projections outside), so every
   primitive parameter is a tensor.
7. Constants are kept inside the primitive (a data-dependent op then still sees its constant
   input, and types stay exact); every other input is a parameter ``%p0, %p1, ...``, numbered
   in the order the body uses them (evaluation order, as printed), annotated with its type; the
   function's result type is the root's type. Anonymous dims (``?``, or expressions of one) are
   annotated as fresh plain ``?``, which accept the inferred dim.
8. A primitive of only reshape-like ops (``reshape``, ``expand_dims``, ``squeeze``,
   ``nn.batch_flatten``) is marked ``Reshape=1`` as well, so the allocation pass can make it a
   zero-copy view.
9. A group holds at most ``max_group_size`` op calls (default 256, TVM's max fuse depth); a
   producer that would exceed it starts a new group. ``max_group_size=1`` fuses nothing.

Lets are barriers (a let-bound value has a non-op use, a use of the variable is an input), so
on an A-normal-form input each op ends up alone; run fuse_ops on graph form, before to_anf.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from dataclasses import dataclass, field

import ir
from ir import (
    Call,
    Constant,
    Expr,
    Function,
    FunctionAttrs,
    FuncType,
    GlobalVar,
    If,
    Let,
    Module,
    OpPattern,
    TensorType,
    Tuple,
    TupleGetItem,
    TupleType,
    Type,
    Var,
)
from shape_funcs.declarations import BUILTIN_OPS

from ..analysis.dataflow import Use, UseGraph, use_graph
from ..errors import CompileError
from .base import ModulePass

#: Ops that only reinterpret their input's shape: a group of them alone is a view.
RESHAPE_LIKE = frozenset(name for name, op in BUILTIN_OPS.items() if op.reshape_like)

_ANCHORS = (OpPattern.REDUCTION, OpPattern.OUT_ELEMWISE_FUSABLE)


class FuseOps(ModulePass):
    """Group op calls into primitive functions (see the module docstring for the rules)."""

    name = "fuse_ops"

    def __init__(
        self, max_group_size: int = 256, epilogues: bool = True, prologues: bool = True
    ) -> None:
        if max_group_size < 1:
            raise ValueError(f"max_group_size must be at least 1, got {max_group_size}")
        self.max_group_size = max_group_size
        """At most this many op calls per primitive (1: no fusion, each op alone)."""
        self.epilogues = epilogues
        """Let reductions and dense/conv-like ops take an elementwise epilogue (rule 4)."""
        self.prologues = prologues
        """Let elementwise producers fuse into a reduction's inputs (rule 5)."""

    def run(self, module: Module) -> Module:
        out: dict[str, Function] = {}
        for name, fn in module.items():
            if fn.is_primitive:
                out[name] = fn
                continue
            if fn.ty is None:
                raise CompileError(
                    f"fuse_ops needs a typed module (run infer_types first): @{name} has no type",
                    fn.span,
                )
            graph = use_graph(fn.body)
            groups = _Grouping(graph, self.max_group_size, self.epilogues, self.prologues).groups
            body = _Rewriter(groups).visit(fn.body)
            out[name] = dataclasses.replace(fn, body=body)  # types and facts kept
        return Module(out)


def fuse_ops(module: Module) -> Module:
    """Fuse the op calls of the typed ``module`` into primitive functions (see ``FuseOps``)."""
    return FuseOps().run(module)


# ---- grouping ------------------------------------------------------------------------------
@dataclass(eq=False)
class _Group:
    """Op calls fused into one primitive. The root is the group's only output."""

    root: Call
    members: list[Call] = field(default_factory=list)
    """In joining order: users before what they use (reversed, a valid evaluation order)."""
    anchor: Call | None = None
    """The group's reduction / dense-like op, if any (at most one)."""
    prologue: set[Call] = field(default_factory=set)
    """The members computing the anchor's inputs (rule 5): all their uses are the anchor's or
    other prologue members'."""


class _Grouping:
    """Assigns every op call reachable from a function body to a group (rules 1-6)."""

    def __init__(self, graph: UseGraph, max_size: int, epilogues: bool, prologues: bool) -> None:
        self.graph = graph
        self.max_size = max_size
        self.epilogues = epilogues
        self.prologues = prologues
        self.groups: dict[Call, _Group] = {}
        self.ew_path: dict[Call, bool] = {}
        """True if the node and every op between it and its group's root are <= BROADCAST."""
        for node in reversed(graph.order):  # consumers before producers
            if isinstance(node, Call) and node.op is not None:
                self.assign(node)

    def assign(self, node: Call) -> None:
        assert node.op is not None
        consumers = self.consumers(node)
        group = self.target(node, node.op.pattern, consumers)
        if group is None:
            group = _Group(node)
        elif _in_front(group, consumers or []):
            group.prologue.add(node)  # target() lets a producer in front in by rule 5 only
        group.members.append(node)
        if node.op.pattern in _ANCHORS:
            group.anchor = node
        self.groups[node] = group
        self.ew_path[node] = node.op.pattern <= OpPattern.BROADCAST and (
            group.root is node or all(self.ew_path[c] for c in consumers or ())
        )

    def target(self, node: Call, pattern: OpPattern, consumers: list[Call] | None) -> _Group | None:
        """The group ``node`` joins, or None if it starts one."""
        if consumers is None or pattern == OpPattern.OPAQUE:
            return None
        group = self.groups[consumers[0]]
        if any(self.groups[c] is not group for c in consumers):
            return None  # used by two groups: materialised
        if len(group.members) >= self.max_size:
            return None
        # Nothing joins an opaque op's group: an opaque consumer is neither <= INJECTIVE nor
        # on an elementwise path, nor the group's reduction, so the tests below refuse it.
        if _in_front(group, consumers):
            return group if self.joins_prologue(pattern, group, consumers) else None
        if pattern <= OpPattern.INJECTIVE:
            ok = all(c.op is not None and c.op.pattern <= OpPattern.INJECTIVE for c in consumers)
            return group if ok else None
        # An anchor: only as an elementwise epilogue's head, and only one per group.
        if self.epilogues and group.anchor is None and all(self.ew_path[c] for c in consumers):
            return group
        return None

    def joins_prologue(self, pattern: OpPattern, group: _Group, consumers: list[Call]) -> bool:
        """Rule 5: an elementwise producer all of whose consumers are ``group``'s reduction or
        its prologue. A value the epilogue reads too is materialised instead, as in TVM: fused,
        it would be computed in front of the reduction and kept alive through it."""
        anchor = group.anchor
        return (
            self.prologues
            and pattern <= OpPattern.BROADCAST
            and anchor is not None
            and anchor.op is not None
            and anchor.op.pattern == OpPattern.REDUCTION
            and all(c is anchor or c in group.prologue for c in consumers)
        )

    def consumers(self, node: Expr) -> list[Call] | None:
        """The op calls using ``node``, or None if anything else uses it (rules 1 and 6)."""
        out: list[Call] = []
        for parent, use in self.graph.uses[node]:
            if use is not Use.OPERAND:
                return None
            if isinstance(parent, Call) and parent.op is not None:
                out.append(parent)
            elif isinstance(parent, Tuple) and (owner := self.tuple_owner(parent)) is not None:
                out.append(owner)
            else:
                return None
        return out

    def tuple_owner(self, tup: Tuple) -> Call | None:
        """The op call whose tuple operand ``tup`` is, if that is its only use."""
        uses = self.graph.uses[tup]
        if len(uses) != 1:
            return None
        parent, use = uses[0]
        if use is not Use.OPERAND or not isinstance(parent, Call) or parent.op is None:
            return None
        operands = parent.op.operands
        for operand, arg in zip(operands, parent.args, strict=True):
            if arg is tup and operand.is_tuple:
                return parent
        return None


def _in_front(group: _Group, consumers: list[Call]) -> bool:
    """True if a producer with these consumers would be computed in front of ``group``'s anchor
    (it feeds the anchor or its prologue), so only rule 5 may let it join."""
    return any(c is group.anchor or c in group.prologue for c in consumers)


# ---- rewriting -----------------------------------------------------------------------------
class _Rewriter(ir.ExprFunctor[Expr]):
    """Rebuilds a function body with each group replaced by a call of its primitive.

    Memoised, so shared nodes stay shared; every rebuilt node keeps its type.
    """

    def __init__(self, groups: dict[Call, _Group]) -> None:
        super().__init__()
        self.groups = groups

    def visit_var(self, var: Var) -> Expr:
        return var

    def visit_global_var(self, gv: GlobalVar) -> Expr:
        return gv

    def visit_constant(self, const: Constant) -> Expr:
        return const

    def visit_call(self, call: Call) -> Expr:
        if call.op is not None:
            group = self.groups[call]
            # Other members are used only inside their group, so only roots are reached here.
            assert group.root is call, f"{call.op.name} reached outside its group"
            return _Primitive(self, group).call()
        assert isinstance(call.callee, Expr)
        callee = self.visit(call.callee)
        args = tuple([self.visit(a) for a in call.args])
        return Call(callee, args, span=call.span, ty=call.ty, facts=call.facts)

    def visit_function(self, fn: Function) -> Expr:
        if fn.is_primitive:
            return fn
        return dataclasses.replace(fn, body=self.visit(fn.body))  # types and facts kept

    def visit_let(self, let: Let) -> Expr:
        # Let chains are iterated, not recursed: ANF programs can be thousands of lets long.
        chain, node = ir.let_chain(let, stop=self.memo.__contains__)
        body = self.visit(node)
        for old in reversed(chain):
            value = self.visit(old.value)
            body = Let(old.var, value, body, span=old.span, ty=old.ty, facts=old.facts)
            self.memo[old] = body
        return body

    def visit_tuple(self, tup: Tuple) -> Expr:
        fields = tuple([self.visit(f) for f in tup.fields])
        return Tuple(fields, span=tup.span, ty=tup.ty, facts=tup.facts)

    def visit_tuple_getitem(self, item: TupleGetItem) -> Expr:
        value = self.visit(item.tuple_value)
        return TupleGetItem(value, item.index, span=item.span, ty=item.ty, facts=item.facts)

    def visit_if(self, node: If) -> Expr:
        cond = self.visit(node.cond)
        then_branch = self.visit(node.then_branch)
        else_branch = self.visit(node.else_branch)
        return If(cond, then_branch, else_branch, span=node.span, ty=node.ty, facts=node.facts)


class _Primitive:
    """Builds the primitive function of one group and the call of it (rules 6-8)."""

    def __init__(self, rewriter: _Rewriter, group: _Group) -> None:
        self.rewriter = rewriter
        self.group = group
        self.members = set(group.members)
        self.params: list[Var] = []
        self.args: list[Expr] = []
        self.param_of: dict[Expr | tuple[Expr, int], Var] = {}
        """The parameter of each outside input (a tuple-valued input: per field index)."""

    def call(self) -> Call:
        group = self.group
        body: dict[Call, Call] = {}
        for member in reversed(group.members):  # what a member uses is built before it
            assert member.op is not None
            args: list[Expr] = []
            for operand, arg in zip(member.op.operands, member.args, strict=True):
                if not operand.is_tuple:
                    args.append(self.operand(arg, body))
                elif isinstance(arg, Tuple):
                    fields = tuple([self.operand(f, body) for f in arg.fields])
                    args.append(Tuple(fields, span=arg.span, ty=arg.ty, facts=arg.facts))
                else:
                    args.append(self.tuple_input(arg))
            body[member] = Call(
                member.op,
                tuple(args),
                member.attrs,
                span=member.span,
                ty=member.ty,
                facts=member.facts,
            )
        root = group.root
        assert root.ty is not None
        reshape = all(m.op is not None and m.op.name in RESHAPE_LIKE for m in group.members)
        attrs = FunctionAttrs(primitive=True, reshape=reshape)
        params = tuple(self.params)
        fn_ty = FuncType(tuple([_type(p) for p in params]), root.ty)
        ret = annotation(root.ty)
        fn = Function(params, body[root], ret, attrs, span=root.span, ty=fn_ty)
        return Call(fn, tuple(self.args), span=root.span, ty=root.ty)

    def operand(self, node: Expr, body: dict[Call, Call]) -> Expr:
        """What the primitive's body uses for ``node``: a member, a constant or a parameter."""
        if isinstance(node, Call) and node in self.members:
            return body[node]
        if isinstance(node, Constant):
            return node
        return self.param(node, node.ty, lambda: self.rewriter.visit(node))

    def tuple_input(self, node: Expr) -> Expr:
        """A tuple-valued input passed field by field: ``(%p0, %p1)`` inside, projections out."""
        ty = node.ty
        if not isinstance(ty, TupleType):
            raise CompileError(f"expected a tuple-typed value, got {ty}", node.span)
        fields: list[Expr] = []
        for i, field_ty in enumerate(ty.fields):

            def project(i: int = i, field_ty: Type = field_ty) -> Expr:
                outer = self.rewriter.visit(node)
                return TupleGetItem(outer, i, span=node.span, ty=field_ty)

            fields.append(self.param((node, i), field_ty, project))
        return Tuple(tuple(fields), span=node.span, ty=ty)

    def param(self, key: Expr | tuple[Expr, int], ty: Type | None, arg: Callable[[], Expr]) -> Var:
        """The parameter for the input ``key``; a new one takes ``arg()`` as its argument."""
        var = self.param_of.get(key)
        if var is None:
            if ty is None:
                raise CompileError("fuse_ops needs a typed module (run infer_types first)")
            var = Var(f"p{len(self.params)}", annotation(ty), ty=ty)
            self.param_of[key] = var
            self.params.append(var)
            self.args.append(arg())
        return var


def _type(var: Var) -> Type:
    assert var.ty is not None
    return var.ty


def annotation(ty: Type) -> Type:
    """``ty`` as an annotation that ``InferTypes`` accepts back exactly.

    An anonymous symbol (``?``) means nothing outside the global it was inferred in, and an
    annotation dim that is an *expression* of one (``?a + n``) would be a fact InferTypes cannot
    prove; annotated as a fresh plain ``?`` it accepts the inferred dim instead. Plain
    anonymous dims become fresh ones too, so that an annotation never shares a symbol with the
    inferred types (which then compare one-to-one with a re-inference).
    """
    if isinstance(ty, TensorType):
        dims = [d if not _mentions_anonymous(d) else ir.fresh() for d in ty.shape]
        return TensorType(tuple(dims), ty.dtype)
    if isinstance(ty, TupleType):
        return TupleType(tuple([annotation(f) for f in ty.fields]))
    if isinstance(ty, FuncType):
        return FuncType(tuple([annotation(p) for p in ty.params]), annotation(ty.ret))
    return ty


@functools.lru_cache(maxsize=4096)
def _mentions_anonymous(dim: ir.Dim) -> bool:
    # Cached: sympy's free_symbols costs microseconds, and the same dims recur on every edge.
    return any(ir.is_anonymous(s) for s in ir.free_symbols(dim))
