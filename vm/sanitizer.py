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
wraps do the work, the sanitizer's checks run around them (each opcode's rule is named by its
entry in ``opcodes.py``; the rules are ``sanitize_rules.py``, the storage records
``sanitizer_memory.py``), and the VM's storages come through
``SanitizingAllocator``. Nothing here runs unless the option is on (or the wrapper is chosen).
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from typing import Any

import numpy as np

from .backend import Backend, BackendWrapper, decode_function
from .decode import DecodeContext, Step
from .errors import DeadTensorError, VMError
from .executable import Function
from .isa import format_instruction
from .memory.allocator import Allocator
from .memory.storage import Storage
from .opcodes import OPCODES
from .sanitizer_memory import (
    END_OF_CALL,
    HANDED_OVER,
    POISON_FLOAT,
    POISON_OTHER,
    SCRATCH,
    Killed,
    SanitizingAllocator,
    StorageState,
    poison_byte,
)

__all__ = [
    "END_OF_CALL",
    "HANDED_OVER",
    "POISON_FLOAT",
    "POISON_OTHER",
    "SCRATCH",
    "Killed",
    "MemorySanitizer",
    "SanitizingAllocator",
    "SanitizingBackend",
    "StorageState",
    "poison_byte",
]


class MemorySanitizer:
    """The checked decoding of one VM, and the table of the tensor views it made."""

    def __init__(self, allocator: Allocator) -> None:
        self.allocator = SanitizingAllocator(allocator)
        """Where the checked VM's storages come from."""
        self.views: dict[int, tuple[Any, StorageState, int]] = {}
        """id(view) -> (weak reference to the view, its storage's record, generation): the
        views made by ``alloc_tensor`` and ``reshape`` that still exist."""

    # The view table -----------------------------------------------------------------------

    def remember(self, view: Any, state: StorageState, generation: int) -> None:
        """Note that ``view`` (an array) is of the storage ``state`` at ``generation``."""
        if type(view) is not np.ndarray:
            return
        views, key = self.views, id(view)

        def forget(_: Any) -> None:
            # Runs when the view is deallocated, before its id can be reused.
            views.pop(key, None)

        views[key] = (weakref.ref(view, forget), state, generation)

    def check(self, value: Any, reg: int, what: str) -> None:
        """Raise DeadTensorError if ``value`` (read from register ``reg``, described by
        ``what``) is dead."""
        t = type(value)
        if t is np.ndarray:
            entry = self.views.get(id(value))
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
        return [
            OPCODES[ins.op].sanitize(
                self, ins, inner, f"{f.name}@{pc}: {format_instruction(ins, ctx.names)}", ctx
            )
            for pc, (ins, inner) in enumerate(zip(f.code, steps, strict=True))
        ]


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
