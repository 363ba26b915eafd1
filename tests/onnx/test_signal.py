"""The signal converters (``dynshape/onnx/ops/signal.py``) against onnxruntime: ``DFT``
(forward, inverse, one-sided, cut and padded lengths, axis as attribute and input, a symbolic
length), ``STFT``
(with and without a window, a symbolic signal length), the windows and ``MelWeightMatrix``."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

pytest.importorskip("onnxruntime")

from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import helper

from tests.onnx.model_builder import compare, import_error, model

RNG = np.random.default_rng(7)


def _dft_model(opset: int, channels: int, axis: int, length: int | None, **attrs: Any) -> Any:
    inits: dict[str, np.ndarray] = {}
    names = ["x", "", ""]
    if length is not None:
        inits["n"] = np.array(length, np.int64)
        names[1] = "n"
    if opset >= 20:
        inits["axis"] = np.array(axis, np.int64)
        names[2] = "axis"
    else:
        attrs["axis"] = axis
    used = names if names[2] else [n for n in names if n]
    node = helper.make_node("DFT", used, ["y"], **attrs)
    inputs = [("x", "float32", ["b", 12, 3, channels])]
    return model([node], inputs, ["y"], inits, opset=opset, output_dtypes=["float32"])


@settings(max_examples=12, deadline=None)
@given(
    opset=st.sampled_from([17, 20]),
    channels=st.sampled_from([1, 2]),
    axis=st.sampled_from([1, 2, -3]),
    length=st.sampled_from([None, 5, 12, 16]),
    inverse=st.booleans(),
    onesided=st.booleans(),
)
def test_dft_matches_onnxruntime(
    opset: int, channels: int, axis: int, length: int | None, inverse: bool, onesided: bool
) -> None:
    if inverse and onesided:
        channels = 2
    if inverse and onesided:  # onnxruntime's irfft is not numpy's: test_irfft_matches_numpy
        return
    if onesided and channels == 2 and not inverse:  # a one-sided DFT takes a real signal
        channels = 1
    m = _dft_model(opset, channels, axis, length, inverse=int(inverse), onesided=int(onesided))
    feeds = [[RNG.standard_normal((b, 12, 3, channels)).astype(np.float32)] for b in (1, 3)]
    compare(m, *feeds, rtol=1e-4, atol=1e-4)


def test_dft_refusals() -> None:
    node = helper.make_node("DFT", ["x"], ["y"], axis=3)
    m = model([node], [("x", "float32", [2, 8, 1, 1])], ["y"], opset=17)
    assert "cannot be the last one" in import_error(m)
    node = helper.make_node("DFT", ["x", "n"], ["y"], axis=1)
    inputs = [("x", "float32", [2, 8, 1]), ("n", "int64", [])]
    m = model([node], inputs, ["y"], opset=17)
    assert "dft_length not known at import" in import_error(m)
    node = helper.make_node("DFT", ["x"], ["y"], axis=1)
    m = model([node], [("x", "float32", [2, 8, 3])], ["y"], opset=17)
    assert "must be 1 (real) or 2 (complex)" in import_error(m)


@pytest.mark.parametrize(("inverse", "onesided"), [(0, 0), (1, 0), (0, 1)])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_dft_of_a_symbolic_length(inverse: int, onesided: int, dtype: str) -> None:
    """The transformed dim may be a symbol (the default length, and ``n // 2 + 1`` bins)."""
    node = helper.make_node("DFT", ["x"], ["y"], axis=1, inverse=inverse, onesided=onesided)
    channels = 1 if onesided else 2
    m = model([node], [("x", dtype, [2, "n", channels])], ["y"], opset=17, output_dtypes=[dtype])
    feeds = [[RNG.standard_normal((2, n, channels)).astype(dtype)] for n in (1, 6, 9)]
    compare(m, *feeds, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("window", [False, True])
@pytest.mark.parametrize("onesided", [0, 1])
def test_stft_matches_onnxruntime(window: bool, onesided: int) -> None:
    inits = {"step": np.array(3, np.int64), "len": np.array(8, np.int64)}
    inputs = [("x", "float32", ["b", "t", 1])]
    names = ["x", "step", "", "len"]
    if window:
        inputs.append(("w", "float32", [8]))
        names = ["x", "step", "w"]
    node = helper.make_node("STFT", names, ["y"], onesided=onesided)
    m = model([node], inputs, ["y"], inits, opset=17, output_dtypes=["float32"])
    feeds = []
    for b, t in [(1, 8), (2, 20), (3, 31)]:
        args = [RNG.standard_normal((b, t, 1)).astype(np.float32)]
        if window:
            args.append(np.hanning(8).astype(np.float32))
        feeds.append(args)
    compare(m, *feeds, rtol=1e-4, atol=1e-4)


def test_stft_refuses_a_frame_longer_than_the_signal() -> None:
    inits = {"step": np.array(3, np.int64), "len": np.array(8, np.int64)}
    node = helper.make_node("STFT", ["x", "step", "", "len"], ["y"])
    m = model([node], [("x", "float32", [1, 5, 1])], ["y"], inits, opset=17)
    assert "shorter than a frame" in import_error(m)


@pytest.mark.parametrize("op", ["HannWindow", "HammingWindow", "BlackmanWindow"])
@pytest.mark.parametrize("periodic", [0, 1])
@pytest.mark.parametrize("size", [1, 2, 10])
def test_windows_match_onnxruntime(op: str, periodic: int, size: int) -> None:
    node = helper.make_node(op, ["n"], ["y"], periodic=periodic)
    inits = {"n": np.array(size, np.int64)}
    m = model([node], [("x", "float32", [1])], ["y"], inits, opset=17, output_dtypes=["float32"])
    m.graph.input.pop()  # the size is an initializer; no input
    compare(m, [], rtol=1e-5, atol=1e-6)


def test_mel_weight_matrix_matches_onnxruntime() -> None:
    inits: dict[str, np.ndarray] = {
        "bins": np.array(8, np.int64),
        "len": np.array(16, np.int64),
        "rate": np.array(8192, np.int64),
        "low": np.array(0.0, np.float32),
        "high": np.array(4096.0, np.float32),
    }
    node = helper.make_node("MelWeightMatrix", list(inits), ["y"])
    m = model([node], [("x", "float32", [1])], ["y"], inits, opset=17, output_dtypes=["float32"])
    m.graph.input.pop()
    compare(m, [], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("length", [None, 5, 6, 12, 16, 30])
def test_irfft_matches_numpy(length: int | None) -> None:
    """An inverse one-sided DFT is ``np.fft.irfft`` (onnx's reference; onnxruntime 1.32 gives
    other values for these, e.g. 0.76 away at length 5)."""
    from tests.onnx.model_builder import run

    m = _dft_model(20, 2, 1, length, inverse=1, onesided=1)
    for b in (1, 2):
        x = RNG.standard_normal((b, 12, 3, 2)).astype(np.float32)
        n = 22 if length is None else length
        want = np.fft.irfft(x[..., 0] + 1j * x[..., 1], n=n, axis=1)[..., None]
        np.testing.assert_allclose(np.asarray(run(m, x)), want, rtol=1e-5, atol=1e-6)
