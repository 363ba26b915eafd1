"""Creation ops with shapes given as attributes (ints or dims of the function's symbols), and
arange (whose length depends on its scalar inputs)."""

from __future__ import annotations

from ..attrs import DTYPE, INT_OR_DIM_LIST, attr
from ..op import OpPattern
from ._declare import declare, from_attr

declare(
    "zeros",
    [],
    OpPattern.OPAQUE,
    from_attr(),
    [attr("shape", INT_OR_DIM_LIST), attr("dtype", DTYPE, "float32")],
    doc="a tensor of zeros",
)
declare(
    "ones",
    [],
    OpPattern.OPAQUE,
    from_attr(),
    [attr("shape", INT_OR_DIM_LIST), attr("dtype", DTYPE, "float32")],
    doc="a tensor of ones",
)
declare(
    "full",
    ["fill_value"],
    OpPattern.OPAQUE,
    from_attr(),
    [attr("shape", INT_OR_DIM_LIST), attr("dtype", DTYPE, "float32")],
    doc="a tensor filled with the scalar fill_value",
)
declare(
    "arange",
    ["start", "stop", "step"],
    OpPattern.OPAQUE,
    from_attr(),
    [attr("dtype", DTYPE, "float32")],
    doc="evenly spaced values in [start, stop); length depends on the scalar inputs",
)
