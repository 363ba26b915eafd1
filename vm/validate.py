"""Validation of an executable: everything whose corruption could crash, hang or mislead the VM.

Run on every file read by ``load`` and on every program the assembler builds, and again by the
VM before decoding (it is cheap: one pass over the code). The checks (also listed in
design/vm.md):

- table sizes and every count are within fixed bounds (no absurd allocation while loading), and
  all functions together hold at most ``MAX_CODE`` instructions (loading is linear in them) and
  ``MAX_REGISTERS`` registers;
- constants are arrays of a supported dtype;
- kernel entries name an op with a registered kernel (a clear error naming the op otherwise),
  carry exactly the attributes of the op's schema, each of its kind (``kernels/attr_schema.py``),
  and sane arities; fused entries' steps and scratch specs refer only
  to existing, already-written values;
- shape programs refer only to earlier values and use known ops;
- shape-function entries name an op with a registered shape function;
- function names are unique; parameters fit in the register file; each instruction's opcode is
  known, has the right number of operands, and each operand has its kind: registers below the
  register count, table indices in range, jump targets inside the function, dtypes and
  comparisons from their sets, shapes of non-negative ints; ``call`` passes as many arguments as
  the callee has parameters; ``invoke`` passes as many inputs and outputs as the kernel entry
  declares; ``shape_program`` reads and writes as many values as the program declares;
- the last instruction of every function is ``ret`` or ``jump``, so the pc never runs off the end;
- every register an instruction reads is set on every path and holds the kind its opcode needs
  (``register_kinds.py``), and a static view fits its static storage.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from shape_funcs.declarations.dtypes import require
from shape_funcs.registry import has_shape_func

from .attr_values import check_runtime_attrs
from .errors import FormatError
from .executable import DTYPES, Executable, Function, OpKernel, TensorSpec, TupleSpec
from .fused import FusedKernel
from .instruction_checks import MAX_RANK
from .isa import COMPARISONS, Instruction, Kind, Op, Reg
from .kernels.attr_schema import check_kernel_attrs
from .kernels.registry import has_kernel
from .opcodes import OPCODES
from .register_kinds import check_register_kinds
from .shape_program import ShapeProgram

MAX_TABLE = 1 << 20
#: Most registers of all functions together (the VM makes each function's frame template).
MAX_REGISTERS = 1 << 20
#: Most instructions in all functions together: loading is linear in them (design/vm.md).
MAX_CODE = 1 << 20
MAX_LIST = 1 << 12
MAX_INT = 1 << 62
MAX_STR = 1 << 16


def _count(n: int, what: str, limit: int = MAX_TABLE) -> None:
    if n > limit:
        raise FormatError(f"{what}: {n} entries is more than the limit of {limit}")


def check_attrs(attrs: Any, what: str, depth: int = 0) -> None:
    """Attributes are a mapping of names to JSON-like values (scalars, None, nested tuples)."""
    if depth == 0:
        if not isinstance(attrs, Mapping) or not all(isinstance(k, str) for k in attrs):
            raise FormatError(f"{what}: attributes must map names to values")
        for k, v in attrs.items():
            check_attrs(v, f"{what}: attribute {k!r}", 1)
        return
    if attrs is None or isinstance(attrs, (bool, int, float, str)):
        return
    if isinstance(attrs, tuple) and depth < 4 and len(attrs) <= MAX_LIST:
        for v in attrs:
            check_attrs(v, what, depth + 1)
        return
    raise FormatError(f"{what}: bad value {attrs!r}")


def check_dtype(dtype: Any, what: str) -> None:
    """A dtype name: one of ``DTYPES`` (FormatError otherwise); an extended one (``bfloat16``,
    ``float8_e4m3fn``, ``int4``, ...) also needs ml_dtypes, imported here, before anything runs
    (``DTypeUnavailable`` naming the package when it is missing)."""
    if not isinstance(dtype, str) or dtype not in DTYPES:
        raise FormatError(f"{what}: unknown dtype {dtype!r}")
    require(dtype)


def check_type(t: Any, what: str, depth: int = 0) -> None:
    """A parameter or result type spec."""
    if isinstance(t, TensorSpec):
        check_dtype(t.dtype, what)
        if not isinstance(t.shape, tuple) or len(t.shape) > MAX_RANK:
            raise FormatError(f"{what}: bad shape {t.shape!r}")
        for d in t.shape:
            if isinstance(d, bool) or not (
                (isinstance(d, str) and len(d) < MAX_STR)
                or (isinstance(d, int) and 0 <= d <= MAX_INT)
            ):
                raise FormatError(f"{what}: bad dim {d!r} (a non-negative int or a symbol)")
    elif isinstance(t, TupleSpec) and depth < 16 and len(t.fields) <= MAX_LIST:
        for i, f in enumerate(t.fields):
            check_type(f, f"{what} field {i}", depth + 1)
    else:
        raise FormatError(f"{what}: bad type {t!r}")


def _is_int(v: Any, lo: int, hi: int) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and lo <= v <= hi


class _BadOperand(Exception):
    """An operand that is not of its kind; ``_check_instruction`` adds where it is."""


class _Operands:
    """Checks operands against their kinds in one function (see ``check``)."""

    def __init__(self, f: Function, counts: dict[Kind, int]) -> None:
        self.f, self.counts = f, counts

    def check(self, kind: Kind, v: Any) -> None:
        """Raise ``_BadOperand`` unless ``v`` is an operand of ``kind`` (the caller says where)."""
        if kind in self.counts:
            self.index(kind, v)
        else:
            _KIND_CHECKS[kind](self, v)

    def reg(self, r: Any) -> None:
        n = self.f.num_registers
        if not isinstance(r, Reg) or not _is_int(r.index, 0, n - 1):
            raise _BadOperand(f"expected a register below %{n}, got {r!r}")

    def regs(self, v: Any) -> None:
        if not isinstance(v, tuple) or len(v) > MAX_LIST:
            raise _BadOperand(f"expected a tuple of registers, got {v!r}")
        for r in v:
            self.reg(r)

    def integer(self, v: Any) -> None:
        if not _is_int(v, -MAX_INT, MAX_INT):
            raise _BadOperand(f"expected an int, got {v!r}")

    def val(self, v: Any) -> None:
        if isinstance(v, Reg):
            self.reg(v)
        elif not _is_int(v, -MAX_INT, MAX_INT):
            raise _BadOperand(f"expected an int or a register, got {v!r}")

    def shape(self, v: Any) -> None:
        if isinstance(v, Reg):
            self.reg(v)
        elif (
            not isinstance(v, tuple)
            or len(v) > MAX_RANK
            or not all(_is_int(d, 0, MAX_INT) for d in v)
        ):
            raise _BadOperand(f"expected a shape (non-negative ints) or a register, got {v!r}")

    def index(self, kind: Kind, v: Any) -> None:
        n = self.counts[kind]
        if not _is_int(v, 0, n - 1):
            raise _BadOperand(f"{kind.value} index {v!r} out of range (the table has {n} entries)")

    def target(self, v: Any) -> None:
        last = len(self.f.code) - 1
        if not _is_int(v, 0, last):
            raise _BadOperand(f"jump target {v!r} outside the function (0..{last})")

    def dtype(self, v: Any) -> None:
        if v not in DTYPES:
            raise _BadOperand(f"unknown dtype {v!r}")
        require(v)  # an extended one: ml_dtypes, or DTypeUnavailable

    def text(self, v: Any) -> None:
        if not isinstance(v, str) or len(v) > MAX_STR:
            raise _BadOperand(f"expected a string, got {v!r}")

    def comparison(self, v: Any) -> None:
        if v not in COMPARISONS:
            raise _BadOperand(f"unknown comparison {v!r}")


#: The check of each operand kind that is not a table index (those are ``_Operands.index``).
_KIND_CHECKS: dict[Kind, Callable[[_Operands, Any], None]] = {
    Kind.DST: _Operands.reg,
    Kind.SRC: _Operands.reg,
    Kind.SRCS: _Operands.regs,
    Kind.DSTS: _Operands.regs,
    Kind.INT: _Operands.integer,
    Kind.VAL: _Operands.val,
    Kind.SHAPE: _Operands.shape,
    Kind.TARGET: _Operands.target,
    Kind.DTYPE: _Operands.dtype,
    Kind.STR: _Operands.text,
    Kind.CMP: _Operands.comparison,
}


def _where(f: Function, pc: int, ins: Instruction) -> str:
    # Formatted only on failure: the checks run once per instruction of every file loaded.
    return f"function {f.name!r}, instruction {pc} ({ins.op.name.lower()})"


def _check_instruction(ins: Any, pc: int, f: Function, exe: Executable, ops: _Operands) -> None:
    if not isinstance(ins, Instruction) or not isinstance(ins.op, Op):
        raise FormatError(f"function {f.name!r}, instruction {pc}: not an instruction: {ins!r}")
    spec = OPCODES[ins.op]
    kinds = spec.operands
    if not isinstance(ins.operands, tuple) or len(ins.operands) != len(kinds):
        raise FormatError(
            f"{_where(f, pc, ins)}: expected {len(kinds)} operands, got {ins.operands!r}"
        )
    for k, (kind, v) in enumerate(zip(kinds, ins.operands, strict=False)):
        try:
            ops.check(kind, v)
        except _BadOperand as e:
            raise FormatError(f"{_where(f, pc, ins)}, operand {k}: {e}") from None
    problem = spec.check(ins.operands, exe) if spec.check is not None else None
    if problem is not None:
        raise FormatError(f"{_where(f, pc, ins)}: {problem}")


#: Most declared symbol ranges one function may carry.
MAX_RANGES = 1024


def check_ranges(ranges: Any, what: str) -> tuple[tuple[str, int, int | None], ...]:
    """``ranges`` as ``((name, lo, hi), ...)``, or FormatError: entries of an identifier and
    two ints ``0 <= lo <= hi`` (``hi`` None: unbounded), at most ``MAX_RANGES``."""
    if not isinstance(ranges, (list, tuple)) or len(ranges) > MAX_RANGES:
        raise FormatError(f"{what}: ranges must be a list of at most {MAX_RANGES} entries")
    out = []
    for r in ranges:
        ok = (
            isinstance(r, (list, tuple))
            and len(r) == 3
            and isinstance(r[0], str)
            and r[0].isidentifier()
            and _is_int(r[1], 0, MAX_INT)
            and (r[2] is None or _is_int(r[2], r[1], MAX_INT))
        )
        if not ok:
            raise FormatError(f"{what}: bad range entry {r!r} (expected [name, lo, hi or null])")
        out.append((r[0], r[1], r[2]))
    return tuple(out)


def validate_executable(exe: Executable) -> None:
    """Raise FormatError naming the first malformed part of ``exe`` (see the module doc)."""
    _count(len(exe.functions), "functions")
    _count(len(exe.constants), "constants")
    _count(len(exe.kernels), "kernels")
    _count(len(exe.shape_programs), "shape programs")
    _count(len(exe.shape_funcs), "shape functions")
    for i, c in enumerate(exe.constants):
        if not isinstance(c, np.ndarray) or c.dtype.name not in DTYPES:
            raise FormatError(f"constant {i}: expected an array of a supported dtype")
    for i, k in enumerate(exe.kernels):
        _check_kernel(i, k, len(exe.constants))
    for i, prog in enumerate(exe.shape_programs):
        if not isinstance(prog, ShapeProgram):
            raise FormatError(f"shape program {i}: not a shape program")
        prog.validate(f"shape program {i}")
    for i, sf in enumerate(exe.shape_funcs):
        if not isinstance(sf.op, str) or not has_shape_func(sf.op):
            raise FormatError(
                f"shape function {i}: op {sf.op!r} has no registered shape function in this process"
            )
        check_attrs(sf.attrs, f"shape function {i} ({sf.op})")
    _check_functions(exe)
    _check_output_names(exe)
    check_register_kinds(exe)


def _check_output_names(exe: Executable) -> None:
    """Names for ``main``'s results: none, or one distinct, bounded string per result."""
    names = exe.output_names
    if not names:
        return
    if not isinstance(names, tuple) or not all(
        isinstance(n, str) and 0 < len(n) <= MAX_STR for n in names
    ):
        raise FormatError("output names: expected non-empty strings")
    if len(names) != len(exe.outputs):
        raise FormatError(
            f"output names: {len(names)} names for the {len(exe.outputs)} results of main"
        )
    twice = next((n for i, n in enumerate(names) if n in names[:i]), None)
    if twice is not None:
        raise FormatError(f"output names: {twice[:80]!r} names two results")


