"""Storage, views, allocators, statistics, memory limit, and outputs held across calls."""

from __future__ import annotations

import random
import re

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from vm_testlib import elementwise_program

from vm import (
    Assembler,
    FormatError,
    MemoryLimitError,
    NaiveAllocator,
    OutOfBoundsError,
    PooledAllocator,
    ShapeProgramBuilder,
    VirtualMachine,
    VMError,
    tensor,
)
from vm.memory import Storage, size_class, tensor_view


@pytest.mark.parametrize("alignment", [1, 64, 128, 4096])
@pytest.mark.parametrize("size", [0, 1, 63, 64, 1000])
def test_storage_is_aligned(size, alignment):
    s = Storage(size, alignment)
    assert s.buf.nbytes == size
    if size:  # numpy gives no meaningful data pointer to an empty array
        assert s.buf.ctypes.data % max(alignment, 64) == 0


def test_bounds_check_message():
    s = Storage(100)
    with pytest.raises(OutOfBoundsError) as info:
        tensor_view(s, 64, (4, 5), np.dtype("float32"))
    assert str(info.value) == (
        "tensor of shape (4, 5) float32 needs 80 bytes at offset 64, "
        "but the storage holds 100 bytes"
    )


def test_a_static_view_outside_its_static_storage_is_refused_at_build():
    asm = Assembler()
    f = asm.function("main", [])
    s = f.alloc_storage(100)
    f.ret(f.alloc_tensor(s, 64, (4, 5), "float32"))
    with pytest.raises(FormatError, match=r"instruction 1 .*needs 144 bytes, but the storage"):
        asm.build()


def test_bounds_check_in_the_vm_names_the_instruction():
    asm = Assembler()
    b = ShapeProgramBuilder(["n"])
    (n,) = b.inputs
    size = asm.shape_program(b.build([n * 0 + 100]))  # a size only known at run time
    f = asm.function("main", [("x", tensor("float32", ("n",)))])
    (nbytes,) = f.shape_program(size, [f.dim(f.params[0], 0)])
    s = f.alloc_storage(nbytes)
    f.ret(f.alloc_tensor(s, 64, (4, 5), "float32"))
    with pytest.raises(OutOfBoundsError, match=r"(?s)needs 80 bytes at offset 64.*main@3"):
        VirtualMachine(asm.build()).run(np.zeros(2, np.float32))


@pytest.mark.parametrize("dims", [(-2,), (3, -1), (-2, -3)])
def test_a_negative_dim_from_a_register_names_the_view(dims):
    """A computed shape with a negative dim (one, or two whose product looks fine)."""
    asm = Assembler()
    b = ShapeProgramBuilder(["n"])
    (n,) = b.inputs
    prog = asm.shape_program(b.build([tuple(n - (3 - d) for d in dims)]))
    f = asm.function("main", [("x", tensor("float32", ("n",)))])
    (shape,) = f.shape_program(prog, [f.dim(f.params[0], 0)])
    f.ret(f.alloc_tensor(f.alloc_storage(100), 0, shape, "float32"))
    with pytest.raises(VMError, match=re.escape(f"tensor shape {dims} has a negative dim")) as e:
        VirtualMachine(asm.build()).run(np.zeros(3, np.float32))
    assert "main@" in str(e.value)  # where: the alloc_tensor instruction


@given(st.integers(0, 1 << 30))
def test_size_class_bounds_waste(n):
    c = size_class(n)
    assert c >= n and c % 64 == 0 and c <= max(64, n * 1.25 + 64)


def test_pooled_allocator_reuses_by_size_class():
    a = PooledAllocator()
    s1 = a.alloc(1000)
    a.free(s1)
    s2 = a.alloc(990)  # same class (1024)
    assert s2 is s1 and a.stats.pool_hits == 1 and a.stats.allocations == 1
    s3 = a.alloc(5000)
    assert a.stats.allocations == 2 and s3.capacity >= 5000
    a.free(s2)
    a.free(s3)
    assert a.stats.live_bytes == 0 and a.stats.bytes_held == a.cached_bytes
    a.release()
    assert a.stats.bytes_held == 0


def test_naive_allocator_never_reuses():
    a = NaiveAllocator()
    s1 = a.alloc(100)
    a.free(s1)
    s2 = a.alloc(100)
    assert s2 is not s1 and a.stats.allocations == 2 and a.stats.bytes_held == 100


