"""Image ops: ``resize`` (ONNX ``Resize`` semantics, for any rank).

``resize`` maps each output index along an axis to a source coordinate (the coordinate
transformation mode), then takes the nearest input element (``nearest``) or blends the 2
(``linear``) or 4 (``cubic``) neighbours, axis by axis, with ONNX's reference arithmetic.
``exclude_outside`` gives the blending taps outside the axis weight 0 (it changes ``cubic``
only); ``nearest`` ignores it. The modes are read from here by the IR, the kernel and the
importer (``OpDecl.choices``).
"""

from __future__ import annotations

from ..decl import OpDecl, attr, declare
from ..kinds import choice, optional

#: The source coordinate of output index ``y`` (ONNX's ``coordinate_transformation_mode``;
#: ``tf_crop_and_resize`` needs a region of interest, which ``resize`` has not).
_COORDINATE_MODES = choice(
    "half_pixel",
    "half_pixel_symmetric",
    "pytorch_half_pixel",
    "align_corners",
    "asymmetric",
    "tf_half_pixel_for_nn",
)
#: How ``nearest`` rounds a source coordinate between two elements.
_NEAREST_MODES = choice("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")

#: How ``resize`` and ``dyn.resize`` interpolate (the same attributes, the same kernel).
_INTERPOLATION = [
    attr("mode", choice("nearest", "linear", "cubic"), "nearest"),
    attr("coordinate_transformation_mode", _COORDINATE_MODES, "half_pixel"),
    attr("nearest_mode", _NEAREST_MODES, "round_prefer_floor"),
    attr("cubic_coeff_a", "float", -0.75),
    attr("exclude_outside", "bool", False),
]

DECLARATIONS: tuple[OpDecl, ...] = (
    declare(
        "resize",
        ["x"],
        "opaque",
        "own",
        [
            attr("sizes", "list[int | dim]"),
            attr("scales", optional("list[float]"), None),
            *_INTERPOLATION,
        ],
        "x resized to sizes (one int or dim per axis) as ONNX Resize: scales (one per axis, "
        "None for out/in) drive the coordinate transform; nearest, linear or cubic "
        "(cubic_coeff_a, exclude_outside) interpolation, separable, in float64, rounded back to "
        "x's dtype",
    ),
    declare(
        "dyn.resize",
        ["x", "sizes"],
        "opaque",
        "own",
        _INTERPOLATION,
        "resize to the sizes held in a 1-d integer tensor (one per axis), known at run time "
        "only (sizes an exporter computed in float from a shape); scales are out/in",
    ),
)
