"""Hypothesis strategies that build random well-formed modules directly with the ir API.

The modules are well-scoped (every variable is used inside the scope that binds it) but not
necessarily well-typed: there is no type inference yet. They exercise what the text format must
preserve: shared nodes within and across scopes (so the printer must hoist to the right
scope), lets with and without types, tuples and projections, ifs, inline functions (closures
and primitives), calls of ops with valid attributes, of globals (recursion included) and of
function values, constants of every dtype, and types whose dims are ints, named symbols,
anonymous symbols (repeated within a global) and dim expressions.

Atomic nodes (constants, global references) are built fresh at each use: the text format does
not preserve their sharing (see design/ir.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import sympy
from hypothesis import strategies as st

import ir

# numpy's dtypes; the extended ones (ml_dtypes') are tested in tests/vm/test_extended_dtypes_vm.py
DTYPES = sorted(ir.DTYPES - ir.dtypes.EXTENDED)
SYMBOLS = [ir.sym("n"), ir.sym("m"), ir.sym("batch")]
VAR_HINTS = ["x", "y", "x1", "t", "0", "12", "a.b", "1x", "p0", "v0"]
FN_ATTRS: list[dict[str, Any]] = [
    {},
    {"Primitive": 1},
    {"Primitive": 1, "Name": "fused_add"},
    {"Scale": 0.5},
    {"Flag": True},
]


@dataclass
class _Global:
    """What the builder knows while it builds one global function."""

    names: list[str]
    """Every global of the module (for calls, including recursive ones)."""
    anon: list[sympy.Dummy]
    """This global's anonymous symbols; drawing from a small pool makes them repeat."""
    budget: list[int] = field(default_factory=lambda: [40])
    """Nodes left to build, so that trees stay small."""


def dims(draw: st.DrawFn, g: _Global) -> ir.Dim:
    """A dim: an int, a named symbol, an anonymous symbol or an expression over them."""
    n, m = SYMBOLS[0], SYMBOLS[1]
    anon = draw(st.sampled_from(g.anon))
    kind = draw(st.integers(0, 11))
    if kind <= 2:
        return draw(st.integers(0, 16))
    if kind <= 4:
        return draw(st.sampled_from(SYMBOLS))
    if kind <= 6:
        return anon
    # One anonymous symbol at most per expression: see the report on structural equality.
    return draw(
        st.sampled_from(
            [
                2 * n,
                n + 1,
                n // 2,
                (n + 1) // 2,
                sympy.Mod(n, 3),
                sympy.Max(n, m),
                sympy.Min(n, 4),
                m * n - 1,
                anon + 1,
                2 * anon,
                n * anon,
                anon // 2,
            ]
        )
    )


def types(draw: st.DrawFn, g: _Global, depth: int = 0) -> ir.Type:
    """A tensor type mostly; sometimes a (nested) tuple type or a function type."""
    kind = draw(st.integers(0, 9)) if depth < 2 else 0
    if kind <= 6:
        rank = draw(st.integers(0, 3))
        shape = tuple(dims(draw, g) for _ in range(rank))
        return ir.TensorType(shape, draw(st.sampled_from(DTYPES)))
    if kind <= 8:
        count = draw(st.integers(0, 3))
        return ir.TupleType(tuple(types(draw, g, depth + 1) for _ in range(count)))
    count = draw(st.integers(0, 2))
    params = tuple(types(draw, g, depth + 1) for _ in range(count))
    return ir.FuncType(params, types(draw, g, depth + 1))


def constants(draw: st.DrawFn) -> ir.Constant:
    """A scalar of any dtype (non-finite floats included) or a small tensor, maybe empty; a
    rank-3 one may pass ``INLINE_ELEMENTS`` (printed as base64 bytes)."""
    dtype = draw(st.sampled_from(DTYPES))
    rank = draw(st.sampled_from([0, 0, 0, 1, 2, 3]))
    shape = tuple(draw(st.integers(0, 5 if rank == 3 else 3)) for _ in range(rank))
    size = int(np.prod(shape)) if shape else 1
    if dtype == "bool":
        values: list[Any] = draw(st.lists(st.booleans(), min_size=size, max_size=size))
    elif dtype.startswith("float"):
        width = int(dtype[5:])
        values = draw(st.lists(st.floats(width=width), min_size=size, max_size=size))  # type: ignore[arg-type]
    else:
        info = np.iinfo(dtype)
        values = draw(
            st.lists(st.integers(int(info.min), int(info.max)), min_size=size, max_size=size)
        )
    return ir.Constant(np.array(values, dtype=dtype).reshape(shape))


