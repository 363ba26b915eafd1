"""Neural-network kernels against plain numpy references (loops for conv and pooling)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st
from vm_testlib import FLOATS, INTS, KERNEL_SETTINGS, arrays, assert_same, run_like, tol

FLOAT = st.sampled_from(FLOATS)
NUM = st.sampled_from(INTS + FLOATS)


@KERNEL_SETTINGS
@given(data=st.data(), dtype=NUM)
def test_dense_matmul_batch_matmul(data, dtype):
    b, m, k, n = (data.draw(st.integers(0, 3)) for _ in range(4))
    small = True
    x = data.draw(arrays(dtype, (m, k), small))
    w = data.draw(arrays(dtype, (n, k), small))
    e = np.matmul(x, w.T)
    assert_same(run_like("nn.dense", {}, [x, w], e), e, tol(dtype))
    y = data.draw(arrays(dtype, (k, n), small))
    e = np.matmul(x, y)
    assert_same(run_like("nn.matmul", {}, [x, y], e), e, tol(dtype))
    ta, tb = data.draw(st.booleans()), data.draw(st.booleans())
    bx = data.draw(arrays(dtype, (b, k, m) if ta else (b, m, k), small))
    by = data.draw(arrays(dtype, (b, n, k) if tb else (b, k, n), small))
    e = np.matmul(bx.swapaxes(1, 2) if ta else bx, by.swapaxes(1, 2) if tb else by)
    got = run_like("nn.batch_matmul", {"transpose_a": ta, "transpose_b": tb}, [bx, by], e)
    assert_same(got, e, tol(dtype))


def test_batch_matmul_transposes_b_by_default():
    from vm.kernels import get_kernel_factory

    x, y = np.ones((1, 2, 3), np.float32), np.ones((1, 4, 3), np.float32)
    out = np.empty((1, 2, 4), np.float32)
    attrs = {"transpose_a": False, "transpose_b": True}  # the catalogue's defaults
    get_kernel_factory("nn.batch_matmul")(attrs)(x, y, out)
    assert (out == 3).all()


@KERNEL_SETTINGS
@given(data=st.data(), dtype=NUM)
def test_bias_add(data, dtype):
    shape = tuple(data.draw(st.lists(st.integers(0, 3), min_size=1, max_size=4)))
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    x = data.draw(arrays(dtype, shape, True))
    bias = data.draw(arrays(dtype, (shape[axis],), True))
    e = x + bias.reshape((-1,) + (1,) * (len(shape) - axis % len(shape) - 1))
    assert_same(run_like("nn.bias_add", {"axis": axis}, [x, bias], e), e)


@KERNEL_SETTINGS
@given(data=st.data(), dtype=FLOAT)
def test_softmax_log_softmax_layer_norm(data, dtype):
    shape = tuple(data.draw(st.lists(st.integers(1, 4), min_size=1, max_size=3)))
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    x = data.draw(arrays(dtype, shape, True))
    x64 = x.astype(np.float64)
    ex = np.exp(x64 - x64.max(axis=axis, keepdims=True))
    sm = ex / ex.sum(axis=axis, keepdims=True)
    assert_same(run_like("nn.softmax", {"axis": axis}, [x], x), sm.astype(dtype), tol(dtype))
    lsm = np.log(sm)
    assert_same(
        run_like("nn.log_softmax", {"axis": axis}, [x], x), lsm.astype(dtype), tol(dtype) * 10
    )
    gamma = data.draw(arrays(dtype, (shape[axis],), True))
    beta = data.draw(arrays(dtype, (shape[axis],), True))
    mean = x64.mean(axis=axis, keepdims=True)
    var = x64.var(axis=axis, keepdims=True)
    b = (-1,) + (1,) * (len(shape) - axis % len(shape) - 1)
    ln = (x64 - mean) / np.sqrt(var + 1e-5) * gamma.reshape(b) + beta.reshape(b)
    got = run_like("nn.layer_norm", {"axis": axis, "epsilon": 1e-5}, [x, gamma, beta], x)
    if dtype == "float16":
        np.testing.assert_allclose(got.astype(np.float64), ln, atol=0.1, rtol=0.05)
    else:
        # gamma * x_hat + beta can cancel: the error is a few ulps of the *terms*, not of the
        # (possibly tiny) result, so the absolute tolerance scales with them. The mean itself
        # is off by a few ulps of x, and centring divides that by sqrt(var + epsilon): for
        # nearly constant x (var ~ 0) it is amplified up to |x| / sqrt(epsilon).
        assert got.dtype == np.dtype(dtype)
        eps = np.finfo(dtype).eps
        x_hat = (x64 - mean) / np.sqrt(var + 1e-5)
        centring = np.abs(x64).max() / np.sqrt(var + 1e-5).min()
        scale = 1 + np.abs(gamma).max() * (np.abs(x_hat).max() + centring) + np.abs(beta).max()
        np.testing.assert_allclose(got.astype(np.float64), ln, rtol=1e-4, atol=64 * eps * scale)


def _conv_ref(x, w, strides, pad, dilation, groups):
    top, left, bottom, right = pad
    x = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (top, bottom), (left, right)))
    n, _c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    oh = (h - dilation[0] * (kh - 1) - 1) // strides[0] + 1
    ow = (wd - dilation[1] * (kw - 1) - 1) // strides[1] + 1
    out = np.zeros((n, o, oh, ow))
    og = o // groups
    for b in range(n):
        for oc in range(o):
            g = oc // og
            for i in range(oh):
                for j in range(ow):
                    for ci in range(cg):
                        for p in range(kh):
                            for q in range(kw):
                                out[b, oc, i, j] += (
                                    x[
                                        b,
                                        g * cg + ci,
                                        i * strides[0] + p * dilation[0],
                                        j * strides[1] + q * dilation[1],
                                    ]
                                    * w[oc, ci, p, q]
                                )
    return out


@KERNEL_SETTINGS
@given(data=st.data(), dtype=FLOAT)
def test_conv2d(data, dtype):
    groups = data.draw(st.integers(1, 2))
    cg, og = data.draw(st.integers(1, 2)), data.draw(st.integers(1, 2))
    kh, kw = data.draw(st.integers(1, 3)), data.draw(st.integers(1, 3))
    strides = (data.draw(st.integers(1, 2)), data.draw(st.integers(1, 2)))
    dilation = (data.draw(st.integers(1, 2)), data.draw(st.integers(1, 2)))
    padding = tuple(data.draw(st.lists(st.integers(0, 2), min_size=4, max_size=4)))
    two = data.draw(st.booleans())
    if two:
        padding = padding[:2]
    pad4 = padding * 2 if two else padding
    h = data.draw(
        st.integers(dilation[0] * (kh - 1) + 1 - pad4[0] - pad4[2], 6).filter(lambda v: v >= 0)
    )
    w_ = data.draw(
        st.integers(dilation[1] * (kw - 1) + 1 - pad4[1] - pad4[3], 6).filter(lambda v: v >= 0)
    )
    n = data.draw(st.integers(0, 2))
    x = data.draw(arrays(dtype, (n, cg * groups, h, w_), True))
    w = data.draw(arrays(dtype, (og * groups, cg, kh, kw), True))
    e = _conv_ref(x, w, strides, pad4, dilation, groups)
    attrs = {"strides": strides, "padding": padding, "dilation": dilation, "groups": groups}
    got = run_like("nn.conv2d", attrs, [x, w], e.astype(dtype))
    if dtype == "float16":
        np.testing.assert_allclose(got.astype(np.float64), e, rtol=0.02, atol=0.5)
    else:
        assert_same(got, e.astype(dtype), 1e-4)


def _pool_ref(x, size, strides, pad, kind, dilation=(1, 1)):
    """Max or mean over the real (unpadded) taps of each dilated window; None if a window
    holds none."""
    n, c, h, w = x.shape
    top, left, bottom, right = pad
    oh = (h + top + bottom - dilation[0] * (size[0] - 1) - 1) // strides[0] + 1
    ow = (w + left + right - dilation[1] * (size[1] - 1) - 1) // strides[1] + 1
    out = np.zeros((n, c, oh, ow))
    for i in range(oh):
        for j in range(ow):
            rows = [i * strides[0] - top + p * dilation[0] for p in range(size[0])]
            cols = [j * strides[1] - left + q * dilation[1] for q in range(size[1])]
            rows, cols = [r for r in rows if 0 <= r < h], [q for q in cols if 0 <= q < w]
            if not rows or not cols:
                return None
            win = x[:, :, rows][:, :, :, cols].astype(np.float64)
            out[:, :, i, j] = win.max(axis=(2, 3)) if kind == "max" else win.mean(axis=(2, 3))
    return out


@pytest.mark.parametrize("kind", ["max", "avg"])
@KERNEL_SETTINGS
@given(data=st.data(), dtype=FLOAT)
def test_pool2d(kind, data, dtype):
    size = (data.draw(st.integers(1, 3)), data.draw(st.integers(1, 3)))
    strides = (data.draw(st.integers(1, 2)), data.draw(st.integers(1, 2)))
    dilation = (data.draw(st.integers(1, 3)), data.draw(st.integers(1, 3)))
    extent = [d * (k - 1) + 1 for d, k in zip(dilation, size, strict=True)]
    pad = (
        data.draw(st.integers(0, size[0] - 1)),
        data.draw(st.integers(0, size[1] - 1)),
        data.draw(st.integers(0, size[0] - 1)),
        data.draw(st.integers(0, size[1] - 1)),
    )
    h = data.draw(st.integers(max(extent[0] - pad[0] - pad[2], 1), 7))
    w = data.draw(st.integers(max(extent[1] - pad[1] - pad[3], 1), 7))
    x = data.draw(arrays(dtype, (data.draw(st.integers(0, 2)), 2, h, w)))
    e = _pool_ref(x, size, strides, pad, kind, dilation)
    assume(e is not None)  # every window must meet a real element (ONNX's pads < the kernel)
    e = e.astype(dtype)
    attrs = {"pool_size": size, "strides": strides, "padding": pad, "dilation": dilation}
    assert_same(run_like(f"nn.{kind}_pool2d", attrs, [x], e), e, tol(dtype) * 10)


def test_avg_pool_counts_the_real_taps_of_a_dilated_window():
    # a 2x2 window dilated by 2 over a 3x3 image padded by 1: the first window's taps are at
    # rows/columns -1 and 1, so it holds one real element, x[1, 1] = 4
    x = np.arange(9, dtype=np.float64).reshape(1, 1, 3, 3)
    attrs = {"pool_size": (2, 2), "strides": (1, 1), "padding": (1, 1), "dilation": (2, 2)}
    got = run_like("nn.avg_pool2d", attrs, [x], np.empty((1, 1, 3, 3)))
    assert got[0, 0, 0, 0] == 4 and got[0, 0, 1, 1] == np.mean([0, 2, 6, 8])


def _conv_transpose_ref(x, w, strides, pad, output_padding, dilation, groups):
    """The direct definition: input pixel (y, x) times weight tap (p, q) lands on output
    (y * stride + p * dilation - top, x * stride + q * dilation - left), if inside."""
    top, left, bottom, right = pad
    n, c, h, wd = x.shape
    _, og, kh, kw = w.shape
    cg = c // groups
    oh = (h - 1) * strides[0] - top - bottom + dilation[0] * (kh - 1) + output_padding[0] + 1
    ow = (wd - 1) * strides[1] - left - right + dilation[1] * (kw - 1) + output_padding[1] + 1
    out = np.zeros((n, og * groups, oh, ow))
    for ci in range(c):
        g = ci // cg
        for i in range(h):
            for j in range(wd):
                for p in range(kh):
                    for q in range(kw):
                        r = i * strides[0] + p * dilation[0] - top
                        s = j * strides[1] + q * dilation[1] - left
                        if 0 <= r < oh and 0 <= s < ow:
                            contribution = x[:, ci, i, j, None] * w[ci, :, p, q].astype(np.float64)
                            out[:, g * og : (g + 1) * og, r, s] += contribution
    return out


@KERNEL_SETTINGS
@given(data=st.data(), dtype=FLOAT)
def test_conv2d_transpose(data, dtype):
    groups = data.draw(st.integers(1, 2))
    cg, og = data.draw(st.integers(0, 2)), data.draw(st.integers(1, 2))
    kh, kw = data.draw(st.integers(1, 3)), data.draw(st.integers(1, 3))
    strides = (data.draw(st.integers(1, 3)), data.draw(st.integers(1, 3)))
    dilation = (data.draw(st.integers(1, 2)), data.draw(st.integers(1, 2)))
    output_padding = tuple(
        data.draw(st.integers(0, max(s, d) - 1)) for s, d in zip(strides, dilation, strict=True)
    )
    padding = tuple(data.draw(st.lists(st.integers(0, 3), min_size=4, max_size=4)))
    two = data.draw(st.booleans())
    if two:
        padding = padding[:2]
    pad4 = padding * 2 if two else padding
    h, w_ = data.draw(st.integers(1, 4)), data.draw(st.integers(1, 4))
    oh = (h - 1) * strides[0] - pad4[0] - pad4[2] + dilation[0] * (kh - 1) + output_padding[0] + 1
    ow = (w_ - 1) * strides[1] - pad4[1] - pad4[3] + dilation[1] * (kw - 1) + output_padding[1] + 1
    assume(oh >= 0 and ow >= 0)
    n = data.draw(st.integers(0, 2))
    x = data.draw(arrays(dtype, (n, cg * groups, h, w_), True))
    w = data.draw(arrays(dtype, (cg * groups, og, kh, kw), True))
    e = _conv_transpose_ref(x, w, strides, pad4, output_padding, dilation, groups)
    attrs = {
        "strides": strides,
        "padding": padding,
        "output_padding": output_padding,
        "dilation": dilation,
        "groups": groups,
    }
    got = run_like("nn.conv2d_transpose", attrs, [x, w], e.astype(dtype))
    if dtype == "float16":
        np.testing.assert_allclose(got.astype(np.float64), e, rtol=0.02, atol=0.5)
    else:
        assert_same(got, e.astype(dtype), 1e-4)


CONV_T = {
    "strides": (2, 2),
    "padding": (0, 0, 0, 0),
    "output_padding": (0, 0),
    "dilation": (1, 1),
    "groups": 1,
}


def test_conv2d_transpose_writes_a_strided_output():
    x, w = np.ones((1, 1, 2, 2)), np.ones((1, 1, 2, 2))
    out = np.full((1, 1, 4, 8), np.nan)[:, :, :, ::2]  # a non-contiguous destination
    from vm.kernels import get_kernel_factory

    get_kernel_factory("nn.conv2d_transpose")(CONV_T)(x, w, out)
    np.testing.assert_array_equal(out, np.ones((1, 1, 4, 4)))


@pytest.mark.parametrize(
    ("attrs", "x", "w", "out", "message"),
    [
        (
            {},
            (1, 2, 2, 2),
            (3, 1, 2, 2),
            (1, 1, 4, 4),
            r"data \(1, 2, 2, 2\) and weight \(3, 1, 2, 2\) do not fit groups=1",
        ),
        (
            {"groups": 2},
            (1, 3, 2, 2),
            (3, 1, 2, 2),
            (1, 2, 4, 4),
            r"data \(1, 3, 2, 2\) .* groups=2",
        ),
        ({}, (1, 1, 2, 2), (1, 1, 2, 2), (1, 1, 3, 4), r"output should be \(1, 1, 4, 4\)"),
        ({}, (1, 1, 2), (1, 1, 2, 2), (1, 1, 4, 4), "expected NCHW data, a 4-d weight"),
        (
            {"strides": (0, 1)},
            (1, 1, 2, 2),
            (1, 1, 2, 2),
            (1, 1, 4, 4),
            r"strides \(0, 1\) .* 2 positive",
        ),
        (
            {"padding": (-1, 0)},
            (1, 1, 2, 2),
            (1, 1, 2, 2),
            (1, 1, 4, 4),
            r"strides .* padding \(-1, 0, -1, 0\)",
        ),
    ],
)
def test_conv2d_transpose_rejects_bad_shapes(attrs, x, w, out, message):
    with pytest.raises(ValueError, match="nn.conv2d_transpose: " + message):
        run_like(
            "nn.conv2d_transpose",
            {**CONV_T, **attrs},
            [np.ones(x), np.ones(w)],
            np.empty(out),
        )


def test_max_pool_padding_never_wins():
    x = -np.ones((1, 1, 2, 2), np.float32)
    attrs = {"pool_size": (2, 2), "strides": (1, 1), "padding": (1, 1, 1, 1), "dilation": (1, 1)}
    got = run_like("nn.max_pool2d", attrs, [x], np.empty((1, 1, 3, 3), np.float32))
    assert (got == -1).all()


def test_avg_pool_excludes_padding():
    x = np.ones((1, 1, 2, 2), np.float32)
    attrs = {"pool_size": (2, 2), "strides": (1, 1), "padding": (1, 1), "dilation": (1, 1)}
    got = run_like("nn.avg_pool2d", attrs, [x], np.empty((1, 1, 3, 3), np.float32))
    assert (got == 1).all()


@KERNEL_SETTINGS
@given(data=st.data(), dtype=FLOAT)
def test_global_pools(data, dtype):
    shape = (
        data.draw(st.integers(0, 2)),
        2,
        data.draw(st.integers(1, 3)),
        data.draw(st.integers(1, 3)),
    )
    x = data.draw(arrays(dtype, shape))
    e = x.mean(axis=(2, 3), keepdims=True)
    assert_same(run_like("nn.global_avg_pool2d", {}, [x], e), e, tol(dtype) * 10)
    e = x.max(axis=(2, 3), keepdims=True)
    assert_same(run_like("nn.global_max_pool2d", {}, [x], e), e)


@pytest.mark.parametrize(
    "shape",
    [(4, 288, 3, 3), (2, 5, 7, 9), (1, 3, 64, 64), (1, 2, 65, 64), (3, 1, 1, 1)],
    ids=["se-block", "odd", "plane-at-bound", "plane-past-bound", "one-pixel"],
)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("layout", ["contiguous", "strided"])
def test_global_avg_pool_on_both_paths(shape, dtype, layout):
    # planes up to MATVEC_POOL_MAX elements are a matrix-vector product with 1 / (H * W),
    # longer ones (and strided inputs) np.mean: both as accurate as the float64 mean allows
    rng = np.random.default_rng(sum(shape))
    base = (rng.standard_normal((*shape[:3], 2 * shape[3])) * 3 + 1).astype(dtype)
    x = base[..., ::2] if layout == "strided" else np.ascontiguousarray(base[..., ::2])
    want = x.astype(np.float64).mean(axis=(2, 3), keepdims=True)
    got = run_like("nn.global_avg_pool2d", {}, [x], want.astype(dtype))
    rtol = 1e-5 if dtype == np.float32 else 1e-13
    np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol * np.abs(x).max())
