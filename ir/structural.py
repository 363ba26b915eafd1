"""Structural equality of IR values, up to renaming of variables and of anonymous (``?``) dims.

Two expressions are structurally equal when they have the same shape of tree (and of sharing:
a node shared in one must be shared in the other), the same ops, attributes, constants and
types, and their variables (and anonymous symbols) correspond one to one.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import numpy as np
import sympy

from .attrs import Attrs
from .dims import Dim, is_anonymous
from .expr import Call, Constant, Expr, Function, GlobalVar, If, Let, Tuple, TupleGetItem, Var
from .functor import too_deep
from .module import Module
from .nesting import allow_deep_recursion, check_nesting
from .op import OpDef
from .types import FuncType, StorageType, TensorType, TupleType, Type

_ATOMS = (Var, Constant, GlobalVar)
_COMMUTATIVE = (sympy.Add, sympy.Mul, sympy.Max, sympy.Min)
_MAX_PERMUTED_ARGS = 5  # 120 orders at most; dims are small expressions


class _Matcher:
    """Walks two values in parallel, building one-to-one maps of variables and ?-symbols."""

    def __init__(self, compare_types: bool) -> None:
        self.compare_types = compare_types
        self.vars: dict[Var, Var] = {}
        self.vars_back: dict[Var, Var] = {}
        self.syms: dict[sympy.Symbol, sympy.Symbol] = {}
        self.syms_back: dict[sympy.Symbol, sympy.Symbol] = {}
        self.nodes: dict[Expr, Expr] = {}  # a -> b for computations (DAG sharing)
        self.nodes_back: dict[Expr, Expr] = {}

    # ---- dims and types -------------------------------------------------------------------
    def bind(self, table: dict[Any, Any], back: dict[Any, Any], a: object, b: object) -> bool:
        if a in table or b in back:
            return table.get(a) is b and back.get(b) is a
        table[a] = b
        back[b] = a
        return True

    def sym_expr(self, a: sympy.Basic, b: sympy.Basic) -> bool:
        if isinstance(a, sympy.Dummy) or isinstance(b, sympy.Dummy):
            return (
                is_anonymous(a) and is_anonymous(b) and self.bind(self.syms, self.syms_back, a, b)
            )
        if not a.args and not b.args:
            return bool(a == b)
        if a.func != b.func or len(a.args) != len(b.args):
            return False
        if self._args_match(a.args, b.args):
            return True
        # sympy orders the arguments of Add, Mul, Max and Min by a key that depends on the
        # anonymous symbols' internal names, so equal expressions may list them differently.
        if a.func in _COMMUTATIVE and len(a.args) <= _MAX_PERMUTED_ARGS:
            return any(self._args_match(a.args, perm) for perm in itertools.permutations(b.args))
        return False

    def _args_match(self, xs: tuple[sympy.Basic, ...], ys: tuple[sympy.Basic, ...]) -> bool:
        """Match argument lists pairwise; on failure, undo the symbol bindings made."""
        saved = dict(self.syms), dict(self.syms_back)
        if all(self.sym_expr(x, y) for x, y in zip(xs, ys, strict=True)):
            return True
        self.syms, self.syms_back = saved
        return False

    def dim(self, a: Dim, b: Dim) -> bool:
        if isinstance(a, int) or isinstance(b, int):
            return isinstance(a, int) and isinstance(b, int) and a == b
        if self.sym_expr(a, b):
            return True
        # One dim may be spelt two ways: the printer factors ceiling(m*n/16 + 3*n/16) as
        # ceil(n*(m + 3) / 16), which parses back as a product. Equal when the difference
        # expands to 0 (dims with '?' symbols are matched by renaming above, not here).
        if a.atoms(sympy.Dummy) or b.atoms(sympy.Dummy):
            return False
        return bool(sympy.expand(a - b) == 0)

    def type(self, a: Type | None, b: Type | None) -> bool:
        if a is None or b is None:
            return a is None and b is None
        if isinstance(a, TensorType) and isinstance(b, TensorType):
            return (
                a.dtype == b.dtype
                and a.rank == b.rank
                and all(self.dim(x, y) for x, y in zip(a.shape, b.shape, strict=True))
            )
        if isinstance(a, TupleType) and isinstance(b, TupleType):
            return self.types(a.fields, b.fields)
        if isinstance(a, FuncType) and isinstance(b, FuncType):
            return self.types(a.params, b.params) and self.type(a.ret, b.ret)
        return isinstance(a, StorageType) and isinstance(b, StorageType)

    def types(self, a: Sequence[Type], b: Sequence[Type]) -> bool:
        return len(a) == len(b) and all(self.type(x, y) for x, y in zip(a, b, strict=True))

    # ---- expressions ----------------------------------------------------------------------
    def exprs(self, a: Sequence[Expr], b: Sequence[Expr]) -> bool:
        if len(a) != len(b):
            return False
        for x, y in zip(a, b, strict=True):  # noqa: SIM110  (a loop, not all(): see functor.py)
            if not self.expr(x, y):
                return False
        return True

    def attrs(self, a: Attrs, b: Attrs) -> bool:
        """Attribute values are equal, dims among them up to renaming of ``?`` symbols."""
        return list(a) == list(b) and all(self.attr_value(a[k], b[k]) for k in a)

    def attr_value(self, a: object, b: object) -> bool:
        if isinstance(a, sympy.Expr) or isinstance(b, sympy.Expr):
            return (
                isinstance(a, (int, sympy.Expr))
                and isinstance(b, (int, sympy.Expr))
                and (self.dim(a, b))
            )
        if isinstance(a, tuple) and isinstance(b, tuple):
            return len(a) == len(b) and all(
                self.attr_value(x, y) for x, y in zip(a, b, strict=True)
            )
        return type(a) is type(b) and a == b

    def define(self, a: Var, b: Var) -> bool:
        """``a`` and ``b`` are bound at corresponding places (parameters, lets)."""
        return self.bind(self.vars, self.vars_back, a, b) and self.type(
            a.type_annotation, b.type_annotation
        )

    def expr(self, a: Expr, b: Expr) -> bool:
        known = self._known(a, b)
        return self._expr(a, b) if known is None else known

    def _known(self, a: Expr, b: Expr) -> bool | None:
        """The answer for ``a`` and ``b`` when it does not need their children, else None
        (then the pair is recorded as matched, for sharing)."""
        if type(a) is not type(b):
            return False
        if self.compare_types and not isinstance(a, Var) and not self.type(a.ty, b.ty):
            return False
        if isinstance(a, _ATOMS):
            return None  # values, not computations: sharing them means nothing
        # A computation shared in one program must be shared the same way in the other.
        if a in self.nodes or b in self.nodes_back:
            return self.nodes.get(a) is b and self.nodes_back.get(b) is a
        self.nodes[a] = b
        self.nodes_back[b] = a
        return None

    def _lets(self, a: Let, b: Let) -> bool:
        """Two let chains, iterated (not recursed) along their bodies."""
        while True:
            if not (self.expr(a.value, b.value) and self.define(a.var, b.var)):
                return False
            na, nb = a.body, b.body
            if not (isinstance(na, Let) and isinstance(nb, Let)):
                return self.expr(na, nb)
            known = self._known(na, nb)
            if known is not None:
                return known
            a, b = na, nb

    def _expr(self, a: Expr, b: Expr) -> bool:
        if isinstance(a, Var):
            assert isinstance(b, Var)
            if a not in self.vars and b not in self.vars_back:
                return a is b  # free variables match only themselves
            return self.vars.get(a) is b and self.vars_back.get(b) is a
        if isinstance(a, GlobalVar):
            assert isinstance(b, GlobalVar)
            return a.name == b.name
        if isinstance(a, Constant):
            assert isinstance(b, Constant)
            return (
                a.value.dtype == b.value.dtype
                and a.value.shape == b.value.shape
                and bool(np.array_equal(a.value, b.value, equal_nan=a.value.dtype.kind == "f"))
            )
        if isinstance(a, Call):
            assert isinstance(b, Call)
            if isinstance(a.callee, OpDef) or isinstance(b.callee, OpDef):
                if a.callee is not b.callee or not self.attrs(a.attrs, b.attrs):
                    return False
            elif not self.expr(a.callee, b.callee):
                return False
            return self.exprs(a.args, b.args)
        if isinstance(a, Function):
            assert isinstance(b, Function)
            return (
                a.attrs == b.attrs
                and a.ranges == b.ranges
                and len(a.params) == len(b.params)
                and all(self.define(x, y) for x, y in zip(a.params, b.params, strict=True))
                and self.type(a.ret_type, b.ret_type)
                and self.expr(a.body, b.body)
            )
        if isinstance(a, Let):
            assert isinstance(b, Let)
            return self._lets(a, b)
        if isinstance(a, Tuple):
            assert isinstance(b, Tuple)
            return self.exprs(a.fields, b.fields)
        if isinstance(a, TupleGetItem):
            assert isinstance(b, TupleGetItem)
            return a.index == b.index and self.expr(a.tuple_value, b.tuple_value)
        if isinstance(a, If):
            assert isinstance(b, If)
            return (
                self.expr(a.cond, b.cond)
                and self.expr(a.then_branch, b.then_branch)
                and self.expr(a.else_branch, b.else_branch)
            )
        raise TypeError(f"cannot compare {type(a).__name__}")


def structurally_equal(
    a: Expr | Module | Type, b: Expr | Module | Type, *, compare_types: bool = False
) -> bool:
    """True if ``a`` and ``b`` are equal up to renaming of variables and anonymous dims.

    With ``compare_types=True`` the inferred types (``ty``) of the nodes must match too.
    Free variables match only themselves.
    """
    for side in (a, b):
        if isinstance(side, (Expr, Module)):
            check_nesting(side)  # the walk recurses per level: an IRError beyond the limit
    allow_deep_recursion()
    try:
        return _top(_Matcher(compare_types), a, b)
    except RecursionError:
        raise too_deep() from None


def _top(m: _Matcher, a: Expr | Module | Type, b: Expr | Module | Type) -> bool:
    if isinstance(a, Module) and isinstance(b, Module):
        if list(a) != list(b):
            return False
        return all(m.expr(a[name], b[name]) for name in a)
    if isinstance(a, (TensorType, TupleType, FuncType, StorageType)):
        return m.type(a, b)  # type: ignore[arg-type]
    if isinstance(a, Expr) and isinstance(b, Expr):
        return m.expr(a, b)
    return False
