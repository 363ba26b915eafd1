"""Storages with room to grow along one axis: what ``append`` writes into in place.

``append(x, y, axis)`` (the ``append`` opcode, which the compiler emits for a concatenation
onto a parameter that the function returns: a KV cache's ``present = concat(past, new)``)
returns ``concatenate((x, y), axis)``. When ``x`` is a *prefix* of a buffer this module made
(the same first byte, strides and dims but a shorter extent along ``axis``) and the buffer has
room after ``x``, only ``y`` is copied, into that room, and the result is a longer view of the
same buffer. Otherwise the VM allocates a new buffer with room to grow (twice the result's
length along the axis, or the length the compiler gives: the axis's declared upper bound),
copies ``x`` and ``y`` into it and registers it. A decode loop that feeds each result back as
the next ``x`` so copies one token's keys and values a step, plus a doubling now and then:
amortised O(1) bytes per step instead of the whole cache.

**Why it is safe without the caller's promise.** Each buffer keeps a *high-water mark*: the
longest extent along the axis any view of it has been given. An append writes in place only
when ``x`` ends exactly at the mark, so the elements it writes were never visible to anybody:
no earlier result and no array the caller holds changes. A second append onto the same ``x``
(two continuations of one prefix, a beam) finds the mark past ``x``'s end and copies. A caller
who *donates* ``x`` (``VirtualMachine.run(..., donate=...)``) promises that no view beyond
``x``'s end is used any more (a rolled-back speculation): then the append writes at ``x``'s end
whatever the mark says. The check and the mark's update hold one lock, so threads appending
onto one buffer each get a correct result.

Buffers come from the VM's allocator (its statistics and memory limit count them) and are
lent to the caller like a returned array's storage: their memory belongs to the views, and a
pooled allocator takes a buffer back for other requests once no view of it is left
(``Storage.on_reclaim`` then forgets its room, so that nothing can append into memory that has
a new owner).

**Room the caller gives.** A caller that knows how long its arrays will grow (``generate``
knows the prompt and ``max_new_tokens``; onnxruntime's generate loop needs the same number for
its shared buffer) makes its first ``x`` with ``with_room``: a copy in a registered buffer with
room for the whole length, so that every append onto it, the first included, writes in place
and nothing is ever moved. The buffer is the caller's memory, like any argument's.
"""

from __future__ import annotations

import operator
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import MemoryLimitError, VMError
from .allocator import MAX_STORAGE_BYTES, Allocator
from .storage import address_of


@dataclass
class _Room:
    """One buffer with room to grow: how its whole extent is viewed, and its high-water mark.

    No array of the buffer is kept here (it would keep the buffer alive): the whole view is
    made again from the owning array, which any prefix view holds as its ``base``."""

    shape: tuple[int, ...]
    """The whole buffer's shape (``capacity`` long along ``axis``)."""
    dtype: np.dtype[Any]
    strides: tuple[int, ...]
    offset: int
    """Byte offset of the first element in the owning array."""
    start: int
    """Address of the first element."""
    axis: int
    """The axis with room."""
    mark: int
    """The longest extent along ``axis`` handed out in a view so far."""
    handed: weakref.ref[np.ndarray] | None = None
    """The last view handed out. Every view handed out starts at ``start``, so an ``x`` that
    is this very array needs no look at its address (``address_of`` costs 0.6-2 us, up to a
    third of an in-place append)."""


_rooms: dict[int, tuple[weakref.ref[Any], _Room]] = {}  # id(owning raw array) -> its room
_lock = threading.Lock()


def _register(raw: np.ndarray, room: _Room) -> Callable[[], None]:
    """Registers ``raw``'s room; returns what forgets it (the storage's ``on_reclaim``)."""
    key = id(raw)

    def forget(_: object = None) -> None:
        # The buffer is gone (its id may be reused), or a pool took it back for another use:
        # its old room must not let an append write into it any more. Only this very entry.
        with _lock:
            found = _rooms.get(key)
            if found is not None and found[1] is room:
                del _rooms[key]

    with _lock:
        _rooms[key] = (weakref.ref(raw, forget), room)
    return forget


