"""Storage (an aligned byte buffer) and tensor views into it.

A storage owns one numpy ``uint8`` array (``raw``) a little larger than asked, and exposes the
aligned slice ``buf``. A tensor is ``np.ndarray(shape, dtype, buffer=buf, offset=...)``: numpy
records ``raw`` as the view's ``base``, which is how the VM finds, from a returned array, the
storage it lives in (see ``interpreter.py``: outputs never alias memory the VM reuses).
"""

from __future__ import annotations

import ctypes
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..errors import OutOfBoundsError, VMError
from .refcounts import raw_refs

#: The smallest alignment of every storage, in bytes (a cache line; AVX-512 loads).
MIN_ALIGNMENT = 64
#: The largest alignment accepted (a page).
MAX_ALIGNMENT = 4096


class Storage:
    """An aligned byte buffer that tensors are views of."""

    __slots__ = (
        "address",
        "alignment",
        "buf",
        "capacity",
        "nbytes",
        "offset",
        "on_reclaim",
        "raw",
        "refs_alone",
        "sanitizer",
    )

    def __init__(self, capacity: int, alignment: int = MIN_ALIGNMENT) -> None:
        alignment = max(alignment, MIN_ALIGNMENT)
        self.raw: np.ndarray = np.empty(capacity + alignment, dtype=np.uint8)
        """The owning array (the ``base`` of every view)."""
        # (address_of without its checks: raw is writable, contiguous and never empty)
        address = ctypes.addressof(ctypes.c_char.from_buffer(self.raw))  # type: ignore[arg-type]
        start = (-address) % alignment
        self.buf: np.ndarray = self.raw[start : start + capacity]
        """The aligned bytes, ``capacity`` long."""
        self.offset = start
        """Where ``buf`` starts in ``raw`` (bytes)."""
        self.address = address + start
        """The address of ``buf``'s first byte (known here: reading an array's address back
        costs 0.6-2 us, see ``address_of``)."""
        self.capacity = capacity
        """Usable bytes (the size class for a pooled buffer)."""
        self.alignment = alignment
        """Alignment of ``buf``'s first byte."""
        self.nbytes = capacity
        """Bytes asked by the current owner; views are bounds-checked against it."""
        self.on_reclaim: Callable[[], None] | None = None
        """Called (once) when a pool takes this storage back from the caller it was lent to
        (``PooledAllocator``): what its last tenant registered about it is stale from then on
        (``memory/capacity.py`` forgets the buffer's room)."""
        self.sanitizer: Any = None
        """The memory sanitizer's record (generation, alive, who freed it); None unless a
        ``check_memory=True`` VM allocated it (see ``vm/sanitizer.py``)."""
        self.refs_alone: int = raw_refs(self)
        """``raw``'s reference count when no view of it but ``buf`` exists (measured, not
        assumed: the count's details differ between Python versions); see ``refcounts.py``."""

    def __repr__(self) -> str:
        return f"Storage({self.nbytes} bytes, capacity {self.capacity}, align {self.alignment})"


def address_of(a: np.ndarray) -> int:
    """The address of ``a``'s first element. A writable, C-contiguous, non-empty array's is
    read through a ctypes object over its buffer (0.6 us); ``a.ctypes.data`` and
    ``__array_interface__`` build Python objects first (1.9 and 2.1 us, measured), which a
    fresh storage paid, and so every result handed to a caller and every new cache buffer.
    Other arrays (whose buffer ctypes refuses) take ``__array_interface__``."""
    flags = a.flags
    if flags.writeable and flags.c_contiguous and a.size:
        return ctypes.addressof(ctypes.c_char.from_buffer(a))  # type: ignore[arg-type]
    address: int = a.__array_interface__["data"][0]
    return address


def check_alignment(alignment: int) -> None:
    """Raise VMError unless ``alignment`` is a power of two in [1, MAX_ALIGNMENT]."""
    if alignment < 1 or alignment > MAX_ALIGNMENT or alignment & (alignment - 1):
        raise VMError(f"alignment {alignment} is not a power of two in [1, {MAX_ALIGNMENT}]")


def view_error(nbytes: int, offset: int, shape: Sequence[int], dtype: np.dtype) -> VMError:
    """The error for a view that does not fit a storage of ``nbytes`` (called on failure)."""
    if any(d < 0 for d in shape):
        return VMError(f"tensor shape {tuple(shape)} has a negative dim")
    need = math.prod(shape) * dtype.itemsize
    return OutOfBoundsError(
        f"tensor of shape {tuple(shape)} {dtype.name} needs {need} bytes at offset {offset}, "
        f"but the storage holds {nbytes} bytes"
    )


def tensor_view(storage: Storage, offset: int, shape: Sequence[int], dtype: np.dtype) -> np.ndarray:
    """A C-contiguous ``dtype`` view of ``storage`` at byte ``offset``, bounds-checked."""
    nbytes = math.prod(shape) * dtype.itemsize
    if offset < 0 or offset + nbytes > storage.nbytes or any(d < 0 for d in shape):
        raise view_error(storage.nbytes, offset, shape, dtype)
    view: np.ndarray = np.ndarray(tuple(shape), dtype, buffer=storage.buf, offset=offset)
    return view
