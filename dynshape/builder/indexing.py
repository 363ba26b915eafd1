"""numpy indexing of a Value: ints, slices, ``...`` and ``None``; index tensors and bool masks.

How a key becomes ops (each exact, so ``x[:, 1:3]`` of an ``(n, 8)`` tensor has type
``(n, 2)``):

- slices: one ``strided_slice``. Its begin/end/strides lists are positional and may stop
  early (a missing trailing entry is an omitted bound); an interior omitted ``stop`` is written
  as the dim when static, else as ``2**62`` (``-2**62`` going backward), which the shape
  function types as an omitted bound (``x[:, :1]`` of ``(b, n)`` is ``(b, min(1, n))``): an
  omitted bound is not a dim, so a slice by ints keeps int attributes. A bound or step may
  be a dim: an int, or an expression of the inputs' dims (``y[: n // 2]``, ``x[:, k:]``,
  ``x[::k]``), typed with numpy's clamping as ``min``/``max`` of dims. A dim bound counts from
  the start: one that may be negative (``n - 3``) is checked at run time, and one that is never
  positive (``-k``, which numpy would read from the end except at ``k = 0``) is refused here;
  a dim step is forward;
- ints: ``take`` of a scalar index along the axis (negative indices count from the end), which
  drops the axis; statically out-of-range indices fail at build time;
- ``None``: ``expand_dims``;
- an integer tensor: ``take`` along its axis (``x[idx]``, ``x[:, idx]``);
- a bool mask of x's shape, or over x's first axis: ``compress`` (of the flattened x and
  mask for a mask of x's shape; a data-dependent size, ``?``). The mask must be as long as the
  axis, as numpy requires.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeAlias

import numpy as np
import sympy

from .location import fail, user_span
from .trace import apply, constant
from .value import apply_one

if TYPE_CHECKING:
    from .value import Value

#: Stands for an omitted end where one must be written and the dim is symbolic: the shape
#: function types it as an omitted bound (``shape_funcs/ops/_common.py``, ``FAR``).
_BIG = 1 << 62


def getitem(x: Value, key: Any) -> Value:
    """``x[key]`` (see the module docstring)."""
    from .value import Value

    if isinstance(key, Value):
        return _tensor_index(x, key)
    key = key if isinstance(key, tuple) else (key,)
    values = [i for i, k in enumerate(key) if isinstance(k, Value)]
    if values:
        return _tensor_index_in_tuple(x, key, values)
    for k in key:
        if isinstance(k, sympy.Expr) and not isinstance(k, sympy.Integer):
            raise fail(
                f"cannot index a tensor with the dim {k}: an int index by a dim is not "
                f"supported; slice with it, x[{k}:{k} + 1]"
            )
        if not (k is None or k is Ellipsis or isinstance(k, slice) or _is_int(k)):
            raise fail(f"cannot index a tensor with {k!r} (ints, slices, ..., None or a tensor)")
    if sum(k is Ellipsis for k in key) > 1:
        raise fail("an index can only have a single ellipsis ('...')")
    used = sum(1 for k in key if k is not None and k is not Ellipsis)
    if used > x.ndim:
        raise fail(f"too many indices for a tensor of rank {x.ndim}: {used}")
    at = key.index(Ellipsis) if Ellipsis in key else len(key)
    key = key[:at] + (slice(None),) * (x.ndim - used) + key[at + 1 :]
    per_axis = [k for k in key if k is not None]  # one entry per axis of x
    out = _slices(
        x, [_slice(k, i) if isinstance(k, slice) else slice(None) for i, k in enumerate(per_axis)]
    )
    for axis in reversed(range(x.ndim)):
        if _is_int(per_axis[axis]):
            out = _int_index(out, int(per_axis[axis]), axis)
    position = 0
    for k in key:  # expand_dims, at the positions in the result
        if k is None:
            out = apply("expand_dims", out, axis=position)
        if not _is_int(k):
            position += 1
    return out


def _is_int(k: Any) -> bool:
    return isinstance(k, (int, np.integer, sympy.Integer)) and not isinstance(k, (bool, np.bool_))


#: A slice bound or step: an int or a dim (a sympy expression of the inputs' dims).
Bound: TypeAlias = int | sympy.Expr


def _slice(s: slice, axis: int) -> slice:
    """``s`` with ints as ints and dims checked (see the module docstring)."""
    return slice(
        _bound(s.start, axis, "start"), _bound(s.stop, axis, "stop"), _bound(s.step, axis, "step")
    )


def _bound(v: Any, axis: int, what: str) -> Bound | None:
    if v is None or _is_int(v):
        return None if v is None else int(v)
    if not isinstance(v, sympy.Expr) or v.is_integer is not True:
        raise fail(
            f"slice {what} of axis {axis} must be an int or a dim (an expression of the inputs' "
            f"dims, such as n // 2), got {v!r}"
        )
    if v.is_nonpositive is True:
        hint = (
            "a dim step is forward (x[::k])"
            if what == "step"
            else f"numpy counts {v} from the end, except where it is 0, the start; a dim bound "
            f"counts from the start: write the axis's dim minus it (x.shape[{axis}] + ({v}))"
        )
        raise fail(f"slice {what} {v} of axis {axis} is never positive: {hint}")
    bound: Bound = v
    return bound


def _forward(step: Bound) -> bool:
    return not isinstance(step, int) or step > 0


def _trivial(s: slice) -> bool:
    return s.start is None and s.stop is None and s.step in (None, 1)


def _slices(x: Value, per_axis: list[slice]) -> Value:
    """Apply one slice per axis, with one ``strided_slice`` (see the module docstring)."""
    for s in per_axis:
        if isinstance(s.step, int) and s.step == 0:
            raise fail("slice step cannot be zero")
    sliced = [i for i, s in enumerate(per_axis) if not _trivial(s)]
    if not sliced:
        return x
    return _strided_slice(x, per_axis, sliced)


def _strided_slice(x: Value, per_axis: list[slice], axes: list[int]) -> Value:
    """One strided_slice doing ``per_axis[i]`` for each of ``axes`` (the others whole)."""
    last = max(axes)
    begin: list[Bound] = []
    end: list[Bound] = []
    strides: list[Bound] = []
    for i in range(last + 1):
        s = per_axis[i] if i in axes else slice(None)
        step: Bound = 1 if s.step is None else s.step
        forward = _forward(step)
        begin.append(s.start if s.start is not None else (0 if forward else -1))
        if s.stop is not None:
            end.append(s.stop)
        else:
            dim = x.shape[i]
            if isinstance(dim, int):
                end.append(dim if forward else -dim - 1)
            else:  # an omitted bound, not a dim: the attributes stay ints when the rest are
                end.append(_BIG if forward else -_BIG)
        strides.append(step)

    # Trailing entries equal to the omitted bound are left out (the op's default).
    def omitted(i: int, bound: str) -> bool:
        return i not in axes or getattr(per_axis[i], bound) is None

    while end and omitted(len(end) - 1, "stop"):
        end.pop()
    while begin and omitted(len(begin) - 1, "start"):
        begin.pop()
    while strides and isinstance(strides[-1], int) and strides[-1] == 1:
        strides.pop()
    return apply_one("strided_slice", x, begin=begin, end=end, strides=strides or None)


def _int_index(x: Value, index: int, axis: int) -> Value:
    dim = x.shape[axis]
    if isinstance(dim, int) and not -dim <= index < dim:
        raise fail(f"index {index} is out of bounds for axis {axis} with size {dim}")
    return apply_one("take", x, constant(np.int64(index), "int64", user_span()), axis=axis)


def _tensor_index(x: Value, key: Value) -> Value:
    if key.dtype == "bool":
        if key.ndim == x.ndim and x.ndim != 1:
            return apply_one("compress", x.flatten(), key.flatten(), axis=0)
        if key.ndim == 1:
            return apply_one("compress", x, key, axis=0)
        raise fail(
            f"a bool mask must have the tensor's rank ({x.ndim}) or be 1-d over its first axis, "
            f"got rank {key.ndim}"
        )
    return apply_one("take", x, key, axis=0)


def _tensor_index_in_tuple(x: Value, key: tuple[Any, ...], values: list[int]) -> Value:
    others = [k for i, k in enumerate(key) if i not in values]
    if len(values) > 1 or not all(isinstance(k, slice) and _trivial(k) for k in others):
        raise fail("an index tensor can only be combined with whole-axis slices (x[:, idx])")
    index = key[values[0]]
    if index.dtype == "bool":
        raise fail("a bool mask must be the whole index (x[mask])")
    return apply_one("take", x, index, axis=values[0])
