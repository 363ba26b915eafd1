"""``nn.conv2d``'s workspace: every path carves its buffers from a buffer of the size the op's
rule declares (``shape_funcs.workspace``), so the compiler's planned bytes are all it uses.

The oracle is the kernel itself without a workspace (each path's own allocations, as before):
with the declared workspace it must give the same bits and spill nothing (``Spills``); with
too small a workspace, or one that overlaps an operand or is not bytes, it must still give the
same bits (the pieces that do not fit are new arrays)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st
from test_conv_blas import (
    ONE_GROUP_PATHS,
    POOL_PATHS,
    attrs_of,
    check_close,
    conv_cases,
    conv_oracle,
    planned_paths,
    transpose_cases,
)
from vm_testlib import KERNEL_SETTINGS

import vm.kernels.conv as conv
from shape_funcs.workspace import PIECE_ALIGNMENT, workspace_bytes
from vm.kernels import get_kernel_factory
from vm.kernels.workspace import Spills, Workspace


def _declared(x: np.ndarray, w: np.ndarray, out_shape: Any, attrs: dict[str, Any]) -> int:
    nbytes = workspace_bytes("nn.conv2d", out_shape, [x.shape, w.shape], str(x.dtype), attrs)
    assert isinstance(nbytes, int) and nbytes >= 0
    return nbytes


def _same_bits_without_spills(x: np.ndarray, w: np.ndarray, attrs: dict[str, Any]) -> str:
    """Run the kernel without and with its declared workspace; return the path it took."""
    e = conv_oracle(x, w, attrs["strides"], attrs["padding"], attrs["dilation"], attrs["groups"])
    kernel = get_kernel_factory("nn.conv2d")(attrs)
    plain = np.full(e.shape, np.nan, x.dtype)
    with np.errstate(all="ignore"):
        kernel(x, w, plain)
    workspace = np.empty(_declared(x, w, e.shape, attrs), np.uint8)
    carved = np.full(e.shape, 7, x.dtype)
    before = Spills.count
    with np.errstate(all="ignore"):
        kernel(x, w, carved, workspace)
    assert Spills.count == before, "a piece did not fit the declared workspace"
    np.testing.assert_array_equal(carved, plain)
    if e.size == 0 or w.shape[1] == 0:
        return "empty"
    plan = conv._plan(
        x.shape,
        w.shape,
        e.shape[2:],
        attrs["padding"],
        attrs["strides"],
        attrs["dilation"],
        1 << 30,
    )
    return plan.path


@KERNEL_SETTINGS
@given(case=conv_cases())
def test_every_shape_fits_the_declared_workspace(case):
    x, w, strides, pad4, dilation, groups = case
    _same_bits_without_spills(x, w, attrs_of(strides, pad4, dilation, groups))


@KERNEL_SETTINGS
@given(case=conv_cases(depthwise=True))
def test_depthwise_shapes_fit_the_declared_workspace(case):
    x, w, strides, pad4, dilation, groups = case
    _same_bits_without_spills(x, w, attrs_of(strides, pad4, dilation, groups))


@KERNEL_SETTINGS
@given(case=conv_cases(depthwise=True), tiles=st.sampled_from([(8, 6, 4), (3, 2), (2,)]))
def test_tiled_depthwise_shapes_fit_the_declared_workspace(case, tiles):
    # the "tiled" path for any kernel and plane (its bounds lowered): it takes a tile size only
    # where its scratch fits the im2col buffer the rule counts
    x, w, strides, pad4, dilation, groups = case
    with pytest.MonkeyPatch.context() as m:
        m.setattr(conv, "DEPTHWISE_DENSE_MAX", 0)
        m.setattr(conv, "TILED_MIN_TAPS", 1)
        m.setattr(conv, "TILED_MIN_OUTPUTS", 1)
        m.setattr(conv, "TILE_SIZES", tiles)
        _same_bits_without_spills(x, w, attrs_of(strides, pad4, dilation, groups))


@pytest.mark.parametrize("fill", ["flat", "window", "taps"])
@KERNEL_SETTINGS
@given(case=conv_cases())
def test_every_fill_fits_the_declared_workspace(fill, case):
    x, w, strides, pad4, dilation, groups = case
    with pytest.MonkeyPatch.context() as m:
        m.setattr(conv, "FILL", fill)
        _same_bits_without_spills(x, w, attrs_of(strides, pad4, dilation, groups))


@pytest.mark.parametrize("path", list(ONE_GROUP_PATHS))
@KERNEL_SETTINGS
@given(data=st.data(), dtype=st.sampled_from(["float16", "float32", "float64"]))
def test_one_group_paths_fit_the_declared_workspace(path, data, dtype):
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    n = 1 if path == "gather" else data.draw(st.integers(1, 3))
    c, o = data.draw(st.integers(2, 6)), data.draw(st.integers(1, 6))
    kh, kw = data.draw(st.integers(1, 4)), data.draw(st.integers(1, 4))
    strides = (data.draw(st.integers(1, 3)), data.draw(st.integers(1, 3)))
    if path == "tapsum":
        strides = (1, 1)
        o = min(o, c)  # (its rule: at most as many output channels)
    pad4 = tuple(data.draw(st.integers(0, 3)) for _ in range(4))
    h, w = data.draw(st.integers(1, 9)), data.draw(st.integers(1, 9))
    assume(h + pad4[0] + pad4[2] >= kh and w + pad4[1] + pad4[3] >= kw)
    x = rng.standard_normal((n, c, h, w)).astype(dtype)
    wt = rng.standard_normal((o, c, kh, kw)).astype(dtype)
    with pytest.MonkeyPatch.context() as mp:
        for name, value in ONE_GROUP_PATHS[path].items():
            mp.setattr(conv, name, value)
        taken = _same_bits_without_spills(x, wt, attrs_of(strides, pad4, (1, 1), 1))
    assume(taken not in ("zeros", "matmul"))
    assert taken == path


@pytest.mark.parametrize(
    ("shape", "weight", "strides", "path"),
    [
        ((2, 96, 12, 12), (96, 1, 5, 5), (2, 2), "rows"),  # MobileNetV3's strided depthwise
        ((2, 48, 4, 4), (48, 1, 3, 3), (1, 1), "dense"),  # a tiny map, tap matrices
        ((2, 48, 14, 14), (48, 1, 3, 3), (3, 3), "last"),  # a tiny output plane, channels-last
        ((2, 16, 28, 28), (16, 1, 7, 7), (1, 1), "tiled"),  # ConvNeXt's 7x7 depthwise, by tiles
        ((1, 16, 32, 32), (16, 16, 3, 3), (1, 1), "flat"),  # ResNet's 3x3 blocks
        ((1, 16, 32, 32), (32, 16, 3, 3), (2, 2), "window"),  # its strided ones
        # full width at batch 4: the window path's images folded into one product's columns,
        # and a stride-1 layer of 128 channels channels-last
        ((4, 128, 16, 16), (256, 128, 3, 3), (2, 2), "window"),
        ((4, 128, 16, 16), (128, 128, 3, 3), (1, 1), "last_im2col"),
        # a UNet decoder's layers: halving the channels on a large plane, and 8 kept
        ((2, 16, 64, 64), (8, 16, 3, 3), (1, 1), "tapsum"),
        ((1, 8, 64, 64), (8, 8, 3, 3), (1, 1), "tapsum"),
    ],
)
def test_the_paths_of_real_models_fit_the_declared_workspace(shape, weight, strides, path):
    rng = np.random.default_rng(0)
    x = rng.standard_normal(shape).astype(np.float32)
    w = rng.standard_normal(weight).astype(np.float32)
    groups = shape[1] if weight[1] == 1 else 1
    attrs = attrs_of(strides, (1, 1, 1, 1) if weight[2] == 3 else (2, 2, 2, 2), (1, 1), groups)
    assert _same_bits_without_spills(x, w, attrs) == path


def test_a_one_by_one_convolution_declares_no_workspace_but_float16_does():
    attrs = attrs_of((1, 1), (0, 0, 0, 0), (1, 1), 1)
    out = (2, 8, 5, 5)
    assert workspace_bytes("nn.conv2d", out, [(2, 4, 5, 5), (8, 4, 1, 1)], "float32", attrs) == 0
    wide = workspace_bytes("nn.conv2d", out, [(2, 4, 5, 5), (8, 4, 1, 1)], "float16", attrs)
    assert wide >= 4 * (2 * 8 * 25 + 2 * 4 * 25)  # the float32 accumulator and input


def test_too_small_a_workspace_spills_and_gives_the_same_bits():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 8, 9, 9)).astype(np.float32)
    w = rng.standard_normal((4, 8, 3, 3)).astype(np.float32)
    kernel = get_kernel_factory("nn.conv2d")(attrs_of((1, 1), (1, 1, 1, 1), (1, 1), 1))
    plain, small = np.empty((2, 4, 9, 9), np.float32), np.empty((2, 4, 9, 9), np.float32)
    kernel(x, w, plain)
    before = Spills.count
    kernel(x, w, small, np.empty(PIECE_ALIGNMENT, np.uint8))
    assert Spills.count > before
    np.testing.assert_array_equal(small, plain)


def test_a_workspace_overlapping_an_operand_or_not_bytes_is_not_used():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((1, 8, 9, 9)).astype(np.float32)
    w = rng.standard_normal((4, 8, 3, 3)).astype(np.float32)
    kernel = get_kernel_factory("nn.conv2d")(attrs_of((1, 1), (1, 1, 1, 1), (1, 1), 1))
    plain = np.empty((1, 4, 9, 9), np.float32)
    kernel(x, w, plain)
    # a hostile executable passing the output's own bytes, or the input's, as the workspace
    room = np.zeros(1 << 16, np.uint8)
    out = room[: plain.nbytes].view(np.float32).reshape(plain.shape)
    kernel(x, w, out, room)
    np.testing.assert_array_equal(out, plain)
    data_bytes = x.reshape(-1).view(np.uint8)
    before = x.copy()
    again = np.empty_like(plain)
    kernel(x, w, again, data_bytes)
    np.testing.assert_array_equal(x, before)
    np.testing.assert_array_equal(again, plain)
    floats = np.empty(1 << 16, np.float32)
    assert Workspace(floats).buffer is None


def test_the_workspace_is_checked_once_when_first_carved(monkeypatch):
    from vm.kernels import workspace

    checks = []
    real = workspace.may_share_memory
    monkeypatch.setattr(
        workspace, "may_share_memory", lambda a, b: checks.append(1) or bool(real(a, b))
    )
    room = np.zeros(1 << 12, np.uint8)
    x, y = np.ones(4, np.float32), room[:16].view(np.float32)
    Workspace(room, x, y)  # a call whose path carves nothing pays nothing
    assert checks == []
    ws = Workspace(room, x)
    first, second = ws.empty((2,), np.float32), ws.empty((2,), np.float32)
    assert checks == [1] and np.shares_memory(first, room) and np.shares_memory(second, room)
    overlapping = Workspace(room, x, y)  # y is the room's bytes: the room is not used
    assert overlapping.buffer is None and checks == [1, 1, 1]
    piece = overlapping.empty((2,), np.float32)
    assert not np.shares_memory(piece, room) and checks == [1, 1, 1]


def test_pieces_are_aligned_and_disjoint():
    raw = np.empty(4096 + PIECE_ALIGNMENT, np.uint8)  # (the VM's storages are 64-aligned)
    start = -raw.ctypes.data % PIECE_ALIGNMENT
    ws = Workspace(raw[start : start + 4096])
    a = ws.empty((3,), np.float64)
    b = ws.zeros((5, 2), np.float32)
    assert a.ctypes.data % PIECE_ALIGNMENT == 0 and b.ctypes.data % PIECE_ALIGNMENT == 0
    assert b.ctypes.data - a.ctypes.data == PIECE_ALIGNMENT
    assert not np.may_share_memory(a, b) and not b.any()


@pytest.mark.parametrize("path", ["padded", "rows", "cols", "window"])
@pytest.mark.parametrize("kind", ["max", "avg"])
@KERNEL_SETTINGS
@given(data=st.data(), dtype=st.sampled_from(["float32", "float16", "float64"]))
def test_every_pool_path_fits_the_declared_workspace(path, kind, data, dtype):
    """The pools' temporaries (the padded input, a separable pool's rows or columns, average
    pooling's float32 accumulator) are carved from the workspace their rule declares: no
    spill, the same bits as the kernel that allocates; an empty workspace spills the same
    bits."""
    size = (data.draw(st.integers(1, 4)), data.draw(st.integers(1, 4)))
    strides = (data.draw(st.integers(1, 3)), data.draw(st.integers(1, 3)))
    dilation = (data.draw(st.integers(1, 2)), data.draw(st.integers(1, 2)))
    pad4 = tuple(data.draw(st.integers(0, 3)) for _ in range(4))
    n, c = data.draw(st.integers(1, 2)), data.draw(st.integers(1, 3))
    h, w = data.draw(st.integers(1, 11)), data.draw(st.integers(1, 11))
    ext = (dilation[0] * (size[0] - 1) + 1, dilation[1] * (size[1] - 1) + 1)
    assume(h + pad4[0] + pad4[2] >= ext[0] and w + pad4[1] + pad4[3] >= ext[1])
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    x = (rng.standard_normal((n, c, h, w)) * 10).astype(dtype)
    attrs = {"pool_size": size, "strides": strides, "padding": pad4, "dilation": dilation}
    oh = (h + pad4[0] + pad4[2] - ext[0]) // strides[0] + 1
    ow = (w + pad4[1] + pad4[3] - ext[1]) // strides[1] + 1
    name = f"nn.{kind}_pool2d"
    nbytes = workspace_bytes(name, (n, c, oh, ow), [x.shape], dtype, attrs)
    taps_min, few, separable = POOL_PATHS[path]
    with pytest.MonkeyPatch.context() as m, np.errstate(all="ignore"):
        m.setattr(conv, "TAPS_MIN_OUTPUT", taps_min)
        m.setattr(conv, "TAPS_FEW_CALLS", few)
        m.setattr(conv, "POOL_SEPARABLE", separable)
        kernel = get_kernel_factory(name)(attrs)
        plain = np.empty((n, c, oh, ow), x.dtype)
        kernel(x, plain)
        for room, may_spill in ((nbytes, False), (0, True)):
            out, before = np.full_like(plain, 7), Spills.count
            kernel(x, out, np.empty(room, np.uint8))
            assert may_spill or Spills.count == before, "a piece did not fit the declared bytes"
            np.testing.assert_array_equal(out, plain, strict=True)


@KERNEL_SETTINGS
@given(case=conv_cases())
def test_window_images_folded_fit_the_declared_workspace(case):
    # FOLD_ROWS_RATIO 0: every window block of several images is one product, its result
    # carved from the workspace too
    x, w, strides, pad4, dilation, groups = case
    with pytest.MonkeyPatch.context() as m:
        m.setattr(conv, "FILL", "window")
        m.setattr(conv, "FOLD_ROWS_RATIO", 0)
        _same_bits_without_spills(x, w, attrs_of(strides, pad4, dilation, groups))


@pytest.mark.parametrize("factor", [32, 0])
@KERNEL_SETTINGS
@given(data=st.data(), dtype=st.sampled_from(["float32", "float16", "float64"]))
def test_transposed_convolutions_fit_the_declared_workspace(factor, data, dtype):
    """The transposed convolution's contributions (every tap at once, or tap by tap past the
    scratch bound: ``factor`` 0), float16's float32 operands and accumulator are carved from
    the workspace its rule declares: no spill, the same bits as the kernel that allocates;
    an empty workspace spills the same bits."""
    x, wt, attrs, e = data.draw(transpose_cases(dtype, empty=False))
    assume(e.size > 0)
    nbytes = workspace_bytes("nn.conv2d_transpose", e.shape, [x.shape, wt.shape], dtype, attrs)
    with pytest.MonkeyPatch.context() as m, np.errstate(all="ignore"):
        m.setattr(conv, "SCRATCH_FACTOR", factor)
        m.setattr(conv, "PAD_SLACK", 0 if factor == 0 else conv.PAD_SLACK)
        kernel = get_kernel_factory("nn.conv2d_transpose")(attrs)
        plain = np.empty(e.shape, x.dtype)
        kernel(x, wt, plain)
        for room, may_spill in ((nbytes, False), (0, True)):
            out, before = np.full_like(plain, 7), Spills.count
            kernel(x, wt, out, np.empty(room, np.uint8))
            assert may_spill or Spills.count == before, "a piece did not fit the declared bytes"
            np.testing.assert_array_equal(out, plain, strict=True)


@pytest.mark.parametrize("n", [1, 2])
def test_dense_matrices_of_a_kept_weight_fit_the_declared_workspace(n, monkeypatch):
    # ConvNeXt's 7x7 depthwise on 12x12 planes, its weight kept: the "dense" path
    # (DEPTHWISE_DENSE_FEW; one image where its buffers' plan is the window im2col, 96
    # channels) carves its copies from the declared workspace, on the call that makes the
    # matrices and on the next that reads them kept: nothing spills, the oracle's values
    planned = planned_paths(monkeypatch)
    rng = np.random.default_rng(7)
    x = rng.standard_normal((n, 96, 12, 12)).astype(np.float32)
    w = rng.standard_normal((96, 1, 7, 7)).astype(np.float32)
    attrs = attrs_of((1, 1), (3, 3, 3, 3), (1, 1), 96)
    kernel = get_kernel_factory("nn.conv2d")(attrs).with_constants({1: w})
    expected = conv_oracle(x, w, (1, 1), (3, 3, 3, 3), (1, 1), 96)
    workspace = np.empty(_declared(x, w, expected.shape, attrs), np.uint8)
    for _ in range(2):  # the second call reads the kept matrices
        out = np.full((n, 96, 12, 12), np.nan, np.float32)
        before = Spills.count
        kernel(x, w, out, workspace)
        assert Spills.count == before, "a piece did not fit the declared workspace"
        np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-4)
        check_close(out, expected, x, w)
    assert planned == ["dense"]
