"""The kit for the per-op property cases: a Case, the table of strategies, and symbolisation.

A case is one valid call of an op: its inputs (shapes, lists of shapes, numpy values for the
data-dependent inputs), its attributes, and the shape numpy actually produced for it (computed
by running the real numpy operation inside the strategy).
"""

from __future__ import annotations

import itertools
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import sympy
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import ir
from shape_funcs import UnknownValue


@dataclass
class Case:
    """One valid call of an op and numpy's result shape for it."""

    inputs: list[Any]
    """Shapes (tuples), lists of shapes (tuple operands) or numpy arrays (data-dependent)."""
    attrs: dict[str, Any]
    """The call's attributes."""
    expected: Any
    """numpy's result shape: a tuple, or a list of tuples for a tuple result."""
    static_ones: bool = False
    """Keep 1-dims static when symbolising (squeeze with axis=None squeezes only known 1s)."""
    value_shapes: bool = False
    """Make the shapes of unknown values symbolic too (argwhere: only the rank matters)."""


#: op name -> strategy of Cases.
CASES: dict[str, st.SearchStrategy[Case]] = {}


def cases(*ops: str) -> Callable[[Callable[[str], st.SearchStrategy[Case]]], None]:
    """Register ``make(op)`` as the strategy of Cases of each of ``ops``."""

    def decorate(make: Callable[[str], st.SearchStrategy[Case]]) -> None:
        for op in ops:
            assert op not in CASES, op
            CASES[op] = make(op)

    return decorate


def shapes(
    min_rank: int = 0, max_rank: int = 4, min_side: int = 0, max_side: int = 5
) -> st.SearchStrategy[tuple[int, ...]]:
    """Shapes with 0- and 1-dims included."""
    return hnp.array_shapes(
        min_dims=min_rank, max_dims=max_rank, min_side=min_side, max_side=max_side
    )


def numpy_shape(fn: Callable[[], Any]) -> Any:
    """The shape of ``fn()`` (a list of shapes for a list result), numpy warnings silenced."""
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        out = fn()
    if isinstance(out, (list, tuple)):
        return [tuple(o.shape) for o in out]
    return tuple(np.shape(out))


def ints(values: list[int]) -> np.ndarray:
    """An int64 numpy vector."""
    return np.array(values, dtype=np.int64).reshape(len(values))


# ---- symbolisation ---------------------------------------------------------------------------
_counter = itertools.count()


@dataclass
class Symbolised:
    """A case's inputs for the symbolic mode and the values its symbols stand for."""

    inputs: list[Any]
    binding: dict[sympy.Symbol, int] = field(default_factory=dict)


def symbolise(
    case: Case, mask: list[bool], data_dependent: tuple[bool, ...], known_values: bool
) -> Symbolised:
    """Replace dims by fresh named symbols where ``mask`` says so (cycled over all dims).

    Data-dependent inputs stay numpy arrays when ``known_values``, else become UnknownValues.
    """
    out = Symbolised([])
    flags = itertools.cycle(mask or [False])

    def dim(d: int) -> Any:
        if next(flags) and not (case.static_ones and d == 1):
            s = ir.sym(f"d{next(_counter)}")
            out.binding[s] = d
            return s
        return d

    def shape(s: tuple[int, ...]) -> tuple[Any, ...]:
        return tuple(dim(d) for d in s)

    for i, value in enumerate(case.inputs):
        if i < len(data_dependent) and data_dependent[i]:
            if known_values:
                out.inputs.append(value)
            else:
                vshape = shape(value.shape) if case.value_shapes else tuple(value.shape)
                out.inputs.append(UnknownValue(vshape, str(value.dtype)))
        elif isinstance(value, list):
            out.inputs.append([shape(s) for s in value])
        else:
            out.inputs.append(shape(value))
    return out


def evaluate(result: Any, binding: dict[sympy.Symbol, int]) -> Any:
    """A symbolic result with the symbols replaced by their values (ints), shape by shape."""
    if isinstance(result, list):
        return [evaluate(r, binding) for r in result]
    values = {s: sympy.Integer(v) for s, v in binding.items()}
    out = []
    for d in result:
        v = d if isinstance(d, int) else sympy.sympify(d).xreplace(values)
        assert isinstance(v, (int, sympy.Integer)), f"{d} did not evaluate: {v}"
        out.append(int(v))
    return tuple(out)


def has_anonymous(dim: Any) -> bool:
    """True if a dim mentions a fresh (``?``) symbol."""
    return not isinstance(dim, int) and any(ir.is_anonymous(s) for s in dim.free_symbols)
