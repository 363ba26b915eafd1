"""A function without loops or calls as one generated Python function.

The loop (``interpreter.py``) pays for every instruction: a call of its closure, the returned
pc, a test of it. A function whose bytecode has no call, tail call or backward jump runs each
instruction at most once, in order, so ``ClosureBackend`` compiles it into one function of the
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

Forward branches become nested ``if``/``else`` blocks: ``jump_if_not %c, T`` opens
``if r[c]:`` over the instructions up to ``T``; when the last of them is ``jump E`` (the end of
the then-branch), the instructions from ``T`` to ``E`` are its ``else:``. That is the shape the
compiler emits for ``if``/``else`` and for the choice between memory plans; any other forward
jump (into the middle of a branch, past the end of the enclosing one) keeps the loop.

Moves, constants, dims, tuple reads and builds, kernel calls, the comparisons of a
``check_dim`` and a ``check_values`` (their closures run only to raise their errors), branch
conditions and returns are written out (each opcode's lines are its rule in
``straight_lines.py``, named by its entry in ``opcodes.py``); the other instructions
(allocations, kills, checks, shape programs) call their closure, so they keep its run-time
checks. Only a closure ``decode.py`` made is written out: a step a backend subclass made
itself is called, and such a jump or return keeps the loop. The function is step 0 of the
decoded function; the other steps are the instructions' own closures (never reached: nothing
jumps). An error names its instruction: ``failing_pc`` (the backend's ``locate``) maps the
line the generated frame stopped at, read from the traceback, to its pc (nothing is paid for
it on the fast path).

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
from .decode import DecodeContext, Step, is_stock
from .isa import Instruction, Op
from .memory.arena import Arena
from .opcodes import OPCODES
from .straight_arena import (
    Arm,
    arena_lifetimes,
    kill_lines,
    make_arena,
    single_views,
    slot_lines,
    taken_view_lines,
    view_lines,
)
from .straight_lines import call_step

#: The deepest nesting of branches generated (deeper functions keep the loop).
MAX_DEPTH = 40

#: The straight-line steps made, each with its source and the pc of every line of it (None for
#: a line that is no instruction's: the ``def``, an ``else:``).
_MADE: weakref.WeakKeyDictionary[Step, tuple[str, tuple[int | None, ...]]] = (
    weakref.WeakKeyDictionary()
)


class _Unstructured(Exception):
    """A jump the generator does not turn into ``if``/``else`` (the loop runs the function)."""


def forward_only(code: Sequence[Instruction]) -> bool:
    """True if ``code`` has no call or tail call and every jump goes forward: each instruction
    then runs at most once per call, in order."""
    for pc, ins in enumerate(code):
        spec = OPCODES[ins.op]
        if spec.callee is not None:
            return False
        if spec.target is not None and ins.operands[spec.target] <= pc:
            return False
    return True


def straight_line(
    code: Sequence[Instruction], steps: list[Step], ctx: DecodeContext
) -> Step | None:
    """One step running all of ``code`` (its closures are ``steps``), or None if the function
    has loops or calls, jumps the generator cannot nest, or does not end in a ``ret``."""
    if not code or code[-1].op is not Op.RET or not forward_only(code):
        return None
    try:
        out = _generate(code, steps, ctx, {})
        if ctx.allocator.packs_arenas:
            lifetimes = arena_lifetimes(code, steps, out.arms)
            if lifetimes:  # again, with the storages that qualify as slots of an arena
                slots = {pc: k for k, pc in enumerate(sorted(lifetimes))}
                taken = single_views(code, steps, sorted(lifetimes), out.arms)
                out = _generate(code, steps, ctx, slots, make_arena(ctx, lifetimes), taken)
        source = out.text()
        run = make_function(source, out.ns, "run", ("r",))
    except (UnsafeSourceError, _Unstructured):
        return None  # an operand or a jump the generator refuses: the loop runs the function
    _MADE[run] = (source, tuple(out.pcs))
    return run


def _generate(
    code: Sequence[Instruction],
    steps: list[Step],
    ctx: DecodeContext,
    slots: dict[int, int],
    arena: Arena | None = None,
    taken: dict[int, int] | None = None,
) -> _Source:
    """The source of the function; the ``alloc_storage`` at each pc of ``slots`` is served by
    that slot of ``arena`` (``memory/arena.py``), whose buffer is taken first and given back
    before each return; ``taken``: the slots written with their one view (``single_views``)."""
    namespace: dict[str, Any] = {"shape": operator.attrgetter("shape"), "state": ctx.state}
    out = _Source(code, steps, ctx, namespace, slots, arena, taken or {})
    if arena is not None:
        namespace.update(AB=arena.begin, AE=arena.end)
        out.emit(1, "AB()", min(slots))  # an error in it names the first slot's allocation
    out.block(0, len(code), 1)
    return out


def generated_source(step: Step) -> str | None:
    """The Python source of a straight-line ``step`` (None for any other step): what a
    function runs as, for reading and for tests."""
    made = _MADE.get(step)
    return made[0] if made is not None else None


class _Source:
    """The lines of the generated function and the pc of each."""

    def __init__(
        self,
        code: Sequence[Instruction],
        steps: list[Step],
        ctx: DecodeContext,
        ns: dict[str, Any],
        slots: dict[int, int],
        arena: Arena | None,
        taken: dict[int, int],
    ) -> None:
        self.code, self.steps, self.ctx, self.ns = code, steps, ctx, ns
        self.slots, self.arena = slots, arena
        self.slot_registers = frozenset(code[pc].operands[0].index for pc in slots)
        # a slot and its one view as one line (straight_arena.py): view pc -> slot pc
        self.taken = taken
        taken_storages = set(taken.values())
        self.unwritten = frozenset(code[pc].operands[0].index for pc in taken_storages)
        self.taken_storages = frozenset(taken_storages)
        self.lines = ["def run(r):"]
        self.pcs: list[int | None] = [None]
        self.arm: Arm = ()
        self.arms: dict[int, Arm] = {}
        """The branch each instruction written out sits in (``straight_arena.py``)."""

    def emit(self, depth: int, text: str, pc: int | None) -> None:
        self.lines.append("    " * depth + text)
        self.pcs.append(pc)

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"

    def block(self, start: int, end: int, depth: int) -> None:
        """Emit the instructions ``start .. end - 1`` (at least a ``pass``) at ``depth``."""
        if depth > MAX_DEPTH:
            raise _Unstructured
        code, pc = self.code, start
        first = len(self.lines)
        while pc < end:
            ins = code[pc]
            spec = OPCODES[ins.op]
            self.arms[pc] = self.arm
            if spec.target is not None and not _stock(self.steps[pc]):
                raise _Unstructured  # a backend's own jump: the loop runs it
            if spec.target is not None and not spec.ends:
                pc = self.branch(pc, end, depth)
            elif spec.target is not None:
                if ins.operands[spec.target] != pc + 1:
                    raise _Unstructured  # skips code that only another jump could reach
                self.emit(depth, "pass", pc)
                pc += 1
            else:
                for line in self.lines_of(pc, ins):
                    self.emit(depth, line, pc)
                pc += 1
        if len(self.lines) == first:  # nothing written (no code, or only lines made elsewhere)
            self.emit(depth, "pass", None)

    def lines_of(self, pc: int, ins: Instruction) -> tuple[str, ...]:
        """The lines of the instruction at ``pc``: its opcode's rule (``straight_lines.py``)
        when its step is ``decode.py``'s, else a call of the step."""
        step, rule = self.steps[pc], OPCODES[ins.op].line
        if pc in self.taken_storages:
            return ()  # written with its view, the next instruction
        if self.arena is not None and pc in self.taken:
            at = self.taken[pc]
            return taken_view_lines(self.slots[at], self.code[at], ins, self.arena, self.ns)
        if self.arena is not None and pc in self.slots:
            return slot_lines(self.slots[pc], ins, self.arena, self.ns)
        if self.arena is not None and ins.op is Op.KILL and _stock(step):
            return kill_lines(pc, ins, step, self.slot_registers, self.unwritten, self.ns)
        if (
            self.arena is not None
            and ins.op is Op.ALLOC_TENSOR
            and _stock(step)
            and ins.operands[1].index in self.slot_registers
        ):
            return view_lines(pc, ins, self.ns)
        if rule is not None and _stock(step):
            lines = rule(pc, ins, step, self.ctx, self.ns)
            if self.slots and OPCODES[ins.op].ends:  # a return: the arena's buffer goes back
                return ("AE()", *lines)
            return lines
        if OPCODES[ins.op].ends:
            raise _Unstructured  # a backend's own return: the loop runs the function
        return call_step(pc, step, self.ns)

    def branch(self, pc: int, end: int, depth: int) -> int:
        """Emit the ``if`` of the ``jump_if_not`` at ``pc`` (and its ``else``); the pc after."""
        cond, target = self.code[pc].operands
        target = int(target)
        if not pc < target <= end:
            raise _Unstructured
        last = self.code[target - 1]
        self.emit(depth, f"if r[{int_literal(cond.index)}]:", pc)
        outer = self.arm
        if target - 1 > pc and _is_jump(last) and target <= last.operands[0] <= end:
            if not _stock(self.steps[target - 1]):
                raise _Unstructured  # a backend's own jump: the loop runs it
            join = int(last.operands[0])
            self.arm = (*outer, (pc, 0))
            self.block(pc + 1, target - 1, depth + 1)
            self.emit(depth + 1, "pass", target - 1)  # the then-branch's jump to the join
            self.emit(depth, "else:", None)
            self.arm = (*outer, (pc, 1))
            self.block(target, join, depth + 1)
            self.arm = outer
            return join
        self.arm = (*outer, (pc, 0))
        self.block(pc + 1, target, depth + 1)
        self.arm = outer
        return target


def _is_jump(ins: Instruction) -> bool:
    """True for an unconditional jump (its target is its only operand)."""
    spec = OPCODES[ins.op]
    return spec.target is not None and spec.ends


def _stock(step: Step) -> bool:
    """True if ``step`` is a closure ``decode.py`` made: it does just what its instruction says,
    so the instruction may be written out instead of calling it. Any other step (a backend
    subclass's own) is called."""
    return is_stock(step)


def failing_pc(step: Step, tb: TracebackType | None) -> int | None:
    """The pc of the instruction a straight-line ``step`` failed in, from the traceback of the
    exception it raised (None if ``step`` is not one, or its frame is not in ``tb``)."""
    made = _MADE.get(step)
    if made is None:
        return None
    pcs = made[1]
    code: CodeType = step.__code__
    while tb is not None:
        if tb.tb_frame.f_code is code:
            line = tb.tb_lineno - 1
            return pcs[line] if 0 <= line < len(pcs) else None
        tb = tb.tb_next
    return None
