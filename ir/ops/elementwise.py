"""Unary and binary elementwise ops (binary ones broadcast as numpy does), and ``where``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..attrs import DTYPE, FLOAT, Attrs, attr
from ..errors import IRError
from ..op import OpPattern
from ._declare import (
    all_bool,
    all_same,
    all_same_numeric,
    compare,
    declare,
    float_like,
    from_attr,
    numeric_like,
    same_as,
)

_FLOAT_UNARY = {
    "exp": "e**x",
    "log": "natural logarithm",
    "sqrt": "square root",
    "rsqrt": "1 / sqrt(x)",
    "sin": "sine",
    "cos": "cosine",
    "tanh": "hyperbolic tangent",
    "sigmoid": "1 / (1 + e**-x)",
    "erf": "error function",
    "floor": "round down",
    "ceil": "round up",
    "round": "round half to even",
}
for _name, _doc in _FLOAT_UNARY.items():
    declare(_name, ["x"], OpPattern.ELEMWISE, float_like, doc=_doc)

declare("negative", ["x"], OpPattern.ELEMWISE, numeric_like, doc="-x")
declare("abs", ["x"], OpPattern.ELEMWISE, numeric_like, doc="|x|")
declare("copy", ["x"], OpPattern.ELEMWISE, same_as(0), doc="a copy of x")
declare("zeros_like", ["x"], OpPattern.ELEMWISE, same_as(0), doc="zeros of x's shape and dtype")
declare("ones_like", ["x"], OpPattern.ELEMWISE, same_as(0), doc="ones of x's shape and dtype")
declare("logical_not", ["x"], OpPattern.ELEMWISE, all_bool, doc="not x (bool)")
declare(
    "cast",
    ["x"],
    OpPattern.ELEMWISE,
    from_attr("dtype"),
    [attr("dtype", DTYPE)],
    doc="x converted to dtype",
)
declare(
    "clip",
    ["x"],
    OpPattern.ELEMWISE,
    numeric_like,
    [attr("a_min", FLOAT), attr("a_max", FLOAT)],
    doc="x limited to [a_min, a_max]",
)
declare("nn.relu", ["x"], OpPattern.ELEMWISE, numeric_like, doc="max(x, 0)")
declare(
    "nn.leaky_relu",
    ["x"],
    OpPattern.ELEMWISE,
    float_like,
    [attr("alpha", FLOAT, 0.01)],
    doc="x if x > 0 else alpha * x",
)

_ARITHMETIC = {
    "add": "a + b",
    "subtract": "a - b",
    "multiply": "a * b",
    "divide": "a / b (true division for floats, floor division for ints)",
    "floor_divide": "a // b",
    "mod": "a % b (sign of b, as numpy)",
    "power": "a ** b",
    "maximum": "elementwise max",
    "minimum": "elementwise min",
}
for _name, _doc in _ARITHMETIC.items():
    declare(_name, ["a", "b"], OpPattern.BROADCAST, all_same_numeric, doc=_doc)

_COMPARISONS = {
    "equal": "a == b",
    "not_equal": "a != b",
    "less": "a < b",
    "less_equal": "a <= b",
    "greater": "a > b",
    "greater_equal": "a >= b",
}
for _name, _doc in _COMPARISONS.items():
    declare(_name, ["a", "b"], OpPattern.BROADCAST, compare, doc=_doc)

declare("logical_and", ["a", "b"], OpPattern.BROADCAST, all_bool, doc="a and b (bool)")
declare("logical_or", ["a", "b"], OpPattern.BROADCAST, all_bool, doc="a or b (bool)")


def _where(dtypes: Sequence[Any], attrs: Attrs) -> str:
    if dtypes[0] != "bool":
        raise IRError(f"where's condition must be bool, got {dtypes[0]}")
    return all_same(dtypes[1:], attrs)


declare(
    "where", ["cond", "x", "y"], OpPattern.BROADCAST, _where, doc="x where cond else y (broadcast)"
)
