"""A size produced at run time (NonZero's count, a TopK whose k is computed from it) used in a
later shape (issue 29, item 2): as the detection post-processes of exporters write it, the
importer builds the ops' dynamic variants, and the program types and runs; each model is
checked against onnxruntime on inputs that keep 0, some and all of the elements."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from model_builder import compare  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

#: ``kept = NonZero(x > 0).shape[1]`` and ``k = min(kept, 5)``, as a 1-element int64 tensor.
KEPT_NODES = [
    helper.make_node("Greater", ["x", "zero_f"], ["pos"]),
    helper.make_node("NonZero", ["pos"], ["idx"]),
    helper.make_node("Shape", ["idx"], ["ishape"]),
    helper.make_node("Gather", ["ishape", "one"], ["kept"], axis=0),
    helper.make_node("Unsqueeze", ["kept", "ax0"], ["kept1"]),
    helper.make_node("Min", ["kept1", "five"], ["k"]),
]
KEPT_INITS = {
    "zero_f": np.array(0, np.float32),
    "one": np.array(1, np.int64),
    "ax0": np.array([0], np.int64),
    "five": np.array([5], np.int64),
    "four": np.array([4], np.int64),
}


def _model(nodes: list, out_dtype: int = TensorProto.FLOAT) -> onnx.ModelProto:
    graph = helper.make_graph(
        [*KEPT_NODES, *nodes],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n"])],
        [helper.make_tensor_value_info("y", out_dtype, None)],
        [numpy_helper.from_array(v, k) for k, v in KEPT_INITS.items()],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _feeds() -> list[list[np.ndarray]]:
    rng = np.random.default_rng(0)
    return [
        [rng.standard_normal(40).astype(np.float32)],  # k = 5
        [np.array([-1, 2, -3, 4], np.float32)],  # k = 2
        [-np.ones(6, np.float32)],  # k = 0
    ]


def test_topk_then_reshape_to_k_rows() -> None:
    """The detection post-process: the top k scores, tiled into k boxes of 4."""
    m = _model(
        [
            helper.make_node("TopK", ["x", "k"], ["vals", "inds"], axis=0),
            helper.make_node("Concat", ["k", "four"], ["shp"], axis=0),
            helper.make_node("Tile", ["vals", "four"], ["tiled"]),
            helper.make_node("Reshape", ["tiled", "shp"], ["y"]),
        ]
    )
    compare(m, *_feeds())


def test_constant_of_a_data_dependent_shape() -> None:
    m = _model(
        [
            helper.make_node("Concat", ["k", "four"], ["shp"], axis=0),
            helper.make_node(
                "ConstantOfShape",
                ["shp"],
                ["y"],
                value=numpy_helper.from_array(np.array([1.5], np.float32)),
            ),
        ]
    )
    compare(m, *_feeds())


@pytest.mark.parametrize("dtype", [TensorProto.FLOAT, TensorProto.BOOL])
def test_expand_to_a_data_dependent_shape(dtype: int) -> None:
    cast = [helper.make_node("Cast", ["row"], ["row_t"], to=dtype)]
    m = _model(
        [
            helper.make_node("Slice", ["x", "zero_i", "four"], ["row"]),
            *cast,
            helper.make_node("Unsqueeze", ["row_t", "ax0"], ["row2"]),
            helper.make_node("Concat", ["k", "one1"], ["shp"], axis=0),
            helper.make_node("Expand", ["row2", "shp"], ["y"]),
        ],
        out_dtype=dtype,
    )
    m.graph.initializer.extend(
        [
            numpy_helper.from_array(np.array([0], np.int64), "zero_i"),
            numpy_helper.from_array(np.array([1], np.int64), "one1"),
        ]
    )
    compare(m, *_feeds())
