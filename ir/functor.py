"""A visitor and a mutator over expressions, with dispatch done once, by a class-keyed table.

Subclasses override ``visit_call``, ``visit_let``, ... only for the node kinds they care about;
the defaults walk (visitor) or rebuild (mutator) every child. Results are memoised per node, so a
shared node (the IR is a DAG) is visited once and a mutator preserves sharing.

Deep programs (thousands of nested calls) recurse deeply; ``visit`` raises Python's recursion
limit so that programs nested up to ``ir.MAX_NESTING`` levels work (the entries check that
bound: see ir/nesting.py), and let chains are iterated, so they may be of any length. The recursive
paths avoid C-level iteration (``tuple(generator)``, ``all(generator)``): on Python 3.11 and
later a Python-to-Python call uses no C stack, but a call made from C does, and a deep enough
program would overflow it. List comprehensions and plain loops keep the recursion in Python.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar, Generic, TypeVar

from .errors import IRError
from .expr import (
    Call,
    Constant,
    Expr,
    Function,
    GlobalVar,
    If,
    Let,
    Tuple,
    TupleGetItem,
    Var,
    let_chain,
)
from .nesting import allow_deep_recursion, too_deep_message

R = TypeVar("R")

_METHOD_FOR: dict[type, str] = {
    Var: "visit_var",
    GlobalVar: "visit_global_var",
    Constant: "visit_constant",
    Call: "visit_call",
    Function: "visit_function",
    Let: "visit_let",
    Tuple: "visit_tuple",
    TupleGetItem: "visit_tuple_getitem",
    If: "visit_if",
}


class ExprFunctor(Generic[R]):
    """Memoising dispatch from node class to ``visit_*`` method. Subclasses define the methods."""

    _table: ClassVar[dict[type, Callable[[Any, Any], Any]]]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        # Resolve each node class to its bound-later method once per subclass.
        table = {node: getattr(cls, name, None) for node, name in _METHOD_FOR.items()}
        cls._table = {node: method for node, method in table.items() if method is not None}

    def __init__(self) -> None:
        self.memo: dict[Expr, R] = {}
        self._depth = 0

    def visit(self, expr: Expr) -> R:
        """The result for ``expr``, computed once per node."""
        try:
            return self.memo[expr]
        except KeyError:
            pass
        if self._depth == 0:
            allow_deep_recursion()
        self._depth += 1
        try:
            method = self._table[type(expr)]
        except KeyError:
            self._depth -= 1
            raise TypeError(f"{type(self).__name__} cannot visit {type(expr).__name__}") from None
        try:
            result: R = method(self, expr)
        except RecursionError:
            if self._depth > 1:
                raise
            raise too_deep() from None
        finally:
            self._depth -= 1
        self.memo[expr] = result
        return result


def too_deep() -> IRError:
    """The error for a program nested beyond what a recursive walk can handle."""
    return IRError(too_deep_message())


class ExprVisitor(ExprFunctor[None]):
    """Walks every node once; override ``visit_*`` and call the base to keep walking."""

    def visit_var(self, var: Var) -> None:
        pass

    def visit_global_var(self, gv: GlobalVar) -> None:
        pass

    def visit_constant(self, const: Constant) -> None:
        pass

    def visit_call(self, call: Call) -> None:
        if isinstance(call.callee, Expr):
            self.visit(call.callee)
        for a in call.args:
            self.visit(a)

    def visit_function(self, fn: Function) -> None:
        for p in fn.params:
            self.visit(p)
        self.visit(fn.body)

    def visit_let(self, let: Let) -> None:
        # A let chain is iterated, not recursed (unless a subclass visits lets itself): ANF
        # programs are chains thousands long, and ir.MAX_NESTING does not count let bodies.
        iterate = self._table[Let] is ExprVisitor.visit_let
        lets, body = let_chain(let, self.memo.__contains__) if iterate else ([let], let.body)
        for node in lets:
            if node in self.memo:  # reached meanwhile through an earlier value: a shared let
                body = node
                break
            self.memo[node] = None  # a later visit of a let inside the chain is a memo hit
            self.visit(node.var)
            self.visit(node.value)
        self.visit(body)

    def visit_tuple(self, tup: Tuple) -> None:
        for f in tup.fields:
            self.visit(f)

    def visit_tuple_getitem(self, item: TupleGetItem) -> None:
        self.visit(item.tuple_value)

    def visit_if(self, node: If) -> None:
        self.visit(node.cond)
        self.visit(node.then_branch)
        self.visit(node.else_branch)


class ExprMutator(ExprFunctor[Expr]):
    """Rebuilds the expression bottom-up; a node whose children are unchanged is kept as is.

    Override ``visit_*`` to replace nodes. Variables are kept unless a subclass maps them.
    """

    def visit_var(self, var: Var) -> Expr:
        return var

    def visit_global_var(self, gv: GlobalVar) -> Expr:
        return gv

    def visit_constant(self, const: Constant) -> Expr:
        return const

    def visit_call(self, call: Call) -> Expr:
        callee = self.visit(call.callee) if isinstance(call.callee, Expr) else call.callee
        args = tuple([self.visit(a) for a in call.args])
        if callee is call.callee and _same(args, call.args):
            return call
        return Call(callee, args, call.attrs, span=call.span)

    def visit_function(self, fn: Function) -> Expr:
        params = tuple([self.visit(p) for p in fn.params])
        body = self.visit(fn.body)
        if body is fn.body and _same(params, fn.params):
            return fn
        if not all(isinstance(p, Var) for p in params):
            raise TypeError("a mutator must map function parameters to variables")
        return Function(params, body, fn.ret_type, fn.attrs, fn.ranges, span=fn.span)  # type: ignore[arg-type]

    def visit_let(self, let: Let) -> Expr:
        # Iterated along the chain (unless a subclass visits lets itself), as ExprVisitor.
        iterate = self._table[Let] is ExprMutator.visit_let
        lets, _ = let_chain(let, self.memo.__contains__) if iterate else ([let], let.body)
        chain: list[tuple[Let, Expr, Expr]] = []
        for node in lets:
            if node in self.memo:  # rebuilt meanwhile through an earlier value: keep that one
                break
            chain.append((node, self.visit(node.var), self.visit(node.value)))
        body = self.visit(chain[-1][0].body)
        for old, var, value in reversed(chain):
            if not (var is old.var and value is old.value and body is old.body):
                if not isinstance(var, Var):
                    raise TypeError("a mutator must map let-bound variables to variables")
                body = Let(var, value, body, span=old.span)
            else:
                body = old
            self.memo[old] = body
        return body

    def visit_tuple(self, tup: Tuple) -> Expr:
        fields = tuple([self.visit(f) for f in tup.fields])
        return tup if _same(fields, tup.fields) else Tuple(fields, span=tup.span)

    def visit_tuple_getitem(self, item: TupleGetItem) -> Expr:
        value = self.visit(item.tuple_value)
        if value is item.tuple_value:
            return item
        return TupleGetItem(value, item.index, span=item.span)

    def visit_if(self, node: If) -> Expr:
        cond = self.visit(node.cond)
        then_branch = self.visit(node.then_branch)
        else_branch = self.visit(node.else_branch)
        if (
            cond is node.cond
            and then_branch is node.then_branch
            and else_branch is node.else_branch
        ):
            return node
        return If(cond, then_branch, else_branch, span=node.span)


def _same(a: tuple[Expr, ...], b: tuple[Expr, ...]) -> bool:
    return all(x is y for x, y in zip(a, b, strict=True))