def _check_kernel(i: int, k: Any, num_constants: int) -> None:
    """Kernel-table entry ``i``: a registered op with its schema's attributes, or a fused
    kernel whose steps and scratch are well formed."""
    what = f"kernel {i}"
    if isinstance(k, OpKernel):
        if not isinstance(k.op, str) or not has_kernel(k.op):
            raise FormatError(
                f"{what}: op {k.op!r} has no registered kernel in this process: import "
                "the module that registers it first (dynshape.register_op or "
                "vm.register_kernel; on the command line, --import MODULE)"
            )
        check_attrs(k.attrs, f"{what} ({k.op})")
        check_kernel_attrs(k.op, k.attrs, f"{what} ({k.op})")
        if not _is_int(k.num_inputs, 0, MAX_LIST) or not _is_int(k.num_outputs, 0, MAX_LIST):
            raise FormatError(f"{what} ({k.op}): bad arity")
        check_runtime_attrs(k.runtime_attrs, k.attrs, k.num_inputs, f"{what} ({k.op})")
    elif isinstance(k, FusedKernel):
        if not _is_int(k.num_inputs, 0, MAX_LIST) or not _is_int(k.num_outputs, 0, MAX_LIST):
            raise FormatError(f"{what} ({k.name}): bad arity")
        _count(len(k.steps), f"{what} steps", MAX_LIST)
        for j, step in enumerate(k.steps):
            check_attrs(step.attrs, f"{what} ({k.name}) step {j} ({step.op})")
            if isinstance(step.op, str):
                check_kernel_attrs(step.op, step.attrs, f"{what} ({k.name}) step {j}")
        k.validate(num_constants, f"{what} ({k.name})")
    else:
        raise FormatError(f"{what}: not a kernel entry: {k!r}")


