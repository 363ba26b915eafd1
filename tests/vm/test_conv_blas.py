"""Convolution and pooling on BLAS (``vm/kernels/conv.py``, issue 27) against independent
oracles: the old einsum contraction of strided windows (float64, written here), a per-tap
scatter for the transposed convolution, masked window reductions for pooling, and onnxruntime
on one ``Conv`` node.

Each path is reached on purpose: 1x1 convolutions (plain matmul), one input channel per
group (depthwise, with and without a multiplier), groups that are neither 1 nor the channel
count (all on the im2col matmul, the groups its batch axis), the im2col buffer split into
blocks of rows or refused for the einsum fallback (a tiny ``SCRATCH_FACTOR``), the transposed convolution tap by tap, pooling per tap and by one
reduction. Every run is made twice, with outputs pre-filled by two different junk values: the
results must be identical (a kernel never reads ``out`` before writing it); and once more into
a strided output.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st
from numpy.lib.stride_tricks import sliding_window_view
from vm_testlib import KERNEL_SETTINGS

import vm.kernels.conv as conv
from vm.kernels import get_kernel_factory
from vm.kernels.constant_layouts import ConstantLayouts

DTYPES = st.sampled_from(["float16", "float32", "float64"])


def run(op: str, attrs: dict[str, Any], inputs: list[np.ndarray], shape: Any, dtype: Any) -> Any:
    """The kernel's output, run into NaN-filled and 7-filled buffers (which must agree); and
    once more into a strided (non-contiguous) output buffer."""
    results = []
    kernel = get_kernel_factory(op)(attrs)
    for fill in (np.nan, 7.0):
        out = np.full(shape, fill, dtype)
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            kernel(*inputs, out)
        results.append(out)
    np.testing.assert_array_equal(results[0], results[1])
    wide = np.full((*shape[:-1], 2 * shape[-1]), np.nan, dtype)
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        kernel(*inputs, wide[..., ::2])
    np.testing.assert_array_equal(wide[..., ::2], results[0])
    assert np.isnan(wide[..., 1::2]).all()  # nothing written outside the view
    return results[0]


def conv_oracle(x, w, strides, pad4, dilation, groups):
    """The old kernel's formulation, in float64: einsum of the padded input's windows."""
    top, left, bottom, right = pad4
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (top, bottom), (left, right)))
    o, cg, kh, kw = w.shape
    n = x.shape[0]
    ext = (dilation[0] * (kh - 1) + 1, dilation[1] * (kw - 1) + 1)
    oh = (xp.shape[2] - ext[0]) // strides[0] + 1
    ow = (xp.shape[3] - ext[1]) // strides[1] + 1
    out = np.zeros((n, o, oh, ow))
    if min(n, oh, ow, o, cg) == 0:
        return out
    win = sliding_window_view(xp, ext, axis=(2, 3))
    win = win[:, :, :: strides[0], :: strides[1], :: dilation[0], :: dilation[1]][:, :, :oh, :ow]
    og = o // groups
    for g in range(groups):
        out[:, g * og : (g + 1) * og] = np.einsum(
            "nchwij,ocij->nohw", win[:, g * cg : (g + 1) * cg], w[g * og : (g + 1) * og]
        )
    return out


def check_close(got: np.ndarray, expected: np.ndarray, x: np.ndarray, w: np.ndarray) -> None:
    """``got`` within float rounding of the float64 ``expected`` (float16: rounded once from
    float32 sums, so within a float16 ulp of the result plus float32 error of the terms)."""
    scale = 1 + float(np.abs(x.astype(np.float64)).max(initial=0)) * float(
        np.abs(w.astype(np.float64)).max(initial=0)
    ) * max(1, w[0].size if w.size else 1)
    dt = got.dtype
    if dt == np.float16:
        rtol, atol = 2e-3, 1e-5 * scale
    elif dt == np.float32:
        rtol, atol = 1e-5, 1e-6 * scale
    else:
        rtol, atol = 1e-12, 1e-13 * scale
    np.testing.assert_allclose(got.astype(np.float64), expected, rtol=rtol, atol=atol)


@st.composite
def conv_cases(draw: Any, depthwise: bool | None = None, small_maps: bool = False) -> Any:
    kind = draw(st.sampled_from(["plain", "depthwise", "multiplier", "grouped", "1x1"]))
    if depthwise is not None:
        kind = "depthwise" if depthwise else kind
    n = draw(st.integers(0, 3))
    if kind == "plain":
        groups, cg, og = 1, draw(st.integers(0, 5)), draw(st.integers(0, 5))
    elif kind == "depthwise":
        groups, cg, og = draw(st.integers(1, 7)), 1, 1
    elif kind == "multiplier":
        groups, cg, og = draw(st.integers(1, 5)), 1, draw(st.integers(2, 3))
    elif kind == "grouped":
        groups, cg, og = draw(st.integers(2, 4)), draw(st.integers(2, 3)), draw(st.integers(1, 3))
    else:
        groups, cg, og = draw(st.integers(1, 3)), draw(st.integers(1, 4)), draw(st.integers(1, 4))
    if kind == "1x1":
        kh = kw = 1
        strides, dilation = (1, 1), (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
        pad4 = (0, 0, 0, 0)
    else:
        kh, kw = draw(st.integers(1, 5)), draw(st.integers(1, 5))
        strides = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
        dilation = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
        pad4 = tuple(draw(st.integers(0, 3)) for _ in range(4))
        if draw(st.booleans()):  # no padding: the im2col buffer is one copy of a window view
            pad4 = (0, 0, 0, 0)
    h, w = draw(st.integers(0, 13)), draw(st.integers(0, 13))
    if small_maps:  # 1x1 to 3x3 maps under wide padding: taps that read padding only
        n, h, w = draw(st.integers(1, 9)), draw(st.integers(1, 3)), draw(st.integers(1, 3))
        if kind != "1x1":
            pad4 = tuple(draw(st.integers(0, 4)) for _ in range(4))
    ext = (dilation[0] * (kh - 1) + 1, dilation[1] * (kw - 1) + 1)
    assume(h + pad4[0] + pad4[2] >= ext[0] - 1 and w + pad4[1] + pad4[3] >= ext[1] - 1)
    dtype = draw(DTYPES)
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    x = rng.standard_normal((n, cg * groups, h, w)).astype(dtype)
    wt = rng.standard_normal((og * groups, cg, kh, kw)).astype(dtype)
    return x, wt, strides, pad4, dilation, groups


def attrs_of(strides, pad4, dilation, groups) -> dict[str, Any]:
    return {"strides": strides, "padding": pad4, "dilation": dilation, "groups": groups}


@KERNEL_SETTINGS
@given(case=conv_cases())
def test_conv2d_matches_the_einsum_oracle(case):
    x, w, strides, pad4, dilation, groups = case
    e = conv_oracle(x, w, strides, pad4, dilation, groups)
    got = run("nn.conv2d", attrs_of(strides, pad4, dilation, groups), [x, w], e.shape, x.dtype)
    check_close(got, e, x, w)


@KERNEL_SETTINGS
@given(case=conv_cases(depthwise=True))
def test_depthwise_conv2d_matches_the_einsum_oracle(case):
    x, w, strides, pad4, dilation, groups = case
    e = conv_oracle(x, w, strides, pad4, dilation, groups)
    got = run("nn.conv2d", attrs_of(strides, pad4, dilation, groups), [x, w], e.shape, x.dtype)
    check_close(got, e, x, w)


@pytest.mark.parametrize("fill", ["flat", "window", "taps"])
@KERNEL_SETTINGS
@given(case=conv_cases())
def test_conv2d_fills_agree_with_the_oracle(fill, case):
    # each way of filling the im2col buffer forced (``"auto"`` picks among them by shape):
    # "flat" stride-1 rows of a padded copy (others fall back to "window"), "window" the
    # window view of a padded copy, "taps" one clipped copy per tap
    x, w, strides, pad4, dilation, groups = case
    e = conv_oracle(x, w, strides, pad4, dilation, groups)
    with pytest.MonkeyPatch.context() as m:
        m.setattr(conv, "FILL", fill)
        got = run("nn.conv2d", attrs_of(strides, pad4, dilation, groups), [x, w], e.shape, x.dtype)
    check_close(got, e, x, w)


@pytest.mark.parametrize("fill", ["auto", "flat", "window", "taps"])
@KERNEL_SETTINGS
@given(case=conv_cases(small_maps=True))
def test_conv2d_on_small_padded_maps_matches_the_oracle(fill, case):
    # the taps that read padding only are dropped when their weights cost less than their
    # buffer (a 1x1 map's centre tap alone is a plain matmul); a tap set reading nothing
    # but padding gives zeros
    x, w, strides, pad4, dilation, groups = case
    e = conv_oracle(x, w, strides, pad4, dilation, groups)
    with pytest.MonkeyPatch.context() as m:
        m.setattr(conv, "FILL", fill)
        got = run("nn.conv2d", attrs_of(strides, pad4, dilation, groups), [x, w], e.shape, x.dtype)
    check_close(got, e, x, w)


def spied_products(monkeypatch: pytest.MonkeyPatch) -> list[tuple[tuple[int, ...], ...]]:
    """The (left, right) operand shapes of every product ``conv`` makes from now on (the
    products still run)."""
    calls: list[tuple[tuple[int, ...], ...]] = []
    real = conv._matmul

    def spy(a: np.ndarray, b: np.ndarray, out: np.ndarray, kept=None) -> None:
        calls.append((a.shape, b.shape))
        real(a, b, out, kept)

    monkeypatch.setattr(conv, "_matmul", spy)
    return calls


def planned_paths(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The path of every plan ``conv`` makes from now on (the plans are still made)."""
    paths: list[str] = []
    real = conv._plan

    def spy(*args, **kwargs):
        plan = real(*args, **kwargs)
        paths.append(plan.path)
        return plan

    monkeypatch.setattr(conv, "_plan", spy)
    return paths


