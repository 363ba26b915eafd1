"""Shape functions of the elementwise ops: unary ones keep the shape, the rest broadcast."""

from __future__ import annotations

from typing import Any

from ..context import ShapeContext
from ..registry import register_shape_func
from ._common import Shape, broadcast_many, broadcast_pair

UNARY = (
    "exp", "log", "sqrt", "rsqrt", "sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh",
    "tanh", "asinh", "acosh", "atanh", "sigmoid", "silu", "erf", "floor", "ceil", "round",
    "negative", "abs", "copy", "zeros_like", "ones_like", "logical_not", "cast", "bitcast",
    "bitwise_not", "clip", "nn.relu", "nn.leaky_relu",
)  # fmt: skip
BINARY = (
    "add", "subtract", "multiply", "divide", "floor_divide", "mod", "power", "maximum",
    "minimum", "bitwise_and", "bitwise_or", "bitwise_xor", "left_shift", "right_shift",
    "equal", "not_equal", "less", "less_equal", "greater", "greater_equal", "logical_and",
    "logical_or",
)  # fmt: skip


def unary(ctx: ShapeContext, x: Shape, **_attrs: Any) -> Shape:
    """The result has the input's shape (attributes such as ``dtype`` or ``alpha`` aside)."""
    return x


def binary(ctx: ShapeContext, a: Shape, b: Shape) -> Shape:
    """numpy broadcasting of ``a`` and ``b``."""
    return broadcast_pair(ctx, a, b, "a", "b")


def where(ctx: ShapeContext, cond: Shape, x: Shape, y: Shape) -> Shape:
    """numpy broadcasting of the condition and both branches."""
    return broadcast_many(ctx, (cond, x, y), ("cond", "x", "y"))


for _name in UNARY:
    register_shape_func(_name)(unary)
for _name in BINARY:
    register_shape_func(_name)(binary)
register_shape_func("where")(where)
