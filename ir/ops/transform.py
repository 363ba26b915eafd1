"""Layout ops: reshape, transpose, slicing, joining and splitting, gathering, scattering,
padding."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..attrs import (
    FLOAT,
    INT,
    INT_LIST,
    INT_OR_DIM_LIST,
    PAIR_LIST,
    Attrs,
    attr,
    choice,
    one_of,
    optional,
)
from ..errors import IRError
from ..op import OpPattern
from ._declare import all_same, declare, input_dtype, integer_input, same_as

declare(
    "reshape",
    ["x"],
    OpPattern.INJECTIVE,
    same_as(0),
    [attr("newshape", INT_OR_DIM_LIST)],
    doc="x with a new shape (ints or dims); 0 copies the input dim, -1 is inferred",
)
declare(
    "transpose",
    ["x"],
    OpPattern.INJECTIVE,
    same_as(0),
    [attr("axes", optional(INT_LIST), None)],
    doc="permute axes (reverse when axes=None)",
)
declare(
    "expand_dims",
    ["x"],
    OpPattern.INJECTIVE,
    same_as(0),
    [attr("axis", INT), attr("num_newaxis", INT, 1)],
    doc="insert 1-dims at axis",
)
declare(
    "squeeze",
    ["x"],
    OpPattern.INJECTIVE,
    same_as(0),
    [attr("axis", optional(INT_LIST), None)],
    doc="remove 1-dims (all when axis=None)",
)
declare(
    "concatenate",
    ["*data"],
    OpPattern.INJECTIVE,
    all_same,
    [attr("axis", INT, 0)],
    doc="join a tuple of tensors along axis",
)
declare(
    "stack",
    ["*data"],
    OpPattern.INJECTIVE,
    all_same,
    [attr("axis", INT, 0)],
    doc="join a tuple of tensors along a new axis",
)


def _split(dtypes: Sequence[Any], attrs: Attrs) -> tuple[str, ...]:
    spec = attrs["indices_or_sections"]
    count = len(spec) + 1 if isinstance(spec, tuple) else spec
    if count < 1:
        raise IRError(f"split needs at least one section, got {spec}")
    return (dtypes[0],) * count


declare(
    "split",
    ["x"],
    OpPattern.INJECTIVE,
    _split,
    [attr("indices_or_sections", one_of(INT, INT_OR_DIM_LIST)), attr("axis", INT, 0)],
    doc="a tuple of parts: equal sections, or cut at indices (ints or dims)",
)
declare(
    "strided_slice",
    ["x"],
    OpPattern.INJECTIVE,
    same_as(0),
    [attr("begin", INT_LIST), attr("end", INT_LIST), attr("strides", optional(INT_LIST), None)],
    doc="x[begin:end:strides] per axis (numpy clamping, negative indices and strides)",
)


def _take(dtypes: Sequence[Any], attrs: Attrs) -> str:
    integer_input(dtypes, 1, "take's indices")
    return input_dtype(dtypes, 0, "the data")


declare(
    "take",
    ["data", "indices"],
    OpPattern.INJECTIVE,
    _take,
    [attr("axis", optional(INT), None)],
    doc="gather along axis (from the flattened data when axis=None)",
)
declare(
    "tile",
    ["x"],
    OpPattern.INJECTIVE,
    same_as(0),
    [attr("reps", INT_OR_DIM_LIST)],
    doc="repeat the whole tensor reps times per axis",
)
declare(
    "repeat",
    ["x"],
    OpPattern.INJECTIVE,
    same_as(0),
    [attr("repeats", INT), attr("axis", optional(INT), None)],
    doc="repeat each element (of the flattened x when axis=None)",
)
declare(
    "broadcast_to",
    ["x"],
    OpPattern.BROADCAST,
    same_as(0),
    [attr("shape", INT_OR_DIM_LIST)],
    doc="x broadcast to shape",
)
declare(
    "nn.batch_flatten", ["x"], OpPattern.INJECTIVE, same_as(0), doc="reshape to (x.shape[0], -1)"
)
declare(
    "nn.pad",
    ["x"],
    OpPattern.INJECTIVE,
    same_as(0),
    [attr("pad_width", PAIR_LIST), attr("pad_value", FLOAT, 0.0)],
    doc="constant padding, [before, after] per axis",
)


#: How a scatter combines an update with the element it lands on (ONNX's ``reduction``).
SCATTER_REDUCTIONS = ("none", "add", "mul", "max", "min")


def _scatter(dtypes: Sequence[Any], attrs: Attrs) -> str:
    integer_input(dtypes, 1, "the scatter's indices")
    data = input_dtype(dtypes, 0, "the data")
    updates = input_dtype(dtypes, 2, "the updates")
    if updates != data:
        raise IRError(f"the updates must have the data's dtype {data}, got {updates}")
    if data == "bool" and attrs["reduction"] in ("add", "mul"):
        # numpy would compute logical or/and; ONNX defines no sum of bools: say so instead.
        raise IRError(f"reduction={attrs['reduction']!r} of bool data (cast it first)")
    return data


declare(
    "scatter_nd",
    ["data", "indices", "updates"],
    OpPattern.OPAQUE,
    _scatter,
    [attr("reduction", choice(*SCATTER_REDUCTIONS), "none")],
    doc="a copy of data where each index tuple indices[..., :] (q = indices.shape[-1] leading "
    "coordinates, negative ones wrapped) receives its slice of updates "
    "(updates.shape == indices.shape[:-1] + data.shape[q:]); reduction='none' writes "
    "(the last of repeated indices wins), add/mul/max/min combine with what is there "
    "(repeated indices accumulate)",
)
declare(
    "scatter_elements",
    ["data", "indices", "updates"],
    OpPattern.OPAQUE,
    _scatter,
    [attr("axis", INT, 0), attr("reduction", choice(*SCATTER_REDUCTIONS), "none")],
    doc="a copy of data where updates[i0, .., ik] goes to data[i0, .., indices[i0, .., ik], "
    ".., ik] (the index replaces the coordinate along axis; indices and updates have one "
    "shape, of data's rank); reduction as scatter_nd's",
)
