"""Running as users of numpy and ONNX Runtime expect (issue 17, item 2): arguments by position,
by name or as one mapping, a callable VM, an executable that describes its inputs and outputs,
a short repr, and the messages when the arguments are wrong."""

from __future__ import annotations

import numpy as np
import pytest
from vm_testlib import run_in_threads

from vm import Assembler, Executable, VirtualMachine, VMArgumentError, VMError, tensor
from vm.executable import TensorSpec, TupleSpec


def _seed() -> Executable:
    """main(x, y) = (x + x) - y on (4,) float32, by hand (the VM without the compiler)."""
    asm = Assembler()
    add, sub = asm.kernel("add", num_inputs=2), asm.kernel("subtract", num_inputs=2)
    f = asm.function("main", [("x", tensor("float32", (4,))), ("y", tensor("float32", (4,)))])
    x, y = f.params
    t, out = f.empty((4,), "float32"), f.empty((4,), "float32")
    f.invoke(add, [x, x], [t])
    f.invoke(sub, [t, y], [out])
    f.ret(out)
    return asm.build()


X = np.arange(4, dtype=np.float32)
Y = np.ones(4, np.float32)
WANT = 2 * X - Y


@pytest.mark.parametrize(
    "call",
    [
        lambda vm: vm.run(X, Y),
        lambda vm: vm.run(x=X, y=Y),
        lambda vm: vm.run(y=Y, x=X),
        lambda vm: vm.run(X, y=Y),
        lambda vm: vm.run({"x": X, "y": Y}),
        lambda vm: vm(X, Y),
        lambda vm: vm({"y": Y, "x": X}),
        lambda vm: vm.invoke("main", x=X, y=Y),
    ],
)
def test_every_way_of_passing_arguments_gives_the_same_result(call):
    np.testing.assert_array_equal(call(VirtualMachine(_seed())), WANT)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda vm: vm.run(X, z=Y), "main has no parameter 'z' (its parameters: x, y)"),
        (lambda vm: vm.run(X, yy=Y), "did you mean 'y'?"),
        (lambda vm: vm.run({"x": X}), "main: missing argument(s) 'y'"),
        (lambda vm: vm.run(X, x=X), "parameter 'x' given both by position and by name"),
        (lambda vm: vm.run(X, Y, Y, x=X), "main takes 2 argument(s) (x, y), got 3"),
        (lambda vm: vm.run({1: X}), "main has no parameter 1"),
    ],
)
def test_wrong_arguments_name_the_parameter(call, message):
    with pytest.raises(VMArgumentError) as info:
        call(VirtualMachine(_seed()))
    assert message in str(info.value)


def test_a_mapping_beside_other_arguments_is_an_argument_not_the_feeds():
    with pytest.raises(VMArgumentError, match="expected a numpy array"):
        VirtualMachine(_seed()).run({"x": X}, Y)


def test_the_executable_describes_its_inputs_and_outputs():
    exe = _seed()
    assert [p.name for p in exe.inputs] == ["x", "y"]
    assert all(p.type == TensorSpec("float32", (4,)) for p in exe.inputs)
    assert str(exe.inputs[0]) == "x: Tensor[(4,), float32]"
    vm = VirtualMachine(exe)
    assert vm.inputs == exe.inputs and vm.outputs == exe.outputs
    import dynshape

    compiled = dynshape.compile(
        "def @main(%x: Tensor[(batch, 3), float32]) -> (Tensor[(batch, 3), float32], "
        "Tensor[(batch,), float32]) { (exp(%x), sum(%x, axis=[1])) }"
    )
    assert compiled.inputs[0].type.shape == ("batch", 3)
    assert compiled.outputs == (
        TensorSpec("float32", ("batch", 3)),
        TensorSpec("float32", ("batch",)),
    )
    assert not isinstance(compiled.outputs[0], TupleSpec)


def test_repr_is_one_line_with_the_signature():
    text = repr(_seed())
    assert "\n" not in text and len(text) < 200
    assert text.startswith("<Executable main(x: Tensor[(4,), float32], y: Tensor[(4,), float32])")
    assert "1 function, 2 kernels, 0 constants" in text


def test_a_vm_of_program_text_says_to_compile_it():
    with pytest.raises(VMError, match=r"compile it first, vm = VirtualMachine\(dynshape.compile"):
        VirtualMachine("def @main() { 1 }")  # type: ignore[arg-type]


def test_named_calls_from_threads_give_the_answers_they_give_alone():
    vm = VirtualMachine(_seed())
    rng = np.random.default_rng(0)
    feeds = [
        {
            "x": rng.standard_normal(4).astype(np.float32),
            "y": rng.standard_normal(4).astype(np.float32),
        }
        for _ in range(8)
    ]
    wrong: list[int] = []

    def work(k: int) -> None:
        f = feeds[k]
        for _ in range(300):
            if not np.array_equal(vm.run(f), 2 * f["x"] - f["y"]):
                wrong.append(k)

    run_in_threads(work, 8)
    assert wrong == []


def test_the_declared_ranges_are_described_and_survive_a_file():
    import dynshape

    exe = dynshape.compile(
        "def @main(%x: Tensor[(batch, 3), float32]) -> Tensor[(batch, 3), float32] "
        "where batch in [1, 4096] { exp(%x) }"
    )
    assert exe.ranges == {"batch": (1, 4096)}
    assert exe.signature().endswith("where batch in [1, 4096]")
    assert "where batch in [1, 4096]" in repr(exe)
    again = Executable.from_bytes(exe.to_bytes())
    assert again.ranges == exe.ranges
    assert Executable.from_bytes(_seed().to_bytes()).ranges == {}  # none declared: none kept


@pytest.mark.parametrize(
    "ranges",
    [[("n", -1, 4)], [("n", 5, 4)], [("2n", 1, 4)], [("n", 1)], [("n", True, 4)]],
)
def test_malformed_ranges_are_refused_by_the_validator(ranges):
    from vm import FormatError

    asm = Assembler()
    f = asm.function("main", [("x", tensor("float32", ("n",)))])
    f.ranges = ranges
    f.ret(f.params[0])
    with pytest.raises(FormatError, match=r"function 'main': bad range entry"):
        asm.build()
