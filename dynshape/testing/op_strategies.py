"""Hypothesis strategies of ``check_op``: an op's attributes and argument lists.

Only ``check_op`` uses them, and imports this module when it is called, so that importing
``dynshape.testing`` does not need Hypothesis (a development dependency).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import hypothesis.strategies as st
import numpy as np

import ir

from .inputs import random_array

Shape = tuple[int, ...]
#: The shapes of one example: per operand, a shape (a list of shapes for a tuple operand).
ShapeExample = Sequence[Shape | Sequence[Shape]]


def attrs(op: ir.OpDef, given: Mapping[str, Any]) -> tuple[st.SearchStrategy[dict[str, Any]], bool]:
    """The attribute strategy (given values, fixed or drawn, else drawn where meaningful) and
    whether it draws anything."""
    parts: dict[str, st.SearchStrategy[Any]] = {}
    for a in op.attrs:
        if a.name in given:
            v = given[a.name]
            parts[a.name] = v if isinstance(v, st.SearchStrategy) else st.just(v)
        elif a.kind.name == "bool":
            parts[a.name] = st.booleans()
        elif a.name == "axis" and "int" in a.kind.name:
            # Values of the wrong kind for this attribute (None where it must be an int) are
            # rejected by make_attrs, out-of-range axes by the shape function.
            parts[a.name] = st.sampled_from([a.default, -1, 0, 1])
    varies = any(isinstance(given.get(k), st.SearchStrategy) or k not in given for k in parts)
    return st.fixed_dictionaries(parts), varies


def arguments(
    op: ir.OpDef,
    shapes: Sequence[ShapeExample] | st.SearchStrategy[ShapeExample] | None,
    inputs: Sequence[Sequence[Any]] | st.SearchStrategy[Sequence[Any]] | None,
    dtypes: Sequence[str],
    max_rank: int,
    max_dim: int,
) -> st.SearchStrategy[list[Any]]:
    """The strategy of argument lists, from the caller's inputs or shapes, or drawn."""
    if inputs is not None:
        given = inputs if isinstance(inputs, st.SearchStrategy) else st.sampled_from(list(inputs))
        return given.map(lambda args: [_as_input(a) for a in args])
    if shapes is None:
        shape_strategy: st.SearchStrategy[ShapeExample] = _related_shapes(op, max_rank, max_dim)
    elif isinstance(shapes, st.SearchStrategy):
        shape_strategy = shapes
    else:
        shape_strategy = st.sampled_from(list(shapes))
    return st.builds(_arrays, shape_strategy, st.sampled_from(list(dtypes)), st.integers(0, 2**16))


def _as_input(arg: Any) -> Any:
    if isinstance(arg, (tuple, list)):
        return tuple(np.asarray(a) for a in arg)
    return np.asarray(arg)


def _arrays(shapes: ShapeExample, dtype: str, seed: int) -> list[Any]:
    """Random arrays of ``dtype`` in the given shapes (a tuple of arrays for a list)."""
    rng = np.random.default_rng(seed)
    out: list[Any] = []
    for s in shapes:
        if isinstance(s, list):
            out.append(tuple(random_array(rng, tuple(x), dtype) for x in s))
        else:
            out.append(random_array(rng, tuple(s), dtype))  # type: ignore[arg-type]
    return out


def _related_shapes(op: ir.OpDef, max_rank: int, max_dim: int) -> st.SearchStrategy[Any]:
    """Per operand a variant of one drawn base shape (the same; broadcast against it, with some
    dims 1 and maybe fewer axes; one of its dims; or unrelated), so that ops relating their
    operands' dims (broadcasting, matching axes, a per-channel vector) accept a good share."""

    @st.composite
    def draw_shapes(draw: Callable[[st.SearchStrategy[Any]], Any]) -> list[Any]:
        dim = st.integers(0, max_dim)
        base = tuple(draw(st.lists(dim, max_size=max_rank)))

        def variant() -> Shape:
            how = draw(st.sampled_from(["same", "broadcast", "one axis", "independent"]))
            if how == "same":
                return base
            if how == "one axis" and base:  # a bias, a scale: one dim of the base
                return (draw(st.sampled_from(base)),)
            if how == "broadcast":
                keep = draw(st.integers(0, len(base)))
                return tuple(1 if draw(st.booleans()) else d for d in base[len(base) - keep :])
            return tuple(draw(st.lists(dim, max_size=max_rank)))

        def along_one_axis() -> list[Shape]:
            # A tuple operand (concatenate, stack): shapes equal but maybe along one axis.
            count = draw(st.integers(1, 3))
            if not base or draw(st.booleans()):
                return [base] * count
            axis = draw(st.integers(0, len(base) - 1))
            return [(*base[:axis], draw(dim), *base[axis + 1 :]) for _ in range(count)]

        return [along_one_axis() if o.is_tuple else variant() for o in op.operands]

    return draw_shapes()
