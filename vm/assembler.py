"""The assembler: write bytecode by hand (the VM's tests do; the compiler's lowering may too).

>>> asm = Assembler()
>>> add = asm.kernel("add", num_inputs=2)
>>> f = asm.function("main", [("x", tensor("float32", (4,))), ("y", tensor("float32", (4,)))])
>>> x, y = f.params
>>> s = f.alloc_storage(16)
>>> out = f.alloc_tensor(s, 0, (4,), "float32")
>>> f.invoke(add, [x, y], [out])
>>> f.ret(out)
>>> exe = asm.build()

Registers are handed out by ``FunctionBuilder.reg()`` (each method that writes a register makes
one unless given ``dst=``); labels (``label()``/``place()``) are resolved when the function is
finished, so forward jumps need no patching by hand.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from .errors import AssemblerError
from .executable import (
    Executable,
    Function,
    OpKernel,
    Param,
    ShapeFuncEntry,
    TensorSpec,
    TupleSpec,
    TypeSpec,
)
from .fused import FusedKernel
from .isa import Instruction, Op, Reg
from .shape_program import ShapeProgram


def tensor(dtype: str, shape: Sequence[int | str]) -> TensorSpec:
    """A tensor type spec (ints are static dims, strings symbolic ones)."""
    return TensorSpec(dtype, tuple(shape))


def tuple_type(*fields: TypeSpec) -> TupleSpec:
    """A tuple type spec."""
    return TupleSpec(tuple(fields))


class Label:
    """A jump target, placed with ``FunctionBuilder.place``."""

    __slots__ = ("name", "pc")

    def __init__(self, name: str) -> None:
        self.name = name
        self.pc: int | None = None

    def __repr__(self) -> str:
        return f"Label({self.name}@{self.pc})"


def _norm_attrs(attrs: Mapping[str, Any] | None) -> dict[str, Any]:
    def norm(v: Any) -> Any:
        return tuple(norm(x) for x in v) if isinstance(v, (list, tuple)) else v

    return {k: norm(v) for k, v in (attrs or {}).items()}


class FunctionBuilder:
    """Builds the instructions of one function."""

    def __init__(
        self,
        asm: Assembler,
        name: str,
        params: Sequence[tuple[str, TypeSpec]],
        ret: TypeSpec | None,
    ) -> None:
        self.asm = asm
        self.name = name
        self.param_specs = tuple(Param(n, t) for n, t in params)
        self.ret_type = ret
        self.ranges: list[tuple[str, int, int | None]] = []
        """Declared symbol ranges ``(name, lo, hi)``, for the function's description."""
        self.code: list[tuple[Op, list[Any]]] = []
        self.num_registers = len(self.param_specs)
        self.params = [Reg(i) for i in range(len(self.param_specs))]
        """The parameters' registers, in order."""
        self.labels: list[Label] = []

    # Registers and labels

    def reg(self) -> Reg:
        """A fresh register."""
        self.num_registers += 1
        return Reg(self.num_registers - 1)

    def _dst(self, dst: Reg | None) -> Reg:
        return self.reg() if dst is None else dst

    def label(self, name: str = "L") -> Label:
        """A new, unplaced label."""
        lab = Label(f"{name}{len(self.labels)}")
        self.labels.append(lab)
        return lab

    def place(self, label: Label) -> None:
        """Put ``label`` at the next instruction."""
        if label.pc is not None:
            raise AssemblerError(f"label {label.name} is placed twice")
        label.pc = len(self.code)

    def emit(self, op: Op, *operands: Any) -> None:
        """Append an instruction (operands as in ``isa.SIGNATURES``; labels allowed as
        targets)."""
        self.code.append((op, list(operands)))

    # Instructions (one method per opcode)

    def move(self, src: Reg, dst: Reg | None = None) -> Reg:
        """``dst = src``."""
        dst = self._dst(dst)
        self.emit(Op.MOVE, dst, src)
        return dst

    def load_const(self, const: int, dst: Reg | None = None) -> Reg:
        """``dst = constants[const]``."""
        dst = self._dst(dst)
        self.emit(Op.LOAD_CONST, dst, const)
        return dst

    def load_int(self, value: int, dst: Reg | None = None) -> Reg:
        """``dst = value``."""
        dst = self._dst(dst)
        self.emit(Op.LOAD_INT, dst, value)
        return dst

    def call(self, func: str | int, args: Sequence[Reg], dst: Reg | None = None) -> Reg:
        """``dst = func(*args)`` (by name or index; the callee may be defined later)."""
        dst = self._dst(dst)
        self.emit(Op.CALL, dst, func, tuple(args))
        return dst

    def tail_call(self, func: str | int, args: Sequence[Reg]) -> None:
        """``return func(*args)``, the callee replacing this frame."""
        self.emit(Op.TAIL_CALL, func, tuple(args))

    def invoke(self, kernel: int, inputs: Sequence[Reg], outputs: Sequence[Reg]) -> None:
        """``kernels[kernel](*inputs, *outputs)``."""
        self.emit(Op.INVOKE, kernel, tuple(inputs), tuple(outputs))

    def alloc_storage(
        self,
        size: int | Reg,
        alignment: int = 64,
        dtype_hint: str = "float32",
        dst: Reg | None = None,
    ) -> Reg:
        """A new storage of ``size`` bytes."""
        dst = self._dst(dst)
        self.emit(Op.ALLOC_STORAGE, dst, size, alignment, dtype_hint)
        return dst

    def alloc_tensor(
        self,
        storage: Reg,
        offset: int | Reg,
        shape: Sequence[int] | Reg,
        dtype: str,
        dst: Reg | None = None,
    ) -> Reg:
        """A view of ``storage`` at ``offset``."""
        dst = self._dst(dst)
        self.emit(
            Op.ALLOC_TENSOR,
            dst,
            storage,
            offset,
            shape if isinstance(shape, Reg) else tuple(shape),
            dtype,
        )
        return dst

    def empty(self, shape: Sequence[int], dtype: str) -> Reg:
        """Shorthand: a storage of exactly the tensor's size and the tensor at offset 0."""
        nbytes = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
        return self.alloc_tensor(self.alloc_storage(nbytes, dtype_hint=dtype), 0, shape, dtype)

    def shape_of(self, src: Reg, dst: Reg | None = None) -> Reg:
        """``dst = src.shape``."""
        dst = self._dst(dst)
        self.emit(Op.SHAPE_OF, dst, src)
        return dst

    def dim(self, src: Reg, axis: int, dst: Reg | None = None) -> Reg:
        """``dst = src.shape[axis]``."""
        dst = self._dst(dst)
        self.emit(Op.DIM, dst, src, axis)
        return dst

    def reshape(self, src: Reg, shape: Sequence[int] | Reg, dst: Reg | None = None) -> Reg:
        """A view of ``src`` with ``shape``."""
        dst = self._dst(dst)
        self.emit(Op.RESHAPE, dst, src, shape if isinstance(shape, Reg) else tuple(shape))
        return dst

    def append(self, x: Reg, y: Reg, axis: int, capacity: int = 0, dst: Reg | None = None) -> Reg:
        """``concatenate((x, y), axis)``, grown in place in ``x``'s storage where it has room."""
        dst = self._dst(dst)
        self.emit(Op.APPEND, dst, x, y, axis, capacity)
        return dst

    def tuple(self, items: Sequence[Reg], dst: Reg | None = None) -> Reg:
        """``dst = (items...)``."""
        dst = self._dst(dst)
        self.emit(Op.TUPLE, dst, tuple(items))
        return dst

    def get_item(self, src: Reg, index: int, dst: Reg | None = None) -> Reg:
        """``dst = src[index]``."""
        dst = self._dst(dst)
        self.emit(Op.GET_ITEM, dst, src, index)
        return dst

    def jump(self, target: Label) -> None:
        """Continue at ``target``."""
        self.emit(Op.JUMP, target)

    def jump_if_not(self, cond: Reg, target: Label) -> None:
        """Continue at ``target`` when ``cond`` is false."""
        self.emit(Op.JUMP_IF_NOT, cond, target)

    def ret(self, src: Reg) -> None:
        """Return ``src``."""
        self.emit(Op.RET, src)

    def kill(self, *regs: Reg) -> None:
        """Drop registers (freeing storages)."""
        self.emit(Op.KILL, tuple(regs))

    def shape_program(
        self, program: int, inputs: Sequence[Reg], num_outputs: int | None = None
    ) -> list[Reg]:
        """Run shape program ``program``; returns one register per output."""
        n = len(self.asm.shape_programs[program].outputs) if num_outputs is None else num_outputs
        outs = [self.reg() for _ in range(n)]
        self.emit(Op.SHAPE_PROGRAM, program, tuple(inputs), tuple(outs))
        return outs

    def shape_func(self, entry: int, inputs: Sequence[Reg], dst: Reg | None = None) -> Reg:
        """``dst`` = shapes from shape-function entry ``entry`` on ``inputs``."""
        dst = self._dst(dst)
        self.emit(Op.SHAPE_FUNC, dst, entry, tuple(inputs))
        return dst

    def check(self, a: int | Reg, cmp: str, b: int | Reg, message: str) -> None:
        """Require ``a cmp b``."""
        self.emit(Op.CHECK, a, cmp, b, message)

    def check_values(
        self, a: int | Reg, cmp: str, b: int | Reg, message: str, values: Sequence[Reg]
    ) -> None:
        """Require ``a cmp b``; the message's ``{a}``, ``{b}`` and ``{0}``, ``{1}``, ... are
        replaced by ``a``, ``b`` and the ints in ``values`` when it fails."""
        self.emit(Op.CHECK_VALUES, a, cmp, b, message, tuple(values))

    def check_dim(
        self, src: Reg, axis: int, sym: Reg, what: str, sym_name: str, bound_by: str
    ) -> None:
        """Require ``src.shape[axis] == sym``; the message reads
        ``{what} = 4 but {sym_name} = 3 was bound by {bound_by}``."""
        self.emit(Op.CHECK_DIM, src, axis, sym, what, sym_name, bound_by)

    def finish(self, functions: Mapping[str, int]) -> Function:
        """The function, with labels and callee names resolved."""
        code = []
        for pc, (op, operands) in enumerate(self.code):
            ops = []
            for v in operands:
                if isinstance(v, Label):
                    if v.pc is None:
                        raise AssemblerError(f"{self.name}@{pc}: label {v.name} is never placed")
                    v = v.pc
                elif op in (Op.CALL, Op.TAIL_CALL) and isinstance(v, str):
                    if v not in functions:
                        raise AssemblerError(f"{self.name}@{pc}: no function named {v!r}")
                    v = functions[v]
                ops.append(v)
            code.append(Instruction(op, tuple(ops)))
        return Function(
            self.name,
            self.param_specs,
            self.ret_type,
            self.num_registers,
            tuple(code),
            tuple(self.ranges),
        )


