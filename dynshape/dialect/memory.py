"""The memory dialect, typed: one class per op, with a constructor and typed fields.

The ops are declared once in the IR's catalogue (``ir/ops/memory.py``: operands, attribute
kinds, documentation; what the parser and printer need). This module is how the compiler
*uses* them: ``AllocStorage.make(size, alignment, dtype_hint)`` builds a call, and
``memory_op(value)`` returns the typed view of a call of the dialect (``AllocStorage``,
``AllocTensor``, ..., or None for anything else), found by the op's identity, so passes read
``op.size`` rather than ``value.attrs["size"]`` and dispatch with ``isinstance`` or a table keyed
by class; a misspelt op is an ``AttributeError`` at import, not a silent miss.

A view is a frozen wrapper around the ``Call``; it holds no state of its own, so views are made
on demand and compared through their calls.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar, TypeVar

import ir
from ir import Call, Dim, Expr, OpDef, Span

__all__ = [
    "ALIGNMENT",
    "AllocStorage",
    "AllocTensor",
    "Check",
    "Invoke",
    "Kill",
    "MemoryOp",
    "ReshapeTensor",
    "ShapeFunc",
    "ShapeOf",
    "memory_op",
]


#: The alignment of every storage the compiler allocates, in bytes (a cache line, and the
#: widest SIMD load): ``manifest_alloc`` gives it to each storage, ``plan_memory`` to arenas and
#: to every offset in them.
ALIGNMENT = 64

V = TypeVar("V", bound="MemoryOp")


@dataclass(frozen=True, slots=True)
class MemoryOp:
    """A call of a memory-dialect op, seen through its typed fields."""

    NAME: ClassVar[str]
    """The op's name in the catalogue and the text format."""
    call: Call
    """The call this view reads."""

    @classmethod
    def op(cls) -> OpDef:
        """The op's definition (registered by the catalogue)."""
        return ir.get_op(cls.NAME)

    @classmethod
    def of(cls: type[V], value: Expr) -> V | None:
        """``value`` as a view of this class, or None if it is not a call of this op."""
        view = memory_op(value)
        return view if isinstance(view, cls) else None


@dataclass(frozen=True, slots=True)
class AllocStorage(MemoryOp):
    """``memory.alloc_storage(size=, alignment=, dtype_hint=)``: a new storage."""

    NAME: ClassVar[str] = "memory.alloc_storage"

    @property
    def size(self) -> Dim:
        """Bytes, a dim over the symbols bound where the storage is made."""
        return self.call.attrs["size"]

    @property
    def alignment(self) -> int:
        """The storage's alignment in bytes."""
        return int(self.call.attrs["alignment"])

    @property
    def dtype_hint(self) -> str:
        """The dtype of the tensors it is meant for (a hint for the allocator)."""
        return str(self.call.attrs["dtype_hint"])

    @staticmethod
    def make(size: Dim, alignment: int, dtype_hint: str, span: Span | None = None) -> Call:
        """A call that allocates ``size`` bytes."""
        return ir.call(
            AllocStorage.NAME, size=size, alignment=alignment, dtype_hint=dtype_hint, span=span
        )


@dataclass(frozen=True, slots=True)
class AllocTensor(MemoryOp):
    """``memory.alloc_tensor(storage, offset=, shape=, dtype=)``: a view of a storage."""

    NAME: ClassVar[str] = "memory.alloc_tensor"

    @property
    def storage(self) -> Expr:
        """The storage viewed."""
        return self.call.args[0]

    @property
    def offset(self) -> Dim:
        """The view's first byte in the storage."""
        return self.call.attrs["offset"]

    @property
    def shape(self) -> tuple[Dim, ...]:
        """The view's shape."""
        return tuple(self.call.attrs["shape"])

    @property
    def dtype(self) -> str:
        """The view's dtype."""
        return str(self.call.attrs["dtype"])

    @staticmethod
    def make(
        storage: Expr, offset: Dim, shape: Sequence[Dim], dtype: str, span: Span | None = None
    ) -> Call:
        """A call making a ``shape`` ``dtype`` view of ``storage`` at byte ``offset``."""
        return ir.call(
            AllocTensor.NAME, storage, offset=offset, shape=list(shape), dtype=dtype, span=span
        )


@dataclass(frozen=True, slots=True)
class Invoke(MemoryOp):
    """``memory.invoke(fn, (inputs...), (outputs...))``: run a primitive into its outputs."""

    NAME: ClassVar[str] = "memory.invoke"

    @property
    def fn(self) -> Expr:
        """The primitive function (a global of the module)."""
        return self.call.args[0]

    @property
    def inputs(self) -> Expr:
        """The inputs, a tuple expression."""
        return self.call.args[1]

    @property
    def outputs(self) -> Expr:
        """The destinations (results, then scratch), a tuple expression."""
        return self.call.args[2]

    @staticmethod
    def make(fn: Expr, inputs: Sequence[Expr], outputs: Sequence[Expr]) -> Call:
        """A call running ``fn`` on ``inputs`` into ``outputs``."""
        return ir.call(Invoke.NAME, fn, ir.tuple_of(inputs), ir.tuple_of(outputs))


