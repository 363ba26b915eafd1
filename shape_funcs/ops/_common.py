"""Helpers shared by the shape functions: axes, ranks, broadcasting, products, slices, values.

Ranks, axes and attribute values are plain ints in both modes, so they are checked with plain
Python and fail through ``fail``. Dims go through the context (see ``context.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NoReturn

from ..context import Dim, ShapeContext
from ..errors import ShapeError

Shape = tuple[Dim, ...]


def fail(detail: str) -> NoReturn:
    """Raise a ShapeError for a fact about ranks, axes or attributes (not about dims)."""
    raise ShapeError(detail)


def normalize_axis(axis: int, rank: int, name: str, what: str = "axis") -> int:
    """``axis`` in ``[-rank, rank)`` as a non-negative index; ``name`` is the tensor's name."""
    if -rank <= axis < rank:
        return axis + rank if axis < 0 else axis
    fail(f"{what} {axis} is out of range for {name} of rank {rank}")


def reduce_axes(
    axis: int | Sequence[int] | None, rank: int, exclude: bool, name: str
) -> list[bool]:
    """Per axis of a rank-``rank`` tensor, whether a reduction reduces it.

    ``axis`` is one int, a list (``[]`` reduces nothing, as numpy's ``axis=()``) or None (every
    axis); ``exclude`` reduces the axes *not* listed. Repeated axes are an error, and so is
    ``exclude`` without a list of axes (neither numpy nor the text makes its meaning clear).
    """
    if axis is None:
        if exclude:
            fail("exclude=True needs an explicit axis list")
        return [True] * rank
    axes = [axis] if isinstance(axis, int) else list(axis)
    reduced = [False] * rank
    for a in axes:
        i = normalize_axis(a, rank, name)
        if reduced[i]:
            fail(f"axis {a} is repeated in axis={list(axes)}")
        reduced[i] = True
    return [not r for r in reduced] if exclude else reduced


def require_rank(shape: Shape, rank: int, name: str) -> None:
    """Fail unless ``shape`` has exactly ``rank`` axes."""
    if len(shape) != rank:
        fail(f"{name} must have rank {rank}, got rank {len(shape)}")


def require_min_rank(shape: Shape, rank: int, name: str) -> None:
    """Fail unless ``shape`` has at least ``rank`` axes."""
    if len(shape) < rank:
        fail(f"{name} must have rank >= {rank}, got rank {len(shape)}")


def require_nonnegative(values: Sequence[Any], what: str) -> None:
    """Fail unless every attribute value in ``values`` is >= 0 (a dim entry is, by its kind;
    ``None`` is what the compiler leaves the VM of one: see ``ir/attrs.py``)."""
    for i, v in enumerate(values):
        if v is None:
            fail(f"{what}[{i}] is a dim the compiler resolved; it has no value here")
        if isinstance(v, int) and v < 0:
            fail(f"{what}[{i}] must be >= 0, got {v}")


def prod(dims: Sequence[Dim]) -> Dim:
    """The product of ``dims`` (1 for none); an int when all are ints."""
    out: Dim = 1
    for d in dims:
        out = out * d
    return out


def ceil_div(ctx: ShapeContext, a: Dim, b: Dim) -> Dim:
    """``ceil(a / b)`` with floor division only (exact for ints and for sympy alike)."""
    return -ctx.floor_div(-a, b)


_BROADCAST = "{}.shape[{}] with {}.shape[{}]"


def broadcast_pair(ctx: ShapeContext, a: Shape, b: Shape, an: str, bn: str) -> Shape:
    """The numpy broadcast of two shapes named ``an`` and ``bn`` (rank extension included)."""
    # Identical shapes broadcast to themselves. Structural equality is a sound (if incomplete)
    # proof of equality in both modes, and this is the common case at run time.
    if a == b:
        return a
    ra, rb = len(a), len(b)
    n = ra if ra < rb else rb
    # Plain loops rather than comprehensions: on Python 3.11 a comprehension costs a function
    # call, which is a visible share of a run-time shape-function call.
    out = list(a[: ra - n]) if ra > rb else list(b[: rb - n])
    for i in range(n):
        ia, ib = ra - n + i, rb - n + i
        out.append(ctx.broadcast(a[ia], b[ib], _BROADCAST, an, ia, bn, ib))
    return tuple(out)


def broadcast_many(ctx: ShapeContext, shapes: Sequence[Shape], names: Sequence[str]) -> Shape:
    """The numpy broadcast of several shapes, folded left to right."""
    out, name = shapes[0], names[0]
    for shape, other in zip(shapes[1:], names[1:], strict=True):
        out = broadcast_pair(ctx, out, shape, name, other)
        name = f"broadcast({name}, {other})"
    return out


def clamp_index(ctx: ShapeContext, n: Dim, index: Dim, forward: bool) -> Dim:
    """A slice bound normalised as numpy does for a dim ``n``.

    A negative ``index`` counts from the end; the result is clamped to ``[0, n]`` for a forward
    slice and to ``[-1, n - 1]`` for a backward one (``-1`` meaning "before the first"). An
    index that is not an int is a dim (split's ``[n // 2]``, a slice's ``begin=[k]``): a
    non-negative index by its kind, so only the top can clip (``min(k, n)``).
    """
    low = 0 if forward else -1
    if not isinstance(index, int) or index >= 0:
        return ctx.min(index, n + low)  # index >= 0 >= low, so only the top can clip
    return ctx.max(n + index, low)  # n + index < n + low + 1, so only the bottom can clip


