"""What bounds the loader's work and a run's memory outside the pool, whatever a file says.

Each case is a crafted executable (what a corrupt or hostile file can say): it is refused at
load with a FormatError naming the limit, or stopped at run time with a VMError, never a hang,
a walk over exponentially many values or an unbounded allocation.
"""

from __future__ import annotations

import numpy as np
import pytest

import vm.register_kinds as register_kinds
import vm.validate as validate
from vm import Assembler, Executable, FormatError, VirtualMachine, VMError, tensor
from vm.interpreter import MAX_STACK_REGISTERS
from vm.register_kinds import MAX_TUPLE_DEPTH, MAX_TUPLE_NODES

X = ("x", tensor("float32", (1,)))
I8 = tensor("int64", ())


def _tuple_dag(levels: int, width: int) -> Assembler:
    """%r(k+1) = tuple(%rk x width): a few instructions, width**levels values as a tree."""
    asm = Assembler()
    f = asm.function("main", [X])
    r = f.params[0]
    for _ in range(levels):
        r = f.tuple([r] * width)
    f.ret(r)
    return asm


def test_a_tuple_of_shared_tuples_is_bounded_by_its_values_not_its_instructions():
    exe = _tuple_dag(2, 100).build()  # 1 + 100 * 101 values: fine
    out = VirtualMachine(exe).run(np.ones(1, np.float32))
    assert len(out) == 100 and len(out[0]) == 100
    with pytest.raises(
        FormatError, match=rf"could hold 1010101 values \(the limit is {MAX_TUPLE_NODES}\)"
    ):
        _tuple_dag(3, 100).build()
    with pytest.raises(FormatError, match=r"instruction 4 .*could hold 111111 values"):
        _tuple_dag(8, 10).build()  # 10**8 values: walked when handed back, had it loaded


def test_a_loop_that_nests_a_tuple_per_iteration_is_refused():
    # %1 = tuple(%1) in a loop: the merge keeps the depth bound, which grows until refused.
    asm = Assembler()
    f = asm.function("main", [X])
    r = f.move(f.params[0])
    top = f.label("top")
    f.place(top)
    f.tuple([r], dst=r)
    f.jump(top)
    with pytest.raises(
        FormatError, match=f"tuple %1, \\(%1\\)\\): tuples nest deeper than {MAX_TUPLE_DEPTH}"
    ):
        asm.build()


def test_a_merge_of_unlike_tuples_keeps_their_bounds():
    # Two paths give %t tuples of different lengths (fields unknown after the merge); nesting
    # it further must still count the deeper path's levels.
    asm = Assembler()
    f = asm.function("main", [X, ("k", I8)])
    x, k = f.params
    t = f.reg()
    deep = x
    for _ in range(MAX_TUPLE_DEPTH - 1):
        deep = f.tuple([deep])
    other, join = f.label("other"), f.label("join")
    f.jump_if_not(k, other)
    f.tuple([deep], dst=t)  # MAX_TUPLE_DEPTH levels
    f.jump(join)
    f.place(other)
    f.tuple([x, x], dst=t)
    f.place(join)
    f.ret(f.tuple([t]))
    with pytest.raises(FormatError, match=f"tuples nest deeper than {MAX_TUPLE_DEPTH} levels"):
        asm.build()


def _branches(registers: int, blocks: int) -> Assembler:
    """``registers`` ints live across ``blocks`` conditional jumps: blocks x registers merges."""
    asm = Assembler()
    f = asm.function("main", [X])
    regs = [f.load_int(1) for _ in range(registers)]
    for _ in range(blocks):
        target = f.label()
        f.jump_if_not(regs[0], target)
        f.place(target)
    f.ret(f.params[0])
    return asm


def test_the_analysis_work_is_bounded_for_the_whole_executable(monkeypatch):
    exe = _branches(64, 64).build()
    data = exe.to_bytes()
    # The same file, under a smaller bound (the default bound takes a second or so to reach).
    monkeypatch.setattr(register_kinds, "MAX_WORK", 10_000)
    with pytest.raises(FormatError, match=r"too large to validate .*more than 10000 units"):
        Executable.from_bytes(data)
    monkeypatch.setattr(register_kinds, "MAX_WORK", 100_000)
    Executable.from_bytes(data)


def test_all_functions_together_are_bounded_in_code_and_registers(monkeypatch):
    asm = Assembler()
    for name in ("main", "g"):
        f = asm.function(name, [X])
        f.ret(f.move(f.move(f.params[0])))
    data = asm.build().to_bytes()  # 3 instructions and 3 registers each
    monkeypatch.setattr(validate, "MAX_CODE", 5)
    with pytest.raises(FormatError, match="the functions hold more than 5 instructions"):
        Executable.from_bytes(data)
    monkeypatch.setattr(validate, "MAX_CODE", 6)
    monkeypatch.setattr(validate, "MAX_REGISTERS", 5)
    with pytest.raises(FormatError, match="more than 5 registers together"):
        Executable.from_bytes(data)


def _recursion(registers: int, tail: bool) -> Executable:
    """main(k) = main(k) forever, with a frame of ``registers`` registers."""
    asm = Assembler()
    f = asm.function("main", [("k", I8)], I8)
    if tail:
        f.tail_call("main", [f.params[0]])
    else:
        f.ret(f.call("main", [f.params[0]]))
    f.num_registers = registers
    return asm.build()


def test_the_frames_of_a_run_are_bounded_in_registers_not_only_in_depth():
    big = 600_000  # 7 frames exceed the bound, far below the call-depth bound
    vm = VirtualMachine(_recursion(big, tail=False), max_call_depth=10_000)
    depth = MAX_STACK_REGISTERS // big - 1  # frames below the one that would not fit
    with pytest.raises(
        VMError,
        match=f"call depth {depth} would make the frames hold more than .*\n  at main@0: call",
    ):
        vm.run(3)
    # A tail call replaces its frame: it runs until max_steps, in constant stack memory.
    vm = VirtualMachine(_recursion(big, tail=True), max_steps=50)
    with pytest.raises(VMError, match="exceeded max_steps=50"):
        vm.run(3)
    # Small frames reach the depth bound first, as before.
    vm = VirtualMachine(_recursion(3, tail=False), max_call_depth=100)
    with pytest.raises(VMError, match="call depth exceeds 100 frames"):
        vm.run(3)


def test_a_failing_callee_is_named_before_its_callers():
    # The callee reads a register nothing writes; its caller's call is fine.
    asm = Assembler()
    f = asm.function("main", [X])
    f.ret(f.call("g", [f.params[0]]))
    g = asm.function("g", [X])
    g.ret(g.reg())
    with pytest.raises(FormatError, match=r"function 'g', instruction 0 .*read before any"):
        asm.build()
