"""ONNX sequences and optionals, which are not tensors and have no IR type (design/onnx.md).

A sequence is an import-time Python tuple of its tensors (builder Values or ``Known``s): its
length must be known at import, and every sequence op (``SequenceAt``, ``SequenceInsert``,
``ConcatFromSequence``, ...) is a list operation there, building at most tensor ops on the
elements. An optional is its value or nothing, which must also be known at import. A sequence
whose length depends on data (carried through a ``Loop`` with a trip count from data, an
``If`` on data returning sequences of different lengths) is refused as unsupported.

A graph input or output that is a sequence or an optional is a run of the program's tensors
(``Slot``): a sequence input of length 3 named ``x`` is the inputs ``x.0``, ``x.1``, ``x.2``,
whose lengths the caller gives at import (``load(..., sequences={"x": 3})``); an optional input
is its tensor(s), or nothing when the caller says it is empty (``empty={"x"}``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Sequence:
    """An ONNX sequence: its tensors (Values or ``Known``s), all of element type ``dtype``."""

    items: tuple[Any, ...]
    dtype: str


@dataclass(frozen=True)
class Optional:
    """An ONNX optional: a tensor or a ``Sequence``, or None when empty."""

    value: Any


@dataclass(frozen=True)
class Slot:
    """How one ONNX graph input or output lies in the program's flat list of tensors."""

    name: str
    kind: str
    """``tensor``, ``sequence``, ``optional tensor`` or ``optional sequence``."""
    count: int
    """How many of the program's tensors it is: 1 for a tensor, a sequence's length, 0 for an
    empty optional."""
    present: bool = True
    """False for an empty optional."""


def structured(value: Any) -> bool:
    """Whether ``value`` is a sequence or an optional (not a tensor)."""
    return isinstance(value, (Sequence, Optional))


def flatten(name: str, value: Any) -> tuple[Slot, list[tuple[str, Any]]]:
    """The slot of a graph output ``value`` named ``name``, and its tensors with their names."""
    if isinstance(value, Optional):
        if value.value is None:
            return Slot(name, "optional tensor", 0, present=False), []
        inner, tensors = flatten(name, value.value)
        return Slot(name, f"optional {inner.kind}", inner.count), tensors
    if isinstance(value, Sequence):
        items = [(f"{name}.{k}", v) for k, v in enumerate(value.items)]
        return Slot(name, "sequence", len(items)), items
    return Slot(name, "tensor", 1), [(name, value)]


def regroup(slots: list[Slot], tensors: list[Any]) -> list[Any]:
    """The program's flat results as the graph's outputs: a list per sequence, None for an
    empty optional (``slots`` as ``flatten`` made them)."""
    out: list[Any] = []
    at = 0
    for slot in slots:
        part = tensors[at : at + slot.count]
        at += slot.count
        if not slot.present:
            out.append(None)
        elif slot.kind.endswith("sequence"):
            out.append(list(part))
        else:
            out.append(part[0])
    return out
