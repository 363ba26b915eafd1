"""Elementwise ATen ops: arithmetic with torch's broadcasting and type promotion (the result
dtype torch recorded; operands are cast to it), activations, comparisons, softmax, and the
identities of inference (``dropout``, ``clone``, ``contiguous``, ``alias``)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import sympy

from dynshape.builder import Value, trace

from .registry import Call, NodeError, Unsupported, converter


def operand(call: Call, x: Any, dtype: str) -> Any:
    """``x`` (a Value, a number or a dim) as a tensor of ``dtype``."""
    if isinstance(x, Value):
        return x if x.dtype == dtype else trace.apply("cast", x, dtype=dtype)
    if isinstance(x, sympy.Expr) and not isinstance(x, sympy.Integer):
        return call.scalar(x, dtype)
    if isinstance(x, (bool, int, float, np.number, sympy.Integer)):
        whole = math.isfinite(float(x)) and float(x) == int(float(x))
        if dtype != "bool" and not dtype.startswith("float") and not whole:
            raise NodeError(f"{x} is not a whole number, for a {dtype} result")
        return trace.constant(np.asarray(x).astype(dtype), dtype)
    raise NodeError(f"operand {x!r} is not a tensor or a number")


def out_dtype(call: Call) -> str:
    """The result's dtype as torch recorded it."""
    if call.out_dtype is None:
        raise Unsupported("a result of a dtype dynshape does not have")
    return call.out_dtype


def _common(call: Call, *xs: Any) -> str:
    """The dtype a comparison computes in: the first tensor operand's, float if any is."""
    dtypes = [x.dtype for x in xs if isinstance(x, Value)]
    floats = [d for d in dtypes if d.startswith("float")]
    if floats:
        return floats[0]
    if any(isinstance(x, float) for x in xs):
        return "float32"
    return dtypes[0] if dtypes else "int64"


def _binary(op: str) -> Callable[[Call], Any]:
    def convert(call: Call) -> Any:
        dtype = out_dtype(call)
        a = call["self"]
        b = call["exponent"] if "exponent" in call.args else call["other"]
        alpha = call.get("alpha", 1)
        if alpha != 1:
            b = trace.apply("multiply", operand(call, b, dtype), operand(call, alpha, dtype))
        return trace.apply(op, operand(call, a, dtype), operand(call, b, dtype))

    return convert


for _target, _op in {
    "add": "add",
    "sub": "subtract",
    "mul": "multiply",
    "div": "divide",
    "maximum": "maximum",
    "minimum": "minimum",
    "pow": "power",
}.items():
    names = [f"aten.{_target}.Tensor", f"aten.{_target}.Scalar"]
    if _target in ("maximum", "minimum"):
        names = [f"aten.{_target}.default"]
    if _target == "pow":
        names = ["aten.pow.Tensor_Tensor", "aten.pow.Tensor_Scalar"]
    converter(*names)(_binary(_op))


@converter("aten.square.default")
def _square(call: Call) -> Any:
    x = call["self"]
    return trace.apply("multiply", x, x)


@converter("aten.rsub.Scalar", "aten.rsub.Tensor")
def rsub(call: Call) -> Any:
    """``other - alpha * self``."""
    dtype = out_dtype(call)
    a = operand(call, call["self"], dtype)
    alpha = call.get("alpha", 1)
    if alpha != 1:
        a = trace.apply("multiply", a, operand(call, alpha, dtype))
    return trace.apply("subtract", operand(call, call["other"], dtype), a)


@converter("aten.remainder.Tensor", "aten.remainder.Scalar", "aten.floor_divide.default")
def remainder(call: Call) -> Any:
    """Python's ``%`` and ``//`` (floor semantics, the sign of the divisor), as numpy's."""
    dtype = out_dtype(call)
    a, b = operand(call, call["self"], dtype), operand(call, call["other"], dtype)
    op = "floor_divide" if call.target.startswith("aten.floor_divide") else "mod"
    return trace.apply(op, a, b)


@converter("aten.div.Tensor_mode", "aten.div.Scalar_mode")
def div_mode(call: Call) -> Any:
    """``rounding_mode``: None (true division), ``floor``, ``trunc`` (floats only)."""
    dtype = out_dtype(call)
    a, b = operand(call, call["self"], dtype), operand(call, call["other"], dtype)
    mode = call["rounding_mode"]
    if mode is None:
        return trace.apply("divide", a, b)
    if mode == "floor":
        return trace.apply("floor_divide", a, b)
    if mode == "trunc" and dtype.startswith("float"):
        q = trace.apply("divide", a, b)
        return trace.apply(
            "where",
            trace.apply("less", q, operand(call, 0, dtype)),
            trace.apply("ceil", q),
            trace.apply("floor", q),
        )
    raise Unsupported(f"rounding_mode {mode!r} on {dtype}")


_UNARY = {
    "relu": "nn.relu",
    "sigmoid": "sigmoid",
    "tanh": "tanh",
    "exp": "exp",
    "log": "log",
    "sqrt": "sqrt",
    "rsqrt": "rsqrt",
    "neg": "negative",
    "abs": "abs",
    "erf": "erf",
    "sin": "sin",
    "cos": "cos",
    "floor": "floor",
    "ceil": "ceil",
    "logical_not": "logical_not",
}


def _unary(op: str) -> Callable[[Call], Any]:
    def convert(call: Call) -> Any:
        return trace.apply(op, call["self"])

    return convert


