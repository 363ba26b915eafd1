"""The row states of ``batch_rows``' proof, its refusal, and the helpers its rules share."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import sympy

import ir
from ir import Call, Expr, TensorType

if TYPE_CHECKING:
    from .row_values import ValueBounds


@dataclass(frozen=True)
class Rows:
    """Row state: the dim at ``axis`` is ``b * group``; its entries ``[i*group, (i+1)*group)``
    come from input row ``i`` alone."""

    axis: int
    group: ir.Dim = 1


@dataclass(frozen=True)
class StridedRows:
    """Row state of an axis that merged ``outer`` blocks with the rows (a C-order reshape of
    ``(outer, b * group, ...)`` into one axis, as PyTorch's multi-head attention flattens its
    ``(tokens, batch)``): the dim at ``axis`` is ``outer * b * group`` and entry
    ``o * b * group + i * group + g`` comes from input row ``i`` alone. Only a few rules take
    it (reshapes, elementwise ops, ``nn.dense`` and transposes, which keep each entry on its
    axis); any other op refuses it."""

    axis: int
    outer: ir.Dim
    group: ir.Dim = 1


class Fixed:
    """Row state: the same value in every piece (no input row, no ``b`` in the type)."""

    def __repr__(self) -> str:
        return "FIXED"


FIXED = Fixed()


@dataclass(frozen=True)
class ShapeOf:
    """Row state of ``shape_of`` of a value with rows: its dims, of which only those free of
    ``b`` may be read (``take`` at a constant index)."""

    dims: tuple[Any, ...]


@dataclass(frozen=True)
class RowIndex:
    """Row state of an integer value numbering the rows: its dim at ``axis`` is ``b``, and its
    entries in row ``i`` are ``scale * i + r`` with ``r`` computed from row ``i`` alone (or
    fixed) and in ``[lo, hi]`` (dims free of ``b``), or, with ``beyond``, at least
    ``beyond`` (a dim that may mention ``b``: the out-of-range index exported clamps put
    where an index is bad, which must make a gather fail in either run). A piece numbers
    its own rows from 0, so the value differs between pieces: it may only gather from a
    value whose rows are groups of ``scale`` entries (``take``, where row ``i`` reads its
    own group in either run), or be compared where its bounds decide the answer."""

    axis: int
    scale: ir.Dim
    lo: ir.Dim
    hi: ir.Dim
    beyond: ir.Dim | None = None
    varies: bool = False
    """Whether ``r`` is computed from the row's data (an index clamped from an input), not
    the same in every row (column numbers): a gather then needs ``r`` proven inside the
    row's group, since only some rows may reach the next row (``_gather_own_rows``)."""


@dataclass(frozen=True)
class Unproven:
    """Row state of a value not proven to compute row by row, kept while it may still be
    dropped: by a ``where`` whose condition is decided, a comparison that its bounds decide,
    an ``arange`` whose length is the batch. Reaching a result, or an op that is not known
    to never fail (whose failing run only would then differ), refuses with ``reason``."""

    reason: str


State = Rows | StridedRows | Fixed | ShapeOf | RowIndex | Unproven | tuple["State", ...]


class NotRowWise(Exception):
    """The function is not proven to compute row by row; ``reason`` says where and why."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class Proof(Protocol):
    """What a rule (``row_rules``) may ask of the proof walking the function
    (``batch_rows.RowProof``)."""

    b: sympy.Symbol
    """The batch symbol."""

    def mentions(self, d: Any) -> bool:
        """Whether the dim ``d`` mentions the batch symbol."""
        ...

    def mentions_any(self, value: Any) -> bool:
        """Whether an attribute value (dims, lists of them) mentions it."""
        ...

    def attr_mentions(self, call: Call) -> bool:
        """Whether any attribute of ``call`` mentions it."""
        ...

    def group_of(self, d: Any) -> ir.Dim | None:
        """``g`` when ``d`` is ``b * g``, else None."""
        ...

    def rows_from_shape(self, call: Expr, shape: Sequence[Any]) -> State:
        """The state of a value built from no row with this shape."""
        ...

    def broadcast(self, call: Call, args: Sequence[State]) -> State:
        """The state of an elementwise op after numpy broadcasting."""
        ...

    @property
    def values(self) -> ValueBounds:
        """Bounds of the function's integer values, and decided comparisons."""
        ...

    def state(self, expr: Expr) -> State:
        """The row state of an expression already walked."""
        ...

    def alias(self, dim: Any, value: Any) -> None:
        """Record that the symbol ``dim`` of a result's type equals ``value`` in every run."""
        ...


def axis_index(axis: int, rank: int) -> int:
    return axis + rank if axis < 0 else axis


def same_dim(a: Any, b: Any) -> bool:
    if isinstance(a, int) and isinstance(b, int):
        return a == b
    return bool(sympy.simplify(sympy.sympify(a) - sympy.sympify(b)) == 0)


def product(dims: Sequence[Any]) -> Any:
    out: Any = 1
    for d in dims:
        out = out * d
    return out


def tensor_type(node: Expr) -> TensorType:
    ty = node.ty
    if not isinstance(ty, TensorType):
        raise NotRowWise(f"{what(node)}: not a typed tensor (run type inference first)")
    return ty


def leaf_types(ty: Any) -> list[TensorType]:
    if ty is None:
        raise NotRowWise("a value without a type (run type inference first)")
    return ir.tensor_leaves(ty)


def leaves(state: State) -> list[State]:
    if isinstance(state, tuple):
        return [leaf for s in state for leaf in leaves(s)]
    return [state]


def leaves_of(states: Sequence[State]) -> list[State]:
    return [leaf for s in states for leaf in leaves(s)]


def op_name(node: Expr) -> str:
    """The op's name of a call ("" for anything else)."""
    return node.op.name if isinstance(node, Call) and node.op is not None else ""


def kind(state: State) -> str:
    if isinstance(state, tuple):
        return "a tuple"
    if isinstance(state, RowIndex):
        return "a row number (each piece numbers its rows from 0)"
    if isinstance(state, Unproven):
        return f"not proven ({state.reason})"
    if isinstance(state, StridedRows):
        return f"rows strided by {state.outer} blocks (its axis merged them with the rows)"
    return "a shape with the batch in it"


def what(node: Expr) -> str:
    """The op and its result type: spans of imported models name the importer, not the model."""
    name = node.op.name if isinstance(node, Call) and node.op is not None else type(node).__name__
    return f"{name} -> {node.ty}" if node.ty is not None else name
