"""The memory sanitizer's checks around each opcode's step (``sanitizer.py`` applies them).

One rule per opcode (named by its entry in ``opcodes.py``): given the sanitizer, the instruction,
the inner backend's step and the instruction's listing (``main@3: kill (%1)``, for messages), it
returns the checked step. Instructions that use the values in their registers (their data, or
the object itself: ``invoke``, ``call``, ``ret``, ``tuple``, ``jump_if_not``, ``shape_func``)
check that each is alive, recursing into tuples (``alive``); those that read only a shape or an
int check only that the register was not killed (``not_killed``): a dead tensor's shape is still
right. Allocations, views, ``get_item`` and ``kill`` also update the sanitizer's records.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from .decode import DecodeContext, Step
from .errors import UnwrittenOutputError
from .fused_views import SCRATCH_VIEWS
from .isa import SIGNATURES, Instruction, Kind, Reg
from .memory.storage import Storage
from .sanitizer_memory import POISON_OTHER, Killed, check_not_killed, poison_byte
from .unwritten import checkable, describe_unwritten, shares_any, unwritten_elements

if TYPE_CHECKING:
    from .sanitizer import MemorySanitizer

#: ``rule(sanitizer, instruction, inner step, site, ctx)``: the checked step.
SanitizeRule = Callable[["MemorySanitizer", Instruction, Step, str, DecodeContext], Step]
#: The registers an instruction reads, each with its description for messages.
Reads = tuple[tuple[int, str], ...]
Check = Callable[[Any, int, str], None]


def _reads(ins: Instruction) -> Reads:
    """The registers ``ins`` reads (its ``src``/``srcs`` operands, and a ``val`` or ``shape``
    operand that is a register), described by their number."""
    out: list[tuple[int, str]] = []
    for kind, v in zip(SIGNATURES[ins.op], ins.operands, strict=True):
        if kind == Kind.SRC or (kind in (Kind.VAL, Kind.SHAPE) and isinstance(v, Reg)):
            out.append((v.index, f"register {v!r}"))
        elif kind == Kind.SRCS:
            out += [(r.index, f"register {r!r}") for r in v]
    return tuple(out)


def _role_reads(role: str, regs: Sequence[Reg]) -> list[tuple[int, str]]:
    return [(r.index, f"register {r!r} ({role} {k})") for k, r in enumerate(regs)]


def _checked(inner: Step, reads: Reads, check: Check) -> Step:
    """``inner`` after ``check`` of every register in ``reads``."""
    if not reads:
        return inner

    def step(r: list[Any]) -> int:
        for i, what in reads:
            check(r[i], i, what)
        return inner(r)

    return step


def alive(
    san: MemorySanitizer, ins: Instruction, inner: Step, site: str, ctx: DecodeContext
) -> Step:
    """Every register it reads must hold a live value (fields of tuples too)."""
    return _checked(inner, _reads(ins), san.check)


def not_killed(
    san: MemorySanitizer, ins: Instruction, inner: Step, site: str, ctx: DecodeContext
) -> Step:
    """No register it reads may have been killed (it reads a shape or an int only)."""
    return _checked(inner, _reads(ins), check_not_killed)


def call(
    san: MemorySanitizer, ins: Instruction, inner: Step, site: str, ctx: DecodeContext
) -> Step:
    """Every argument alive."""
    return _checked(inner, tuple(_role_reads("argument", ins.operands[2])), san.check)


def tail_call(
    san: MemorySanitizer, ins: Instruction, inner: Step, site: str, ctx: DecodeContext
) -> Step:
    """Every argument alive."""
    return _checked(inner, tuple(_role_reads("argument", ins.operands[1])), san.check)


def invoke(
    san: MemorySanitizer, ins: Instruction, inner: Step, site: str, ctx: DecodeContext
) -> Step:
    """Inputs and outputs alive (writing into a freed buffer corrupts its new tenant), and every
    element of every output written by the kernel."""
    reads = (*_role_reads("input", ins.operands[1]), *_role_reads("output", ins.operands[2]))
    # Scratch a fused kernel replaced by a view of another array is left as it was (fused_views).
    viewed: frozenset[int] = getattr(ctx.kernels[ins.operands[0]], SCRATCH_VIEWS, frozenset())
    checked = _checked(inner, reads, san.check)
    return _outputs_written(checked, ins, site, _kernel_name(ins, ctx), viewed)


def kill(
    san: MemorySanitizer, ins: Instruction, inner: Step, site: str, ctx: DecodeContext
) -> Step:
    """The killed registers hold a ``Killed`` marker; a storage it freed names the kill."""
    regs, marker = tuple(a.index for a in ins.operands[0]), Killed(site)

    def step(r: list[Any]) -> int:
        # The inner step frees a killed storage (only a storage returns memory; a tensor view's
        # register is just dropped, other views of its storage stay valid); which ones it freed
        # is seen from their records, and the free is named after this kill.
        alive = [
            state
            for i in regs
            if type(v := r[i]) is Storage and (state := v.sanitizer) is not None and state.alive
        ]
        pc = inner(r)
        for i in regs:
            r[i] = marker
        for state in alive:
            if not state.alive:
                state.freed_by = site
        return pc

    return step


def alloc_storage(
    san: MemorySanitizer, ins: Instruction, inner: Step, site: str, ctx: DecodeContext
) -> Step:
    """A live size; the storage named after this instruction and poisoned by its dtype hint."""
    ops, reads, check = ins.operands, _reads(ins), san.check
    d, poison = ops[0].index, poison_byte(ops[3])
    # The inner step allocates through SanitizingAllocator, which poisons with the default byte;
    # a float storage is filled again with its own (a NaN).
    refill = poison != POISON_OTHER

    def step(r: list[Any]) -> int:
        for i, what in reads:
            check(r[i], i, what)
        pc = inner(r)
        st = r[d]
        state = st.sanitizer
        if state is not None:
            state.allocated_by = site
            if refill:
                state.poison = poison
                st.buf.fill(poison)
        return pc

    return step


def alloc_tensor(
    san: MemorySanitizer, ins: Instruction, inner: Step, site: str, ctx: DecodeContext
) -> Step:
    """A live storage; the view remembered with its storage's generation."""
    reads, check, remember = _reads(ins), san.check, san.remember
    d, s = ins.operands[0].index, ins.operands[1].index

    def step(r: list[Any]) -> int:
        for i, what in reads:
            check(r[i], i, what)
        pc = inner(r)
        state = r[s].sanitizer
        if state is not None:
            remember(r[d], state, state.generation)
        return pc

    return step


