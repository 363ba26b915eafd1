"""Shape functions of the layout ops: reshape, transpose, slicing, joining, splitting, gathering,
scattering.

All follow numpy, except ``reshape``'s 0, which copies the input dim at that position (TVM's
convention; numpy would read it as a literal 0).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

from ..context import Dim, ShapeContext
from ..registry import register_shape_func
from ._common import (
    Shape,
    fail,
    normalize_axis,
    prod,
    require_min_rank,
    require_nonnegative,
    slice_length,
    strided_slice_shape,
)


def reshape_to(ctx: ShapeContext, x: Shape, newshape: Sequence[Dim]) -> Shape:
    """The shape ``x`` takes under ``newshape`` (0 copies the input dim, one -1 is inferred).

    An entry that is not an int is a dim over the function's symbols (``newshape=[n, -1]``),
    taken as it is: only int entries are special. Shared with ``dyn.reshape``, whose newshape
    is a value.
    """
    out: list[Dim] = []
    infer = -1
    for i, d in enumerate(newshape):
        if not isinstance(d, int):
            if d is None:  # what the compiler leaves the VM of a dim entry (see ir/attrs.py)
                fail(f"newshape[{i}] is a dim the compiler resolved; it has no value here")
            out.append(d)
        elif d == 0:
            if i >= len(x):
                fail(f"newshape[{i}] = 0 copies x.shape[{i}], but x has rank {len(x)}")
            out.append(x[i])
        elif d == -1:
            if infer >= 0:
                fail(f"newshape has more than one -1 (at {infer} and {i})")
            infer = i
            out.append(1)  # a placeholder, replaced below
        elif d < -1:
            fail(f"newshape[{i}] = {d}: only 0 and -1 are special, other dims must be >= 0")
        else:
            out.append(d)
    total = prod(x)
    if infer < 0:
        ctx.check_equal(prod(out), total, "the element count of newshape == that of x")
        return tuple(out)
    known = prod(out)
    # numpy refuses to infer -1 next to a 0-dim (every value would fit), so do we.
    ctx.check(known, "!=", 0, "the product of the other dims of newshape != 0 (to infer -1)")
    ctx.check_divides(
        known, total, "the element count of x divisible by the other dims of newshape"
    )
    out[infer] = ctx.floor_div(total, known)
    return tuple(out)


@register_shape_func("reshape")
def reshape(ctx: ShapeContext, x: Shape, *, newshape: Sequence[Dim]) -> Shape:
    """``x`` with ``newshape``: 0 copies the input dim at that position, -1 is inferred."""
    return reshape_to(ctx, x, newshape)


@register_shape_func("transpose")
def transpose(ctx: ShapeContext, x: Shape, *, axes: Sequence[int] | None = None) -> Shape:
    """The axes of ``x`` permuted by ``axes`` (reversed when None)."""
    if axes is None:
        return tuple(reversed(x))
    if len(axes) != len(x):
        fail(f"axes={list(axes)} must list all {len(x)} axes of x")
    perm = [normalize_axis(a, len(x), "x") for a in axes]
    if len(set(perm)) != len(perm):
        fail(f"axes={list(axes)} is not a permutation of the axes of x")
    return tuple(x[p] for p in perm)


@register_shape_func("expand_dims")
def expand_dims(ctx: ShapeContext, x: Shape, *, axis: int, num_newaxis: int = 1) -> Shape:
    """``num_newaxis`` 1-dims inserted at ``axis`` (counted in the rank of the result)."""
    if num_newaxis < 0:
        fail(f"num_newaxis must be >= 0, got {num_newaxis}")
    at = normalize_axis(axis, len(x) + 1, "x with one more axis")
    return (*x[:at], *([1] * num_newaxis), *x[at:])


@register_shape_func("squeeze")
def squeeze(ctx: ShapeContext, x: Shape, *, axis: Sequence[int] | None = None) -> Shape:
    """``x`` without the listed 1-dims (which must be 1), or without all of its 1-dims.

    With ``axis=None`` a dim that might be 1 at compile time is kept, and the check that it is
    not 1 is deferred to run time: the rank of a type cannot depend on a value.
    """
    if axis is not None:
        drop = set()
        for a in axis:
            i = normalize_axis(a, len(x), "x")
            if i in drop:
                fail(f"axis {a} is repeated in axis={list(axis)}")
            ctx.check_equal(x[i], 1, "x.shape[{}] == 1 (a squeezed axis)", i)
            drop.add(i)
        return tuple(d for i, d in enumerate(x) if i not in drop)
    out = []
    for i, d in enumerate(x):
        if ctx.decide(d, "==", 1) is True:
            continue
        ctx.check(d, "!=", 1, "x.shape[{}] != 1 (kept by squeeze with axis=None)", i)
        out.append(d)
    return tuple(out)


@register_shape_func("append")
def append(ctx: ShapeContext, x: Shape, y: Shape, *, axis: int = 0) -> Shape:
    """``concatenate((x, y), axis)``'s shape; the facts name ``x`` and ``y`` and say it is a
    concatenation (the compiler writes ``append`` for ``concatenate`` onto a parameter)."""
    if len(y) != len(x):
        fail(f"concatenates x of rank {len(x)} with y of rank {len(y)}")
    if not x:
        fail("cannot concatenate rank-0 tensors")
    at = normalize_axis(axis, len(x), "x")
    for k, d in enumerate(y):
        if k != at:
            ctx.check_equal(
                d, x[k], "y.shape[{0}] == x.shape[{0}] (concatenated along axis {1})", k, at
            )
    return (*x[:at], x[at] + y[at], *x[at + 1 :])


@register_shape_func("concatenate")
def concatenate(ctx: ShapeContext, data: Sequence[Shape], *, axis: int = 0) -> Shape:
    """The tensors of ``data`` joined along ``axis``; the other dims must agree."""
    if not data:
        fail("needs at least one tensor")
    first = data[0]
    for i, s in enumerate(data[1:], 1):
        if len(s) != len(first):
            fail(f"data[{i}] has rank {len(s)} but data[0] has rank {len(first)}")
    if not first:
        fail("cannot concatenate rank-0 tensors")
    at = normalize_axis(axis, len(first), "data[0]")
    total: Dim = first[at]
    for i, s in enumerate(data[1:], 1):
        for k, d in enumerate(s):
            if k != at:
                ctx.check_equal(d, first[k], "data[{0}].shape[{1}] == data[0].shape[{1}]", i, k)
        total = total + s[at]
    return (*first[:at], total, *first[at + 1 :])


@register_shape_func("stack")
def stack(ctx: ShapeContext, data: Sequence[Shape], *, axis: int = 0) -> Shape:
    """The tensors of ``data`` (all of one shape) joined along a new ``axis``."""
    if not data:
        fail("needs at least one tensor")
    first = data[0]
    for i, s in enumerate(data[1:], 1):
        if len(s) != len(first):
            fail(f"data[{i}] has rank {len(s)} but data[0] has rank {len(first)}")
        for k, d in enumerate(s):
            ctx.check_equal(d, first[k], "data[{0}].shape[{1}] == data[0].shape[{1}]", i, k)
    at = normalize_axis(axis, len(first) + 1, "the stacked result")
    return (*first[:at], len(data), *first[at:])


@register_shape_func("split")
def split(
    ctx: ShapeContext, x: Shape, *, indices_or_sections: int | Sequence[Dim], axis: int = 0
) -> list[Shape]:
    """``np.split``: equal sections (which must divide the axis) or parts cut at indices.

    Indices follow slice rules: negative ones count from the end, ones past the end clamp,
    and a decreasing pair gives an empty part. An index may be a dim (``[n // 2]``): the
    same rules hold, with ``min``/``max`` where the order is not known.
    """
    at = normalize_axis(axis, len(x), "x")
    n = x[at]
    if isinstance(indices_or_sections, int):
        sections = indices_or_sections
        if sections < 1:
            fail(f"indices_or_sections must be >= 1 sections, got {sections}")
        ctx.check_divides(sections, n, "x.shape[{}] divisible by {} sections", at, sections)
        part = ctx.floor_div(n, sections)
        return [(*x[:at], part, *x[at + 1 :])] * sections
    for i, index in enumerate(indices_or_sections):
        if index is None:  # what the compiler leaves the VM of a dim entry (see ir/attrs.py)
            fail(f"indices_or_sections[{i}] is a dim the compiler resolved; it has no value here")
    bounds: list[Dim] = [0, *indices_or_sections, None]
    return [
        (*x[:at], slice_length(ctx, n, start, stop, 1), *x[at + 1 :])
        for start, stop in itertools.pairwise(bounds)
    ]


@register_shape_func("strided_slice")
def strided_slice(
    ctx: ShapeContext,
    x: Shape,
    *,
    begin: Sequence[Dim],
    end: Sequence[Dim],
    strides: Sequence[Dim] | None = None,
) -> Shape:
    """``x[begin[i]:end[i]:strides[i], ...]`` with numpy's negative indices and clamping; a dim
    entry (``begin=[k]``) is a non-negative index, typed with ``min``/``max`` of dims."""
    return strided_slice_shape(ctx, x, begin, end, strides)


@register_shape_func("take")
def take(ctx: ShapeContext, data: Shape, indices: Shape, *, axis: int | None = None) -> Shape:
    """``np.take``: the indexed axis is replaced by the indices' shape (scalar indices drop it).

    With ``axis=None`` data is flattened, so the result has the indices' shape. Whether the
    index values are in range is a fact about values, checked by the kernel.
    """
    if axis is None:
        return indices
    at = normalize_axis(axis, len(data), "data")
    return (*data[:at], *indices, *data[at + 1 :])


@register_shape_func("scatter_nd")
def scatter_nd(
    ctx: ShapeContext, data: Shape, indices: Shape, updates: Shape, *, reduction: str = "none"
) -> Shape:
    """``data``'s shape, under ONNX's relations: an index tuple is ``q = indices.shape[-1]``
    leading coordinates of ``data`` (``q <= rank(data)``) and ``updates.shape ==
    indices.shape[:-1] + data.shape[q:]``. The ranks alone give ``q`` (``rank(indices) - 1 +
    rank(data) - rank(updates)``), so a symbolic last dim of ``indices`` is checked equal to it
    rather than refused. Whether the index values are in range is a fact about values, checked
    by the kernel."""
    require_min_rank(indices, 1, "indices")
    q = len(indices) - 1 + len(data) - len(updates)
    if not 0 <= q <= len(data):
        fail(
            f"updates of rank {len(updates)} do not fit indices of rank {len(indices)} and data "
            f"of rank {len(data)} (updates.shape == indices.shape[:-1] + data.shape[q:], "
            "q = indices.shape[-1] <= rank(data))"
        )
    ctx.check_equal(
        indices[-1],
        q,
        "indices.shape[-1] == {} (rank(indices) - 1 + rank(data) - rank(updates))",
        q,
    )
    lead = len(indices) - 1
    for i in range(lead):
        ctx.check_equal(updates[i], indices[i], "updates.shape[{0}] == indices.shape[{0}]", i)
    for k in range(q, len(data)):
        i = lead + k - q
        ctx.check_equal(updates[i], data[k], "updates.shape[{}] == data.shape[{}]", i, k)
    return data


@register_shape_func("scatter_elements")
def scatter_elements(
    ctx: ShapeContext,
    data: Shape,
    indices: Shape,
    updates: Shape,
    *,
    axis: int = 0,
    reduction: str = "none",
) -> Shape:
    """``data``'s shape. ``indices`` and ``updates`` have one shape, of ``data``'s rank (1 or
    more); along the other axes than ``axis`` it fits in ``data`` (``indices.shape[i] <=
    data.shape[i]``: those coordinates are the element's own)."""
    if len(indices) != len(data):
        fail(f"indices must have data's rank {len(data)}, got rank {len(indices)}")
    if len(updates) != len(indices):
        fail(f"updates must have indices' rank {len(indices)}, got rank {len(updates)}")
    at = normalize_axis(axis, len(data), "data")
    for i, d in enumerate(indices):
        ctx.check_equal(updates[i], d, "updates.shape[{0}] == indices.shape[{0}]", i)
        if i != at:
            ctx.check(d, "<=", data[i], "indices.shape[{0}] <= data.shape[{0}]", i)
    return data


@register_shape_func("dynamic_update_slice")
def dynamic_update_slice(
    ctx: ShapeContext, operand: Shape, update: Shape, start_indices: Sequence[Shape]
) -> Shape:
    """``operand``'s shape. ``update`` has its rank and fits in it (``update.shape[i] <=
    operand.shape[i]``: proved, refuted, or checked at run time); ``start_indices`` (a tuple)
    is one scalar per axis (XLA's form), or one 1-d tensor of ``rank(operand)`` elements
    (ONNX's). The starts' values are clamped by the kernel: they never change a shape."""
    rank = len(operand)
    if len(update) != rank:
        fail(f"update must have the operand's rank {rank}, got rank {len(update)}")
    ranks = [len(s) for s in start_indices]
    if ranks == [1]:
        ctx.check_equal(start_indices[0][0], rank, "start_indices[0].shape[0] == rank(operand)")
    elif any(ranks):
        fail(
            f"start_indices must be {rank} scalars (one per axis of the operand) or one 1-d "
            f"tensor of {rank} elements, got tensors of ranks {ranks}"
        )
    elif len(ranks) != rank:
        fail(f"{len(ranks)} start indices for an operand of rank {rank} (one scalar per axis)")
    for i in range(rank):
        ctx.check(update[i], "<=", operand[i], "update.shape[{0}] <= operand.shape[{0}]", i)
    return operand


@register_shape_func("tile")
def tile(ctx: ShapeContext, x: Shape, *, reps: Sequence[int]) -> Shape:
    """``np.tile``: the shorter of ``x.shape`` and ``reps`` is padded with leading 1s."""
    require_nonnegative(reps, "reps")
    rank = max(len(x), len(reps))
    dims = (1,) * (rank - len(x)) + tuple(x)
    counts = (1,) * (rank - len(reps)) + tuple(reps)
    return tuple(d * r for d, r in zip(dims, counts, strict=True))


@register_shape_func("repeat")
def repeat(ctx: ShapeContext, x: Shape, *, repeats: int, axis: int | None = None) -> Shape:
    """``np.repeat`` with one count: of the flattened ``x`` when ``axis`` is None."""
    if repeats < 0:
        fail(f"repeats must be >= 0, got {repeats}")
    if axis is None:
        return (prod(x) * repeats,)
    at = normalize_axis(axis, len(x), "x")
    return (*x[:at], x[at] * repeats, *x[at + 1 :])


@register_shape_func("broadcast_to")
def broadcast_to(ctx: ShapeContext, x: Shape, *, shape: Sequence[int]) -> Shape:
    """``np.broadcast_to``: each dim of ``x`` (aligned right) is 1 or the target dim."""
    require_nonnegative(shape, "shape")
    if len(x) > len(shape):
        fail(f"cannot broadcast x of rank {len(x)} to a shape of rank {len(shape)}")
    lead = len(shape) - len(x)
    for i, d in enumerate(x):
        target = shape[lead + i]
        if target == 1:  # an attribute, not a dim: plain Python may look at it
            ctx.check_equal(d, 1, "x.shape[{}] == 1 (to broadcast to shape[{}] = 1)", i, lead + i)
        else:
            ctx.broadcast(d, target, "x.shape[{}] with shape[{}]", i, lead + i)
    return tuple(shape)


@register_shape_func("nn.batch_flatten")
def batch_flatten(ctx: ShapeContext, x: Shape) -> Shape:
    """``(x.shape[0], product of the other dims)``."""
    require_min_rank(x, 1, "x")
    return (x[0], prod(x[1:]))


@register_shape_func("nn.pad")
def pad(
    ctx: ShapeContext, x: Shape, *, pad_width: Sequence[Sequence[int]], pad_value: float = 0.0
) -> Shape:
    """Each axis grows by its ``[before, after]`` pair (one pair per axis, none negative).

    A scalar cannot be padded (numpy's ``pad`` refuses it too).
    """
    require_min_rank(x, 1, "x")
    if len(pad_width) != len(x):
        fail(f"pad_width has {len(pad_width)} pairs but x has rank {len(x)}")
    out = []
    for i, (d, (before, after)) in enumerate(zip(x, pad_width, strict=True)):
        if before < 0 or after < 0:
            fail(f"pad_width[{i}] = [{before}, {after}] must not be negative")
        out.append(d + before + after)
    return tuple(out)
