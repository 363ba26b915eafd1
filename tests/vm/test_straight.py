"""Straight-line functions (``vm/straight.py``): a function without control flow runs as one
generated step with the results, errors and profiles of the per-instruction loop."""

from __future__ import annotations

import numpy as np
import pytest

import dynshape
from vm import KernelError, RunTimeShapeError, VirtualMachine
from vm.straight import straight_line

SEED = """
def @main(%x: Tensor[(n,), float32], %y: Tensor[(n,), float32]) -> Tensor[(n,), float32] {
  subtract(add(%x, %x), %y)
}
"""


def _vm(text: str, **options: object) -> VirtualMachine:
    return VirtualMachine(dynshape.compile(text), **options)  # type: ignore[arg-type]


def test_a_function_without_control_flow_runs_as_one_step() -> None:
    vm = _vm(SEED)
    code = vm._code[0]
    first = vm.exe.functions[0].code
    assert code[0].__name__ == "run" and len(code) == len(first)
    x, y = np.arange(5, dtype=np.float32), np.ones(5, np.float32)
    np.testing.assert_array_equal(vm.run(x, y), 2 * x - 1)
    # the same executable in the per-instruction loop (a profiler wraps each instruction)
    profiled = VirtualMachine(vm.exe, profile=True)
    np.testing.assert_array_equal(profiled.run(x, y), vm.run(x, y))
    report = profiled.profile_report()
    assert "alloc_storage" in report and "invoke" in report and "check_dim" in report


def test_a_function_with_control_flow_keeps_the_loop() -> None:
    exe = dynshape.compile(
        """
def @main(%x: Tensor[(n,), float32], %c: bool) -> Tensor[(n,), float32] {
  if (%c) { add(%x, %x) } else { multiply(%x, %x) }
}
"""
    )
    vm = VirtualMachine(exe)
    main = next(f for f in exe.functions if f.name == "main")
    steps = vm._code[exe.functions.index(main)]
    assert straight_line(main.code, steps, vm._ctx) is None
    assert steps[0].__name__ != "run"
    x = np.arange(3, dtype=np.float32)
    np.testing.assert_array_equal(vm.run(x, np.array(True)), x + x)
    np.testing.assert_array_equal(vm.run(x, np.array(False)), x * x)


def test_a_failed_check_names_its_instruction() -> None:
    vm = _vm(SEED)
    x = np.arange(5, dtype=np.float32)
    with pytest.raises(RunTimeShapeError) as info:
        vm.run(x, x[:3])
    text = str(info.value)
    assert "y.shape[0] = 3 but n = 5 was bound by x.shape[0]" in text
    assert "main@2: check_dim" in text


def test_a_failed_kernel_names_its_invoke_instruction() -> None:
    vm = _vm(
        """
def @main(%x: Tensor[(n,), float32], %i: Tensor[(k,), int64]) -> Tensor[(k,), float32] {
  multiply(take(%x, %i, axis=0), 2f)
}
"""
    )
    listing = vm.exe.functions[0].code
    invoke = next(pc for pc, ins in enumerate(listing) if ins.op.name == "INVOKE")
    with pytest.raises(KernelError) as info:
        vm.run(np.arange(3, dtype=np.float32), np.array([0, 7]))
    assert f"main@{invoke}: invoke" in str(info.value)


def test_results_are_the_loops_on_every_corpus_program() -> None:
    """The corpus programs that compile to straight-line functions give what the loop gives
    (the loop: a VM whose steps a wrapper takes one per instruction)."""
    from pathlib import Path

    from vm.backend import BackendWrapper

    corpus = sorted((Path(__file__).parents[1] / "ir" / "corpus").glob("*.txt"))
    compared = 0
    for path in corpus:
        text = path.read_text()
        if "@main" not in text or "%x: Tensor[(n,), float32]" not in text:
            continue
        try:
            exe = dynshape.compile(text)
        except dynshape.DynShapeError:
            continue
        main = exe.functions[0]
        if len(main.params) != 1:
            continue
        x = np.linspace(-2, 2, 6, dtype=np.float32)
        try:
            want = VirtualMachine(exe, backend=BackendWrapper()).run(x)
        except dynshape.DynShapeError:
            continue
        got = VirtualMachine(exe).run(x)
        for g, w in zip(_leaves(got), _leaves(want), strict=True):
            np.testing.assert_array_equal(np.asarray(g), np.asarray(w))
        compared += 1
    assert compared >= 3


def _leaves(result: object) -> list[object]:
    if isinstance(result, tuple):
        return [leaf for item in result for leaf in _leaves(item)]
    return [result]
