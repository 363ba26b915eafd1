"""End-to-end with the memory sanitizer: every corpus program, compiled once, run at each binding
of its symbols on ``VirtualMachine(exe, check_memory=True)``.

With the sanitizer on, every storage is poisoned when it is handed out and when it is freed, and
an instruction that uses a killed register or a view of freed (or reused) memory raises
``DeadTensorError``. A correct program notices nothing: its result must match the numpy
reference, be identical to the unchecked VM's, and leave no storage live.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from harness import (
    Case,
    all_cases,
    assert_matches,
    assert_same,
    binding_id,
    case_binding_params,
    make_inputs,
    result_type,
    run_reference,
)

import dynshape
import vm as vm_module

CASES = all_cases()
RUNS = case_binding_params()

_MACHINES: dict[str, tuple[Any, Any]] = {}


def _compile_api() -> Any:
    return dynshape.compile  # no fallback: a missing compile fails every case, never skips


def _machines(case: Case) -> tuple[Any, Any]:
    """A checked and an unchecked VM of the case, compiled once (a failure is cached too)."""
    if case.name not in _MACHINES:
        try:
            exe = _compile_api()(case.source)
            _MACHINES[case.name] = (
                vm_module.VirtualMachine(exe, check_memory=True),
                vm_module.VirtualMachine(exe),
            )
        except Exception as e:  # re-raised by every run of the case
            _MACHINES[case.name] = (e, None)
    return _MACHINES[case.name]


@pytest.mark.parametrize(
    ("case", "binding"),
    RUNS,
    ids=[f"{c.name}[{binding_id(b)}]" for c, b in RUNS],
)
def test_e2e_sanitized(case: Case, binding: dict[str, int]) -> None:
    """Checked run = numpy reference = unchecked run; nothing left live after the call."""
    checked, plain = _machines(case)
    if isinstance(checked, Exception):
        raise checked
    args = make_inputs(case, binding)
    expected = run_reference(case, args)
    out = checked.run(*args)
    assert_matches(out, expected, result_type(case), case.rtol, case.atol)
    assert_same(out, plain.run(*args), where="checked vs unchecked result")
    assert checked.allocator.stats.live_bytes == 0


def _insert_after(exe: Any, fidx: int, pc: int, ins: Any) -> Any:
    """``exe`` with ``ins`` inserted after instruction ``pc`` of function ``fidx`` (jump targets
    past ``pc`` shifted, so a jump to the next instruction skips the inserted one)."""
    f = exe.functions[fidx]
    kinds = vm_module.isa.SIGNATURES
    code = []
    for old in (*f.code[: pc + 1], ins, *f.code[pc + 1 :]):
        operands = tuple(
            v + 1 if kind == vm_module.isa.Kind.TARGET and v > pc else v
            for kind, v in zip(kinds[old.op], old.operands, strict=True)
        )
        code.append(vm_module.Instruction(old.op, operands))
    functions = list(exe.functions)
    functions[fidx] = dataclasses.replace(f, code=tuple(code))
    return dataclasses.replace(exe, functions=functions)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_an_early_kill_is_always_caught(case: Case) -> None:
    """Mutants: for every ``alloc_tensor`` of the compiled program, its storage is killed right
    after it. Whenever that point is reached (a second mutant puts a failing ``check`` there),
    the checked VM must stop with DeadTensorError - never finish or fail otherwise."""
    checked, _ = _machines(case)
    if isinstance(checked, Exception):
        raise checked
    exe = checked.exe
    binding = case.bindings[-1]
    args = make_inputs(case, binding)
    Op, Instruction = vm_module.Op, vm_module.Instruction
    sites = [
        (fidx, pc, ins.operands[1])
        for fidx, f in enumerate(exe.functions)
        for pc, ins in enumerate(f.code)
        if ins.op == Op.ALLOC_TENSOR
    ]
    for fidx, pc, storage in sites:
        reached = _insert_after(exe, fidx, pc, Instruction(Op.CHECK, (0, "==", 1, "REACHED")))
        try:
            vm_module.VirtualMachine(reached).run(*args)
            continue  # that point is not executed at this binding
        except vm_module.RunTimeShapeError as e:
            if "REACHED" not in str(e):
                raise
        mutant = _insert_after(exe, fidx, pc, Instruction(Op.KILL, ((storage,),)))
        try:
            machine = vm_module.VirtualMachine(mutant, check_memory=True)
        except vm_module.FormatError as e:  # the storage register itself is read again later
            assert "killed it, on some path" in str(e)
            continue
        with pytest.raises(vm_module.errors.DeadTensorError):
            machine.run(*args)
