"""Compiling dim expressions (sympy, compile time) into VM shape programs (ints, run time).

A dim such as ``12*max(m, n)*min(1, m, n)`` or ``(n + 1) // 2`` becomes a few integer nodes over
the registers that hold the bound symbols. A dim that sympy writes with fractions but whose
value is an integer (``ceil(m/2) - min(2, 2*n)/2``) is computed as ``(q*dim) // q``, exactly.
sympy is used here, while compiling, and never by the VM.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import sympy

import ir
from ir.dim_proofs import coefficient_denominator
from vm import ShapeProgramBuilder
from vm.shape_program import Value

from ..errors import CompileError

#: A compiled value: an int known now, or a node of the program being built.
Term = int | Value


class ShapeExprCompiler:
    """Builds one shape program computing several dims from the symbols they mention."""

    def __init__(self, symbols: Sequence[sympy.Symbol]) -> None:
        self.symbols = list(symbols)
        self.builder = ShapeProgramBuilder([_name(s) for s in self.symbols])
        self.inputs: dict[sympy.Basic, Value] = dict(
            zip(self.symbols, self.builder.inputs, strict=True)
        )
        self.memo: dict[sympy.Basic, Term] = {}

    def term(self, expr: ir.Dim) -> Term:
        """The program value of ``expr``."""
        if isinstance(expr, int):
            return expr
        if expr in self.memo:
            return self.memo[expr]
        out = self._term(expr)
        self.memo[expr] = out
        return out

    def _term(self, e: sympy.Basic) -> Term:
        if isinstance(e, sympy.Integer):
            return int(e)
        if isinstance(e, sympy.Symbol):
            if e not in self.inputs:
                raise CompileError(f"the dim symbol {e} is not bound where it is needed")
            return self.inputs[e]
        if isinstance(e, (sympy.Add, sympy.Mul)):
            q = coefficient_denominator(e)
            if q != 1:
                # An integer written with a fraction (sympy turns ceil(a - b/2) into
                # ceil(a) - b/2 when it knows b/2 is an integer): q*e has integer
                # coefficients and is divisible by q, so floor division by q is exact.
                return self.term(sympy.expand(q * e)) // q
            if isinstance(e, sympy.Add):
                return _fold(self, e.args, lambda a, b: a + b)
            return _fold(self, e.args, lambda a, b: a * b)
        if isinstance(e, (sympy.Max, sympy.Min)):
            pick = self.builder.max if isinstance(e, sympy.Max) else self.builder.min
            terms = [self.term(a) for a in e.args]
            acc = terms[0]
            for t in terms[1:]:
                acc = pick(acc, t)
            return acc
        if isinstance(e, sympy.Pow) and e.exp.is_Integer and int(e.exp) >= 0:
            base = self.term(e.base)
            power: Term = 1
            for _ in range(int(e.exp)):  # n**2 and the like: a dim's exponent is small
                power = power * base
            return power
        if isinstance(e, sympy.Mod):
            return self.term(e.args[0]) % self.term(e.args[1])
        if isinstance(e, (sympy.floor, sympy.ceiling)):
            num, den = sympy.fraction(sympy.together(e.args[0]))
            n, d = self.term(num), self.term(den)
            if isinstance(e, sympy.floor):
                return n // d
            return -((-n) // d)
        raise CompileError(f"cannot compute the dim {e} at run time (unsupported {e.func})")


def _fold(c: ShapeExprCompiler, args: Sequence[sympy.Basic], op: object) -> Term:
    terms = [c.term(a) for a in args]
    acc = terms[0]
    for t in terms[1:]:
        acc = op(acc, t)  # type: ignore[operator]
    return acc


def _name(s: sympy.Basic) -> str:
    return str(s) if not ir.is_anonymous(s) else f"?{s.name}"


def needed_symbols(dims: Sequence[ir.Dim]) -> list[sympy.Symbol]:
    """The symbols the dims mention, in a deterministic order."""
    found = set().union(*(ir.free_symbols(d) for d in dims))
    return sorted(found, key=lambda s: (ir.is_anonymous(s), str(s), getattr(s, "dummy_index", 0)))


def symbol_registers(
    symbols: Sequence[sympy.Symbol], registers: Mapping[sympy.Basic, object], what: str
) -> list[object]:
    """The registers holding ``symbols``; a missing one is a compile error naming it."""
    out = []
    for s in symbols:
        if s not in registers:
            raise CompileError(f"{what}: the dim symbol {_name(s)} is not bound here")
        out.append(registers[s])
    return out
