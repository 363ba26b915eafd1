"""Allocation statistics, kept by every allocator and shown by the profiler."""

from __future__ import annotations

from dataclasses import dataclass, fields, replace


@dataclass
class MemoryStats:
    """Counters of one allocator. Byte counts of buffers are their capacities (size class)."""

    requests: int = 0
    """Calls to ``alloc``."""
    allocations: int = 0
    """Buffers actually obtained from the system (requests not served by the pool)."""
    pool_hits: int = 0
    """Requests served by a cached buffer."""
    frees: int = 0
    """Storages given back (``kill``, or the end of a call)."""
    detached: int = 0
    """Storages whose ownership passed to the caller with a returned array (lent ones too)."""
    lent: int = 0
    """Storages handed to the caller that the pool watches, to take them back once let go."""
    taken_back: int = 0
    """Lent storages the pool took back (the caller held no view of them any more)."""
    evictions: int = 0
    """Cached buffers dropped to keep the pool under its cap or the memory limit."""
    bytes_requested: int = 0
    """Sum of the sizes asked for by ``alloc``."""
    bytes_held: int = 0
    """Bytes the allocator holds now: live buffers plus cached ones."""
    peak_bytes_held: int = 0
    """The largest ``bytes_held`` seen."""
    live_bytes: int = 0
    """Bytes in buffers handed out and not yet freed."""
    peak_live_bytes: int = 0
    """The largest ``live_bytes`` seen."""
    appends_in_place: int = 0
    """Appends that copied only the appended part, into room after the first operand
    (``memory/capacity.py``)."""
    appends_moved: int = 0
    """Appends that made a new buffer with room and copied both parts into it."""
    bytes_appended: int = 0
    """Bytes copied by appends of both kinds (a decode loop's copy per step)."""

    def copy(self) -> MemoryStats:
        """A snapshot of the counters."""
        return replace(self)

    def as_dict(self) -> dict[str, int]:
        """The counters by name."""
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def format(self) -> str:
        """The counters as an aligned two-column table."""
        rows = [(f.name.replace("_", " "), getattr(self, f.name)) for f in fields(self)]
        width = max(len(name) for name, _ in rows)
        return "\n".join(f"{name:<{width}}  {value:>14,}" for name, value in rows)