class Assembler:
    """Collects the tables and functions of an executable."""

    def __init__(self) -> None:
        self.constants: list[np.ndarray] = []
        self.kernels: list[OpKernel | FusedKernel] = []
        self.shape_programs: list[ShapeProgram] = []
        self.shape_funcs: list[ShapeFuncEntry] = []
        self.functions: list[FunctionBuilder] = []

    def const(self, value: Any) -> int:
        """Add a constant (copied); returns its index."""
        self.constants.append(np.array(value, copy=True))
        return len(self.constants) - 1

    def kernel(
        self,
        op: str,
        attrs: Mapping[str, Any] | None = None,
        num_inputs: int = 1,
        num_outputs: int = 1,
        runtime_attrs: Sequence[tuple[str, int]] = (),
    ) -> int:
        """Add a kernel-table entry for ``op``; returns its index. ``runtime_attrs``: the
        ``(attribute, index)`` entries (None in ``attrs``) whose values the invoke passes in
        its last input, counted in ``num_inputs`` (see ``attr_values.py``)."""
        filled = tuple((str(a), int(i)) for a, i in runtime_attrs)
        self.kernels.append(OpKernel(op, _norm_attrs(attrs), num_inputs, num_outputs, filled))
        return len(self.kernels) - 1

    def fused(self, kernel: FusedKernel) -> int:
        """Add a fused kernel; returns its index."""
        self.kernels.append(kernel)
        return len(self.kernels) - 1

    def shape_program(self, program: ShapeProgram) -> int:
        """Add a shape program; returns its index."""
        self.shape_programs.append(program)
        return len(self.shape_programs) - 1

    def shape_func(self, op: str, attrs: Mapping[str, Any] | None = None) -> int:
        """Add a shape-function entry; returns its index."""
        self.shape_funcs.append(ShapeFuncEntry(op, _norm_attrs(attrs)))
        return len(self.shape_funcs) - 1

    def function(
        self, name: str, params: Sequence[tuple[str, TypeSpec]], ret: TypeSpec | None = None
    ) -> FunctionBuilder:
        """Start a function; finish it by building the assembler."""
        fb = FunctionBuilder(self, name, params, ret)
        self.functions.append(fb)
        return fb

    def build(self) -> Executable:
        """The executable (validated: a malformed program raises FormatError)."""
        index = {f.name: i for i, f in enumerate(self.functions)}
        exe = Executable(
            [f.finish(index) for f in self.functions],
            list(self.constants),
            list(self.kernels),
            list(self.shape_programs),
            list(self.shape_funcs),
        )
        exe.validate()
        return exe
