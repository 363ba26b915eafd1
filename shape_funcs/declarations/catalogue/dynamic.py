"""Shape and data-dependent ops: their output shapes depend on input values."""

from __future__ import annotations

from ..decl import OpDecl, attr, declare
from ..kinds import choice, optional

_TOPK_ATTRS = [
    attr("axis", "int", -1),
    attr("ret_type", choice("both", "values", "indices"), "both"),
    attr("is_ascend", "bool", False),
    attr("dtype", "dtype", "int64"),
]
_DTYPE = [attr("dtype", "dtype", "float32")]

DECLARATIONS: tuple[OpDecl, ...] = (
    declare(
        "shape_of",
        ["x"],
        "opaque",
        "attr",
        [attr("dtype", choice("int32", "int64"), "int64")],
        "the shape of x as a 1-d integer tensor",
    ),
    declare(
        "dyn.reshape",
        ["x", "newshape"],
        "opaque",
        "own",
        doc="reshape to the shape held in a 1-d integer tensor (0 and -1 as in reshape)",
    ),
    declare("dyn.zeros", ["shape"], "opaque", "own", _DTYPE, "zeros of a shape held in a tensor"),
    declare("dyn.ones", ["shape"], "opaque", "own", _DTYPE, "ones of a shape held in a tensor"),
    declare(
        "dyn.full",
        ["fill_value", "shape"],
        "opaque",
        "own",
        _DTYPE,
        "fill_value in a shape held in a tensor",
    ),
    declare(
        "dyn.strided_slice",
        ["x", "begin", "end", "strides"],
        "opaque",
        "own",
        doc="strided_slice with begin/end/strides held in 1-d integer tensors",
    ),
    declare(
        "argwhere",
        ["x"],
        "opaque",
        "int64",
        doc="indices of the non-zero elements, shape (count, rank)",
    ),
    declare(
        "compress",
        ["x", "mask"],
        "opaque",
        "own",
        [attr("axis", "int", 0)],
        "the slices of x along axis where the 1-d mask (mask.shape[0] == x.shape[axis]) is "
        "non-zero, in order: x[mask] for a 1-d x, take(x, squeeze(argwhere(mask), axis=[1]), "
        "axis) without the index tensor; the axis dim becomes the mask's non-zero count",
    ),
    declare(
        "topk",
        ["x"],
        "opaque",
        "own",
        [attr("k", "int"), *_TOPK_ATTRS],
        "the k largest (or smallest) along axis, sorted; values and/or indices",
    ),
    declare(
        "dyn.topk",
        ["x", "k"],
        "opaque",
        "own",
        _TOPK_ATTRS,
        "topk with k held in a scalar integer tensor",
    ),
    declare(
        "sort",
        ["x"],
        "opaque",
        "numeric",
        [attr("axis", "int", -1), attr("descending", "bool", False)],
        "x sorted along axis (stable: equal values keep their order; NaNs last ascending, "
        "first descending)",
    ),
    declare(
        "argsort",
        ["x"],
        "opaque",
        "own",
        [
            attr("axis", "int", -1),
            attr("descending", "bool", False),
            attr("dtype", "dtype", "int64"),
        ],
        "the indices that sort x along axis (stable: equal values by the lower index first, in "
        "both directions)",
    ),
    declare(
        "unique",
        ["x"],
        "opaque",
        "own",
        [attr("axis", optional("int"), None), attr("sorted", "bool", True)],
        "ONNX Unique: the distinct elements of the flattened x (axis=None) or distinct slices "
        "along axis, ascending (sorted) or in order of first occurrence; four outputs: those "
        "values (their count a dim known at run time), the int64 index of each one's first "
        "occurrence, the int64 index of each element (slice) of x in the values, and the int64 "
        "count of each",
    ),
    declare(
        "non_max_suppression",
        ["boxes", "scores", "max_output_boxes_per_class", "iou_threshold", "score_threshold"],
        "opaque",
        "own",
        [attr("center_point_box", "int", 0)],
        "ONNX NonMaxSuppression: per batch and class, greedy by descending score, the boxes "
        "scoring above score_threshold that no better selected box overlaps with IoU above "
        "iou_threshold, at most max_output_boxes_per_class (one-value tensors); int64 rows "
        "[batch, class, box], shape (count, 3); boxes (batch, n, 4) are [y1, x1, y2, x2] "
        "corners (either order) or, with center_point_box=1, [x_center, y_center, width, "
        "height]",
    ),
)