def test_pool_reuse_across_calls_with_changing_shapes_stays_bounded():
    """1,000 calls with random sizes: bytes held never exceed three times the peak live bytes."""
    exe = elementwise_program("add")
    m = VirtualMachine(exe, output_policy="transfer")
    stats = m.allocator.stats
    rng = random.Random(0)
    for _ in range(1000):
        n = rng.randint(0, 300)
        x = np.ones((n, 4), np.float32)
        out = m.run(x, x)
        assert out.shape == (n, 4)
        assert stats.bytes_held <= 3 * stats.peak_live_bytes
        assert stats.live_bytes == 0
    # the largest call needs two buffers of 300 * 16 bytes (class 5120): a stated bound
    assert stats.peak_live_bytes <= 2 * size_class(300 * 16)
    assert stats.peak_bytes_held <= 6 * size_class(300 * 16)  # 3 x the peak of live bytes
    # Only the intermediate goes back to the pool (the output's storage is handed over), and
    # sizes are spread over ~25 size classes, so a fair share of requests hit the cache.
    assert stats.pool_hits > 200


def test_memory_limit_fails_before_allocating():
    exe = elementwise_program("add")
    m = VirtualMachine(exe, memory_limit=1000)
    x = np.ones((10, 4), np.float32)  # 160 bytes per buffer: fits
    m.run(x, x)
    big = np.ones((100, 4), np.float32)  # 1600 bytes: does not
    before = m.allocator.stats.copy()
    with pytest.raises(MemoryLimitError) as info:
        m.run(big, big)
    assert "would exceed the memory limit of 1,000 bytes" in str(info.value)
    assert "alloc_storage" in str(info.value)
    assert m.allocator.stats.allocations == before.allocations
    m.run(x, x)  # still usable


def test_memory_limit_evicts_cached_buffers_first():
    a = PooledAllocator(memory_limit=2048)
    s = a.alloc(1024)
    a.free(s)
    assert a.cached_bytes == 1024
    a.alloc(1500)  # class 1536: fits only once the cached 1024 are dropped
    assert a.stats.evictions == 1 and a.stats.bytes_held <= 2048


def test_naive_memory_limit():
    a = NaiveAllocator(memory_limit=100)
    a.alloc(60)
    with pytest.raises(MemoryLimitError):
        a.alloc(60)


@pytest.mark.parametrize("allocator", ["pooled", "naive"])
@pytest.mark.parametrize("policy", ["auto", "copy", "transfer"])
def test_outputs_stay_valid_across_calls(allocator, policy):
    exe = elementwise_program("add")
    m = VirtualMachine(exe, allocator=allocator, output_policy=policy)
    x1 = np.full((3, 4), 1, np.float32)
    out1 = m.run(x1, x1)
    kept = out1.copy()
    for _ in range(5):
        x2 = np.full((3, 4), 5, np.float32)
        out2 = m.run(x2, x2)
        assert not np.shares_memory(out1, out2)
    np.testing.assert_array_equal(out1, kept)
    out1 += 1  # the caller owns it
    np.testing.assert_array_equal(m.run(x1, x1), kept)


def test_a_returned_view_of_a_killed_storage_is_copied():
    asm = Assembler()
    k = asm.kernel("copy")
    spec = tensor("float32", (4,))
    f = asm.function("main", [("x", spec)])
    (x,) = f.params
    s = f.alloc_storage(16)
    t = f.alloc_tensor(s, 0, (4,), "float32")
    f.invoke(k, [x], [t])
    f.kill(s)  # a buggy program: frees the storage it returns a view of
    f.ret(t)
    m = VirtualMachine(asm.build())
    out1 = m.run(np.ones(4, np.float32))
    m.run(np.zeros(4, np.float32))
    assert out1.tolist() == [1, 1, 1, 1]


def test_stats_format_lists_every_counter():
    text = PooledAllocator().stats.format()
    for word in ("allocations", "bytes requested", "bytes held", "peak live bytes", "pool hits"):
        assert word in text


# Lent results -----------------------------------------------------------------------------


