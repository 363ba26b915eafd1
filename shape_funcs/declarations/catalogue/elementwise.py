"""Unary and binary elementwise ops (binary ones broadcast as numpy does), and ``where``."""

from __future__ import annotations

from collections.abc import Sequence

from ..decl import AttrDecl, OpDecl, attr, declare

_FLOAT_UNARY = {
    "exp": "e**x",
    "log": "natural logarithm",
    "sqrt": "square root",
    "rsqrt": "1 / sqrt(x)",
    "sin": "sine",
    "cos": "cosine",
    "tan": "tangent",
    "asin": "inverse sine",
    "acos": "inverse cosine",
    "atan": "inverse tangent",
    "sinh": "hyperbolic sine",
    "cosh": "hyperbolic cosine",
    "tanh": "hyperbolic tangent",
    "asinh": "inverse hyperbolic sine",
    "acosh": "inverse hyperbolic cosine",
    "atanh": "inverse hyperbolic tangent",
    "sigmoid": "1 / (1 + e**-x)",
    "silu": "x * sigmoid(x) (SiLU, swish; what fuse_silu makes of that product)",
    "erf": "error function",
    "floor": "round down",
    "ceil": "round up",
    "round": "round half to even",
}
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
_BITWISE = {
    "bitwise_and": "a & b (integers)",
    "bitwise_or": "a | b (integers)",
    "bitwise_xor": "a ^ b (integers)",
    "left_shift": "a << b (integers); 0 where b < 0 or b >= the bit width",
    "right_shift": "a >> b (integers, arithmetic for signed); where b < 0 or b >= the bit "
    "width, -1 for a negative a, else 0",
}
_COMPARISONS = {
    "equal": "a == b",
    "not_equal": "a != b",
    "less": "a < b",
    "less_equal": "a <= b",
    "greater": "a > b",
    "greater_equal": "a >= b",
}
#: Not run by blocks of rows (``OpDecl.blockwise``): erf's kernel was not written for it, and
#: zeros_like/ones_like read nothing of their input.
_WHOLE = {"erf", "zeros_like", "ones_like"}


def _unary(name: str, dtype: str, doc: str, attrs: Sequence[AttrDecl] = ()) -> OpDecl:
    return declare(name, ["x"], "elementwise", dtype, attrs, doc, blockwise=name not in _WHOLE)


def _binary(name: str, dtype: str, doc: str) -> OpDecl:
    return declare(name, ["a", "b"], "broadcast", dtype, doc=doc, blockwise=True)


DECLARATIONS: tuple[OpDecl, ...] = (
    *(_unary(name, "float", doc) for name, doc in _FLOAT_UNARY.items()),
    _unary("negative", "numeric", "-x"),
    _unary("abs", "numeric", "|x|"),
    _unary("copy", "first", "a copy of x"),
    _unary("zeros_like", "first", "zeros of x's shape and dtype"),
    _unary("ones_like", "first", "ones of x's shape and dtype"),
    _unary("logical_not", "logical", "not x (bool)"),
    _unary("cast", "attr", "x converted to dtype", [attr("dtype", "dtype")]),
    _unary(
        "bitcast",
        "own",
        "x's bits reinterpreted as dtype, of the same width (little endian)",
        [attr("dtype", "dtype")],
    ),
    _unary("bitwise_not", "integer", "~x (integers)"),
    _unary(
        "clip",
        "numeric",
        "x limited to [a_min, a_max]",
        [attr("a_min", "float"), attr("a_max", "float")],
    ),
    _unary("nn.relu", "numeric", "max(x, 0)"),
    _unary("nn.leaky_relu", "float", "x if x > 0 else alpha * x", [attr("alpha", "float", 0.01)]),
    *(_binary(name, "same_numeric", doc) for name, doc in _ARITHMETIC.items()),
    *(_binary(name, "same_integer", doc) for name, doc in _BITWISE.items()),
    *(_binary(name, "bool", doc) for name, doc in _COMPARISONS.items()),
    _binary("logical_and", "logical", "a and b (bool)"),
    _binary("logical_or", "logical", "a or b (bool)"),
    declare(
        "where",
        ["cond", "x", "y"],
        "broadcast",
        "own",
        doc="x where cond else y (broadcast)",
        blockwise=True,
    ),
)
