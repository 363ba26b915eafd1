"""One buffer a call for the storages a straight-line function allocates and kills itself.

The planner decides which tensors share a storage; what is left is one ``alloc_storage`` and
one ``kill`` per storage, each a trip through the allocator (its lock, its pool, its counters):
about 2.7 us a pair here, a fifth of a small decoder step's time. In a function without loops
or calls (``vm/straight.py``) a storage that is used only by ``alloc_tensor`` views and killed
by one ``kill`` in the same branch lives exactly from its ``alloc_storage`` to that ``kill``, an
interval of pcs known when the VM decodes. Such storages become *slots* of one ``Arena``: each
slot a fixed place in one buffer, placed so that slots whose intervals overlap never overlap in
memory. A call then asks the allocator for the arena's buffer once, at the function's start,
and gives it back once, at its return; ``alloc_storage`` of a slot is a comparison and a
register write, and its ``kill`` drops the register.

Sizes are run-time values, so the layout is learned: a slot starts with no capacity, and a
request larger than its slot's capacity (every request of the first call) is served by the
allocator and noted, and given back with the arena's buffer at the return (so a call that
learns holds those storages to its end). When the function returns
after such a miss, the arena lays itself out again, the missed slots with room for the request
(the pool's size class; twice the old capacity when the slot had one, so a size that grows a
little each call, a decoder's past length, costs O(log n) layouts, not one a call). Smaller
requests fit the slot they have. Placement is greedy by size, largest first, each slot at the
lowest offset clear of the slots it overlaps in time (the rule of TVM's and onnxruntime's static
planners).

What it changes, measured in ``design/memory.md`` ("One arena a call"): the allocator counts
one request a call for the slots (the arena's bytes) instead of one per storage; live bytes
during the call are the arena's, which is at least the planned peak of its slots (placement
may leave holes). So the arena is used only with an allocator that allows it
(``Allocator.packs_arenas``: the pooled allocator without a memory limit); the naive allocator
and a memory limit keep one allocation per storage, bytes as planned. The memory sanitizer and
the profiler run the closures, one storage per ``alloc_storage``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from .allocator import Allocator, size_class
from .storage import MIN_ALIGNMENT, Storage


class Slot(Storage):
    """A storage that is a fixed part of an arena's buffer. ``kill`` drops it without freeing
    anything (it frees only storages of type ``Storage``): the arena's buffer goes back whole."""

    __slots__ = ()

    @classmethod
    def within(cls, arena: Storage, offset: int, capacity: int) -> Slot:
        """The slot of ``capacity`` bytes at ``offset`` of ``arena``'s buffer."""
        slot = cls.__new__(cls)
        slot.raw = arena.raw
        slot.buf = arena.buf[offset : offset + capacity]
        slot.offset = arena.offset + offset
        slot.address = arena.address + offset
        slot.capacity = capacity
        slot.alignment = MIN_ALIGNMENT
        slot.nbytes = capacity
        slot.sanitizer = None
        slot.on_reclaim = None
        slot.refs_alone = 0
        return slot


def place(capacities: Sequence[int], lifetimes: Sequence[tuple[int, int]]) -> tuple[list[int], int]:
    """Offsets for blocks of ``capacities`` (multiples of 64; <= 0: no block) live over the
    closed pc intervals ``lifetimes``: blocks whose intervals overlap get disjoint bytes.
    Greedy by size, largest first, each at the lowest offset clear of the blocks placed before
    it that it overlaps in time. Returns the offsets and the total."""
    order = sorted(range(len(capacities)), key=lambda i: (-capacities[i], lifetimes[i][0]))
    offsets = [0] * len(capacities)
    placed: list[int] = []
    total = 0
    for i in order:
        cap = capacities[i]
        if cap <= 0:
            continue  # a slot no request has reached yet
        start, end = lifetimes[i]
        busy = sorted(
            (offsets[j], offsets[j] + capacities[j])
            for j in placed
            if lifetimes[j][0] <= end and start <= lifetimes[j][1]
        )
        at = 0
        for lo, hi in busy:
            if at + cap <= lo:
                break
            at = max(at, hi)
        offsets[i] = at
        placed.append(i)
        total = max(total, at + cap)
    return offsets, total


