"""Derived input dims (``2*n + 1``, ``n + 3``, ``4*n``, ``n - 1``) bind their symbol at entry;
entry and deferred checks name the values of their symbols and where each was bound.

Every run goes through the executable as compiled and as saved and loaded (the VM's loader and
the ``check_values`` instruction are on the path).
"""

from __future__ import annotations

import textwrap
from collections.abc import Iterator

import numpy as np
import pytest

import dynshape
import dynshape.builder as ds
from dynshape.errors import CompileError
from ir.text import module_to_text
from vm import Executable, RunTimeShapeError

F32 = np.float32
RNG = np.random.default_rng(14)


def rand(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(F32)


def vms(source: str) -> Iterator[dynshape.VirtualMachine]:
    """A VM of the compiled program, and one of it saved and loaded."""
    exe = dynshape.compile(textwrap.dedent(source))
    yield dynshape.VirtualMachine(exe)
    yield dynshape.VirtualMachine(Executable.from_bytes(exe.to_bytes()))


def fails(source: str, *args: np.ndarray) -> list[str]:
    """The run-time error message of each VM of ``source`` on ``args``."""
    out = []
    for vm in vms(source):
        with pytest.raises(RunTimeShapeError) as info:
            vm.run(*args)
        out.append(info.value.message)
    return out


# ---- binding ------------------------------------------------------------------------------------

RESHAPE_4N = "def @main(%x: Tensor[(4*n,), float32]) { reshape(%x, newshape=[-1, 4]) }"


@pytest.mark.parametrize("n", [0, 1, 3])
def test_4n_binds_n_and_the_reshape_needs_no_check(n: int) -> None:
    x = rand(4 * n)
    for vm in vms(RESHAPE_4N):
        np.testing.assert_array_equal(vm.run(x), x.reshape(-1, 4))


def test_a_derived_dim_binds_n_in_the_manifest() -> None:
    """The output's size is in terms of n, which only 2*n + 1 binds; no check is needed."""
    source = "def @main(%x: Tensor[(2*n + 1, 3), float32]) { exp(%x) }"
    printed = module_to_text(dynshape.stages(source)["manifest"], show_types=False)
    assert "memory.alloc_storage(size=24*n + 12)" in printed
    assert "memory.check" not in printed


@pytest.mark.parametrize(
    ("dim", "sizes", "bad", "message"),
    [
        ("2*n + 1", [1, 5, 9], 6, "x.shape[0] = 6 is not 2*n + 1 for any integer n >= 0"),
        ("2*n + 1", [1, 5, 9], 0, "x.shape[0] = 0 is not 2*n + 1 for any integer n >= 0"),
        ("n + 3", [3, 4, 10], 2, "x.shape[0] = 2 is not n + 3 for any integer n >= 0"),
        ("4*n", [0, 4, 12], 6, "x.shape[0] = 6 is not 4*n for any integer n >= 0"),
        ("n - 1", [0, 1, 7], None, None),  # every size is n - 1 for n = size + 1
    ],
)
def test_affine_dims_accept_exactly_their_values(
    dim: str, sizes: list[int], bad: int | None, message: str | None
) -> None:
    # y's declared shape (n + 1,) is checked against the n that x's dim binds
    source = f"""
    def @main(%x: Tensor[({dim}, 2), float32], %y: Tensor[(n + 1,), float32]) {{
      (exp(%x), negative(%y))
    }}
    """
    solve = {"2*n + 1": lambda d: (d - 1) // 2, "n + 3": lambda d: d - 3}
    solve |= {"4*n": lambda d: d // 4, "n - 1": lambda d: d + 1}
    for size in sizes:
        x, y = rand(size, 2), rand(solve[dim](size) + 1)
        for vm in vms(source):
            got_x, got_y = vm.run(x, y)
            np.testing.assert_allclose(got_x, np.exp(x), rtol=1e-6)
            np.testing.assert_array_equal(got_y, -y)
    if bad is not None:
        assert fails(source, rand(bad, 2), rand(1)) == [message] * 2


def test_the_plain_dim_binds_and_the_expression_is_checked() -> None:
    source = """
    def @main(%y: Tensor[(3, 2*n + 1), float32], %x: Tensor[(n,), float32]) { (%x, %y) }
    """
    for vm in vms(source):
        assert [a.shape for a in vm.run(rand(3, 5), rand(2))] == [(2,), (3, 5)]
    assert (
        fails(source, rand(3, 6), rand(2))
        == ["y.shape[1] = 6 but 2*n + 1 = 5 (n = 2, bound by x.shape[0])"] * 2
    )


def test_an_offset_may_use_a_symbol_bound_elsewhere() -> None:
    """2*n + m binds n once m is bound; the failure names m's value and origin (dims print
    in the text format's order: m + 2*n)."""
    source = """
    def @main(%x: Tensor[(2*n + m,), float32], %y: Tensor[(m,), float32], %z: Tensor[(n + 1,), float32]) {
      (negative(%x), %z)
    }
    """
    for vm in vms(source):
        got, _ = vm.run(np.arange(7, dtype=F32), rand(3), rand(3))
        np.testing.assert_array_equal(got, -np.arange(7, dtype=F32))
    assert (
        fails(source, rand(6), rand(3), rand(1))
        == ["x.shape[0] = 6 is not m + 2*n for any integer n >= 0 (m = 3, bound by y.shape[0])"] * 2
    )
    assert (
        fails(source, rand(7), rand(3), rand(1))
        == ["z.shape[0] = 1 but n + 1 = 3 (n = 2, bound by x.shape[0] = m + 2*n)"] * 2
    )


def test_a_sum_of_symbols_bound_elsewhere_is_checked_with_their_values() -> None:
    source = """
    def @main(%x: Tensor[(n,), float32], %y: Tensor[(m,), float32], %z: Tensor[(n + m,), float32]) {
      concatenate((%x, %y), axis=0)
    }
    """
    x, y = rand(2), rand(3)
    for vm in vms(source):
        np.testing.assert_array_equal(vm.run(x, y, rand(5)), np.concatenate([x, y]))
    assert (
        fails(source, x, y, rand(4))
        == ["z.shape[0] = 4 but m + n = 5 (m = 3, bound by y.shape[0]; n = 2, bound by x.shape[0])"]
        * 2
    )


def test_a_derived_symbol_is_checked_against_its_range() -> None:
    source = """
    def @main(%x: Tensor[(2*n + 1,), float32]) where n in [1, 3] { negative(%x) }
    """
    for vm in vms(source):
        np.testing.assert_array_equal(vm.run(np.ones(7, F32)), -np.ones(7, F32))
    range_error = "n = {} is outside its declared range [1, 3] (bound by x.shape[0] = 2*n + 1)"
    assert fails(source, rand(9)) == [range_error.format(4)] * 2
    assert fails(source, rand(1)) == [range_error.format(0)] * 2


def test_later_dims_are_checked_against_a_derived_symbol_with_its_origin() -> None:
    source = """
    def @main(%x: Tensor[(2*n + 1,), float32], %y: Tensor[(n + 1, 2), float32]) { (%x, %y) }
    """
    for vm in vms(source):
        assert [a.shape for a in vm.run(rand(5), rand(3, 2))] == [(5,), (3, 2)]
    assert (
        fails(source, rand(5), rand(4, 2))
        == ["y.shape[0] = 4 but n + 1 = 3 (n = 2, bound by x.shape[0] = 2*n + 1)"] * 2
    )


def test_a_tuple_field_with_only_compound_dims_is_checked() -> None:
    source = """
    def @main(%t: (Tensor[(n,), float32], Tensor[(2*n,), float32])) { %t.1 }
    """
    for vm in vms(source):
        assert vm.run((rand(3), rand(6))).shape == (6,)
    assert (
        fails(source, (rand(3), rand(5)))
        == ["t.1.shape[0] = 5 but 2*n = 6 (n = 3, bound by t.0.shape[0])"] * 2
    )


# ---- compile errors -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("params", "message"),
    [
        (
            "%x: Tensor[(n + m,), float32]",
            "@main: x.shape[0] is m + n, but no parameter axis binds m and n, and one dim binds "
            "only one symbol: give all but one of m and n a plain dim, an axis that is exactly "
            "the symbol, in some parameter",
        ),
        (
            "%x: Tensor[(n*n,), float32]",
            "@main: x.shape[0] is n*n, which cannot bind n (only a dim a*n + b with an integer "
            "a >= 1 does): give n a plain dim, an axis that is exactly n, in some parameter",
        ),
        (
            "%y: Tensor[(m,), float32], %x: Tensor[(m*n,), float32]",
            "@main: x.shape[0] is m*n, which cannot bind n (only a dim a*n + b with an integer "
            "a >= 1 does): give n a plain dim, an axis that is exactly n, in some parameter",
        ),
    ],
)
def test_dims_that_bind_nothing_are_refused_naming_the_symbol(params: str, message: str) -> None:
    with pytest.raises(CompileError) as info:
        dynshape.compile(f"def @main({params}) {{ %x }}")
    assert info.value.message == message


# ---- calls of globals ---------------------------------------------------------------------------

CALLS_F = """
def @f(%x: Tensor[(2*n + 1,), float32]) -> Tensor[(n,), float32] {
  strided_slice(%x, begin=[1], end=[-1], strides=[2])
}
def @main(%y: Tensor[(k,), float32]) { @f(%y) }
"""


@pytest.mark.parametrize("k", [1, 3, 7])
def test_a_callee_with_a_derived_dim_binds_it_from_the_argument(k: int) -> None:
    y = rand(k)
    for vm in vms(CALLS_F):
        np.testing.assert_array_equal(vm.run(y), y[1:-1:2])


def test_a_bad_argument_of_a_derived_dim_fails_in_the_caller() -> None:
    assert (
        fails(CALLS_F, rand(4))
        == [
            "expected argument %x of @f: shape[0] == the declared 2*n + 1, got 4 != 3 "
            "(where k == 2*((k - 1) // 2) + 1 must hold; k = 4)"
        ]
        * 2
    )
    assert (
        fails(CALLS_F, rand(0))
        == [
            "expected argument %x of @f: shape[0] >= 1 (the declared 2*n + 1 with n >= 0), got 0 < 1 "
            "(where k >= 1 must hold; k = 0)"
        ]
        * 2
    )


def test_a_static_argument_of_a_derived_dim_is_refuted_at_compile_time() -> None:
    source = CALLS_F.replace("(k,)", "(4,)")
    with pytest.raises(CompileError, match=r"shape\[0\] == the declared 2\*n \+ 1, got 4 != 3"):
        dynshape.compile(source)


# ---- deferred checks ----------------------------------------------------------------------------


def test_a_deferred_broadcast_shows_the_derived_symbol_value() -> None:
    source = """
    def @main(%x: Tensor[(2*n + 1, 4), float32], %y: Tensor[(m, 4), float32]) { add(%x, %y) }
    """
    # the manifest's template names the symbols; the lowering maps them to registers
    printed = module_to_text(dynshape.stages(textwrap.dedent(source))["manifest"])
    assert "must hold; m = {=m}, n = {=n})" in printed
    x = rand(3, 4)
    for vm in vms(source):
        np.testing.assert_array_equal(vm.run(x, x[:1]), x + x[:1])
    assert (
        fails(source, x, rand(2, 4))
        == [
            "add: cannot broadcast a.shape[0] with b.shape[0]: 3 vs 2 (inputs: a (2*n + 1, 4), "
            "b (m, 4); where 2*n + 1 == m or 2*n + 1 == 1 or m == 1 must hold; m = 2, n = 1)"
        ]
        * 2
    )


# ---- the builder --------------------------------------------------------------------------------


def test_a_builder_input_with_a_derived_dim() -> None:
    x = ds.tensor("x", ("2*n + 1", 3))
    b = ds.tensor("b", (3,))
    exe = dynshape.compile(ds.build(x * b, [x, b]))
    xv, bv = rand(5, 3), rand(3)
    for vm in (
        dynshape.VirtualMachine(exe),
        dynshape.VirtualMachine(Executable.from_bytes(exe.to_bytes())),
    ):
        np.testing.assert_allclose(vm.run(xv, bv), xv * bv, rtol=1e-6)
        with pytest.raises(
            RunTimeShapeError, match=r"^x\.shape\[0\] = 4 is not 2\*n \+ 1 for any integer n >= 0"
        ):
            vm.run(rand(4, 3), bv)
