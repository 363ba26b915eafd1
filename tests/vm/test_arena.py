"""One arena a call (``vm/memory/arena.py``, ``vm/straight_arena.py``): which storages become
slots, where slots are placed, and that a VM packing arenas gives the answers, errors and
memory of one that does not."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from vm_testlib import run_in_threads

import dynshape
from vm import Assembler, OutOfBoundsError, VirtualMachine, tensor
from vm.memory.allocator import NaiveAllocator, PooledAllocator
from vm.memory.arena import Arena, place
from vm.straight import generated_source

# Two plans (design/memory.md): where n <= m one storage for everything, returned; else one
# storage per intermediate, each killed after its last use (the arena's slots).
TWO_PLANS = """
def @main(%x: Tensor[(n, 8), float32], %y: Tensor[(m, 8), float32]) -> Tensor[(n, n), float32] {
  let %a = exp(%x);
  let %b = tanh(%y);
  let %c = nn.matmul(%a, transpose(%b));
  let %d = sum(%c, axis=[1], keepdims=True);
  let %e = divide(%c, %d);
  let %f = nn.matmul(%e, %b);
  nn.matmul(%f, transpose(%a))
}
"""


def _inputs(n: int, m: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return (
        rng.standard_normal((n, 8)).astype(np.float32),
        rng.standard_normal((m, 8)).astype(np.float32),
    )


def _source(vm: VirtualMachine) -> str:
    source = generated_source(vm._code[0][0])
    assert source is not None, "the function did not run as one generated step"
    return source


def _slots(source: str) -> int:
    """How many allocations the generated source serves from the arena: ``a3(...)`` calls,
    and ``x3(...)`` calls (a slot taken with its one view)."""
    return sum((" = a" in line or " = x" in line) and "(" in line for line in source.splitlines())


# Placement ----------------------------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(1, 40), st.integers(0, 30), st.integers(0, 30)),
        min_size=1,
        max_size=30,
    )
)
def test_blocks_alive_together_never_share_bytes(blocks: list[tuple[int, int, int]]) -> None:
    capacities = [64 * c for c, _, _ in blocks]
    lifetimes = [(min(a, b), max(a, b)) for _, a, b in blocks]
    offsets, total = place(capacities, lifetimes)
    for i, (ci, (si, ei)) in enumerate(zip(capacities, lifetimes, strict=True)):
        assert offsets[i] % 64 == 0 and offsets[i] + ci <= total
        for j in range(i):
            sj, ej = lifetimes[j]
            if si <= ej and sj <= ei:  # alive at once: disjoint bytes
                assert offsets[i] + ci <= offsets[j] or offsets[j] + capacities[j] <= offsets[i]
    # never less than what is alive at the busiest pc, never more than everything
    busiest = max(
        sum(c for c, (s, e) in zip(capacities, lifetimes, strict=True) if s <= pc <= e)
        for pc in range(31)
    )
    assert busiest <= total <= sum(capacities)


def test_blocks_alive_one_after_another_share_one_place() -> None:
    assert place([128, 64, 192], [(0, 1), (2, 3), (4, 5)]) == ([0, 0, 0], 192)
    assert place([128, 64, -1], [(0, 3), (2, 5), (1, 1)]) == ([0, 128, 0], 192)


# Which storages are slots -------------------------------------------------------------------


def test_storages_that_die_inside_the_function_are_slots_and_results_are_not() -> None:
    vm = VirtualMachine(dynshape.compile(TWO_PLANS))
    source = _source(vm)
    assert "AB()" in source and "AE()" in source
    assert _slots(source) >= 2
    # the result's storage leaves the function: the allocator's (its closure is called)
    assert source.count("alloc") == 0  # no text of the executable: only generated names


@pytest.mark.parametrize(
    "allocator",
    [NaiveAllocator(), PooledAllocator(memory_limit=1 << 30), PooledAllocator(arenas=False)],
    ids=["naive", "memory-limit", "arenas-off"],
)
def test_allocators_that_see_every_storage_get_no_arena(allocator: object) -> None:
    vm = VirtualMachine(dynshape.compile(TWO_PLANS), allocator=allocator)  # type: ignore[arg-type]
    source = _source(vm)
    assert _slots(source) == 0 and "AB()" not in source


def _killed_in_one_branch() -> VirtualMachine:
    """A storage allocated before an ``if`` and killed in its then-branch only: its life is
    not an interval of pcs, so it must not be a slot; the result's storage is one either way
    (returned: never a slot)."""
    asm = Assembler()
    copy = asm.kernel("copy", num_inputs=1)
    spec = tensor("float32", (4,))
    f = asm.function("main", [("x", spec), ("c", tensor("bool", ()))], spec)
    x, c = f.params
    s = f.alloc_storage(16)
    t = f.alloc_tensor(s, 0, (4,), "float32")
    f.invoke(copy, [x], [t])
    out = f.alloc_tensor(f.alloc_storage(16), 0, (4,), "float32")
    orelse, join = f.label("else"), f.label("join")
    f.jump_if_not(c, orelse)
    f.invoke(copy, [t], [out])
    f.kill(s)
    f.jump(join)
    f.place(orelse)
    f.invoke(copy, [x], [out])
    f.place(join)
    f.ret(out)
    return VirtualMachine(asm.build())


def test_a_storage_killed_on_one_path_only_is_not_a_slot() -> None:
    vm = _killed_in_one_branch()
    source = _source(vm)
    assert "if r[" in source and _slots(source) == 0
    x = np.arange(4, dtype=np.float32)
    for c in (True, False, True):
        np.testing.assert_array_equal(vm.run(x, np.array(c)), x)


# Results, memory, errors, threads -----------------------------------------------------------


def _plain(exe: object) -> VirtualMachine:
    return VirtualMachine(exe, allocator=PooledAllocator(arenas=False))  # type: ignore[arg-type]


def test_answers_equal_those_without_arena_as_sizes_grow_and_shrink() -> None:
    exe = dynshape.compile(TWO_PLANS)
    packed, plain = VirtualMachine(exe), _plain(exe)
    for n, m in ((40, 3), (40, 3), (90, 7), (5, 1), (0, 3), (200, 3), (3, 40), (7, 2), (200, 9)):
        np.testing.assert_array_equal(packed.run(*_inputs(n, m)), plain.run(*_inputs(n, m)))
        assert packed.allocator.stats.live_bytes == 0


def test_a_call_asks_once_for_the_slots_once_their_sizes_are_known() -> None:
    exe = dynshape.compile(TWO_PLANS)
    vm, plain = VirtualMachine(exe), _plain(exe)
    x, y = _inputs(40, 3)
    vm.run(x, y)  # learns the sizes: every slot's request goes to the allocator
    plain.run(x, y)
    before, before_plain = vm.allocator.stats.requests, plain.allocator.stats.requests
    vm.run(x, y)
    plain.run(x, y)
    per_call = vm.allocator.stats.requests - before
    per_call_plain = plain.allocator.stats.requests - before_plain
    slots = _slots(_source(vm))
    assert slots >= 5 and per_call_plain >= slots
    assert per_call == per_call_plain - slots + 1  # the slots' requests are now one


def test_a_size_that_grows_every_call_lays_the_arena_out_a_logarithmic_number_of_times() -> None:
    vm = VirtualMachine(dynshape.compile(TWO_PLANS))
    stats, slow_calls = vm.allocator.stats, 0
    for n in range(2, 302):
        before = stats.requests
        vm.run(*_inputs(n, 1))
        if stats.requests - before > 1:  # a slot missed: the allocator served it
            slow_calls += 1
    assert slow_calls <= 20  # doubling: ~log2(300) layouts for each slot that grows


def test_a_failing_call_gives_the_arena_back_and_the_next_call_runs() -> None:
    text = """
    def @main(%x: Tensor[(n, 8), float32], %i: Tensor[(k,), int64]) -> Tensor[(k, 8), float32] {
      take(exp(%x), %i, axis=0)
    }
    """
    exe = dynshape.compile(text)
    vm = VirtualMachine(exe)
    x = np.ones((4, 8), np.float32)
    good = np.array([0, 3], np.int64)
    np.testing.assert_array_equal(vm.run(x, good), np.exp(x)[good])
    with pytest.raises(Exception, match="index"):
        vm.run(x, np.array([9], np.int64))
    assert vm.allocator.stats.live_bytes == 0
    np.testing.assert_array_equal(vm.run(x, good), np.exp(x)[good])


def _view_of_m_rows_in_n_rows() -> VirtualMachine:
    """``main(x: (n, 4), y: (m, 4))``: a storage of n rows (killed: a slot), a view of m rows
    of it, ``y`` copied in and doubled into the result."""
    from vm import ShapeProgramBuilder

    asm = Assembler()
    copy, add = asm.kernel("copy", num_inputs=1), asm.kernel("add", num_inputs=2)
    f = asm.function(
        "main",
        [("x", tensor("float32", ("n", 4))), ("y", tensor("float32", ("m", 4)))],
        tensor("float32", ("m", 4)),
    )
    x, y = f.params
    b = ShapeProgramBuilder(["n", "m"])
    n, m = b.inputs
    size, shape = f.shape_program(
        asm.shape_program(b.build([n * 16, (m, 4)])), [f.dim(x, 0), f.dim(y, 0)]
    )
    s = f.alloc_storage(size)
    t = f.alloc_tensor(s, 0, shape, "float32")
    f.invoke(copy, [y], [t])
    out = f.alloc_tensor(f.alloc_storage(size), 0, shape, "float32")
    f.invoke(add, [t, t], [out])
    f.kill(s)
    f.ret(out)
    return VirtualMachine(asm.build())


def _two_views_of_one_slot() -> VirtualMachine:
    """``main(x: (n, 4))``: one killed storage (a slot) viewed twice, as ``x`` copied in and
    as its doubling; the sum of both is the result."""
    from vm import ShapeProgramBuilder

    asm = Assembler()
    copy, add = asm.kernel("copy", num_inputs=1), asm.kernel("add", num_inputs=2)
    f = asm.function("main", [("x", tensor("float32", ("n", 4)))], tensor("float32", ("n", 4)))
    (x,) = f.params
    b = ShapeProgramBuilder(["n"])
    (n,) = b.inputs
    half, shape = f.shape_program(asm.shape_program(b.build([n * 16, (n, 4)])), [f.dim(x, 0)])
    size = f.shape_program(asm.shape_program(b.build([n * 32])), [f.dim(x, 0)])[0]
    s = f.alloc_storage(size)
    first = f.alloc_tensor(s, 0, shape, "float32")
    second = f.alloc_tensor(s, half, shape, "float32")
    f.invoke(copy, [x], [first])
    f.invoke(add, [first, first], [second])
    out = f.alloc_tensor(f.alloc_storage(half), 0, shape, "float32")
    f.invoke(add, [first, second], [out])
    f.kill(s)
    f.ret(out)
    return VirtualMachine(asm.build())


def test_a_slot_viewed_once_is_one_line_and_its_kill_writes_nothing() -> None:
    vm = VirtualMachine(dynshape.compile(TWO_PLANS))
    lines = _source(vm).splitlines()
    taken = [line for line in lines if " = x" in line]
    assert taken and not [line for line in lines if " = a" in line or " = w" in line]
    # the storage registers are never written: no kill line clears them
    assert not [line for line in lines if line.strip().endswith("= None")]
    for n, m in ((3, 5), (5, 3), (40, 2), (3, 5)):
        np.testing.assert_allclose(vm.run(*_inputs(n, m)), _plain(vm.exe).run(*_inputs(n, m)))
    assert vm.allocator.stats.live_bytes == 0


def test_a_slot_viewed_twice_keeps_its_storage_line_and_its_kill() -> None:
    vm = _two_views_of_one_slot()
    lines = _source(vm).splitlines()
    assert len([line for line in lines if " = a" in line]) == 1
    assert len([line for line in lines if " = w" in line]) == 2
    assert len([line for line in lines if line.strip().endswith("= None")]) == 1
    for rows in (3, 8, 2):
        x = np.arange(rows * 4, dtype=np.float32).reshape(rows, 4)
        np.testing.assert_array_equal(vm.run(x), 3 * x)
    assert vm.allocator.stats.live_bytes == 0


def test_a_slot_and_its_view_are_one_line_only_within_one_branch() -> None:
    # The loader refuses a view of a storage allocated on one path only, and a register
    # allocated on two paths is no slot; single_views states its own condition all the same.
    from vm.straight_arena import single_views

    vm = VirtualMachine(dynshape.compile(TWO_PLANS))
    code, steps = vm.exe.functions[0].code, vm._code[0]
    lifetimes = sorted(pc for pc, ins in enumerate(code) if ins.op.name == "ALLOC_STORAGE")
    same = {pc: () for pc in range(len(code))}
    found = single_views(code, steps, lifetimes, same)
    assert found and all(code[view].op.name == "ALLOC_TENSOR" for view in found)
    apart = {pc: (((0, 1),) if pc in found else ()) for pc in range(len(code))}
    assert single_views(code, steps, lifetimes, apart) == {}


def test_a_view_past_a_slot_s_request_is_refused_though_the_slot_has_room() -> None:
    vm = _view_of_m_rows_in_n_rows()
    assert _slots(_source(vm)) == 1
    rows = np.arange(32, dtype=np.float32).reshape(8, 4)
    np.testing.assert_array_equal(vm.run(rows, rows), 2 * rows)  # the slot: 128 bytes
    np.testing.assert_array_equal(vm.run(rows[:4], rows[:3]), 2 * rows[:3])  # fits 64 bytes
    # 64 bytes asked, 80 viewed: refused as the allocator's storage of 64 bytes refuses it,
    # also right after a call that made (and kept) the same view of the slot with room
    np.testing.assert_array_equal(vm.run(rows, rows[:5]), 2 * rows[:5])
    with pytest.raises(
        OutOfBoundsError, match="needs 80 bytes at offset 0, but the storage holds 64"
    ):
        vm.run(rows[:4], rows[:5])
    assert vm.allocator.stats.live_bytes == 0
    np.testing.assert_array_equal(vm.run(rows, rows), 2 * rows)


def test_threads_sharing_a_vm_get_the_answers_they_get_alone() -> None:
    exe = dynshape.compile(TWO_PLANS)
    vm = VirtualMachine(exe)
    sizes = [(1, 1), (9, 2), (33, 5), (120, 3), (4, 30)] * 3
    inputs = [_inputs(n, m, seed) for seed, (n, m) in enumerate(sizes)]
    expected = [_plain(exe).run(*xy) for xy in inputs]
    failures: list[str] = []

    def work(offset: int) -> None:
        for round_ in range(15):
            i = (offset + round_) % len(inputs)
            if not np.array_equal(vm.run(*inputs[i]), expected[i]):
                failures.append(f"thread {offset} input {i}")

    run_in_threads(work, 4)
    assert failures == []
    assert vm.allocator.stats.live_bytes == 0


def test_a_call_failing_after_a_miss_leaves_nothing_for_the_next_call_to_free() -> None:
    # A call misses (no layout yet) and fails before its return: the VM frees its live
    # storages, the miss among them. The next call's allocator may hand that buffer to another
    # instruction; the arena must not free it again at its return.
    pool, live = PooledAllocator(), {}
    arena = Arena(pool, live, [(0, 1)])
    take = arena.taker(0, 64)
    arena.begin()
    missed = take(128)
    for storage in live.values():  # the failed call: the VM gives back what it left
        pool.free(storage)
    live.clear()
    arena.begin()
    other = pool.alloc(128)  # another instruction's storage: the same buffer, from the pool
    live[id(other.raw)] = other
    assert other is missed
    take(64)
    arena.end()
    assert live.get(id(other.raw)) is other  # still the other instruction's, not freed