def registered_buffers() -> int:
    """How many buffers with room are alive (tests count them)."""
    with _lock:
        return len(_rooms)


def with_room(x: np.ndarray, axis: int, length: int) -> np.ndarray:
    """A copy of ``x`` in a new buffer with room for ``length`` positions along ``axis``: an
    ``append`` onto it (a decoder step's ``concatenate((past, new), axis)`` fed this array as
    ``past``, and then each result fed back) writes in place until ``length`` is reached. The
    empty cache of a prefill is ``with_room(np.zeros((batch, heads, 0, head_dim)), 2, total)``.

    The buffer is allocated here with numpy (the caller's memory, not the VM's: no VM's
    memory limit counts it). ``axis`` may be negative, as numpy's. Raises VMError for an
    ``axis`` ``x`` does not have, a ``length`` shorter than ``x`` along it, or either not an
    int."""
    x = np.asarray(x)
    axis = _checked_int(axis, "axis")
    length = _checked_int(length, "length")
    if not -x.ndim <= axis < x.ndim:
        raise VMError(f"with_room: axis {axis} is not an axis of an array of shape {list(x.shape)}")
    axis %= x.ndim
    if length < x.shape[axis]:
        raise VMError(
            f"with_room: room for {length} positions along axis {axis} does not hold the "
            f"{x.shape[axis]} the array of shape {list(x.shape)} already has"
        )
    shape = list(x.shape)
    shape[axis] = length
    if x.dtype.itemsize * _product(shape) > MAX_STORAGE_BYTES:
        raise VMError(f"with_room: a buffer of shape {shape} ({x.dtype.name}) is too large")
    try:
        full = np.empty(tuple(shape), x.dtype)
    except MemoryError:
        raise VMError(
            f"with_room: no memory for a buffer of shape {shape} ({x.dtype.name})"
        ) from None
    n = x.shape[axis]
    index: list[Any] = [slice(None)] * x.ndim
    index[axis] = slice(0, n)
    out: np.ndarray = full[tuple(index)]
    out[...] = x
    start = address_of(full)
    room = _Room(full.shape, full.dtype, full.strides, 0, start, axis, n)
    room.handed = weakref.ref(out)
    _register(full, room)
    return out


def _checked_int(value: Any, name: str) -> int:
    """``value`` as an int (numpy's integers too), or a VMError naming ``name``."""
    if isinstance(value, (bool, np.bool_)):
        raise VMError(f"with_room: {name} must be an int, got {value!r}")
    try:
        return operator.index(value)
    except TypeError:
        raise VMError(f"with_room: {name} must be an int, got {value!r}") from None


def append(
    x: np.ndarray,
    y: np.ndarray,
    axis: int,
    capacity: int,
    allocator: Allocator,
    donated: bool = False,
) -> np.ndarray:
    """``concatenate((x, y), axis)``, in ``x``'s buffer when it has room (module docstring).
    ``capacity``: the length along ``axis`` a new buffer gets room for (0: twice the result's).
    Raises VMError when the operands do not concatenate."""
    _check(x, y, axis)
    n = x.shape[axis] + y.shape[axis]
    grown = _grow_in_place(x, y, axis, n, donated)
    if grown is not None:
        allocator.count_append(y.nbytes, in_place=True)
        return grown
    return _grow_into_new(x, y, axis, n, capacity, allocator)


