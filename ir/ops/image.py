"""Image ops: ``resize`` (ONNX ``Resize`` semantics, for any rank).

``resize`` maps each output index along an axis to a source coordinate (the coordinate
transformation mode), then takes the nearest input element (``nearest``) or blends the 2
(``linear``) or 4 (``cubic``) neighbours, axis by axis, with ONNX's reference arithmetic.
``exclude_outside`` gives the blending taps outside the axis weight 0 (it changes ``cubic``
only); ``nearest`` ignores it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..attrs import BOOL, FLOAT, FLOAT_LIST, INT_OR_DIM_LIST, Attrs, attr, choice, optional
from ..errors import IRError
from ..op import OpPattern
from ._declare import declare, input_dtype

#: The source coordinate of output index ``y`` (ONNX's ``coordinate_transformation_mode``;
#: ``tf_crop_and_resize`` needs a region of interest, which ``resize`` has not).
COORDINATE_MODES = (
    "half_pixel",
    "half_pixel_symmetric",
    "pytorch_half_pixel",
    "align_corners",
    "asymmetric",
    "tf_half_pixel_for_nn",
)
#: How ``nearest`` rounds a source coordinate between two elements.
NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")


def _resize_dtype(dtypes: Sequence[Any], attrs: Attrs) -> str:
    """Any dtype for ``nearest`` (it only moves elements); numbers for the blending modes."""
    dt = input_dtype(dtypes, 0, "input")
    if dt == "bool" and attrs["mode"] != "nearest":
        raise IRError(f"{attrs['mode']} resize of a bool tensor (only nearest moves bools)")
    return dt


declare(
    "resize",
    ["x"],
    OpPattern.OPAQUE,
    _resize_dtype,
    [
        attr("sizes", INT_OR_DIM_LIST),
        attr("scales", optional(FLOAT_LIST), None),
        attr("mode", choice("nearest", "linear", "cubic"), "nearest"),
        attr("coordinate_transformation_mode", choice(*COORDINATE_MODES), "half_pixel"),
        attr("nearest_mode", choice(*NEAREST_MODES), "round_prefer_floor"),
        attr("cubic_coeff_a", FLOAT, -0.75),
        attr("exclude_outside", BOOL, False),
    ],
    doc="x resized to sizes (one int or dim per axis) as ONNX Resize: scales (one per axis, "
    "None for out/in) drive the coordinate transform; nearest, linear or cubic (cubic_coeff_a, "
    "exclude_outside) interpolation, separable, in float64, rounded back to x's dtype",
)
