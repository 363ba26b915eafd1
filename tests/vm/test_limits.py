"""Bounded execution (``max_steps``, ``timeout``) and the messages for misuse of the VM."""

from __future__ import annotations

import numpy as np
import pytest

import dynshape
import vm.interpreter
from tests.counting import assert_linear
from vm import (
    Assembler,
    ShapeProgramBuilder,
    StepLimitError,
    VirtualMachine,
    VMArgumentError,
    VMError,
    tensor,
)
from vm.interpreter import DEFAULT_MAX_STEPS

I8 = tensor("int64", ())


def _endless_jump() -> Assembler:
    """main: a backward jump to itself, forever (what a corrupted file can say)."""
    asm = Assembler()
    f = asm.function("main", [])
    top = f.label("top")
    f.place(top)
    f.load_int(1)
    f.jump(top)
    return asm


def _endless_tail_call() -> Assembler:
    asm = Assembler()
    f = asm.function("main", [("k", I8)], I8)
    f.tail_call("main", [f.params[0]])
    return asm


def _countdown(tail: bool) -> Assembler:
    """loop(k) = k if k <= 0 else loop(k - 1): k + 1 steps (calls)."""
    asm = Assembler()
    b = ShapeProgramBuilder(["k"])
    (k,) = b.inputs
    prog = asm.shape_program(b.build([b.node("gt", k, 0), k - 1]))
    f = asm.function("main", [("k", I8)], I8)
    (rk,) = f.params
    go, less = f.shape_program(prog, [rk])
    done = f.label("done")
    f.jump_if_not(go, done)
    if tail:
        f.tail_call("main", [less])
    else:
        f.ret(f.call("main", [less]))
    f.place(done)
    f.ret(rk)
    return asm


@pytest.mark.parametrize("program", [_endless_jump, _endless_tail_call])
def test_a_runaway_program_stops_at_max_steps(program):
    exe = program().build()
    args = () if program is _endless_jump else (np.int64(3),)
    with pytest.raises(
        StepLimitError, match=r"exceeded max_steps=1000 steps \(backward jumps, calls"
    ) as info:
        VirtualMachine(exe, max_steps=1000).run(*args)
    assert info.value.where is not None and info.value.where.startswith("main@")

    def stopped(steps):
        with pytest.raises(StepLimitError):
            VirtualMachine(exe, max_steps=steps).run(*args)

    # The work done before the stop grows with max_steps (Python calls, counted, not timed).
    small, large = assert_linear(stopped, 1000)
    assert large > small


def test_a_runaway_program_stops_at_its_timeout(monkeypatch):
    exe = _endless_jump().build()
    reads = 0

    def clock():  # a millisecond per read: the VM reads it once, then once a step
        nonlocal reads
        reads += 1
        return reads / 1000

    monkeypatch.setattr(vm.interpreter, "perf_counter", clock)
    with pytest.raises(StepLimitError, match=r"exceeded its timeout of 0.05 s"):
        VirtualMachine(exe, max_steps=None, timeout=0.05).run()
    assert 50 <= reads <= 52  # stopped at the first step past its 50 ms, neither before nor later


@pytest.mark.parametrize("tail", [True, False])
def test_steps_are_counted_exactly_at_calls(tail):
    exe = _countdown(tail).build()
    # loop(50) makes 50 tail calls, or 50 calls and 50 returns to a caller (the return from
    # the top-level call ends the run and is not a step).
    steps = 50 if tail else 2 * 50
    assert VirtualMachine(exe, max_steps=steps).run(np.int64(50)) == 0
    with pytest.raises(StepLimitError):
        VirtualMachine(exe, max_steps=steps - 1).run(np.int64(50))


def test_the_default_bound_is_generous_and_none_disables_it():
    exe = _countdown(tail=True).build()
    assert VirtualMachine(exe).max_steps == DEFAULT_MAX_STEPS >= 10**8
    assert VirtualMachine(exe, max_steps=None).run(np.int64(20_000)) == 0


@pytest.mark.parametrize(
    ("option", "value"),
    [("max_steps", 0), ("max_steps", -5), ("max_steps", "many"), ("timeout", 0), ("timeout", True)],
)
def test_bad_bounds_are_refused(option, value):
    with pytest.raises(VMError, match=rf"{option} must be a positive number or None"):
        VirtualMachine(_endless_jump().build(), **{option: value})


def test_the_vm_is_usable_after_a_stopped_run():
    vm = VirtualMachine(_countdown(tail=False).build(), max_steps=30)
    with pytest.raises(StepLimitError):
        vm.run(np.int64(100))
    assert vm.run(np.int64(3)) == 0
    assert vm.allocator.stats.live_bytes == 0


# ---- messages for misuse ------------------------------------------------------------------

PROGRAM = "def @main(%x: Tensor[(n,), float32]) -> Tensor[(n,), float32] { negative(%x) }"


def test_a_program_where_an_executable_is_expected_says_to_compile():
    for value, what in ((dynshape.parse(PROGRAM), "a Module"), (PROGRAM, "program text")):
        with pytest.raises(VMError) as info:
            VirtualMachine(value)
        assert str(info.value) == (
            f"VirtualMachine expects an Executable, got {what}: compile it first, "
            "vm = VirtualMachine(dynshape.compile(program))"
        )
    with pytest.raises(VMError, match=r"got bytes: use Executable.from_bytes\(data\)"):
        VirtualMachine(b"DSHVMEXE")
    with pytest.raises(VMError, match=r"expects an Executable, got int$"):
        VirtualMachine(3)


@pytest.mark.parametrize(("order", "name"), [(">f4", "big-endian")])
def test_a_non_native_byte_order_is_named(order, name):
    vm = VirtualMachine(dynshape.compile(PROGRAM))
    with pytest.raises(VMArgumentError) as info:
        vm.run(np.ones(3, order))
    assert str(info.value) == (
        "main: parameter 'x': expected float32 in the machine's byte order, got "
        f"{name} '{order}' (convert it with a.astype('float32'))"
    )
    np.testing.assert_array_equal(vm.run(np.ones(3, order).astype("float32")), -np.ones(3))
