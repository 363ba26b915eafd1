"""Straight-line functions (``vm/straight.py``): a function without control flow runs as one
generated step with the results, errors and profiles of the per-instruction loop."""

from __future__ import annotations

import numpy as np
import pytest

import dynshape
from vm import KernelError, RunTimeShapeError, VirtualMachine
from vm.straight import generated_source, straight_line

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


IF_ELSE = """
def @main(%x: Tensor[(n,), float32], %c: bool) -> Tensor[(n,), float32] {
  if (%c) { add(%x, %x) } else { multiply(%x, %x) }
}
"""


def test_an_if_else_runs_as_one_step_with_nested_blocks() -> None:
    vm = _vm(IF_ELSE)
    step = vm._code[0][0]
    assert step.__name__ == "run"
    source = generated_source(step)
    assert source is not None
    lines = source.splitlines()
    # The compiler ends each branch in its own ret: ``if`` over the first, the second after.
    branch = next(i for i, line in enumerate(lines) if line.startswith("    if r["))
    rets = [i for i, line in enumerate(lines) if line.strip() == "return -2"]
    assert len(rets) == 2 and lines[rets[0]] == "        return -2" and rets[1] == len(lines) - 1
    assert all(line.startswith("        ") for line in lines[branch + 1 : rets[0] + 1])
    x = np.arange(3, dtype=np.float32)
    np.testing.assert_array_equal(vm.run(x, np.array(True)), x + x)
    np.testing.assert_array_equal(vm.run(x, np.array(False)), x * x)


def _diamond(jump_to_join: bool = True):  # type: ignore[no-untyped-def]
    """main(x) = copy(x) if c else negative(x), c = 1, as a then-branch ending in a jump to
    the join and an else-branch (``jump_to_join=False``: the jump skips into the else)."""
    from vm import Assembler, tensor

    asm = Assembler()
    copy, neg = asm.kernel("copy"), asm.kernel("negative")
    f = asm.function("main", [("x", tensor("float32", (4,))), ("c", tensor("int64", ()))])
    x, c = f.params
    other, join = f.label(), f.label()
    out = f.empty((4,), "float32")
    f.jump_if_not(c, other)
    if not jump_to_join:
        f.jump(other)
    f.invoke(copy, [x], [out])
    f.jump(join)
    f.place(other)
    f.invoke(neg, [x], [out])
    f.place(join)
    f.ret(out)
    return asm.build()


def test_a_then_branch_ending_in_a_jump_and_its_else_nest() -> None:
    exe = _diamond()
    vm = VirtualMachine(exe)
    source = generated_source(vm._code[0][0])
    assert source is not None
    body = [line.strip() for line in source.splitlines()[1:]]
    assert body[body.index("else:") - 1] == "pass"  # the jump to the join
    x = np.arange(4, dtype=np.float32)
    np.testing.assert_array_equal(vm.run(x, 1), x)
    np.testing.assert_array_equal(vm.run(x, 0), -x)


def test_a_loop_keeps_the_interpreter_loop() -> None:
    from pathlib import Path

    text = (Path(__file__).parents[1] / "ir" / "corpus" / "40_counter_loop.txt").read_text()
    exe = dynshape.compile(text)  # a tail-recursive @loop called by @main
    vm = VirtualMachine(exe)
    for i, f in enumerate(exe.functions):
        assert straight_line(f.code, vm._code[i], vm._ctx) is None, f.name
        assert generated_source(vm._code[i][0]) is None
    x = np.arange(3, dtype=np.float32)
    np.testing.assert_array_equal(vm.run(x), 1024 * x)


def test_a_jump_into_another_branch_keeps_the_loop() -> None:
    exe = _diamond(jump_to_join=False)
    vm = VirtualMachine(exe)
    assert straight_line(exe.functions[0].code, vm._code[0], vm._ctx) is None
    assert generated_source(vm._code[0][0]) is None
    x = np.arange(4, dtype=np.float32)
    np.testing.assert_array_equal(vm.run(x, 1), -x)  # the jump skips the copy


def test_an_error_in_a_branch_names_its_instruction() -> None:
    vm = _vm(
        """
def @main(%x: Tensor[(n,), float32], %i: Tensor[(k,), int64], %c: bool) -> Tensor[(k,), float32] {
  if (%c) { multiply(take(%x, %i, axis=0), 2f) } else { take(%x, %i, axis=0) }
}
"""
    )
    assert vm._code[0][0].__name__ == "run"
    listing = vm.exe.functions[0].code
    invokes = [pc for pc, ins in enumerate(listing) if ins.op.name == "INVOKE"]
    x, bad = np.arange(3, dtype=np.float32), np.array([0, 7])
    for flag, pc in ((True, invokes[0]), (False, invokes[-1])):
        with pytest.raises(KernelError) as info:
            vm.run(x, bad, np.array(flag))
        assert f"main@{pc}: invoke" in str(info.value)


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


CONV = """
def @main(%x: Tensor[(1, 1, h, w), float32], %k: Tensor[(1, 1, 3, 3), float32]) {
  nn.conv2d(%x, %k)
}
"""


def test_a_value_check_is_written_inline_and_fails_as_its_instruction() -> None:
    vm = _vm(CONV)
    listing = vm.exe.functions[0].code
    checks = [pc for pc, ins in enumerate(listing) if ins.op.name == "CHECK_VALUES"]
    assert checks  # the padded size against the window, per axis
    source = generated_source(vm._code[0][0])
    assert source is not None
    for pc in checks:  # the comparison in the text, its closure only in the else
        assert f"else: s{pc}(r)" in source
        assert f"\n    s{pc}(r)" not in source
    x, k = np.ones((1, 1, 4, 5), np.float32), np.ones((1, 1, 3, 3), np.float32)
    np.testing.assert_array_equal(vm.run(x, k), np.full((1, 1, 2, 3), 9, np.float32))
    with pytest.raises(RunTimeShapeError) as info:
        vm.run(np.ones((1, 1, 2, 5), np.float32), k)
    text = str(info.value)
    assert "padded height >= the dilated window height, got 2 < 3" in text
    assert f"main@{checks[0]}: check_values" in text


def test_a_value_check_of_an_immediate_that_is_no_int_calls_its_closure() -> None:
    from vm.isa import Instruction, Op, Reg
    from vm.straight_lines import check_values

    def step(r: list[object]) -> int:
        return 0

    for a, cmp, b in ((Reg(1), ">=", 2.5), (True, "<", Reg(2)), (Reg(1), "=>", Reg(2))):
        ns: dict[str, object] = {}
        ins = Instruction(Op.CHECK_VALUES, (a, cmp, b, "message", ()))
        assert check_values(7, ins, step, None, ns) == ("s7(r)",)  # type: ignore[arg-type]
        assert ns == {"s7": step}
    ns = {}
    ins = Instruction(Op.CHECK_VALUES, (Reg(1), "!=", -3, "message", ()))
    lines = check_values(7, ins, step, None, ns)  # type: ignore[arg-type]
    assert lines == ("if r[1] != -3: pass", "else: s7(r)")
