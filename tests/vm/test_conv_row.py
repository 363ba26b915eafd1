"""The "row" path of ``nn.conv2d`` (``vm/kernels/conv.py``, ``_conv_row``): a one-row output
read by one kept kernel row, which is how the importer lowers ``Conv1d`` ((N, C, 1, W) by
(O, C, 1, KW)). Checked against the float64 einsum oracle of ``test_conv_blas`` (into NaN-,
7-filled and strided outputs), with and without its declared workspace (no piece spilled, the
same bits), and the planner's rule at its bounds."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st
from test_conv_blas import DTYPES, attrs_of, check_close, conv_oracle, run
from test_conv_workspace import _same_bits_without_spills
from vm_testlib import KERNEL_SETTINGS

import vm.kernels.conv as conv
from vm.kernels import get_kernel_factory
from vm.kernels.constant_layouts import with_constants

#: The row path, or what needs no path: one tap at stride 1 without padding ("matmul"), or every
#: tap in the padding ("zeros").
ROW_OR_TRIVIAL = ("row", "matmul", "zeros")


@st.composite
def row_cases(draw: Any) -> Any:
    """A convolution whose output is one row read by one kernel row: H = 1 and KH = 1, or a
    3-row kernel over H = 1 padded by one row above and below (its outer rows read padding
    only and are dropped); any strides, dilation and left/right padding."""
    n, c, o = draw(st.integers(1, 4)), draw(st.integers(1, 6)), draw(st.integers(1, 8))
    assume((c, o) != (1, 1))  # (depthwise: its own paths)
    kh = draw(st.sampled_from([1, 3]))
    kw, w = draw(st.integers(1, 5)), draw(st.integers(1, 20))
    strides = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    dilation = (draw(st.integers(1, 2)), draw(st.integers(1, 3)))
    vertical = 0 if kh == 1 else dilation[0]
    pad4 = (vertical, draw(st.integers(0, 3)), vertical, draw(st.integers(0, 3)))
    assume(w + pad4[1] + pad4[3] >= dilation[1] * (kw - 1) + 1)
    dtype = draw(DTYPES)
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    x = rng.standard_normal((n, c, 1, w)).astype(dtype)
    wt = rng.standard_normal((o, c, kh, kw)).astype(dtype)
    return x, wt, strides, pad4, dilation


def planned(x: np.ndarray, wt: np.ndarray, case: tuple[Any, ...], out_hw: Any) -> str:
    """The path planned, or "rows kept" where the planner keeps the kernel rows that read
    padding only (their weights cost more to drop than their buffer: a tiny map)."""
    strides, pad4, dilation = case
    plan = conv._plan(x.shape, wt.shape, out_hw, pad4, strides, dilation, 1 << 30)
    return "rows kept" if plan.taps[1] - plan.taps[0] > 1 else plan.path


@KERNEL_SETTINGS
@given(case=row_cases(), kept=st.booleans(), strided_input=st.booleans())
def test_one_row_convolutions_take_the_row_path_and_match_the_oracle(case, kept, strided_input):
    x, wt, strides, pad4, dilation = case
    if strided_input:  # a view with gaps: copied into the padded row, not viewed in place
        wide = np.zeros((*x.shape[:3], 2 * x.shape[3]), x.dtype)
        wide[..., ::2] = x
        x = wide[..., ::2]
    e = conv_oracle(x, wt, strides, pad4, dilation, 1)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(conv, "ROW_WEIGHT_RATIO", 1 << 20)  # every such shape takes the path
        check_row_path(x, wt, (strides, pad4, dilation), e, kept)


def check_row_path(x, wt, case, e, kept):
    """``planned`` says "row" (or ``ROW_OR_TRIVIAL``); the kernel, kept weight or not, gives
    the oracle's ``e``."""
    strides, pad4, dilation = case
    assert planned(x, wt, case, e.shape[2:]) in (*ROW_OR_TRIVIAL, "rows kept")
    attrs = attrs_of(strides, pad4, dilation, 1)
    got = run("nn.conv2d", attrs, [x, wt], e.shape, x.dtype)
    check_close(got, e, x, wt)
    if kept:  # the weight a constant: its layout and the path prepared once, kept
        kernel = with_constants(get_kernel_factory("nn.conv2d")(attrs), {1: wt})
        out = np.full(e.shape, np.nan, x.dtype)
        kernel(x, wt, out)
        out[...] = np.nan
        kernel(x, wt, out)  # the kept runner, a second time
        check_close(out, e, x, wt)
        np.testing.assert_array_equal(out, got)  # the path of a weight not kept: its bits