def _check_functions(exe: Executable) -> None:
    """Unique names, signatures, register counts, and every instruction of every function."""
    counts = {
        Kind.CONST: len(exe.constants),
        Kind.FUNC: len(exe.functions),
        Kind.KERNEL: len(exe.kernels),
        Kind.PROGRAM: len(exe.shape_programs),
        Kind.SHAPE_FUNC: len(exe.shape_funcs),
    }
    seen: set[str] = set()
    total = registers = 0
    for f in exe.functions:
        if not isinstance(f, Function) or not isinstance(f.name, str) or f.name in seen:
            raise FormatError(f"function {getattr(f, 'name', f)!r}: missing or duplicate name")
        seen.add(f.name)
        _check_signature(f)
        registers += f.num_registers
        if registers > MAX_REGISTERS:
            raise FormatError(f"the functions have more than {MAX_REGISTERS} registers together")
        if not f.code:
            raise FormatError(f"function {f.name!r}: no code")
        total += len(f.code)
        if total > MAX_CODE:
            raise FormatError(f"the functions hold more than {MAX_CODE} instructions")
        ops = _Operands(f, counts)
        for pc, ins in enumerate(f.code):
            _check_instruction(ins, pc, f, exe, ops)
        if not OPCODES[f.code[-1].op].ends:
            raise FormatError(
                f"function {f.name!r}: the last instruction must be ret, jump or tail_call "
                "(the pc would run off the end)"
            )


def _check_signature(f: Function) -> None:
    """Parameters, result, ranges, and a register count that holds the parameters."""
    for p in f.params:
        if not isinstance(p.name, str):
            raise FormatError(f"function {f.name!r}: bad parameter name {p.name!r}")
        check_type(p.type, f"function {f.name!r}, parameter {p.name!r}")
    if f.ret is not None:
        check_type(f.ret, f"function {f.name!r}, result")
    check_ranges(f.ranges, f"function {f.name!r}")
    if not _is_int(f.num_registers, len(f.params), MAX_REGISTERS):
        raise FormatError(
            f"function {f.name!r}: {f.num_registers!r} registers cannot hold "
            f"its {len(f.params)} parameters (or exceed {MAX_REGISTERS})"
        )
