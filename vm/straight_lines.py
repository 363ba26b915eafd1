"""The source lines an instruction gets in a straight-line function (``straight.py``).

One rule per opcode that is written out inline (named by its entry in ``opcodes.py``); an
instruction without one calls its closure (``s7(r)``), which keeps its run-time checks. Jumps
are not lines: the generator turns them into ``if``/``else`` blocks. A rule returns the lines
and puts what they name (a constant, a kernel, the closure) into the function's namespace under
a generated name; per ``codegen.py``'s safety rule no string of the executable enters the text.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .codegen import int_literal
from .decode import RET, DecodeContext, Step
from .isa import Instruction, Reg

#: ``line(pc, instruction, its closure, ctx, namespace)``: the instruction's source lines.
LineRule = Callable[[int, Instruction, Step, DecodeContext, dict[str, Any]], tuple[str, ...]]


def _reg(operand: Reg) -> str:
    return f"r[{int_literal(operand.index)}]"


def move(
    pc: int, ins: Instruction, step: Step, ctx: DecodeContext, ns: dict[str, Any]
) -> tuple[str, ...]:
    """``r[d] = r[s]``."""
    ops = ins.operands
    return (f"{_reg(ops[0])} = {_reg(ops[1])}",)


def load_int(
    pc: int, ins: Instruction, step: Step, ctx: DecodeContext, ns: dict[str, Any]
) -> tuple[str, ...]:
    """``r[d] = 3``."""
    ops = ins.operands
    return (f"{_reg(ops[0])} = {int_literal(ops[1])}",)


def load_const(
    pc: int, ins: Instruction, step: Step, ctx: DecodeContext, ns: dict[str, Any]
) -> tuple[str, ...]:
    """``r[d] = c7``, the constant a name of the namespace."""
    ops = ins.operands
    ns[f"c{pc}"] = ctx.constants[ops[1]]
    return (f"{_reg(ops[0])} = c{pc}",)


def dim(
    pc: int, ins: Instruction, step: Step, ctx: DecodeContext, ns: dict[str, Any]
) -> tuple[str, ...]:
    """``r[d] = shape(r[s])[axis]``."""
    ops = ins.operands
    return (f"{_reg(ops[0])} = shape({_reg(ops[1])})[{int_literal(ops[2])}]",)


def get_item(
    pc: int, ins: Instruction, step: Step, ctx: DecodeContext, ns: dict[str, Any]
) -> tuple[str, ...]:
    """``r[d] = r[s][i]``."""
    ops = ins.operands
    return (f"{_reg(ops[0])} = {_reg(ops[1])}[{int_literal(ops[2])}]",)


def make_tuple(
    pc: int, ins: Instruction, step: Step, ctx: DecodeContext, ns: dict[str, Any]
) -> tuple[str, ...]:
    """``r[d] = (r[a], r[b], )``."""
    ops = ins.operands
    items = "".join(f"{_reg(a)}, " for a in ops[1])
    return (f"{_reg(ops[0])} = ({items})",)


def invoke(
    pc: int, ins: Instruction, step: Step, ctx: DecodeContext, ns: dict[str, Any]
) -> tuple[str, ...]:
    """``k7(r[a], r[b], r[c])``, the bound kernel a name of the namespace."""
    ops = ins.operands
    ns[f"k{pc}"] = ctx.kernels[ops[0]]
    args = ", ".join(_reg(a) for a in (*ops[1], *ops[2]))
    return (f"k{pc}({args})",)


def check_dim(
    pc: int, ins: Instruction, step: Step, ctx: DecodeContext, ns: dict[str, Any]
) -> tuple[str, ...]:
    """The comparison inline; the closure, which makes the message, only when it fails."""
    ops = ins.operands
    ns[f"s{pc}"] = step
    return (f"if shape({_reg(ops[0])})[{int_literal(ops[1])}] != {_reg(ops[2])}: s{pc}(r)",)


def ret(
    pc: int, ins: Instruction, step: Step, ctx: DecodeContext, ns: dict[str, Any]
) -> tuple[str, ...]:
    """The result into the loop's payload, and ``RET``: two lines, both this instruction's."""
    return (f"state[0] = {_reg(ins.operands[0])}", f"return {int_literal(RET)}")


def call_step(pc: int, step: Step, ns: dict[str, Any]) -> tuple[str, ...]:
    """The line of an instruction without a rule: ``s7(r)``, its closure."""
    ns[f"s{pc}"] = step
    return (f"s{pc}(r)",)
