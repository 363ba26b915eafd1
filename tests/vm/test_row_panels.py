"""Products of a few rows by column panels (vm/kernels/row_panels.py): which products take
them, numpy's answers on drawn shapes, the same bits from kept, viewed and copied panels, and
the kernels that keep a constant's panels."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from vm_testlib import run_in_threads

from vm.kernels import blas_threads as bt
from vm.kernels import row_panels as rp
from vm.kernels.constant_layouts import with_constants
from vm.kernels.registry import get_kernel_factory


def _operands(m: int, k: int, n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.standard_normal((m, k), np.float32), rng.standard_normal((k, n), np.float32)


@pytest.fixture
def direct(monkeypatch: pytest.MonkeyPatch) -> None:
    """The ``one`` policy with the panels on, whatever this machine's OpenBLAS core (the tests'
    environment may pin one without the direct kernel: the panels are then slower, not
    wrong)."""
    bt.switch()
    monkeypatch.setattr(bt, "_policy", "one")
    monkeypatch.setattr(bt, "_direct", True)


@pytest.mark.parametrize(
    ("shape", "expected"),
    [
        ((16, 128, 512), 64),  # BERT-mini's FFN at batch 1
        ((4, 768, 3072), 64),
        ((32, 768, 768), 32),  # 64 columns would pass the direct kernel's bound
        ((16, 4096, 1024), 0),  # even 32 columns pass it
        ((1, 768, 3072), 0),  # a matrix-vector product
        ((33, 768, 3072), 0),  # too many rows
        ((16, 128, 384), 0),  # small enough for OpenBLAS to run directly itself
        ((32, 1024, 60), 0),  # fewer than two panels of 32 columns
    ],
)
def test_which_products_go_by_panels(shape: tuple[int, int, int], expected: int) -> None:
    m, k, n = shape
    a, b = _operands(m, k, n)
    assert rp.width(a, b, np.empty((m, n), np.float32)) == expected


def test_other_dtypes_and_batched_right_operands_go_as_they_are() -> None:
    a, b = _operands(16, 128, 512)
    out = np.empty((16, 512))
    assert rp.width(a.astype(np.float64), b.astype(np.float64), out) == 0
    assert rp.width(a, b, out) == 0  # a float64 output
    stacked = np.stack([b, b])
    assert rp.width(a, stacked, np.empty((2, 16, 512), np.float32)) == 0
    assert rp.width(a[None], b, np.empty((1, 16, 512), np.float32)) == 64  # rows of a 3-d a
    little = np.dtype(np.float32).newbyteorder("<")  # equal to float32, another object
    assert little is not np.dtype(np.float32)
    assert rp.width(a, b.view(little), np.empty((16, 512), np.float32)) == 64


@settings(max_examples=40, deadline=None)
@given(
    m=st.integers(2, rp.PANEL_ROWS_MAX),
    k=st.integers(1, 300),
    n=st.integers(64, 700),
    w=st.sampled_from(rp.PANEL_WIDTHS),
    seed=st.integers(0, 2**16),
)
def test_panels_give_numpys_product_and_one_set_of_bits(
    m: int, k: int, n: int, w: int, seed: int
) -> None:
    """Any panel width on any shape (the tail columns included): numpy's values, and the same
    bits whether the panels are kept, a view of ``b`` or copied from a transposed ``b``."""
    a, b = _operands(m, k, n, seed)
    viewed = np.full((m, n), np.nan, np.float32)
    assert rp.multiply(a, b, viewed, w)
    np.testing.assert_allclose(viewed, a @ b, rtol=2e-5, atol=2e-5 * np.sqrt(k))
    laid = rp.panels(b, w)
    kept = np.full((m, n), np.nan, np.float32)
    assert rp.multiply(a, b, kept, w, lambda width: laid)
    copied = np.full((m, n), np.nan, np.float32)
    assert rp.multiply(a, np.asfortranarray(b), copied, w)  # unit row stride: copied
    np.testing.assert_array_equal(kept, viewed)
    np.testing.assert_array_equal(copied, viewed)


def test_a_3d_left_operand_is_folded_into_rows() -> None:
    a, b = _operands(12, 200, 300)
    out = np.empty((3, 4, 300), np.float32)
    assert rp.multiply(a.reshape(3, 4, 200), b, out, 64)
    np.testing.assert_array_equal(out.reshape(12, 300), _viewed(a, b, 64))


def _viewed(a: np.ndarray, b: np.ndarray, w: int) -> np.ndarray:
    out = np.empty((a.shape[0], b.shape[1]), np.float32)
    assert rp.multiply(a, b, out, w)
    return out


def test_operands_the_panels_cannot_view_are_left_to_the_caller() -> None:
    a, b = _operands(8, 64, 256)
    out = np.zeros((8, 512), np.float32)[:, ::2]  # not contiguous
    assert not rp.multiply(a, b, out, 64)
    assert not out.any()  # nothing written
    strided = np.zeros((8, 128), np.float32)[:, ::2]
    assert not rp.multiply(strided, b, np.empty((8, 256), np.float32), 64)
    wide = np.zeros((2, 8, 64), np.float32).transpose(1, 0, 2)  # 3-d, not contiguous
    assert not rp.multiply(wide, b, np.empty((8, 2, 256), np.float32), 64)
    shared = np.zeros(8 * 64 + 8 * 256, np.float32)
    assert not rp.multiply(shared[: 8 * 64].reshape(8, 64), b, shared[:2048].reshape(8, 256), 64)


def test_the_thread_policy_takes_the_panels_for_a_few_rows(
    direct: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b = _operands(16, 256, 1024)
    expected = _viewed(a, b, 64)
    calls: list[int] = []
    original = rp.prepare

    def counting(*args: object, **kwargs: object) -> rp.Panelled | None:
        calls.append(1)
        return original(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(rp, "prepare", counting)
    out = np.empty((16, 1024), np.float32)
    bt.matmul(a, b, out)
    if bt.switch() is None:  # no switchable OpenBLAS: numpy's own product, untouched
        assert not calls
        return
    assert calls == [1]
    np.testing.assert_array_equal(out, expected)
    wide, _ = _operands(48, 256, 1024)  # too many rows: the plain product
    bt.matmul(wide, b, np.empty((48, 1024), np.float32))
    monkeypatch.setattr(bt, "_direct", False)  # a core without the direct kernel
    bt.matmul(a, b, out)
    assert calls == [1]


def test_a_large_product_of_a_few_rows_shares_its_panels_with_the_worker(
    direct: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past SPLIT_MIN the panels are cut in parts that the worker thread helps with: each panel
    is the same product either way, so the bits are those of one thread, on every call."""
    if bt.switch() is None:
        pytest.skip("no switchable OpenBLAS (another BLAS, or its OpenMP layer)")
    a, b = _operands(8, 256, 1000)  # 15 panels of 64 and 40 columns left over
    expected = _viewed(a, b, 64)
    monkeypatch.setattr(bt, "SPLIT_MIN", 1 << 20)
    shared: list[str] = []
    original = bt.shared

    def counting(work: object, kind: str, amount: int) -> None:
        shared.append(kind)
        original(work, kind, amount)  # type: ignore[arg-type]

    monkeypatch.setattr(bt, "shared", counting)
    for _ in range(3):
        out = np.full((8, 1000), np.nan, np.float32)
        bt.matmul(a, b, out)
        np.testing.assert_array_equal(out, expected)
    assert shared == ["matmul"] * 3


