"""Small models of the kinds people export, built with ``onnx.helper`` as the exporters write
them (weights as initializers, shape subgraphs of Shape/Gather/Unsqueeze/Concat, dynamic axes
named by ``dim_param``): a CNN with batch norm and pooling, a transformer encoder layer with
an attention mask, a GRU tagger and a detector's post-processing (TopK, NonMaxSuppression)."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def _init(rng: np.random.Generator, name: str, *shape: int, scale: float = 0.2) -> onnx.TensorProto:
    return numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name)


def _i64(name: str, *values: int) -> onnx.TensorProto:
    return numpy_helper.from_array(np.array(values, dtype=np.int64), name)


def _scalar(name: str, value: float | int, dtype: type = np.float32) -> onnx.TensorProto:
    return numpy_helper.from_array(np.array(value, dtype=dtype), name)


def cnn(seed: int = 0) -> onnx.ModelProto:
    """Conv-BN-Relu-MaxPool-Conv-Relu-GlobalAveragePool-Flatten-Gemm on (N, 3, H, W)."""
    rng = np.random.default_rng(seed)
    n = helper.make_node
    nodes = [
        n("Conv", ["x", "w1", "b1"], ["c1"], kernel_shape=[3, 3], pads=[1, 1, 1, 1], name="conv1"),
        n("BatchNormalization", ["c1", "g", "be", "mu", "var"], ["bn"], epsilon=1e-5, name="bn1"),
        n("Relu", ["bn"], ["r1"]),
        n("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2], name="pool1"),
        n("Conv", ["p1", "w2"], ["c2"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
        n("Relu", ["c2"], ["r2"]),
        n("GlobalAveragePool", ["r2"], ["gap"]),
        n("Flatten", ["gap"], ["flat"], axis=1),
        n("Gemm", ["flat", "wf", "bf"], ["logits"], transB=1, name="fc"),
    ]
    inits = [
        _init(rng, "w1", 8, 3, 3, 3),
        _init(rng, "b1", 8),
        numpy_helper.from_array(rng.uniform(0.5, 1.5, 8).astype(np.float32), "g"),
        _init(rng, "be", 8),
        _init(rng, "mu", 8),
        numpy_helper.from_array(rng.uniform(0.5, 1.5, 8).astype(np.float32), "var"),
        _init(rng, "w2", 16, 8, 3, 3),
        _init(rng, "wf", 10, 16),
        _init(rng, "bf", 10),
    ]
    graph = helper.make_graph(
        nodes,
        "cnn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, "H", "W"])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 10])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


D, HEADS = 32, 4


def encoder(seed: int = 0) -> onnx.ModelProto:
    """A pre-norm encoder layer with a (batch, seq) attention mask, as TorchScript exports it:
    the head split and merge compute their shapes from ``Shape(x)``."""
    rng = np.random.default_rng(seed)
    n = helper.make_node
    dh = D // HEADS
    nodes = [
        n("LayerNormalization", ["x", "ln_g", "ln_b"], ["a"], axis=-1, epsilon=1e-5),
        n("Shape", ["x"], ["shape"]),
        n("Gather", ["shape", "zero"], ["b"], axis=0),
        n("Gather", ["shape", "one"], ["s"], axis=0),
        n("Unsqueeze", ["b", "ax0"], ["bu"]),
        n("Unsqueeze", ["s", "ax0"], ["su"]),
        n("Concat", ["bu", "su", "heads", "dhead"], ["split_shape"], axis=0),
        n("Concat", ["bu", "su", "dmodel"], ["merge_shape"], axis=0),
    ]
    for t in ("q", "k", "v"):
        nodes += [
            n("MatMul", ["a", f"w{t}"], [f"{t}0"]),
            n("Add", [f"{t}0", f"b{t}"], [f"{t}1"]),
            n("Reshape", [f"{t}1", "split_shape"], [f"{t}2"], name=f"split_{t}"),
            n("Transpose", [f"{t}2"], [t], perm=[0, 2, 1, 3] if t != "k" else [0, 2, 3, 1]),
        ]
    nodes += [
        n("MatMul", ["q", "k"], ["scores0"], name="scores"),
        n("Div", ["scores0", "sqrt_dh"], ["scores1"]),
        n("Unsqueeze", ["mask", "ax12"], ["m1"]),
        n("Cast", ["m1"], ["m2"], to=TensorProto.FLOAT),
        n("Sub", ["one_f", "m2"], ["m3"]),
        n("Mul", ["m3", "neg_big"], ["m4"]),
        n("Add", ["scores1", "m4"], ["scores2"]),
        n("Softmax", ["scores2"], ["probs"], axis=-1),
        n("MatMul", ["probs", "v"], ["ctx0"]),
        n("Transpose", ["ctx0"], ["ctx1"], perm=[0, 2, 1, 3]),
        n("Reshape", ["ctx1", "merge_shape"], ["ctx"], name="merge"),
        n("MatMul", ["ctx", "wo"], ["o0"]),
        n("Add", ["o0", "bo"], ["o1"]),
        n("Add", ["x", "o1"], ["y"]),
    ]
    inits = [
        numpy_helper.from_array(np.ones(D, np.float32), "ln_g"),
        numpy_helper.from_array(np.zeros(D, np.float32), "ln_b"),
        _scalar("zero", 0, np.int64),
        _scalar("one", 1, np.int64),
        _i64("ax0", 0),
        _i64("ax12", 1, 2),
        _i64("heads", HEADS),
        _i64("dhead", dh),
        _i64("dmodel", D),
        _scalar("sqrt_dh", float(np.sqrt(dh))),
        _scalar("one_f", 1.0),
        _scalar("neg_big", -1e9),
        _init(rng, "wo", D, D),
        _init(rng, "bo", D),
    ]
    for t in ("q", "k", "v"):
        inits += [_init(rng, f"w{t}", D, D), _init(rng, f"b{t}", D)]
    graph = helper.make_graph(
        nodes,
        "encoder",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", D]),
            helper.make_tensor_value_info("mask", TensorProto.INT64, ["batch", "seq"]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq", D])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def weights(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    """The initializers of ``model`` by name."""
    return {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}


def encoder_numpy(w: dict[str, np.ndarray], x: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """What ``encoder`` computes, in plain numpy (float32), from its weights."""
    b, s, _ = x.shape
    dh = D // HEADS
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    a = (x - mu) / np.sqrt(var + 1e-5) * w["ln_g"] + w["ln_b"]

    def heads(t: str) -> np.ndarray:
        return (a @ w[f"w{t}"] + w[f"b{t}"]).reshape(b, s, HEADS, dh).transpose(0, 2, 1, 3)

    q, k, v = heads("q"), heads("k"), heads("v")
    scores = q @ k.transpose(0, 1, 3, 2) / np.float32(np.sqrt(dh))
    scores = scores + (1 - mask[:, None, None, :].astype(np.float32)) * np.float32(-1e9)
    scores = np.exp(scores - scores.max(-1, keepdims=True))
    probs = scores / scores.sum(-1, keepdims=True)
    ctx = (probs @ v).transpose(0, 2, 1, 3).reshape(b, s, D)
    return x + (ctx @ w["wo"] + w["bo"])


def stacked_encoder(layers: int, seed: int = 0) -> onnx.ModelProto:
    """``layers`` encoder layers one after the other (for import and compile time by size)."""
    base = encoder(seed).graph
    nodes, inits = [], []
    previous = "x"
    for layer in range(layers):

        def name(n: str, layer: int = layer, previous: str = previous) -> str:
            if n == "x":
                return previous
            return n if n == "mask" else f"l{layer}_{n}"

        for node in base.node:
            copy = onnx.NodeProto()
            copy.CopyFrom(node)
            copy.ClearField("input")
            copy.input.extend(name(i) for i in node.input)
            copy.ClearField("output")
            copy.output.extend(name(o) for o in node.output)
            copy.name = f"l{layer}_{node.name}" if node.name else ""
            nodes.append(copy)
        for t in base.initializer:
            init = onnx.TensorProto()
            init.CopyFrom(t)
            init.name = name(t.name)
            inits.append(init)
        previous = f"l{layer}_y"
    out = helper.make_tensor_value_info(previous, TensorProto.FLOAT, ["batch", "seq", D])
    graph = helper.make_graph(nodes, "stack", list(base.input), [out], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


VOCAB, EMBED, HIDDEN, TAGS = 20, 8, 6, 5


def gru_tagger(seed: int = 0) -> onnx.ModelProto:
    """Token ids (seq, batch) -> embedding (Gather) -> bidirectional GRU -> per-token tag logits,
    as a tagger exports: the GRU's Y (seq, 2, batch, hidden) is transposed and reshaped to
    (seq, batch, 2*hidden) with a shape computed from ``Shape(ids)``."""
    rng = np.random.default_rng(seed)
    n = helper.make_node
    nodes = [
        n("Gather", ["table", "ids"], ["emb"], axis=0),
        n(
            "GRU",
            ["emb", "w", "r", "b"],
            ["y", ""],
            hidden_size=HIDDEN,
            direction="bidirectional",
            name="gru",
        ),
        n("Transpose", ["y"], ["yt"], perm=[0, 2, 1, 3]),
        n("Shape", ["ids"], ["s"]),
        n("Concat", ["s", "two_h"], ["shape"], axis=0),
        n("Reshape", ["yt", "shape"], ["feat"], name="merge_directions"),
        n("MatMul", ["feat", "proj"], ["logits0"]),
        n("Add", ["logits0", "bias"], ["logits"]),
    ]
    inits = [
        _init(rng, "table", VOCAB, EMBED, scale=1.0),
        _init(rng, "w", 2, 3 * HIDDEN, EMBED),
        _init(rng, "r", 2, 3 * HIDDEN, HIDDEN),
        _init(rng, "b", 2, 6 * HIDDEN),
        _i64("two_h", 2 * HIDDEN),
        _init(rng, "proj", 2 * HIDDEN, TAGS),
        _init(rng, "bias", TAGS),
    ]
    graph = helper.make_graph(
        nodes,
        "tagger",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, ["seq", "batch"])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["seq", "batch", TAGS])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


PRE_NMS, MAX_PER_CLASS, IOU, SCORE = 40, 5, 0.5, 0.2


def detection() -> onnx.ModelProto:
    """Detection post-processing as a torchvision-style exporter writes it, on a detector's
    boxes (batch, num_boxes, 4) ``[y1, x1, y2, x2]`` and class scores (batch, num_classes,
    num_boxes): keep the ``k = min(num_boxes, PRE_NMS)`` boxes with the best score of any class
    (TopK, ``k`` computed from ``Shape(scores)``), gather their boxes and scores
    (GatherElements with indices expanded by broadcasting), NonMaxSuppression per class, and
    gather the selected rows: the boxes, scores, class ids, batch ids and the indices of the
    boxes in the input (Gather and GatherND with the columns of the NMS output)."""
    n = helper.make_node
    nodes = [
        n("Shape", ["scores"], ["shape"]),
        n("Gather", ["shape", "two"], ["num_boxes"], axis=0),
        n("Gather", ["shape", "one"], ["num_classes"], axis=0),
        n("Unsqueeze", ["num_boxes", "ax0"], ["num_boxes_1"]),
        n("Min", ["num_boxes_1", "pre_nms"], ["k"], name="k_of_topk"),
        n("ReduceMax", ["scores"], ["best"], axes=[1], keepdims=0),
        n("TopK", ["best", "k"], ["top_best", "top_index"], axis=1, name="pre_nms_topk"),
        # boxes (batch, k, 4): the index broadcast over the 4 coordinates
        n("Unsqueeze", ["top_index", "ax2"], ["index_b"]),
        n("Expand", ["index_b", "four"], ["index_boxes"]),
        n("GatherElements", ["boxes", "index_boxes"], ["top_boxes"], axis=1),
        # scores (batch, num_classes, k): the index broadcast over the classes
        n("Unsqueeze", ["top_index", "ax1"], ["index_s"]),
        n("Unsqueeze", ["num_classes", "ax0"], ["num_classes_1"]),
        n("Concat", ["one_1", "num_classes_1", "one_1"], ["classes_shape"], axis=0),
        n("Expand", ["index_s", "classes_shape"], ["index_scores"]),
        n("GatherElements", ["scores", "index_scores"], ["top_scores"], axis=2),
        n(
            "NonMaxSuppression",
            ["top_boxes", "top_scores", "max_per_class", "iou", "score_threshold"],
            ["selected"],
            name="nms",
        ),
        n("Gather", ["selected", "batch_and_box"], ["batch_box"], axis=1),
        n("GatherND", ["top_boxes", "batch_box"], ["det_boxes"]),
        n("GatherND", ["top_scores", "selected"], ["det_scores"]),
        n("GatherND", ["top_index", "batch_box"], ["det_box_index"]),
        n("Gather", ["selected", "one"], ["det_classes"], axis=1),
        n("Gather", ["selected", "zero"], ["det_batch"], axis=1),
    ]
    inits = [
        numpy_helper.from_array(np.array(0, np.int64), "zero"),
        numpy_helper.from_array(np.array(1, np.int64), "one"),
        numpy_helper.from_array(np.array(2, np.int64), "two"),
        _i64("one_1", 1),
        _i64("ax0", 0),
        _i64("ax1", 1),
        _i64("ax2", 2),
        _i64("pre_nms", PRE_NMS),
        _i64("four", 1, 1, 4),
        _i64("max_per_class", MAX_PER_CLASS),
        numpy_helper.from_array(np.array([IOU], np.float32), "iou"),
        numpy_helper.from_array(np.array([SCORE], np.float32), "score_threshold"),
        _i64("batch_and_box", 0, 2),
    ]
    outputs = [
        helper.make_tensor_value_info("det_boxes", TensorProto.FLOAT, ["detections", 4]),
        helper.make_tensor_value_info("det_scores", TensorProto.FLOAT, ["detections"]),
        helper.make_tensor_value_info("det_classes", TensorProto.INT64, ["detections"]),
        helper.make_tensor_value_info("det_batch", TensorProto.INT64, ["detections"]),
        helper.make_tensor_value_info("det_box_index", TensorProto.INT64, ["detections"]),
    ]
    graph = helper.make_graph(
        nodes,
        "detection_postprocess",
        [
            helper.make_tensor_value_info("boxes", TensorProto.FLOAT, ["batch", "num_boxes", 4]),
            helper.make_tensor_value_info(
                "scores", TensorProto.FLOAT, ["batch", "num_classes", "num_boxes"]
            ),
        ],
        outputs,
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def detector_output(
    rng: np.random.Generator, batch: int, classes: int, n: int
) -> tuple[np.ndarray, np.ndarray]:
    """A detector's raw output: boxes jittered around three objects per image (so that NMS
    suppresses), 30% with their corners swapped, and uniform class scores."""
    objects = rng.uniform(0, 20, (batch, 3, 2))
    centers = objects[np.arange(batch)[:, None], rng.integers(0, 3, (batch, n))]
    centers = centers + rng.normal(0, 0.3, (batch, n, 2))
    half = rng.uniform(1.8, 2.2, (batch, n, 2))
    boxes = np.concatenate([centers - half, centers + half], axis=-1)
    flip = rng.random((batch, n)) < 0.3
    boxes[flip] = boxes[flip][:, [2, 3, 0, 1]]
    scores = rng.random((batch, classes, n))
    return boxes.astype(np.float32), scores.astype(np.float32)
