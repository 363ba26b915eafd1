"""Kernels the kernel audit (benchmarks/kernel_audit.py) found slow, on their fast paths:
``where`` as a bit select, ``nn.leaky_relu`` as max/min, ``topk`` for small k by partition.
Same values as the general paths, NaN payloads, signed zeros, infinities and ties included, in
place too."""

from __future__ import annotations

import numpy as np
import pytest

from vm.kernels import elementwise
from vm.kernels.registry import get_kernel_factory

where = get_kernel_factory("where")({})


def _masked_where(cond, x, y, shape, dtype):
    out = np.empty(shape, dtype)
    np.copyto(out, y)
    np.copyto(out, x, where=cond)
    return out


@pytest.mark.parametrize("shape", [(6, 5), (80, 64)], ids=["np.where", "bit-select"])
@pytest.mark.parametrize("dtype", ["float16", "float32", "float64", "int8", "int64", "bool"])
def test_where_bit_select_equals_masked_copies(dtype, shape):
    # Both paths of the kernel: small outputs take np.where, large ones the bit select.
    rng = np.random.default_rng(0)
    x = (rng.standard_normal(shape) * 10).astype(dtype)
    row = (1, shape[1])
    for cond, y in [
        (rng.random(shape) < 0.5, (rng.standard_normal(row) * 10).astype(dtype)),
        (rng.random(row) < 0.5, np.array(3, dtype)),
        (np.array(True), x[::-1]),
    ]:
        want = _masked_where(cond, x, y, shape, dtype)
        out = np.empty(shape, dtype)
        where(cond, x, y, out)
        assert np.array_equal(out.view(np.uint8), want.view(np.uint8))  # bit for bit
        xx = x.copy()
        where(cond, xx, y, xx)  # out is x
        assert np.array_equal(xx, want)
        yy = np.array(np.broadcast_to(y, shape))
        where(cond, x, yy, yy)  # out is y
        assert np.array_equal(yy, want)


def test_where_keeps_nan_payloads_signed_zeros_and_mixed_dtypes():
    x = np.array([np.nan, -0.0, np.inf, 1.0], np.float32)
    x[0] = np.frombuffer(np.uint32(0x7FC01234).tobytes(), np.float32)[0]
    y = np.array([0.0, 0.0, -np.inf, -0.0], np.float32)
    cond = np.array([True, True, True, False])
    out = np.empty(4, np.float32)
    where(cond, x, y, out)
    assert out.view(np.uint32)[0] == 0x7FC01234
    assert np.signbit(out[1]) and out[2] == np.inf and np.signbit(out[3])
    # Operands of another dtype than the output take the general path.
    out64 = np.empty(4, np.float64)
    where(cond, x.astype(np.float64), np.zeros(4, np.float64), out64)
    assert np.array_equal(out64[1:], [0.0, np.inf, 0.0])


@pytest.mark.parametrize("dtype", ["float32", "int64"])
def test_where_into_another_view_of_an_operand(dtype):
    """The planner may pass an operand's storage as the output under another array object
    (found by MaxPool's Indices over symbolic dims): it is the operand itself, and a partial
    overlap is read before it is written."""
    rng = np.random.default_rng(1)
    x, y = (rng.standard_normal((3, 5)) * 10).astype(dtype), np.arange(15, dtype=dtype)
    cond = rng.random((3, 5)) < 0.5
    want = np.where(cond, x, y.reshape(3, 5))
    for which in ("x", "y"):
        xs, ys = x.copy(), y.reshape(3, 5).copy()
        out = (xs if which == "x" else ys).view()  # same memory, another object
        where(cond, xs, ys, out)
        assert np.array_equal(out, want)
    buf = np.concatenate([x.reshape(-1), np.zeros(5, dtype)])
    shifted = buf[5:].reshape(3, 5)  # overlaps x = buf[:15] by ten elements
    where(cond, buf[:15].reshape(3, 5), y.reshape(3, 5), shifted)
    assert np.array_equal(shifted, want)


