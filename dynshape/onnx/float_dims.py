"""Shape values in float math: exact where floats are exact, run-time values everywhere else.

Exporters compute sizes and scales in floating point: the attention scale ``1 / sqrt(d)`` of
``Cast(Shape(q)[-1], float)``, an image halved as ``Floor(Cast(h, float) * 0.5)`` and cast back
to ``int64`` for a ``Resize``. A ``Known`` of a float dtype may hold sympy expressions of dims
for this (``known.py``); its elements are built here, by rules that keep them *equal to what the
float arithmetic computes*:

- ``Cast`` of a dim ``e`` to a float type is ``AsFloat(e, bits)``: the value of ``e`` as that
  float, exact only while ``|e| <= 2**bits`` (``bits`` the type's significand: 11, 24, 53);
- ``Mul`` and ``Div`` by a numeric power of two are exact (an exponent shift) and fold;
- ``Floor`` and ``Ceil`` fold;
- ``Cast`` back to an integer type folds when the element is integer-valued (a ``floor`` or
  ``ceiling``, or an integer expression): each ``AsFloat(e, bits)`` in it becomes ``e``, and the
  program requires ``e <= 2**bits`` (the input dims' ranges are narrowed so, ``InputDims
  .at_most``; a larger input is refused at entry, naming the dim, rather than computed with a
  size the float math would not give).
Anything else (``Sqrt``, ``Add`` of floats, a division by 3) returns None, and the caller builds
the ops on the materialised value, which computes the float math at run time exactly as the
model does. So no rule can give a wrong size: it folds or it runs.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import sympy

import ir

#: Significand bits of each float dtype: its integers are exact up to ``2**bits``.
SIGNIFICAND_BITS = {"float16": 11, "float32": 24, "float64": 53}


class AsFloat(sympy.Function):  # type: ignore[misc]  # sympy has no stubs: Function is Any
    """``AsFloat(e, bits)``: the integer dim ``e`` converted to a float of ``bits`` significand
    bits (exact while ``|e| <= 2**bits``). Unevaluated, so that the requirement travels with the
    value through every shape op until the value comes back as a dim or runs."""

    is_real = True

    @classmethod
    def eval(cls, e: sympy.Expr, bits: sympy.Integer) -> sympy.Expr | None:
        if e.is_Integer and abs(int(e)) <= 2 ** int(bits):
            return sympy.Integer(e)  # an exact constant
        return None


def as_float(dim: Any, dtype: str) -> sympy.Expr:
    """Element ``dim`` (an int or a sympy dim) cast to the float ``dtype``."""
    return AsFloat(sympy.sympify(dim), sympy.Integer(SIGNIFICAND_BITS[dtype]))


def _power_of_two(v: Any) -> sympy.Rational | None:
    """``v`` as an exact rational when it is a finite, non-zero number whose binary significand
    is 1 (so that multiplying by it only shifts an exponent), else None."""
    if isinstance(v, sympy.Basic):
        if not v.is_Rational or v == 0:
            return None
        p, q = int(v.p), int(v.q)
        return v if (abs(p) & (abs(p) - 1)) == 0 and (q & (q - 1)) == 0 else None
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, float, np.integer, np.floating)):
        return None
    f = float(v)
    if not math.isfinite(f) or f == 0:
        return None
    mantissa, _ = math.frexp(f)
    return sympy.Rational(f) if abs(mantissa) == 0.5 else None


def _is_float_dim(v: Any) -> bool:
    return isinstance(v, sympy.Basic) and bool(v.atoms(AsFloat))


def scaled(a: Any, b: Any) -> sympy.Expr | None:
    """``a * b`` when one is a float dim and the other a power of two (exact), else None."""
    for x, y in ((a, b), (b, a)):
        factor = _power_of_two(y)
        if _is_float_dim(x) and factor is not None:
            return sympy.Mul(x, factor)
    return None


def divided(a: Any, b: Any) -> sympy.Expr | None:
    """``a / b`` for a float dim ``a`` and a power of two ``b`` (exact), else None."""
    divisor = _power_of_two(b)
    if _is_float_dim(a) and divisor is not None:
        return sympy.Mul(a, 1 / divisor)
    return None


def floored(a: Any) -> sympy.Expr | None:
    return sympy.floor(a) if _is_float_dim(a) else None


def ceiled(a: Any) -> sympy.Expr | None:
    return sympy.ceiling(a) if _is_float_dim(a) else None


#: The ONNX ops that fold on float dims (see the module doc), by op type.
FOLDING: dict[str, Callable[..., sympy.Expr | None]] = {
    "Mul": scaled,
    "Div": divided,
    "Floor": floored,
    "Ceil": ceiled,
}


def requirements(elements: Any) -> set[tuple[sympy.Expr, int]]:
    """Every ``(e, bits)`` of the ``AsFloat`` atoms in ``elements`` (a flat iterable)."""
    found: set[tuple[sympy.Expr, int]] = set()
    for v in elements:
        if isinstance(v, sympy.Basic):
            found.update((a.args[0], int(a.args[1])) for a in v.atoms(AsFloat))
    return found


def as_dim(v: Any) -> ir.Dim | None:
    """Float element ``v`` as an integer dim (each ``AsFloat(e, _)`` replaced by ``e``), or None
    when it is not integer-valued."""
    if not isinstance(v, sympy.Basic):
        f = float(v)
        return int(f) if f.is_integer() and f >= 0 else None
    plain = v.replace(AsFloat, lambda e, _bits: e)
    if not plain.is_integer:
        return None
    try:
        return ir.check_dim(ir.simplify(plain))
    except ir.IRError:  # negative, or not a dim
        return None
