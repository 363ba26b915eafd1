"""Entry checks and deferred checks of compiled programs: each error names what is wrong."""

from __future__ import annotations

import numpy as np
import pytest

import dynshape
from dynshape.demo import SYMBOLIC_PROGRAM
from vm import RunTimeShapeError, VMArgumentError

F32 = np.float32


def _vm(source: str) -> dynshape.VirtualMachine:
    return dynshape.VirtualMachine(dynshape.compile(source))


ENTRY = """
def @main(%x: Tensor[(n, 4), float32], %y: Tensor[(n, m), float32], %z: Tensor[(2*n,), int32]) {
  (%x, %y, %z)
}
"""


@pytest.mark.parametrize(
    ("args", "error", "message"),
    [
        (
            [np.ones((3, 4), F32), np.ones((4, 2), F32), np.ones(6, np.int32)],
            RunTimeShapeError,
            "y.shape[0] = 4 but n = 3 was bound by x.shape[0]",
        ),
        (
            [np.ones((3, 4), F32), np.ones((3, 2), F32), np.ones(5, np.int32)],
            RunTimeShapeError,
            "z.shape[0] = 5 but 2*n = 6",
        ),
        (
            [np.ones((3, 5), F32), np.ones((3, 2), F32), np.ones(6, np.int32)],
            VMArgumentError,
            "parameter 'x': axis 1 must be 4, got 5",
        ),
        (
            [np.ones((3, 4), np.float64), np.ones((3, 2), F32), np.ones(6, np.int32)],
            VMArgumentError,
            "parameter 'x': expected dtype float32, got float64",
        ),
        (
            [np.ones((3, 4, 1), F32), np.ones((3, 2), F32), np.ones(6, np.int32)],
            VMArgumentError,
            "parameter 'x': expected rank 2",
        ),
        (
            [np.ones((3, 4), F32), np.ones((3, 2), F32)],
            VMArgumentError,
            "main takes 3 argument(s) (x, y, z), got 2",
        ),
    ],
)
def test_entry_checks_name_parameter_axis_and_symbol(
    args: list[np.ndarray], error: type[Exception], message: str
) -> None:
    with pytest.raises(error) as info:
        _vm(ENTRY).run(*args)
    assert message in str(info.value)


def test_consistent_arguments_pass_the_entry_checks() -> None:
    out = _vm(ENTRY).run(np.ones((3, 4), F32), np.ones((3, 2), F32), np.ones(6, np.int32))
    assert [a.shape for a in out] == [(3, 4), (3, 2), (6,)]


def test_deferred_broadcast_check_runs_where_the_fact_arises() -> None:
    vm = _vm("def @main(%x: Tensor[(n, 4), float32], %y: Tensor[(m, 4), float32]) { add(%x, %y) }")
    assert vm.run(np.ones((3, 4), F32), np.ones((1, 4), F32)).shape == (3, 4)
    assert vm.run(np.ones((1, 4), F32), np.ones((3, 4), F32)).shape == (3, 4)
    assert vm.run(np.ones((0, 4), F32), np.ones((1, 4), F32)).shape == (0, 4)
    with pytest.raises(RunTimeShapeError) as info:
        vm.run(np.ones((3, 4), F32), np.ones((2, 4), F32))
    assert info.value.message == (
        "add: cannot broadcast a.shape[0] with b.shape[0]: 3 vs 2 "
        "(inputs: a (n, 4), b (m, 4); where n == m or n == 1 or m == 1 must hold; m = 2, n = 3)"
    )


def test_deferred_divisibility_check_reports_both_values() -> None:
    vm = _vm("def @main(%x: Tensor[(n,), float32]) { reshape(%x, newshape=[-1, 4]) }")
    assert vm.run(np.ones(8, F32)).shape == (2, 4)
    with pytest.raises(RunTimeShapeError) as info:
        vm.run(np.ones(6, F32))
    assert "got 6 not divisible by 4" in str(info.value)


def test_deferred_annotation_check() -> None:
    vm = _vm(
        """
        def @main(%x: Tensor[(n, 4), float32], %y: Tensor[(m, 4), float32]) {
          let %z: Tensor[(n, 4), float32] = %y;
          add(%x, %z)
        }
        """
    )
    assert vm.run(np.ones((2, 4), F32), np.ones((2, 4), F32)).shape == (2, 4)
    with pytest.raises(RunTimeShapeError) as info:
        vm.run(np.ones((2, 4), F32), np.ones((3, 4), F32))
    assert "expected %z.shape[0] == its annotation" in str(info.value)


def test_data_dependent_output_checked_against_its_annotation() -> None:
    vm = _vm(
        """
        def @main(%x: Tensor[(n,), int64], %s: Tensor[(2,), int64]) {
          let %r: Tensor[(?, 3), int64] = dyn.reshape(%x, %s);
          %r
        }
        """
    )
    assert vm.run(np.arange(6), np.array([2, 3])).shape == (2, 3)
    with pytest.raises(RunTimeShapeError) as info:
        vm.run(np.arange(6), np.array([3, 2]))
    assert "expected %r.shape[1] == its annotation in Tensor[(?, 3), int64], got 2 != 3" in str(
        info.value
    )


@pytest.mark.parametrize("n", [0, 1, 10, 1_000, 1_000_000])
def test_symbolic_seed_runs_at_every_size(n: int) -> None:
    vm = _vm(SYMBOLIC_PROGRAM)
    rng = np.random.default_rng(n)
    x, y = rng.standard_normal(n).astype(F32), rng.standard_normal(n).astype(F32)
    np.testing.assert_array_equal(vm.run(x, y), (x + x) - y)