@KERNEL_SETTINGS
@given(case=row_cases())
def test_the_row_path_fits_the_declared_workspace(case):
    x, wt, strides, pad4, dilation = case
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(conv, "ROW_WEIGHT_RATIO", 1 << 20)
        taken = _same_bits_without_spills(x, wt, attrs_of(strides, pad4, dilation, 1))
    assert taken in (*ROW_OR_TRIVIAL, "empty") or wt.shape[2] > 1


@pytest.mark.parametrize(
    ("shape", "weight", "strides", "pad", "path"),
    [
        # a TCN block: every step's product has more columns than the weight has rows / 4
        ((4, 32, 1, 64), (32, 32, 1, 3), (1, 1), 1, "row"),
        ((8, 32, 1, 128), (32, 32, 1, 3), (1, 1), 1, "row"),
        # one image of at most GATHER_MAX_OUTPUTS outputs, whatever its weight
        ((1, 32, 1, 16), (256, 32, 1, 3), (1, 1), 1, "row"),
        # a strided front end at batch 4: 2 outputs an image by 256 rows of a constant weight
        # keeps the product of all images at once (channels-last)
        ((4, 256, 1, 16), (256, 256, 1, 10), (1, 5), 0, "last_im2col"),
        # a 2-d map is not a row
        ((4, 32, 8, 64), (32, 32, 3, 3), (1, 1), 1, "flat"),
    ],
)
def test_the_row_path_at_its_bounds(shape, weight, strides, pad, path):
    out_w = (shape[3] + 2 * pad - weight[3]) // strides[1] + 1
    out_h = (shape[2] + 2 * pad - weight[2]) // strides[0] + 1 if weight[2] > 1 else shape[2]
    pad4 = (pad if weight[2] > 1 else 0, pad, pad if weight[2] > 1 else 0, pad)
    # a constant weight (kept), its panels off: the same plan whatever OpenBLAS's core
    plan = conv._plan(shape, weight, (out_h, out_w), pad4, strides, (1, 1), 1 << 30, True)
    assert plan.path == path


def test_the_row_path_can_be_switched_off(monkeypatch):
    shape, weight = (4, 32, 1, 64), (32, 32, 1, 3)
    args = ((1, 64), (0, 1, 0, 1), (1, 1), (1, 1), 1 << 30)
    assert conv._plan(shape, weight, *args).path == "row"
    monkeypatch.setattr(conv, "ROW_PATH", False)
    assert conv._plan(shape, weight, *args).path != "row"


def test_the_row_read_may_be_any_row_of_a_taller_input():
    # a 2-row kernel dilated by 2 over 3 rows, padded by one row on top, at stride 2: one
    # output row, whose only kept kernel row reads input row 1 (the other reads the padding)
    rng = np.random.default_rng(11)
    x = rng.standard_normal((2, 3, 3, 40)).astype(np.float32)
    wt = rng.standard_normal((4, 3, 2, 3)).astype(np.float32)
    strides, pad4, dilation = (2, 1), (1, 1, 0, 1), (2, 1)
    e = conv_oracle(x, wt, strides, pad4, dilation, 1)
    plan = conv._plan(x.shape, wt.shape, e.shape[2:], pad4, strides, dilation, 1 << 30)
    assert (plan.path, plan.rows, plan.taps[:2]) == ("row", (1, 2), (1, 2))
    got = run("nn.conv2d", attrs_of(strides, pad4, dilation, 1), [x, wt], e.shape, x.dtype)
    check_close(got, e, x, wt)


def test_a_kept_weight_prepares_its_row_path_once_per_shape(monkeypatch):
    prepared = []
    real = conv._row_runner

    def counting(*args, **kwargs):
        prepared.append(args[0])
        return real(*args, **kwargs)

    monkeypatch.setitem(conv._PREPARED_PATHS, "row", counting)
    rng = np.random.default_rng(5)
    wt = rng.standard_normal((8, 4, 1, 3)).astype(np.float32)
    attrs = attrs_of((1, 1), (0, 1, 0, 1), (1, 1), 1)
    kernel = with_constants(get_kernel_factory("nn.conv2d")(attrs), {1: wt})
    room = np.zeros(1 << 16, np.uint8)
    for width in (16, 16, 9, 16, 9):
        x = rng.standard_normal((1, 4, 1, width)).astype(np.float32)
        out = np.empty((1, 8, 1, width), np.float32)
        kernel(x, wt, out, room)
        e = conv_oracle(x, wt, (1, 1), (0, 1, 0, 1), (1, 1), 1)
        check_close(out, e, x, wt)
    assert prepared == [(1, 4, 1, 16), (1, 4, 1, 9)]
