"""Attribute values computed at run time (``vm/attr_values.py``; issue 30, item 1): a kernel
entry naming the attribute entries it fills, the extra input of its invoke, saving and
loading them, the loader's errors for a corrupted file, every backend layer, and the cache of
kernels by values."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from loader_fuzz import assemble, split_file

import dynshape
from vm import Assembler, Executable, FormatError, OpKernel, VirtualMachine
from vm.attr_values import CACHED_KERNELS, bind_runtime_attrs
from vm.errors import KernelError, RunTimeShapeError

SOURCE = """
def @main(%x: Tensor[(n, m), float32]) {
  (strided_slice(%x, begin=[(n // 2)], end=[n]),
   add(strided_slice(%x, begin=[0, 1], end=[n, m], strides=[1, m]), 1f),
   strided_slice(%x, begin=[m], end=[-4611686018427387904], strides=[-1]))
}
"""


def _expected(x: np.ndarray) -> tuple[np.ndarray, ...]:
    n, m = x.shape
    return x[n // 2 : n], x[0:n, 1:m:m] + 1, x[m::-1]


def _check(machine: VirtualMachine, shapes: list[tuple[int, int]]) -> None:
    rng = np.random.default_rng(0)
    for shape in shapes:
        x = rng.standard_normal(shape).astype(np.float32)
        got = machine.run(x)
        for g, e in zip(got, _expected(x), strict=True):
            np.testing.assert_array_equal(g, e, err_msg=str(shape))


SHAPES = [(5, 3), (0, 2), (1, 1), (8, 9), (4, 1)]


def test_the_entries_are_listed_and_survive_a_save_and_load(tmp_path: Any) -> None:
    exe = dynshape.compile(SOURCE)
    listing = exe.bytecode
    assert (
        "kernel strided_slice(begin=(None,), end=(None,), strides=None)  # begin[0], end[0] "
        "from input 1" in listing
    )
    assert "# end[0], end[1], strides[1] from in1" in listing  # the fused step's
    entries = [k for k in exe.kernels if isinstance(k, OpKernel) and k.runtime_attrs]
    assert [k.runtime_attrs for k in entries] == [(("begin", 0), ("end", 0)), (("begin", 0),)]
    path = tmp_path / "slices.dsvm"
    exe.save(path)
    again = Executable.load(path)
    assert again.bytecode == listing
    assert again.to_bytes() == exe.to_bytes()
    _check(VirtualMachine(again), SHAPES)


def test_an_entry_without_values_is_written_as_before() -> None:
    exe = dynshape.compile(
        "def @main(%x: Tensor[(n,), float32]) { strided_slice(%x, begin=[1], end=[n - n + 9]) }"
    )
    meta = json.loads(split_file(exe.to_bytes())[0])
    assert all("runtime_attrs" not in k for k in meta["kernels"])
    (invoke,) = [i for i in exe.functions[0].code if i.op.name == "INVOKE"]
    assert len(invoke.operands[1]) == 1  # no extra input: the int-only path is unchanged


@pytest.mark.parametrize("backend", ["closures", "sanitizer", "profiler", "both"])
def test_every_backend_layer_runs_them(backend: str) -> None:
    exe = dynshape.compile(SOURCE)
    options = {
        "closures": {},
        "sanitizer": {"check_memory": True},
        "profiler": {"profile": True},
        "both": {"check_memory": True, "profile": True},
    }[backend]
    _check(VirtualMachine(exe, **options), SHAPES)


def test_a_zero_dim_step_is_the_check_s_error_not_a_division_by_zero() -> None:
    machine = VirtualMachine(dynshape.compile(SOURCE))
    with pytest.raises(RunTimeShapeError, match=r"expected strides\[1\] = m to be >= 1, got 0 < 1"):
        machine.run(np.zeros((4, 0), np.float32))


def _edited(data: bytes, edit: Callable[[Any], None]) -> bytes:
    meta, blob = split_file(data)
    parsed = json.loads(meta)
    edit(parsed)
    return assemble(json.dumps(parsed).encode(), blob)


def _invoke(meta: Any) -> list[Any]:
    """The first invoke of ``main`` (opcode 4 in the file)."""
    return next(ins for ins in meta["functions"][0]["code"] if ins[0] == 4)


def _load_error(edit: Callable[[Any], None]) -> str:
    exe = dynshape.compile(
        "def @main(%x: Tensor[(n,), float32]) { strided_slice(%x, begin=[(n // 2)], end=[n]) }"
    )
    with pytest.raises(FormatError) as info:
        Executable.from_bytes(_edited(exe.to_bytes(), edit))
    return str(info.value)


def test_a_tensor_in_place_of_the_values_is_refused_by_the_loader() -> None:
    def edit(meta: Any) -> None:
        _invoke(meta)[2][1] = {"r": 0}  # %x where the tuple of values goes

    message = _load_error(edit)
    assert "input 1 (attribute values) %0 holds tensor, expected shape" in message


def test_a_missing_values_input_is_refused_by_the_loader() -> None:
    def edit(meta: Any) -> None:
        del _invoke(meta)[2][1]

    message = _load_error(edit)
    assert "passes 1 inputs and 1 outputs to kernel 'strided_slice', which takes 2 and 1" in message


def test_an_entry_filling_an_entry_that_has_a_value_is_refused() -> None:
    def edit(meta: Any) -> None:
        meta["kernels"][0]["attrs"]["begin"] = [3]

    message = _load_error(edit)
    assert "kernel 0 (strided_slice): runtime_attrs names begin[0], which is not a dim entry" in (
        message
    )


def test_an_entry_with_values_but_no_input_for_them_is_refused() -> None:
    def edit(meta: Any) -> None:
        meta["kernels"][0]["num_inputs"] = 0
        _invoke(meta)[2][:] = []

    message = _load_error(edit)
    assert "fills attributes at run time but passes no input holding their values" in message


def test_a_fused_step_reading_its_values_as_a_tensor_is_refused() -> None:
    exe = dynshape.compile(SOURCE)
    meta = json.loads(split_file(exe.to_bytes())[0])
    (ki,) = [i for i, k in enumerate(meta["kernels"]) if k["kind"] == "fused"]

    def edit(meta: Any) -> None:
        steps = meta["kernels"][ki]["steps"]
        steps[1]["inputs"][0] = ["in", 1]  # add() reading the values as its tensor

    with pytest.raises(FormatError, match="reads input 1, which holds attribute values"):
        Executable.from_bytes(_edited(exe.to_bytes(), edit))


def _assembled(values: list[int]) -> Executable:
    """``strided_slice(x, begin=[?], end=[?])`` with the values a shape program writes."""
    from vm import ShapeProgramBuilder

    asm = Assembler()
    k = asm.kernel(
        "strided_slice",
        {"begin": (None,), "end": (None,), "strides": None},
        num_inputs=2,
        runtime_attrs=[("begin", 0), ("end", 0)],
    )
    b = ShapeProgramBuilder([])
    p = asm.shape_program(b.build([list(values)]))
    f = asm.function("main", [("x", _spec())], ret=None)
    (vals,) = f.shape_program(p, [])
    st = f.alloc_storage(8, 64, "float32")
    out = f.alloc_tensor(st, 0, [2], "float32")
    f.invoke(k, [f.params[0], vals], [out])
    f.ret(out)
    return asm.build()


def _spec() -> Any:
    from vm.assembler import tensor

    return tensor("float32", (6,))


def test_an_assembled_entry_runs_and_a_wrong_count_of_values_is_a_kernel_error() -> None:
    x = np.arange(6, dtype=np.float32)
    np.testing.assert_array_equal(VirtualMachine(_assembled([1, 3])).run(x), x[1:3])
    with pytest.raises(
        KernelError, match=r"expected a tuple of 2 ints \(for begin\[0\], end\[0\]\)"
    ):
        VirtualMachine(_assembled([1, 3, 5])).run(x)


def test_kernels_are_built_once_per_distinct_values() -> None:
    calls: list[dict[str, Any]] = []

    def factory(attrs: Any) -> Any:
        calls.append(dict(attrs))
        begin = attrs["begin"][0]
        return lambda x, out: np.copyto(out, x[begin : begin + out.shape[0]])

    run = bind_runtime_attrs(factory, "t.slice", {"begin": (None,), "n": 2}, (("begin", 0),), 2)
    x, out = np.arange(10.0), np.empty(2)
    for _ in range(5):
        run(x, (3,), out)
    assert len(calls) == 1 and calls[0] == {"begin": (3,), "n": 2}
    np.testing.assert_array_equal(out, [3.0, 4.0])
    for b in range(CACHED_KERNELS + 4):
        run(x, (b % 8,), out)
        np.testing.assert_array_equal(out, [b % 8, b % 8 + 1])
    assert len(calls) == 1 + 7  # 0..7, with 3 already built
    with pytest.raises(KernelError, match="attribute values passed are"):
        run(x, [3], out)  # a list: not what a shape program writes
