"""The instruction set: opcodes, their operand kinds, and the instruction value.

An instruction is an opcode and a tuple of operands. What each operand is (a register, an
immediate int, a constant index, a jump target...) is fixed per opcode by ``SIGNATURES``; the
loader checks every operand against it, the decoder reads it, and the listing prints it. Registers
are written ``Reg(n)`` everywhere, so an operand that may be either an immediate or a register
(``VAL``, ``SHAPE``) needs no extra tag. Everything else the VM's parts know about an opcode
(its decoder, register kinds, validation, sanitizer checks, straight-line code) is its entry in
``opcodes.py``.

Why a fixed, moderately rich set rather than four generic opcodes plus builtins: every operand's
kind is known statically, so the loader can validate a file completely (a builtin's arguments
would be an untyped list), and each opcode decodes to a specialised closure (an immediate shape
is baked in, not re-read). Adding an *op* never touches this file: kernels are named in the
executable's kernel table, and shape functions in its shape-function table.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Reg:
    """A register of the current frame, printed ``%n``."""

    index: int
    """The register number, ``0 <= index < function.num_registers``."""

    def __repr__(self) -> str:
        return f"%{self.index}"


class Kind(enum.Enum):
    """What an operand is."""

    DST = "dst"
    """A register written by the instruction."""
    SRC = "src"
    """A register read by the instruction."""
    SRCS = "srcs"
    """A tuple of registers read."""
    DSTS = "dsts"
    """A tuple of registers written."""
    INT = "int"
    """An immediate int."""
    VAL = "val"
    """An int given as an immediate or read from a register."""
    SHAPE = "shape"
    """A shape given as an immediate tuple of ints or read from a register."""
    CONST = "const"
    """An index into the constant pool."""
    FUNC = "func"
    """An index into the function table."""
    KERNEL = "kernel"
    """An index into the kernel table."""
    PROGRAM = "program"
    """An index into the shape-program table."""
    SHAPE_FUNC = "shape_func"
    """An index into the shape-function table."""
    TARGET = "target"
    """An instruction index in the same function (a jump target)."""
    DTYPE = "dtype"
    """A dtype name."""
    STR = "str"
    """Text (messages, names for error messages)."""
    CMP = "cmp"
    """A comparison: one of ``== != < <= > >=``."""


class Op(enum.IntEnum):
    """The opcodes. The number is what a file stores; never renumber, only append."""

    MOVE = 0
    LOAD_CONST = 1
    LOAD_INT = 2
    CALL = 3
    INVOKE = 4
    ALLOC_STORAGE = 5
    ALLOC_TENSOR = 6
    SHAPE_OF = 7
    DIM = 8
    RESHAPE = 9
    TUPLE = 10
    GET_ITEM = 11
    JUMP = 12
    JUMP_IF_NOT = 13
    RET = 14
    KILL = 15
    SHAPE_PROGRAM = 16
    SHAPE_FUNC = 17
    CHECK = 18
    CHECK_DIM = 19
    TAIL_CALL = 20
    CHECK_VALUES = 21
    APPEND = 22


K = Kind
#: Operand kinds of each opcode, in order.
SIGNATURES: dict[Op, tuple[Kind, ...]] = {
    # dst = src
    Op.MOVE: (K.DST, K.SRC),
    # dst = constants[const]
    Op.LOAD_CONST: (K.DST, K.CONST),
    # dst = an immediate int (symbol values, conditions)
    Op.LOAD_INT: (K.DST, K.INT),
    # dst = functions[func](*args); a new frame
    Op.CALL: (K.DST, K.FUNC, K.SRCS),
    # kernels[kernel](*inputs, *outputs): destination passing, writes the outputs in place
    Op.INVOKE: (K.KERNEL, K.SRCS, K.SRCS),
    # dst = a new storage of `size` bytes, aligned to max(alignment, 64); dtype_hint is advisory
    Op.ALLOC_STORAGE: (K.DST, K.VAL, K.INT, K.DTYPE),
    # dst = a typed view of `storage` at byte `offset` with `shape` and `dtype` (bounds-checked)
    Op.ALLOC_TENSOR: (K.DST, K.SRC, K.VAL, K.SHAPE, K.DTYPE),
    # dst = src.shape as a tuple of ints
    Op.SHAPE_OF: (K.DST, K.SRC),
    # dst = src.shape[axis] as an int (binds a symbol from an argument's axis)
    Op.DIM: (K.DST, K.SRC, K.INT),
    # dst = src viewed with a new shape (no allocation; same number of elements)
    Op.RESHAPE: (K.DST, K.SRC, K.SHAPE),
    # dst = (items...)
    Op.TUPLE: (K.DST, K.SRCS),
    # dst = src[index] for a tuple (or a shape) in src
    Op.GET_ITEM: (K.DST, K.SRC, K.INT),
    # pc = target
    Op.JUMP: (K.TARGET,),
    # if not cond: pc = target (cond: an int, a bool, or a size-1 array)
    Op.JUMP_IF_NOT: (K.SRC, K.TARGET),
    # return src to the caller
    Op.RET: (K.SRC,),
    # drop the registers; a storage goes back to the allocator (free after last use)
    Op.KILL: (K.SRCS,),
    # dsts = shape_programs[program](*srcs): integer arithmetic over symbol values
    Op.SHAPE_PROGRAM: (K.PROGRAM, K.SRCS, K.DSTS),
    # dst = the shapes from a shape function called on srcs (shapes, or values for
    # data-dependent inputs); one shape, or a tuple of shapes for a tuple result
    Op.SHAPE_FUNC: (K.DST, K.SHAPE_FUNC, K.SRCS),
    # require `a cmp b`, else RunTimeShapeError with the message
    Op.CHECK: (K.VAL, K.CMP, K.VAL, K.STR),
    # require src.shape[axis] == sym: "{what} = 4 but {sym_name} = 3 was bound by {bound_by}"
    Op.CHECK_DIM: (K.SRC, K.INT, K.SRC, K.STR, K.STR, K.STR),
    # return functions[func](*args): the callee replaces this frame (a call in tail position;
    # storages nothing references any more are freed there)
    Op.TAIL_CALL: (K.FUNC, K.SRCS),
    # CHECK whose message also shows the ints in srcs: "{0}", "{1}", ... stand for them (the
    # values of the symbols a failed fact is about; the compiler has no other way to name them)
    Op.CHECK_VALUES: (K.VAL, K.CMP, K.VAL, K.STR, K.SRCS),
    # dst = concatenate((x, y), axis), written into x's storage past x's end when that storage
    # has room there (memory/capacity.py), else into a new storage with room for `capacity`
    # along the axis (0: twice the result's length)
    Op.APPEND: (K.DST, K.SRC, K.SRC, K.INT, K.INT),
}
del K

#: Comparisons a CHECK may make.
COMPARISONS = ("==", "!=", "<", "<=", ">", ">=")


@dataclass(frozen=True, slots=True)
class Instruction:
    """One instruction: an opcode and its operands (kinds as in ``SIGNATURES[op]``)."""

    op: Op
    """The opcode."""
    operands: tuple[Any, ...]
    """Operands: ``Reg`` for registers, ints, tuples of ints or registers, strings."""

    def __str__(self) -> str:
        return format_instruction(self)


def _fmt(kind: Kind, value: Any, names: dict[Kind, Any] | None) -> str:
    if kind in (Kind.SRCS, Kind.DSTS):
        return "(" + ", ".join(repr(r) for r in value) + ")"
    if kind == Kind.SHAPE and isinstance(value, tuple):
        return "(" + ", ".join(str(d) for d in value) + ("," if len(value) == 1 else "") + ")"
    if kind == Kind.TARGET:
        return f"@{value}"
    if kind in (Kind.STR, Kind.DTYPE):
        return repr(value)
    prefix = {
        Kind.CONST: "c",
        Kind.FUNC: "f",
        Kind.KERNEL: "k",
        Kind.PROGRAM: "p",
        Kind.SHAPE_FUNC: "s",
    }.get(kind)
    if prefix is not None:
        name = names.get(kind) if names else None
        label = f"{prefix}{value}"
        if name is not None and 0 <= value < len(name):
            label += f"<{name[value]}>"
        return label
    return repr(value) if isinstance(value, Reg) else str(value)


def format_instruction(ins: Instruction, names: dict[Kind, Any] | None = None) -> str:
    """The instruction as one line, ``invoke k0<add> (%0, %1) (%2)``.

    ``names`` optionally maps a table kind (``Kind.KERNEL``...) to a list of display names.
    """
    kinds = SIGNATURES[ins.op]
    parts = [_fmt(k, v, names) for k, v in zip(kinds, ins.operands, strict=False)]
    return f"{ins.op.name.lower()} " + ", ".join(parts) if parts else ins.op.name.lower()
