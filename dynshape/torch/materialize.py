"""A dim as a run-time tensor: ``past + seq`` fed to tensor arithmetic (``arange(past,
past + seq)``, ``x * seq``).

Each symbol is read off the shape of an input that has it as a dim (``take(shape_of(x),
axis)``); the expression is built with integer ops (``floor`` of a quotient is
``floor_divide``, ``Mod`` is ``mod``, ``Max``/``Min`` are ``maximum``/``minimum``), in int64,
then cast.
"""

from __future__ import annotations

from typing import Any

import sympy

from dynshape.builder import trace
from dynshape.builder.dim_sources import record_dim_sources

from .registry import Unsupported


class Materializer:
    """Makes 0-d tensors of dims; knows where each symbol can be read."""

    def __init__(self) -> None:
        self.sources: dict[sympy.Basic, tuple[Any, int]] = {}
        """Symbol -> (an input Value that has it as a dim, the axis)."""
        self.made: dict[tuple[Any, str], Any] = {}

    def record(self, value: Any) -> None:
        """Remember where the plain symbols of ``value``'s shape can be read at run time."""
        record_dim_sources(self.sources, value)

    def __call__(self, dim: Any, dtype: str) -> Any:
        key = (dim, dtype)
        if key not in self.made:
            value = self._int64(dim)
            if dtype != "int64":
                value = trace.apply("cast", value, dtype=dtype)
            self.made[key] = value
        return self.made[key]

    def _int64(self, e: Any) -> Any:
        if isinstance(e, (int, sympy.Integer)):
            return trace.constant(int(e), "int64")
        if isinstance(e, sympy.Symbol):
            if e not in self.sources:
                raise Unsupported(f"size {e} is not read off any input")
            value, axis = self.sources[e]
            shape = trace.apply("shape_of", value, dtype="int64")
            return trace.apply("take", shape, trace.constant(axis, "int64"), axis=0)
        args = [self._int64(a) for a in e.args]
        if isinstance(e, sympy.Add):
            return _fold("add", args)
        if isinstance(e, sympy.Mul):
            return _fold("multiply", args)
        if isinstance(e, sympy.floor) and isinstance(e.args[0], sympy.Mul):
            num, den = sympy.fraction(e.args[0])
            return trace.apply("floor_divide", self._int64(num), self._int64(den))
        if isinstance(e, sympy.Mod):
            return trace.apply("mod", *args)
        if isinstance(e, sympy.Max):
            return _fold("maximum", args)
        if isinstance(e, sympy.Min):
            return _fold("minimum", args)
        raise Unsupported(f"size {e} as a tensor")


def _fold(op: str, args: list[Any]) -> Any:
    out = args[0]
    for a in args[1:]:
        out = trace.apply(op, out, a)
    return out
