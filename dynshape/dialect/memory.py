"""The memory dialect, typed: one class per op, with a constructor and typed fields.

The ops are declared once (``shape_funcs/declarations/catalogue/memory.py``: operands,
attribute kinds, documentation; what the parser and printer need). This module is how the compiler
*uses* them: ``AllocStorage.make(size, alignment, dtype_hint)`` builds a call (typed, when its
operands are: a pass builds typed nodes, so the pipeline need not re-infer), and
``memory_op(value)`` returns the typed view of a call of the dialect (``AllocStorage``,
``AllocTensor``, ..., or None for anything else), found by the op's identity, so passes read
``op.size`` rather than ``value.attrs["size"]`` and dispatch with ``isinstance`` or a table keyed
by class; a misspelt op is an ``AttributeError`` at import, not a silent miss.

A view is a frozen wrapper around the ``Call``; it holds no state of its own, so views are made
on demand and compared through their calls. Each class's ``result_type`` is the op's type rule,
which type inference uses too.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar, TypeVar

import ir
from ir import (
    Call,
    Dim,
    Expr,
    FuncType,
    OpDef,
    Span,
    StorageType,
    TensorType,
    Tuple,
    TupleType,
    Type,
    tensor_leaves,
)

from ..errors import CompileError

__all__ = [
    "ALIGNMENT",
    "UNIT",
    "AllocStorage",
    "AllocTensor",
    "Append",
    "Check",
    "Holds",
    "Invoke",
    "Kill",
    "MemoryOp",
    "ReshapeTensor",
    "ShapeFunc",
    "ShapeOf",
    "memory_op",
    "typed_tuple",
]


#: The alignment of every storage the compiler allocates, in bytes (a cache line, and the
#: widest SIMD load): ``manifest_alloc`` gives it to each storage, ``plan_memory`` to arenas
#: (offsets in an arena are aligned to their elements only).
ALIGNMENT = 64

#: The type of a memory op used only for its effect (invoke, kill, check, shape_func).
UNIT = TupleType(())

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

    def result_type(self, operands: Sequence[Type]) -> Type:
        """The call's type, given its operands' (the dialect's type rule: sizes, offsets and
        shapes are attributes, so no shape function is involved). Raises CompileError."""
        return UNIT  # the ops used for their effect; the others override this

    @classmethod
    def _build(cls, *args: Expr, span: Span | None = None, **attrs: object) -> Call:
        """A call of this op, typed when its operands are (so passes build typed nodes)."""
        call = ir.call(cls.NAME, *args, span=span, **attrs)
        operands = [a.ty for a in call.args]
        if any(t is None for t in operands):
            return call
        # Set on the new call, which nothing shares yet (building it again would normalise its
        # attributes again: sympy simplification, half the cost of making it).
        object.__setattr__(call, "ty", cls(call).result_type(operands))  # type: ignore[arg-type]
        return call


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

    def result_type(self, operands: Sequence[Type]) -> Type:
        return StorageType()

    @staticmethod
    def make(size: Dim, alignment: int, dtype_hint: str, span: Span | None = None) -> Call:
        """A call that allocates ``size`` bytes."""
        return AllocStorage._build(size=size, alignment=alignment, dtype_hint=dtype_hint, span=span)


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

    def result_type(self, operands: Sequence[Type]) -> Type:
        if not isinstance(operands[0], StorageType):
            raise CompileError(f"memory.alloc_tensor needs a storage, got {operands[0]}")
        return TensorType(self.shape, self.dtype)

    @staticmethod
    def make(
        storage: Expr, offset: Dim, shape: Sequence[Dim], dtype: str, span: Span | None = None
    ) -> Call:
        """A call making a ``shape`` ``dtype`` view of ``storage`` at byte ``offset``."""
        return AllocTensor._build(storage, offset=offset, shape=list(shape), dtype=dtype, span=span)


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

    def result_type(self, operands: Sequence[Type]) -> Type:
        fn, inputs, outputs = operands
        if not isinstance(fn, FuncType):
            raise CompileError(f"memory.invoke needs a function, got {fn}")
        if not isinstance(inputs, TupleType) or not isinstance(outputs, TupleType):
            raise CompileError("memory.invoke takes its inputs and its outputs as two tuples")
        if len(inputs.fields) != len(fn.params):
            raise CompileError(
                f"memory.invoke passes {len(inputs.fields)} inputs to a function of "
                f"{len(fn.params)} parameters"
            )
        # Outputs beyond the function's results are its scratch buffers (manifest_alloc).
        results = len(tensor_leaves(fn.ret))
        if len(outputs.fields) < results:
            raise CompileError(
                f"memory.invoke passes {len(outputs.fields)} outputs to a function of "
                f"{results} results"
            )
        for i, out in enumerate(outputs.fields):
            _tensor(out, f"memory.invoke's output {i}")
        return UNIT

    @staticmethod
    def make(fn: Expr, inputs: Sequence[Expr], outputs: Sequence[Expr]) -> Call:
        """A call running ``fn`` on ``inputs`` into ``outputs``."""
        return Invoke._build(fn, typed_tuple(inputs), typed_tuple(outputs))


@dataclass(frozen=True, slots=True)
class ShapeOf(MemoryOp):
    """``memory.shape_of(x)``: the run-time shape of ``x``."""

    NAME: ClassVar[str] = "memory.shape_of"

    @property
    def tensor(self) -> Expr:
        """The tensor whose shape is read."""
        return self.call.args[0]

    def result_type(self, operands: Sequence[Type]) -> Type:
        return TensorType((_tensor(operands[0], "memory.shape_of's operand").rank,), "int64")

    @staticmethod
    def make(x: Expr) -> Call:
        """A call reading ``x``'s shape."""
        return ShapeOf._build(x)


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

    def result_type(self, operands: Sequence[Type]) -> Type:
        if not isinstance(operands[0], FuncType):
            raise CompileError(f"memory.shape_func needs a function, got {operands[0]}")
        return UNIT

    @staticmethod
    def make(
        fn: Expr,
        inputs: Sequence[Expr],
        data_dependent: Sequence[int],
        out_shapes: Sequence[Sequence[Dim]],
    ) -> Call:
        """A call running ``fn``'s shape function on ``inputs``."""
        return ShapeFunc._build(
            fn,
            typed_tuple(inputs),
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

    def result_type(self, operands: Sequence[Type]) -> Type:
        x = _tensor(operands[0], "memory.reshape_tensor's operand")
        return TensorType(self.shape, x.dtype)

    @staticmethod
    def make(x: Expr, shape: Sequence[Dim]) -> Call:
        """A call viewing ``x`` as ``shape``."""
        return ReshapeTensor._build(x, shape=list(shape))


@dataclass(frozen=True, slots=True)
class Append(MemoryOp):
    """``memory.append(x, y, axis=, shape=, capacity=)``: ``concatenate((x, y), axis)`` grown
    in place where ``x``'s storage has room (design/memory.md, "Appends")."""

    NAME: ClassVar[str] = "memory.append"

    @property
    def tensor(self) -> Expr:
        """The tensor appended to (its storage may be grown in place)."""
        return self.call.args[0]

    @property
    def appended(self) -> Expr:
        """The tensor appended (copied)."""
        return self.call.args[1]

    @property
    def axis(self) -> int:
        """The axis along which ``appended`` goes after ``tensor`` (non-negative)."""
        return int(self.call.attrs["axis"])

    @property
    def shape(self) -> tuple[Dim, ...]:
        """The result's shape."""
        return tuple(self.call.attrs["shape"])

    @property
    def capacity(self) -> int:
        """Elements along the axis a new storage gets room for (0: twice the result's)."""
        return int(self.call.attrs["capacity"])

    def result_type(self, operands: Sequence[Type]) -> Type:
        x = _tensor(operands[0], "memory.append's first operand")
        y = _tensor(operands[1], "memory.append's second operand")
        if x.dtype != y.dtype or len(x.shape) != len(y.shape):
            raise CompileError(
                f"memory.append joins tensors of one dtype and rank, got {x} and {y}"
            )
        if not 0 <= self.axis < len(x.shape) or len(self.shape) != len(x.shape):
            raise CompileError(
                f"memory.append: axis {self.axis} and shape {list(self.shape)} do not fit {x}"
            )
        return TensorType(self.shape, x.dtype)

    @staticmethod
    def make(x: Expr, y: Expr, axis: int, shape: Sequence[Dim], capacity: int = 0) -> Call:
        """A call appending ``y`` to ``x`` along ``axis`` (result ``shape``)."""
        return Append._build(x, y, axis=axis, shape=list(shape), capacity=capacity)


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
        return Kill._build(x)


@dataclass(frozen=True, slots=True)
class _DimFact(MemoryOp):
    """An op about one fact ``lhs kind rhs`` over dims (its attributes)."""

    @property
    def kind(self) -> str:
        """The relation: ``==``, ``!=``, ``<``, ``<=``, ``>``, ``>=`` (and, for ``check``,
        ``divides`` or ``broadcast``)."""
        return str(self.call.attrs["kind"])

    @property
    def lhs(self) -> Dim:
        """The left dim."""
        return self.call.attrs["lhs"]

    @property
    def rhs(self) -> Dim:
        """The right dim."""
        return self.call.attrs["rhs"]


@dataclass(frozen=True, slots=True)
class Check(_DimFact):
    """``memory.check(kind=, lhs=, rhs=, message=)``: a shape fact checked at run time."""

    NAME: ClassVar[str] = "memory.check"

    @property
    def message(self) -> str:
        """What the error says when the fact fails."""
        return str(self.call.attrs["message"])

    @staticmethod
    def make(kind: str, lhs: Dim, rhs: Dim, message: str) -> Call:
        """A call checking ``lhs kind rhs``."""
        return Check._build(kind=kind, lhs=lhs, rhs=rhs, message=message)


@dataclass(frozen=True, slots=True)
class Holds(_DimFact):
    """``memory.holds(kind=, lhs=, rhs=)``: whether a fact about dims holds, as a ``bool``
    value computed at run time from the bound symbols (a condition for ``if``)."""

    NAME: ClassVar[str] = "memory.holds"

    def result_type(self, operands: Sequence[Type]) -> Type:
        return TensorType((), "bool")

    @staticmethod
    def make(kind: str, lhs: Dim, rhs: Dim) -> Call:
        """A call computing whether ``lhs kind rhs``."""
        return Holds._build(kind=kind, lhs=lhs, rhs=rhs)


#: Every op of the dialect, by class.
OPS: tuple[type[MemoryOp], ...] = (
    AllocStorage,
    AllocTensor,
    Append,
    Invoke,
    ShapeOf,
    ShapeFunc,
    ReshapeTensor,
    Kill,
    Check,
    Holds,
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


def typed_tuple(fields: Sequence[Expr]) -> Tuple:
    """A tuple expression, typed when its fields are."""
    types = [f.ty for f in fields]
    if any(t is None for t in types):
        return ir.tuple_of(fields)
    return Tuple(tuple(fields), ty=TupleType(tuple(types)))  # type: ignore[arg-type]


def _tensor(ty: Type, what: str) -> TensorType:
    if not isinstance(ty, TensorType):
        raise CompileError(f"{what} must be a tensor, got {ty}")
    return ty
