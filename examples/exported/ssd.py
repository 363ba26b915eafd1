"""An SSD-style detector end to end, written node by node the way PyTorch's exporters write one
(torchvision's ``ssdlite`` pattern, shrunk): image in, detections out, at any image size.

- a backbone of two stride-2 convolutions and two 1x1 heads (class logits and box deltas,
  ``ANCHORS`` anchors per cell), flattened to ``(batch, cells * ANCHORS, ...)`` through the
  exporter's ``Shape -> Gather -> Concat -> Reshape`` subgraphs;
- anchors computed from the feature map's shape in float math, as the exporter writes
  torchvision's ``DefaultBoxGenerator``: the stride is ``Cast(H) / Cast(h)`` (a shape value turned
  into a float), cell centres are ``(Range(0, h) + 0.5) * stride``, the grid is made by
  ``Unsqueeze``/``Expand``; box sizes are fractions of the image's height and width;
- box decoding (``BoxCoder.decode``: centre offsets scaled by the anchor size, ``Exp`` of the
  size deltas), softmax class scores without the background class;
- ``NonMaxSuppression`` per class, then the post-process: ``GatherND`` of the selected boxes and
  scores, and a ``TopK`` of the best ``k = min(MAX_DETECTIONS, selected)`` detections (a ``k``
  computed from a data-dependent count) whose boxes are ``Reshape``d to ``[k, 4]`` from that
  same ``k``.

``ssd()`` builds the model with random weights (``seed``); the graph's input is ``image``
``[batch, 3, height, width]``, its outputs ``boxes [k, 4]``, ``scores [k]``, ``labels [k]`` and
``batch_index [k]``.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

#: Anchors per cell, classes (background first), detections kept at most.
ANCHORS, CLASSES, MAX_DETECTIONS = 2, 4, 12
#: Anchor sizes as fractions of the image's height and width.
ANCHOR_SIZES = ((0.2, 0.2), (0.35, 0.25))
IOU, SCORE_THRESHOLD, MAX_PER_CLASS = 0.45, 0.3, 8


def _tensor(name: str, value: object, dtype: type = np.float32) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(value, dtype=dtype), name)


def _backbone(rng: np.random.Generator) -> tuple[list[onnx.NodeProto], list[onnx.TensorProto]]:
    """image -> feature map ``f`` (batch, 16, h, w), h = ceil(height / 4)."""
    n = helper.make_node
    nodes = [
        n(
            "Conv",
            ["image", "w1", "b1"],
            ["c1"],
            kernel_shape=[3, 3],
            strides=[2, 2],
            pads=[1, 1, 1, 1],
            name="/backbone/conv1/Conv",
        ),
        n("Relu", ["c1"], ["r1"], name="/backbone/relu1/Relu"),
        n(
            "Conv",
            ["r1", "w2", "b2"],
            ["c2"],
            kernel_shape=[3, 3],
            strides=[2, 2],
            pads=[1, 1, 1, 1],
            name="/backbone/conv2/Conv",
        ),
        n("Relu", ["c2"], ["f"], name="/backbone/relu2/Relu"),
    ]
    inits = [
        _tensor("w1", rng.standard_normal((8, 3, 3, 3)) * 0.4),
        _tensor("b1", rng.standard_normal(8) * 0.1),
        _tensor("w2", rng.standard_normal((16, 8, 3, 3)) * 0.3),
        _tensor("b2", rng.standard_normal(16) * 0.1),
    ]
    return nodes, inits


def _heads(rng: np.random.Generator) -> tuple[list[onnx.NodeProto], list[onnx.TensorProto]]:
    """f -> ``logits`` (batch, cells * ANCHORS, CLASSES), ``deltas`` (batch, cells * ANCHORS,
    4): 1x1 convolutions, NCHW -> NHWC, then Reshape to (batch, -1, width) with the batch taken
    from ``Shape(f)`` as the exporter writes ``x.view(x.size(0), -1, width)``."""
    n = helper.make_node
    nodes = [
        n("Conv", ["f", "wc", "bc"], ["cls_map"], kernel_shape=[1, 1], name="/head/cls/Conv"),
        n("Conv", ["f", "wb", "bb"], ["box_map"], kernel_shape=[1, 1], name="/head/box/Conv"),
        n("Shape", ["f"], ["f_shape"]),
        n("Gather", ["f_shape", "i0"], ["batch"], axis=0),
        n("Unsqueeze", ["batch", "ax0"], ["batch_1"]),
    ]
    for head in ("cls", "box"):
        nodes += [
            n("Transpose", [f"{head}_map"], [f"{head}_nhwc"], perm=[0, 2, 3, 1]),
            n("Concat", ["batch_1", "minus1", f"width_{head}"], [f"{head}_shape"], axis=0),
            n("Reshape", [f"{head}_nhwc", f"{head}_shape"], [f"{head}_flat"]),
        ]
    nodes += [
        n("Identity", ["cls_flat"], ["logits"]),
        n("Identity", ["box_flat"], ["deltas"]),
    ]
    class_bias = np.tile(np.array([1.0] + [0.0] * (CLASSES - 1)), ANCHORS)
    inits = [
        _tensor("wc", rng.standard_normal((ANCHORS * CLASSES, 16, 1, 1)) * 0.6),
        _tensor("bc", class_bias),
        _tensor("wb", rng.standard_normal((ANCHORS * 4, 16, 1, 1)) * 0.2),
        _tensor("bb", np.zeros(ANCHORS * 4)),
        _tensor("width_cls", [CLASSES], np.int64),
        _tensor("width_box", [4], np.int64),
    ]
    return nodes, inits


def _anchors() -> tuple[list[onnx.NodeProto], list[onnx.TensorProto]]:
    """``anchors`` (cells * ANCHORS, 4) as (cx, cy, w, h) in pixels, from the shapes of the
    image and of the feature map, in float math."""
    n = helper.make_node
    nodes = [
        n("Shape", ["image"], ["image_shape"]),
        n("Gather", ["image_shape", "i2"], ["height"], axis=0),
        n("Gather", ["image_shape", "i3"], ["width"], axis=0),
        n("Gather", ["f_shape", "i2"], ["h"], axis=0),
        n("Gather", ["f_shape", "i3"], ["w"], axis=0),
        n("Cast", ["height"], ["height_f"], to=TensorProto.FLOAT),
        n("Cast", ["width"], ["width_f"], to=TensorProto.FLOAT),
        n("Cast", ["h"], ["h_f"], to=TensorProto.FLOAT),
        n("Cast", ["w"], ["w_f"], to=TensorProto.FLOAT),
        n("Div", ["height_f", "h_f"], ["stride_y"]),
        n("Div", ["width_f", "w_f"], ["stride_x"]),
        n("Range", ["i0", "h", "i1"], ["rows"]),
        n("Range", ["i0", "w", "i1"], ["cols"]),
        n("Cast", ["rows"], ["rows_f"], to=TensorProto.FLOAT),
        n("Cast", ["cols"], ["cols_f"], to=TensorProto.FLOAT),
        n("Add", ["rows_f", "half"], ["rows_c"]),
        n("Add", ["cols_f", "half"], ["cols_c"]),
        n("Mul", ["rows_c", "stride_y"], ["cy_1d"]),
        n("Mul", ["cols_c", "stride_x"], ["cx_1d"]),
        # the grid (h, w, ANCHORS): cy varies along h, cx along w
        n("Unsqueeze", ["h", "ax0"], ["h_1"]),
        n("Unsqueeze", ["w", "ax0"], ["w_1"]),
        n("Concat", ["h_1", "w_1", "anchors_1"], ["grid_shape"], axis=0),
        n("Unsqueeze", ["cy_1d", "ax12"], ["cy_col"]),
        n("Unsqueeze", ["cx_1d", "ax02"], ["cx_row"]),
        n("Expand", ["cy_col", "grid_shape"], ["cy"]),
        n("Expand", ["cx_row", "grid_shape"], ["cx"]),
        n("Mul", ["height_f", "anchor_h"], ["ah_1d"]),
        n("Mul", ["width_f", "anchor_w"], ["aw_1d"]),
        n("Expand", ["ah_1d", "grid_shape"], ["ah"]),
        n("Expand", ["aw_1d", "grid_shape"], ["aw"]),
        n("Unsqueeze", ["cx", "ax3"], ["cx_4"]),
        n("Unsqueeze", ["cy", "ax3"], ["cy_4"]),
        n("Unsqueeze", ["aw", "ax3"], ["aw_4"]),
        n("Unsqueeze", ["ah", "ax3"], ["ah_4"]),
        n("Concat", ["cx_4", "cy_4", "aw_4", "ah_4"], ["grid"], axis=3),
        n("Reshape", ["grid", "rows_by_4"], ["anchors"]),
    ]
    inits = [
        _tensor("i0", 0, np.int64),
        _tensor("i1", 1, np.int64),
        _tensor("i2", 2, np.int64),
        _tensor("i3", 3, np.int64),
        _tensor("ax0", [0], np.int64),
        _tensor("ax3", [3], np.int64),
        _tensor("ax12", [1, 2], np.int64),
        _tensor("ax02", [0, 2], np.int64),
        _tensor("minus1", [-1], np.int64),
        _tensor("anchors_1", [ANCHORS], np.int64),
        _tensor("rows_by_4", [-1, 4], np.int64),
        _tensor("half", 0.5),
        _tensor("anchor_h", [h for h, _ in ANCHOR_SIZES]),
        _tensor("anchor_w", [w for _, w in ANCHOR_SIZES]),
    ]
    return nodes, inits


def _decode() -> tuple[list[onnx.NodeProto], list[onnx.TensorProto]]:
    """deltas, anchors -> ``decoded`` (batch, cells * ANCHORS, 4) as [y1, x1, y2, x2], and
    ``class_scores`` (batch, CLASSES - 1, cells * ANCHORS) without the background."""
    n = helper.make_node
    nodes = [
        n("Slice", ["deltas", "s0", "s2", "s_axis"], ["d_xy"]),
        n("Slice", ["deltas", "s2", "s4", "s_axis"], ["d_wh"]),
        n("Slice", ["anchors", "s0", "s2", "s_last"], ["a_xy"]),
        n("Slice", ["anchors", "s2", "s4", "s_last"], ["a_wh"]),
        n("Mul", ["d_xy", "xy_scale"], ["d_xy_s"]),
        n("Mul", ["d_xy_s", "a_wh"], ["offset"]),
        n("Add", ["a_xy", "offset"], ["center"]),
        n("Mul", ["d_wh", "wh_scale"], ["d_wh_s"]),
        n("Exp", ["d_wh_s"], ["growth"]),
        n("Mul", ["a_wh", "growth"], ["size"]),
        n("Mul", ["size", "half"], ["half_size"]),
        n("Sub", ["center", "half_size"], ["low_xy"]),
        n("Add", ["center", "half_size"], ["high_xy"]),
        # [x, y] pairs -> [y1, x1, y2, x2] (NonMaxSuppression's default corner order)
        n("Slice", ["low_xy", "s1", "s2", "s_axis"], ["y1"]),
        n("Slice", ["low_xy", "s0", "s1", "s_axis"], ["x1"]),
        n("Slice", ["high_xy", "s1", "s2", "s_axis"], ["y2"]),
        n("Slice", ["high_xy", "s0", "s1", "s_axis"], ["x2"]),
        n("Concat", ["y1", "x1", "y2", "x2"], ["decoded"], axis=2),
        n("Softmax", ["logits"], ["probs"], axis=-1),
        n("Slice", ["probs", "s1", "s_classes", "s_axis"], ["fg"]),
        n("Transpose", ["fg"], ["class_scores"], perm=[0, 2, 1]),
    ]
    inits = [
        _tensor("s0", [0], np.int64),
        _tensor("s1", [1], np.int64),
        _tensor("s2", [2], np.int64),
        _tensor("s4", [4], np.int64),
        _tensor("s_classes", [CLASSES], np.int64),
        _tensor("s_axis", [2], np.int64),
        _tensor("s_last", [1], np.int64),
        _tensor("xy_scale", 0.1),
        _tensor("wh_scale", 0.2),
    ]
    return nodes, inits


def _post_process() -> tuple[list[onnx.NodeProto], list[onnx.TensorProto]]:
    """NMS per class, then the best ``k = min(MAX_DETECTIONS, selected)`` detections."""
    n = helper.make_node
    nodes = [
        n(
            "NonMaxSuppression",
            ["decoded", "class_scores", "max_per_class", "iou", "score_threshold"],
            ["selected"],
            name="/postprocess/nms",
        ),
        n("Gather", ["selected", "batch_box"], ["batch_and_box"], axis=1),
        n("GatherND", ["decoded", "batch_and_box"], ["sel_boxes"]),
        n("GatherND", ["class_scores", "selected"], ["sel_scores"]),
        n("Gather", ["selected", "i1"], ["sel_classes"], axis=1),
        n("Gather", ["selected", "i0"], ["sel_batch"], axis=1),
        n("Shape", ["sel_scores"], ["count"]),
        n("Min", ["count", "max_detections"], ["k"], name="/postprocess/k"),
        n("TopK", ["sel_scores", "k"], ["scores", "order"], axis=0, name="/postprocess/TopK"),
        n("Gather", ["sel_boxes", "order"], ["top_boxes"], axis=0),
        n("Concat", ["k", "four"], ["k_by_4"], axis=0),
        n("Reshape", ["top_boxes", "k_by_4"], ["boxes"]),
        n("Gather", ["sel_classes", "order"], ["labels_0"], axis=0),
        n("Add", ["labels_0", "one_i64"], ["labels"]),  # class 0 is the background
        n("Gather", ["sel_batch", "order"], ["batch_index"], axis=0),
    ]
    inits = [
        _tensor("max_per_class", [MAX_PER_CLASS], np.int64),
        _tensor("iou", [IOU]),
        _tensor("score_threshold", [SCORE_THRESHOLD]),
        _tensor("batch_box", [0, 2], np.int64),
        _tensor("max_detections", [MAX_DETECTIONS], np.int64),
        _tensor("four", [4], np.int64),
        _tensor("one_i64", 1, np.int64),
    ]
    return nodes, inits


def ssd(seed: int = 0) -> onnx.ModelProto:
    """The detector (see the module docstring), opset 17."""
    rng = np.random.default_rng(seed)
    parts = [_backbone(rng), _heads(rng), _anchors(), _decode(), _post_process()]
    nodes = [node for part_nodes, _ in parts for node in part_nodes]
    inits = [init for _, part_inits in parts for init in part_inits]
    value = helper.make_tensor_value_info
    graph = helper.make_graph(
        nodes,
        "ssd",
        [value("image", TensorProto.FLOAT, ["batch", 3, "height", "width"])],
        [
            value("boxes", TensorProto.FLOAT, ["k", 4]),
            value("scores", TensorProto.FLOAT, ["k"]),
            value("labels", TensorProto.INT64, ["k"]),
            value("batch_index", TensorProto.INT64, ["k"]),
        ],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
