"""Hypothesis strategies: bindings of a module's symbols, inputs at a binding, random programs.

    from dynshape.testing import strategies as ds
    module = data.draw(ds.programs(ops=("unary", "binary", "reduce")))
    binding = data.draw(ds.bindings(module))
    args = data.draw(ds.inputs(module, binding))

Hypothesis is a development dependency: only this module imports it.

Bindings give a value to every symbol that is a whole dim of a ``@main`` parameter (``n`` in
``(n, 2*n)``: ``2*n`` needs no symbol of its own) and satisfy the run-time checks that type
inference recorded for ``@main``, within the symbols' declared ranges (``Function.ranges``;
an unbounded range is cut at ``max_value``). Random programs are built op by op over float32
values with symbolic dims: each step picks an op family, operands from the values made so far
(or a new parameter shaped to fit), and keeps the step only if the op's shape function accepts
it symbolically *with no deferred check*, so every program is valid at every binding.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import hypothesis.extra.numpy as hnp
import hypothesis.strategies as st
import numpy as np
import sympy

import ir
from ir import Expr, Module, TensorType, TupleType, Type, Var
from shape_funcs import ShapeError

from .inputs import plain_symbols, shape_at

#: The op families ``programs`` draws from by default.
FAMILIES = (
    "unary",
    "binary",
    "reduce",
    "reshape",
    "transpose",
    "concatenate",
    "take",
    "strided_slice",
    "dense",
    "matmul",
    "if",
)
UNARY = ("negative", "abs", "tanh", "sin", "nn.relu", "sigmoid")
BINARY = ("add", "subtract", "multiply", "maximum", "minimum")
REDUCE = ("sum", "mean", "max")


def bindings(
    module: Module, min_value: int = 0, max_value: int = 6
) -> st.SearchStrategy[dict[str, int]]:
    """Values for the plain symbols of ``@main``'s parameters that pass its deferred checks."""
    from dynshape.passes.infer_types import InferTypes

    infer = InferTypes()
    infer.run(module)
    checks = infer.deferred.get("main", [])
    names = plain_symbols(module)

    def legal(binding: dict[str, int]) -> bool:
        values = {ir.sym(k): v for k, v in binding.items()}
        for check in checks:
            try:
                if not check.holds(values):
                    return False
            except (ValueError, KeyError, TypeError):
                continue  # a fact about `?` dims: decided at run time only
        return True

    # Declared symbol ranges (``Function.ranges``, where the IR has them) narrow the draw.
    ranges = getattr(module["main"], "ranges", None) or {}
    declared = {str(s): bound for s, bound in ranges.items()}
    per_symbol = {}
    for n in names:
        lo, hi = declared.get(n, (min_value, max_value))
        lo = max(lo, min_value) if n not in declared else lo
        hi = max_value if hi is None else hi
        per_symbol[n] = st.integers(lo, max(lo, min(hi, max(max_value, lo))))
    return st.fixed_dictionaries(per_symbol).filter(legal)


def _array(ty: TensorType, binding: Mapping[str, int]) -> st.SearchStrategy[np.ndarray]:
    shape = shape_at(ty, binding, "parameter")
    dt = np.dtype(ty.dtype)
    elements: st.SearchStrategy[Any]
    if dt.kind == "f":
        elements = st.floats(-4, 4, width={2: 16, 4: 32}.get(dt.itemsize, 64))  # type: ignore[arg-type]
    elif dt.kind == "b":
        elements = st.booleans()
    elif dt.kind == "u":
        elements = st.integers(0, 9)
    else:
        elements = st.integers(-5, 5)
    return hnp.arrays(dt, shape, elements=elements)


def inputs(module: Module, binding: Mapping[str, int]) -> st.SearchStrategy[list[Any]]:
    """Arguments of ``@main`` in the shapes ``binding`` gives (floats in [-4, 4], small ints)."""

    def of(ty: Type | None) -> st.SearchStrategy[Any]:
        if isinstance(ty, TupleType):
            return st.tuples(*(of(f) for f in ty.fields))
        if not isinstance(ty, TensorType):
            raise ValueError(f"cannot draw a value of type {ty}")
        return _array(ty, binding)

    return st.tuples(*(of(p.type_annotation or p.ty) for p in module["main"].params)).map(list)


