"""The update kernels (``vm/kernels/update.py``) with their output over their operand: the
copy is skipped (counted), an update that overlaps the output is read before it is
overwritten, and every relation the kernel checks has its message."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest

from dynshape.testing.numpy_ops import OPS
from vm.kernels import get_kernel_factory
from vm.kernels.update import same_array

F32 = np.float32


@pytest.fixture
def copies(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[int, ...]]]:
    """The shapes of the ``np.copyto`` calls made meanwhile."""
    seen: list[tuple[int, ...]] = []
    real: Callable[..., Any] = np.copyto

    def counting(dst: np.ndarray, src: Any, *args: Any, **kw: Any) -> None:
        seen.append(dst.shape)
        real(dst, src, *args, **kw)

    monkeypatch.setattr(np, "copyto", counting)
    yield seen


def _kernel(op: str, **attrs: Any) -> Callable[..., None]:
    return get_kernel_factory(op)(attrs)


def test_same_array_is_the_same_elements_not_the_same_object() -> None:
    a = np.arange(12, dtype=F32).reshape(3, 4)
    assert same_array(a, a.view()) and same_array(a, a[:])
    assert not same_array(a, a.copy())
    assert not same_array(a[1:], a[:2])  # same shape and strides, another address
    assert not same_array(a, a.T.T.reshape(4, 3).T)  # same address, other strides
    assert not same_array(a, a.view(np.int32))  # same bytes, another dtype


def test_dynamic_update_slice_in_place_copies_nothing_of_the_operand(copies) -> None:
    x = np.arange(20, dtype=F32).reshape(4, 5)
    u = -np.ones((2, 3), F32)
    want = OPS["dynamic_update_slice"]([x, u, (np.int64(3), np.int64(-1))], {})
    kernel = _kernel("dynamic_update_slice")
    out = np.empty_like(x)
    kernel(x, u, (np.int64(3), np.int64(-1)), out)
    np.testing.assert_array_equal(out, want)
    assert copies == [(4, 5)]  # a fresh output: the operand copied once
    copies.clear()
    shared = x.copy()
    kernel(shared, u, (np.int64(3), np.int64(-1)), shared.view())  # the planner's case
    np.testing.assert_array_equal(shared, want)
    assert copies == []


def test_an_update_overlapping_its_output_is_read_first() -> None:
    x = np.arange(20, dtype=F32).reshape(4, 5)
    want = OPS["dynamic_update_slice"]([x, x[1:3, :3].copy(), (np.int32(2), np.int32(1))], {})
    shared = x.copy()
    _kernel("dynamic_update_slice")(shared, shared[1:3, :3], (np.int32(2), np.int32(1)), shared)
    np.testing.assert_array_equal(shared, want)


@pytest.mark.parametrize("reduction", ["none", "add", "max"])
def test_scatter_nd_in_place_with_updates_from_the_operand(reduction: str, copies) -> None:
    x = np.arange(20, dtype=F32).reshape(4, 5)
    rows = np.array([[1], [0], [1]])
    attrs = {"reduction": reduction}
    want = OPS["scatter_nd"]([x, rows, x[1:4].copy()], attrs)
    shared = x.copy()
    _kernel("scatter_nd", **attrs)(shared, rows, shared[1:4], shared)
    np.testing.assert_array_equal(shared, want)
    assert copies == []


@pytest.mark.parametrize("reduction", ["none", "mul", "min"])
def test_scatter_elements_in_place_with_updates_from_the_operand(reduction: str, copies) -> None:
    x = np.arange(1, 13, dtype=F32).reshape(3, 4)
    cols = np.array([[3, 0], [-1, 1], [2, 2]])
    attrs = {"axis": 1, "reduction": reduction}
    want = OPS["scatter_elements"]([x, cols, x[:, 1:3].copy()], attrs)
    shared = x.copy()
    _kernel("scatter_elements", **attrs)(shared, cols, shared[:, 1:3], shared)
    np.testing.assert_array_equal(shared, want)
    assert copies == []


def test_a_bad_index_leaves_the_operand_unwritten_in_place() -> None:
    # every index is checked before the first write: a failed update in place changes nothing
    x = np.arange(6, dtype=F32).reshape(3, 2)
    shared = x.copy()
    with pytest.raises(ValueError, match=r"index \[3\] at indices\[1, :\] is out of range"):
        _kernel("scatter_nd", reduction="none")(
            shared, np.array([[0], [3]]), np.ones((2, 2), F32), shared
        )
    np.testing.assert_array_equal(shared, x)


_X, _U = np.zeros((4, 5), F32), np.ones((2, 3), F32)
_S = (np.int64(0), np.int64(0))

KERNEL_ERRORS = [
    (
        [_X, _U, _S, np.zeros((4, 4), F32)],
        "dynamic_update_slice: output float32 (4, 4) for operand float32 (4, 5)",
    ),
    (
        [_X, _U.astype(np.float64), _S, _X.copy()],
        "dynamic_update_slice: update float64 for operand float32",
    ),
    (
        [_X, np.ones(3, F32), _S, _X.copy()],
        r"dynamic_update_slice: update of shape (3,) does not fit in the operand of shape (4, 5) "
        "(same rank, no dim larger)",
    ),
    (
        [_X, np.ones((2, 6), F32), _S, _X.copy()],
        "dynamic_update_slice: update of shape (2, 6) does not fit in the operand of shape (4, 5)",
    ),
    (
        [_X, _U, (np.int64(0), np.float32(1)), _X.copy()],
        "dynamic_update_slice: start_indices[1] must be integers, got float32",
    ),
    (
        [_X, _U, (np.int64(0),), _X.copy()],
        "dynamic_update_slice: start_indices of shapes [()] for an operand of rank 2 (one scalar "
        "per axis, or one 1-d tensor of rank elements)",
    ),
    (
        [_X, _U, (np.zeros(3, np.int64),), _X.copy()],
        r"dynamic_update_slice: start_indices of shapes [(3,)] for an operand of rank 2",
    ),
    (
        [_X, _U, (np.zeros(2, np.int64), np.int64(0)), _X.copy()],
        r"dynamic_update_slice: start_indices of shapes [(2,), ()] for an operand of rank 2",
    ),
]


@pytest.mark.parametrize(("args", "message"), KERNEL_ERRORS)
def test_dynamic_update_slice_kernel_errors(args: list[Any], message: str) -> None:
    out = args[-1]
    before = out.copy()
    with pytest.raises(ValueError) as info:
        _kernel("dynamic_update_slice")(*args)
    assert str(info.value).startswith(message)
    np.testing.assert_array_equal(out, before)  # refused before any write
