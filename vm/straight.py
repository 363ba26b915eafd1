"""A function without control flow as one generated Python function.

The loop (``interpreter.py``) pays for every instruction: a call of its closure, the returned
pc, a test of it. A function whose bytecode has no jump, call or tail call runs its
instructions in order, once each, so ``ClosureBackend`` compiles it into one function of the
registers that does them all, one source line per instruction, and returns ``RET``::

    def run(r):
        r[2] = 0
        r[3] = shape(r[0])[0]
        if shape(r[1])[0] != r[3]: s2(r)
        s3(r)
        s4(r)
        s5(r)
        k6(r[0], r[1], r[7])
        state[0] = r[7]
        return -2

Moves, constants, dims, tuple reads and builds, kernel calls and the return are written out,
and so is the comparison of a ``check_dim`` (its closure runs only to raise its error); the
other instructions (allocations, kills, checks, shape programs) call their closure from
``decode.py``, so they keep its run-time checks. The function is step 0 of the decoded
function; the other steps are the instructions' own closures (never reached: nothing jumps).
An error names its instruction: ``failing_pc`` reads the line the generated frame stopped at
from the traceback (nothing is paid for it on the fast path).

Generated source follows ``codegen.py``'s safety rule: only generated names, int literals and
fixed text; constants, kernels and closures are values of the namespace.
"""

from __future__ import annotations

import operator
import weakref
from collections.abc import Sequence
from types import CodeType, TracebackType
from typing import Any

from .codegen import UnsafeSourceError, int_literal, make_function
from .decode import RET, DecodeContext, Step
from .isa import Instruction, Op

#: Opcodes that change the order of execution: a function using one keeps the loop.
CONTROL = frozenset({Op.JUMP, Op.JUMP_IF_NOT, Op.CALL, Op.TAIL_CALL})

#: Lines before the first instruction's (``def run(r):``).
_HEADER_LINES = 1


#: The straight-line steps made (``failing_pc`` recognises them).
_MADE: weakref.WeakSet[Step] = weakref.WeakSet()


def straight_line(
    code: Sequence[Instruction], steps: list[Step], ctx: DecodeContext
) -> Step | None:
    """One step running all of ``code`` (its closures are ``steps``), or None if the function
    has control flow or does not end in its only ``ret``."""
    if not code or code[-1].op is not Op.RET:
        return None
    if any(ins.op in CONTROL or ins.op is Op.RET for ins in code[:-1]):
        return None
    namespace: dict[str, Any] = {"shape": operator.attrgetter("shape"), "state": ctx.state}
    lines = ["def run(r):"]
    try:
        for pc, ins in enumerate(code):
            lines.append("    " + _line(pc, ins, steps[pc], ctx, namespace))
        lines.append(f"    return {int_literal(RET)}")
        run = make_function("\n".join(lines) + "\n", namespace, "run", ("r",))
    except UnsafeSourceError:
        return None  # an operand the generator refuses: the loop runs the function instead
    _MADE.add(run)
    return run


def _line(pc: int, ins: Instruction, step: Step, ctx: DecodeContext, ns: dict[str, Any]) -> str:
    ops = ins.operands

    def reg(operand: Any) -> str:
        return f"r[{int_literal(operand.index)}]"

    op = ins.op
    if op is Op.MOVE:
        return f"{reg(ops[0])} = {reg(ops[1])}"
    if op is Op.LOAD_INT:
        return f"{reg(ops[0])} = {int_literal(ops[1])}"
    if op is Op.LOAD_CONST:
        ns[f"c{pc}"] = ctx.constants[ops[1]]
        return f"{reg(ops[0])} = c{pc}"
    if op is Op.DIM:
        return f"{reg(ops[0])} = shape({reg(ops[1])})[{int_literal(ops[2])}]"
    if op is Op.GET_ITEM:
        return f"{reg(ops[0])} = {reg(ops[1])}[{int_literal(ops[2])}]"
    if op is Op.TUPLE:
        items = "".join(f"{reg(a)}, " for a in ops[1])
        return f"{reg(ops[0])} = ({items})"
    if op is Op.INVOKE:
        ns[f"k{pc}"] = ctx.kernels[ops[0]]
        args = ", ".join(reg(a) for a in (*ops[1], *ops[2]))
        return f"k{pc}({args})"
    if op is Op.CHECK_DIM:
        # The comparison inline; the step, which makes the message, only when it fails.
        ns[f"s{pc}"] = step
        return f"if shape({reg(ops[0])})[{int_literal(ops[1])}] != {reg(ops[2])}: s{pc}(r)"
    if op is Op.RET:
        return f"state[0] = {reg(ops[0])}"
    ns[f"s{pc}"] = step
    return f"s{pc}(r)"


def failing_pc(step: Step, tb: TracebackType | None) -> int | None:
    """The pc of the instruction a straight-line ``step`` failed in, from the traceback of the
    exception it raised (None if ``step`` is not one, or its frame is not in ``tb``)."""
    if step not in _MADE:
        return None
    code: CodeType = step.__code__
    while tb is not None:
        if tb.tb_frame.f_code is code:
            return max(tb.tb_lineno - 1 - _HEADER_LINES, 0)
        tb = tb.tb_next
    return None
