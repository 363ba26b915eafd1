"""The VM's exceptions: one family under ``VMError``, itself a ``DynShapeError``.

Every error the VM raises at run time says where it happened (function, instruction index and
the instruction's listing) through ``VMError.where``, which the interpreter fills in once, at the
frame that was executing, so deep helpers can raise with a plain message.
"""

from __future__ import annotations

from dynshape_errors import DynShapeError
from shape_funcs.errors import ShapeError


class VMError(DynShapeError):
    """Base class of every error raised by the virtual machine."""

    def __init__(self, message: str, where: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        """The message without location."""
        self.where: str | None = where
        """``function@pc: instruction`` that was executing, when known."""

    def __str__(self) -> str:
        if self.where is None:
            return self.message
        return f"{self.message}\n  at {self.where}"


class FormatError(VMError):
    """An executable (a file, bytes, or an assembled program) is malformed.

    The message names what is wrong: the field, the function and instruction, the index that is
    out of range, or the op whose kernel is not registered in this process.
    """


class AssemblerError(VMError):
    """Bytecode written with the assembler is used wrongly (unplaced label, bad operand)."""


class VMArgumentError(VMError):
    """The arguments of ``run``/``invoke`` do not match the function's signature.

    The message names the parameter (by its name in the signature) and, for shape errors, the axis.
    """


class MemoryLimitError(VMError):
    """An allocation would take the VM past its memory limit; nothing was allocated."""


class OutOfBoundsError(VMError):
    """A tensor view does not fit in its storage (bytes asked, offset, storage size)."""


class KernelError(VMError):
    """A kernel failed on its inputs (numpy raised); names the kernel and the instruction.

    The numpy exception is kept as ``__cause__``.
    """


class StepLimitError(VMError):
    """A run took more steps (backward jumps, calls, tail calls) than ``max_steps``, or longer
    than its ``timeout``: a program that does not end, stopped."""


class KernelRegistryError(VMError):
    """A kernel is registered twice for one op, or looked up for an op that has none."""


class DeadTensorError(VMError):
    """With ``check_memory=True``: an instruction used a dead value - a register that was killed,
    a tensor view of a storage that was freed (or freed and since reused for another tensor), or
    a freed storage.

    The message names the register and what freed it (``main@4: kill %1``, the end of the call,
    the hand-over of an output); ``where`` names the instruction that used it.
    """

    def __init__(
        self,
        message: str,
        register: int | None = None,
        freed_by: str | None = None,
        where: str | None = None,
    ) -> None:
        super().__init__(message, where)
        self.register = register
        """The register that held the dead value."""
        self.freed_by = freed_by
        """The instruction (or event) that killed the register or freed the storage."""


class DonatedArrayError(VMError):
    """With ``check_memory=True``: an array the caller donated to an earlier call
    (``run(..., donate=...)``) was passed to the VM again. A donated array's memory may since
    hold another call's values (``vm/donation.py``)."""


class UnwrittenOutputError(VMError):
    """With ``check_memory=True``: a kernel returned without writing every element of one of
    its outputs (found by poisoning the output before the call, ``vm/unwritten.py``).

    The message names the kernel, the output (its position and register) and how many elements
    were left; ``where`` names the ``invoke`` instruction.
    """

    def __init__(self, message: str, kernel: str, output: int, where: str | None = None) -> None:
        super().__init__(message, where)
        self.kernel = kernel
        """The kernel-table entry's display name (the op, or the fused group)."""
        self.output = output
        """The position of the unwritten output among the kernel's outputs."""


class RunTimeShapeError(VMError, ShapeError):
    """A shape fact checked at run time does not hold (a ``check``/``check_dim`` instruction,
    or a shape function called by ``shape_func``).

    It is both a ``VMError`` (it happened while running bytecode, and carries the location) and a
    ``shape_funcs.ShapeError`` (the same fact that the compiler could not prove), so callers can
    catch either family.
    """


__all__ = [
    "AssemblerError",
    "DeadTensorError",
    "FormatError",
    "KernelError",
    "KernelRegistryError",
    "MemoryLimitError",
    "OutOfBoundsError",
    "RunTimeShapeError",
    "VMArgumentError",
    "VMError",
]