for _target, _op in _UNARY.items():
    converter(f"aten.{_target}.default")(_unary(_op))


@converter(
    "aten.dropout.default",
    "aten.clone.default",
    "aten.contiguous.default",
    "aten.alias.default",
    "aten.detach.default",
    "aten.lift_fresh_copy.default",
)
def identity(call: Call) -> Any:
    """Identities at inference (``dropout`` with ``train`` False)."""
    if call.target == "aten.dropout.default" and call["train"] and call["p"] > 0:
        raise Unsupported("dropout in training mode (export the model in eval mode)")
    return next(iter(call.args.values()))


@converter("aten.to.dtype", "aten._to_copy.default", "aten.type_as.default")
def to_dtype(call: Call) -> Any:
    """A cast to the dtype torch recorded (devices and layouts are ignored: CPU only)."""
    x = call["self"]
    dtype = out_dtype(call)
    return x if x.dtype == dtype else trace.apply("cast", x, dtype=dtype)


@converter("aten.gelu.default")
def gelu(call: Call) -> Any:
    """``none``: ``x/2 * (1 + erf(x/sqrt 2))``; ``tanh``: the tanh approximation."""
    x = call["self"]
    dt = x.dtype
    approximate = call["approximate"]

    def c(v: float) -> Any:
        return trace.constant(np.asarray(v, dtype=dt), dt)

    if approximate == "none":
        inner = trace.apply("erf", trace.apply("multiply", x, c(1 / math.sqrt(2))))
    elif approximate == "tanh":
        cube = trace.apply("multiply", trace.apply("multiply", x, x), x)
        poly = trace.apply("add", x, trace.apply("multiply", cube, c(0.044715)))
        inner = trace.apply("tanh", trace.apply("multiply", poly, c(math.sqrt(2 / math.pi))))
    else:
        raise Unsupported(f"gelu approximate={approximate!r}")
    half = trace.apply("multiply", x, c(0.5))
    return trace.apply("multiply", half, trace.apply("add", inner, c(1.0)))


@converter("aten.silu.default")
def silu(call: Call) -> Any:
    """``x * sigmoid(x)``."""
    x = call["self"]
    return trace.apply("multiply", x, trace.apply("sigmoid", x))


@converter("aten.hardtanh.default", "aten.clamp.default")
def clamp(call: Call) -> Any:
    """``hardtanh(min_val, max_val)`` and ``clamp(min, max)`` (either may be None)."""
    x = call["self"]
    lo = call.get("min_val", call.get("min"))
    hi = call.get("max_val", call.get("max"))
    if lo is not None:
        x = trace.apply("maximum", x, operand(call, lo, x.dtype))
    if hi is not None:
        x = trace.apply("minimum", x, operand(call, hi, x.dtype))
    return x


@converter("aten.leaky_relu.default")
def leaky_relu(call: Call) -> Any:
    """``nn.leaky_relu`` with torch's ``negative_slope``."""
    return trace.apply("nn.leaky_relu", call["self"], alpha=float(call["negative_slope"]))


_COMPARE = {"eq": "equal", "ne": "not_equal", "lt": "less", "le": "less_equal",
            "gt": "greater", "ge": "greater_equal"}  # fmt: skip


def _comparison(op: str) -> Callable[[Call], Any]:
    def convert(call: Call) -> Any:
        a, b = call["self"], call["other"]
        dtype = _common(call, a, b)
        return trace.apply(op, operand(call, a, dtype), operand(call, b, dtype))

    return convert


for _target, _op in _COMPARE.items():
    converter(f"aten.{_target}.Tensor", f"aten.{_target}.Scalar")(_comparison(_op))


@converter("aten.logical_and.default", "aten.logical_or.default", "aten.logical_xor.default")
def logical(call: Call) -> Any:
    """``logical_and/or/xor`` of the operands as bools."""
    op = call.target.split(".")[1]
    a, b = (operand(call, call[n], "bool") for n in ("self", "other"))
    if op == "logical_xor":
        return trace.apply("not_equal", a, b)
    return trace.apply(op, a, b)


@converter("aten.scalar_tensor.default")
def scalar_tensor(call: Call) -> Any:
    """A 0-d tensor of a number (a dim: computed at run time), in the recorded dtype."""
    return operand(call, call["s"], out_dtype(call))


@converter("aten.where.self")
def where(call: Call) -> Any:
    """``where(condition, self, other)`` in the recorded dtype."""
    dtype = out_dtype(call)
    cond = call["condition"]
    return trace.apply(
        "where", cond, operand(call, call["self"], dtype), operand(call, call["other"], dtype)
    )


@converter("aten.masked_fill.Scalar", "aten.masked_fill.Tensor")
def masked_fill(call: Call) -> Any:
    """``where(mask, value, self)``."""
    x = call["self"]
    return trace.apply("where", call["mask"], operand(call, call["value"], x.dtype), x)


@converter("aten.softmax.int", "aten._softmax.default", "aten.log_softmax.int",
           "aten._log_softmax.default")  # fmt: skip
def softmax(call: Call) -> Any:
    """``nn.softmax`` / ``nn.log_softmax`` along ``dim`` (in the recorded dtype)."""
    x = operand(call, call["self"], out_dtype(call))
    op = "nn.log_softmax" if "log_softmax" in call.target else "nn.softmax"
    return trace.apply(op, x, axis=int(call["dim"]))