def test_conv2d_on_a_padded_one_by_one_map_multiplies_the_centre_tap(monkeypatch):
    calls = spied_products(monkeypatch)
    rng = np.random.default_rng(3)
    x, w = rng.standard_normal((16, 4, 1, 1)), rng.standard_normal((6, 4, 3, 3))
    e = conv_oracle(x, w, (1, 1), (1, 1, 1, 1), (1, 1), 1)
    got = run("nn.conv2d", attrs_of((1, 1), (1, 1), (1, 1), 1), [x, w], e.shape, x.dtype)
    check_close(got, e, x, w)
    assert calls[0] == ((1, 6, 4), (16, 1, 4, 1))  # no im2col: the input times the centre tap
    # a large weight over few outputs keeps every tap (a gemv over the contiguous weight)
    calls.clear()
    x1 = x[:1]
    e = conv_oracle(x1, w, (1, 1), (1, 1, 1, 1), (1, 1), 1)
    got = run("nn.conv2d", attrs_of((1, 1), (1, 1), (1, 1), 1), [x1, w], e.shape, x.dtype)
    check_close(got, e, x1, w)
    assert calls[0][0][-2:] == (6, 36)


def draw_depthwise(data, dtype, kw_min, hw_max, outputs_max):
    """A depthwise convolution's input, weight, attributes and output size, drawn; at least 2
    and at most ``outputs_max`` outputs a plane."""
    n, c = data.draw(st.integers(1, 4)), data.draw(st.integers(1, 9))
    kh, kw = data.draw(st.integers(1, 5)), data.draw(st.integers(kw_min, 5))
    strides = (data.draw(st.integers(1, 3)), data.draw(st.integers(1, 3)))
    dilation = (data.draw(st.integers(1, 2)), data.draw(st.integers(1, 2)))
    pad4 = tuple(data.draw(st.integers(0, 3)) for _ in range(4))
    h, w = data.draw(st.integers(1, hw_max)), data.draw(st.integers(1, hw_max))
    oh = (h + pad4[0] + pad4[2] - dilation[0] * (kh - 1) - 1) // strides[0] + 1
    ow = (w + pad4[1] + pad4[3] - dilation[1] * (kw - 1) - 1) // strides[1] + 1
    assume(oh >= 1 and ow >= 1 and 2 <= oh * ow <= outputs_max)
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    x = rng.standard_normal((n, c, h, w)).astype(dtype)
    wt = rng.standard_normal((c, 1, kh, kw)).astype(dtype)
    return x, wt, strides, pad4, dilation, (oh, ow)


def check_depthwise(x, wt, strides, pad4, dilation):
    """The kernel against the oracle (into NaN-, 7-filled and strided outputs by ``run``)."""
    c = x.shape[1]
    e = conv_oracle(x, wt, strides, pad4, dilation, c)
    got = run("nn.conv2d", attrs_of(strides, pad4, dilation, c), [x, wt], e.shape, x.dtype)
    check_close(got, e, x, wt)


@KERNEL_SETTINGS
@given(data=st.data(), dtype=DTYPES)
def test_depthwise_conv2d_on_tiny_maps_runs_channels_last(data, dtype):
    # 2 to DEPTHWISE_LAST_MAX outputs a plane, the "dense" path off (it takes the small
    # planes): the channels-last path, checked to be the one taken, against the oracle
    x, wt, strides, pad4, dilation, out_hw = draw_depthwise(
        data, dtype, 2, 12, conv.DEPTHWISE_LAST_MAX
    )
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(conv, "DEPTHWISE_DENSE_MAX", 0)
        plan = conv._plan(x.shape, wt.shape, out_hw, pad4, strides, dilation, 1 << 30)
        assume(plan.path != "zeros")  # (every tap in the padding)
        assert plan.path == "last"
        check_depthwise(x, wt, strides, pad4, dilation)


@KERNEL_SETTINGS
@given(data=st.data(), dtype=DTYPES)
def test_depthwise_conv2d_on_small_planes_is_a_product_of_tap_matrices(data, dtype):
    # input plane times output plane within DEPTHWISE_DENSE_MAX: the "dense" path, checked to
    # be the one taken, against the oracle (batch 1: no copy of the input; batches: one)
    x, wt, strides, pad4, dilation, out_hw = draw_depthwise(data, dtype, 1, 8, 1 << 30)
    assume(out_hw[0] * out_hw[1] * x.shape[2] * x.shape[3] <= conv.DEPTHWISE_DENSE_MAX)
    plan = conv._plan(x.shape, wt.shape, out_hw, pad4, strides, dilation, 1 << 30)
    assume(plan.path != "zeros")
    assert plan.path == "dense"
    check_depthwise(x, wt, strides, pad4, dilation)


def test_depthwise_dense_path_at_its_bounds():
    # MobileNetV3's 5x5 on 4 x 120 channels of 6x6 and 1 x 120 of 4x4 take it; an input plane
    # times output plane past DEPTHWISE_DENSE_MAX (a 9x9 map), channels past
    # DEPTHWISE_DENSE_ELEMENTS, a scratch bound below its copies at batch 4, or one input
    # channel per group with a multiplier keep the paths before it
    same5 = ((2, 2, 2, 2), (1, 1), (1, 1))
    w = (120, 1, 5, 5)
    assert conv._plan((4, 120, 6, 6), w, (6, 6), *same5, 1 << 30).path == "dense"
    assert conv._plan((1, 120, 4, 4), w, (4, 4), *same5, 1 << 30).path == "dense"
    assert conv._plan((1, 8, 9, 9), (8, 1, 5, 5), (9, 9), *same5, 1 << 30).path != "dense"
    wide = conv.DEPTHWISE_DENSE_ELEMENTS // 36 // 36 + 1
    assert conv._plan((1, wide, 6, 6), (wide, 1, 5, 5), (6, 6), *same5, 1 << 30).path != "dense"
    assert conv._plan((4, 120, 6, 6), w, (6, 6), *same5, 1000).path != "dense"
    assert conv._plan((1, 120, 6, 6), (240, 1, 5, 5), (6, 6), *same5, 1 << 30).path != "dense"


def test_depthwise_dense_bound_of_a_kept_weight_is_per_image():
    # a kept weight's matrices are made once and read once a call for every image: at batch
    # 8, MobileNetV3's 240 channels of 8x8 (983,040 elements of matrices) take the "dense"
    # path, and LR-ASPP's 960 of 6x6 (1,244,160) at batch 2; at batch 1 neither does, nor
    # does a weight that is not kept, nor one past DEPTHWISE_DENSE_KEPT_MAX at any batch
    same5 = ((2, 2, 2, 2), (1, 1), (1, 1))
    w = (240, 1, 5, 5)
    assert conv.DEPTHWISE_DENSE_ELEMENTS < 240 * 64 * 64
    assert conv._plan((8, 240, 8, 8), w, (8, 8), *same5, 1 << 30, True).path == "dense"
    assert conv._plan((1, 240, 8, 8), w, (8, 8), *same5, 1 << 30, True).path != "dense"
    dilated = ((4, 4, 4, 4), (1, 1), (2, 2), 1 << 30, True)
    assert conv._plan((2, 960, 6, 6), (960, 1, 5, 5), (6, 6), *dilated).path == "dense"
    assert conv._plan((1, 960, 6, 6), (960, 1, 5, 5), (6, 6), *dilated).path != "dense"
    assert conv._plan((8, 240, 8, 8), w, (8, 8), *same5, 1 << 30, False).path != "dense"
    big = conv.DEPTHWISE_DENSE_KEPT_MAX // (64 * 64) + 1
    shape = (64, big, 8, 8)
    assert conv._plan(shape, (big, 1, 5, 5), (8, 8), *same5, 1 << 40, True).path != "dense"


def test_depthwise_dense_path_of_a_kept_weight_matches_the_oracle():
    # the batch-8 case above, end to end through the kernel with its weight kept
    rng = np.random.default_rng(3)
    x = rng.standard_normal((8, 240, 8, 8)).astype(np.float32)
    wt = rng.standard_normal((240, 1, 5, 5)).astype(np.float32)
    attrs = {"strides": (1, 1), "dilation": (1, 1), "groups": 240, "padding": (2, 2, 2, 2)}
    kernel = conv.conv2d(attrs).with_constants({1: wt})
    out = np.empty((8, 240, 8, 8), np.float32)
    kernel(x, wt, out)
    kernel(x, wt, out)  # the second call reads the kept matrices
    check_close(out, conv_oracle(x, wt, (1, 1), (2, 2, 2, 2), (1, 1), 240), x, wt)


