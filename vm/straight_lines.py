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


#: The comparisons a ``check_values`` may name, as this module writes them (the executable's
#: own text never enters the source: its comparison only selects an entry here).
_COMPARISONS = {"==": "==", "!=": "!=", "<": "<", "<=": "<=", ">": ">", ">=": ">="}


def check_values(
    pc: int, ins: Instruction, step: Step, ctx: DecodeContext, ns: dict[str, Any]
) -> tuple[str, ...]:
    """The comparison inline, its failure in the ``else`` (not the negated comparison: a value
    for which neither holds, a NaN, still fails); the closure, which makes the message, only
    then. A conv's padded-size checks are two of these a layer: called, each cost a closure and
    two operand reads."""
    ops = ins.operands
    text = _COMPARISONS.get(ops[1]) if isinstance(ops[1], str) else None
    a, b = _value(ops[0]), _value(ops[2])
    if text is None or a is None or b is None:
        return call_step(pc, step, ns)
    ns[f"s{pc}"] = step
    return (f"if {a} {text} {b}: pass", f"else: s{pc}(r)")


def _value(operand: Any) -> str | None:
    """A value operand as source: its register, or an int immediate written out; None for any
    other immediate (the instruction then calls its closure, which compares it as it is)."""
    if isinstance(operand, Reg):
        return _reg(operand)
    if isinstance(operand, int) and not isinstance(operand, bool):
        return int_literal(operand)
    return None


def ret(
    pc: int, ins: Instruction, step: Step, ctx: DecodeContext, ns: dict[str, Any]
) -> tuple[str, ...]:
    """The result into the loop's payload, and ``RET``: two lines, both this instruction's."""
    return (f"state[0] = {_reg(ins.operands[0])}", f"return {int_literal(RET)}")


def call_step(pc: int, step: Step, ns: dict[str, Any]) -> tuple[str, ...]:
    """The line of an instruction without a rule: ``s7(r)``, its closure."""
    ns[f"s{pc}"] = step
    return (f"s{pc}(r)",)
