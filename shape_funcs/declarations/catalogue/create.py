"""Creation ops with shapes given as attributes (ints or dims of the function's symbols), and
arange (whose length depends on its scalar inputs)."""

from __future__ import annotations

from ..decl import OpDecl, attr, declare

_SHAPED = [attr("shape", "list[int | dim]"), attr("dtype", "dtype", "float32")]

DECLARATIONS: tuple[OpDecl, ...] = (
    declare("zeros", [], "opaque", "attr", _SHAPED, "a tensor of zeros"),
    declare("ones", [], "opaque", "attr", _SHAPED, "a tensor of ones"),
    declare(
        "full",
        ["fill_value"],
        "opaque",
        "attr",
        _SHAPED,
        "a tensor filled with the scalar fill_value",
    ),
    declare(
        "arange",
        ["start", "stop", "step"],
        "opaque",
        "attr",
        [attr("dtype", "dtype", "float32")],
        "evenly spaced values in [start, stop); length depends on the scalar inputs",
    ),
)
