"""The ``NonMaxSuppression`` converter (``dynshape/onnx/ops/detection.py``) against
onnxruntime: boxes and scores with symbolic dims, each model compiled once and run at several
sizes, the optional inputs given as run-time inputs, initializers or omitted; and every message
a user can get from a bad node or bad values."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from model_builder import compare, import_error  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import dynshape  # noqa: E402
import dynshape.onnx  # noqa: E402

FLOAT, INT64 = TensorProto.FLOAT, TensorProto.INT64
SCALARS = {
    "max_output_boxes_per_class": INT64,
    "iou_threshold": FLOAT,
    "score_threshold": FLOAT,
}


def nms_model(
    given: dict[str, Any],
    weights: dict[str, np.ndarray] | None = None,
    boxes: Any = ("batch", "n", 4),
    scores: Any = ("batch", "classes", "n"),
    boxes_type: int = FLOAT,
    opset: int = 17,
    **attrs: Any,
) -> Any:
    """A NonMaxSuppression model. ``given`` maps each optional input used to its dims (an
    input of the graph) or to None (an initializer from ``weights``); the others are omitted
    (an empty name, or dropped from the end)."""
    weights = weights or {}
    names = ["boxes", "scores"] + [n if n in given else "" for n in SCALARS]
    while names[-1] == "":
        names.pop()
    inputs = [
        helper.make_tensor_value_info("boxes", boxes_type, list(boxes)),
        helper.make_tensor_value_info("scores", FLOAT, list(scores)),
    ]
    inputs += [
        helper.make_tensor_value_info(n, SCALARS[n], list(d))
        for n, d in given.items()
        if d is not None
    ]
    node = helper.make_node("NonMaxSuppression", names, ["selected"], name="nms", **attrs)
    graph = helper.make_graph(
        [node],
        "g",
        inputs,
        [helper.make_tensor_value_info("selected", INT64, ["k", 3])],
        [numpy_helper.from_array(w, n) for n, w in weights.items()],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def detections(rng: np.random.Generator, batch: int, classes: int, n: int, center: int = 0) -> Any:
    """Boxes that overlap (a coarse grid, corners in either order, duplicates) and scores with
    ties, as float32."""
    boxes = rng.integers(0, 8, (batch, n, 4)).astype(np.float32)
    if center:  # [x, y, w, h]: widths and heights from 0 (empty) up
        boxes[..., 2:] = rng.integers(0, 5, (batch, n, 2))
    scores = (rng.integers(0, 10, (batch, classes, n)) / 10).astype(np.float32)
    return boxes, scores


SIZES = [(1, 1, 0), (1, 2, 7), (2, 3, 20), (3, 1, 60)]


@pytest.mark.parametrize("center", [0, 1])
def test_every_input_at_run_time(center: int) -> None:
    rng = np.random.default_rng(center)
    m = nms_model(
        {"max_output_boxes_per_class": [1], "iou_threshold": [1], "score_threshold": []},
        center_point_box=center,
    )
    feeds = []
    for (batch, classes, n), (limit, iou, thr) in zip(
        SIZES, [(3, 0.5, 0.2), (0, 0.3, 0.0), (5, 0.0, 0.5), (-2, 1.0, 0.1)], strict=True
    ):
        boxes, scores = detections(rng, batch, classes, n, center)
        feeds.append(
            [
                boxes,
                scores,
                np.array([limit]),
                np.array([iou], np.float32),
                np.array(thr, np.float32),
            ]
        )
    for batch, classes, n in SIZES:  # a limit above n, no threshold to speak of
        boxes, scores = detections(rng, batch, classes, n, center)
        feeds.append(
            [
                boxes,
                scores,
                np.array([100]),
                np.array([0.4], np.float32),
                np.array(-1.0, np.float32),
            ]
        )
    program = compare(m, *feeds)
    text = str(dynshape.stages(program)["types"]["main"])
    assert "Tensor[(batch, n, 4), float32]" in text, text
    assert re.search(r"Tensor\[\(\?\d*, 3\), int64\]", text), text


def test_thresholds_as_initializers_as_an_exporter_writes_them() -> None:
    weights = {
        "max_output_boxes_per_class": np.array([4], np.int64),
        "iou_threshold": np.array([0.45], np.float32),
        "score_threshold": np.array([0.25], np.float32),
    }
    m = nms_model(dict.fromkeys(SCALARS), weights)
    rng = np.random.default_rng(7)
    compare(m, *[list(detections(rng, *size)) for size in SIZES])


@pytest.mark.parametrize(
    "given",
    [
        {},  # all omitted: no box is selected
        {"max_output_boxes_per_class": [1]},  # IoU threshold 0, no score threshold
        {"max_output_boxes_per_class": [1], "score_threshold": [1]},  # the IoU one left empty
        {"max_output_boxes_per_class": [], "iou_threshold": []},
    ],
)
def test_omitted_inputs_take_onnx_defaults(given: dict[str, Any]) -> None:
    m = nms_model(given)
    rng = np.random.default_rng(len(given))
    values = {
        "max_output_boxes_per_class": lambda d: np.full(d, 3, np.int64),
        "iou_threshold": lambda d: np.full(d, 0.5, np.float32),
        "score_threshold": lambda d: np.full(d, 0.3, np.float32),
    }
    feeds = []
    for size in SIZES:
        boxes, scores = detections(rng, *size)
        feeds.append([boxes, scores, *(values[n](tuple(d)) for n, d in given.items())])
    compare(m, *feeds)


def test_constant_inputs_are_selected_at_import() -> None:
    rng = np.random.default_rng(3)
    boxes, scores = detections(rng, 2, 2, 9)
    weights = {"boxes": boxes, "scores": scores, "max_output_boxes_per_class": np.array([2])}
    node = helper.make_node(
        "NonMaxSuppression", ["boxes", "scores", "max_output_boxes_per_class"], ["sel"]
    )
    graph = helper.make_graph(
        [node, helper.make_node("Shape", ["sel"], ["count"])],
        "g",
        [],
        [helper.make_tensor_value_info(n, INT64, None) for n in ("sel", "count")],
        [numpy_helper.from_array(w, n) for n, w in weights.items()],
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    program = compare(m, [])
    text = str(dynshape.stages(program)["types"]["main"])
    assert "non_max_suppression" not in text, "folded at import"


def test_the_rows_feed_a_gather_of_the_selected_boxes() -> None:
    """The box column of the rows gathers the boxes of a batch-1 export: GatherND with the
    (batch, box) columns, the usual post-processing step."""
    nodes = [
        helper.make_node(
            "NonMaxSuppression", ["boxes", "scores", "limit", "iou"], ["sel"], name="nms"
        ),
        helper.make_node("Gather", ["sel", "cols"], ["bb"], axis=1),
        helper.make_node("GatherND", ["boxes", "bb"], ["picked"]),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [
            helper.make_tensor_value_info("boxes", FLOAT, ["batch", "n", 4]),
            helper.make_tensor_value_info("scores", FLOAT, ["batch", "classes", "n"]),
        ],
        [helper.make_tensor_value_info("picked", FLOAT, None)],
        [
            numpy_helper.from_array(np.array([5], np.int64), "limit"),
            numpy_helper.from_array(np.array([0.5], np.float32), "iou"),
            numpy_helper.from_array(np.array([0, 2], np.int64), "cols"),
        ],
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    rng = np.random.default_rng(11)
    program = compare(m, *[list(detections(rng, *size)) for size in SIZES])
    text = str(dynshape.stages(program)["types"]["main"])
    assert re.search(r"-> Tensor\[\(\?\d*, 4\), float32\]", text), text


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"center_point_box": 2}, "center_point_box must be 0 or 1, got 2"),
        ({"boxes_type": TensorProto.DOUBLE}, "boxes must be float32, got float64"),
        ({"boxes": ("batch", 4)}, "boxes must have rank 3 (batch, num_boxes, 4), got shape"),
        ({"scores": ("classes", "n")}, "scores must have rank 3 (batch, num_classes, num_boxes)"),
        ({"boxes": ("batch", "n", 5)}, "expected boxes.shape[2] == 4 (box coordinates), got 5"),
        ({"boxes": (2, "n", 4), "scores": (3, "c", "n")}, "boxes.shape[0] == scores.shape[0]"),
        ({"boxes": ("b", 6, 4), "scores": ("b", "c", 5)}, "boxes.shape[1] == scores.shape[2]"),
    ],
)
def test_bad_nodes_are_named(kwargs: dict[str, Any], message: str) -> None:
    text = import_error(nms_model({"max_output_boxes_per_class": [1]}, **kwargs))
    assert "NonMaxSuppression 'nms'" in text and message in text, text


@pytest.mark.parametrize(
    ("given", "weights", "message"),
    [
        ({"max_output_boxes_per_class": [2]}, None, "must hold one value, got shape [2]"),
        (
            {"iou_threshold": None},
            {"iou_threshold": np.array([0.5, 0.6], np.float32)},
            "iou_threshold must hold one value",
        ),
        (
            {"score_threshold": [1, 1]},
            None,
            "score_threshold must hold one value, got shape [1, 1]",
        ),
    ],
)
def test_bad_scalar_inputs_are_named(given: dict[str, Any], weights: Any, message: str) -> None:
    if "max_output_boxes_per_class" not in given:
        given = {"max_output_boxes_per_class": [1], **given}
    text = import_error(nms_model(given, weights))
    assert "NonMaxSuppression 'nms'" in text and message in text, text


def test_bad_element_type_of_a_scalar_is_named() -> None:
    m = nms_model({"max_output_boxes_per_class": [1]})
    m.graph.input[2].type.tensor_type.elem_type = TensorProto.INT32
    text = import_error(m)
    assert "max_output_boxes_per_class must be int64, got int32" in text, text


def test_bad_values_at_run_time_are_errors_naming_the_op() -> None:
    m = nms_model({"max_output_boxes_per_class": [1], "iou_threshold": [1]})
    vm = dynshape.VirtualMachine(dynshape.compile(dynshape.onnx.load(m)))
    boxes, scores = detections(np.random.default_rng(0), 1, 1, 4)
    with pytest.raises(dynshape.DynShapeError, match=r"iou_threshold must be in \[0, 1\], got 1.5"):
        vm.run(boxes, scores, np.array([3]), np.array([1.5], np.float32))
    # the inputs' shared dim n is checked on entry, before the op
    with pytest.raises(dynshape.DynShapeError, match=r"scores.shape\[2\] = 4 but n = 3"):
        vm.run(boxes[:, :3], scores, np.array([3]), np.array([0.5], np.float32))


def test_unrelated_dims_are_checked_by_the_op_at_run_time() -> None:
    m = nms_model({"max_output_boxes_per_class": [1]}, scores=("batch2", "classes", "m"))
    vm = dynshape.VirtualMachine(dynshape.compile(dynshape.onnx.load(m)))
    boxes, scores = detections(np.random.default_rng(1), 2, 1, 4)
    (want,) = ort.InferenceSession(m.SerializeToString()).run(
        None, {"boxes": boxes, "scores": scores, "max_output_boxes_per_class": np.array([2])}
    )
    np.testing.assert_array_equal(vm.run(boxes, scores, np.array([2])), want)
    with pytest.raises(dynshape.DynShapeError, match=r"boxes.shape\[1\] == scores.shape\[2\]"):
        vm.run(boxes, scores[:, :, :3], np.array([2]))
    with pytest.raises(dynshape.DynShapeError, match=r"boxes.shape\[0\] == scores.shape\[0\]"):
        vm.run(boxes, scores[:1], np.array([2]))