def dim_index(ctx: ShapeContext, index: Dim, what: str) -> Dim:
    """A dim used as a slice index (``begin=[k]``, ``end=[n - 3]``), which counts from the start.

    A dim is non-negative by its kind, but an expression such as ``n - 3`` can be negative at
    some bindings, where numpy would count from the end instead: the type cannot say both (its
    ``min``/``max`` have no sign test), so that is a fact checked at run time (proved here when
    the declared ranges allow), named ``what``.
    """
    if not isinstance(index, int):
        ctx.check(
            index, ">=", 0, "{} = {} to be >= 0 (a dim index counts from the start)", what, index
        )
    return index


#: A slice bound at least this far out (the most an attribute holds, ``MAX_INT``) is past the
#: end of every dim: an omitted bound written as a number (``x[:, :k]`` has to write an end for
#: axis 0), typed as omitted, so ``x[:2**62]`` of ``(n,)`` is ``(n,)``, not ``min(2**62, n)``.
#: Exact for every dim below 2**62; numpy slices a larger one (a zero-size array's) short, and
#: the kernel's output then disagrees with its planned shape: an error, not a wrong answer.
FAR = 1 << 62


def _past_the_end(bound: Dim | None, toward_end: bool) -> bool:
    return isinstance(bound, int) and (bound >= FAR if toward_end else bound <= -FAR)


def slice_length(ctx: ShapeContext, n: Dim, start: Dim | None, stop: Dim | None, step: Dim) -> Dim:
    """``len(range(n)[start:stop:step])``: numpy's slice length, for symbolic ``n`` too.

    ``None`` is an omitted bound (so is one ``FAR`` out). A forward slice has ``ceil((stop -
    start) / step)`` elements, a backward one ``ceil((start - stop) / -step)``, never fewer
    than zero. A step that is a dim (``strides=[k]``) is forward: a dim is non-negative, and a
    step must not be 0 (the caller checks it).
    """
    forward = not isinstance(step, int) or step > 0
    start = None if _past_the_end(start, not forward) else start
    stop = None if _past_the_end(stop, forward) else stop
    if forward:
        lo = 0 if start is None else clamp_index(ctx, n, start, True)
        hi = n if stop is None else clamp_index(ctx, n, stop, True)
        return ctx.max(0, ceil_div(ctx, hi - lo, step))
    first = n - 1 if start is None else clamp_index(ctx, n, start, False)
    last = -1 if stop is None else clamp_index(ctx, n, stop, False)
    return ctx.max(0, ceil_div(ctx, first - last, -step))


def strided_slice_shape(
    ctx: ShapeContext,
    x: Shape,
    begin: Sequence[Dim],
    end: Sequence[Dim],
    strides: Sequence[Dim] | None,
) -> Shape:
    """The shape of ``x[begin[0]:end[0]:strides[0], ...]``.

    The lists may be shorter than the rank and than each other: a missing begin or end is an
    omitted bound (``None``: the whole axis in the direction of the stride), a missing stride
    is 1, and axes past every list are kept whole. An entry may be a dim (``begin=[k]``): a
    non-negative index (``dim_index``), or a forward stride of at least 1.
    """
    strides = strides or ()
    count = max(len(begin), len(end), len(strides))
    if count > len(x):
        fail(f"begin/end/strides cover {count} axes but x has rank {len(x)}")
    out = list(x)
    for i in range(count):
        step = strides[i] if i < len(strides) else 1
        if isinstance(step, int):
            if step == 0:
                fail(f"strides[{i}] must not be 0")
        elif step is None:
            fail(f"strides[{i}] is a dim the compiler resolved; it has no value here")
        else:
            ctx.check(step, ">=", 1, "strides[{}] = {} to be >= 1", i, step)
            # max(1, k) is k wherever the check passes; sizes computed before it (an arena's,
            # at the top of the function) then never divide by zero.
            step = ctx.max(step, 1)
        start = _entry(ctx, begin, i, "begin")
        stop = _entry(ctx, end, i, "end")
        out[i] = slice_length(ctx, x[i], start, stop, step)
    return tuple(out)


def _entry(ctx: ShapeContext, bounds: Sequence[Dim], i: int, name: str) -> Dim | None:
    """Entry ``i`` of begin or end (None past its end: an omitted bound)."""
    if i >= len(bounds):
        return None
    b = bounds[i]
    if b is None:  # what the compiler leaves the VM of a dim entry (see ir/attrs.py)
        fail(f"{name}[{i}] is a dim the compiler resolved; it has no value here")
    return dim_index(ctx, b, f"{name}[{i}]")


def read_int_vector(value: Any, name: str) -> list[int]:
    """The ints held in a 1-d integer numpy array (a shape, begin/end/strides tensor)."""
    if value.ndim != 1 or value.dtype.kind not in "iu":
        fail(f"{name} must be a 1-d integer tensor, got {value.dtype} of shape {value.shape}")
    return [int(v) for v in value.tolist()]


def read_int_scalar(value: Any, name: str) -> int:
    """The int held in a rank-0 integer numpy array."""
    if value.ndim != 0 or value.dtype.kind not in "iu":
        fail(f"{name} must be a scalar integer tensor, got {value.dtype} of shape {value.shape}")
    return int(value)


def vector_length(value: Any, name: str) -> int | None:
    """The static length of a 1-d tensor (known or not), None if its length is symbolic."""
    shape = value.shape
    if len(shape) != 1:
        fail(f"{name} must be a 1-d tensor, got shape {tuple(shape)}")
    return shape[0] if isinstance(shape[0], int) else None
