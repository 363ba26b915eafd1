"""A ``Known`` as a run-time tensor: a constant, or for a symbolic one, ops computing its dims.

A numeric ``Known`` becomes one constant (the same constant each time it is used). A symbolic
one (``[batch, seq*4]`` fed to an op that takes a tensor) is computed at run time from where its
symbols come from: each symbol is read off the shape of a tensor that has it as a dim
(``take(shape_of(x), 1)``), and the expression is built with integer ops (``floor`` of a
quotient is ``floor_divide``, ``Mod`` is ``mod``, ``Min``/``Max`` are ``minimum``/``maximum``).
A float one holds dims as floats (``float_dims.AsFloat``): the dim is computed as an integer and
cast, and its exact power-of-two scalings are divisions in the float type.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import sympy

import ir
from dynshape.builder import trace
from dynshape.builder.dim_sources import record_dim_sources

from .float_dims import AsFloat
from .known import Known
from .registry import NodeError, Unsupported


class Materializer:
    """Makes run-time tensors of ``Known`` values; knows where each symbol can be read."""

    def __init__(self) -> None:
        self.sources: dict[sympy.Basic, tuple[Any, int]] = {}
        """Symbol -> (a Value that has it as a dim, the axis)."""
        self.constants: dict[int, Any] = {}
        """id of a Known -> its constant Value (a weight used twice is one constant)."""
        self._kept: list[Known] = []  # keeps the ids above valid
        self.scalars: dict[tuple[sympy.Basic, str], Any] = {}
        """(dim, dtype) -> the 0-d tensor computing it (each computed once)."""

    def record(self, value: Any) -> None:
        """Remember where the plain symbols of ``value``'s shape can be read at run time."""
        record_dim_sources(self.sources, value)

    def __call__(self, known: Known) -> Any:
        numeric = known.numeric()
        if numeric is not None:
            if id(known) not in self.constants:
                self.constants[id(known)] = trace.constant(numeric, known.dtype)
                self._kept.append(known)
            return self.constants[id(known)]
        scalars = [self.scalar(d, known.dtype) for d in known.dims()]
        if not known.shape:
            return scalars[0]
        flat = trace.apply("stack", scalars, axis=0)
        if len(known.shape) == 1:
            return flat
        return trace.apply("reshape", flat, newshape=list(known.shape))

    def scalar(self, d: ir.Dim, dtype: str) -> Any:
        """A 0-d tensor of ``dtype`` computing dim ``d`` at run time."""
        if isinstance(d, int):
            return trace.constant(np.array(d, dtype=dtype), dtype)
        return self._expr(sympy.sympify(d), dtype)

    def _expr(self, e: sympy.Expr, dtype: str) -> Any:
        key = (e, dtype)
        if key not in self.scalars:
            self.scalars[key] = self._build(e, dtype)
        return self.scalars[key]

    def _build(self, e: sympy.Expr, dtype: str) -> Any:
        if e.is_Integer:
            return trace.constant(np.array(int(e), dtype=dtype), dtype)
        if isinstance(e, sympy.Symbol):
            if e not in self.sources:
                # a size from data made inside a subgraph (an If branch inlined on a known
                # condition): its values are not sources outside the subgraph's scope
                raise Unsupported(f"the dim {e} cannot be computed at run time: no tensor has it")
            value, axis = self.sources[e]
            dim = trace.apply("take", trace.apply("shape_of", value, dtype="int64"), axis)
            return dim if dtype == "int64" else trace.apply("cast", dim, dtype=dtype)
        if isinstance(e, sympy.Add):
            return self._fold("add", e.args, dtype)
        if isinstance(e, AsFloat):  # a dim as a float (float_dims.py): computed, then cast
            return trace.apply("cast", self._expr(e.args[0], "int64"), dtype=dtype)
        if isinstance(e, sympy.Mul):
            num, den = sympy.fraction(e)
            product = self._fold("multiply", sympy.Mul.make_args(num), dtype)
            if den == 1:
                return product
            if np.dtype(dtype).kind != "f":
                raise NodeError(f"the dim {e} is not an integer")
            return trace.apply("divide", product, self._expr(den, dtype))
        if isinstance(e, sympy.Pow) and e.exp.is_Integer and e.exp > 0:
            return self._fold("multiply", [e.base] * int(e.exp), dtype)
        if isinstance(e, (sympy.floor, sympy.ceiling)):
            num, den = sympy.fraction(sympy.together(e.args[0]))
            if isinstance(e, sympy.ceiling):  # ceil(a / b) = -floor(-a / b)
                q = self._binary("floor_divide", -num, den, dtype)
                return trace.apply("negative", q)
            return self._binary("floor_divide", num, den, dtype)
        if isinstance(e, sympy.Mod):
            return self._binary("mod", e.args[0], e.args[1], dtype)
        if isinstance(e, sympy.Min):
            return self._fold("minimum", e.args, dtype)
        if isinstance(e, sympy.Max):
            return self._fold("maximum", e.args, dtype)
        raise NodeError(f"the dim {e} cannot be computed at run time")

    def _binary(self, op: str, a: sympy.Expr, b: sympy.Expr, dtype: str) -> Any:
        return trace.apply(
            op, self._expr(sympy.sympify(a), dtype), self._expr(sympy.sympify(b), dtype)
        )

    def _fold(self, op: str, args: Any, dtype: str) -> Any:
        out = None
        for a in args:
            term = self._expr(a, dtype)
            out = term if out is None else trace.apply(op, out, term)
        return out