@pytest.mark.parametrize("alpha", [0.01, 0.5, 1.0, 3.0, 0.0, -0.5, 1e-30, 7e4, float("inf")])
@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_leaky_relu_equals_the_masked_multiply(alpha, dtype):
    kernel = get_kernel_factory("nn.leaky_relu")({"alpha": alpha})
    x = np.array([-2.0, -0.0, 0.0, 3.0, np.nan, -np.inf, np.inf, 1e-40, -1e-45, -7.5], dtype)
    with np.errstate(all="ignore"):
        want = x.copy()
        neg = want < 0
        want[neg] = want[neg] * dtype(alpha)
        out = np.empty_like(x)
        kernel(x, out)
        assert np.array_equal(out, want, equal_nan=True)
        assert np.array_equal(np.signbit(out), np.signbit(want))
        kernel(x, x)  # in place: by chunks where alpha allows, else the masked path
    assert np.array_equal(x, want, equal_nan=True)
    assert np.array_equal(np.signbit(x), np.signbit(want))


@pytest.mark.parametrize("alpha", [0.01, 3.0, -0.5])
@pytest.mark.parametrize("size", [1, 1000, 2 * elementwise.LEAKY_CHUNK + 17])
def test_leaky_relu_in_place_gives_the_out_of_place_bits(alpha, size):
    """In place (the operand itself, or another view of its storage) the chunks give the
    bits of the out-of-place kernel on every chunk, the last partial one included."""
    kernel = get_kernel_factory("nn.leaky_relu")({"alpha": alpha})
    rng = np.random.default_rng(size)
    x = rng.standard_normal(size).astype(np.float32)
    x[rng.integers(0, size, min(size, 8))] = rng.choice([np.nan, -0.0, 0.0, -np.inf, np.inf], 8)[
        : min(size, 8)
    ]
    want = np.empty_like(x)
    kernel(x, want)
    same, view = x.copy(), x.copy()
    kernel(same, same)
    kernel(view, view.view())
    for got in (same, view):
        assert got.tobytes() == want.tobytes()


def test_topk_small_k_is_the_full_sort_on_random_inputs():
    from vm.kernels.dynamic import topk_order, topk_small_k

    rng = np.random.default_rng(0)
    used = 0
    for _ in range(600):
        nd = int(rng.integers(1, 4))
        shape = tuple(int(v) for v in rng.integers(1, 40, nd))
        axis = int(rng.integers(-nd, nd))
        dtype = str(rng.choice(["float16", "float32", "float64", "int8", "uint8", "int64"]))
        if dtype.startswith("float"):
            ties = rng.random() < 0.5
            x = (rng.integers(-3, 4, shape) if ties else rng.standard_normal(shape)).astype(dtype)
            if rng.random() < 0.3:
                x.flat[rng.integers(0, x.size)] = rng.choice([np.inf, -np.inf, np.nan, -0.0])
        else:
            info = np.iinfo(dtype)
            high = int(info.max) + 1 if rng.random() < 0.5 else 3
            x = rng.integers(0 if high == 3 else info.min, high, shape, dtype=dtype)
        k = int(rng.integers(0, shape[axis] + 1))
        ascending = bool(rng.random() < 0.5)
        got = topk_small_k(x, axis, ascending, k)
        if got is None:  # NaNs, many ties, k = 0: the caller sorts the whole axis
            continue
        used += 1
        want = np.take(topk_order(x, axis, ascending), np.arange(k), axis=axis)
        assert np.array_equal(got, want), (x, axis, k, ascending)
    assert used > 400


@pytest.mark.parametrize("ascending", [False, True])
def test_topk_kernel_takes_the_small_k_path_with_the_same_results(ascending):
    from vm.kernels import dynamic

    attrs = {"k": 5, "axis": 1, "ret_type": "both", "is_ascend": ascending, "dtype": "int64"}
    kernel = get_kernel_factory("topk")(attrs)
    rng = np.random.default_rng(3)
    x = rng.integers(0, 20, (7, 300, 2)).astype(np.float32)  # many ties
    results = []
    for ratio in (dynamic.SMALL_K_RATIO, 10**9):  # the small-k path, then the full sort
        values = np.empty((7, 5, 2), np.float32)
        indices = np.empty((7, 5, 2), np.int64)
        saved, dynamic.SMALL_K_RATIO = dynamic.SMALL_K_RATIO, ratio
        try:
            kernel(x, values, indices)
        finally:
            dynamic.SMALL_K_RATIO = saved
        results.append((values, indices))
    assert np.array_equal(results[0][0], results[1][0])
    assert np.array_equal(results[0][1], results[1][1])
