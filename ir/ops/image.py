"""The dtype rule of ``resize`` (declared in ``shape_funcs/declarations/catalogue/image.py``),
and its modes as the IR's names for them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from shape_funcs.declarations import BUILTIN_OPS

from ..attrs import Attrs
from ..errors import IRError
from ._declare import input_dtype, own_rule

#: How resize takes its values from the input (nearest, or blending 2 or 4 neighbours).
MODES = BUILTIN_OPS["resize"].choices("mode")
#: The source coordinate of output index ``y`` (ONNX's ``coordinate_transformation_mode``).
COORDINATE_MODES = BUILTIN_OPS["resize"].choices("coordinate_transformation_mode")
#: How ``nearest`` rounds a source coordinate between two elements.
NEAREST_MODES = BUILTIN_OPS["resize"].choices("nearest_mode")


@own_rule("resize", "dyn.resize")
def _resize_dtype(dtypes: Sequence[Any], attrs: Attrs) -> str:
    """Any dtype for ``nearest`` (it only moves elements); numbers for the blending modes."""
    dt = input_dtype(dtypes, 0, "input")
    if dt == "bool" and attrs["mode"] != "nearest":
        raise IRError(f"{attrs['mode']} resize of a bool tensor (only nearest moves bools)")
    return dt
