"""Detection ops: ``NonMaxSuppression`` (opsets 10-21 share one definition).

``NonMaxSuppression`` is the catalogue's ``non_max_suppression``, a data-dependent op: its
``(count, 3)`` int64 rows have a ``?`` count until run time. The three optional inputs stay
run-time tensors (exporters compute them or store them as initializers); an omitted one is
ONNX's default: no boxes (``max_output_boxes_per_class`` 0), an IoU threshold of 0, and no
score threshold, given to the op as ``-inf`` (every score but ``-inf`` and NaN is above it).
With every input known at import (and numeric), the rows are computed there.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from dynshape.builder import trace
from shape_funcs.ops.dynamic import select_boxes

from ..known import Known
from ..registry import Node, NodeError, converter
from .operands import value_dtype, value_shape

#: The optional inputs: position, name, element type, the value of an omitted one.
_OPTIONAL = (
    (2, "max_output_boxes_per_class", "int64", 0),
    (3, "iou_threshold", "float32", 0.0),
    (4, "score_threshold", "float32", -np.inf),
)


def _check_inputs(node: Node) -> None:
    """The element types and ranks ONNX requires, so that a bad node names its input rather
    than failing inside the op's type rule."""
    for i, name, rank in ((0, "boxes", "(batch, num_boxes, 4)"), (1, "scores", None)):
        value = node.input(i)
        if value is None:
            raise NodeError(f"{name} (input {i}) is required")
        if value_dtype(value) != "float32":
            raise NodeError(f"{name} must be float32, got {value_dtype(value)}")
        if len(value_shape(value)) != 3:
            dims = rank or "(batch, num_classes, num_boxes)"
            raise NodeError(f"{name} must have rank 3 {dims}, got shape {list(value_shape(value))}")
    for i, name, dtype, _ in _OPTIONAL:
        value = node.input(i)
        if value is None:
            continue
        if value_dtype(value) != dtype:
            raise NodeError(f"{name} must be {dtype}, got {value_dtype(value)}")
        shape = value_shape(value)
        if len(shape) > 1 or (len(shape) == 1 and isinstance(shape[0], int) and shape[0] != 1):
            raise NodeError(f"{name} must hold one value, got shape {list(shape)}")


@converter("NonMaxSuppression")
def non_max_suppression(node: Node) -> Any:
    """``non_max_suppression`` on the node's inputs, omitted ones filled with ONNX's defaults."""
    center = node.attr("center_point_box", 0)
    if center not in (0, 1):
        raise NodeError(f"center_point_box must be 0 or 1, got {center}")
    _check_inputs(node)
    numbers = [node.numeric(i) for i in range(2)]
    for i, _, dtype, default in _OPTIONAL:
        given = node.input(i) is not None
        numbers.append(node.numeric(i) if given else np.array(default, dtype))
    known = [v for v in numbers if v is not None]
    if len(known) == len(numbers):  # every input a constant: rows at import
        try:
            boxes, scores, limit, iou, threshold = known
            rows = select_boxes(boxes, scores, limit, iou, threshold, center)
        except ValueError as e:
            raise NodeError(str(e)) from e
        return Known(rows, "int64")
    args = [node.tensor(0), node.tensor(1)]
    for i, _, dtype, default in _OPTIONAL:
        if node.input(i) is None:
            args.append(trace.constant(np.array(default, dtype), dtype))
        else:
            args.append(node.tensor(i))
    return trace.apply("non_max_suppression", *args, center_point_box=center)
