"""Relations between types used by type inference: refining by annotations, joining branches,
and instantiating a function's signature at a call.

Every fact these functions need goes through a *checker*: an object with
``check(a, op, b, what)`` that proves the fact, raises a ShapeError when it is refuted, or
records it as a run-time check (the symbolic shape-function context is one).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import sympy

import ir
from ir import Dim, FuncType, TensorType, TupleType, Type

from ..errors import CompileError
from .derived_dims import affine_inverse


class Checker(Protocol):
    """Proves, refutes or defers one fact about dims."""

    def check(self, a: Dim, op: str, b: Dim, what: str) -> None: ...


def _same_structure(expected: Type, actual: Type, what: str) -> None:
    if isinstance(expected, TensorType) and isinstance(actual, TensorType):
        if expected.dtype != actual.dtype:
            raise CompileError(f"{what}: expected dtype {expected.dtype}, got {actual.dtype}")
        if expected.rank != actual.rank:
            raise CompileError(
                f"{what}: expected rank {expected.rank} ({expected}), got rank {actual.rank} "
                f"({actual})"
            )
        return
    if isinstance(expected, TupleType) and isinstance(actual, TupleType):
        if len(expected.fields) != len(actual.fields):
            raise CompileError(
                f"{what}: expected a tuple of {len(expected.fields)}, got {len(actual.fields)}"
            )
        return
    if isinstance(expected, FuncType) and isinstance(actual, FuncType):
        return
    raise CompileError(f"{what}: expected {expected}, got {actual}")


def refine(
    annotation: Type, inferred: Type, checker: Checker, what: str, new_since: int | None = None
) -> Type:
    """Check ``inferred`` against a user's ``annotation`` and return the type to use.

    An anonymous annotation dim (``?``) accepts anything and keeps the inferred dim, except
    that it *names* an unknown the value has just introduced (an anonymous symbol made after
    the mark ``new_since``): the annotation's symbol is used instead, so that text written
    after it (by the user or by a pass) can refer to that unknown. Any other annotation dim
    must equal the inferred one: proven is fine, refuted is an error, undecided becomes a
    run-time check and the annotation's dim is used from then on.
    """
    _same_structure(annotation, inferred, what)
    if isinstance(annotation, TensorType):
        assert isinstance(inferred, TensorType)
        dims = []
        for axis, (want, got) in enumerate(zip(annotation.shape, inferred.shape, strict=True)):
            if _is_wildcard(want):
                fresh_here = new_since is not None and ir.dims.is_newer(got, new_since)
                dims.append(want if fresh_here else got)
                continue
            checker.check(
                got, "==", want, f"{what}.shape[{axis}] == its annotation in {annotation}"
            )
            dims.append(want)
        return TensorType(tuple(dims), annotation.dtype)
    if isinstance(annotation, TupleType):
        assert isinstance(inferred, TupleType)
        return TupleType(
            tuple(
                refine(a, b, checker, f"{what}.{i}", new_since)
                for i, (a, b) in enumerate(zip(annotation.fields, inferred.fields, strict=True))
            )
        )
    assert isinstance(annotation, FuncType) and isinstance(inferred, FuncType)
    return inferred


def _is_wildcard(dim: Dim) -> bool:
    return not isinstance(dim, int) and isinstance(dim, sympy.Dummy)


def join(a: Type, b: Type, what: str) -> Type:
    """The type of a value that is ``a`` or ``b`` (the two branches of an ``if``).

    Equal dims stay; dims that are not provably equal become a fresh anonymous symbol.
    """
    _same_structure(a, b, what)
    if isinstance(a, TensorType):
        assert isinstance(b, TensorType)
        dims = [
            x if ir.known_equal(x, y) else ir.fresh("join")
            for x, y in zip(a.shape, b.shape, strict=True)
        ]
        return TensorType(tuple(dims), a.dtype)
    if isinstance(a, TupleType):
        assert isinstance(b, TupleType)
        return TupleType(
            tuple(
                join(x, y, f"{what}.{i}")
                for i, (x, y) in enumerate(zip(a.fields, b.fields, strict=True))
            )
        )
    return a


def instantiate_call(
    signature: FuncType,
    arg_types: Sequence[Type],
    checker: Checker,
    callee: str,
    param_names: Sequence[str],
) -> Type:
    """The result type of calling a function of type ``signature`` with ``arg_types``.

    The callee's symbols are bound from the arguments as at the callee's entry: a parameter dim
    that is a plain symbol binds it at its first occurrence, then a derived dim ``a*n + b``
    binds ``n = (arg - b) // a`` (``derived_dims.py``; the fact ``arg >= b`` is checked), and
    every parameter dim but the plain binders becomes a fact to check (for a derived dim: that
    ``a`` divides ``arg - b``), and
    the result type is rewritten in the caller's terms. Symbols of the result that no parameter
    binds (anonymous ``?`` results) become fresh symbols for this call.
    """
    if len(arg_types) != len(signature.params):
        raise CompileError(
            f"{callee} takes {len(signature.params)} argument"
            f"{'s' * (len(signature.params) != 1)}, got {len(arg_types)}"
        )
    binding: dict[sympy.Basic, sympy.Expr] = {}
    pairs: list[tuple[Dim, Dim, str]] = []
    for name, p, a in zip(param_names, signature.params, arg_types, strict=True):
        _collect_dims(p, a, f"argument %{name} of {callee}", pairs)
    binders: set[int] = set()
    for i, (want, got, _) in enumerate(pairs):  # plain dims bind first, wherever they are
        if isinstance(want, sympy.Symbol) and want not in binding:
            binding[want] = ir.dims.as_expr(got)
            binders.add(i)
    progress = True
    while progress:  # then derived dims a*n + b (the entry rule: inference/derived_dims.py)
        progress = False
        for want, got, where in pairs:
            inv = affine_inverse(want, binding.keys())
            if inv is None:
                continue
            offset = _substitute(inv.offset, binding)
            binding[inv.symbol] = ir.simplify(
                sympy.floor((ir.dims.as_expr(got) - offset) / inv.scale)
            )
            # n >= 0 is this fact; that a divides got - b is the dim's own check, below
            checker.check(
                got,
                ">=",
                offset,
                f"{where} >= {offset} (the declared {want} with {inv.symbol} >= 0)",
            )
            progress = True
    for i, (want, got, where) in enumerate(pairs):  # the derived dims too: divisibility
        if i not in binders:
            checker.check(got, "==", _substitute(want, binding), f"{where} == the declared {want}")
    result_syms = ir.type_symbols(signature.ret)
    for s in result_syms:
        if s not in binding:
            binding[s] = ir.fresh("ret")
    return substitute_type(signature.ret, binding)


def _collect_dims(p: Type, a: Type, what: str, out: list[tuple[Dim, Dim, str]]) -> None:
    _same_structure(p, a, what)
    if isinstance(p, TensorType):
        assert isinstance(a, TensorType)
        out.extend(
            (want, got, f"{what}: shape[{axis}]")
            for axis, (want, got) in enumerate(zip(p.shape, a.shape, strict=True))
        )
    elif isinstance(p, TupleType):
        assert isinstance(a, TupleType)
        for i, (x, y) in enumerate(zip(p.fields, a.fields, strict=True)):
            _collect_dims(x, y, f"{what}.{i}", out)


def _substitute(dim: Dim, binding: dict[sympy.Basic, sympy.Expr]) -> Dim:
    if isinstance(dim, int) or not binding:
        return dim
    return ir.simplify(dim.xreplace(binding))


def substitute_type(ty: Type, binding: dict[sympy.Basic, sympy.Expr]) -> Type:
    """``ty`` with symbols replaced simultaneously (``xreplace``) by ``binding``."""
    if isinstance(ty, TensorType):
        return TensorType(tuple(_substitute(d, binding) for d in ty.shape), ty.dtype)
    if isinstance(ty, TupleType):
        return TupleType(tuple(substitute_type(f, binding) for f in ty.fields))
    if isinstance(ty, FuncType):
        return FuncType(
            tuple(substitute_type(p, binding) for p in ty.params), substitute_type(ty.ret, binding)
        )
    return ty  # a storage has no dims


def bind_plain_symbols(
    param: Type | None, arg: Type | None, out: dict[sympy.Basic, sympy.Expr]
) -> None:
    """Map each plain-symbol dim of a parameter type to the argument's dim there (the first
    occurrence wins; tuples field by field): the binding of a call, without its checks."""
    if isinstance(param, TensorType) and isinstance(arg, TensorType):
        for want, got in zip(param.shape, arg.shape, strict=True):
            if isinstance(want, sympy.Symbol) and want not in out:
                out[want] = ir.dims.as_expr(got)
    elif isinstance(param, TupleType) and isinstance(arg, TupleType):
        for p, a in zip(param.fields, arg.fields, strict=True):
            bind_plain_symbols(p, a, out)
