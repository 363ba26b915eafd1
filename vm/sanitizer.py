"""The memory sanitizer: ``VirtualMachine(exe, check_memory=True)``.

Four mechanisms (design/vm.md, "Memory sanitizer"):

- **Poison.** Every storage's bytes are overwritten when it is handed out (a fresh buffer, or one
  carved from the pool for a new tenant) and when it is freed (``kill``, the end of a call, a
  fused kernel's scratch): ``0xFF`` for a storage whose dtype hint is a float (a NaN in every
  float width), ``0xA5`` otherwise (a large odd integer of either sign; never a plausible index).
  Stale data cannot masquerade as a value.
- **Generations.** Each storage carries a record (``Storage.sanitizer``): alive or not, a
  generation bumped at every allocation, and the instruction that allocated and freed it. Each
  tensor view made by ``alloc_tensor`` or ``reshape`` is remembered with the storage record and
  generation it was made from (in a table keyed by ``id(view)``, whose entries go away with the
  view through a weak reference). A view is dead when its storage is not alive, or alive in a
  later generation (freed and reused for another tensor).
- **Killed registers.** ``kill`` leaves a ``Killed`` marker in the register (instead of None)
  naming the kill, so a later read says which kill it was.

- **Unwritten outputs.** Every ``invoke`` runs with its outputs poisoned (``unwritten.py``);
  an element the kernel did not write is an ``UnwrittenOutputError`` naming the kernel and the
  output. Calls whose outputs overlap an input (in place) are not poisoned.

Checks run before an instruction (after it for ``get_item``, on the field it read):
``invoke`` (inputs and outputs), ``call``, ``ret``, ``tuple``, ``reshape``, ``jump_if_not``,
``shape_func`` and ``alloc_tensor`` (its storage) check that every register they read, and every
field of a tuple in it, is alive; the instructions that read only a shape or an int (``move``,
``shape_of``, ``dim``, ``check_dim``, ``check``, ``shape_program``) check only that the register
was not killed - a dead tensor's *shape* is still right, and reading it touches no memory. A
failure is a ``DeadTensorError``.

It is a backend wrapper (``SanitizingBackend``, ``backend.py``): the steps of the backend it
wraps do the work, the sanitizer's checks run around them, and the VM's storages come through
``SanitizingAllocator``. Nothing here runs unless the option is on (or the wrapper is chosen).
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from typing import Any

import numpy as np

from .backend import Backend, BackendWrapper, decode_function
from .decode import DecodeContext, Step
from .errors import DeadTensorError, UnwrittenOutputError, VMError
from .executable import Function
from .isa import SIGNATURES, Instruction, Kind, Op, Reg, format_instruction
from .memory.allocator import Allocator
from .memory.storage import MIN_ALIGNMENT, Storage
from .unwritten import checkable, describe_unwritten, shares_any, unwritten_elements

#: Poison byte of a storage whose dtype hint is a float: all-ones is a NaN in float16/32/64.
POISON_FLOAT = 0xFF
#: Poison byte of any other storage: 0xA5A5... is a large odd integer in every int width.
POISON_OTHER = 0xA5

#: What freed a storage that the bytecode did not kill.
END_OF_CALL = "the end of the call (a storage the call left alive)"
SCRATCH = "a fused kernel (its scratch buffer)"
HANDED_OVER = "the hand-over of an output to the caller"


def poison_byte(dtype_hint: str) -> int:
    """The poison byte of a storage whose tensors are expected to be ``dtype_hint``."""
    return POISON_FLOAT if np.dtype(dtype_hint).kind == "f" else POISON_OTHER


class StorageState:
    """The sanitizer's record of one storage (``Storage.sanitizer``)."""

    __slots__ = ("alive", "allocated_by", "freed_by", "generation", "poison")

    def __init__(self) -> None:
        self.alive = False
        """Handed out and not freed since."""
        self.generation = 0
        """Bumped at every allocation: a view of an earlier generation is dead."""
        self.allocated_by = ""
        """The instruction (or event) of the latest allocation."""
        self.freed_by = ""
        """The instruction (or event) of the latest free."""
        self.poison = POISON_OTHER
        """The byte its memory is filled with when it is not in use."""


