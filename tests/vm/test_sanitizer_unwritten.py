"""The memory sanitizer's check that kernels write all of their outputs (``vm/unwritten.py``).

With ``check_memory=True`` every ``invoke`` runs with its outputs poisoned; an element still
holding the poison afterwards (confirmed by a second run with another poison) is an
``UnwrittenOutputError`` naming the kernel, the output and the instruction. Outputs whose
legitimate values are the poison, and in-place calls, must not be reported.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest

from vm import Assembler, UnwrittenOutputError, VirtualMachine, register_kernel, tensor
from vm.kernels import unregister_kernel
from vm.unwritten import FIRST_POISON, SECOND_POISON, unwritten_elements


@pytest.fixture
def kernel() -> Iterator[Callable[[str, Callable[..., Any]], None]]:
    """Registers attribute-free test kernels, and removes them after the test."""
    names: list[str] = []

    def register(name: str, fn: Callable[..., Any]) -> None:
        register_kernel(name)(lambda attrs: fn)
        names.append(name)

    yield register
    for name in names:
        unregister_kernel(name)


def _program(op: str, dtype: str, n: int = 4, in_place: bool = False) -> Any:
    """``main(x: dtype[n]) -> dtype[n]``: one invoke of ``op`` into a fresh tensor (or over x's
    copy, in place)."""
    asm = Assembler()
    k = asm.kernel(op)
    copy = asm.kernel("copy")
    ty = tensor(dtype, (n,))
    f = asm.function("main", [("x", ty)], ty)
    (x,) = f.params
    nbytes = n * np.dtype(dtype).itemsize
    t = f.alloc_tensor(f.alloc_storage(nbytes, dtype_hint=dtype), 0, (n,), dtype)
    if in_place:
        f.invoke(copy, [x], [t])
        f.invoke(k, [t], [t])
    else:
        f.invoke(k, [x], [t])
    f.ret(t)
    return asm.build()


def test_a_kernel_that_skips_elements_is_named(kernel):
    def first_half(x, out):
        out[:2] = x[:2]

    kernel("test_unwritten.first_half", first_half)
    exe = _program("test_unwritten.first_half", "float32")
    x = np.arange(4, dtype=np.float32)
    # Unchecked, the stale half goes out as if computed: what the check is for.
    VirtualMachine(exe).run(x)
    with pytest.raises(UnwrittenOutputError) as info:
        VirtualMachine(exe, check_memory=True).run(x)
    e = info.value
    assert e.kernel == "test_unwritten.first_half" and e.output == 0
    assert str(e) == (
        "kernel test_unwritten.first_half did not write 2 of 4 element(s) (the first at index "
        "(2,)) of its output 0 (register %2, float32 (4,)): the result would hold stale memory\n"
        "  at main@2: invoke k0<test_unwritten.first_half>, (%0), (%2)"
    )


def test_an_int_output_whose_values_are_the_poison_is_not_reported(kernel):
    # int8 -91 is the byte 0xA5, the first poison: the second run (0x5A) shows it was written.
    def fill(x, out):
        out.fill(np.int8(-91))

    kernel("test_unwritten.fill", fill)
    exe = _program("test_unwritten.fill", "int8")
    got = VirtualMachine(exe, check_memory=True).run(np.zeros(4, np.int8))
    np.testing.assert_array_equal(got, np.full(4, -91, np.int8))


def test_an_output_of_nans_is_not_reported(kernel):
    def nans(x, out):
        out.fill(np.nan)
        out.view(np.uint32)[1] = 0xFFFFFFFF  # the all-ones NaN: the float storages' poison

    kernel("test_unwritten.nans", nans)
    exe = _program("test_unwritten.nans", "float32")
    got = VirtualMachine(exe, check_memory=True).run(np.zeros(4, np.float32))
    assert np.isnan(got).all()


def test_an_in_place_call_is_not_poisoned(kernel):
    # Poisoning an output that is also the input would destroy the input: such calls run as
    # they are (and this one, which writes nothing, is not reported).
    kernel("test_unwritten.nothing", lambda x, out: None)
    exe = _program("test_unwritten.nothing", "float32", in_place=True)
    x = np.arange(4, dtype=np.float32)
    np.testing.assert_array_equal(VirtualMachine(exe, check_memory=True).run(x), x)


def test_unwritten_elements_runs_again_only_when_the_first_poison_remains():
    out = np.empty(3, np.int16)
    runs: list[int] = []

    def write_all() -> None:
        runs.append(1)
        out[:] = 7

    assert unwritten_elements(write_all, [out]) == [] and len(runs) == 1

    def write_one() -> None:
        runs.append(2)
        out[0] = 7

    (found,) = unwritten_elements(write_one, [out])
    assert found[0] == 0 and found[1].tolist() == [1, 2] and runs.count(2) == 2
    assert FIRST_POISON != SECOND_POISON
