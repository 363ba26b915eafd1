"""Two custom ops defined from outside the package, as a user would (registered by the tests
and by the subprocess that loads a saved executable, with ``register()``: not at import, so that
test collection elsewhere never sees them).

- ``example.softplus``: elementwise ``log(1 + exp(beta * x)) / beta``; no shape function (an
  elementwise op's inputs broadcast), so it fuses with its neighbours;
- ``example.above``: the elements of a 1-d ``x`` greater than ``threshold``, in order: its
  output size depends on the data, so its shape function reads ``x``'s value.
"""

from __future__ import annotations

from typing import Any

import numpy as np

import ir
from dynshape.custom_op import register_op


def softplus_kernel(x: np.ndarray, out: np.ndarray, beta: float) -> None:
    """Writes ``log1p(exp(beta * x)) / beta`` into ``out`` (``out`` may be ``x``)."""
    np.multiply(x, x.dtype.type(beta), out=out)
    np.exp(out, out=out)
    np.log1p(out, out=out)
    np.divide(out, out.dtype.type(beta), out=out)


def above_shape(ctx: Any, x: Any, *, threshold: float = 0.0) -> tuple[Any, ...]:
    """``(count,)``: the count is known only from the value (``?`` at compile time)."""
    if len(x.shape) != 1:
        raise ValueError(f"x must be 1-d, got shape {tuple(x.shape)}")
    if ctx.is_known(x):
        return (int(np.count_nonzero(x > threshold)),)
    return (ctx.fresh("above"),)


def above_kernel(x: np.ndarray, out: np.ndarray, threshold: float) -> np.ndarray:
    """Returns the result rather than filling ``out``: the wrapper copies it there."""
    return x[x > threshold]


def register() -> None:
    """Register both ops (once per process)."""
    if ir.has_op("example.softplus"):
        return
    register_op(
        "example.softplus",
        inputs=["x"],
        attrs={"beta": 1.0},
        pattern="elementwise",
        dtype="float",
        kernel=softplus_kernel,
        doc="log(1 + exp(beta * x)) / beta",
    )
    register_op(
        "example.above",
        inputs=["x"],
        attrs={"threshold": 0.0},
        shape_func=above_shape,
        data_dependent=["x"],
        kernel=above_kernel,
        doc="the elements of x greater than threshold",
    )