def _op_call(draw: st.DrawFn, arg: Any) -> ir.Call:
    """A call of one of a handful of ops with valid attributes; ``arg()`` draws an operand."""
    op = draw(
        st.sampled_from(
            [
                "add",
                "multiply",
                "exp",
                "negative",
                "sum",
                "reshape",
                "transpose",
                "clip",
                "cast",
                "concatenate",
                "split",
                "topk",
                "zeros",
                "where",
            ]
        )
    )
    if op in ("add", "multiply"):
        return ir.call(op, arg(), arg())
    if op in ("exp", "negative"):
        return ir.call(op, arg())
    if op == "where":
        return ir.call(op, arg(), arg(), arg())
    if op == "sum":
        axis = draw(
            st.one_of(st.none(), st.integers(-3, 3), st.lists(st.integers(0, 3), max_size=3))
        )
        return ir.call(op, arg(), axis=axis, keepdims=draw(st.booleans()))
    if op == "reshape":
        return ir.call(op, arg(), newshape=draw(st.lists(st.integers(-1, 8), max_size=4)))
    if op == "transpose":
        axes = draw(st.one_of(st.none(), st.permutations([0, 1, 2])))
        return ir.call(op, arg(), axes=axes)
    if op == "clip":
        bound = st.floats(allow_nan=False)
        return ir.call(op, arg(), a_min=draw(bound), a_max=draw(bound))
    if op == "cast":
        return ir.call(op, arg(), dtype=draw(st.sampled_from(DTYPES)))
    if op == "concatenate":
        return ir.call(op, ir.tuple_of([arg(), arg()]), axis=draw(st.integers(-2, 2)))
    if op == "split":
        spec = draw(st.one_of(st.integers(1, 4), st.lists(st.integers(0, 9), max_size=3)))
        return ir.call(op, arg(), indices_or_sections=spec)
    if op == "topk":
        ret = draw(st.sampled_from(["both", "values", "indices"]))
        return ir.call(
            op, arg(), k=draw(st.integers(1, 5)), ret_type=ret, is_ascend=draw(st.booleans())
        )
    return ir.call(
        "zeros",
        shape=draw(st.lists(st.integers(0, 4), max_size=3)),
        dtype=draw(st.sampled_from(DTYPES)),
    )


def exprs(draw: st.DrawFn, g: _Global, env: list[ir.Expr], depth: int) -> ir.Expr:
    """A random expression over ``env``, the variables and shareable nodes in scope.

    ``env`` grows with the nodes built here, so later picks share them (the IR is a DAG);
    nested scopes get a copy, so their nodes never leak out of them.
    """
    g.budget[0] -= 1
    leaf = depth >= 4 or g.budget[0] <= 0
    kind = draw(st.integers(0, 3 if leaf else 12))

    def sub(scope_env: list[ir.Expr] | None = None) -> ir.Expr:
        return exprs(draw, g, env if scope_env is None else scope_env, depth + 1)

    node: ir.Expr
    if kind <= 1:
        if env:
            return draw(st.sampled_from(env))  # a variable or a shared node
        return constants(draw)
    if kind == 2:
        return constants(draw)
    if kind == 3:
        return ir.GlobalVar(draw(st.sampled_from(g.names)))
    if kind <= 5:
        node = _op_call(draw, sub)
    elif kind == 6:
        node = ir.tuple_of([sub() for _ in range(draw(st.integers(0, 3)))])
    elif kind == 7:
        node = ir.TupleGetItem(sub(), draw(st.integers(0, 3)))
    elif kind == 8:
        node = ir.If(sub(), sub(list(env)), sub(list(env)))
    elif kind == 9:
        ty = types(draw, g) if draw(st.booleans()) else None
        var = ir.Var(draw(st.sampled_from(VAR_HINTS)), ty)
        value = sub()
        node = ir.Let(var, value, sub([*env, var]))
    elif kind == 10:
        params = [
            ir.Var(
                draw(st.sampled_from(VAR_HINTS)), types(draw, g) if draw(st.booleans()) else None
            )
            for _ in range(draw(st.integers(0, 2)))
        ]
        ret = types(draw, g) if draw(st.booleans()) else None
        # Primitive functions do not capture; other inline functions may (closures).
        attrs = draw(st.sampled_from(FN_ATTRS))
        inner = list(params) if attrs.get("Primitive") else [*env, *params]
        node = ir.function(params, sub(inner), ret, attrs)
    elif kind == 11:
        callee: ir.Expr = ir.GlobalVar(draw(st.sampled_from(g.names)))
        if env and draw(st.booleans()):
            callee = draw(st.sampled_from(env))
        node = ir.Call(callee, tuple(sub() for _ in range(draw(st.integers(0, 2)))))
    else:
        node = ir.Call(sub(), (sub(),))  # the callee is any expression (an inline fn, ...)
    env.append(node)
    return node


@st.composite
def modules(draw: st.DrawFn, with_types: bool = False) -> ir.Module:
    """A random module of 1 to 3 globals (``main`` first) that may call each other.

    With ``with_types``, some calls carry an inferred type (``ty``), printed as comments.
    """
    count = draw(st.integers(1, 3))
    names = ["main", "helper", "loop"][:count]
    functions: dict[str, ir.Function] = {}
    for name in names:
        # Each global has its own anonymous symbols: '?' labels are local to a definition.
        g = _Global(names, [ir.fresh(), ir.fresh()])
        params = [
            ir.Var(
                draw(st.sampled_from(VAR_HINTS)),
                types(draw, g) if draw(st.integers(0, 4)) else None,
            )
            for _ in range(draw(st.integers(0, 3)))
        ]
        body = exprs(draw, g, list(params), 0)
        if with_types:
            body = _add_types(draw, g, body)
        ret = types(draw, g) if draw(st.booleans()) else None
        functions[name] = ir.function(
            params, body, ret, draw(st.sampled_from(FN_ATTRS[:1] * 3 + FN_ATTRS))
        )
    return ir.Module(functions)


def _add_types(draw: st.DrawFn, g: _Global, body: ir.Expr) -> ir.Expr:
    """Rebuild ``body`` with a random ``ty`` on some calls, keeping its sharing."""
    from ir.expr import Call

    class AddTypes(ir.ExprMutator):
        def visit_call(self, call: Call) -> ir.Expr:
            new = super().visit_call(call)
            if draw(st.booleans()):
                return new.with_type(types(draw, g))
            return new

    return AddTypes().visit(body)
