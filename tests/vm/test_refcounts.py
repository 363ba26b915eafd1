"""The CPython and numpy behaviour the VM's reference-count reclamation relies on
(``vm/memory/refcounts.py``): the pool taking back a lent result, the loop sweeping storages at
a tail call. If an interpreter or numpy release changes any of it, these fail before a storage
is freed under a live view."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import vm
from vm.memory.refcounts import alone_in_table, is_viewed, raw_refs, table_refs, unreachable
from vm.memory.storage import Storage


def _views(st: Storage) -> list[np.ndarray]:
    """Every way the VM (a kernel, a caller) makes an array of a storage's bytes."""
    view = np.ndarray((4, 4), np.float32, st.buf, 0)
    return [
        view,
        np.ndarray((2,), np.float64, st.buf, 8),
        view.reshape(16),
        view[1:3],
        view.T,
        view.view(np.int32),
        view[::2, ::2],
    ]


def test_every_view_holds_the_owning_array_as_its_base() -> None:
    st = Storage(64)
    assert st.buf.base is st.raw
    for view in _views(st):
        assert view.base is st.raw  # numpy collapses a view of a view onto the owner


def test_each_live_view_adds_exactly_one_reference_to_raw() -> None:
    st = Storage(64)
    assert raw_refs(st) == st.refs_alone and not is_viewed(st)
    views = _views(st)
    assert raw_refs(st) == st.refs_alone + len(views) and is_viewed(st)
    del views[:-1]
    assert raw_refs(st) == st.refs_alone + 1 and is_viewed(st)
    views.clear()
    assert raw_refs(st) == st.refs_alone and not is_viewed(st)


def test_a_value_held_by_a_list_slot_counts_once_per_slot() -> None:
    """A register file is a list: what ``sys.getrefcount`` returns for a value only a list
    holds, and one more per slot (CPython 3.11 counts the list and the call's argument)."""
    value = object()
    regs = [value]
    del value
    alone = sys.getrefcount(regs[0])
    if sys.version_info[:2] == (3, 11):
        assert alone == 2
    regs += [regs[0], regs[0]]
    # Counted outside ``assert``: pytest's rewriting keeps the operands in variables of its own.
    three = sys.getrefcount(regs[0])
    del regs[1:]
    one = sys.getrefcount(regs[0])
    assert (three, one) == (alone + 2, alone)


def test_a_storage_only_the_live_table_holds_is_unreachable() -> None:
    alone = alone_in_table(lambda: Storage(0))
    assert alone == alone_in_table(lambda: Storage(64))  # the same for every storage
    live = {1: Storage(64), 2: Storage(64), 3: Storage(64)}
    assert table_refs(live, 1) == alone
    regs: list[object] = [None, live[2]]  # a frame's register holds storage 2
    kept_view = np.ndarray((16,), np.float32, live[3].buf, 0)  # a caller's array views storage 3
    assert table_refs(live, 2) == alone + 1
    assert unreachable(live, alone) == [1]
    regs[1] = None
    assert unreachable(live, alone) == [1, 2]
    del kept_view
    assert unreachable(live, alone) == [1, 2, 3]


@pytest.mark.parametrize("policy", ["lent", "viewed through a tuple"])
def test_a_view_kept_anywhere_keeps_the_storage(policy: str) -> None:
    st = Storage(64)
    live = {0: st}
    alone = alone_in_table(lambda: Storage(0))
    holder: object = np.ndarray((16,), np.float32, st.buf, 0)
    if policy != "lent":
        holder = (1, (holder,))
    del st
    assert unreachable(live, alone) == []
    del holder
    assert unreachable(live, alone) == [0]


def test_no_other_module_of_the_vm_reads_reference_counts() -> None:
    root = Path(vm.__file__).parent
    readers = sorted(
        str(p.relative_to(root)) for p in root.rglob("*.py") if "getrefcount" in p.read_text()
    )
    assert readers == ["memory/refcounts.py"]