@dataclass(frozen=True, slots=True)
class ShapeOf(MemoryOp):
    """``memory.shape_of(x)``: the run-time shape of ``x``."""

    NAME: ClassVar[str] = "memory.shape_of"

    @property
    def tensor(self) -> Expr:
        """The tensor whose shape is read."""
        return self.call.args[0]

    @staticmethod
    def make(x: Expr) -> Call:
        """A call reading ``x``'s shape."""
        return ir.call(ShapeOf.NAME, x)


@dataclass(frozen=True, slots=True)
class ShapeFunc(MemoryOp):
    """``memory.shape_func(fn, (inputs...), data_dependent=, out_shapes=)``: run a primitive's
    shape function and bind the new symbols of ``out_shapes``."""

    NAME: ClassVar[str] = "memory.shape_func"

    @property
    def fn(self) -> Expr:
        """The primitive whose shape function runs."""
        return self.call.args[0]

    @property
    def inputs(self) -> Expr:
        """A tuple expression: per parameter, its shape, or its value where ``data_dependent``."""
        return self.call.args[1]

    @property
    def data_dependent(self) -> tuple[int, ...]:
        """Per input: 1 if the shape function reads its value, 0 if only its shape."""
        return tuple(int(v) for v in self.call.attrs["data_dependent"])

    @property
    def out_shapes(self) -> tuple[tuple[Dim, ...], ...]:
        """The result shapes; their new symbols are bound here."""
        return tuple(tuple(s) for s in self.call.attrs["out_shapes"])

    @staticmethod
    def make(
        fn: Expr,
        inputs: Sequence[Expr],
        data_dependent: Sequence[int],
        out_shapes: Sequence[Sequence[Dim]],
    ) -> Call:
        """A call running ``fn``'s shape function on ``inputs``."""
        return ir.call(
            ShapeFunc.NAME,
            fn,
            ir.tuple_of(inputs),
            data_dependent=list(data_dependent),
            out_shapes=[list(s) for s in out_shapes],
        )


@dataclass(frozen=True, slots=True)
class ReshapeTensor(MemoryOp):
    """``memory.reshape_tensor(x, shape=)``: a view of ``x`` with another shape."""

    NAME: ClassVar[str] = "memory.reshape_tensor"

    @property
    def tensor(self) -> Expr:
        """The tensor viewed."""
        return self.call.args[0]

    @property
    def shape(self) -> tuple[Dim, ...]:
        """The new shape."""
        return tuple(self.call.attrs["shape"])

    @staticmethod
    def make(x: Expr, shape: Sequence[Dim]) -> Call:
        """A call viewing ``x`` as ``shape``."""
        return ir.call(ReshapeTensor.NAME, x, shape=list(shape))


@dataclass(frozen=True, slots=True)
class Kill(MemoryOp):
    """``memory.kill(x)``: ``x`` is dead from here."""

    NAME: ClassVar[str] = "memory.kill"

    @property
    def target(self) -> Expr:
        """The value killed (a tensor or a storage)."""
        return self.call.args[0]

    @staticmethod
    def make(x: Expr) -> Call:
        """A call killing ``x``."""
        return ir.call(Kill.NAME, x)


@dataclass(frozen=True, slots=True)
class Check(MemoryOp):
    """``memory.check(kind=, lhs=, rhs=, message=)``: a shape fact checked at run time."""

    NAME: ClassVar[str] = "memory.check"

    @property
    def kind(self) -> str:
        """``==``, ``!=``, ``<``, ``<=``, ``>``, ``>=``, ``divides`` or ``broadcast``."""
        return str(self.call.attrs["kind"])

    @property
    def lhs(self) -> Dim:
        """The left dim."""
        return self.call.attrs["lhs"]

    @property
    def rhs(self) -> Dim:
        """The right dim."""
        return self.call.attrs["rhs"]

    @property
    def message(self) -> str:
        """What the error says when the fact fails."""
        return str(self.call.attrs["message"])

    @staticmethod
    def make(kind: str, lhs: Dim, rhs: Dim, message: str) -> Call:
        """A call checking ``lhs kind rhs``."""
        return ir.call(Check.NAME, kind=kind, lhs=lhs, rhs=rhs, message=message)


#: Every op of the dialect, by class.
OPS: tuple[type[MemoryOp], ...] = (
    AllocStorage,
    AllocTensor,
    Invoke,
    ShapeOf,
    ShapeFunc,
    ReshapeTensor,
    Kill,
    Check,
)

_BY_OP: dict[OpDef, type[MemoryOp]] = {}


def memory_op(value: Expr) -> MemoryOp | None:
    """The typed view of ``value`` if it calls an op of the memory dialect, else None."""
    if not isinstance(value, Call) or not isinstance(value.callee, OpDef):
        return None
    if not _BY_OP:  # the catalogue registers the ops on import; resolve them once
        _BY_OP.update({cls.op(): cls for cls in OPS})
    cls = _BY_OP.get(value.callee)
    return cls(value) if cls is not None else None