def reshape(
    san: MemorySanitizer, ins: Instruction, inner: Step, site: str, ctx: DecodeContext
) -> Step:
    """A live source; the new view remembered with the source's storage and generation."""
    reads, check, remember, views = _reads(ins), san.check, san.remember, san.views
    d, s = ins.operands[0].index, ins.operands[1].index

    def step(r: list[Any]) -> int:
        for i, what in reads:
            check(r[i], i, what)
        pc = inner(r)
        entry = views.get(id(r[s]))
        if entry is not None:  # the new view is of the same storage and generation
            remember(r[d], entry[1], entry[2])
        return pc

    return step


def get_item(
    san: MemorySanitizer, ins: Instruction, inner: Step, site: str, ctx: DecodeContext
) -> Step:
    """The tuple not killed, and, after the read, the field it read alive."""
    reads, check = _reads(ins), san.check
    d, src = ins.operands[0].index, reads[0][0]
    what_field = f"field {ins.operands[2]} of {reads[0][1]}"

    def step(r: list[Any]) -> int:
        for i, what in reads:
            check_not_killed(r[i], i, what)
        pc = inner(r)
        # Only the field read must be alive: a tuple may hold dead fields it never yields.
        check(r[d], src, what_field)
        return pc

    return step


def _kernel_name(ins: Instruction, ctx: DecodeContext) -> str:
    """The display name of the kernel-table entry an ``invoke`` calls (``k3`` if unnamed)."""
    index = ins.operands[0]
    names = ctx.names.get(Kind.KERNEL) or ()
    return str(names[index]) if index < len(names) else f"k{index}"


def _outputs_written(
    inner: Step, ins: Instruction, site: str, kernel: str, viewed: frozenset[int] = frozenset()
) -> Step:
    """``inner`` (an ``invoke`` step, already checked for dead values) run with its outputs
    poisoned, raising UnwrittenOutputError if the kernel left an element unwritten.

    An invocation with an output that overlaps an input (a kernel working in place) is run
    unchecked: poisoning that output would destroy the input. So is one with an output that is
    not a plain C-contiguous array, or is empty. Outputs at the positions ``viewed`` (scratch
    the kernel does not use) are neither poisoned nor checked.
    """
    ins_regs = tuple(r.index for r in ins.operands[1])
    checked = [(i, r.index) for i, r in enumerate(ins.operands[2]) if i not in viewed]
    positions, out_regs = tuple(i for i, _ in checked), tuple(reg for _, reg in checked)

    def step(r: list[Any]) -> int:
        outputs = [r[i] for i in out_regs]
        inputs = [r[i] for i in ins_regs]
        if not all(checkable(o) for o in outputs) or any(shares_any(o, inputs) for o in outputs):
            return inner(r)
        pcs: list[int] = []
        # A second run (only when the first poison remains) rewrites the same outputs from the
        # same inputs, which no output overlaps: the kernel's result is unchanged by it.
        missing = unwritten_elements(lambda: pcs.append(inner(r)), outputs)
        if missing:
            k, flat = missing[0]
            raise UnwrittenOutputError(
                f"kernel {kernel} did not write {describe_unwritten(outputs[k], flat)} of its "
                f"output {positions[k]} (register %{out_regs[k]}, {outputs[k].dtype} "
                f"{tuple(outputs[k].shape)}): the result would hold stale memory",
                kernel,
                positions[k],
                site,
            )
        return pcs[-1]

    return step