@pytest.mark.parametrize("op", ["nn.matmul", "nn.dense"])
def test_a_kept_constant_gives_the_bits_of_the_plain_kernel(direct: None, op: str) -> None:
    """The constant-operand protocol: the kernel that keeps the weight's panels gives the plain
    kernel's bits (computed from the weight on each call), for the panelled shapes and others."""
    rng = np.random.default_rng(7)
    weight = rng.standard_normal((300, 1000) if op == "nn.matmul" else (1000, 300), np.float32)
    plain = get_kernel_factory(op)({})
    prepared = with_constants(plain, {1: weight})
    assert prepared is not plain
    for rows in (1, 2, 16, 32, 40):
        x = rng.standard_normal((rows, 300), np.float32)
        got = np.empty((rows, 1000), np.float32)
        want = np.empty((rows, 1000), np.float32)
        prepared(x, weight, got)
        plain(x, weight, want)
        np.testing.assert_array_equal(got, want)
        right = weight if op == "nn.matmul" else weight.T
        np.testing.assert_allclose(got, x @ right, rtol=1e-4, atol=1e-3)
    other = weight.copy()  # not the constant: the plain kernel
    x = rng.standard_normal((16, 300), np.float32)
    got, want = np.empty((16, 1000), np.float32), np.empty((16, 1000), np.float32)
    prepared(x, other, got)
    plain(x, other, want)
    np.testing.assert_array_equal(got, want)