# ---- random programs -------------------------------------------------------------------------
Shape = tuple[ir.Dim, ...]


class _Builder:
    """The values of a program being built, with their symbolic shapes."""

    def __init__(self, draw: st.DrawFn, symbols: Sequence[str]):
        self.draw = draw
        self.symbols = [ir.sym(s) for s in symbols]
        self.params: list[Var] = []
        self.values: list[tuple[Expr, Shape]] = []

    def dim(self) -> ir.Dim:
        return self.draw(st.sampled_from([*self.symbols, 1, 2, 3]))

    def param(self, shape: Shape) -> tuple[Expr, Shape]:
        var = Var(f"p{len(self.params)}", TensorType(shape, "float32"))
        self.params.append(var)
        self.values.append((var, shape))
        return var, shape

    def pick(self) -> tuple[Expr, Shape]:
        # sampled_from's overloads give Any for a list whose type holds Any (ir.Dim does).
        value: tuple[Expr, Shape] = self.draw(st.sampled_from(self.values))
        return value

    def call(self, op: str, args: Sequence[Expr], shapes: Sequence[Any], **attrs: Any) -> bool:
        """Add ``op(args)`` if its shape function accepts it with nothing deferred."""
        from dynshape.inference.symbolic_context import SymbolicContext

        ctx = SymbolicContext()
        try:
            shape = ctx.shapes(op, list(shapes), attrs)
        except ShapeError:
            return False
        if ctx.deferred:
            return False
        self.values.append((ir.call(op, *args, **attrs), tuple(shape)))
        return True


def _step(b: _Builder, family: str) -> bool:
    """One op of ``family`` on a value picked from those made so far; whether it was kept."""
    x, xs = b.pick()
    return _FAMILY_STEPS[family](b, x, xs)


def _unary(b: _Builder, x: Expr, xs: Shape) -> bool:
    return b.call(b.draw(st.sampled_from(UNARY)), [x], [xs])


def _binary(b: _Builder, x: Expr, xs: Shape) -> bool:
    draw, rank = b.draw, len(xs)
    same = [v for v in b.values if v[1] == xs]
    if len(same) > 0 and draw(st.booleans()):
        y, ys = draw(st.sampled_from(same))
    else:  # a new parameter that broadcasts against x: some dims 1, maybe fewer axes
        keep = draw(st.integers(0, rank))
        ys = tuple(d if draw(st.booleans()) else 1 for d in xs[rank - keep :])
        y, ys = b.param(ys)
    args = [x, y] if draw(st.booleans()) else [y, x]
    shapes = [xs, ys] if args[0] is x else [ys, xs]
    return b.call(draw(st.sampled_from(BINARY)), args, shapes)


def _reduce(b: _Builder, x: Expr, xs: Shape) -> bool:
    draw, rank = b.draw, len(xs)
    if not rank:
        return False
    axis = draw(st.integers(-rank, rank - 1))
    op = draw(st.sampled_from(REDUCE))
    return b.call(op, [x], [xs], axis=axis, keepdims=draw(st.booleans()))


def _reshape(b: _Builder, x: Expr, xs: Shape) -> bool:
    draw, rank = b.draw, len(xs)
    if rank and draw(st.booleans()):
        return b.call("reshape", [x], [xs], newshape=[-1])
    at = draw(st.integers(0, rank))
    return b.call("reshape", [x], [xs], newshape=[0] * at + [1] + [0] * (rank - at))


def _transpose(b: _Builder, x: Expr, xs: Shape) -> bool:
    rank = len(xs)
    if not rank:
        return False
    axes = b.draw(st.permutations(range(rank)))
    return b.call("transpose", [x], [xs], axes=list(axes))


def _concatenate(b: _Builder, x: Expr, xs: Shape) -> bool:
    draw, rank = b.draw, len(xs)
    if not rank:
        return False
    same = [v for v in b.values if v[1] == xs]
    y, _ = draw(st.sampled_from(same))
    axis = draw(st.integers(0, rank - 1))
    return b.call("concatenate", [ir.tuple_of([x, y])], [[xs, xs]], axis=axis)


