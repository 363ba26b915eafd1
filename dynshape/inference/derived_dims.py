"""Derived dims: a parameter dim ``a*s + b`` determines its symbol ``s`` (torch.export's
``2*dim + 1``), when ``a`` is an integer >= 1, ``s`` is the dim's one symbol not bound yet and
``b`` uses only bound symbols. Then ``s = (d - b) / a`` for the axis's value ``d``, valid when
``d - b`` is a non-negative multiple of ``a``.

Used at function entry (``analysis/entry_binding.py``, compiled by the lowering) and at calls of
globals (``type_relations.instantiate_call``), so both bind the same symbols the same way.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

import sympy

import ir


@dataclass(frozen=True)
class AffineInverse:
    """``symbol = (d - offset) / scale`` for a dim ``scale*symbol + offset``."""

    symbol: sympy.Symbol
    scale: int
    """An integer >= 1."""
    offset: sympy.Expr
    """An expression of the bound symbols (often an int)."""


def affine_inverse(dim: ir.Dim, bound: Collection[sympy.Basic]) -> AffineInverse | None:
    """The inverse of ``dim`` if it is ``a*s + b`` in one symbol ``s`` not in ``bound``, else
    None (a static dim, several unbound symbols, ``n*n``, ``n // 2``, ``m*n``...)."""
    if isinstance(dim, int):
        return None
    free = [s for s in ir.free_symbols(dim) if s not in bound]
    if len(free) != 1:
        return None
    (s,) = free
    e = sympy.expand(dim)
    scale = e.coeff(s, 1)
    offset = sympy.expand(e - scale * s)
    if not (scale.is_Integer and scale >= 1) or s in offset.free_symbols:
        return None
    return AffineInverse(s, int(scale), offset)
