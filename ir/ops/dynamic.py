"""The dtype rules of the shape and data-dependent ops that have their own (declared in
``shape_funcs/declarations/catalogue/dynamic.py``; the others use shared rules)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..attrs import Attrs
from ..dtypes import is_float
from ..errors import IRError
from ._declare import input_dtype, integer_input, numeric_like, own_rule


@own_rule("dyn.reshape")
def _dyn_reshape(dtypes: Sequence[Any], attrs: Attrs) -> str:
    integer_input(dtypes, 1, "dyn.reshape's newshape")
    return input_dtype(dtypes, 0, "the data")


@own_rule("dyn.zeros", "dyn.ones", "dyn.full")
def _dyn_create(dtypes: Sequence[Any], attrs: Attrs) -> str:
    integer_input(dtypes, len(dtypes) - 1, "the shape tensor")
    return str(attrs["dtype"])


@own_rule("dyn.strided_slice")
def _dyn_slice(dtypes: Sequence[Any], attrs: Attrs) -> str:
    for i, what in [(1, "begin"), (2, "end"), (3, "strides")]:
        integer_input(dtypes, i, f"dyn.strided_slice's {what}")
    return input_dtype(dtypes, 0, "the data")


@own_rule("compress")
def _compress(dtypes: Sequence[Any], attrs: Attrs) -> str:
    input_dtype(dtypes, 1, "compress's mask")  # any dtype: non-zero selects, as in argwhere
    return input_dtype(dtypes, 0, "the data")


@own_rule("topk")
def _topk_result(dtypes: Sequence[Any], attrs: Attrs) -> str | tuple[str, ...]:
    values = numeric_like(dtypes, attrs)
    ret = attrs["ret_type"]
    if ret == "both":
        return (values, str(attrs["dtype"]))
    return values if ret == "values" else str(attrs["dtype"])


@own_rule("dyn.topk")
def _dyn_topk(dtypes: Sequence[Any], attrs: Attrs) -> str | tuple[str, ...]:
    integer_input(dtypes, 1, "dyn.topk's k")
    return _topk_result(dtypes, attrs)


@own_rule("argsort")
def _argsort(dtypes: Sequence[Any], attrs: Attrs) -> str:
    numeric_like(dtypes, attrs)
    return str(attrs["dtype"])


@own_rule("unique")
def _unique(dtypes: Sequence[Any], attrs: Attrs) -> tuple[str, ...]:
    return (numeric_like(dtypes, attrs), "int64", "int64", "int64")


@own_rule("non_max_suppression")
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
