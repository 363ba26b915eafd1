"""The op functions of the builder: ``ds.exp(x)``, ``ds.softmax(x, axis=-1)``, ``ds.conv2d(...)``.

Most are thin wrappers made from the op catalogue by ``op_function``: the op's operands (Values,
numbers, numpy arrays; a list for a tuple operand), then its attributes, positionally in the
order the catalogue declares them or by keyword (``signature.py``: ``ds.reshape(x, (-1,))``),
checked by the op declaration. The names drop the ``nn.`` prefix (``ds.relu`` is
``nn.relu``) and spell ``dyn.`` as ``dyn_``. ``tests/builder`` checks that every op of the
catalogue has one. A few are written out because numpy spells them differently (``ds.full``
takes the shape first, ``ds.arange`` takes numbers, ``ds.sum`` takes ``axis`` positionally).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import ir

from .location import fail, user_span
from .signature import bind, describe, op_signature
from .trace import apply, constant


def op_function(op_name: str) -> Callable[..., Any]:
    """A builder function calling op ``op_name``: ``f(*operands, *attributes) -> Value``, the
    attributes positionally in declaration order or by keyword (``signature.py``)."""
    op = ir.get_op(op_name)
    name = builder_name(op_name)
    sig = op_signature(op)

    def call_op(*args: Any, **kwargs: Any) -> Any:
        if sig is None:  # names no Python signature can hold: operands, then keywords
            return apply(op_name, *args, **kwargs)
        operands, attrs = bind(op, name, sig, args, kwargs)
        return apply(op_name, *operands, **attrs)

    call_op.__name__ = call_op.__qualname__ = name
    if sig is not None:
        call_op.__signature__ = sig  # type: ignore[attr-defined]  # what help() and IDEs show
    call_op.__doc__ = describe(op)
    return call_op


def builder_name(op_name: str) -> str:
    """The builder's name of an op: ``nn.relu`` -> ``relu``, ``dyn.zeros`` -> ``dyn_zeros``."""
    name = op_name[3:] if op_name.startswith("nn.") else op_name
    return name.replace(".", "_")


def op(op_name: str) -> Callable[..., Any]:
    """The builder function of any registered op, custom ones included: ``ds.op("my.scale")``."""
    if not ir.has_op(op_name):
        raise fail(f"unknown op {op_name!r}")
    return op_function(op_name)


# ---- unary elementwise -----------------------------------------------------------------------
exp = op_function("exp")
log = op_function("log")
sqrt = op_function("sqrt")
rsqrt = op_function("rsqrt")
sin = op_function("sin")
cos = op_function("cos")
tanh = op_function("tanh")
sigmoid = op_function("sigmoid")
erf = op_function("erf")
floor = op_function("floor")
ceil = op_function("ceil")
round = op_function("round")
negative = op_function("negative")
abs = op_function("abs")
copy = op_function("copy")
zeros_like = op_function("zeros_like")
ones_like = op_function("ones_like")
logical_not = op_function("logical_not")
cast = op_function("cast")
clip = op_function("clip")
relu = op_function("nn.relu")
leaky_relu = op_function("nn.leaky_relu")
# ---- binary elementwise (broadcasting) ------------------------------------------------------
add = op_function("add")
subtract = op_function("subtract")
multiply = op_function("multiply")
divide = op_function("divide")
floor_divide = op_function("floor_divide")
mod = op_function("mod")
power = op_function("power")
maximum = op_function("maximum")
minimum = op_function("minimum")
equal = op_function("equal")
not_equal = op_function("not_equal")
less = op_function("less")
less_equal = op_function("less_equal")
greater = op_function("greater")
greater_equal = op_function("greater_equal")
logical_and = op_function("logical_and")
logical_or = op_function("logical_or")
where = op_function("where")
# ---- layout ---------------------------------------------------------------------------------
reshape = op_function("reshape")
transpose = op_function("transpose")
expand_dims = op_function("expand_dims")
squeeze = op_function("squeeze")
split = op_function("split")
strided_slice = op_function("strided_slice")
take = op_function("take")
scatter_nd = op_function("scatter_nd")
scatter_elements = op_function("scatter_elements")
tile = op_function("tile")
repeat = op_function("repeat")
cumsum = op_function("cumsum")
resize = op_function("resize")
broadcast_to = op_function("broadcast_to")
batch_flatten = op_function("nn.batch_flatten")
pad = op_function("nn.pad")
# ---- neural network -------------------------------------------------------------------------
dense = op_function("nn.dense")
matmul = op_function("nn.matmul")
batch_matmul = op_function("nn.batch_matmul")
attention = op_function("nn.attention")
lstm = op_function("nn.lstm")
gru = op_function("nn.gru")
rnn = op_function("nn.rnn")
bias_add = op_function("nn.bias_add")
softmax = op_function("nn.softmax")
log_softmax = op_function("nn.log_softmax")
layer_norm = op_function("nn.layer_norm")
conv2d = op_function("nn.conv2d")
conv2d_transpose = op_function("nn.conv2d_transpose")
max_pool2d = op_function("nn.max_pool2d")
avg_pool2d = op_function("nn.avg_pool2d")
global_avg_pool2d = op_function("nn.global_avg_pool2d")
global_max_pool2d = op_function("nn.global_max_pool2d")
# ---- shapes and data-dependent sizes --------------------------------------------------------
shape_of = op_function("shape_of")
argwhere = op_function("argwhere")
compress = op_function("compress")
topk = op_function("topk")
dyn_reshape = op_function("dyn.reshape")
dyn_zeros = op_function("dyn.zeros")
dyn_ones = op_function("dyn.ones")
dyn_full = op_function("dyn.full")
dyn_strided_slice = op_function("dyn.strided_slice")
dyn_topk = op_function("dyn.topk")
non_max_suppression = op_function("non_max_suppression")


