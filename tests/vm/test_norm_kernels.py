"""Layer norm and softmax in few passes (vm/kernels/nn.py) against the plain numpy formulas:
both reduction paths (matrix-vector up to MATVEC_NORM_MAX, ufunc reduce above it or off the
last axis), odd sizes, strided inputs, 0-size tensors, in place."""

from __future__ import annotations

import numpy as np
import pytest

from vm.kernels import nn
from vm.kernels.registry import get_kernel_factory

SHAPES = [(8, 64), (67, 129), (3, 5, 64), (1, 1), (513, 1023), (0, 64), (4, 0)]


def _plain_layer_norm(x: np.ndarray, g: np.ndarray, b: np.ndarray, axis: int) -> np.ndarray:
    if x.size == 0:
        return x.copy()
    shape = [1] * x.ndim
    shape[axis] = -1
    mean = x.mean(axis=axis, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=axis, keepdims=True)
    return (x - mean) / np.sqrt(var + 1e-5) * g.reshape(shape) + b.reshape(shape)


def _plain_softmax(x: np.ndarray, axis: int) -> np.ndarray:
    if x.size == 0:
        return x.copy()  # numpy's max has no identity: nothing to compute
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def _data(shape: tuple[int, ...], dtype: str = "float32") -> np.ndarray:
    rng = np.random.default_rng(sum(shape) + len(shape))
    return (rng.standard_normal(shape) * 3 + 1).astype(dtype)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("axis", [-1, 0])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_layer_norm_equals_the_plain_formula(shape: tuple[int, ...], axis: int, dtype: str) -> None:
    x = _data(shape, dtype)
    g = _data((shape[axis],), dtype)
    b = _data((shape[axis],), dtype)
    out = np.full_like(x, np.nan)
    get_kernel_factory("nn.layer_norm")({"axis": axis, "epsilon": 1e-5})(x, g, b, out)
    np.testing.assert_allclose(out, _plain_layer_norm(x, g, b, axis), rtol=1e-4, atol=1e-4)


def test_both_layer_norm_paths_are_exercised() -> None:
    assert 8 * 64 <= nn.MATVEC_NORM_MAX < 513 * 1023


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("axis", [-1, 0])
def test_softmax_equals_the_plain_formula(shape: tuple[int, ...], axis: int) -> None:
    x = _data(shape)
    out = np.full_like(x, np.nan)
    get_kernel_factory("nn.softmax")({"axis": axis})(x, out)
    np.testing.assert_allclose(out, _plain_softmax(x, axis), rtol=1e-5, atol=1e-6)


