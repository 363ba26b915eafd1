"""Elementwise and broadcasting kernels.

Most are numpy ufuncs registered as they are (``np.add(a, b, out)`` is already the calling
convention); the rest are short compositions that write into ``out`` step by step, in place, so
they allocate no temporary the size of the output (except where a docstring says so).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from .registry import Kernel, register_kernel, register_table

register_table(
    {
        "exp": np.exp,
        "log": np.log,
        "sqrt": np.sqrt,
        "sin": np.sin,
        "cos": np.cos,
        "tanh": np.tanh,
        "floor": np.floor,
        "ceil": np.ceil,
        "round": np.rint,  # half to even
        "negative": np.negative,
        "abs": np.absolute,
        "logical_not": np.logical_not,
        "add": np.add,
        "subtract": np.subtract,
        "multiply": np.multiply,
        "floor_divide": np.floor_divide,
        "mod": np.remainder,  # sign of the divisor, as numpy
        "power": np.power,
        "equal": np.equal,
        "not_equal": np.not_equal,
        "less": np.less,
        "less_equal": np.less_equal,
        "greater": np.greater,
        "greater_equal": np.greater_equal,
        "logical_and": np.logical_and,
        "logical_or": np.logical_or,
    }
)


def _divide(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> None:
    """True division for floats, floor division (numpy ``//``) for integers."""
    if out.dtype.kind == "f":
        np.true_divide(a, b, out)
    else:
        np.floor_divide(a, b, out)


def _rsqrt(x: np.ndarray, out: np.ndarray) -> None:
    """``1 / sqrt(x)``, in place in ``out``."""
    np.sqrt(x, out)
    np.reciprocal(out, out)


def _sigmoid(x: np.ndarray, out: np.ndarray) -> None:
    """``1 / (1 + exp(-x))`` computed as ``(1 + tanh(x / 2)) / 2``: no overflow for large |x|."""
    np.multiply(x, 0.5, out)
    np.tanh(out, out)
    np.add(out, 1.0, out)
    np.multiply(out, 0.5, out)


#: Elements ``erf`` converts to Python floats at a time: its temporaries (a list of floats, ~32
#: bytes each, and their float64 array) stay a fixed size whatever the input's.
ERF_CHUNK = 1 << 14


def _erf(x: np.ndarray, out: np.ndarray) -> None:
    """The error function. numpy has no ``erf`` ufunc (and the VM needs numpy only), so this
    calls ``math.erf`` per element, over temporary lists of ``ERF_CHUNK`` elements: correct to
    the last bit, but slow. Safe in place (each chunk is read before it is written)."""
    if x.shape != out.shape:
        raise ValueError(f"erf: input shape {x.shape} but output shape {out.shape}")
    src = x.reshape(-1)  # a view (a copy of the input's size if x is not contiguous)
    dst = out.reshape(-1)  # out is C-contiguous: a view
    for i in range(0, x.size, ERF_CHUNK):
        part = src[i : i + ERF_CHUNK].tolist()
        values = np.fromiter(map(math.erf, part), dtype=np.float64, count=len(part))
        np.copyto(dst[i : i + ERF_CHUNK], values, casting="unsafe")


def _copy(x: np.ndarray, out: np.ndarray) -> None:
    """A copy of ``x`` (``np.copyto``, which has the destination first)."""
    np.copyto(out, x)


def _zeros_like(x: np.ndarray, out: np.ndarray) -> None:
    """Zeros (``out.fill``; the input is only used for its shape)."""
    out.fill(0)


def _ones_like(x: np.ndarray, out: np.ndarray) -> None:
    """Ones (``out.fill``)."""
    out.fill(1)


def _relu(x: np.ndarray, out: np.ndarray) -> None:
    """``max(x, 0)``."""
    np.maximum(x, 0, out=out)


# numpy 2.4 deprecates a positional ``out`` for maximum and minimum (and only for them).
def _maximum(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> None:
    """Elementwise max (NaN propagates, as ``np.maximum``)."""
    np.maximum(a, b, out=out)


def _minimum(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> None:
    """Elementwise min (NaN propagates, as ``np.minimum``)."""
    np.minimum(a, b, out=out)


def _where(cond: np.ndarray, x: np.ndarray, y: np.ndarray, out: np.ndarray) -> None:
    """``x where cond else y``, broadcast. ``np.where`` has no ``out=``; two masked copies
    (broadcasting into ``out``, so nothing larger than ``out`` is built; the only temporary is
    the negated condition, of ``cond``'s size).

    Safe in place: a fused chain may pass the output buffer itself as ``x`` or ``y``, and then
    only the other operand is copied in, where the condition selects it.
    """
    if x is out:
        np.copyto(out, y, where=np.logical_not(cond))
    elif y is out:
        np.copyto(out, x, where=cond)
    else:
        np.copyto(out, y)
        np.copyto(out, x, where=cond)


register_table(
    {
        "divide": _divide,
        "rsqrt": _rsqrt,
        "sigmoid": _sigmoid,
        "erf": _erf,
        "copy": _copy,
        "zeros_like": _zeros_like,
        "ones_like": _ones_like,
        "nn.relu": _relu,
        "maximum": _maximum,
        "minimum": _minimum,
        "where": _where,
    }
)


@register_kernel("cast")
def cast(attrs: Mapping[str, Any]) -> Kernel:
    """``x`` converted to the output's dtype, as ``astype`` does (``copyto`` unsafe casting)."""

    def kernel(x: np.ndarray, out: np.ndarray) -> None:
        np.copyto(out, x, casting="unsafe")

    return kernel


@register_kernel("clip")
def clip(attrs: Mapping[str, Any]) -> Kernel:
    """``x`` limited to ``[a_min, a_max]``. For integer dtypes the bounds are first rounded
    inward (ceil of a_min, floor of a_max) and limited to the dtype's range, so the result is
    what clipping the exact values would give."""
    lo, hi = attrs["a_min"], attrs["a_max"]

    def kernel(x: np.ndarray, out: np.ndarray) -> None:
        if out.dtype.kind == "f":
            np.clip(x, lo, hi, out=out)
            return
        info = np.iinfo(out.dtype)
        ilo = info.min if math.isinf(lo) and lo < 0 else min(max(math.ceil(lo), info.min), info.max)
        ihi = (
            info.max if math.isinf(hi) and hi > 0 else max(min(math.floor(hi), info.max), info.min)
        )
        np.clip(x, ilo, ihi, out=out)

    return kernel


@register_kernel("nn.leaky_relu")
def leaky_relu(attrs: Mapping[str, Any]) -> Kernel:
    """``x if x > 0 else alpha * x``: a copy, then a masked multiply in place (the mask is a
    temporary bool array)."""
    alpha = attrs["alpha"]

    def kernel(x: np.ndarray, out: np.ndarray) -> None:
        np.copyto(out, x)
        np.multiply(out, alpha, out=out, where=out < 0)

    return kernel
