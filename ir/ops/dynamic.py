"""Shape and data-dependent ops: their output shapes depend on input values."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..attrs import BOOL, DTYPE, INT, Attrs, attr, choice
from ..dtypes import is_float
from ..errors import IRError
from ..op import OpPattern
from ._declare import declare, fixed, from_attr, input_dtype, integer_input, numeric_like

declare(
    "shape_of",
    ["x"],
    OpPattern.OPAQUE,
    from_attr(),
    [attr("dtype", choice("int32", "int64"), "int64")],
    doc="the shape of x as a 1-d integer tensor",
)


def _dyn_reshape(dtypes: Sequence[Any], attrs: Attrs) -> str:
    integer_input(dtypes, 1, "dyn.reshape's newshape")
    return input_dtype(dtypes, 0, "the data")


declare(
    "dyn.reshape",
    ["x", "newshape"],
    OpPattern.OPAQUE,
    _dyn_reshape,
    doc="reshape to the shape held in a 1-d integer tensor (0 and -1 as in reshape)",
)


def _dyn_create(dtypes: Sequence[Any], attrs: Attrs) -> str:
    integer_input(dtypes, len(dtypes) - 1, "the shape tensor")
    return str(attrs["dtype"])


declare(
    "dyn.zeros",
    ["shape"],
    OpPattern.OPAQUE,
    _dyn_create,
    [attr("dtype", DTYPE, "float32")],
    doc="zeros of a shape held in a tensor",
)
declare(
    "dyn.ones",
    ["shape"],
    OpPattern.OPAQUE,
    _dyn_create,
    [attr("dtype", DTYPE, "float32")],
    doc="ones of a shape held in a tensor",
)
declare(
    "dyn.full",
    ["fill_value", "shape"],
    OpPattern.OPAQUE,
    _dyn_create,
    [attr("dtype", DTYPE, "float32")],
    doc="fill_value in a shape held in a tensor",
)


def _dyn_slice(dtypes: Sequence[Any], attrs: Attrs) -> str:
    for i, what in [(1, "begin"), (2, "end"), (3, "strides")]:
        integer_input(dtypes, i, f"dyn.strided_slice's {what}")
    return input_dtype(dtypes, 0, "the data")


declare(
    "dyn.strided_slice",
    ["x", "begin", "end", "strides"],
    OpPattern.OPAQUE,
    _dyn_slice,
    doc="strided_slice with begin/end/strides held in 1-d integer tensors",
)
declare(
    "argwhere",
    ["x"],
    OpPattern.OPAQUE,
    fixed("int64"),
    doc="indices of the non-zero elements, shape (count, rank)",
)


def _compress(dtypes: Sequence[Any], attrs: Attrs) -> str:
    input_dtype(dtypes, 1, "compress's mask")  # any dtype: non-zero selects, as in argwhere
    return input_dtype(dtypes, 0, "the data")


declare(
    "compress",
    ["x", "mask"],
    OpPattern.OPAQUE,
    _compress,
    [attr("axis", INT, 0)],
    doc="the slices of x along axis where the 1-d mask (mask.shape[0] == x.shape[axis]) is "
    "non-zero, in order: x[mask] for a 1-d x, take(x, squeeze(argwhere(mask), axis=[1]), "
    "axis) without the index tensor; the axis dim becomes the mask's non-zero count",
)


_TOPK_ATTRS = [
    attr("axis", INT, -1),
    attr("ret_type", choice("both", "values", "indices"), "both"),
    attr("is_ascend", BOOL, False),
    attr("dtype", DTYPE, "int64"),
]


def _topk_result(dtypes: Sequence[Any], attrs: Attrs) -> str | tuple[str, ...]:
    values = numeric_like(dtypes, attrs)
    ret = attrs["ret_type"]
    if ret == "both":
        return (values, str(attrs["dtype"]))
    return values if ret == "values" else str(attrs["dtype"])


declare(
    "topk",
    ["x"],
    OpPattern.OPAQUE,
    _topk_result,
    [attr("k", INT), *_TOPK_ATTRS],
    doc="the k largest (or smallest) along axis, sorted; values and/or indices",
)


def _dyn_topk(dtypes: Sequence[Any], attrs: Attrs) -> str | tuple[str, ...]:
    integer_input(dtypes, 1, "dyn.topk's k")
    return _topk_result(dtypes, attrs)


declare(
    "dyn.topk",
    ["x", "k"],
    OpPattern.OPAQUE,
    _dyn_topk,
    _TOPK_ATTRS,
    doc="topk with k held in a scalar integer tensor",
)


def _non_max_suppression(dtypes: Sequence[Any], attrs: Attrs) -> str:
    for i, what in [(0, "boxes"), (1, "scores"), (3, "iou_threshold"), (4, "score_threshold")]:
        if not is_float(input_dtype(dtypes, i, what)):
            raise IRError(f"non_max_suppression's {what} must be floating point, got {dtypes[i]}")
    if dtypes[0] != dtypes[1]:
        raise IRError(
            f"non_max_suppression's boxes and scores must have one dtype, got {dtypes[0]} and "
            f"{dtypes[1]} (cast explicitly)"
        )
    integer_input(dtypes, 2, "non_max_suppression's max_output_boxes_per_class")
    return "int64"


declare(
    "non_max_suppression",
    ["boxes", "scores", "max_output_boxes_per_class", "iou_threshold", "score_threshold"],
    OpPattern.OPAQUE,
    _non_max_suppression,
    [attr("center_point_box", INT, 0)],
    doc="ONNX NonMaxSuppression: per batch and class, greedy by descending score, the boxes "
    "scoring above score_threshold that no better selected box overlaps with IoU above "
    "iou_threshold, at most max_output_boxes_per_class (one-value tensors); int64 rows "
    "[batch, class, box], shape (count, 3); boxes (batch, n, 4) are [y1, x1, y2, x2] corners "
    "(either order) or, with center_point_box=1, [x_center, y_center, width, height]",
)
