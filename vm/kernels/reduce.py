"""Reductions over axes: ``axis`` (None, an int or a tuple), ``keepdims`` and ``exclude``.

``axis=None`` means every axis; ``exclude=True`` reduces the axes *not* listed (so ``axis=None``
with ``exclude=True`` reduces nothing). The output is pre-allocated with the reduced shape;
numpy's reductions take it through ``out=``.

float16: ``sum``, ``mean`` and ``prod`` accumulate in float32 and round once into the float16
output (as ONNX does). numpy cannot do that through a float16 ``out=``: the partial sums are
stored in ``out`` between its inner loops, so ``mean`` of 100 x 1000.0 is ``inf`` and a sum
over a non-innermost axis stops growing at 2048. Those kernels reduce into a float32 temporary
of the output's shape and copy it into ``out``; other dtypes take ``out=`` directly.
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


F16 = np.dtype(np.float16)


def _reducer(fn: Callable[..., Any]) -> Callable[[Mapping[str, Any]], Kernel]:
    def factory(attrs: Mapping[str, Any]) -> Kernel:
        axis, keepdims, exclude = attrs["axis"], attrs["keepdims"], attrs["exclude"]

        def kernel(x: np.ndarray, out: np.ndarray) -> None:
            axes = reduce_axes(x.ndim, axis, exclude)
            fn(x, axis=axes, keepdims=keepdims, out=out)

        return kernel

    factory.__doc__ = f"``np.{fn.__name__}`` over the reduced axes, with ``out=``."
    return factory


def _accumulating_reducer(fn: Callable[..., Any]) -> Callable[[Mapping[str, Any]], Kernel]:
    def factory(attrs: Mapping[str, Any]) -> Kernel:
        axis, keepdims, exclude = attrs["axis"], attrs["keepdims"], attrs["exclude"]

        def kernel(x: np.ndarray, out: np.ndarray) -> None:
            axes = reduce_axes(x.ndim, axis, exclude)
            if x.dtype == F16:
                # float32 accumulation, one rounding; the temporary is 2x the output's bytes.
                acc = np.empty(out.shape, np.float32)
                fn(x, axis=axes, keepdims=keepdims, dtype=np.float32, out=acc)
                np.copyto(out, acc)
            else:
                fn(x, axis=axes, keepdims=keepdims, out=out)

        return kernel

    factory.__doc__ = (
        f"``np.{fn.__name__}`` over the reduced axes, with ``out=``; float16 accumulates in a "
        "float32 temporary of the output's shape, rounded once into ``out``."
    )
    return factory


register_kernel("prod")(_accumulating_reducer(np.prod))


def _float_sum_or_mean(divide: bool) -> Callable[[Mapping[str, Any]], Kernel]:
    """``sum`` (``divide=False``) or ``mean`` of float32/float64 as ``np.add.reduce`` (and a
    ``true_divide`` by the count): what ``np.sum`` and ``np.mean`` compute for those dtypes,
    bit for bit, without their Python wrappers (``np.mean`` of a (1, 1, 64) row took 11-17 us
    a call against 3 us for ``add.reduce``: most of an RMSNorm's time in a decode step).
    The reduced axes are computed once per rank. Other dtypes take the general kernel
    (``np.sum`` widens small integers and bools; float16 accumulates in float32)."""
    name = "mean" if divide else "sum"

    def factory(attrs: Mapping[str, Any]) -> Kernel:
        general = _accumulating_reducer(np.mean if divide else np.sum)(attrs)
        axis, keepdims, exclude = attrs["axis"], attrs["keepdims"], attrs["exclude"]
        # per rank: the reduced axes, as an int when there is one (add.reduce takes an int
        # axis in about half the time of a tuple)
        by_rank: dict[int, tuple[tuple[int, ...], int | tuple[int, ...]]] = {}
        reduce: Any = np.add.reduce  # positional: the keywords cost a dict a call
        true_divide, fast = np.true_divide, (F32, F64)

        def kernel(x: np.ndarray, out: np.ndarray) -> None:
            if x.dtype not in fast or out.dtype != x.dtype:
                general(x, out)
                return
            ranked = by_rank.get(x.ndim)
            if ranked is None:
                axes = reduce_axes(x.ndim, axis, exclude)
                ranked = by_rank[x.ndim] = (axes, axes[0] if len(axes) == 1 else axes)
            axes, how = ranked
            reduce(x, how, None, out, keepdims)
            if divide:
                count = 1
                for a in axes:
                    count *= x.shape[a]
                true_divide(out, _count(count, x.dtype), out)

        return kernel

    factory.__doc__ = f"``{name}``: " + (_float_sum_or_mean.__doc__ or "")
    return factory


F32, F64 = np.dtype(np.float32), np.dtype(np.float64)

#: 0-d arrays of the element counts a mean divides by, by (count, dtype): dividing by one is
#: np.mean's division by the int (the same float division: the count is exact in the dtype
#: below 2**24), without converting a Python int on every call (2.2 -> 1.5 us on a row).
_COUNTS: dict[tuple[int, np.dtype[Any]], np.ndarray] = {}
_COUNTS_MAX = 1024


def _count(count: int, dtype: np.dtype[Any]) -> Any:
    """``count`` as a read-only 0-d array of ``dtype`` where that is exact, else the int."""
    if count >= 1 << 24:
        return count
    found = _COUNTS.get((count, dtype))
    if found is None:
        if len(_COUNTS) >= _COUNTS_MAX:
            _COUNTS.clear()
        found = np.array(count, dtype)
        found.flags.writeable = False
        _COUNTS[(count, dtype)] = found  # the same value from any thread: a race is harmless
    return found


register_kernel("sum")(_float_sum_or_mean(divide=False))
register_kernel("mean")(_float_sum_or_mean(divide=True))
for _name, _fn in [("max", np.max), ("min", np.min)]:  # exact in any dtype
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


def _running(name: str, ufunc: np.ufunc, identity: int) -> Callable[[Mapping[str, Any]], Kernel]:
    """The kernel factory of ``cumsum`` or ``cumprod``: ``ufunc.accumulate`` (``np.add``,
    ``np.multiply``: what ``np.cumsum`` and ``np.cumprod`` call, without their Python wrappers)
    along ``axis`` with ``out=``: ``reverse`` runs over flipped views of the input and the
    output (no copy), ``exclusive`` writes ``identity`` (0 or 1) first and the running values of
    all but the last element after it. float16 accumulates in a float32 temporary of the
    output's shape, rounded once into ``out`` (as ``sum``). The index tuples of the exclusive
    form are made once per rank: on a shape program's short vectors the kernel's own Python
    was most of its time (7.1 -> ~3 us)."""
    accumulate = ufunc.accumulate

    def factory(attrs: Mapping[str, Any]) -> Kernel:
        axis, exclusive, reverse = attrs["axis"], attrs["exclusive"], attrs["reverse"]
        by_rank: dict[int, tuple[int, tuple[slice, ...], tuple[slice, ...], tuple[slice, ...]]] = {}

        def kernel(x: np.ndarray, out: np.ndarray) -> None:
            ranked = by_rank.get(x.ndim)
            if ranked is None:
                if not -x.ndim <= axis < x.ndim:
                    raise ValueError(
                        f"{name}: axis {axis} is out of bounds for input shape {x.shape}"
                    )
                a = axis % x.ndim
                lead = (slice(None),) * a
                ranked = (a, (*lead, slice(0, 1)), (*lead, slice(1, None)), (*lead, slice(0, -1)))
                by_rank[x.ndim] = ranked
            a, first, rest, but_last = ranked
            if out.shape != x.shape:
                raise ValueError(f"{name}: output {out.shape} for input shape {x.shape}")
            target = np.empty(out.shape, np.float32) if out.dtype == F16 else out
            src = np.flip(x, a) if reverse else x
            dst = np.flip(target, a) if reverse else target
            if exclusive and x.shape[a]:
                dst[first] = identity
                accumulate(src[but_last], a, target.dtype, dst[rest])
            elif not exclusive:
                accumulate(src, a, target.dtype, dst)
            if target is not out:
                np.copyto(out, target)

        return kernel

    factory.__doc__ = _running.__doc__
    return factory


register_kernel("cumsum")(_running("cumsum", np.add, 0))
register_kernel("cumprod")(_running("cumprod", np.multiply, 1))