# ---- written out: numpy's spelling ----------------------------------------------------------
def _reduce(op_name: str) -> Callable[..., Any]:
    def reduce(x: Any, axis: Any = None, keepdims: bool = False, exclude: bool = False) -> Any:
        axis = list(axis) if isinstance(axis, tuple) else axis
        return apply(op_name, x, axis=axis, keepdims=keepdims, exclude=exclude)

    reduce.__name__ = reduce.__qualname__ = op_name
    reduce.__doc__ = f"``{op_name}`` over ``axis`` (an int, a list, or None for all axes)."
    return reduce


sum = _reduce("sum")
mean = _reduce("mean")
max = _reduce("max")
min = _reduce("min")
prod = _reduce("prod")
argmax = _reduce("argmax")
argmin = _reduce("argmin")


def concatenate(values: Sequence[Any], axis: int = 0) -> Any:
    """Join tensors along ``axis``."""
    return apply("concatenate", list(values), axis=axis)


def stack(values: Sequence[Any], axis: int = 0) -> Any:
    """Join tensors along a new ``axis``."""
    return apply("stack", list(values), axis=axis)


def zeros(shape: Sequence[int], dtype: str = "float32") -> Any:
    """A tensor of zeros of a static shape."""
    return apply("zeros", shape=list(shape), dtype=dtype)


def ones(shape: Sequence[int], dtype: str = "float32") -> Any:
    """A tensor of ones of a static shape."""
    return apply("ones", shape=list(shape), dtype=dtype)


def full(shape: Sequence[int], fill_value: Any, dtype: str = "float32") -> Any:
    """A tensor of a static shape filled with ``fill_value`` (a number or a scalar Value)."""
    return apply("full", _scalar(fill_value, dtype), shape=list(shape), dtype=dtype)


def arange(start: Any, stop: Any = None, step: Any = 1, dtype: str = "float32") -> Any:
    """``np.arange``: numbers or scalar Values; the length is ``?`` unless all are numbers."""
    if stop is None:
        start, stop = 0, start
    args = [_scalar(v, dtype) for v in (start, stop, step)]
    return apply("arange", *args, dtype=dtype)


def constant_of(value: Any, dtype: str | None = None) -> Any:
    """A constant tensor from a number or a numpy array (``dtype`` converts)."""
    return constant(value, dtype, user_span())


def _scalar(value: Any, dtype: str) -> Any:
    from .value import Value

    if isinstance(value, Value):
        if value.ndim != 0:
            raise fail(f"expected a scalar, got a tensor of shape {value.type}")
        return value
    return constant(value, dtype, user_span())
