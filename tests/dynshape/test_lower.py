"""The lowering's shape computation: one shape program per chain where the symbols allow."""

from __future__ import annotations

import textwrap

import numpy as np
import pytest
import sympy

import dynshape
import ir
from dynshape.lower.lower import _hoistable
from vm import NaiveAllocator, Op

SEED = """
def @main(%x: Tensor[(n,), float32], %y: Tensor[(n,), float32]) -> Tensor[(n,), float32] {
  subtract(add(%x, %x), %y)
}
"""

MLP = """
def @main(%x: Tensor[(n, 16), float32], %w1: Tensor[(64, 16), float32], %w2: Tensor[(8, 64), float32]) -> Tensor[(n, 8), float32] {
  nn.dense(nn.relu(nn.dense(%x, %w1)), %w2)
}
"""


def _programs(exe: dynshape.Executable) -> int:
    return sum(ins.op == Op.SHAPE_PROGRAM for ins in exe.functions[0].code)


@pytest.mark.parametrize("source", [SEED, MLP], ids=["seed", "mlp"])
def test_every_size_offset_and_shape_of_a_chain_comes_from_one_program(source: str) -> None:
    exe = dynshape.compile(textwrap.dedent(source))
    assert _programs(exe) == 1, exe.bytecode
    vm = dynshape.VirtualMachine(exe)
    for n in (0, 1, 7):
        args = [np.ones(_shape(p.type.shape, n), np.float32) for p in exe.functions[0].params]
        assert vm.run(*args).shape[0] == n


def _shape(dims: tuple[object, ...], n: int) -> tuple[int, ...]:
    return tuple(n if isinstance(d, str) else int(d) for d in dims)  # type: ignore[call-overload]


def test_a_dim_that_divides_by_a_symbol_is_not_hoisted() -> None:
    # Hoisted dims run before the chain's run-time checks; one that divides by a symbol could
    # fail there with a division by zero instead of the check's own message.
    n, k = ir.sym("n"), ir.sym("k")
    bound = {n, k}
    assert _hoistable(4 * n, bound) and _hoistable(64 * sympy.ceiling(n / 64), bound)
    assert not _hoistable(sympy.floor(n / k), bound)
    assert not _hoistable(sympy.Mod(n, k), bound)
    assert not _hoistable(4 * n, {k})  # n is bound later
    assert not _hoistable(16, bound)


def test_a_while_loop_runs_in_one_frame_at_any_trip_count() -> None:
    """The builder's loop is a tail-recursive global: the lowering emits ``tail_call``, so the
    trip count is not bounded by the VM's call depth and each step's buffers are freed."""
    x = dynshape.tensor("x", (4,), "float32")
    k = dynshape.tensor("k", (), "int32")
    _, acc = dynshape.while_loop(
        lambda i, acc: i < k, lambda i, acc: (i + 1, dynshape.tanh(acc) + 1.0), (0, x)
    )
    exe = dynshape.compile(dynshape.build(acc, inputs=[x, k]))
    loop = next(f for f in exe.functions if f.name != "main")
    assert [ins.op for ins in loop.code].count(Op.TAIL_CALL) == 1
    assert Op.CALL not in [ins.op for ins in loop.code]
    naive = NaiveAllocator()
    vm = dynshape.VirtualMachine(exe, allocator=naive, max_call_depth=50)
    want = np.zeros(4, np.float32)
    for _ in range(20_000):
        want = np.tanh(want) + np.float32(1)
    np.testing.assert_allclose(vm.run(np.zeros(4, np.float32), 20_000), want, rtol=1e-6)
    assert naive.stats.peak_live_bytes < 1024  # a few steps' buffers, not 20,000
