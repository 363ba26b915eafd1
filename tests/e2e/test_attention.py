"""Attention as one kernel, end to end: the imported ONNX encoder with and without the
``fuse_attention`` rewrite against onnxruntime at random sizes (seq 1, a 0-size batch, masks
with zeros), the kernel's bounded scores blocks, broadcast kv heads, float16, and a fully
masked row giving NaN as the unfused program does. Under ``--vm-backend=sanitized+profiled``
every VM here is sanitized."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

import dynshape
from dynshape.passes.fuse_attention import FuseAttention

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples" / "exported"))


@pytest.fixture()
def unfused(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The pipeline without the rewrite (for comparisons)."""
    monkeypatch.setattr(FuseAttention, "run", lambda self, module: module)
    yield


def _encoder_vms() -> tuple[object, object, object]:
    pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    from onnx_models import encoder

    import dynshape.onnx

    model = encoder(seed=3)
    program = dynshape.onnx.load(model)
    fused = dynshape.VirtualMachine(dynshape.compile(program, debug=True), check_memory=True)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(FuseAttention, "run", lambda self, module: module)
        exe = dynshape.compile(program)
    plain = dynshape.VirtualMachine(exe, check_memory=True)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return fused, plain, sess


def test_the_encoder_is_rewritten() -> None:
    pytest.importorskip("onnx")
    from onnx_models import encoder

    import dynshape.onnx

    rewritten = str(dynshape.stages(dynshape.onnx.load(encoder()))["fused"])
    assert rewritten.count("nn.attention(") == 1
    assert "nn.softmax" not in rewritten and "transpose(" not in rewritten


def test_the_encoder_against_onnxruntime_and_the_unfused_program() -> None:
    fused, plain, sess = _encoder_vms()
    rng = np.random.default_rng(27)
    sizes = [(1, 1), (0, 4), (3, 1), (2, 9)] + [
        (int(rng.integers(1, 5)), int(rng.integers(1, 40))) for _ in range(4)
    ]
    for b, s in sizes:
        x = rng.standard_normal((b, s, 32)).astype(np.float32)
        mask = (rng.random((b, s)) > 0.4).astype(np.int64)
        if b:
            mask[0] = 0  # a row of only masked keys: -1e9 each, a uniform softmax
        got = fused.run(x, mask)  # type: ignore[attr-defined]
        want = sess.run(None, {"x": x, "mask": mask})[0]  # type: ignore[attr-defined]
        base = plain.run(x, mask)  # type: ignore[attr-defined]
        assert got.shape == want.shape == (b, s, 32)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5, err_msg=f"{(b, s)}")
        np.testing.assert_allclose(got, base, rtol=1e-5, atol=1e-5, err_msg=f"{(b, s)}")


PROGRAM = """
def @main(%q: Tensor[(b, h, n, 8), {t}], %k: Tensor[(b, {kv}, m, 8), {t}], %v: Tensor[(b, {kv}, m, 4), {t}], %mask: Tensor[(b, 1, n, m), {t}]) {{
  %0 = nn.matmul(%q, transpose(%k, axes=[0, 1, 3, 2]));
  %1 = add(multiply(%0, 0.35{s}), %mask);
  nn.matmul(nn.softmax(%1, axis=-1), %v)
}}
"""


def _both(text: str) -> tuple[dynshape.VirtualMachine, dynshape.VirtualMachine]:
    fused = dynshape.compile(text, debug=True)
    assert "nn.attention" in str(dynshape.stages(text)["fused"])
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(FuseAttention, "run", lambda self, module: module)
        plain = dynshape.compile(text)
    return (
        dynshape.VirtualMachine(fused, check_memory=True),
        dynshape.VirtualMachine(plain, check_memory=True),
    )


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16"])
@pytest.mark.parametrize("kv", ["h", "1"])  # all heads, or one kv head broadcast (GQA's limit)
def test_a_text_program_fused_and_unfused_agree(dtype: str, kv: str) -> None:
    suffix = {"float32": "f", "float64": "f64", "float16": "f16"}[dtype]
    fused, plain = _both(PROGRAM.format(t=dtype, kv=kv, s=suffix))
    rng = np.random.default_rng(1)
    for b, h, n, m in [(2, 3, 5, 7), (1, 1, 1, 1), (0, 2, 3, 3), (2, 2, 4, 0), (3, 4, 33, 17)]:
        hk = h if kv == "h" else 1
        q = rng.standard_normal((b, h, n, 8)).astype(dtype)
        k = rng.standard_normal((b, hk, m, 8)).astype(dtype)
        v = rng.standard_normal((b, hk, m, 4)).astype(dtype)
        mask = np.where(rng.random((b, 1, n, m)) > 0.3, 0, -1e4).astype(dtype)
        got, want = fused.run(q, k, v, mask), plain.run(q, k, v, mask)
        tol = 2e-3 if dtype == "float16" else 1e-5
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol, err_msg=str((b, h, n, m)))


def test_a_row_of_minus_infinity_is_nan_as_unfused() -> None:
    fused, plain = _both(PROGRAM.format(t="float32", kv="h", s="f"))
    rng = np.random.default_rng(2)
    q, k = (
        rng.standard_normal((2, 2, 3, 8), np.float32),
        rng.standard_normal((2, 2, 4, 8), np.float32),
    )
    v = rng.standard_normal((2, 2, 4, 4), np.float32)
    mask = np.zeros((2, 1, 3, 4), np.float32)
    mask[1, 0, 2] = -np.inf
    with np.errstate(invalid="ignore"):
        got, want = fused.run(q, k, v, mask), plain.run(q, k, v, mask)
    assert np.isnan(got[1, :, 2]).all() and np.isnan(want[1, :, 2]).all()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_the_scores_are_computed_in_bounded_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    from vm.kernels import attention as kernel_module

    fused, plain = _both(PROGRAM.format(t="float64", kv="1", s="f64"))
    rng = np.random.default_rng(3)
    args = [
        rng.standard_normal((3, 4, 9, 8)),
        rng.standard_normal((3, 1, 11, 8)),
        rng.standard_normal((3, 1, 11, 4)),
        np.where(rng.random((3, 1, 9, 11)) > 0.5, 0.0, -1e9),
    ]
    want = plain.run(*args)
    sizes: list[int] = []
    real = kernel_module._softmax_rows

    def recording(scores: np.ndarray) -> None:
        sizes.append(scores.nbytes)
        real(scores)

    monkeypatch.setattr(kernel_module, "SCORES_MAX_BYTES", 9 * 11 * 8 * 2)
    monkeypatch.setattr(kernel_module, "SCORES_ALONE_BYTES", 9 * 11 * 8 * 2)
    monkeypatch.setattr(kernel_module, "_softmax_rows", recording)
    got = fused.run(*args)
    monkeypatch.undo()
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    assert len(sizes) > 1 and max(sizes) <= 9 * 11 * 8 * 2  # blocks, each within the bound
