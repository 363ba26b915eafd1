"""Allocators: where storages come from and go back to.

``NaiveAllocator`` asks numpy for every storage and forgets it on free. ``PooledAllocator`` keeps
freed buffers by size class and hands them out again, across calls of the VM, so a model served
with changing shapes stops allocating once its working set has been seen.

Bound on memory held (pooled): cached (free) bytes never exceed ``max_cached_bytes``; by default
that cap is the larger of twice the peak of live bytes seen so far and the most bytes one call
(of the VM: ``end_call``) has requested, so **bytes held <= peak live + max(2 x peak live, the
most bytes one call requested)** at all times. Least recently freed buffers are evicted first.
Why twice the peak: a planned program frees one arena before it allocates the next, so the
buffers one call uses, together, can exceed its peak of live bytes; with a cap of one peak,
calls with unchanged shapes kept missing the pool. Why a call's requests: a loop frees each
step's buffers as it goes, and when those grow (a ``concatenate`` per step) one call needs a
buffer of every size, several times its peak, for the next call to find them all.

Threads: every method that changes the pool or the counters holds the allocator's lock, so one
allocator (and the VM that owns it) may serve many threads. "One call" for the cache cap is then
the span between two ``end_call`` of any thread: an estimate that only sizes the cache.

A memory limit, when set, bounds bytes held: an allocation that would pass it first evicts cached
buffers, and if live bytes alone would still pass it, fails with MemoryLimitError before anything
is allocated.

**Lent storages.** A returned array is a view of a storage, handed to the caller with it
(``lend``). The pool keeps a note of the most recent ``MAX_LENT`` of them and, on a miss, takes
back those the caller has let go of: a storage none of whose views exists any more has the
reference count it had when it was made, because every numpy view of it keeps its owning array
(``raw``) alive as ``base``. So a caller that drops (or overwrites) results between calls gets
the same buffers again, warm, and a call in steady state obtains nothing from the system. Lent
bytes are the caller's: they count neither as live nor as held until taken back.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

from ..errors import MemoryLimitError, VMError
from .refcounts import is_viewed
from .stats import MemoryStats
from .storage import MIN_ALIGNMENT, Storage, check_alignment

#: The largest single storage (bytes): guards against absurd sizes computed from bad input.
MAX_STORAGE_BYTES = 1 << 40
#: Most lent storages the pool watches; older ones are forgotten (the caller's for good).
MAX_LENT = 64
#: Results of at most this many bytes are numpy's own arrays, not pooled storages (the pooled
#: allocator's default; see ``vm/fresh_results.py`` for the measurements behind it).
FRESH_RESULT_BYTES = 1 << 20


def size_class(nbytes: int) -> int:
    """The capacity a pooled buffer of ``nbytes`` gets: 64-byte granules up to 256 bytes, then
    four classes per power of two (at most 25% waste)."""
    if nbytes <= MIN_ALIGNMENT:
        return MIN_ALIGNMENT
    step = max(1 << (nbytes.bit_length() - 3), MIN_ALIGNMENT)
    return -(-nbytes // step) * step


class Allocator:
    """The interface the VM uses; subclasses decide where buffers come from."""

    def __init__(self, memory_limit: int | None = None) -> None:
        if memory_limit is not None and memory_limit < 0:
            raise VMError(f"memory_limit must be >= 0, got {memory_limit}")
        self.memory_limit = memory_limit
        """Most bytes this allocator may hold, or None for no limit."""
        self.stats = MemoryStats()
        """Counters (see ``MemoryStats``)."""
        # Held while the pool or the counters change: a VM's threads share its allocator.
        # Bound methods, not ``with``: half the cost on the hot path (~0.1 us here).
        lock = threading.Lock()
        self._acquire, self._release = lock.acquire, lock.release

    @property
    def fresh_result_bytes(self) -> int:
        """Results of at most this many bytes may be made by numpy instead of this allocator
        (``vm/fresh_results.py``): 0 here, so that an allocator sees every byte unless it says
        otherwise."""
        return 0

    @property
    def packs_arenas(self) -> bool:
        """True if the VM may serve a function's short-lived storages from one buffer a call
        (``memory/arena.py``): fewer, larger requests, and live bytes that may exceed the plan's
        by the holes of its placement. False here: this allocator sees every storage."""
        return False

    def alloc(self, nbytes: int, alignment: int = MIN_ALIGNMENT) -> Storage:
        """A storage of at least ``nbytes`` usable bytes, aligned to ``max(alignment, 64)``."""
        raise NotImplementedError

    def free(self, storage: Storage) -> None:
        """Give ``storage`` back; no tensor of it may be used afterwards."""
        raise NotImplementedError

    def free_leftover(self, storage: Storage) -> None:
        """Give back a storage the call left alive, when the top-level call ends: ``free``
        (a wrapping allocator may record why, as the sanitizer's does)."""
        self.free(storage)

    def detach(self, storage: Storage) -> None:
        """Forget ``storage`` without reusing it: its memory now belongs to the caller."""
        self._forget(storage, "detached")

    def _forget(self, storage: Storage, counter: str) -> None:
        """Stop counting ``storage`` as live or held, and count it under ``counter``."""
        self._acquire()
        try:
            s = self.stats
            setattr(s, counter, getattr(s, counter) + 1)
            s.live_bytes -= storage.capacity
            s.bytes_held -= storage.capacity
        finally:
            self._release()

    def count_append(self, nbytes: int, in_place: bool) -> None:
        """Count an append that copied ``nbytes`` (``memory/capacity.py``)."""
        self._acquire()
        try:
            s = self.stats
            s.bytes_appended += nbytes
            if in_place:
                s.appends_in_place += 1
            else:
                s.appends_moved += 1
        finally:
            self._release()

    def lend(self, storage: Storage) -> None:
        """Hand ``storage`` to the caller with a returned array. An allocator that can tell when
        the caller lets go of it takes it back then (``PooledAllocator``); this one forgets it."""
        self.detach(storage)

    def is_cached(self, raw: object) -> bool:
        """True if the buffer ``raw`` (a storage's owning array, the ``base`` of its views)
        sits free in a pool and may be handed out again."""
        return False

    def release(self) -> None:
        """Drop every cached buffer (no-op for allocators without a cache)."""

    def end_call(self) -> None:
        """The VM's top-level call has ended (the pooled allocator sizes its cache by calls)."""

    # Shared bookkeeping -------------------------------------------------------------------

    def _check_request(self, nbytes: int, alignment: int) -> None:
        if not isinstance(nbytes, int) or nbytes < 0 or nbytes > MAX_STORAGE_BYTES:
            raise VMError(
                f"cannot allocate a storage of {nbytes!r} bytes "
                f"(must be an int in [0, {MAX_STORAGE_BYTES}])"
            )
        check_alignment(alignment)

    def _new_storage(self, capacity: int, alignment: int) -> Storage:
        try:
            return Storage(capacity, alignment)
        except MemoryError:
            raise MemoryLimitError(f"the system could not allocate {capacity:,} bytes") from None

    def _limit_error(self, capacity: int) -> MemoryLimitError:
        s = self.stats
        return MemoryLimitError(
            f"allocating {capacity:,} bytes would exceed the memory limit of "
            f"{self.memory_limit:,} bytes ({s.live_bytes:,} bytes live, "
            f"{s.bytes_held - s.live_bytes:,} cached)"
        )

    def _count_new(self, capacity: int) -> None:
        s = self.stats
        s.allocations += 1
        s.bytes_held += capacity
        if s.bytes_held > s.peak_bytes_held:
            s.peak_bytes_held = s.bytes_held

    def _count_live(self, capacity: int) -> None:
        s = self.stats
        s.live_bytes += capacity
        if s.live_bytes > s.peak_live_bytes:
            s.peak_live_bytes = s.live_bytes


class NaiveAllocator(Allocator):
    """A fresh numpy buffer for every storage; freeing drops it."""

    def alloc(self, nbytes: int, alignment: int = MIN_ALIGNMENT) -> Storage:
        self._acquire()
        try:
            self._check_request(nbytes, alignment)
            s = self.stats
            s.requests += 1
            s.bytes_requested += nbytes
            if self.memory_limit is not None and s.bytes_held + nbytes > self.memory_limit:
                raise self._limit_error(nbytes)
            storage = self._new_storage(nbytes, alignment)
            self._count_new(nbytes)
            self._count_live(nbytes)
            return storage
        finally:
            self._release()

    def free(self, storage: Storage) -> None:
        self._forget(storage, "frees")


class PooledAllocator(Allocator):
    """Reuses freed buffers of the same size class and alignment, across calls.

    ``max_cached_bytes`` caps the free buffers kept (None: the larger of twice the peak of live
    bytes so far and the most bytes one call requested; see the module doc). Results of at most
    ``FRESH_RESULT_BYTES`` are numpy's own arrays, unless a memory limit is set (which then
    bounds every byte); ``fresh_results=False`` pools them too. ``arenas=False`` (or a memory
    limit) makes every storage a request of its own, as planned (``packs_arenas``).
    """

    def __init__(
        self,
        memory_limit: int | None = None,
        max_cached_bytes: int | None = None,
        fresh_results: bool = True,
        arenas: bool = True,
    ) -> None:
        super().__init__(memory_limit)
        self._fresh = FRESH_RESULT_BYTES if fresh_results and memory_limit is None else 0
        self._arenas = arenas and memory_limit is None
        self.max_cached_bytes = max_cached_bytes
        """Cap on cached bytes, or None for "the peak live bytes"."""
        self._free: dict[tuple[int, int], list[Storage]] = {}
        # Least recently freed first: id(storage.raw) -> storage, for eviction and is_cached.
        self._order: OrderedDict[int, Storage] = OrderedDict()
        self._cached_bytes = 0
        # Lent storages, oldest first: id(storage.raw) -> storage.
        self._lent: OrderedDict[int, Storage] = OrderedDict()
        self._call_requested = 0
        """Capacity requested since the current call began."""
        self._most_per_call = 0
        """The most capacity one call has requested (part of the default cache cap)."""

    @property
    def fresh_result_bytes(self) -> int:
        return self._fresh

    @property
    def packs_arenas(self) -> bool:
        # A memory limit bounds every byte as planned: one storage per request then.
        return self._arenas

    def alloc(self, nbytes: int, alignment: int = MIN_ALIGNMENT) -> Storage:
        self._acquire()
        try:
            # The VM's hot path (every call allocates): the usual request is checked inline.
            if type(nbytes) is not int or not 0 <= nbytes <= MAX_STORAGE_BYTES or alignment != 64:
                self._check_request(nbytes, alignment)
            s = self.stats
            s.requests += 1
            s.bytes_requested += nbytes
            if nbytes <= MIN_ALIGNMENT:  # size_class inline: a call is a third of a pool hit
                capacity = MIN_ALIGNMENT
            else:
                step = 1 << (nbytes.bit_length() - 3)
                capacity = -(-nbytes // step) * step if step > MIN_ALIGNMENT else size_class(nbytes)
            self._call_requested += capacity
            key = (capacity, alignment if alignment > MIN_ALIGNMENT else MIN_ALIGNMENT)
            bucket = self._free.get(key)
            if bucket:
                storage = bucket.pop()
                del self._order[id(storage.raw)]
                self._cached_bytes -= capacity
                s.pool_hits += 1
            elif self._lent and (taken := self._take_back(key)) is not None:
                if self.memory_limit is not None:
                    self._make_room(capacity)
                storage = taken  # a result the caller let go of, straight back to work
                s.pool_hits += 1
                s.bytes_held += capacity
            else:
                self._make_room(capacity)
                storage = self._new_storage(capacity, alignment)
                self._count_new(capacity)
            storage.nbytes = nbytes
            live = s.live_bytes = s.live_bytes + capacity
            if live > s.peak_live_bytes:
                s.peak_live_bytes = live
            return storage
        finally:
            self._release()

    def free(self, storage: Storage) -> None:
        self._acquire()
        try:
            s = self.stats
            s.frees += 1
            s.live_bytes -= storage.capacity
            self._cache(storage)
        finally:
            self._release()

    def lend(self, storage: Storage) -> None:
        self._acquire()
        try:
            s, capacity = self.stats, storage.capacity
            s.detached += 1
            s.lent += 1
            s.live_bytes -= capacity
            s.bytes_held -= capacity
            lent = self._lent
            lent[id(storage.raw)] = storage
            if len(lent) > MAX_LENT:
                lent.popitem(last=False)
        finally:
            self._release()

    def _take_back(self, key: tuple[int, int]) -> Storage | None:
        """Take back every lent storage the caller holds no view of any more: return one of size
        class and alignment ``key`` if there is one, and cache the others."""
        s, found = self.stats, None
        capacity, alignment = key
        for raw_id, storage in list(self._lent.items()):
            if is_viewed(storage):
                continue  # a view of it is still alive
            del self._lent[raw_id]
            s.taken_back += 1
            hook = storage.on_reclaim
            if hook is not None:
                storage.on_reclaim = None
                hook()
            if found is None and storage.capacity == capacity and storage.alignment == alignment:
                found = storage
            else:
                s.bytes_held += storage.capacity
                self._cache(storage)
        return found

    def _cache(self, storage: Storage) -> None:
        """Keep a free ``storage`` for reuse, within the cap (else drop it)."""
        s = self.stats
        cap = self.max_cached_bytes
        if cap is None:
            cap = max(2 * s.peak_live_bytes, self._most_per_call)
        if storage.capacity > cap:
            s.bytes_held -= storage.capacity
            return
        if self._cached_bytes + storage.capacity > cap:
            self._evict(self._cached_bytes + storage.capacity - cap)
        key = (storage.capacity, storage.alignment)
        bucket = self._free.get(key)
        if bucket is None:
            bucket = self._free[key] = []
        bucket.append(storage)
        self._order[id(storage.raw)] = storage
        self._cached_bytes += storage.capacity

    def _make_room(self, capacity: int) -> None:
        """Evict cached buffers so that ``capacity`` more bytes stay within the memory limit;
        raise MemoryLimitError if live bytes alone would pass it."""
        limit, s = self.memory_limit, self.stats
        if limit is not None and s.bytes_held + capacity > limit:
            self._evict(s.bytes_held + capacity - limit)
            if s.bytes_held + capacity > limit:
                raise self._limit_error(capacity)

    def is_cached(self, raw: object) -> bool:
        return id(raw) in self._order

    def release(self) -> None:
        self._acquire()
        try:
            self._lent.clear()  # what the caller holds is the caller's; the rest is garbage now
            self._evict(self._cached_bytes)
        finally:
            self._release()

    def end_call(self) -> None:
        # No lock: a race only makes the cache-sizing estimate a little off (module doc).
        requested = self._call_requested
        self._call_requested = 0
        if requested > self._most_per_call:
            self._most_per_call = requested

    @property
    def cached_bytes(self) -> int:
        """Bytes in free buffers waiting for reuse."""
        return self._cached_bytes

    def _evict(self, at_least: int) -> None:
        """Drop least recently freed buffers until ``at_least`` bytes are gone (or none left)."""
        dropped = 0
        while dropped < at_least and self._order:
            _, storage = self._order.popitem(last=False)
            self._free[(storage.capacity, storage.alignment)].remove(storage)
            self._cached_bytes -= storage.capacity
            self.stats.bytes_held -= storage.capacity
            self.stats.evictions += 1
            dropped += storage.capacity
