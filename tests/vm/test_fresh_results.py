"""Small results as numpy's own arrays (vm/fresh_results.py): which storages, when, and that
results, errors and the allocator's counters are what the pooled path gives."""

from __future__ import annotations

import numpy as np
import pytest
from vm_testlib import elementwise_program, run_in_threads

from vm import (
    Assembler,
    OutOfBoundsError,
    PooledAllocator,
    ShapeProgramBuilder,
    VirtualMachine,
    VMError,
    tensor,
)
from vm.fresh_results import result_sites
from vm.memory.allocator import FRESH_RESULT_BYTES

F4 = tensor("float32", (4,))


def _pooled(exe, **options) -> VirtualMachine:
    return VirtualMachine(exe, allocator=PooledAllocator(fresh_results=False), **options)


def test_the_result_storage_is_a_site_and_the_killed_intermediate_is_not():
    exe = elementwise_program("add")
    code = exe.functions[0].code
    text = [str(ins.op.name) for ins in code]
    sites = result_sites(code)
    # alloc_storage of the intermediate (killed) at the first ALLOC_STORAGE, the result's at
    # the second: only the second, mapped to its own alloc_tensor.
    allocs = [pc for pc, name in enumerate(text) if name == "ALLOC_STORAGE"]
    views = [pc for pc, name in enumerate(text) if name == "ALLOC_TENSOR"]
    assert sites == {allocs[1]: views[1]}


def test_a_storage_with_two_views_or_a_nonzero_offset_is_not_a_site():
    asm = Assembler()
    copy = asm.kernel("copy")
    f = asm.function("main", [("x", F4)])
    (x,) = f.params
    s = f.alloc_storage(32)
    a = f.alloc_tensor(s, 0, (4,), "float32")
    b = f.alloc_tensor(s, 16, (4,), "float32")
    f.invoke(copy, [x], [a])
    f.invoke(copy, [a], [b])
    f.ret(b)
    assert result_sites(asm.build().functions[0].code) == {}
    asm = Assembler()
    copy = asm.kernel("copy")
    f = asm.function("main", [("x", F4)])
    (x,) = f.params
    s = f.alloc_storage(32)
    b = f.alloc_tensor(s, 16, (4,), "float32")
    f.invoke(copy, [x], [b])
    f.ret(b)
    assert result_sites(asm.build().functions[0].code) == {}


def _branch_program(loop: bool):
    """main(x) = a copy of x, made before a forward branch (or in a loop that runs twice)."""
    asm = Assembler()
    copy = asm.kernel("copy")
    f = asm.function("main", [("x", F4)])
    (x,) = f.params
    c = f.load_int(1)
    top, done = f.label(), f.label()
    f.place(top)
    out = f.empty((4,), "float32")
    f.invoke(copy, [x], [out])
    f.jump_if_not(c, done)
    if loop:
        f.load_int(0, dst=c)
        f.jump(top)
    f.place(done)
    f.ret(out)
    return asm.build()


@pytest.mark.parametrize("loop", [False, True])
def test_a_forward_branch_keeps_fresh_results_and_a_loop_its_storages(loop):
    exe = _branch_program(loop)
    assert bool(result_sites(exe.functions[0].code)) is not loop
    got = VirtualMachine(exe).run(np.ones(4, np.float32))
    np.testing.assert_array_equal(got, np.ones(4, np.float32))
    # In a loop a storage register may hold the previous iteration's storage: pooled, lent.
    assert (got.base is not None) is loop


@pytest.mark.parametrize("n", [0, 1, 7, 1000])
def test_a_small_result_is_a_fresh_array_with_the_pooled_paths_values(n):
    exe = elementwise_program("add")
    rng = np.random.default_rng(n)
    x, y = (rng.standard_normal((n, 4)).astype(np.float32) for _ in range(2))
    fresh, pooled = VirtualMachine(exe), _pooled(exe)
    got, want = fresh.run(x, y), pooled.run(x, y)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(got, x + y + y)
    assert got.base is None and got.flags.writeable and got.flags.c_contiguous
    assert want.base is not None  # the pooled one is a view of a storage
    # The allocator saw only the intermediate: one request, freed; nothing lent.
    s = fresh.allocator.stats
    assert (s.requests, s.frees, s.lent, s.live_bytes) == (1, 1, 0, 0)