def test_results_dropped_between_calls_come_back_to_the_pool():
    """Steady state: same shapes, the caller lets go of each result; nothing new is allocated.
    (Results the pool hands out: a small one is numpy's own array by default.)"""
    exe = elementwise_program("add")
    m = VirtualMachine(exe, allocator=PooledAllocator(fresh_results=False))
    x = np.ones((64, 4), np.float32)
    for _ in range(3):
        m.run(x, x)
    stats = m.allocator.stats
    before = stats.allocations
    for _ in range(20):
        np.testing.assert_array_equal(m.run(x, x), 3 * x)  # main(x, y) = (x + y) + y
    assert stats.allocations == before
    assert stats.taken_back >= 20 and stats.lent >= 23
    # The very same buffer, warm: the VM itself keeps no reference to a returned result.
    first = m.run(x, x)
    address = first.ctypes.data
    del first
    assert m.run(x, x).ctypes.data == address


def test_results_and_views_of_them_the_caller_keeps_are_never_reused():
    exe = elementwise_program("add")
    m = VirtualMachine(exe)
    kept, views = [], []
    for k in range(100):  # more than MAX_LENT: the oldest are forgotten, never reused
        x = np.full((8, 4), k, np.float32)
        out = m.run(x, x)
        if k % 2:
            kept.append((k, out))
        else:
            views.append((k, out[2:, 1]))  # only a view survives the result
        del out
    for k, a in kept:
        np.testing.assert_array_equal(a, np.full((8, 4), 3 * k, np.float32))
    for k, v in views:
        np.testing.assert_array_equal(v, np.full((6,), 3 * k, np.float32))
    for i, (_, a) in enumerate(kept):
        for _, b in kept[i + 1 :]:
            assert not np.shares_memory(a, b)


def test_a_lent_storage_is_taken_back_only_once_let_go():
    a = PooledAllocator()
    s = a.alloc(256)
    view = tensor_view(s, 0, (64,), np.dtype("float32"))
    a.lend(s)
    assert a.stats.live_bytes == 0 and a.stats.bytes_held == 0  # the caller's memory now
    assert a.alloc(256) is not s  # the view is alive: a miss, a fresh buffer
    del view
    assert a.alloc(256) is s and a.stats.taken_back == 1


def test_release_forgets_lent_storages():
    a = PooledAllocator()
    s = a.alloc(128)
    a.lend(s)
    a.release()
    assert a.alloc(128) is not s and a.stats.taken_back == 0


def test_naive_allocator_lends_by_forgetting():
    a = NaiveAllocator()
    s = a.alloc(100)
    a.lend(s)
    assert a.stats.detached == 1 and a.stats.live_bytes == 0 and a.stats.bytes_held == 0


def test_lent_results_do_not_count_against_the_memory_limit():
    exe = elementwise_program("add")
    x = np.ones((256, 4), np.float32)  # 4 KiB per tensor: two live at the peak of a call
    m = VirtualMachine(exe, memory_limit=2 * 4096)
    kept = [m.run(x, x) for _ in range(10)]  # ten results held by the caller: theirs
    for out in kept:
        np.testing.assert_array_equal(out, 3 * x)
    assert m.allocator.stats.bytes_held <= 2 * 4096


def test_a_call_of_growing_buffers_is_served_from_the_pool_from_its_third_call_on():
    """Each call asks for buffers of ten sizes, one at a time (freed before the next, as a loop
    that frees each step's buffers does): the cache must hold one of each size, more than twice
    the peak of live bytes, for the next call to allocate nothing."""
    a = PooledAllocator()
    sizes = [1024 * k for k in range(1, 11)]

    def call():
        for n in sizes:
            a.free(a.alloc(n))
        a.end_call()

    call()
    call()
    before = a.stats.allocations
    call()
    assert a.stats.allocations == before  # steady state: nothing new
    most = sum(size_class(n) for n in sizes)
    assert a.stats.peak_bytes_held <= a.stats.peak_live_bytes + max(
        2 * a.stats.peak_live_bytes, most
    )
    assert a.cached_bytes > 2 * a.stats.peak_live_bytes  # the old cap could not have held them


def test_address_of_is_the_first_elements_address_for_every_kind_of_array():
    from vm.memory.storage import address_of

    a = np.arange(120, dtype=np.float32).reshape(4, 30)
    frozen = a.copy()
    frozen.flags.writeable = False
    views = [a, a[1:], a[:, 3:], a[::2], a.T, a[2, 5:9], np.empty(0), frozen, frozen[1:], a[:0]]
    for view in views:  # contiguous or not, writable or not, empty
        assert address_of(view) == view.__array_interface__["data"][0]
    storage = Storage(100)
    assert storage.address == address_of(storage.buf) and storage.address % 64 == 0