class Killed:
    """What a killed register holds in a checked VM (an unchecked one stores None)."""

    __slots__ = ("site",)

    def __init__(self, site: str) -> None:
        self.site = site
        """The ``kill`` instruction, as ``function@pc: listing``."""

    def __repr__(self) -> str:
        return f"<killed by {self.site}>"


class SanitizingAllocator(Allocator):
    """Wraps the VM's allocator: poisons and tracks every storage it hands out or takes back.

    Counters, limits and the pool are the wrapped allocator's (``stats`` is the same object).
    """

    def __init__(self, inner: Allocator) -> None:
        # Not Allocator.__init__: the counters and the limit are the inner allocator's.
        self.inner = inner
        """The allocator that owns the memory."""
        self.memory_limit = inner.memory_limit
        self.stats = inner.stats

    def alloc(
        self,
        nbytes: int,
        alignment: int = MIN_ALIGNMENT,
        poison: int = POISON_OTHER,
        site: str = SCRATCH,
    ) -> Storage:
        storage = self.inner.alloc(nbytes, alignment)
        state = storage.sanitizer
        if state is None:
            state = storage.sanitizer = StorageState()
        state.alive = True
        state.generation += 1
        state.allocated_by = site
        state.poison = poison
        storage.buf.fill(poison)
        return storage

    def free(self, storage: Storage, site: str = SCRATCH) -> None:
        state = storage.sanitizer
        if state is not None:
            state.alive = False
            state.freed_by = site
            storage.buf.fill(state.poison)
        self.inner.free(storage)

    def free_leftover(self, storage: Storage) -> None:
        """Free a storage the call did not kill, when the top-level call ends."""
        self.free(storage, END_OF_CALL)

    def detach(self, storage: Storage) -> None:
        self._handed_over(storage)
        self.inner.detach(storage)

    def lend(self, storage: Storage) -> None:
        self._handed_over(storage)
        self.inner.lend(storage)

    def _handed_over(self, storage: Storage) -> None:
        # The caller's now: a view of it left in a register would be a use after return.
        state = storage.sanitizer
        if state is not None:
            state.alive = False
            state.freed_by = HANDED_OVER

    def is_cached(self, raw: object) -> bool:
        return self.inner.is_cached(raw)

    def release(self) -> None:
        self.inner.release()

    def end_call(self) -> None:
        self.inner.end_call()


#: Instructions that use the values in their registers (data, or the object itself).
_USES_VALUE = frozenset(
    {
        Op.INVOKE,
        Op.CALL,
        Op.TAIL_CALL,
        Op.RET,
        Op.TUPLE,
        Op.RESHAPE,
        Op.JUMP_IF_NOT,
        Op.SHAPE_FUNC,
        Op.ALLOC_TENSOR,
        Op.ALLOC_STORAGE,
    }
)


def _read_registers(ins: Instruction) -> list[tuple[int, str]]:
    """The registers ``ins`` reads, each with a description for messages."""
    out: list[tuple[int, str]] = []
    if ins.op == Op.INVOKE:
        for role, regs in (("input", ins.operands[1]), ("output", ins.operands[2])):
            out += [(r.index, f"register {r!r} ({role} {k})") for k, r in enumerate(regs)]
        return out
    if ins.op in (Op.CALL, Op.TAIL_CALL):
        args = ins.operands[2] if ins.op == Op.CALL else ins.operands[1]
        return [(r.index, f"register {r!r} (argument {k})") for k, r in enumerate(args)]
    for kind, v in zip(SIGNATURES[ins.op], ins.operands, strict=True):
        if kind == Kind.SRC or (kind in (Kind.VAL, Kind.SHAPE) and isinstance(v, Reg)):
            out.append((v.index, f"register {v!r}"))
        elif kind == Kind.SRCS:
            out += [(r.index, f"register {r!r}") for r in v]
    return out


