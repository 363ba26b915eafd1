"""Appends that grow a buffer in place (``vm/memory/capacity.py``) and donated arguments
(``vm/donation.py``): results equal numpy's concatenation, the allocator's counters show what
was copied, and every way the in-place write could show through an earlier view is refused."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from vm_testlib import run_in_threads

import dynshape
import ir
from vm import (
    Assembler,
    DonatedArrayError,
    Executable,
    FormatError,
    MemoryLimitError,
    VirtualMachine,
    VMArgumentError,
    VMError,
    tensor,
    with_room,
)
from vm.memory import capacity
from vm.memory.allocator import NaiveAllocator, PooledAllocator

STEP = """
def @main(%past: Tensor[(b, p, 4), float32], %x: Tensor[(b, 1, 4), float32]) {
  let %present = concatenate((%past, multiply(%x, 2f)), axis=1);
  (sum(%present, axis=[1]), %present)
}
"""


def _vm(
    ranges: dict[str, tuple[int, int | None]] | None = None, **options: object
) -> VirtualMachine:
    module = ir.parse(STEP)
    if ranges:
        module = ir.Module({"main": dataclasses.replace(module["main"], ranges=ir.Ranges(ranges))})
    return VirtualMachine(dynshape.compile(module), **options)  # type: ignore[arg-type]


def _step(vm: VirtualMachine, past: np.ndarray, rng: np.random.Generator, **kw: object) -> tuple:
    x = rng.standard_normal((past.shape[0], 1, 4)).astype(np.float32)
    total, present = vm.run(past, x, **kw)
    expected = np.concatenate([past, x * 2], axis=1)
    assert np.array_equal(present, expected)
    assert np.allclose(total, expected.sum(1), rtol=1e-5, atol=1e-5)
    return present, x


def test_a_decode_loop_copies_one_step_a_call_amortised() -> None:
    vm, rng = _vm(), np.random.default_rng(0)
    past = np.zeros((2, 0, 4), np.float32)
    kept = []
    for _ in range(200):
        past, _ = _step(vm, past, rng)
        kept.append(past)
    s = vm.allocator.stats
    step_bytes = 2 * 1 * 4 * 4
    # Room for twice the length each time it runs out: at 1, 3, 7, ..., 127 positions.
    assert s.appends_moved == 7 and s.appends_in_place == 193
    # In place: one step's bytes; moved: the whole prefix, 1 + 2 + ... + 128 steps at most.
    assert s.bytes_appended <= 200 * step_bytes + 255 * step_bytes
    # Every earlier result still shows what it showed when it was returned.
    for i, k in enumerate(kept):
        assert k.shape[1] == i + 1
        assert np.array_equal(k, kept[-1][:, : i + 1])


def test_a_declared_bound_gives_all_the_room_at_once() -> None:
    vm, rng = _vm({"p": (0, 63)}), np.random.default_rng(1)
    past = np.zeros((1, 0, 4), np.float32)
    for _ in range(64):
        past, _ = _step(vm, past, rng)
    s = vm.allocator.stats
    assert s.appends_moved == 1 and s.appends_in_place == 63
    assert past.base is not None and past.base.nbytes >= 64 * 16


def test_two_continuations_of_one_prefix_do_not_overwrite_each_other() -> None:
    vm, rng = _vm(), np.random.default_rng(2)
    past = np.zeros((1, 0, 4), np.float32)
    for _ in range(3):  # room for 6 positions after the third step's doubling
        past, _ = _step(vm, past, rng)
    first, _ = _step(vm, past, rng)
    before = vm.allocator.stats.copy()
    second, _ = _step(vm, past, rng)  # the mark is past `past`'s end: a copy
    assert vm.allocator.stats.appends_moved == before.appends_moved + 1
    assert not np.shares_memory(first, second)
    assert not np.array_equal(first[:, -1], second[:, -1])


def test_a_donated_prefix_is_written_in_place_even_behind_the_mark() -> None:
    vm, rng = _vm(), np.random.default_rng(3)
    past = np.zeros((1, 0, 4), np.float32)
    for _ in range(3):
        past, _ = _step(vm, past, rng)
    _step(vm, past, rng)  # a speculation, then rolled back: `past` is donated below
    before = vm.allocator.stats.copy()
    again, _ = _step(vm, past, rng, donate=("past",))
    assert vm.allocator.stats.appends_in_place == before.appends_in_place + 1
    assert np.shares_memory(again, past)


def test_only_a_view_that_starts_where_the_buffer_starts_is_its_prefix() -> None:
    """A view of the buffer with a prefix's shape and strides that starts one position later
    is no prefix, even donated and behind the mark: an append onto it copies, and the earlier
    result keeps its elements. (The append knows the view it handed out last without reading
    its address; any other array's address is read.)"""
    vm, rng = _vm(), np.random.default_rng(4)
    past = np.zeros((1, 0, 4), np.float32)
    for _ in range(3):  # three positions, room for six
        past, _ = _step(vm, past, rng)
    kept = past.copy()
    shifted = past[:, 1:]  # the same buffer, one position in
    before = vm.allocator.stats.copy()
    grown, _ = _step(vm, shifted, rng, donate=("past",))
    assert vm.allocator.stats.appends_moved == before.appends_moved + 1
    assert not np.shares_memory(grown, past)
    assert np.array_equal(past, kept)


def test_donation_by_position_and_its_errors() -> None:
    vm, rng = _vm(), np.random.default_rng(4)
    past = np.zeros((1, 0, 4), np.float32)
    _step(vm, past, rng, donate=[0])
    with pytest.raises(VMArgumentError, match="has no parameter 'pats'"):
        vm.run(past, np.zeros((1, 1, 4), np.float32), donate=("pats",))
    with pytest.raises(VMArgumentError, match="position 2 is out of range"):
        vm.run(past, np.zeros((1, 1, 4), np.float32), donate=(2,))
    with pytest.raises(VMArgumentError, match=r"names or positions, got 1\.5"):
        vm.run(past, np.zeros((1, 1, 4), np.float32), donate=(1.5,))


def test_the_sanitizer_catches_a_donated_array_used_again() -> None:
    vm, rng = _vm(check_memory=True), np.random.default_rng(5)
    past = np.zeros((1, 0, 4), np.float32)
    present, _ = _step(vm, past, rng, donate=("past",))
    present, _ = _step(vm, present, rng, donate=("past",))  # the result is fine to pass
    with pytest.raises(DonatedArrayError, match="argument 'past' is an array donated"):
        vm.run(past, np.zeros((1, 1, 4), np.float32))


def test_threads_appending_onto_one_prefix_each_get_their_own_answer() -> None:
    vm, rng = _vm(), np.random.default_rng(6)
    past = np.zeros((1, 0, 4), np.float32)
    for _ in range(5):
        past, _ = _step(vm, past, rng)
    xs = [np.full((1, 1, 4), i, np.float32) for i in range(16)]
    results: list[np.ndarray | None] = [None] * 16

    def work(i: int) -> None:
        results[i] = vm.run(past, xs[i])[1]

    run_in_threads(work, 16)
    for i, r in enumerate(results):
        assert r is not None and np.array_equal(r, np.concatenate([past, xs[i] * 2], axis=1))
    assert vm.allocator.stats.appends_in_place <= 1 + 5  # at most one thread wrote in place


def test_a_memory_limit_counts_the_room() -> None:
    vm, rng = _vm(memory_limit=4096), np.random.default_rng(7)
    past = np.zeros((1, 0, 4), np.float32)
    with pytest.raises(MemoryLimitError):
        for _ in range(400):
            past, _ = _step(vm, past, rng)
    assert past.shape[1] > 32  # it ran until the room for the doubled cache passed 4 KiB


def test_the_pass_rewrites_only_escaping_concatenations_onto_parameters() -> None:
    text = dynshape.stages(
        """
def @main(%a: Tensor[(n, 4), float32], %b: Tensor[(m, 4), float32], %s: Tensor[(2, 4), float32]) {
  let %kept = concatenate((%a, %b));
  let %inner = concatenate((%b, %a));
  let %static = concatenate((%s, %b));
  (%kept, sum(%inner), %static)
}
"""
    )["rewritten"]
    body = str(text["main"])
    assert "let %kept = append(%a, %b)" in body
    assert body.count("concatenate(") == 2  # the one that dies, the one onto a static axis


def test_a_loop_grows_its_accumulator_in_place() -> None:
    exe = dynshape.compile(
        """
def @grow(%acc: Tensor[(?, 2), float32], %i: int32, %k: int32) -> Tensor[(?, 2), float32] {
  if (less(%i, %k)) { @grow(concatenate((%acc, ones(shape=[1, 2]))), add(%i, 1), %k) } else { %acc }
}

def @main(%x: Tensor[(n, 2), float32], %k: int32) -> Tensor[(?, 2), float32] {
  @grow(%x, 0, %k)
}
"""
    )
    vm = VirtualMachine(exe)
    x = np.arange(6, dtype=np.float32).reshape(3, 2)
    out = vm.run(x, 50)
    assert np.array_equal(out, np.concatenate([x, np.ones((50, 2), np.float32)]))
    s = vm.allocator.stats
    assert s.appends_moved <= 6 and s.appends_in_place >= 44


def _appending(axis: int, capacity: int = 0) -> Assembler:
    asm = Assembler()
    x, y = tensor("float32", ("n", 2)), tensor("float32", ("m", 3))
    f = asm.function("main", [("x", x), ("y", y)])
    f.ret(f.append(f.params[0], f.params[1], axis, capacity))
    return asm


def test_an_executable_with_a_bad_append_is_refused() -> None:
    with pytest.raises(FormatError, match="axis out of range"):
        _appending(-1).build()
    with pytest.raises(FormatError, match="negative capacity -3"):
        _appending(0, -3).build()
    exe = _appending(0).build()
    with pytest.raises(VMError, match="differ on axis 1"):
        VirtualMachine(exe).run(np.zeros((1, 2), np.float32), np.zeros((1, 3), np.float32))
    exe2 = Executable.from_bytes(exe.to_bytes())
    assert str(exe2.functions[0].code) == str(exe.functions[0].code)


def test_operands_that_do_not_concatenate_are_a_clear_error() -> None:
    with pytest.raises(VMError, match="differ on axis 1"):
        capacity.append(
            np.zeros((2, 2), np.float32), np.zeros((1, 3), np.float32), 0, 0, _vm().allocator
        )
    with pytest.raises(VMError, match="cannot join float32"):
        capacity.append(
            np.zeros((2, 2), np.float32), np.zeros((1, 2), np.int32), 0, 0, _vm().allocator
        )


def test_append_s_shape_errors_name_its_operands() -> None:
    with pytest.raises(dynshape.CompileError, match=r"y\.shape\[1\] == x\.shape\[1\] "):
        dynshape.compile(
            "def @main(%x: Tensor[(n, 2), float32], %y: Tensor[(1, 3), float32]) { append(%x, %y) }"
        )
    with pytest.raises(dynshape.CompileError, match="concatenates x of rank 2 with y of rank 1"):
        dynshape.compile(
            "def @main(%x: Tensor[(n, 2), float32], %y: Tensor[(3,), float32]) { append(%x, %y) }"
        )
    exe = dynshape.compile(
        "def @main(%x: Tensor[(n, k), float32], %y: Tensor[(m, j), float32]) { append(%x, %y) }"
    )
    with pytest.raises(dynshape.DynShapeError, match=r"concatenated along axis 0\), got 3 != 2"):
        VirtualMachine(exe).run(np.zeros((1, 2), np.float32), np.zeros((1, 3), np.float32))


@pytest.mark.parametrize("pooled", [True, False])
def test_a_buffer_is_forgotten_when_its_last_view_dies(pooled: bool) -> None:
    """The registry holds no buffer alive: once the caller drops every view (and the pool,
    which keeps a buffer lent to the caller to take it back, lets go of it too), it is gone."""
    vm = _vm() if pooled else _vm(allocator=NaiveAllocator())
    rng = np.random.default_rng(8)
    before = capacity.registered_buffers()
    past = np.zeros((1, 0, 4), np.float32)
    for _ in range(10):
        past, _ = _step(vm, past, rng)
    assert capacity.registered_buffers() > before
    del past
    vm.allocator.release()  # the pool's note of what it lent
    assert capacity.registered_buffers() == before


def test_a_fresh_cache_each_call_reuses_the_buffer_the_caller_let_go_of() -> None:
    """A loop that feeds fresh arrays (not the results) as the past: each call's new buffer
    is one the pool took back once the caller dropped its result (warm memory, not fresh
    pages): in steady state nothing is allocated from the system; the answers stay right."""
    vm, rng = _vm(), np.random.default_rng(11)
    past = rng.standard_normal((2, 6, 4)).astype(np.float32)
    for _ in range(3):
        present, _ = _step(vm, past.copy(), rng)
        del present
    stats = vm.allocator.stats
    allocations, taken, moved = stats.allocations, stats.taken_back, stats.appends_moved
    for _ in range(5):
        present, _ = _step(vm, past.copy(), rng)
        del present
    assert stats.appends_moved == moved + 5  # a new buffer each call (the past is fresh)
    assert stats.allocations == allocations and stats.taken_back >= taken + 5


def test_threads_dropping_and_growing_caches_each_get_their_answers() -> None:
    """Threads whose calls each grow a fresh past and drop the result: the pool takes the
    buffers back and hands them to whichever thread asks next, never while a view is alive
    (each result is checked while the others keep running)."""
    vm = _vm()
    pasts = [
        np.random.default_rng(i).standard_normal((2, 5 + i, 4)).astype(np.float32) for i in range(8)
    ]
    failures: list[str] = []

    def work(i: int) -> None:
        rng = np.random.default_rng(100 + i)
        try:
            for _ in range(40):
                x = rng.standard_normal((2, 1, 4)).astype(np.float32)
                total, present = vm.run(pasts[i].copy(), x)
                expected = np.concatenate([pasts[i], x * 2], axis=1)
                if not np.array_equal(present, expected):
                    failures.append(f"thread {i}: wrong cache")
                del total, present
        except Exception as e:  # a thread's error fails the test, not just the thread
            failures.append(f"thread {i}: {type(e).__name__}: {e}")

    run_in_threads(work, 8)
    assert failures == []
    assert vm.allocator.stats.taken_back > 0


def test_a_buffer_taken_back_has_no_room_left_to_write_into() -> None:
    """Once a pool takes a cache buffer back for another use, its old room is forgotten: a
    view of the reused memory shaped like the old cache is appended onto by a copy, never
    written after in place (that memory belongs to the new owner)."""
    pool = PooledAllocator()
    x = np.ones((2, 3, 4), np.float32)
    y = np.full((2, 1, 4), 2.0, np.float32)
    grown = capacity.append(x, y, 1, 0, pool, False)
    assert grown.base is not None
    # no reference to the buffer kept here: a held reference counts as a view (is_viewed)
    raw_id, size, before = id(grown.base), grown.base.size - 64, capacity.registered_buffers()
    del grown
    storage = pool.alloc(size)  # a miss: the lent buffer comes back
    assert id(storage.raw) == raw_id and capacity.registered_buffers() == before - 1
    storage.buf.fill(7)
    lookalike = np.ndarray((2, 4, 4), np.float32, storage.buf, 0, (8 * 4 * 4, 16, 4))
    again = capacity.append(lookalike, y, 1, 0, pool, False)
    assert not np.shares_memory(again, storage.buf)
    assert np.all(storage.buf == 7)  # nothing written into the new owner's memory
    assert np.array_equal(again, np.concatenate([lookalike, y], axis=1))


def test_room_the_caller_gives_is_filled_in_place_from_the_first_step() -> None:
    """``with_room``: the first append (a prefill onto an empty past) and every one after it
    write into the caller's buffer until it is full; only then does the VM move the cache."""
    vm, rng = _vm(), np.random.default_rng(9)
    past = with_room(np.zeros((2, 0, 4), np.float32), 1, 12)
    assert past.shape == (2, 0, 4) and past.base is not None and past.base.shape == (2, 12, 4)
    buffer = past.base
    for _ in range(12):
        past, _ = _step(vm, past, rng, donate=("past",))
        assert past.base is buffer
    s = vm.allocator.stats
    assert (s.appends_in_place, s.appends_moved, s.bytes_appended) == (12, 0, 12 * 2 * 4 * 4)
    past, _ = _step(vm, past, rng)  # the room is full: the VM's own buffer, twice as long
    assert past.base is not buffer and vm.allocator.stats.appends_moved == 1


def test_with_room_copies_a_prefix_and_keeps_the_views_the_caller_holds() -> None:
    vm, rng = _vm(), np.random.default_rng(10)
    start = rng.standard_normal((1, 3, 4)).astype(np.float32)[:, ::-1]  # strided: copied
    past = with_room(start, 1, 8)
    assert np.array_equal(past, start) and not np.shares_memory(past, start)
    first, _ = _step(vm, past, rng)
    second, _ = _step(vm, past, rng)  # the same prefix again: the room is taken, a copy
    assert np.shares_memory(first, past) and not np.shares_memory(second, past)
    assert np.array_equal(first[:, :3], start) and np.array_equal(second[:, :3], start)
    assert not np.array_equal(first[:, 3], second[:, 3])


@pytest.mark.parametrize(
    ("axis", "length", "message"),
    [
        (3, 8, r"with_room: axis 3 is not an axis of an array of shape \[1, 2, 4\]"),
        (-4, 8, r"with_room: axis -4 is not an axis"),
        (1, 1, r"room for 1 positions along axis 1 does not hold the 2 the array"),
        (-2, 1, r"room for 1 positions along axis 1 does not hold"),
        (1, True, r"with_room: length must be an int, got True"),
        (1, 2.5, r"with_room: length must be an int, got 2\.5"),
        ("1", 8, r"with_room: axis must be an int, got '1'"),
        (1, 1 << 40, r"with_room: a buffer of shape \[1, 1099511627776, 4\] \(float32\) is too"),
    ],
)
def test_with_room_errors_name_what_is_wrong(axis: object, length: object, message: str) -> None:
    with pytest.raises(VMError, match=message):
        with_room(np.zeros((1, 2, 4), np.float32), axis, length)  # type: ignore[arg-type]


def test_with_room_takes_numpy_ints_and_a_negative_axis() -> None:
    past = with_room(np.zeros((1, 3, 4), np.float32), np.int64(-2), np.int32(5))
    assert past.shape == (1, 3, 4) and past.base is not None and past.base.shape == (1, 5, 4)


def test_room_given_is_forgotten_when_its_last_view_dies() -> None:
    before = capacity.registered_buffers()
    past = with_room(np.zeros((1, 0, 4), np.float32), 1, 4)
    assert capacity.registered_buffers() == before + 1
    del past
    assert capacity.registered_buffers() == before