def test_threads_sharing_a_kept_kernel_get_its_answers_alone(
    direct: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One prepared kernel (its panels made by whichever thread comes first, then shared) run
    by several threads at once on products of a few rows, those of 16 rows and more split with
    the worker thread too: each thread gets the bits the kernel gives alone."""
    monkeypatch.setattr(bt, "SPLIT_MIN", 1 << 22)
    rng = np.random.default_rng(11)
    weight = rng.standard_normal((256, 1000), np.float32)
    prepared = with_constants(get_kernel_factory("nn.matmul")({}), {1: weight})
    inputs = [rng.standard_normal((rows, 256), np.float32) for rows in (2, 8, 16, 32, 32)]
    alone = []
    for x in inputs:
        out = np.empty((x.shape[0], 1000), np.float32)
        prepared(x, weight, out)
        alone.append(out)
    prepared = with_constants(get_kernel_factory("nn.matmul")({}), {1: weight})  # panels anew
    failures: list[str] = []

    def work(k: int) -> None:
        for i in range(len(inputs)):
            j = (i + k) % len(inputs)
            out = np.full_like(alone[j], np.nan)
            prepared(inputs[j], weight, out)
            if not np.array_equal(out, alone[j]):
                failures.append(f"thread {k}, input {j}")

    run_in_threads(work, 4)
    assert not failures


def test_other_constants_keep_the_plain_kernel() -> None:
    for op in ("nn.matmul", "nn.dense"):
        plain = get_kernel_factory(op)({})
        assert with_constants(plain, {1: np.ones((4, 4))}) is plain  # float64
        assert with_constants(plain, {0: np.ones((4, 4), np.float32)}) is plain  # the left
        assert with_constants(plain, {1: np.ones((2, 4, 4), np.float32)}) is plain  # batched


def test_the_core_is_read_from_the_loaded_openblas() -> None:
    name = bt._corename()
    assert name == name.lower()
    if bt.switch() is None:
        assert not bt.direct_sgemm()
    else:
        assert bt.direct_sgemm() == (name in bt.DIRECT_SGEMM_CORES)


def _conv64(x: np.ndarray, w: np.ndarray, stride: int, pad: int) -> np.ndarray:
    """A float64 reference convolution (one group, square stride and padding)."""
    padded = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    kh, kw = w.shape[2:]
    win = np.lib.stride_tricks.sliding_window_view(padded, (kh, kw), axis=(2, 3))
    win = win[:, :, ::stride, ::stride]
    return np.einsum("ncijpq,ocpq->noij", win, w.astype(np.float64))


@pytest.mark.parametrize(
    ("data", "weight", "stride", "pad", "panelled"),
    [
        ((1, 256, 2, 2), (256, 256, 3, 3), 1, 1, True),  # 4 rows by 2.4 MB
        ((1, 128, 8, 8), (256, 128, 3, 3), 2, 1, True),  # 16 rows, 32 columns a panel
        ((1, 64, 2, 2), (64, 64, 3, 3), 1, 1, False),  # OpenBLAS's direct product already
        ((1, 64, 8, 8), (128, 64, 3, 3), 1, 1, False),  # 64 outputs: too many rows
    ],
)
def test_a_small_plane_by_a_large_kept_weight_goes_by_its_panels(
    direct: None,
    data: tuple[int, ...],
    weight: tuple[int, ...],
    stride: int,
    pad: int,
    panelled: bool,
) -> None:
    """A one-image plane of a few outputs by a large constant weight: the channels-last buffer
    times the weight's kept panels, numpy's values on every call; the same weight when not a
    constant (no kept layouts), or without the direct kernel, keeps the "gather" path."""
    from vm.kernels import conv

    rng = np.random.default_rng(3)
    x = rng.standard_normal(data, np.float32)
    w = rng.standard_normal(weight, np.float32)
    oh = (data[2] + 2 * pad - weight[2]) // stride + 1
    out_hw = (oh, oh)
    geometry = (data, weight, out_hw, (pad,) * 4, (stride, stride), (1, 1), 1 << 30)
    assert conv._plan(*geometry, True, True).path == ("last_im2col" if panelled else "gather")
    for kept, panels in ((True, False), (False, True), (False, False)):
        assert conv._plan(*geometry, kept, panels).path == "gather"
    attrs = {"strides": [stride] * 2, "dilation": [1, 1], "groups": 1, "padding": [pad] * 4}
    kernel = get_kernel_factory("nn.conv2d")(attrs)
    prepared = with_constants(kernel, {1: w})
    want = _conv64(x, w, stride, pad)
    first = np.full((1, weight[0], *out_hw), np.nan, np.float32)
    prepared(x, w, first)
    np.testing.assert_allclose(first, want, rtol=1e-4, atol=1e-3)
    again = np.full_like(first, np.nan)
    prepared(x, w, again)  # the panels kept by the first call
    np.testing.assert_array_equal(again, first)
    plain = np.full_like(first, np.nan)
    kernel(x, w, plain)  # not a constant: its own path, the same values within rounding
    np.testing.assert_allclose(plain, first, rtol=1e-4, atol=1e-4)