class MemorySanitizer:
    """The checked decoding of one VM, and the table of the tensor views it made."""

    def __init__(self, allocator: Allocator) -> None:
        self.allocator = SanitizingAllocator(allocator)
        """Where the checked VM's storages come from."""
        # id(view) -> (weak reference to the view, its storage's record, generation)
        self._views: dict[int, tuple[Any, StorageState, int]] = {}

    # The view table -----------------------------------------------------------------------

    def _remember(self, view: Any, state: StorageState, generation: int) -> None:
        if type(view) is not np.ndarray:
            return
        views, key = self._views, id(view)

        def forget(_: Any) -> None:
            # Runs when the view is deallocated, before its id can be reused.
            views.pop(key, None)

        views[key] = (weakref.ref(view, forget), state, generation)

    def check(self, value: Any, reg: int, what: str) -> None:
        """Raise DeadTensorError if ``value`` (read from register ``reg``, described by
        ``what``) is dead."""
        t = type(value)
        if t is np.ndarray:
            entry = self._views.get(id(value))
            if entry is not None:
                state, generation = entry[1], entry[2]
                if not state.alive or state.generation != generation:
                    raise _dead_view(reg, what, state, generation)
        elif t is Killed:
            raise DeadTensorError(f"dead value: {what} was killed by {value.site}", reg, value.site)
        elif t is tuple:
            for k, field in enumerate(value):
                if type(field) is not int:
                    self.check(field, reg, f"field {k} of {what}")
        elif t is Storage:
            state = value.sanitizer
            if state is not None and not state.alive:
                raise DeadTensorError(
                    f"dead storage: {what} holds a storage freed by {state.freed_by}",
                    reg,
                    state.freed_by,
                )

    # Wrapping an inner backend's steps ----------------------------------------------------

    def wrap(self, f: Function, steps: Sequence[Step], ctx: DecodeContext) -> list[Step]:
        """The checked steps of ``f``: each of ``steps`` (the inner backend's, by pc) with the
        checks of its instruction around it. ``ctx.allocator`` must hand out storages through
        ``self.allocator`` (``SanitizingBackend.attach`` sees to it)."""
        out = []
        for pc, (ins, inner) in enumerate(zip(f.code, steps, strict=True)):
            site = f"{f.name}@{pc}: {format_instruction(ins, ctx.names)}"
            step = self._wrap_one(ins, inner, site)
            if ins.op == Op.INVOKE:
                step = _checking_outputs_written(step, ins, site, _kernel_name(ins, ctx))
            out.append(step)
        return out

    def _wrap_one(self, ins: Instruction, inner: Step, site: str) -> Step:
        ops = ins.operands
        reads = tuple(_read_registers(ins))
        if ins.op == Op.KILL:
            return self._kill(inner, ops, site)
        if ins.op == Op.ALLOC_STORAGE:
            return self._alloc_storage(inner, reads, ops, site)
        check = self.check
        if ins.op not in _USES_VALUE:
            check = _check_not_killed
        if ins.op == Op.ALLOC_TENSOR:
            return self._alloc_tensor(inner, reads, ops[0].index, ops[1].index)
        if ins.op == Op.RESHAPE:
            return self._reshape(inner, reads, ops[0].index, ops[1].index)
        if ins.op == Op.GET_ITEM:
            return self._get_item(inner, reads, ops[0].index, f"field {ops[2]} of {reads[0][1]}")
        if not reads:
            return inner

        def step(r: list[Any]) -> int:
            for i, what in reads:
                check(r[i], i, what)
            return inner(r)

        return step

    def _kill(self, inner: Step, ops: tuple[Any, ...], site: str) -> Step:
        regs, marker = tuple(a.index for a in ops[0]), Killed(site)

        def step(r: list[Any]) -> int:
            # The inner step frees a killed storage (only a storage returns memory; a tensor
            # view's register is just dropped, other views of its storage stay valid); which
            # ones it freed is seen from their records, and the free is named after this kill.
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

    def _alloc_storage(
        self, inner: Step, reads: Sequence[tuple[int, str]], ops: tuple[Any, ...], site: str
    ) -> Step:
        d, poison, check = ops[0].index, poison_byte(ops[3]), self.check
        # The inner step allocates through SanitizingAllocator, which poisons with the default
        # byte; a float storage is filled again with its own (a NaN).
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

    def _alloc_tensor(self, inner: Step, reads: Sequence[tuple[int, str]], d: int, s: int) -> Step:
        check, remember = self.check, self._remember

        def step(r: list[Any]) -> int:
            for i, what in reads:
                check(r[i], i, what)
            pc = inner(r)
            state = r[s].sanitizer
            if state is not None:
                remember(r[d], state, state.generation)
            return pc

        return step

    def _reshape(self, inner: Step, reads: Sequence[tuple[int, str]], d: int, s: int) -> Step:
        check, remember, views = self.check, self._remember, self._views

        def step(r: list[Any]) -> int:
            for i, what in reads:
                check(r[i], i, what)
            pc = inner(r)
            entry = views.get(id(r[s]))
            if entry is not None:  # the new view is of the same storage and generation
                remember(r[d], entry[1], entry[2])
            return pc

        return step

    def _get_item(
        self, inner: Step, reads: Sequence[tuple[int, str]], d: int, what_field: str
    ) -> Step:
        check, src = self.check, reads[0][0]

        def step(r: list[Any]) -> int:
            for i, what in reads:
                _check_not_killed(r[i], i, what)
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