def test_depthwise_dense_path_where_the_matrices_cost_a_few_times_the_taps(monkeypatch):
    # a kept 7x7 weight: on two images of 12x12 (2.9x the taps' multiply-adds) past
    # DEPTHWISE_DENSE_MAX; on one image where the buffers' plan is the stride-1 window im2col
    # (12x12: 2.9x; 14x14: 4x); not on 16x16 (5.2x), not strided at one image, not for a weight
    # that is not kept, and neither with DEPTHWISE_DENSE_FEW = 0
    def path(n: int, c: int, hw: int, kept: bool = True, stride: int = 1) -> str:
        # the kernel's own scratch bound: past it the stride-1 buffer is the window one
        x = np.empty((n, c, hw, hw), np.float32)
        out_hw = ((hw - 1) // stride + 1,) * 2
        limit = conv._scratch_limit(x, np.empty((n, c, *out_hw), np.float32))
        geometry = ((3, 3, 3, 3), (stride, stride), (1, 1), limit, kept)
        return conv._plan(x.shape, (c, 1, 7, 7), out_hw, *geometry).path

    assert conv.DEPTHWISE_DENSE_MAX < 144 * 144  # past the small-plane bound
    assert path(2, 64, 12) == "dense"
    assert path(1, 96, 12) == "dense"
    assert path(1, 96, 14) == "dense"
    assert path(4, 32, 16) != "dense"
    assert path(1, 96, 12, kept=False) != "dense"
    assert path(1, 32, 12, stride=2) != "dense"
    monkeypatch.setattr(conv, "DEPTHWISE_DENSE_FEW", 0)
    assert path(2, 64, 12) != "dense"
    assert path(1, 96, 12) != "dense"


@KERNEL_SETTINGS
@given(data=st.data(), dtype=DTYPES, tiles=st.sampled_from([(8, 6, 4), (3, 2), (2,)]))
def test_depthwise_conv2d_by_tiles_of_tap_matrices(data, dtype, tiles):
    # the "tiled" path, its bounds lowered so that small kernels and planes take it (tiles
    # that divide the plane and tiles that overhang it), checked against the oracle
    x, wt, strides, pad4, dilation, out_hw = draw_depthwise(data, dtype, 1, 12, 1 << 30)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(conv, "DEPTHWISE_DENSE_MAX", 0)
        mp.setattr(conv, "TILED_MIN_TAPS", 1)
        mp.setattr(conv, "TILED_MIN_OUTPUTS", 1)
        mp.setattr(conv, "TILE_SIZES", tiles)
        plan = conv._plan(x.shape, wt.shape, out_hw, pad4, strides, dilation, 1 << 30)
        assume(plan.path not in ("zeros", "matmul"))
        if plan.path == "tiled":
            assert plan.block in tiles
        else:  # no tile size fits the im2col buffer the workspace rule counts
            assert conv._tile(x.shape[1], wt.shape[2:], out_hw, strides, dilation) is None
        check_depthwise(x, wt, strides, pad4, dilation)


def test_depthwise_tiled_path_at_its_bounds():
    # ConvNeXt's 7x7 depthwise on 56x56 and 28x28 planes takes it, with 8x8 tiles while their
    # matrices fit TILED_ELEMENTS and smaller ones past that; a 14x14 plane (too few outputs)
    # or channels past every tile size's matrices keep the paths before it. A 5x5 kernel takes
    # it where the im2col buffer would pass TILED_BUFFER_MIN, not below, nor where the rows
    # path applies (at stride 1 up to a 14x14 plane: DEPTHWISE_ROWS_STRIDE1_WIDE_MAX)
    same7 = ((3, 3, 3, 3), (1, 1), (1, 1), 1 << 30)
    assert conv._plan((4, 48, 56, 56), (48, 1, 7, 7), (56, 56), *same7).path == "tiled"
    assert conv._plan((4, 48, 56, 56), (48, 1, 7, 7), (56, 56), *same7).block == 8
    assert conv._plan((1, 192, 28, 28), (192, 1, 7, 7), (28, 28), *same7).block == 6
    assert conv._plan((1, 384, 28, 28), (384, 1, 7, 7), (28, 28), *same7).block == 4
    assert conv._plan((1, 768, 28, 28), (768, 1, 7, 7), (28, 28), *same7).path != "tiled"
    assert conv._plan((2, 96, 14, 14), (96, 1, 7, 7), (14, 14), *same7).path != "tiled"
    same5 = ((2, 2, 2, 2), (1, 1), (1, 1), 1 << 30)
    assert conv._plan((4, 48, 56, 56), (48, 1, 5, 5), (56, 56), *same5).path == "tiled"
    assert conv._plan((1, 40, 28, 28), (40, 1, 5, 5), (28, 28), *same5).path == "flat"
    assert conv._plan((4, 120, 28, 28), (120, 1, 5, 5), (28, 28), *same5).path == "tiled"
    assert conv._plan((4, 120, 14, 14), (120, 1, 5, 5), (14, 14), *same5).path == "rows"
    rng = np.random.default_rng(14)
    x, w = rng.standard_normal((2, 8, 17, 19)), rng.standard_normal((8, 1, 7, 7))
    assert conv._plan(x.shape, w.shape, (17, 19), *same7).path == "tiled"  # tiles overhang
    e = conv_oracle(x, w, (1, 1), (3, 3, 3, 3), (1, 1), 8)
    got = run("nn.conv2d", attrs_of((1, 1), (3, 3, 3, 3), (1, 1), 8), [x, w], e.shape, x.dtype)
    check_close(got, e, x, w)


def test_depthwise_rows_path_at_stride_1_stops_at_its_plane_bounds():
    # 3x3 kernels up to 10x10 outputs (DEPTHWISE_ROWS_STRIDE1_MAX), larger ones up to 14x14;
    # past them the stride-1 buffer (or a 5x5 kernel's tiles); strided convolutions keep the
    # rows path on larger planes (DEPTHWISE_ROWS_MAX)
    def path(c: int, hw: int, k: int, stride: int = 1) -> str:
        pad = (k // 2,) * 4
        out = (hw - 1) // stride + 1
        geometry = (pad, (stride, stride), (1, 1), 1 << 30)
        return conv._plan((4, c, hw, hw), (c, 1, k, k), (out, out), *geometry).path

    assert path(96, 10, 3) == "rows"
    assert path(96, 12, 3) == "flat"
    assert path(96, 24, 3) == "flat"
    assert path(96, 14, 5) == "rows"
    assert path(96, 16, 5) != "rows"
    assert path(96, 24, 3, stride=2) == "rows"


def test_depthwise_dense_matrices_are_kept_per_weight_and_plane():
    # a constant weight's matrices are made once per input plane and dtype; the kernel given
    # them (prepared) and the one making them every call give the same bits
    rng = np.random.default_rng(13)
    w = rng.standard_normal((16, 1, 3, 3)).astype(np.float32)
    attrs = attrs_of((1, 1), (1, 1, 1, 1), (1, 1), 16)
    plain = get_kernel_factory("nn.conv2d")(attrs)
    prepared = plain.with_constants({1: w})
    for shape in [(1, 16, 4, 4), (3, 16, 4, 4), (2, 16, 5, 3), (1, 16, 4, 4)]:
        x = rng.standard_normal(shape).astype(np.float32)
        a, b = (
            np.empty((shape[0], 16, *shape[2:]), np.float32),
            np.empty((shape[0], 16, *shape[2:]), np.float32),
        )
        plain(x, w, a)
        prepared(x, w, b)
        np.testing.assert_array_equal(a, b)
        check_close(b, conv_oracle(x, w, (1, 1), (1, 1, 1, 1), (1, 1), 16), x, w)
    (layouts,) = [
        c.cell_contents
        for c in prepared.__closure__
        if isinstance(c.cell_contents, ConstantLayouts)
    ]
    assert len(layouts) == 2  # the 4x4 and the 5x3 plane (float32)


def test_depthwise_channels_last_keeps_to_the_scratch_bound(monkeypatch):
    # a bound below the channels-last scratch: im2col (in blocks) instead, same results
    monkeypatch.setattr(conv, "DEPTHWISE_DENSE_MAX", 0)
    rng = np.random.default_rng(5)
    x, w = rng.standard_normal((2, 6, 3, 3)), rng.standard_normal((6, 1, 3, 3))
    plan = conv._plan(x.shape, w.shape, (3, 3), (1, 1, 1, 1), (1, 1), (1, 1), 1 << 20)
    assert plan.path == "last"
    assert conv._plan(x.shape, w.shape, (3, 3), (1, 1, 1, 1), (1, 1), (1, 1), 500).path != "last"
    e = conv_oracle(x, w, (1, 1), (1, 1, 1, 1), (1, 1), 6)
    monkeypatch.setattr(conv, "SCRATCH_FACTOR", 1)
    monkeypatch.setattr(conv, "PAD_SLACK", 0)
    limit = conv._scratch_limit(x, e)
    assert conv._plan(x.shape, w.shape, (3, 3), (1, 1, 1, 1), (1, 1), (1, 1), limit).path in (
        "window",
        "einsum",
    )
    got = run("nn.conv2d", attrs_of((1, 1), (1, 1, 1, 1), (1, 1), 6), [x, w], e.shape, x.dtype)
    check_close(got, e, x, w)


def test_conv2d_whose_taps_read_padding_only_gives_zeros():
    # a 1x1 map padded by 1, a 2-tap kernel dilated by 2: the taps read rows -1 and 1
    x, w = np.ones((2, 3, 1, 1)), np.ones((4, 3, 2, 2))
    e = conv_oracle(x, w, (1, 1), (1, 1, 1, 1), (2, 2), 1)
    got = run("nn.conv2d", attrs_of((1, 1), (1, 1), (2, 2), 1), [x, w], e.shape, x.dtype)
    assert got.shape == (2, 4, 1, 1) and not got.any()
    np.testing.assert_array_equal(got, e)


def _closure_cells(fn):
    """The cells of ``fn``'s closure and of the functions in it, transitively."""
    cells, todo, seen = [], [fn], set()
    while todo:
        f = todo.pop()
        if id(f) in seen:
            continue
        seen.add(id(f))
        for c in getattr(f, "__closure__", None) or ():
            cells.append(c)
            if callable(c.cell_contents):
                todo.append(c.cell_contents)
    return cells


def test_conv2d_plans_per_shape_are_bounded_and_keyed_by_shape(monkeypatch):
    monkeypatch.setattr(conv, "PLANS_MAX", 2)
    kernel = get_kernel_factory("nn.conv2d")(attrs_of((1, 1), (1, 1), (1, 1), 1))
    rng = np.random.default_rng(4)
    w = rng.standard_normal((3, 2, 3, 3))
    for h in [5, 6, 7, 5, 8, 6, 5]:  # more shapes than the cache holds, revisited
        x = rng.standard_normal((1, 2, h, h + 1))
        out = np.full((1, 3, h, h + 1), np.nan)
        kernel(x, w, out)
        check_close(out, conv_oracle(x, w, (1, 1), (1, 1, 1, 1), (1, 1), 1), x, w)
    cells = [c.cell_contents for c in _closure_cells(kernel) if isinstance(c.cell_contents, dict)]
    assert cells and all(len(c) <= 2 for c in cells)
    with pytest.raises(ValueError, match="output H, W should be"):  # a checked shape per key
        kernel(x, w, np.empty((1, 3, 5, 5)))


def test_a_kernels_plans_follow_a_setting_changed_after_it_was_made(monkeypatch):
    """The plans are keyed by the module's generation, which any setting of the module
    starts anew: a kernel made (and planned) before ``FILL`` changes plans again after it."""
    planned = planned_paths(monkeypatch)
    kernel = get_kernel_factory("nn.conv2d")(attrs_of((1, 1), (1, 1), (1, 1), 1))
    rng = np.random.default_rng(5)
    x, w = rng.standard_normal((2, 3, 9, 9)), rng.standard_normal((4, 3, 3, 3))
    want = conv_oracle(x, w, (1, 1), (1, 1, 1, 1), (1, 1), 1)
    for _ in range(2):
        out = np.full((2, 4, 9, 9), np.nan)
        kernel(x, w, out)
        check_close(out, want, x, w)
    assert len(planned) == 1  # planned once for the shape
    monkeypatch.setattr(conv, "FILL", "taps")
    kernel(x, w, out)
    check_close(out, want, x, w)
    assert planned[1:] == ["taps"]


@pytest.mark.parametrize("factor", [0, 1])
@KERNEL_SETTINGS
@given(case=conv_cases(depthwise=False))
def test_conv2d_with_a_small_scratch_bound_splits_or_falls_back(factor, case):
    # factor 1 with no slack: the im2col buffer is filled and multiplied in blocks of rows;
    # factor 0: not even one row fits, so the einsum contraction runs
    x, w, strides, pad4, dilation, groups = case
    e = conv_oracle(x, w, strides, pad4, dilation, groups)
    with pytest.MonkeyPatch.context() as m:
        m.setattr(conv, "SCRATCH_FACTOR", factor)
        m.setattr(conv, "PAD_SLACK", 0)
        got = run("nn.conv2d", attrs_of(strides, pad4, dilation, groups), [x, w], e.shape, x.dtype)
    check_close(got, e, x, w)


@pytest.mark.parametrize("fill", ["window", "taps"])
@KERNEL_SETTINGS
@given(case=conv_cases(depthwise=False), rows=st.sampled_from([1, 2, 3]))
def test_conv2d_in_cache_sized_blocks_of_rows_matches_the_oracle(fill, case, rows):
    # BLOCK_ELEMENTS cuts the "window" and "taps" buffers into blocks of rows (the last one
    # shorter) even where the scratch bound would take them whole
    x, w, strides, pad4, dilation, groups = case
    e = conv_oracle(x, w, strides, pad4, dilation, groups)
    with pytest.MonkeyPatch.context() as m:
        m.setattr(conv, "FILL", fill)
        m.setattr(conv, "BLOCK_ELEMENTS", 1 if rows == 1 else rows * x.size * w.shape[2] ** 2)
        got = run("nn.conv2d", attrs_of(strides, pad4, dilation, groups), [x, w], e.shape, x.dtype)
    check_close(got, e, x, w)


def test_conv2d_blocks_of_rows_follow_block_elements(monkeypatch):
    calls = spied_products(monkeypatch)
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((2, 3, 20, 20)), rng.standard_normal((4, 3, 3, 3))
    attrs = attrs_of((2, 2), (1, 1, 1, 1), (1, 1), 1)  # stride 2: the "window" path
    e = conv_oracle(x, w, (2, 2), (1, 1, 1, 1), (1, 1), 1)
    per_row = 2 * 3 * 9 * 10  # images x channels x taps x output columns
    monkeypatch.setattr(conv, "BLOCK_ELEMENTS", 4 * per_row)
    check_close(run("nn.conv2d", attrs, [x, w], e.shape, x.dtype), e, x, w)
    # 4, 4 and the last 2 of 10 output rows, in each of ``run``'s 3 runs of the kernel
    assert [b[-1] for _, b in calls] == [40, 40, 20] * 3
    calls.clear()
    monkeypatch.setattr(conv, "BLOCK_ELEMENTS", 1 << 62)
    check_close(run("nn.conv2d", attrs, [x, w], e.shape, x.dtype), e, x, w)
    assert [b[-1] for _, b in calls] == [100] * 3  # one block a run


@KERNEL_SETTINGS
@given(case=conv_cases(), images=st.sampled_from([1, 2, 3]))
def test_conv2d_flat_buffer_in_blocks_of_images_matches_the_oracle(case, images):
    # BLOCK_ELEMENTS cuts the stride-1 "flat" buffer into blocks of whole images (the last
    # one may hold fewer); strided cases fall back to "window" and must agree as well
    x, w, strides, pad4, dilation, groups = case
    e = conv_oracle(x, w, strides, pad4, dilation, groups)
    per_image = (x.shape[1] // groups) * groups * w.shape[2] * w.shape[3] * e.shape[2] * x.shape[3]
    with pytest.MonkeyPatch.context() as m:
        m.setattr(conv, "FILL", "flat")
        m.setattr(conv, "BLOCK_ELEMENTS", 1 if images == 1 else images * per_image)
        got = run("nn.conv2d", attrs_of(strides, pad4, dilation, groups), [x, w], e.shape, x.dtype)
    check_close(got, e, x, w)


@KERNEL_SETTINGS
@given(case=conv_cases(), rows=st.sampled_from([1, 2, 1 << 20]))
def test_conv2d_window_images_folded_into_one_product_match_the_oracle(case, rows):
    # FOLD_ROWS_RATIO 0: every "window" block of several images of one group is one product
    # with the images' columns side by side; blocks of 1 or 2 output rows, or whole images
    x, w, strides, pad4, dilation, groups = case
    e = conv_oracle(x, w, strides, pad4, dilation, groups)
    per_row = x.shape[0] * x.shape[1] * w.shape[2] * w.shape[3] * max(e.shape[3], 1)
    with pytest.MonkeyPatch.context() as m:
        m.setattr(conv, "FILL", "window")
        m.setattr(conv, "FOLD_ROWS_RATIO", 0)
        m.setattr(conv, "BLOCK_ELEMENTS", rows * per_row)
        got = run("nn.conv2d", attrs_of(strides, pad4, dilation, groups), [x, w], e.shape, x.dtype)
    check_close(got, e, x, w)


def test_conv2d_window_folds_images_where_the_weight_has_many_rows(monkeypatch):
    # ResNet-18's stride-2 3x3 to 256 channels on 8 images of 16x16 takes blocks of one
    # output row (8 columns an image): one (256, 1152) x (1152, 64) product a block, not one
    # (256, 1152) x (1152, 8) an image; 16 channels out keep one product an image
    calls = spied_products(monkeypatch)
    rng = np.random.default_rng(1)
    x = rng.standard_normal((8, 128, 16, 16)).astype(np.float32)
    attrs = attrs_of((2, 2), (1, 1, 1, 1), (1, 1), 1)
    for o, product in ((256, ((256, 1152), (1152, 64))), (16, ((1, 16, 1152), (8, 1, 1152, 8)))):
        w = rng.standard_normal((o, 128, 3, 3)).astype(np.float32)
        e = conv_oracle(x, w, (2, 2), (1, 1, 1, 1), (1, 1), 1)
        calls.clear()
        check_close(run("nn.conv2d", attrs, [x, w], e.shape, x.dtype), e, x, w)
        assert calls[0] == product, o
        assert len(calls) == 3 * 8  # eight blocks of one output row, in each of 3 runs


def test_conv2d_flat_blocks_of_images_follow_block_elements(monkeypatch):
    calls = spied_products(monkeypatch)
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((5, 3, 16, 16)), rng.standard_normal((4, 3, 3, 3))
    attrs = attrs_of((1, 1), (1, 1, 1, 1), (1, 1), 1)  # stride 1, padded: the "flat" path
    assert (
        conv._plan(
            (5, 3, 16, 16), (4, 3, 3, 3), (16, 16), (1, 1, 1, 1), (1, 1), (1, 1), 1 << 30
        ).path
        == "flat"
    )
    e = conv_oracle(x, w, (1, 1), (1, 1, 1, 1), (1, 1), 1)
    per_image = 3 * 9 * 16 * 18  # channels x taps x output rows x padded width
    monkeypatch.setattr(conv, "BLOCK_ELEMENTS", 2 * per_image + 1)
    check_close(run("nn.conv2d", attrs, [x, w], e.shape, x.dtype), e, x, w)
    # 2, 2 and the last 1 of 5 images, in each of ``run``'s 3 runs of the kernel
    assert [b[0] for _, b in calls] == [2, 2, 1] * 3
    calls.clear()
    monkeypatch.setattr(conv, "BLOCK_ELEMENTS", 1)  # at least one image a block
    check_close(run("nn.conv2d", attrs, [x, w], e.shape, x.dtype), e, x, w)
    assert [b[0] for _, b in calls] == [1] * 15
    calls.clear()
    monkeypatch.setattr(conv, "BLOCK_ELEMENTS", 1 << 62)
    check_close(run("nn.conv2d", attrs, [x, w], e.shape, x.dtype), e, x, w)
    assert [b[0] for _, b in calls] == [5] * 3  # the whole batch in one block


@pytest.mark.parametrize("fill", ["window", "taps"])
@KERNEL_SETTINGS
@given(case=conv_cases(depthwise=True), budget=st.sampled_from([1, 2, 3, 1 << 30]))
def test_grouped_conv2d_in_blocks_of_images_and_rows_matches_the_oracle(fill, case, budget):
    # GROUPED_BLOCK_ELEMENTS cuts a grouped convolution's "window"/"taps" buffer into blocks
    # of whole images, or of one image's rows past it; forced fills so that the window path
    # runs whatever the shape
    x, w, strides, pad4, dilation, groups = case
    e = conv_oracle(x, w, strides, pad4, dilation, groups)
    image_row = x.shape[1] * w.shape[2] * w.shape[3] * e.shape[3]
    with pytest.MonkeyPatch.context() as m:
        m.setattr(conv, "FILL", fill)
        m.setattr(conv, "GROUPED_BLOCK_ELEMENTS", budget * image_row)
        got = run("nn.conv2d", attrs_of(strides, pad4, dilation, groups), [x, w], e.shape, x.dtype)
    check_close(got, e, x, w)


def test_grouped_conv2d_blocks_follow_grouped_block_elements(monkeypatch):
    calls = spied_products(monkeypatch)
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((3, 4, 20, 20)), rng.standard_normal((4, 1, 3, 3))
    attrs = attrs_of((2, 2), (1, 1, 1, 1), (1, 1), 4)  # depthwise, stride 2: the "window" path
    assert (
        conv._plan(
            (3, 4, 20, 20), (4, 1, 3, 3), (10, 10), (1, 1, 1, 1), (2, 2), (1, 1), 1 << 30
        ).path
        == "window"
    )
    e = conv_oracle(x, w, (2, 2), (1, 1, 1, 1), (1, 1), 4)
    image = 4 * 9 * 10 * 10  # channels x taps x output rows x columns
    monkeypatch.setattr(conv, "GROUPED_BLOCK_ELEMENTS", 2 * image)
    check_close(run("nn.conv2d", attrs, [x, w], e.shape, x.dtype), e, x, w)
    # images 2 and 1, whole: in each of ``run``'s 3 runs of the kernel
    assert [b[:1] + b[-1:] for _, b in calls] == [(2, 100), (1, 100)] * 3
    calls.clear()
    monkeypatch.setattr(conv, "GROUPED_BLOCK_ELEMENTS", image // 2)  # half an image's rows
    check_close(run("nn.conv2d", attrs, [x, w], e.shape, x.dtype), e, x, w)
    assert [b[:1] + b[-1:] for _, b in calls] == [(1, 50)] * 18


def test_conv2d_blocks_stay_within_the_bound(monkeypatch):
    calls = spied_products(monkeypatch)
    monkeypatch.setattr(conv, "SCRATCH_FACTOR", 1)
    monkeypatch.setattr(conv, "PAD_SLACK", 0)
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((2, 4, 9, 7)), rng.standard_normal((3, 4, 3, 3))
    e = conv_oracle(x, w, (1, 1), (1, 1, 1, 1), (1, 1), 1)
    got = run("nn.conv2d", attrs_of((1, 1), (1, 1, 1, 1), (1, 1), 1), [x, w], e.shape, x.dtype)
    check_close(got, e, x, w)
    limit = x.size + e.size
    assert len(calls) > 3  # several blocks (3 runs of the kernel)
    assert all(np.prod(b) <= limit for _, b in calls), (calls, limit)


@pytest.mark.parametrize("dtype", ["float64", "float32", "float16"])
def test_one_by_one_conv2d_is_one_matmul_without_im2col(monkeypatch, dtype):
    # ``run`` calls the kernel into contiguous outputs (the direct product) and into a strided
    # one (the general path, through an accumulator): the same bits both ways.
    calls: list[tuple[tuple[int, ...], tuple[int, ...]]] = []
    real = conv._matmul

    def spy(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> None:
        calls.append((a.shape, b.shape))
        if dtype != "float16":  # float16 is multiplied in a float32 copy
            assert np.shares_memory(b, x)  # the input itself, viewed (N, G, C/G, H*W)
        real(a, b, out)

    monkeypatch.setattr(conv, "_matmul", spy)
    x = np.random.default_rng(1).standard_normal((2, 6, 5, 3)).astype(dtype)
    w = np.random.default_rng(2).standard_normal((4, 3, 1, 1)).astype(dtype)
    e = conv_oracle(x, w, (1, 1), (0, 0, 0, 0), (1, 1), 2)
    got = run("nn.conv2d", attrs_of((1, 1), (0, 0), (1, 1), 2), [x, w], e.shape, x.dtype)
    check_close(got, e, x, w)
    assert calls[0] == ((2, 2, 3), (2, 2, 3, 15))


def ort_conv(x, w, strides, pad4, dilation, groups):
    """onnxruntime's Conv of a float32 x and w (2 threads), as the importer's ONNX node."""
    import onnxruntime as ort
    from onnx import TensorProto, helper

    top, left, bottom, right = pad4
    node = helper.make_node(
        "Conv",
        ["x", "w"],
        ["y"],
        strides=list(strides),
        dilations=list(dilation),
        pads=[top, left, bottom, right],
        group=groups,
        kernel_shape=list(w.shape[2:]),
    )
    graph = helper.make_graph(
        [node],
        "conv",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape)),
            helper.make_tensor_value_info("w", TensorProto.FLOAT, list(w.shape)),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 2
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    return sess.run(None, {"x": x, "w": w})[0]


@KERNEL_SETTINGS
@given(case=conv_cases())
def test_conv2d_matches_onnxruntime(case):
    x, w, strides, pad4, dilation, groups = case
    x, w = x.astype(np.float32), w.astype(np.float32)
    assume(min(x.shape) > 0 and min(w.shape) > 0)  # onnxruntime refuses some empty shapes
    e = conv_oracle(x, w, strides, pad4, dilation, groups)
    assume(min(e.shape) > 0)
    expected = ort_conv(x, w, strides, pad4, dilation, groups)
    got = run("nn.conv2d", attrs_of(strides, pad4, dilation, groups), [x, w], e.shape, x.dtype)
    check_close(got, expected.astype(np.float64), x, w)


def test_conv1d_like_wav2vec2_feature_extractor():
    # the importer's Conv1d: H = 1; kernel 10 stride 5, then kernel 3 stride 2
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 1, 1, 401)).astype(np.float32)
    w1 = rng.standard_normal((8, 1, 1, 10)).astype(np.float32)
    e1 = conv_oracle(x, w1, (1, 5), (0, 0, 0, 0), (1, 1), 1)
    y = run("nn.conv2d", attrs_of((1, 5), (0, 0), (1, 1), 1), [x, w1], e1.shape, np.float32)
    check_close(y, e1, x, w1)
    w2 = rng.standard_normal((8, 8, 1, 3)).astype(np.float32)
    e2 = conv_oracle(y, w2, (1, 2), (0, 0, 0, 0), (1, 1), 1)
    z = run("nn.conv2d", attrs_of((1, 2), (0, 0), (1, 1), 1), [y, w2], e2.shape, np.float32)
    check_close(z, e2, y, w2)


# ---- transposed convolution ------------------------------------------------------------------
def transpose_oracle(x, w, strides, pad4, output_padding, dilation, groups):
    """Per tap, every input pixel's contribution added at ``i * stride + tap * dilation`` of
    the uncropped output, then cropped by the padding (float64)."""
    n, c, h, wd = x.shape
    _, og, kh, kw = w.shape
    top, left, bottom, right = pad4
    full = (
        (h - 1) * strides[0] + dilation[0] * (kh - 1) + 1 + output_padding[0],
        (wd - 1) * strides[1] + dilation[1] * (kw - 1) + 1 + output_padding[1],
    )
    acc = np.zeros((n, og * groups, *full))
    cg = c // groups
    x64, w64 = x.astype(np.float64), w.astype(np.float64)
    for g in range(groups):
        for i in range(kh):
            for j in range(kw):
                contrib = np.einsum(
                    "nchw,co->nohw",
                    x64[:, g * cg : (g + 1) * cg],
                    w64[g * cg : (g + 1) * cg, :, i, j],
                )
                r, q = i * dilation[0], j * dilation[1]
                acc[
                    :,
                    g * og : (g + 1) * og,
                    r : r + (h - 1) * strides[0] + 1 : strides[0],
                    q : q + (wd - 1) * strides[1] + 1 : strides[1],
                ] += contrib
    oh = full[0] - top - bottom
    ow = full[1] - left - right
    if min(oh, ow) < 0:
        return None
    return acc[:, :, top : top + oh, left : left + ow]


@st.composite
def transpose_cases(draw: Any, dtype: str, empty: bool = True) -> Any:
    """``(x, weight, attrs, expected)`` of a transposed convolution: groups, strides,
    dilations, output_padding and padding drawn (a padding that crops more than the output is
    assumed away); ``empty``: no input channels and no images may be drawn too."""
    groups = draw(st.sampled_from([1, 2, 3]))
    cg, og = draw(st.integers(0 if empty else 1, 3)), draw(st.integers(1, 3))
    kh, kw = draw(st.integers(1, 4)), draw(st.integers(1, 4))
    strides = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    dilation = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    output_padding = (draw(st.integers(0, strides[0] - 1)), draw(st.integers(0, strides[1] - 1)))
    pad4 = tuple(draw(st.integers(0, 3)) for _ in range(4))
    n = draw(st.integers(0 if empty else 1, 2))
    h, w = draw(st.integers(1, 7)), draw(st.integers(1, 7))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    x = rng.standard_normal((n, cg * groups, h, w)).astype(dtype)
    wt = rng.standard_normal((cg * groups, og, kh, kw)).astype(dtype)
    e = transpose_oracle(x, wt, strides, pad4, output_padding, dilation, groups)
    assume(e is not None)
    attrs = {
        "strides": strides,
        "padding": pad4,
        "dilation": dilation,
        "groups": groups,
        "output_padding": output_padding,
    }
    return x, wt, attrs, e


@pytest.mark.parametrize("factor", [32, 0])
@KERNEL_SETTINGS
@given(data=st.data(), dtype=DTYPES)
def test_conv2d_transpose_matches_the_scatter_oracle(factor, data, dtype):
    x, wt, attrs, e = data.draw(transpose_cases(dtype))
    with pytest.MonkeyPatch.context() as m:
        m.setattr(conv, "SCRATCH_FACTOR", factor)  # 0: tap by tap
        m.setattr(conv, "PAD_SLACK", 0 if factor == 0 else conv.PAD_SLACK)
        got = run("nn.conv2d_transpose", attrs, [x, wt], e.shape, x.dtype)
    check_close(got, e, x, wt)


@pytest.mark.parametrize(
    ("kernel", "strides", "pad4", "output_padding", "dilation"),
    [
        ((2, 2), (2, 2), (0, 0, 0, 0), (0, 0), (1, 1)),  # UNet's up-convolution: covered
        ((3, 2), (3, 2), (1, 0, 2, 1), (0, 0), (1, 1)),  # covered, cropped by the padding
        ((2, 2), (2, 2), (0, 0, 0, 0), (1, 1), (1, 1)),  # output_padding: a row no tap reaches
        ((2, 1), (3, 2), (0, 0, 0, 0), (0, 0), (1, 1)),  # gaps between the taps
        ((2, 2), (3, 3), (0, 0, 0, 0), (0, 0), (2, 2)),  # dilated, still distinct
        ((2, 2), (2, 2), (0, 0, 0, 0), (0, 0), (2, 2)),  # dilated onto each other: added
    ],
)
@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("channels", [3, 0])
def test_conv2d_transpose_with_taps_on_distinct_outputs(
    kernel, strides, pad4, output_padding, dilation, dtype, channels
):
    # taps closer than the stride copy their contributions, and where they cover the whole
    # output nothing is zeroed first: ``run`` fills the output with NaN and 7, so an output
    # left unwritten fails; no input channels still gives zeros
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, channels, 5, 4)).astype(dtype)
    wt = rng.standard_normal((channels, 3, *kernel)).astype(dtype)
    e = transpose_oracle(x, wt, strides, pad4, output_padding, dilation, 1)
    attrs = {
        "strides": strides,
        "padding": pad4,
        "dilation": dilation,
        "groups": 1,
        "output_padding": output_padding,
    }
    for factor in (32, 0):  # one product for every tap, or tap by tap
        with pytest.MonkeyPatch.context() as m:
            m.setattr(conv, "SCRATCH_FACTOR", factor)
            m.setattr(conv, "PAD_SLACK", 0 if factor == 0 else conv.PAD_SLACK)
            got = run("nn.conv2d_transpose", attrs, [x, wt], e.shape, x.dtype)
        check_close(got, e, x, wt)


