"""Reclaiming memory by reference counts: the one place the VM reads ``sys.getrefcount``.

Two places free or reuse a storage that no compile-time ``kill`` released, and both decide by
counting references, because the VM cannot see every holder (a caller's variables, a view kept in
a tuple):

- the pool takes back a *lent* storage (a result handed to the caller, ``allocator.py``) once no
  array views its bytes any more (``is_viewed``);
- the loop *sweeps* a call's live storages at a tail call (``interpreter.py``): one that no
  register of any frame holds (``unreachable``) and no array views is freed.

What they rely on (pinned by ``tests/vm/test_refcounts.py``):

- numpy gives every view of a storage, however made (a view of ``buf``, of a view, a reshape, a
  slice, a transpose), the owning array ``raw`` as its ``base``: each live view adds exactly one
  reference to ``raw``, so ``raw``'s count is back at the one measured when the storage was made
  (``Storage.refs_alone``, ``raw_refs``) exactly when no array can reach those bytes;
- each register (a list slot) or table entry holding an object adds exactly one reference to it.

The baselines are measured, never assumed (what ``sys.getrefcount`` returns for an object held
once differs between Python versions), and measured through the same function that later
compares, so the temporaries of that function count the same in both.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .storage import Storage


def raw_refs(storage: Storage) -> int:
    """The references to ``storage.raw`` (the count ``Storage.refs_alone`` records at
    construction, when only ``buf`` views it)."""
    return sys.getrefcount(storage.raw)


def is_viewed(storage: Storage) -> bool:
    """True if an array other than ``buf`` views ``storage``'s memory (each holds ``raw``)."""
    return sys.getrefcount(storage.raw) > storage.refs_alone


def table_refs(table: dict[int, Storage], key: int) -> int:
    """References to ``table[key]``: the table's, this frame's and the argument's, plus one per
    register (or anything else) that holds it."""
    st = table[key]
    return sys.getrefcount(st)


def alone_in_table(make: Callable[[], Storage]) -> int:
    """What ``table_refs`` counts for a storage (made by ``make``) that only the table holds."""
    return table_refs({0: make()}, 0)


def unreachable(table: dict[int, Storage], alone: int) -> list[int]:
    """The keys of ``table`` whose storage nothing else holds (its count is ``alone``, from
    ``alone_in_table``) and no array views: memory no frame and no caller can reach."""
    return [
        key for key in list(table) if table_refs(table, key) <= alone and not is_viewed(table[key])
    ]
