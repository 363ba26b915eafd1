"""float16 numerics: every accumulating kernel sums in float32 and rounds once into its float16
output (ONNX's rule), and the reference interpreter follows the same rule.

"Rounded once" is checked against a float64 reference: a result must be within half a float16
ulp of the exact value (plus the float32 arithmetic's own error where there is any). Keeping
partial sums in float16 breaks that (and overflows: the sum of 100 x 1000.0 is inf in float16),
and so does rounding an intermediate (an exponential, a square) to float16 before the last step.
Where the values make float32 arithmetic exact (multiples of 1/4 below 512, short enough sums),
the bound is exactly half an ulp.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from vm_testlib import KERNEL_SETTINGS, run_kernel, run_like

import dynshape as ds
from dynshape.testing import interpret

F16 = np.float16
R = {"keepdims": False, "exclude": False}


def half_ulp(exact: np.ndarray) -> np.ndarray:
    """Half the float16 spacing at the float16 rounding of ``exact`` (at a power of two, the
    larger of the two spacings around it: a bound, not the exact half-ulp)."""
    with np.errstate(all="ignore"):  # NaN and inf have no spacing (they are compared apart)
        r = np.abs(np.asarray(exact, np.float64)).astype(F16)
        return 0.5 * np.spacing(r).astype(np.float64)


def assert_rounded_once(got: np.ndarray, exact: np.ndarray, noise: float | np.ndarray = 0.0):
    """``got`` (float16) is the float64 ``exact`` rounded once: within half an ulp, plus
    ``noise`` for float32 arithmetic before the rounding; infinities and NaNs where the rounded
    exact value has them."""
    assert got.dtype == np.float16, got.dtype
    exact = np.asarray(exact, np.float64)
    assert got.shape == exact.shape, (got.shape, exact.shape)
    with np.errstate(over="ignore"):
        want = exact.astype(F16)  # inf where exact is beyond float16
    finite = np.isfinite(want)
    np.testing.assert_array_equal(got[~finite], want[~finite])
    with np.errstate(invalid="ignore"):  # inf - inf where both overflow (compared above)
        err = np.abs(got.astype(np.float64) - exact)
    bound = half_ulp(exact) + noise
    bad = finite & ~(err <= bound)
    assert not bad.any(), (
        f"{int(bad.sum())} of {got.size} elements are not rounded once: "
        f"got {got[bad][:5]}, exact {exact[bad][:5]}, error {err[bad][:5]}, bound {bound[bad][:5]}"
    )


def quarter_values(max_abs: float = 511.75) -> st.SearchStrategy[float]:
    """Multiples of 1/4 with |v| <= max_abs: exact in float16, and their sums (up to 8192
    terms) exact in float32."""
    n = int(max_abs * 4)
    return st.integers(-n, n).map(lambda i: i / 4)


def f16_arrays(shape, values=None):
    return hnp.arrays(F16, shape, elements=values if values is not None else quarter_values())


def ones_plus_small(n: int) -> np.ndarray:
    """n float16 values near 1 whose float16 running sum stalls at 2048 (adding 1 or 1.25 to
    2048 rounds back), while the float32 sum is exact."""
    x = np.ones(n, F16)
    x[::4] = 1.25
    return x


# ---- reductions ------------------------------------------------------------------------------
def test_mean_of_100_x_1000_is_1000_not_inf():
    x = np.full(100, 1000.0, F16)
    got = run_kernel("mean", {**R, "axis": None}, [x], [((), F16)])[0]
    assert got == 1000.0 and got.dtype == F16


def test_sum_that_overflows_float16_is_inf_and_one_that_does_not_is_exact():
    x = np.full(100, 1000.0, F16)  # 100000 > 65504: the float16 result itself overflows
    assert np.isinf(run_kernel("sum", {**R, "axis": None}, [x], [((), F16)])[0])
    # +1000 then -1000 along a non-innermost axis: float16 partial sums would reach inf
    x = np.concatenate([np.full((100, 2), 1000.0, F16), np.full((100, 2), -1000.0, F16)])
    got = run_kernel("sum", {**R, "axis": 0}, [x], [((2,), F16)])[0]
    np.testing.assert_array_equal(got, [0, 0])


@pytest.mark.parametrize("op", ["sum", "mean"])
@pytest.mark.parametrize("inner", [True, False])
def test_long_sums_keep_their_precision(op, inner):
    col = ones_plus_small(4096)  # exact sum 4352 (1024 x 1.25 + 3072 x 1)
    x = np.stack([col, col[::-1]], axis=1 if not inner else 0)  # (4096, 2) or (2, 4096)
    axis = 1 if inner else 0
    got = run_kernel(op, {**R, "axis": axis}, [x], [((2,), F16)])[0]
    exact = x.astype(np.float64).sum(axis=axis)
    if op == "mean":
        exact = exact / 4096
    assert_rounded_once(got, exact)
    assert (got == (4352 if op == "sum" else 1.0625)).all()


def test_prod_does_not_overflow_in_between():
    x = np.array([[1000, 1000, 1e-3, 1e-3]] * 3, F16).T  # reduced along the outer axis
    got = run_kernel("prod", {**R, "axis": 0}, [x], [((3,), F16)])[0]
    exact = x.astype(np.float64).prod(axis=0)
    assert_rounded_once(got, exact, noise=1e-6)


@KERNEL_SETTINGS
@given(data=st.data(), op=st.sampled_from(["sum", "mean", "prod"]))
def test_reductions_round_once(data, op):
    shape = data.draw(hnp.array_shapes(min_dims=1, max_dims=3, min_side=0, max_side=40))
    axes = data.draw(st.lists(st.integers(0, len(shape) - 1), unique=True, max_size=len(shape)))
    values = quarter_values() if op != "prod" else st.sampled_from([-2, -1, -0.5, 0.5, 1, 2, 1.5])
    x = data.draw(f16_arrays(shape, values))
    axis = tuple(axes) if axes else None
    keepdims = data.draw(st.booleans())
    x64 = x.astype(np.float64)
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # the mean of an empty axis is NaN
        exact = getattr(np, op)(x64, axis=axis, keepdims=keepdims)
    attrs = {"axis": axis, "keepdims": keepdims, "exclude": False}
    got = run_kernel(op, attrs, [x], [(np.shape(exact), F16)])[0]
    # sums are exact in float32; a mean divides once more, a product rounds at every step
    # (a mean over an empty axis is NaN, compared as such)
    noise = 2.0**-22 * np.abs(exact) if op != "sum" else 0.0
    assert_rounded_once(got, exact, noise)


def test_max_min_argmax_are_unchanged_for_float16():
    x = np.array([[1, -3, 65504], [-65504, 2, 0.5]], F16)
    for op, fn in (("max", np.max), ("min", np.min)):
        got = run_kernel(op, {**R, "axis": 1}, [x], [((2,), F16)])[0]
        np.testing.assert_array_equal(got, fn(x, axis=1))


# ---- matmuls ---------------------------------------------------------------------------------
def _matmul_operands(k: int) -> tuple[np.ndarray, np.ndarray]:
    a = np.stack(
        [ones_plus_small(k), np.concatenate([np.full(k // 2, 1000.0), -np.full(k // 2, 1000.0)])]
    ).astype(F16)
    b = np.ones((k, 3), F16)
    b[:, 1] = 0.5
    return a, b  # (2, k) @ (k, 3): sums that stall at 2048 or overflow in float16


def test_dense_matmul_batch_matmul_accumulate_in_float32():
    a, b = _matmul_operands(4096)
    exact = a.astype(np.float64) @ b.astype(np.float64)
    assert_rounded_once(run_like("nn.matmul", {}, [a, b], exact.astype(F16)), exact)
    assert_rounded_once(
        run_like("nn.dense", {}, [a, np.ascontiguousarray(b.T)], exact.astype(F16)), exact
    )
    for ta in (False, True):
        for tb in (False, True):
            x = a.T[None] if ta else a[None]
            y = b.T[None] if tb else b[None]
            attrs = {"transpose_a": ta, "transpose_b": tb}
            got = run_like("nn.batch_matmul", attrs, [x.copy(), y.copy()], exact[None].astype(F16))
            assert_rounded_once(got, exact[None])


@KERNEL_SETTINGS
@given(data=st.data())
def test_matmul_rounds_once(data):
    m, k, n = (
        data.draw(st.integers(0, 4)),
        data.draw(st.integers(0, 300)),
        data.draw(st.integers(0, 4)),
    )
    small = quarter_values(8)  # products are multiples of 1/16 up to 64: exact sums in float32
    a = data.draw(f16_arrays((m, k), small))
    b = data.draw(f16_arrays((k, n), small))
    exact = a.astype(np.float64) @ b.astype(np.float64)
    assert_rounded_once(run_like("nn.matmul", {}, [a, b], exact.astype(F16)), exact)
    got = run_like("nn.dense", {}, [a, np.ascontiguousarray(b.T)], exact.astype(F16))
    assert_rounded_once(got, exact)


# ---- softmax, log_softmax, layer_norm --------------------------------------------------------
def _softmax64(x: np.ndarray, axis: int) -> np.ndarray:
    x64 = x.astype(np.float64)
    e = np.exp(x64 - x64.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def _log_softmax64(x: np.ndarray, axis: int) -> np.ndarray:
    s = x.astype(np.float64)
    s = s - s.max(axis=axis, keepdims=True)
    return s - np.log(np.exp(s).sum(axis=axis, keepdims=True))


def test_softmax_over_a_long_axis():
    x = np.linspace(-4, 4, 5000).astype(F16)[None]
    exact = _softmax64(x, -1)
    assert_rounded_once(run_like("nn.softmax", {"axis": -1}, [x], x), exact, 2.0**-20 * exact)
    exact = _log_softmax64(x, -1)
    assert_rounded_once(run_like("nn.log_softmax", {"axis": -1}, [x], x), exact, 2.0**-18)


@KERNEL_SETTINGS
@given(data=st.data())
def test_softmax_log_softmax_round_once(data):
    shape = data.draw(hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=30))
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    x = data.draw(f16_arrays(shape, quarter_values(8)))
    exact = _softmax64(x, axis)
    assert_rounded_once(run_like("nn.softmax", {"axis": axis}, [x], x), exact, 2.0**-20 * exact)
    exact = _log_softmax64(x, axis)
    # float32 arithmetic on terms up to 16 in magnitude: absolute noise of a few 2^-24 * 16
    got = run_like("nn.log_softmax", {"axis": axis}, [x], x)
    assert_rounded_once(got, exact, 2.0**-17)


def _layer_norm64(x, gamma, beta, axis, eps):
    x64 = x.astype(np.float64)
    b = (-1,) + (1,) * (x.ndim - axis % x.ndim - 1)
    mean = x64.mean(axis=axis, keepdims=True)
    var = ((x64 - mean) ** 2).mean(axis=axis, keepdims=True)
    deviation = np.sqrt(var + eps)
    xh = (x64 - mean) / deviation
    out = xh * gamma.astype(np.float64).reshape(b) + beta.astype(np.float64).reshape(b)
    scale = 1 + np.abs(xh).max() * np.abs(gamma).max() + np.abs(beta).max()
    # The float32 mean is rounded (|mean| 2^-24 at most), and every centred value carries that
    # error, divided by the deviation: large where the values sit far from 0 close together
    # (-511.5, -511.75, -511.75: 2.6e-4 on the normalised values).
    centring = (np.abs(mean) / deviation).max() * 2.0**-23 * np.abs(gamma).max()
    return out, scale, centring


def test_layer_norm_of_values_whose_squares_overflow_float16():
    x = np.full((2, 100), 1000.0, F16)
    x[:, ::2] = -1000.0  # mean 0, variance 1e6 (> 65504)
    gamma, beta = np.ones(100, F16), np.zeros(100, F16)
    got = run_like("nn.layer_norm", {"axis": -1, "epsilon": 1e-5}, [x, gamma, beta], x)
    np.testing.assert_array_equal(got, np.where(x > 0, 1.0, -1.0).astype(F16))


@KERNEL_SETTINGS
@given(data=st.data())
def test_layer_norm_rounds_once(data):
    shape = data.draw(hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=30))
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    x = data.draw(f16_arrays(shape))
    gamma = data.draw(f16_arrays((shape[axis],), quarter_values(4)))
    beta = data.draw(f16_arrays((shape[axis],), quarter_values(4)))
    exact, scale, centring = _layer_norm64(x, gamma, beta, axis, 1e-5)
    got = run_like("nn.layer_norm", {"axis": axis, "epsilon": 1e-5}, [x, gamma, beta], x)
    assert_rounded_once(got, exact, 2.0**-18 * scale + centring)


def test_layer_norm_of_close_values_far_from_zero():
    # Found by the test above: the float32 mean of -511.5, -511.75, -511.75 is rounded by ~3e-5,
    # a quarter of a float16 ulp of the result once divided by the deviation (0.118).
    x = np.array([-511.5, -511.75, -511.75], F16)
    gamma, beta = np.array([0, 0, 0.25], F16), np.zeros(3, F16)
    exact, scale, centring = _layer_norm64(x, gamma, beta, 0, 1e-5)
    got = run_like("nn.layer_norm", {"axis": 0, "epsilon": 1e-5}, [x, gamma, beta], x)
    assert_rounded_once(got, exact, 2.0**-18 * scale + centring)
    assert centring > 1e-5  # what the bound needed beyond half an ulp here


# ---- convolution and pooling -----------------------------------------------------------------
def _conv64(x, w, pad):
    top, left, bottom, right = pad
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (top, bottom), (left, right)))
    o, _, kh, kw = w.shape
    oh, ow = xp.shape[2] - kh + 1, xp.shape[3] - kw + 1
    out = np.zeros((x.shape[0], o, oh, ow))
    for i in range(kh):
        for j in range(kw):
            out += np.einsum("nchw,oc->nohw", xp[:, :, i : i + oh, j : j + ow], w[:, :, i, j])
    return out


def test_conv2d_accumulates_in_float32():
    # 200 channels of +-1000 (partial sums overflow float16) and 300 channels near 1 (partial
    # sums stall at 2048), through a padded 3x3 window (a strided view, not one inner loop)
    c = 500
    x = np.ones((1, c, 4, 4), F16)
    x[0, :100] = 1000.0
    x[0, 100:200] = -1000.0
    x[0, 200::4] = 1.25
    w = np.ones((2, c, 3, 3), F16)
    w[1, ::2] = 0.5
    attrs = {"strides": (1, 1), "padding": (1, 1), "dilation": (1, 1), "groups": 1}
    exact = _conv64(x, w, (1, 1, 1, 1))
    got = run_like("nn.conv2d", attrs, [x, w], exact.astype(F16))
    assert_rounded_once(got, exact)


@KERNEL_SETTINGS
@given(data=st.data())
def test_conv2d_rounds_once(data):
    c, o = data.draw(st.integers(1, 40)), data.draw(st.integers(1, 3))
    kh, kw = data.draw(st.integers(1, 3)), data.draw(st.integers(1, 3))
    pad = tuple(data.draw(st.lists(st.integers(0, 2), min_size=4, max_size=4)))
    h = data.draw(st.integers(max(kh - pad[0] - pad[2], 1), 5))
    w_ = data.draw(st.integers(max(kw - pad[1] - pad[3], 1), 5))
    small = quarter_values(8)
    x = data.draw(f16_arrays((data.draw(st.integers(0, 2)), c, h, w_), small))
    w = data.draw(f16_arrays((o, c, kh, kw), small))
    exact = _conv64(x, w, pad)
    attrs = {"strides": (1, 1), "padding": pad, "dilation": (1, 1), "groups": 1}
    assert_rounded_once(run_like("nn.conv2d", attrs, [x, w], exact.astype(F16)), exact)


def test_conv2d_transpose_accumulates_in_float32():
    # 200 input channels of +-1000 (partial sums overflow float16) and 300 near 1 (partial sums
    # stall at 2048); with stride 1 and a 3x3 kernel, inner pixels also sum over 9 taps
    c = 500
    x = np.ones((1, c, 4, 4), F16)
    x[0, :100] = 1000.0
    x[0, 100:200] = -1000.0
    x[0, 200::4] = 1.25
    w = np.ones((c, 2, 3, 3), F16)
    w[::2, 1] = 0.5
    attrs = {
        "strides": (1, 1),
        "padding": (1, 1),
        "output_padding": (0, 0),
        "dilation": (1, 1),
        "groups": 1,
    }
    # transposed = a convolution of the zero-padded input by the flipped, transposed kernel
    flipped = np.ascontiguousarray(w.transpose(1, 0, 2, 3)[:, :, ::-1, ::-1])
    exact = _conv64(x, flipped, (1, 1, 1, 1))
    got = run_like("nn.conv2d_transpose", attrs, [x, w], exact.astype(F16))
    assert_rounded_once(got, exact)


def test_avg_pools_of_1000s_are_1000():
    x = np.full((1, 2, 10, 10), 1000.0, F16)  # window sums of 100000 overflow float16
    attrs = {"pool_size": (10, 10), "strides": (1, 1), "padding": (0, 0), "dilation": (1, 1)}
    got = run_kernel("nn.avg_pool2d", attrs, [x], [((1, 2, 1, 1), F16)])[0]
    np.testing.assert_array_equal(got, 1000.0)
    got = run_kernel("nn.global_avg_pool2d", {}, [x], [((1, 2, 1, 1), F16)])[0]
    np.testing.assert_array_equal(got, 1000.0)


def test_avg_pools_keep_the_precision_of_long_sums():
    plane = ones_plus_small(64 * 64).reshape(64, 64)  # mean 1.0625 = 4352 / 4096
    x = np.stack([plane, plane.T])[None]
    exact = x.astype(np.float64).mean(axis=(2, 3), keepdims=True)
    attrs = {"pool_size": (64, 64), "strides": (1, 1), "padding": (0, 0), "dilation": (1, 1)}
    assert_rounded_once(run_like("nn.avg_pool2d", attrs, [x], exact.astype(F16)), exact)
    assert_rounded_once(run_like("nn.global_avg_pool2d", {}, [x], exact.astype(F16)), exact)


@KERNEL_SETTINGS
@given(data=st.data())
def test_avg_pool2d_rounds_once(data):
    size = (data.draw(st.integers(1, 4)), data.draw(st.integers(1, 4)))
    pad = tuple(data.draw(st.integers(0, s - 1)) for s in (*size, *size))
    strides = (data.draw(st.integers(1, 2)), data.draw(st.integers(1, 2)))
    h = data.draw(st.integers(max(size[0] - pad[0] - pad[2], 1), 6))
    w = data.draw(st.integers(max(size[1] - pad[1] - pad[3], 1), 6))
    x = data.draw(f16_arrays((data.draw(st.integers(0, 2)), 2, h, w)))
    top, left, bottom, right = pad
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (top, bottom), (left, right)))
    real = np.pad(np.ones((h, w)), ((top, bottom), (left, right)))
    oh = (h + top + bottom - size[0]) // strides[0] + 1
    ow = (w + left + right - size[1]) // strides[1] + 1
    exact = np.zeros((x.shape[0], 2, oh, ow))
    for i in range(oh):
        for j in range(ow):
            rs = slice(i * strides[0], i * strides[0] + size[0])
            cs = slice(j * strides[1], j * strides[1] + size[1])
            exact[:, :, i, j] = xp[:, :, rs, cs].sum(axis=(2, 3)) / real[rs, cs].sum()
    attrs = {"pool_size": size, "strides": strides, "padding": pad, "dilation": (1, 1)}
    got = run_like("nn.avg_pool2d", attrs, [x], exact.astype(F16))
    assert_rounded_once(got, exact, 2.0**-22 * np.abs(exact))
    g = run_like("nn.global_avg_pool2d", {}, [x], x.mean(axis=(2, 3), keepdims=True))
    exact = x.astype(np.float64).mean(axis=(2, 3), keepdims=True)
    assert_rounded_once(g, exact, 2.0**-22 * np.abs(exact))


def test_float32_kernels_still_write_their_own_dtype():
    x = np.full((3, 100), 1000.0, np.float32)
    got = run_kernel("mean", {**R, "axis": 1}, [x], [((3,), np.float32)])[0]
    assert got.dtype == np.float32 and (got == 1000).all()
    got = run_like("nn.softmax", {"axis": -1}, [x], x)
    assert got.dtype == np.float32 and np.allclose(got, 0.01)


# ---- end to end: the compiler, the VM and the reference interpreter -------------------------
MEAN = """
def @main(%x: Tensor[(n, m), float16]) -> (Tensor[(m,), float16], Tensor[(n,), float16]) {
  (mean(%x, axis=0), mean(%x, axis=1))
}
"""
LAYER_NORM = """
def @main(%x: Tensor[(n, m), float16], %g: Tensor[(m,), float16], %b: Tensor[(m,), float16]) -> Tensor[(n, m), float16] {
  nn.layer_norm(%x, %g, %b)
}
"""
SUM = """
def @main(%x: Tensor[(n, m), float16]) -> Tensor[(m,), float16] {
  sum(%x, axis=0)
}
"""
FUSED_SUM = """
def @main(%x: Tensor[(n, m), float16]) -> Tensor[(m,), float16] {
  nn.relu(sum(%x, axis=0))
}
"""
SOFTMAX = """
def @main(%x: Tensor[(n, m), float16]) -> Tensor[(n, m), float16] {
  nn.softmax(%x)
}
"""


def test_end_to_end_mean_of_1000s():
    vm = ds.VirtualMachine(ds.compile(MEAN))
    x = np.full((100, 100), 1000.0, F16)
    cols, rows = vm.run(x)
    np.testing.assert_array_equal(cols, np.full(100, 1000.0, F16))
    np.testing.assert_array_equal(rows, np.full(100, 1000.0, F16))
    # the reference interpreter agrees (it accumulates float16 in float32 too)
    ref_cols, ref_rows = interpret(MEAN, x)
    np.testing.assert_array_equal(ref_cols, cols)
    np.testing.assert_array_equal(ref_rows, rows)


def test_end_to_end_mean_keeps_precision_along_the_batch_axis():
    col = ones_plus_small(4096)
    x = np.stack([col, col[::-1], np.ones(4096, F16)], axis=1)  # (4096, 3)
    cols, rows = ds.VirtualMachine(ds.compile(MEAN)).run(x)
    assert_rounded_once(np.asarray(cols), x.astype(np.float64).mean(axis=0))
    assert_rounded_once(np.asarray(rows), x.astype(np.float64).mean(axis=1))
    ref_cols, _ = interpret(MEAN, x)
    np.testing.assert_array_equal(ref_cols, cols)
    # a float16 numpy sum over the outer axis alone would stop at 2048: the reference must not
    got = ds.VirtualMachine(ds.compile(SUM)).run(x)
    ref = interpret(SUM, x)
    assert_rounded_once(np.asarray(got), x.astype(np.float64).sum(axis=0))
    np.testing.assert_array_equal(ref, got)
    # the reduction as the anchor of a fused kernel (relu its epilogue): the same kernel runs
    fused = ds.compile(FUSED_SUM)
    assert [k.name for k in fused.kernels] == ["fused_sum_relu"]
    np.testing.assert_array_equal(ds.VirtualMachine(fused).run(x), got)


def test_end_to_end_layer_norm_and_softmax():
    x = np.full((3, 200), 1000.0, F16)
    x[:, ::2] = -1000.0
    g, b = np.ones(200, F16), np.zeros(200, F16)
    got = ds.VirtualMachine(ds.compile(LAYER_NORM)).run(x, g, b)
    np.testing.assert_array_equal(got, np.where(x > 0, 1.0, -1.0).astype(F16))
    np.testing.assert_array_equal(interpret(LAYER_NORM, x, g, b), got)

    rng = np.random.default_rng(0)
    y = rng.uniform(-8, 8, (4, 3000)).astype(F16)
    got = np.asarray(ds.VirtualMachine(ds.compile(SOFTMAX)).run(y))
    exact = _softmax64(y, -1)
    assert_rounded_once(got, exact, 2.0**-20 * exact)
    assert math.isclose(float(got.astype(np.float64).sum(axis=-1).mean()), 1.0, rel_tol=1e-3)
