"""The op functions of the builder: ``ds.exp(x)``, ``ds.softmax(x, axis=-1)``, ``ds.conv2d(...)``.

Most are thin wrappers made by ``op_function`` from each op's declaration
(``shape_funcs.declarations.BUILTIN_OPS``), one per op that computes tensors, so a new op needs
no line here: the op's operands (Values, numbers, numpy arrays; a list for a tuple operand), then
its attributes, positionally in the order the declaration gives them or by keyword
(``signature.py``: ``ds.reshape(x, (-1,))``), checked by the op's definition. The names drop the
``nn.`` prefix (``ds.relu`` is ``nn.relu``) and spell ``dyn.`` as ``dyn_``. ``tests/builder``
checks that every op of the catalogue has one. A few are written out because numpy spells them
differently (``ds.full`` takes the shape first, ``ds.arange`` takes numbers, ``ds.sum`` takes
``axis`` positionally), or because a plain number must not take the other operands' dtype
(``ds.dynamic_update_slice``'s integer starts): ``WRITTEN_OUT``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

import ir
from shape_funcs.declarations import BUILTIN_OPS

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


# ---- written out: numpy's spelling ----------------------------------------------------------
def _default(op_name: str, attr_name: str) -> Any:
    """The declared default of an attribute: a written-out function's default is the op's."""
    return BUILTIN_OPS[op_name].attr_index[attr_name].default


def _reduce(op_name: str) -> Callable[..., Any]:
    axis0, keepdims0, exclude0 = (_default(op_name, a) for a in ("axis", "keepdims", "exclude"))

    def reduce(
        x: Any, axis: Any = axis0, keepdims: bool = keepdims0, exclude: bool = exclude0
    ) -> Any:
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


def concatenate(values: Sequence[Any], axis: int = _default("concatenate", "axis")) -> Any:
    """Join tensors along ``axis``."""
    return apply("concatenate", list(values), axis=axis)


def stack(values: Sequence[Any], axis: int = _default("stack", "axis")) -> Any:
    """Join tensors along a new ``axis``."""
    return apply("stack", list(values), axis=axis)


def dynamic_update_slice(operand: Any, update: Any, start_indices: Any) -> Any:
    """XLA's DynamicUpdateSlice: a copy of ``operand`` with ``update`` written at
    ``start_indices``, each start clamped to ``[0, operand.shape[i] - update.shape[i]]`` so the
    update fits. ``start_indices``: one start per axis (scalar Values, or Python ints, which
    become int64 constants), or one 1-d integer Value or array. The compiler writes the result
    over ``operand``'s storage when ``operand`` is not used afterwards."""
    from .value import Value

    if isinstance(start_indices, (Value, np.ndarray)):
        starts = [start_indices]  # the 1-d form
    elif isinstance(start_indices, (list, tuple)):
        starts = [_start(s) for s in start_indices]
    else:
        raise fail(
            "dynamic_update_slice: start_indices must be a list of scalars (one per axis) or a "
            f"1-d integer tensor, got {type(start_indices).__name__}"
        )
    return apply("dynamic_update_slice", operand, update, starts)


def _start(value: Any) -> Any:
    """A Python or numpy integer start as an int64 constant (not the operand's dtype, which a
    plain number would take); anything else as it is, for the op to check."""
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        return constant(np.int64(value), "int64", user_span())
    return value


def zeros(shape: Sequence[int], dtype: str = _default("zeros", "dtype")) -> Any:
    """A tensor of zeros of a static shape."""
    return apply("zeros", shape=list(shape), dtype=dtype)


def ones(shape: Sequence[int], dtype: str = _default("ones", "dtype")) -> Any:
    """A tensor of ones of a static shape."""
    return apply("ones", shape=list(shape), dtype=dtype)


def full(shape: Sequence[int], fill_value: Any, dtype: str = _default("full", "dtype")) -> Any:
    """A tensor of a static shape filled with ``fill_value`` (a number or a scalar Value)."""
    return apply("full", _scalar(fill_value, dtype), shape=list(shape), dtype=dtype)


def arange(
    start: Any, stop: Any = None, step: Any = 1, dtype: str = _default("arange", "dtype")
) -> Any:
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


#: The op functions written out above for numpy's spelling, by op name.
WRITTEN_OUT: dict[str, Callable[..., Any]] = {
    "sum": sum,
    "mean": mean,
    "max": max,
    "min": min,
    "prod": prod,
    "argmax": argmax,
    "argmin": argmin,
    "concatenate": concatenate,
    "stack": stack,
    "dynamic_update_slice": dynamic_update_slice,
    "zeros": zeros,
    "ones": ones,
    "full": full,
    "arange": arange,
}


def _op_functions() -> dict[str, Callable[..., Any]]:
    """Every built-in tensor op's builder function, by builder name: written out, or made from
    its declaration."""
    return {
        builder_name(name): WRITTEN_OUT.get(name) or op_function(name)
        for name, decl in BUILTIN_OPS.items()
        if decl.computes_tensors
    }


_FUNCTIONS = _op_functions()
globals().update(_FUNCTIONS)  # ds.exp, ds.relu, ds.dyn_zeros, ...: one per declaration

__all__ = sorted([*_FUNCTIONS, "constant_of", "op", "op_function"])
