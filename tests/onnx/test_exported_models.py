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


def _convnext_block(channels: int = 16) -> object:
    """A ConvNeXt-style stage as exporters write it: a 4x4 stride-4 patchify convolution, a 7x7
    depthwise convolution, Transpose to channels-last, LayerNormalization, MatMul, exact GELU
    (Div, Erf, Add, Mul, Mul), MatMul, Transpose back, the residual Add and a global mean."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(5)
    inits = []

    def init(name: str, shape: tuple[int, ...], scale: float = 0.1) -> str:
        return const(name, rng.standard_normal(shape) * scale)

    def const(name: str, value: object) -> str:
        inits.append(numpy_helper.from_array(np.asarray(value, np.float32), name))
        return name

    c = channels
    nodes = [
        helper.make_node(
            "Conv",
            ["x", init("w0", (c, 3, 4, 4)), init("b0", (c,))],
            ["s"],
            kernel_shape=[4, 4],
            strides=[4, 4],
        ),
        helper.make_node(
            "Conv",
            ["s", init("wd", (c, 1, 7, 7)), init("bd", (c,))],
            ["d"],
            kernel_shape=[7, 7],
            pads=[3, 3, 3, 3],
            group=c,
        ),
        helper.make_node("Transpose", ["d"], ["t"], perm=[0, 2, 3, 1]),
        helper.make_node(
            "LayerNormalization", ["t", const("g", np.ones(c)), init("be", (c,))], ["ln"], axis=-1
        ),
        helper.make_node("MatMul", ["ln", init("w1", (c, 4 * c))], ["m1"]),
        helper.make_node("Div", ["m1", const("root2", 2**0.5)], ["dv"]),
        helper.make_node("Erf", ["dv"], ["ef"]),
        helper.make_node("Add", ["ef", const("one", 1.0)], ["e1"]),
        helper.make_node("Mul", ["m1", "e1"], ["mu"]),
        helper.make_node("Mul", ["mu", const("half", 0.5)], ["ge"]),
        helper.make_node("MatMul", ["ge", init("w2", (4 * c, c))], ["m2"]),
        helper.make_node("Transpose", ["m2"], ["tb"], perm=[0, 3, 1, 2]),
        helper.make_node("Add", ["s", "tb"], ["res"]),
        helper.make_node("ReduceMean", ["res"], ["y"], axes=[2, 3], keepdims=0),
    ]
    graph = helper.make_graph(
        nodes,
        "convnext_block",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, "h", "w"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", c])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def test_a_convnext_style_block_by_tiles_and_by_matrices() -> None:
    # the 7x7 depthwise convolution takes the "tiled" path on a 16x16 map, the "dense" one on
    # 7x9 and the im2col buffers on 10x11: every one gives onnxruntime's answers
    import vm.kernels.conv as conv

    same7 = ((3, 3, 3, 3), (1, 1), (1, 1), 1 << 30)
    assert conv._plan((1, 16, 16, 16), (16, 1, 7, 7), (16, 16), *same7).path == "tiled"
    assert conv._plan((2, 16, 7, 9), (16, 1, 7, 7), (7, 9), *same7).path == "dense"
    assert conv._plan((1, 16, 10, 11), (16, 1, 7, 7), (10, 11), *same7).path not in (
        "tiled",
        "dense",
    )
    model = _convnext_block()
    vm = dynshape.VirtualMachine(dynshape.compile(dynshape.onnx.load(model)))
    rng = np.random.default_rng(6)
    for shape in [(1, 3, 64, 64), (2, 3, 28, 36), (1, 3, 40, 44)]:
        x = rng.standard_normal(shape).astype(np.float32)
        (want,) = _ort(model, {"x": x})
        np.testing.assert_allclose(vm.run(x), want, rtol=1e-4, atol=1e-5)