def _check(x: np.ndarray, y: np.ndarray, axis: int) -> None:
    if x.dtype != y.dtype or x.ndim != y.ndim or not 0 <= axis < x.ndim:
        raise VMError(
            f"append: cannot join {x.dtype.name}{list(x.shape)} and {y.dtype.name}"
            f"{list(y.shape)} along axis {axis}"
        )
    for k in range(x.ndim):
        if k != axis and x.shape[k] != y.shape[k]:
            raise VMError(
                f"append: shapes {list(x.shape)} and {list(y.shape)} differ on axis {k} "
                f"(they are joined along axis {axis})"
            )


def _grow_in_place(
    x: np.ndarray, y: np.ndarray, axis: int, n: int, donated: bool
) -> np.ndarray | None:
    """The longer view of ``x``'s buffer with ``y`` written after ``x``, or None if ``x`` is not
    a prefix of a registered buffer with room at its end."""
    raw = x.base
    if raw is None:
        return None
    with _lock:
        found = _rooms.get(id(raw))
        if found is None or found[0]() is not raw:
            return None
        room = found[1]
        length = x.shape[axis]
        if (
            room.axis != axis
            or n > room.shape[axis]
            or x.strides != room.strides
            or x.shape[:axis] != room.shape[:axis]
            or x.shape[axis + 1 :] != room.shape[axis + 1 :]
            or x.dtype != room.dtype
            or (length != room.mark and not (donated and length <= room.mark))
        ):
            return None
        handed = room.handed
        if (handed is None or handed() is not x) and address_of(x) != room.start:
            return None
        room.mark = n
    full = np.ndarray(room.shape, room.dtype, raw, room.offset)
    index: list[Any] = [slice(None)] * x.ndim
    index[axis] = slice(length, n)
    full[tuple(index)] = y
    index[axis] = slice(0, n)
    out: np.ndarray = full[tuple(index)]
    room.handed = weakref.ref(out)
    return out


def _grow_into_new(
    x: np.ndarray, y: np.ndarray, axis: int, n: int, capacity: int, allocator: Allocator
) -> np.ndarray:
    """A new registered buffer with room, holding ``x`` then ``y``; its first ``n`` along
    ``axis``."""
    shape = list(x.shape)
    per_row = x.dtype.itemsize * _product(shape[:axis] + shape[axis + 1 :])
    lengths = [capacity] if capacity >= n else []
    lengths.append(max(2 * n, 1))
    storage = None
    for length in lengths:  # the declared bound first; doubling if that is too much
        if per_row * length > MAX_STORAGE_BYTES:
            continue
        try:
            storage = allocator.alloc(per_row * length)
        except MemoryLimitError:
            if length == lengths[-1]:
                raise
            continue
        shape[axis] = length
        break
    if storage is None:
        raise VMError(f"append: a result of {n} along axis {axis} of {list(x.shape)} is too large")
    raw, offset = storage.raw, storage.offset
    full = np.ndarray(tuple(shape), x.dtype, raw, offset)
    index: list[Any] = [slice(None)] * x.ndim
    index[axis] = slice(0, n)
    out: np.ndarray = full[tuple(index)]
    try:
        np.concatenate((x, y), axis=axis, out=out)  # one call where two slice copies took two
    except BaseException:
        allocator.detach(storage)  # the views in the traceback may still read it
        raise
    room = _Room(full.shape, full.dtype, full.strides, offset, storage.address, axis, n)
    room.handed = weakref.ref(out)
    storage.on_reclaim = _register(raw, room)
    # Lent like a result, last (``out`` views it by now: no other thread's pool can take it
    # back before the caller has it): once the caller has let go of every view, a pooled
    # allocator takes the buffer back for a later request, so a loop that feeds fresh arrays
    # rather than the results gets warm buffers instead of fresh pages (an append of 8 x 2 x
    # 256 x 32 float32: 306 -> 29 us); its room is forgotten then (``on_reclaim``).
    allocator.lend(storage)
    allocator.count_append(x.nbytes + y.nbytes, in_place=False)
    return out


def _product(dims: list[int]) -> int:
    out = 1
    for d in dims:
        out *= d
    return out
