"""End to end on models of the kinds people export: imported once with symbolic dims, compiled
once, run at three sizes against onnxruntime; the printed program keeps symbolic shapes where
the dims are functions of the inputs."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples" / "exported"))

pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from onnx_models import D, cnn, encoder  # noqa: E402

import dynshape  # noqa: E402
import dynshape.onnx  # noqa: E402


def _ort(model: object, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])  # type: ignore[attr-defined]
    return session.run(None, feeds)


def _typed(program: dynshape.Module) -> str:
    return str(dynshape.stages(program)["types"]["main"])


def test_cnn_with_batch_norm_and_pooling() -> None:
    model = cnn()
    program = dynshape.onnx.load(model)
    types = _typed(program)
    assert "?" not in types, types
    assert "Tensor[(N, 10), float32]" in types
    vm = dynshape.VirtualMachine(dynshape.compile(program))
    rng = np.random.default_rng(1)
    for shape in [(1, 3, 8, 8), (2, 3, 17, 9), (3, 3, 32, 24)]:
        x = rng.standard_normal(shape).astype(np.float32)
        (want,) = _ort(model, {"x": x})
        np.testing.assert_allclose(vm.run(x), want, rtol=1e-4, atol=1e-5)


def test_transformer_encoder_with_an_attention_mask() -> None:
    model = encoder()
    program = dynshape.onnx.load(model, dims={"seq": (1, 512)})
    types = _typed(program)
    # The head split and the scores keep batch and seq: no unknown dim anywhere.
    assert "?" not in types, types
    assert re.search(r"Tensor\[\(batch, 4, seq, seq\), float32\]", types), types
    assert "Tensor[(batch, seq, 4, 8), float32]" in types
    vm = dynshape.VirtualMachine(dynshape.compile(program))
    rng = np.random.default_rng(2)
    for batch, seq in [(1, 1), (2, 7), (3, 16)]:
        x = rng.standard_normal((batch, seq, D)).astype(np.float32)
        mask = (rng.random((batch, seq)) > 0.3).astype(np.int64)
        mask[:, 0] = 1
        (want,) = _ort(model, {"x": x, "mask": mask})
        np.testing.assert_allclose(vm.run(x, mask), want, rtol=1e-4, atol=1e-5)


def test_the_numpy_encoder_is_the_model() -> None:
    from onnx_models import encoder_numpy, stacked_encoder, weights

    model = encoder()
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 5, D)).astype(np.float32)
    mask = np.ones((2, 5), np.int64)
    (want,) = _ort(model, {"x": x, "mask": mask})
    np.testing.assert_allclose(encoder_numpy(weights(model), x, mask), want, rtol=1e-4, atol=1e-5)
    two = stacked_encoder(2)
    (stacked,) = _ort(two, {"x": x, "mask": mask})
    got = dynshape.VirtualMachine(dynshape.compile(dynshape.onnx.load(two))).run(x, mask)
    np.testing.assert_allclose(got, stacked, rtol=1e-4, atol=1e-5)


def test_gru_tagger() -> None:
    from onnx_models import TAGS, VOCAB, gru_tagger

    model = gru_tagger()
    program = dynshape.onnx.load(model)
    types = _typed(program)
    assert f"Tensor[(seq, batch, {TAGS}), float32]" in types, types
    vm = dynshape.VirtualMachine(dynshape.compile(program))
    rng = np.random.default_rng(4)
    for seq, batch in [(1, 1), (5, 2), (12, 3)]:
        ids = rng.integers(0, VOCAB, (seq, batch)).astype(np.int64)
        (want,) = _ort(model, {"ids": ids})
        np.testing.assert_allclose(vm.run(ids), want, rtol=1e-4, atol=1e-5)


def test_detection_post_processing() -> None:
    from onnx_models import MAX_PER_CLASS, PRE_NMS, detection, detector_output

    from dynshape.passes.infer_types import infer_types

    model = detection()
    program = dynshape.onnx.load(model)
    types = str(infer_types(program)["main"])
    # The pre-NMS top-k keeps k = min(40, num_boxes) symbolic through both gathers; only the
    # number of detections, which depends on the data, is a `?` (one, shared by all outputs).
    assert f"Tensor[(batch, min({PRE_NMS}, num_boxes), 4), float32]" in types, types
    assert f"Tensor[(batch, num_classes, min({PRE_NMS}, num_boxes)), float32]" in types, types
    found = re.search(r"-> \((.*)\) \*/$", types.strip())
    assert found, types
    results = found.group(1)
    dets = set(re.findall(r"\?\d*", results))
    assert len(dets) == 1, results
    (d,) = dets
    assert results.startswith(f"Tensor[({d}, 4), float32], Tensor[({d},), float32]"), results
    vm = dynshape.VirtualMachine(dynshape.compile(program))
    rng = np.random.default_rng(5)
    for batch, classes, n in [(1, 3, 7), (2, 4, PRE_NMS), (3, 2, 150)]:
        boxes, scores = detector_output(rng, batch, classes, n)
        want = _ort(model, {"boxes": boxes, "scores": scores})
        got = vm.run(boxes, scores)
        assert len(got) == len(want) == 5
        for g, w in zip(got, want, strict=True):
            assert g.shape == w.shape and g.dtype == w.dtype, (g.shape, w.shape)
            np.testing.assert_allclose(g, w, rtol=1e-6, atol=0)
        # NMS suppressed: three objects give fewer than the limit per image and class
        assert 0 < len(want[0]) < MAX_PER_CLASS * batch * classes, len(want[0])
