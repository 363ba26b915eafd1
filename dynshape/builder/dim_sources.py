"""Where an importer can read each plain symbol of its inputs' shapes at run time."""

from __future__ import annotations

from typing import Any

import sympy

import ir


def record_dim_sources(sources: dict[sympy.Basic, tuple[Any, int]], value: Any) -> None:
    """Note in ``sources`` (symbol -> (value, axis)) each plain symbol of ``value``'s tensor
    type not noted yet: the first value seen with it as a dim, and the axis."""
    ty = getattr(value, "type", None)
    if not isinstance(ty, ir.TensorType):
        return
    for axis, d in enumerate(ty.shape):
        if isinstance(d, sympy.Symbol) and d not in sources:
            sources[d] = (value, axis)