def test_results_above_the_limit_and_under_a_memory_limit_come_from_the_pool():
    exe = elementwise_program("add")
    rows = FRESH_RESULT_BYTES // 16 + 1  # (rows, 4) float32: just over the limit
    x = np.ones((rows, 4), np.float32)
    m = VirtualMachine(exe)
    assert m.run(x, x).base is not None
    assert m.allocator.stats.lent == 1
    # Back under the limit: fresh again; the same VM switches per call.
    assert m.run(x[:3], x[:3]).base is None
    limited = VirtualMachine(exe, memory_limit=1 << 30)
    assert limited.allocator.fresh_result_bytes == 0
    assert limited.run(x[:3], x[:3]).base is not None
    checked = VirtualMachine(exe, check_memory=True)
    assert checked.run(x[:3], x[:3]).base is not None  # the sanitizer poisons what it hands out


def _short_storage_program(bytes_per_row: int, rows_dim: bool = True):
    """main(x: (n, 4)) = copy(x) into a storage of ``bytes_per_row * n`` bytes."""
    asm = Assembler()
    copy = asm.kernel("copy")
    f = asm.function("main", [("x", tensor("float32", ("n", 4)))])
    (x,) = f.params
    n = f.dim(x, 0)
    b = ShapeProgramBuilder(["n"])
    (sym,) = b.inputs
    dim = sym if rows_dim else sym - 1000
    size, shape = f.shape_program(asm.shape_program(b.build([sym * bytes_per_row, (dim, 4)])), [n])
    out = f.alloc_tensor(f.alloc_storage(size), 0, shape, "float32")
    f.invoke(copy, [x], [out])
    f.ret(out)
    return asm.build()


@pytest.mark.parametrize(
    ("bytes_per_row", "rows_dim", "error", "message"),
    [
        # 8 bytes a row, the view needs 16
        (8, True, OutOfBoundsError, "needs 48 bytes at offset 0, but the storage holds 24 bytes"),
        # a view of (n - 1000, 4)
        (16, False, VMError, "tensor shape (-997, 4) has a negative dim"),
    ],
)
def test_a_view_that_does_not_fit_is_the_same_error_as_pooled(
    bytes_per_row, rows_dim, error, message
):
    exe = _short_storage_program(bytes_per_row, rows_dim)
    x = np.ones((3, 4), np.float32)
    errors = []
    for machine in (VirtualMachine(exe), _pooled(exe)):
        with pytest.raises(error) as info:
            machine.run(x)
        errors.append(str(info.value))
    assert errors[0] == errors[1]
    assert message in errors[0] and "at main@3: alloc_tensor" in errors[0]


def test_threads_sharing_a_vm_get_their_own_fresh_results():
    exe = elementwise_program("add")
    m = VirtualMachine(exe)
    rng = np.random.default_rng(1)
    inputs = [rng.standard_normal((k + 1, 4)).astype(np.float32) for k in range(16)]
    wrong: list[int] = []

    def work(k: int) -> None:
        x = inputs[k]
        for _ in range(200):
            got = m.run(x, x)
            if got.shape != x.shape or not np.array_equal(got, 3 * x):
                wrong.append(k)

    run_in_threads(work, 16)
    assert wrong == []
    assert m.allocator.stats.live_bytes == 0


def test_a_storage_asking_for_a_larger_alignment_keeps_it():
    asm = Assembler()
    copy = asm.kernel("copy")
    f = asm.function("main", [("x", F4)])
    (x,) = f.params
    out = f.alloc_tensor(f.alloc_storage(16, alignment=4096), 0, (4,), "float32")
    f.invoke(copy, [x], [out])
    f.ret(out)
    exe = asm.build()
    assert result_sites(exe.functions[0].code) == {}
    got = VirtualMachine(exe).run(np.arange(4, dtype=np.float32))
    assert got.ctypes.data % 4096 == 0 and got.base is not None