def test_strided_and_in_place_inputs() -> None:
    base = _data((40, 130))
    x = base[::3, 1::2]  # not contiguous: the reduce path
    g, b = _data((65,)), _data((65,))
    ln = get_kernel_factory("nn.layer_norm")({"axis": -1, "epsilon": 1e-5})
    out = np.empty(x.shape, np.float32)
    ln(x, g, b, out)
    np.testing.assert_allclose(out, _plain_layer_norm(x, g, b, -1), rtol=1e-4, atol=1e-4)
    y = _data((9, 33))
    expected = _plain_layer_norm(y, g[:33], b[:33], -1)
    ln(y, g[:33], b[:33], y)  # out is the input: the matvec path reads the mean before writing
    np.testing.assert_allclose(y, expected, rtol=1e-4, atol=1e-4)
    z = _data((9, 33))
    expected = _plain_softmax(z, -1)
    get_kernel_factory("nn.softmax")({"axis": -1})(z, z)
    np.testing.assert_allclose(z, expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("shape", [(1, 256), (1, 1, 128), (7,), (1, 1)])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_one_row_layer_norm_agrees_with_the_other_paths(
    shape: tuple[int, ...], dtype: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    x = _data(shape, dtype)
    n = shape[-1]
    g, b = _data((n,), dtype), _data((n,), dtype)
    ln = get_kernel_factory("nn.layer_norm")({"axis": -1, "epsilon": 1e-5})
    one_row, general, in_place = np.empty_like(x), np.empty_like(x), x.copy()
    ln(x, g, b, one_row)
    ln(in_place, g, b, in_place)  # out is the input
    monkeypatch.setattr(nn, "ONE_ROW_NORM", False)
    ln(x, g, b, general)
    want = _plain_layer_norm(x.astype(np.float64), g, b, -1)
    tol = 1e-5 if dtype == "float32" else 1e-12
    for got in (one_row, in_place, general):
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


@pytest.mark.parametrize("eps", [0.0, -1.0])
def test_one_row_layer_norm_of_a_constant_row_gives_numpy_s_inf_and_nan(
    eps: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    x = np.full((1, 8), 3.0, np.float32)
    g, b = np.ones(8, np.float32), np.zeros(8, np.float32)
    ln = get_kernel_factory("nn.layer_norm")({"axis": -1, "epsilon": eps})
    one_row, general = np.empty_like(x), np.empty_like(x)
    with np.errstate(all="ignore"):
        ln(x, g, b, one_row)
        monkeypatch.setattr(nn, "ONE_ROW_NORM", False)
        ln(x, g, b, general)
    np.testing.assert_array_equal(one_row, general)  # 0 * inf and 0 * nan: nan everywhere
    assert np.isnan(one_row).all()


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("axis", [-1, 0])
@pytest.mark.parametrize("dtype", ["float32", "float64", "float16"])
def test_layer_norm_carves_its_declared_workspace(
    shape: tuple[int, ...], axis: int, dtype: str
) -> None:
    """The squares (and float16's float32 copy) come from a workspace of the size the op's
    rule declares (``layer_norm_workspace``): nothing spills, the same bits as the kernel that
    allocates; an empty workspace spills with the same bits."""
    from shape_funcs.workspace import workspace_bytes
    from vm.kernels.workspace import Spills

    x = _data(shape, dtype)
    n = shape[axis]
    g, b = _data((n,), dtype), _data((n + 1,), dtype)[1:]
    kernel = get_kernel_factory("nn.layer_norm")({"axis": axis, "epsilon": 1e-5})
    plain = np.empty_like(x)
    kernel(x, g, b, plain)
    attrs = {"axis": axis, "epsilon": 1e-5}
    nbytes = workspace_bytes("nn.layer_norm", shape, [shape, (n,), (n,)], dtype, attrs)
    for room, spills in ((nbytes, False), (0, True)):
        before, out = Spills.count, np.full_like(x, 7)
        with pytest.MonkeyPatch.context() as m:
            m.setattr(nn, "WORKSPACE_SQUARES_BYTES", 0)  # every size carved (the bound below)
            kernel(x, g, b, out, np.empty(room, np.uint8))
        # nothing is carved for an empty tensor, nor for one row along the last axis (the row
        # path needs no squares) unless float16 (its float32 copy)
        one_row = axis % x.ndim == x.ndim - 1 and x.size == n and dtype != "float16"
        needs = x.size > 0 and not one_row
        assert (Spills.count > before) == (spills and needs), (room, Spills.count - before)
        np.testing.assert_array_equal(out, plain, strict=True)


def test_small_layer_norm_squares_are_numpys_own() -> None:
    """Below ``WORKSPACE_SQUARES_BYTES`` the squares are numpy's array (the workspace's checks
    cost more than they save): an empty workspace spills nothing, the bits are the same."""
    from vm.kernels.workspace import Spills

    x = _data((16, 128))
    g, b = _data((128,)), _data((129,))[1:]
    assert x.nbytes < nn.WORKSPACE_SQUARES_BYTES
    kernel = get_kernel_factory("nn.layer_norm")({"axis": -1, "epsilon": 1e-5})
    plain, out = np.empty_like(x), np.empty_like(x)
    kernel(x, g, b, plain)
    before = Spills.count
    kernel(x, g, b, out, np.empty(0, np.uint8))
    assert Spills.count == before
    np.testing.assert_array_equal(out, plain, strict=True)


@pytest.mark.parametrize("rows", [1, 2, 4, 16, 67, 512])
@pytest.mark.parametrize("n", [1, 7, 64, 128, 768])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_the_norms_reductions_by_np_dot_are_np_matmuls(rows: int, n: int, dtype: str) -> None:
    """The matrix-vector path's mean and mean square go by ``np.dot`` (cheaper a call): the same
    bits as the ``np.matmul`` they replaced, so the norms' results did not move."""
    x = _data((rows, n), dtype)
    inv = nn._inverse_count(n, np.dtype(dtype))
    for operand in (x, np.square(x - np.dot(x, inv))):
        np.testing.assert_array_equal(np.dot(operand, inv), np.matmul(operand, inv))