# ---- pooling ---------------------------------------------------------------------------------
def pool_oracle(x, size, strides, pad4, dilation, kind):
    """Max (-inf where a window holds no real element) or mean over real elements (NaN where
    none) of each dilated window, in float64, from a mask of real positions."""
    top, left, bottom, right = pad4
    spec = ((0, 0), (0, 0), (top, bottom), (left, right))
    xp = np.pad(x.astype(np.float64), spec)
    real = np.pad(np.ones(x.shape, bool), spec)
    ext = (dilation[0] * (size[0] - 1) + 1, dilation[1] * (size[1] - 1) + 1)
    oh = (xp.shape[2] - ext[0]) // strides[0] + 1
    ow = (xp.shape[3] - ext[1]) // strides[1] + 1
    if min(oh, ow) == 0:
        return np.zeros((*x.shape[:2], oh, ow))

    def win(a):
        v = sliding_window_view(a, ext, axis=(2, 3))
        return v[:, :, :: strides[0], :: strides[1], :: dilation[0], :: dilation[1]][:, :, :oh, :ow]

    v, m = win(xp), win(real)
    if kind == "max":
        return np.where(m, v, -np.inf).max(axis=(4, 5), initial=-np.inf)
    with np.errstate(all="ignore"):
        return np.where(m, v, 0).sum(axis=(4, 5)) / m.sum(axis=(4, 5))


