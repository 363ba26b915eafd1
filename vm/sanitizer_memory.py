"""The memory sanitizer's records of storages: poison bytes, generations, killed registers.

``SanitizingAllocator`` wraps the VM's allocator when the sanitizer is on (``sanitizer.py``): it
fills every storage it hands out or takes back with a poison byte and keeps a ``StorageState``
per storage (alive, generation, who allocated and freed it). A killed register holds a
``Killed`` marker naming the kill. The checks that read these records are ``sanitizer.py``'s and,
per opcode, ``sanitize_rules.py``'s.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .errors import DeadTensorError
from .memory.allocator import Allocator
from .memory.storage import MIN_ALIGNMENT, Storage

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

    def count_append(self, nbytes: int, in_place: bool) -> None:
        self.inner.count_append(nbytes, in_place)

    def release(self) -> None:
        self.inner.release()

    def end_call(self) -> None:
        self.inner.end_call()


def check_not_killed(value: Any, reg: int, what: str) -> None:
    """Raise DeadTensorError if ``value`` (read from register ``reg``) is a ``Killed`` marker."""
    if type(value) is Killed:
        raise DeadTensorError(f"dead value: {what} was killed by {value.site}", reg, value.site)
