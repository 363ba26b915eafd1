"""A-normal form: the ``to_anf`` pass binds every intermediate value with ``let``.

Assumes: any well-scoped module (typically the output of fuse_ops). Types are optional.
Guarantees: a new module in which the body of every global function, every ``if`` branch and
every non-primitive inline function body is a chain ``let %v = <value>; ...`` ending in an atom
(a variable, a global or a constant), where each value is a call, tuple, projection, ``if`` or
non-primitive function whose operands are atoms (a primitive function counts as an atom: it
stays the callee of its call, as in the seed's printout). Concretely:

- Each computation is bound exactly once (sharing is preserved: a node used twice becomes one
  variable used twice), in the lowest scope enclosing all of its uses, before its first use:
  the printer's placement rule (``dataflow.Placement``). A node used only in one branch of an
  ``if`` is bound in that branch; one used in both branches, or in the condition, before it.
- Existing lets keep their variables; their value is bound directly (``let %v = add(...)``).
  A let used as an operand (a block value) is flattened into the enclosing chain: variables
  are identities, so nothing can be captured.
- New variables are hinted ``x`` (the printer makes names unique) and carry the type of the
  value they bind when the input was typed; new lets carry their body's type. So a typed input
  gives a typed output, equal to what ``InferTypes`` infers for it.
- Primitive function bodies are not converted: they stay in graph form, for the kernels.
- The conversion is iterative along let chains and along the bindings of a scope; it recurses
  only into nested scopes (branches, inline functions).

Running it twice changes nothing more.
"""

from __future__ import annotations

import dataclasses

import ir
from ir import Call, Expr, Function, If, Let, Module, Tuple, TupleGetItem, Var
from ir.graph import Scope

from ..analysis.dataflow import Placement, Use, is_value_atom
from .base import ModulePass

#: The name hint of the variables this pass introduces.
VAR_HINT = "x"


class ToANF(ModulePass):
    """Bind every intermediate value with ``let`` (see the module docstring)."""

    name = "to_anf"

    def __init__(self, var_hint: str = VAR_HINT) -> None:
        self.var_hint = var_hint
        """Name hint of the new variables (the printer adds suffixes to keep names unique)."""

    def run(self, module: Module) -> Module:
        out: dict[str, Function] = {}
        for name, fn in module.items():
            out[name] = fn if fn.is_primitive else self.function(fn)
        return Module(out)

    def function(self, fn: Function) -> Function:
        """``fn`` with its body in A-normal form."""
        converter = _Converter(Placement(fn.body), self.var_hint)
        body = converter.chain(converter.placement.root, fn.body)
        return dataclasses.replace(fn, body=body)  # types and facts kept


def to_anf(module: Module) -> Module:
    """``module`` in A-normal form (see ``ToANF``)."""
    return ToANF().run(module)


class _Converter:
    """Emits the let chains of one function body, scope by scope, following a Placement."""

    def __init__(self, placement: Placement, var_hint: str) -> None:
        self.placement = placement
        self.var_hint = var_hint
        self.atoms: dict[Expr, Expr] = {}
        """The atom standing for each computation already emitted."""

    def atom(self, node: Expr) -> Expr:
        """How an operand refers to ``node``: itself if atomic, else the variable binding it."""
        if is_value_atom(node):
            return node
        return self.atoms[node]

    def chain(self, scope: Scope, result: Expr) -> Expr:
        """The let chain of ``scope`` whose value is ``result``."""
        bindings: list[ir.Binding] = []  # each with the facts of the let it comes from
        return ir.nest_lets(bindings, self.emit(bindings, scope, result))

    def emit(self, bindings: list[ir.Binding], scope: Scope, result: Expr) -> Expr:
        """Append the bindings of ``scope`` (and of the let bodies continuing it) to
        ``bindings``; return the atom of ``result``."""
        placement = self.placement
        while True:
            for item in scope.items:
                if isinstance(item, Let):  # a block value: splice its chain in here
                    self.atoms[item] = self.emit(bindings, placement.line_scope[item], item)
                    continue
                var = Var(self.var_hint, span=item.span, ty=item.ty)
                bindings.append((var, self.rebuild(item), item.span, ()))
                self.atoms[item] = var
            if isinstance(result, Let) and placement.line_scope[result] is scope:
                value = result.value
                bound = self.rebuild(value) if value in placement.let_values else self.atom(value)
                bindings.append((result.var, bound, result.span, result.facts))
                scope = placement.child(result, Use.LET_BODY)
                result = result.body
                continue
            return self.atom(result)

    def rebuild(self, node: Expr) -> Expr:
        """``node`` with atoms for operands and let chains for the scopes it opens."""
        ty, span, facts = node.ty, node.span, node.facts
        if isinstance(node, Call):
            callee = node.callee if not isinstance(node.callee, Expr) else self.atom(node.callee)
            args = [self.atom(a) for a in node.args]
            return Call(callee, tuple(args), node.attrs, span=span, ty=ty, facts=facts)
        if isinstance(node, Tuple):
            fields = tuple([self.atom(f) for f in node.fields])
            return Tuple(fields, span=span, ty=ty, facts=facts)
        if isinstance(node, TupleGetItem):
            value = self.atom(node.tuple_value)
            return TupleGetItem(value, node.index, span=span, ty=ty, facts=facts)
        child = self.placement.child
        if isinstance(node, If):
            then_branch = self.chain(child(node, Use.THEN), node.then_branch)
            else_branch = self.chain(child(node, Use.ELSE), node.else_branch)
            cond = self.atom(node.cond)
            return If(cond, then_branch, else_branch, span=span, ty=ty, facts=facts)
        if isinstance(node, Function):  # not primitive: those are atoms
            body = self.chain(child(node, Use.BODY), node.body)
            return dataclasses.replace(node, body=body)
        raise TypeError(f"to_anf cannot bind a {type(node).__name__}")