# (TAPS_MIN_OUTPUT, TAPS_FEW_CALLS, POOL_SEPARABLE): taps over a padded copy, clipped taps
# rows first or columns first (all forced by any output size), the window reduction (never
# taps)
POOL_PATHS = {
    "padded": (0, 0, "padded"),
    "rows": (0, 0, "rows"),
    "cols": (0, 0, "cols"),
    "window": (10**9, 0, "padded"),
}


@pytest.mark.parametrize("path", list(POOL_PATHS))
@pytest.mark.parametrize("kind", ["max", "avg"])
@KERNEL_SETTINGS
@given(data=st.data(), dtype=DTYPES)
def test_pools_match_the_masked_oracle(path, kind, data, dtype):
    size = (data.draw(st.integers(1, 4)), data.draw(st.integers(1, 4)))
    strides = (data.draw(st.integers(1, 3)), data.draw(st.integers(1, 3)))
    dilation = (data.draw(st.integers(1, 3)), data.draw(st.integers(1, 3)))
    pad4 = tuple(data.draw(st.integers(0, 4)) for _ in range(4))
    n, c = data.draw(st.integers(0, 2)), data.draw(st.integers(0, 3))
    h, w = data.draw(st.integers(0, 11)), data.draw(st.integers(0, 11))
    ext = (dilation[0] * (size[0] - 1) + 1, dilation[1] * (size[1] - 1) + 1)
    assume(h + pad4[0] + pad4[2] >= ext[0] - 1 and w + pad4[1] + pad4[3] >= ext[1] - 1)
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    x = (rng.standard_normal((n, c, h, w)) * 10).astype(dtype)
    e = pool_oracle(x, size, strides, pad4, dilation, kind)
    attrs = {"pool_size": size, "strides": strides, "padding": pad4, "dilation": dilation}
    taps_min, few, separable = POOL_PATHS[path]
    with pytest.MonkeyPatch.context() as m:
        m.setattr(conv, "TAPS_MIN_OUTPUT", taps_min)
        m.setattr(conv, "TAPS_FEW_CALLS", few)
        m.setattr(conv, "POOL_SEPARABLE", separable)
        got = run(f"nn.{kind}_pool2d", attrs, [x], e.shape, x.dtype)
    if kind == "max":
        np.testing.assert_array_equal(got, e.astype(dtype))  # max is exact
    else:
        rtol = {"float16": 1e-3, "float32": 1e-6, "float64": 1e-14}[dtype]
        np.testing.assert_allclose(got.astype(np.float64), e, rtol=rtol, atol=rtol * 40)