class Arena:
    """The slots of one decoded straight-line function (one per decoded instance: a call owns
    its instance, so nothing here is shared between threads)."""

    def __init__(
        self, allocator: Allocator, live: dict[int, Storage], lifetimes: Sequence[tuple[int, int]]
    ) -> None:
        self.lifetimes = tuple(lifetimes)
        """Each slot's first and last pc."""
        n = len(self.lifetimes)
        self.capacities = [-1] * n
        """Each slot's room in bytes, -1 until a request has been seen (so that no request,
        not even one of 0 bytes, fits); the generated code reads this list, which a new layout
        updates in place."""
        self.slots: list[Slot | None] = [None] * n
        """Each slot's storage in the current buffer (None for a slot without capacity)."""
        self._offsets = [0] * n
        self._wanted: dict[int, int] = {}
        self._missed: list[Storage] = []  # this call's storages from the allocator
        self._total = 0
        self._raw: Any = None  # the buffer the slots view
        self._buffer: Storage | None = None
        self._allocator, self._live = allocator, live

    @property
    def total(self) -> int:
        """Bytes of the buffer a call asks for."""
        return self._total

    def begin(self) -> None:
        """At the function's start: this call's buffer, and the slots in it."""
        # Misses left by a call that failed before ``end`` went back with its live storages
        # (the VM frees those): forget them, or ``end`` would free whatever has their memory now.
        self._missed.clear()
        if not self._total:
            return
        buffer = self._allocator.alloc(self._total)
        self._live[id(buffer.raw)] = buffer  # an error before ``end``: the VM frees it
        self._buffer = buffer
        if buffer.raw is not self._raw:  # the pool handed out another buffer: slots anew
            within, offsets, slots = Slot.within, self._offsets, self.slots
            for i, cap in enumerate(self.capacities):
                slots[i] = within(buffer, offsets[i], cap) if cap > 0 else None
            self._raw = buffer.raw

    def taker(self, index: int, alignment: int) -> Callable[[Any], Storage]:
        """What ``alloc_storage`` of slot ``index`` calls with its size: the slot when the
        request fits its room, else ``miss``."""
        capacities, slots, miss = self.capacities, self.slots, self.miss

        def take(nbytes: Any) -> Storage:
            if nbytes.__class__ is int and 0 <= nbytes <= capacities[index]:
                # A slot with room (capacity >= 0) is made by ``begin``: never None here (no
                # ``typing.cast``: a function call on the path of every allocation).
                slot: Slot = slots[index]  # type: ignore[assignment]
                slot.nbytes = nbytes
                return slot
            return miss(index, nbytes, alignment)

        return take

    def miss(self, index: int, nbytes: int, alignment: int) -> Storage:
        """A request that does not fit slot ``index``: a storage of the allocator's, which
        ``end`` frees (the slot's ``kill`` only drops the register); the slot gets room for it
        at the next layout."""
        storage = self._allocator.alloc(nbytes, alignment)
        self._live[id(storage.raw)] = storage  # an error before ``end``: the VM frees it
        self._missed.append(storage)
        cap = self.capacities[index]
        wanted = max(nbytes, 2 * cap) if cap > 0 else nbytes
        self._wanted[index] = max(self._wanted.get(index, 0), wanted)
        return storage

    def end(self) -> None:
        """At the function's return: the buffer goes back; a new layout after a miss."""
        buffer, self._buffer = self._buffer, None
        live, free = self._live, self._allocator.free
        if buffer is not None and live.pop(id(buffer.raw), None) is not None:
            free(buffer)
        if self._missed:
            for storage in self._missed:
                if live.pop(id(storage.raw), None) is not None:
                    free(storage)
            self._missed.clear()
        if self._wanted:
            for index, nbytes in self._wanted.items():
                self.capacities[index] = max(self.capacities[index], size_class(nbytes))
            self._wanted.clear()
            self._offsets, self._total = place(self.capacities, self.lifetimes)
            self._raw = None  # the slots are made again in the next buffer
