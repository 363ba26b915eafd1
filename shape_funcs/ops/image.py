"""Shape functions of the image ops: ``resize``."""

from __future__ import annotations

import math
from collections.abc import Sequence

from ..context import Dim, ShapeContext
from ..registry import register_shape_func
from ._common import Shape, fail, require_nonnegative


@register_shape_func("resize")
def resize(
    ctx: ShapeContext,
    x: Shape,
    *,
    sizes: Sequence[Dim],
    scales: Sequence[float] | None = None,
    mode: str = "nearest",
    coordinate_transformation_mode: str = "half_pixel",
    nearest_mode: str = "round_prefer_floor",
    cubic_coeff_a: float = -0.75,
    exclude_outside: bool = False,
) -> Shape:
    """The output shape is ``sizes`` (one entry per axis of ``x``); ``scales``, when given,
    has one positive finite number per axis. An axis resized to more than 0 elements must
    not be empty (there is nothing to take the elements from)."""
    if len(sizes) != len(x):
        fail(f"sizes has {len(sizes)} entries for x of rank {len(x)}")
    require_nonnegative(sizes, "sizes")
    if scales is not None:
        if len(scales) != len(x):
            fail(f"scales has {len(scales)} entries for x of rank {len(x)}")
        for i, s in enumerate(scales):
            if not (math.isfinite(s) and s > 0):
                fail(f"scales[{i}] must be a positive number, got {s}")
    for i, (d, n) in enumerate(zip(x, sizes, strict=True)):
        if ctx.decide(n, ">", 0):
            ctx.check(d, ">", 0, "x.shape[{}] > 0 to resize it to {} elements", i, n)
    return tuple(sizes)