@pytest.mark.parametrize("path", list(POOL_PATHS))
@pytest.mark.parametrize("size", [(2, 2), (1, 2), (2, 4), (4, 4)])
@pytest.mark.parametrize("stride", [1, 2])
def test_float16_average_pools_sum_in_float32(path, size, stride):
    # multiples of 2^-10 below 2 in magnitude (exact in float16): every float32 sum of them is
    # exact and every window's count a power of two, so summing in float32 and rounding once
    # gives the correctly rounded mean; a pair summed in float16 (its own loop) rounds first
    rng = np.random.default_rng(11)
    x = (rng.integers(-2047, 2048, (2, 3, 12, 12)) / 1024).astype(np.float16)
    attrs = {"pool_size": size, "strides": (stride, stride), "padding": (0, 0, 0, 0)}
    attrs["dilation"] = (1, 1)
    e = pool_oracle(x, size, attrs["strides"], attrs["padding"], attrs["dilation"], "avg")
    taps_min, few, separable = POOL_PATHS[path]
    with pytest.MonkeyPatch.context() as m:
        m.setattr(conv, "TAPS_MIN_OUTPUT", taps_min)
        m.setattr(conv, "TAPS_FEW_CALLS", few)
        m.setattr(conv, "POOL_SEPARABLE", separable)
        got = run("nn.avg_pool2d", attrs, [x], e.shape, x.dtype)
    np.testing.assert_array_equal(got, e.astype(np.float16))


def test_max_pool_keeps_nan():
    x = np.arange(64, dtype=np.float32).reshape(1, 1, 8, 8)
    x[0, 0, 3, 3] = np.nan
    attrs = {"pool_size": (3, 3), "strides": (1, 1), "padding": (1, 1), "dilation": (1, 1)}
    for taps_min, few, separable in POOL_PATHS.values():
        with pytest.MonkeyPatch.context() as m:
            m.setattr(conv, "TAPS_MIN_OUTPUT", taps_min)
            m.setattr(conv, "TAPS_FEW_CALLS", few)
            m.setattr(conv, "POOL_SEPARABLE", separable)
            got = run("nn.max_pool2d", attrs, [x], (1, 1, 8, 8), np.float32)
        assert np.isnan(got[0, 0, 2:5, 2:5]).all()
        assert np.isnan(got).sum() == 9


def test_pools_with_more_taps_than_the_cache_takes():
    # 70 taps along W: past CACHED_TAPS_MAX, the spans are computed per call
    assert conv.CACHED_TAPS_MAX < 70
    x = np.random.default_rng(4).standard_normal((2, 3, 4, 75))
    attrs = {"pool_size": (2, 70), "strides": (1, 2), "padding": (1, 3, 0, 2), "dilation": (1, 1)}
    for kind in ("max", "avg"):
        e = pool_oracle(x, (2, 70), (1, 2), (1, 3, 0, 2), (1, 1), kind)
        for taps_min in (0, 10**9):
            with pytest.MonkeyPatch.context() as m:
                m.setattr(conv, "TAPS_MIN_OUTPUT", taps_min)
                got = run(f"nn.{kind}_pool2d", attrs, [x], e.shape, x.dtype)
            np.testing.assert_allclose(got, e, rtol=1e-12)


@KERNEL_SETTINGS
@given(data=st.data(), dtype=DTYPES)
def test_depthwise_conv2d_with_a_long_channel_run_runs_by_kernel_rows(data, dtype):
    # the "rows" path (its run and plane bounds lowered so that small shapes take it),
    # checked to be the one taken, against the oracle
    x, wt, strides, pad4, dilation, out_hw = draw_depthwise(data, dtype, 1, 16, 1 << 30)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(conv, "DEPTHWISE_DENSE_MAX", 0)
        mp.setattr(conv, "DEPTHWISE_ROWS_MIN_RUN", 1)
        mp.setattr(conv, "DEPTHWISE_ROWS_MIN", 2)
        mp.setattr(conv, "DEPTHWISE_ROWS_STRIDE1_MAX", 1 << 30)
        mp.setattr(conv, "DEPTHWISE_ROWS_STRIDE1_WIDE_MAX", 1 << 30)
        plan = conv._plan(x.shape, wt.shape, out_hw, pad4, strides, dilation, 1 << 30)
        assume(plan.path not in ("zeros", "matmul"))
        assert plan.path == "rows"
        check_depthwise(x, wt, strides, pad4, dilation)


