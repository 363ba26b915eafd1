"""An SSD-style detector end to end (``examples/exported/ssd.py``): anchors computed in float
math from the image's and the feature map's shapes, NonMaxSuppression, and a TopK whose ``k`` is
a data-dependent count that a later Reshape uses too. Imported once with symbolic image sizes,
compiled once, and equal to onnxruntime at every image size (odd ones, one smaller than a
feature-map cell, batches of several images)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples" / "exported"))

pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from ssd import MAX_DETECTIONS, ssd  # noqa: E402

import dynshape  # noqa: E402
import dynshape.onnx  # noqa: E402
from dynshape.passes.infer_types import infer_types  # noqa: E402

SIZES = [(1, 32, 48), (2, 45, 37), (3, 64, 64), (1, 7, 9), (2, 4, 4), (1, 97, 23)]


@pytest.fixture(scope="module")
def detector() -> tuple[object, dynshape.VirtualMachine, object]:
    model = ssd()
    program = dynshape.onnx.load(model)
    vm = dynshape.VirtualMachine(dynshape.compile(program))
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return program, vm, session


def test_the_anchors_and_the_heads_keep_the_image_size_symbolic(detector: tuple) -> None:
    program, _, _ = detector
    types = str(infer_types(program)["main"])
    # The feature map is ceil(height / 4) x ceil(width / 4) as two stride-2 convolutions give
    # it; only what NonMaxSuppression and the TopK after it produce depends on the data.
    assert "Tensor[(batch, 16, (height - 1) // 4 + 1, (width - 1) // 4 + 1), float32]" in types
    head, _, tail = types.partition("non_max_suppression(")
    assert "?" not in head, "a `?` before NonMaxSuppression"
    assert "?" in tail


@pytest.mark.parametrize(("batch", "height", "width"), SIZES)
def test_detections_equal_onnxruntime_at_every_image_size(
    detector: tuple, batch: int, height: int, width: int
) -> None:
    _, vm, session = detector
    rng = np.random.default_rng(height * 1000 + width)
    image = rng.standard_normal((batch, 3, height, width)).astype(np.float32)
    want = session.run(None, {"image": image})
    got = vm.run(image)
    assert len(got) == len(want) == 4
    for name, g, w in zip(("boxes", "scores", "labels", "batch_index"), got, want, strict=True):
        assert g.shape == w.shape and g.dtype == w.dtype, (name, g.shape, w.shape)
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-4, err_msg=name)
    assert got[0].shape[0] <= MAX_DETECTIONS


def test_some_image_size_gives_detections_and_one_hits_the_cap(detector: tuple) -> None:
    """The comparisons above are not of empty outputs: NMS keeps some boxes, and at a larger
    image the TopK's k is the cap, not the count."""
    _, vm, _ = detector
    counts = []
    for batch, height, width in SIZES:
        image = np.random.default_rng(height * 1000 + width).standard_normal(
            (batch, 3, height, width)
        )
        counts.append(vm.run(image.astype(np.float32))[0].shape[0])
    assert max(counts) == MAX_DETECTIONS, counts
    assert min(counts) < MAX_DETECTIONS, counts