def _checking_outputs_written(inner: Step, ins: Instruction, site: str, kernel: str) -> Step:
    """``inner`` (an ``invoke`` step, already checked for dead values) run with its outputs
    poisoned, raising UnwrittenOutputError if the kernel left an element unwritten.

    An invocation with an output that overlaps an input (a kernel working in place) is run
    unchecked: poisoning that output would destroy the input. So is one with an output that is
    not a plain C-contiguous array, or is empty.
    """
    ins_regs = tuple(r.index for r in ins.operands[1])
    out_regs = tuple(r.index for r in ins.operands[2])

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
                f"output {k} (register %{out_regs[k]}, {outputs[k].dtype} "
                f"{tuple(outputs[k].shape)}): the result would hold stale memory",
                kernel,
                k,
                site,
            )
        return pcs[-1]

    return step


def _check_not_killed(value: Any, reg: int, what: str) -> None:
    if type(value) is Killed:
        raise DeadTensorError(f"dead value: {what} was killed by {value.site}", reg, value.site)


def _dead_view(reg: int, what: str, state: StorageState, generation: int) -> DeadTensorError:
    if not state.alive and state.generation == generation:
        text = f"dead tensor: {what} is a view of a storage freed by {state.freed_by}"
    elif state.alive and state.generation == generation + 1:
        text = (
            f"dead tensor: {what} is a view of a storage freed by {state.freed_by} and since "
            f"reused by {state.allocated_by} (the view is of generation {generation}, the "
            f"storage is now at generation {state.generation})"
        )
    else:
        text = (
            f"dead tensor: {what} is a view of a storage freed and reused since (the view is "
            f"of generation {generation}, the storage is now at generation {state.generation}"
            f"{'' if state.alive else ' and freed'}; latest allocation by "
            f"{state.allocated_by}, latest free by {state.freed_by})"
        )
    return DeadTensorError(text, reg, state.freed_by)


class SanitizingBackend(BackendWrapper):
    """The memory sanitizer as a backend wrapper: ``VirtualMachine(exe, check_memory=True)``
    wraps the chosen backend in one; ``backend=SanitizingBackend(inner)`` does it by hand.

    It serves one VM (its view table and allocator wrapper are that VM's): attaching it to a
    second VM with another allocator is refused.
    """

    def __init__(self, inner: Backend | None = None) -> None:
        super().__init__(inner)
        self.sanitizer: MemorySanitizer | None = None
        """The sanitizer, made when a VM attaches the backend."""

    def attach(self, allocator: Allocator) -> Allocator:
        inner = self.inner.attach(allocator)
        if self.sanitizer is None:
            self.sanitizer = MemorySanitizer(inner)
        elif self.sanitizer.allocator.inner is not inner:
            raise VMError(
                "this SanitizingBackend already serves a VirtualMachine with another "
                "allocator: give each VM its own backend"
            )
        return self.sanitizer.allocator

    def decode(self, function: Function, ctx: DecodeContext) -> list[Step]:
        if self.sanitizer is None:
            raise VMError("a SanitizingBackend decodes only for a VM it is attached to")
        return self.sanitizer.wrap(function, decode_function(self.inner, function, ctx), ctx)