@KERNEL_SETTINGS
@given(data=st.data(), dtype=DTYPES, rows=st.booleans())
def test_channels_last_copy_through_rows_gives_the_same_bits(data, dtype, rows):
    # an input whose channels lie ALIASED_STRIDE bytes apart is copied channels-last through a
    # row-major copy first (the "rows" depthwise path and the channels-last ones): forced on
    # every shape, the same bits as the direct copy, and the oracle's values
    x, wt, strides, pad4, dilation, _ = draw_depthwise(data, dtype, 1, 16, 1 << 30)
    c = x.shape[1]
    attrs = attrs_of(strides, pad4, dilation, c)
    e = conv_oracle(x, wt, strides, pad4, dilation, c)
    results = []
    for stride in (1, 1 << 62):  # every channel stride is a multiple of 1 byte; none of 2^62
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(conv, "DEPTHWISE_DENSE_MAX", 0)
            if rows:
                mp.setattr(conv, "DEPTHWISE_ROWS_MIN_RUN", 1)
                mp.setattr(conv, "DEPTHWISE_ROWS_MIN", 2)
                mp.setattr(conv, "DEPTHWISE_ROWS_STRIDE1_MAX", 1 << 30)
                mp.setattr(conv, "DEPTHWISE_ROWS_STRIDE1_WIDE_MAX", 1 << 30)
            mp.setattr(conv, "ALIASED_STRIDE", stride)
            mp.setattr(conv, "ALIASED_MIN_ELEMENTS", 1)
            results.append(run("nn.conv2d", attrs, [x, wt], e.shape, x.dtype))
    np.testing.assert_array_equal(results[0], results[1])
    check_close(results[0], e, x, wt)


def test_channels_last_copy_of_a_4k_strided_input_goes_by_rows(monkeypatch):
    # 32x32 float32 planes: channels 4,096 bytes apart, the rows path's region copied through
    # an (N, H, C, W) array
    carved = []
    real = conv.Workspace.empty

    def spy(self, shape, dtype):
        carved.append(tuple(shape))
        return real(self, shape, dtype)

    monkeypatch.setattr(conv.Workspace, "empty", spy)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((8, 72, 32, 32)).astype(np.float32)
    wt = rng.standard_normal((72, 1, 3, 3)).astype(np.float32)
    assert (
        conv._plan(x.shape, wt.shape, (16, 16), (1, 1, 1, 1), (2, 2), (1, 1), 1 << 40).path
        == "rows"
    )
    check_depthwise(x, wt, (2, 2), (1, 1, 1, 1), (1, 1))
    assert (8, 32, 72, 32) in carved
    carved.clear()
    y = x[:, :, :30, :30].copy()  # 3,600 bytes apart: the direct copy
    check_depthwise(y, wt, (2, 2), (1, 1, 1, 1), (1, 1))
    assert not any(len(sh) == 4 and sh[2] == 72 for sh in carved)


def test_depthwise_rows_path_at_its_bounds(monkeypatch):
    # a MobileNet block's 5x5 depthwise on a 6x6 map, 4 x 120 channels, the "dense" path off:
    # the rows path; a run below the bound, a plane past it or a scratch bound below its region
    # keep the paths before it
    monkeypatch.setattr(conv, "DEPTHWISE_DENSE_MAX", 0)
    rng = np.random.default_rng(11)
    x, w = rng.standard_normal((4, 120, 6, 6)), rng.standard_normal((120, 1, 5, 5))
    args = ((6, 6), (2, 2, 2, 2), (1, 1), (1, 1))
    assert conv._plan(x.shape, w.shape, *args, 1 << 30).path == "rows"
    assert conv._plan((1, 120, 6, 6), w.shape, *args, 1 << 30).path != "rows"
    assert conv._plan(x.shape, w.shape, *args, 1000).path != "rows"
    two = ((2, 2), (2, 2, 2, 2), (1, 1), (1, 1))  # a 2x2 map: below DEPTHWISE_ROWS_MIN
    assert conv._plan((4, 120, 2, 2), w.shape, *two, 1 << 30).path != "rows"
    big = (1, 288, 30, 30)
    assert (
        conv._plan(big, (288, 1, 3, 3), (30, 30), (1, 1, 1, 1), (1, 1), (1, 1), 1 << 30).path
        != "rows"
    )
    e = conv_oracle(x, w, (1, 1), (2, 2, 2, 2), (1, 1), 120)
    got = run("nn.conv2d", attrs_of((1, 1), (2, 2, 2, 2), (1, 1), 120), [x, w], e.shape, x.dtype)
    check_close(got, e, x, w)


def test_strided_depthwise_rows_path_at_its_bounds(monkeypatch):
    # strided, a shorter run suffices on 26 to 196 outputs a plane: MobileNetV3's 5x5 stride 2
    # on 4 x 48 channels of 12x12 takes it; a run of 16, a 5x5 output plane (the "last" path),
    # a 28x28 one, or the same shape at stride 1 keep the paths before it
    monkeypatch.setattr(conv, "DEPTHWISE_DENSE_MAX", 0)  # (it takes the small planes)
    rng = np.random.default_rng(12)
    x, w = rng.standard_normal((4, 48, 12, 12)), rng.standard_normal((48, 1, 5, 5))
    s2 = ((2, 2, 2, 2), (2, 2), (1, 1), 1 << 30)
    assert conv._plan(x.shape, w.shape, (6, 6), *s2).path == "rows"
    assert conv._plan((1, 16, 12, 12), (16, 1, 5, 5), (6, 6), *s2).path != "rows"
    assert conv._plan((4, 48, 10, 10), w.shape, (5, 5), *s2).path == "last"
    assert conv._plan((4, 48, 56, 56), w.shape, (28, 28), *s2).path != "rows"
    s1 = ((2, 2, 2, 2), (1, 1), (1, 1), 1 << 30)
    assert conv._plan(x.shape, w.shape, (12, 12), *s1).path != "rows"
    e = conv_oracle(x, w, (2, 2), (2, 2, 2, 2), (1, 1), 48)
    got = run("nn.conv2d", attrs_of((2, 2), (2, 2, 2, 2), (1, 1), 48), [x, w], e.shape, x.dtype)
    check_close(got, e, x, w)


#: The one-group paths, forced by their bounds (lifted, or the gather path's set to 0).
ONE_GROUP_PATHS = {
    "last_im2col": {
        "LAST_IM2COL_WEIGHT_RATIO": 1 << 20,
        "LAST_IM2COL_MAX_OUTPUTS": 1 << 20,
        "GATHER_MAX_OUTPUTS": 0,
        "ROW_PATH": False,
    },
    "gather": {"GATHER_MAX_OUTPUTS": 1 << 20, "ROW_PATH": False},
    # stride 1 only (the test draws stride 1 for it); tiny blocks, so that a call spans
    # several blocks of images and of rows
    "tapsum": {
        "TAPSUM_MIN_CHANNELS": 1,
        "TAPSUM_NARROW": 1 << 20,
        "TAPSUM_NARROW_OUTPUTS": 0,
        "TAPSUM_BLOCK": 64,
        "GATHER_MAX_OUTPUTS": 0,
    },
}


@pytest.mark.parametrize("path", list(ONE_GROUP_PATHS))
@KERNEL_SETTINGS
@given(data=st.data(), dtype=DTYPES)
def test_conv2d_of_one_group_on_its_paths(path, data, dtype):
    # one group: the "last_im2col" and "gather" paths (their bounds set so that any shape
    # drawn takes them), checked to be the one taken, against the oracle; the strides,
    # dilations and asymmetric padding drop taps and stick the region out of the input
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    n = 1 if path == "gather" else data.draw(st.integers(1, 3))  # (gather: one image)
    c, o = data.draw(st.integers(1, 6)), data.draw(st.integers(1, 6))
    kh, kw = data.draw(st.integers(1, 4)), data.draw(st.integers(1, 4))
    strides = (data.draw(st.integers(1, 3)), data.draw(st.integers(1, 3)))
    if path == "tapsum":
        strides = (1, 1)
        o = min(o, c)  # (its rule: at most as many output channels)
    dilation = (data.draw(st.integers(1, 2)), data.draw(st.integers(1, 2)))
    pad4 = tuple(data.draw(st.integers(0, 3)) for _ in range(4))
    h, w = data.draw(st.integers(1, 9)), data.draw(st.integers(1, 9))
    ext = (dilation[0] * (kh - 1) + 1, dilation[1] * (kw - 1) + 1)
    assume(h + pad4[0] + pad4[2] >= ext[0] and w + pad4[1] + pad4[3] >= ext[1])
    assume((c, o) != (1, 1))  # (depthwise: its own paths)
    x = rng.standard_normal((n, c, h, w)).astype(dtype)
    wt = rng.standard_normal((o, c, kh, kw)).astype(dtype)
    e = conv_oracle(x, wt, strides, pad4, dilation, 1)
    with pytest.MonkeyPatch.context() as mp:
        for name, value in ONE_GROUP_PATHS[path].items():
            mp.setattr(conv, name, value)
        plan = conv._plan(x.shape, wt.shape, e.shape[2:], pad4, strides, dilation, 1 << 30)
        assume(plan.path not in ("zeros", "matmul"))
        assert plan.path == path
        got = run("nn.conv2d", attrs_of(strides, pad4, dilation, 1), [x, wt], e.shape, x.dtype)
    check_close(got, e, x, wt)


def test_channels_last_im2col_at_its_bounds():
    # ResNet blocks at batch 4: a 3x3 map of 128 channels, a 6x6 map of 64 and a 14x14 one
    # take it; 512 channels on 6x6 at batch 2 (its
    # weights outweigh its columns), a 12x12 map at stride 2 (144 outputs), a 15x15 map at
    # stride 1 (225), grouped convolutions, a forced fill and a scratch bound below the
    # buffer keep the NCHW paths
    args = ((1, 1, 1, 1), (1, 1), (1, 1), 1 << 30)
    assert conv._plan((4, 128, 3, 3), (128, 128, 3, 3), (3, 3), *args).path == "last_im2col"
    assert conv._plan((4, 64, 6, 6), (64, 64, 3, 3), (6, 6), *args).path == "last_im2col"
    assert conv._plan((4, 64, 14, 14), (64, 64, 3, 3), (14, 14), *args).path == "last_im2col"
    assert conv._plan((2, 512, 6, 6), (512, 512, 3, 3), (6, 6), *args).path == "flat"
    assert conv._plan((4, 64, 15, 15), (64, 64, 3, 3), (15, 15), *args).path != "last_im2col"
    stride2 = ((1, 1, 1, 1), (2, 2), (1, 1), 1 << 30)
    assert conv._plan((4, 32, 12, 12), (64, 32, 3, 3), (6, 6), *stride2).path == "last_im2col"
    assert conv._plan((4, 32, 24, 24), (64, 32, 3, 3), (12, 12), *stride2).path != "last_im2col"
    assert conv._plan((4, 64, 6, 6), (64, 32, 3, 3), (6, 6), *args).path != "last_im2col"
    assert conv._plan((4, 64, 6, 6), (64, 64, 3, 3), (6, 6), *args[:-1], 10_000).path != (
        "last_im2col"
    )
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(conv, "FILL", "window")
        assert conv._plan((4, 64, 6, 6), (64, 64, 3, 3), (6, 6), *args).path == "window"