def _take(b: _Builder, x: Expr, xs: Shape) -> bool:
    draw, rank = b.draw, len(xs)
    if not rank:
        return False
    axis = draw(st.integers(0, rank - 1))
    if not isinstance(xs[axis], int) or xs[axis] < 1:
        return False
    count = draw(st.integers(0, 3))
    index = draw(st.lists(st.integers(0, xs[axis] - 1), min_size=count, max_size=count))
    idx = ir.const(index[0] if len(index) > 0 and draw(st.booleans()) else index, "int64")
    return b.call("take", [x, idx], [xs, idx.value.shape], axis=axis)


def _strided_slice(b: _Builder, x: Expr, xs: Shape) -> bool:
    draw, rank = b.draw, len(xs)
    if not rank:
        return False
    axis = draw(st.integers(0, rank - 1))
    begin = [0] * axis + [draw(st.sampled_from([0, 1, -1, -2]))]
    end = [2**31 - 1] * axis + [draw(st.sampled_from([2**31 - 1, -1, 2, 0]))]
    stride = draw(st.sampled_from([1, 2, -1]))
    if stride < 0:
        begin[-1], end[-1] = -1, draw(st.sampled_from([-(2**31), 0, 1]))
    strides = [1] * axis + [stride]
    return b.call("strided_slice", [x], [xs], begin=begin, end=end, strides=strides)


def _with_weight(b: _Builder, x: Expr, xs: Shape, family: str) -> bool:
    """``nn.dense`` or ``nn.matmul`` of ``x`` by a new weight parameter."""
    if len(xs) < (1 if family == "dense" else 2):
        return False
    k = xs[-1]
    if not isinstance(k, int):
        return False
    units = b.draw(st.sampled_from([1, 2, 3, *b.symbols]))
    w, ws = b.param((units, k) if family == "dense" else (k, units))
    b.values.pop()  # the weight is a parameter, not a value to build on
    return b.call(f"nn.{family}", [x, w], [xs, ws])


def _if(b: _Builder, x: Expr, xs: Shape) -> bool:
    y, ys = b.pick()
    cond = ir.call("greater", ir.call("sum", x), ir.const(0.0, "float32"))
    ops = b.draw(st.lists(st.sampled_from(UNARY), min_size=2, max_size=2))
    then, other = (ir.call(op, y) for op in ops)
    b.values.append((ir.If(cond, then, other), ys))
    return True


#: How ``_step`` adds an op of each family (False: the picked value does not fit it).
_FAMILY_STEPS: dict[str, Callable[[_Builder, Expr, Shape], bool]] = {
    "unary": _unary,
    "binary": _binary,
    "reduce": _reduce,
    "reshape": _reshape,
    "transpose": _transpose,
    "concatenate": _concatenate,
    "take": _take,
    "strided_slice": _strided_slice,
    "dense": lambda b, x, xs: _with_weight(b, x, xs, "dense"),
    "matmul": lambda b, x, xs: _with_weight(b, x, xs, "matmul"),
    "if": _if,
}
assert set(_FAMILY_STEPS) == set(FAMILIES)


@st.composite
def programs(
    draw: st.DrawFn,
    families: Sequence[str] = FAMILIES,
    max_ops: int = 6,
    symbols: Sequence[str] = ("n", "m"),
) -> Module:
    """A random well-typed module over float32 tensors with symbolic dims (see the module
    docstring); ``families`` chooses the op families (names from ``FAMILIES``)."""
    unknown = set(families) - set(FAMILIES)
    if unknown:
        raise ValueError(f"unknown op families {sorted(unknown)} (known: {', '.join(FAMILIES)})")
    b = _Builder(draw, symbols)
    rank = draw(st.integers(1, 3))
    b.param(tuple(b.dim() for _ in range(rank)))
    made = 0
    for _ in range(draw(st.integers(1, max_ops)) * 3):
        if made >= max_ops:
            break
        made += _step(b, draw(st.sampled_from(list(families))))
    results = [v for v, _ in b.values[-2:]]
    body = results[-1] if len(results) == 1 or draw(st.booleans()) else ir.tuple_of(results)
    return Module.from_main(ir.function(b.params, body))


def symbol_values(binding: Mapping[str, int]) -> dict[sympy.Symbol, int]:
    """A binding by name as a binding by symbol (for ``DeferredCheck.holds`` and the like)."""
    return {ir.sym(k): v for k, v in binding.items()}
