"""Reductions over axes: ``axis`` (None, an int or a tuple), ``keepdims`` and ``exclude``.

``axis=None`` means every axis; ``exclude=True`` reduces the axes *not* listed (so ``axis=None``
with ``exclude=True`` reduces nothing). The output is pre-allocated with the reduced shape;
numpy's reductions take it through ``out=``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from .registry import Kernel, register_kernel


def reduce_axes(ndim: int, axis: Any, exclude: bool) -> tuple[int, ...]:
    """The reduced axes, normalised to ``0..ndim-1`` and sorted."""
    if axis is None:
        given = tuple(range(ndim))
    elif isinstance(axis, int):
        given = (axis,)
    else:
        given = tuple(axis)
    norm = set()
    for a in given:
        if not -ndim <= a < ndim:
            raise ValueError(f"axis {a} is out of bounds for a tensor of rank {ndim}")
        norm.add(a % ndim)
    if exclude:
        norm = set(range(ndim)) - norm
    return tuple(sorted(norm))


def _reducer(fn: Callable[..., Any]) -> Callable[[Mapping[str, Any]], Kernel]:
    def factory(attrs: Mapping[str, Any]) -> Kernel:
        axis, keepdims, exclude = attrs["axis"], attrs["keepdims"], attrs["exclude"]

        def kernel(x: np.ndarray, out: np.ndarray) -> None:
            axes = reduce_axes(x.ndim, axis, exclude)
            fn(x, axis=axes, keepdims=keepdims, out=out)

        return kernel

    factory.__doc__ = f"``np.{fn.__name__}`` over the reduced axes, with ``out=``."
    return factory


_REDUCERS: list[tuple[str, Callable[..., Any]]] = [
    ("sum", np.sum),
    ("mean", np.mean),
    ("max", np.max),
    ("min", np.min),
    ("prod", np.prod),
]
for _name, _fn in _REDUCERS:
    register_kernel(_name)(_reducer(_fn))


def _arg_reducer(fn: Callable[..., Any]) -> Callable[[Mapping[str, Any]], Kernel]:
    def factory(attrs: Mapping[str, Any]) -> Kernel:
        axis, exclude = attrs["axis"], attrs["exclude"]

        def kernel(x: np.ndarray, out: np.ndarray) -> None:
            axes = reduce_axes(x.ndim, axis, exclude)
            kept = [a for a in range(x.ndim) if a not in axes]
            # Several reduced axes are flattened, in axis order, into one last axis.
            moved = x.transpose(kept + list(axes))
            size = math.prod(x.shape[a] for a in axes)
            flat = moved.reshape([*(x.shape[a] for a in kept), size])
            target = out.reshape([x.shape[a] for a in kept])
            fn(flat, axis=-1, out=target)

        return kernel

    factory.__doc__ = (
        f"``np.{fn.__name__}`` (int64) with the reduced axes flattened in order; "
        "writes through ``out=`` (a reshaped view of the output)."
    )
    return factory


register_kernel("argmax")(_arg_reducer(np.argmax))
register_kernel("argmin")(_arg_reducer(np.argmin))