def test_channels_last_im2col_on_large_planes_of_many_channels_or_large_buffers():
    # stride 1, two images or more: 128 channels on 16x16 (256 outputs, past
    # LAST_IM2COL_STRIDE1_MAX) and 64 channels on 32x32 (an image's flat buffer of 626,688
    # elements) take it; one image, 64 channels on 16x16 (165,888), 32 on 32x32 and stride 2
    # keep the NCHW paths
    args = ((1, 1, 1, 1), (1, 1), (1, 1), 1 << 30)
    assert conv._plan((8, 128, 16, 16), (128, 128, 3, 3), (16, 16), *args).path == "last_im2col"
    assert conv._plan((2, 64, 32, 32), (64, 64, 3, 3), (32, 32), *args).path == "last_im2col"
    assert conv._plan((1, 128, 16, 16), (128, 128, 3, 3), (16, 16), *args).path == "flat"
    assert conv._plan((8, 64, 16, 16), (64, 64, 3, 3), (16, 16), *args).path == "flat"
    assert conv._plan((8, 32, 32, 32), (32, 32, 3, 3), (32, 32), *args).path == "flat"
    stride2 = ((1, 1, 1, 1), (2, 2), (1, 1), 1 << 30)
    assert conv._plan((8, 128, 32, 32), (128, 128, 3, 3), (16, 16), *stride2).path == "window"


def test_tapsum_at_its_bounds():
    # stride 1, one group: halving the channels or more on 32x32 and up, or at most 32 kept
    # on 64x64 and up, takes the sum of the taps' products; widening, 64 kept, a 16x16 plane,
    # 4 input channels, stride 2, groups, a forced fill and a scratch bound below the padded
    # input keep the paths before it
    args = ((1, 1, 1, 1), (1, 1), (1, 1), 1 << 30)
    assert conv._plan((4, 32, 128, 128), (8, 32, 3, 3), (128, 128), *args).path == "tapsum"
    assert conv._plan((1, 64, 32, 32), (32, 64, 3, 3), (32, 32), *args).path == "tapsum"
    assert conv._plan((1, 32, 64, 64), (32, 32, 3, 3), (64, 64), *args).path == "tapsum"
    assert conv._plan((1, 8, 64, 64), (8, 8, 3, 3), (64, 64), *args).path == "tapsum"
    assert conv._plan((1, 64, 16, 16), (32, 64, 3, 3), (16, 16), *args).path != "tapsum"
    assert conv._plan((1, 64, 32, 32), (33, 64, 3, 3), (32, 32), *args).path != "tapsum"
    assert conv._plan((1, 64, 64, 64), (64, 64, 3, 3), (64, 64), *args).path != "tapsum"
    assert conv._plan((1, 32, 64, 64), (64, 32, 3, 3), (64, 64), *args).path != "tapsum"
    assert conv._plan((1, 32, 32, 32), (32, 32, 3, 3), (32, 32), *args).path != "tapsum"
    assert conv._plan((1, 4, 128, 128), (2, 4, 3, 3), (128, 128), *args).path != "tapsum"
    stride2 = ((1, 1, 1, 1), (2, 2), (1, 1), 1 << 30)
    assert conv._plan((1, 32, 128, 128), (8, 32, 3, 3), (64, 64), *stride2).path != "tapsum"
    assert conv._plan((1, 32, 64, 64), (8, 16, 3, 3), (64, 64), *args).path != "tapsum"
    assert conv._plan((1, 32, 64, 64), (8, 32, 3, 3), (64, 64), *args[:-1], 100_000).path != (
        "tapsum"
    )
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(conv, "FILL", "flat")
        assert conv._plan((1, 32, 64, 64), (8, 32, 3, 3), (64, 64), *args).path == "flat"


@pytest.mark.parametrize(
    ("shape", "weight", "pad4", "dilation"),
    [
        ((3, 16, 40, 40), (8, 16, 3, 3), (1, 1, 1, 1), (1, 1)),  # blocks of whole images
        ((1, 16, 70, 70), (8, 16, 3, 3), (1, 1, 1, 1), (1, 1)),  # blocks of rows, a last short one
        ((2, 32, 40, 35), (16, 32, 5, 3), (2, 0, 1, 1), (2, 1)),  # dilated, asymmetric padding
        ((1, 16, 40, 64), (8, 16, 3, 1), (1, 0, 1, 0), (1, 1)),  # no junk columns: straight in
    ],
)
def test_tapsum_matches_the_oracle_and_repeats_its_bits(shape, weight, pad4, dilation):
    rng = np.random.default_rng(3)
    x = rng.standard_normal(shape).astype(np.float32)
    w = rng.standard_normal(weight).astype(np.float32)
    e = conv_oracle(x, w, (1, 1), pad4, dilation, 1)
    plan = conv._plan(x.shape, w.shape, e.shape[2:], pad4, (1, 1), dilation, 1 << 30)
    assert plan.path == "tapsum"
    attrs = attrs_of((1, 1), pad4, dilation, 1)
    first = run("nn.conv2d", attrs, [x, w], e.shape, x.dtype)
    check_close(first, e, x, w)
    again = run("nn.conv2d", attrs, [x, w], e.shape, x.dtype)
    assert np.array_equal(first, again)


def test_a_kept_weight_takes_channels_last_im2col_past_the_ratio(monkeypatch):
    # a constant weight is laid out once (ConstantLayouts): the weights-to-columns ratio and the
    # layout's scratch no longer count, and every image's product reads the weight once (512
    # channels on a 3x3 map at batch 4: one product an image read 9 MB of weight four times)
    shape, weight = (4, 512, 3, 3), (512, 512, 3, 3)
    args = ((1, 1, 1, 1), (1, 1), (1, 1))
    limit = conv._scratch_limit(np.empty(shape, np.float32), np.empty(shape, np.float32))
    assert conv._plan(shape, weight, (3, 3), *args, limit).path != "last_im2col"
    assert conv._plan(shape, weight, (3, 3), *args, limit, True).path == "last_im2col"
    rng = np.random.default_rng(4)
    x = rng.standard_normal(shape).astype(np.float32)
    w = (rng.standard_normal(weight) / 48).astype(np.float32)
    e = conv_oracle(x, w, (1, 1), (1, 1, 1, 1), (1, 1), 1)
    paths = planned_paths(monkeypatch)
    attrs = attrs_of((1, 1), (1, 1, 1, 1), (1, 1), 1)
    plain = get_kernel_factory("nn.conv2d")(attrs)
    kept = plain.with_constants({1: w})
    for kernel in (plain, kept):
        out = np.empty(e.shape, np.float32)
        kernel(x, w, out)
        check_close(out, e, x, w)
    assert paths[0] != "last_im2col" and paths[1] == "last_im2col"
    out = np.empty(e.shape, np.float32)
    kept(x, w.copy(), out)  # an equal weight that is not the constant: the plain plan again
    check_close(out, e, x, w)
    assert len(paths) == 2  # (kept or not is part of the plan's key: the plain one was kept)


@pytest.mark.parametrize("contiguous", [True, False])
def test_windows_from_a_corner_are_the_sliding_windows_there(contiguous):
    # nn.windows with an origin: the windows of the rectangle from that corner, viewed
    # through numpy's constructor (contiguous input) or as_strided (any other); a view that
    # would reach past a contiguous input is refused
    from vm.kernels.nn import windows

    base = np.arange(2 * 3 * 11 * 12, dtype=np.float32).reshape(2, 3, 11, 12)
    x = base if contiguous else base[:, :, :, ::-1]
    got = windows(x, (3, 2), (2, 3), (2, 1), (3, 3), (1, 2))
    expected = sliding_window_view(x[:, :, 1:, 2:], (5, 2), axis=(2, 3))[:, :, ::2, ::3, ::2]
    np.testing.assert_array_equal(got, expected[:, :, :3, :3])
    assert not got.flags.writeable
    if contiguous:
        with pytest.raises(ValueError):
            windows(x, (3, 2), (2, 3), (2, 1), (4, 4), (1, 2))


def test_gather_path_at_its_bounds():
    # ResNet-18's 3x3 blocks at batch 1 up to an 8x8 output gather; a 9x9 output, two
    # images, depthwise and grouped convolutions, a forced fill and a scratch bound below the
    # buffer do not; its table indexes the region row by row
    args = ((1, 1, 1, 1), (1, 1), (1, 1), 1 << 30)
    plan = conv._plan((1, 64, 8, 8), (64, 64, 3, 3), (8, 8), *args)
    assert plan.path == "gather"
    assert conv._plan((1, 64, 9, 9), (64, 64, 3, 3), (9, 9), *args).path != "gather"
    assert conv._plan((2, 64, 4, 4), (64, 64, 3, 3), (4, 4), *args).path != "gather"
    assert conv._plan((1, 64, 8, 8), (64, 1, 3, 3), (8, 8), *args).path != "gather"
    assert conv._plan((1, 64, 8, 8), (64, 32, 3, 3), (8, 8), *args).path != "gather"
    assert conv._plan((1, 64, 8, 8), (64, 64, 3, 3), (8, 8), *args[:-1], 5_000).path != ("gather")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(conv, "FILL", "taps")
        assert conv._plan((1, 64, 8, 8), (64, 64, 3, 3), (8, 8), *args).path == "taps"
    assert plan.table is not None and not plan.table.flags.writeable
    assert plan.table[:3].tolist() == [0, 1, 2]  # tap (0, 0), outputs (0, 0..2)
    assert plan.table[8] == 10  # tap (0, 0), output (1, 0): the region is 10 wide
