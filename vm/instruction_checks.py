"""What validation checks about an instruction beyond the kind of each operand.

``validate.py`` first checks every operand against its kind (a register below the register
count, a table index in range...); the rules here, one per opcode that needs one (named by its
entry in ``opcodes.py``), check what the operands mean together or against the tables: arities
of calls, kernels and shape programs, an alignment, an axis. Each returns what is wrong (the
caller says where), or None.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from .executable import Executable
from .isa import Reg
from .memory.storage import MAX_ALIGNMENT

#: Most dims of a shape; an axis is in ``[-MAX_RANK, MAX_RANK)``.
MAX_RANK = 64
#: ``check(operands, exe)``: what is wrong with the instruction, or None.
InstructionCheck = Callable[[tuple[Any, ...], Executable], str | None]


def _arguments(func: int, args: Sequence[Reg], exe: Executable) -> str | None:
    callee = exe.functions[func]
    if len(args) != len(callee.params):
        return f"passes {len(args)} arguments to {callee.name!r}, which takes {len(callee.params)}"
    return None


def call(ops: tuple[Any, ...], exe: Executable) -> str | None:
    """As many arguments as the callee has parameters."""
    return _arguments(ops[1], ops[2], exe)


def tail_call(ops: tuple[Any, ...], exe: Executable) -> str | None:
    """As many arguments as the callee has parameters."""
    return _arguments(ops[0], ops[1], exe)


def invoke(ops: tuple[Any, ...], exe: Executable) -> str | None:
    """As many inputs and destinations as the kernel entry declares."""
    k = exe.kernels[ops[0]]
    if (len(ops[1]), len(ops[2])) != (k.num_inputs, k.num_destinations):
        scratch = k.num_destinations - k.num_outputs
        return (
            f"passes {len(ops[1])} inputs and {len(ops[2])} outputs "
            f"to kernel {k.name!r}, which takes {k.num_inputs} and "
            f"{k.num_outputs}" + (f" plus {scratch} scratch buffers" if scratch else "")
        )
    return None


def shape_program(ops: tuple[Any, ...], exe: Executable) -> str | None:
    """As many inputs and outputs as the program declares."""
    p = exe.shape_programs[ops[0]]
    if (len(ops[1]), len(ops[2])) != (p.num_inputs, len(p.outputs)):
        return (
            f"passes {len(ops[1])} inputs and {len(ops[2])} outputs "
            f"to a program of {p.num_inputs} inputs and {len(p.outputs)} "
            "outputs"
        )
    return None


def alloc_storage(ops: tuple[Any, ...], exe: Executable) -> str | None:
    """An alignment that is a power of two up to a page."""
    a = ops[2]
    if a < 1 or a > MAX_ALIGNMENT or a & (a - 1):
        return f"alignment {a} is not a power of two in [1, {MAX_ALIGNMENT}]"
    return None


def _axis(axis: int) -> str | None:
    return None if -MAX_RANK <= axis < MAX_RANK else "axis out of range"


def append(ops: tuple[Any, ...], exe: Executable) -> str | None:
    """A non-negative axis a shape can have, and a capacity of at least 0."""
    if not 0 <= ops[3] < MAX_RANK:
        return "axis out of range"
    return None if ops[4] >= 0 else f"negative capacity {ops[4]}"


def dim(ops: tuple[Any, ...], exe: Executable) -> str | None:
    """An axis a shape can have."""
    return _axis(ops[2])


def check_dim(ops: tuple[Any, ...], exe: Executable) -> str | None:
    """An axis a shape can have."""
    return _axis(ops[1])
