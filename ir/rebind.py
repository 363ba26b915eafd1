"""``fresh_binders(expr)``: a copy of a let chain whose let-bound variables are new.

A variable is bound once in a function (its identity is the variable), so a chain that is to
appear twice in one function, such as the two versions ``plan_memory`` chooses between at run
time, needs its own variables in the second copy. Types, facts and spans are kept; functions
bound by the chain (fused primitives) are shared, since their parameters are their own.
"""

from __future__ import annotations

import dataclasses

from .expr import Call, Expr, Function, If, Let, Tuple, TupleGetItem, Var, let_chain, nest_lets


def fresh_binders(expr: Expr) -> Expr:
    """``expr`` with a new variable for every let it binds, in it and in its branches."""
    return _Renamer().chain(expr)


class _Renamer:
    def __init__(self) -> None:
        self.new: dict[Var, Var] = {}

    def chain(self, expr: Expr) -> Expr:
        lets, result = let_chain(expr)
        bindings = []
        for let in lets:
            value = self.value(let.value)
            var = dataclasses.replace(let.var)  # a new variable: identity is the object
            self.new[let.var] = var
            bindings.append((var, value, let.span, let.facts))
        return nest_lets(bindings, self.value(result))

    def value(self, e: Expr) -> Expr:
        if isinstance(e, Var):
            return self.new.get(e, e)
        if isinstance(e, Call):
            args = tuple(self.value(a) for a in e.args)
            return dataclasses.replace(e, args=args)
        if isinstance(e, Tuple):
            return dataclasses.replace(e, fields=tuple(self.value(f) for f in e.fields))
        if isinstance(e, TupleGetItem):
            return dataclasses.replace(e, tuple_value=self.value(e.tuple_value))
        if isinstance(e, If):
            return dataclasses.replace(
                e,
                cond=self.value(e.cond),
                then_branch=self.chain(e.then_branch),
                else_branch=self.chain(e.else_branch),
            )
        if isinstance(e, Let):
            return self.chain(e)
        if isinstance(e, Function):
            return e  # closed: a primitive's parameters are its own
        return e  # constants, globals
