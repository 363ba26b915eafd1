"""Layout kernels: reshape, transpose, slicing, joining and splitting, gathering, padding
(scattering: ``update.py``).

Where numpy offers ``out=`` (``concatenate``, ``stack``, ``take``) it is used; the rest build a
view of the input (no copy) and ``np.copyto`` it into the output. ``tile`` and ``repeat`` have
no ``out=`` in numpy: they broadcast a view of the input into a reshaped view of the output, so
they build no temporary at all.

No kernel here builds anything whose size its attributes decide: a kernel whose attributes
give a result shape (``tile``'s reps, ``repeat``'s count, ``nn.pad``'s widths, ``split``'s
parts) first checks, in integer arithmetic, that it is the output's shape, and raises
ValueError naming both otherwise (an executable file may carry any attributes).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from .layout_copy import copy_into
from .registry import Kernel, register_kernel, register_table


def _reshape_copy(x: np.ndarray, out: np.ndarray) -> None:
    """Copy ``x`` into ``out`` of the same size and another shape (the shape was computed by
    the shape function: ``0`` and ``-1`` in ``newshape`` are already resolved). For a strided
    ``x`` and a contiguous ``out``, ``out`` is viewed in ``x``'s shape instead (always a view,
    the same C order), so that ``x`` is copied once, not first into a temporary of its own
    (which was megabytes of fresh pages a call: the speech encoder's group norm at (4, 64,
    6399), 800 page faults)."""
    if x.flags.c_contiguous or not out.flags.c_contiguous:
        np.copyto(out, x.reshape(out.shape))  # a view of a contiguous x (the common case)
    else:
        copy_into(out.reshape(x.shape), x)  # a pixel shuffle's last axis of 2: by index


def _broadcast_to(x: np.ndarray, out: np.ndarray) -> None:
    """``x`` broadcast to the output's shape (``np.copyto`` broadcasts)."""
    np.copyto(out, x)


register_table(
    {
        "reshape": _reshape_copy,
        "expand_dims": _reshape_copy,
        "squeeze": _reshape_copy,
        "nn.batch_flatten": _reshape_copy,
        "broadcast_to": _broadcast_to,
    }
)


@register_kernel("transpose")
def transpose(attrs: Mapping[str, Any]) -> Kernel:
    """Permute the axes (reverse them when ``axes`` is None): a view, copied into ``out``."""
    axes = attrs["axes"]

    def kernel(x: np.ndarray, out: np.ndarray) -> None:
        copy_into(out, x.transpose(axes))  # the method: np.transpose's wrapper costs a call

    return kernel


@register_kernel("concatenate")
def concatenate(attrs: Mapping[str, Any]) -> Kernel:
    """``np.concatenate(data, axis, out=out)``; ``data`` is a tuple of arrays."""
    axis = attrs["axis"]

    def kernel(data: Sequence[np.ndarray], out: np.ndarray) -> None:
        np.concatenate(data, axis=axis, out=out)

    return kernel


@register_kernel("append")
def append(attrs: Mapping[str, Any]) -> Kernel:
    """``np.concatenate((x, y), axis, out=out)``: what ``append`` computes where the compiler
    did not make it a ``memory.append`` (which grows ``x``'s storage in place instead)."""
    axis = attrs["axis"]

    def kernel(x: np.ndarray, y: np.ndarray, out: np.ndarray) -> None:
        np.concatenate((x, y), axis=axis, out=out)

    return kernel


@register_kernel("stack")
def stack(attrs: Mapping[str, Any]) -> Kernel:
    """``np.stack(data, axis, out=out)``; ``data`` is a tuple of arrays."""
    axis = attrs["axis"]

    def kernel(data: Sequence[np.ndarray], out: np.ndarray) -> None:
        np.stack(data, axis=axis, out=out)

    return kernel


@register_kernel("split")
def split(attrs: Mapping[str, Any]) -> Kernel:
    """``np.split`` (views) copied into one output per part.

    An index that is ``None`` was a dim (``[n // 2]``) that the compiler does not write into
    the executable: the cut points are then recovered from the outputs' extents along the axis
    (``cut_points``).
    """
    spec, axis = attrs["indices_or_sections"], attrs["axis"]
    spec = list(spec) if isinstance(spec, tuple) else spec
    if isinstance(spec, list) and None in spec:
        return _split_from_outputs(spec, axis)

    count = spec if isinstance(spec, int) else len(spec) + 1

    def kernel(x: np.ndarray, *outs: np.ndarray) -> None:
        if count != len(outs):
            raise ValueError(
                f"split: indices_or_sections {spec!r} make {count} parts "
                f"but {len(outs)} outputs were given"
            )
        at = _split_axis(axis, x.ndim)
        n = x.shape[at]
        # np.split's parts, sliced here: its Python (array_split, a swapaxes a part) was most
        # of the kernel's time on a decoder step's vectors. Part i is [points[i],
        # points[i + 1]) by slice rules, as np.array_split takes it.
        if isinstance(spec, int):
            if n % spec:
                raise ValueError(f"split: an axis of {n} does not divide into {spec} equal parts")
            points: Sequence[int] = range(0, n + 1, n // spec) if n else [0] * (spec + 1)
        else:
            points = [0, *spec, n]
        _copy_parts(x, at, [(points[i], points[i + 1]) for i in range(count)], outs)

    return kernel


def _split_axis(axis: int, rank: int) -> int:
    """``axis`` as a non-negative index of a rank-``rank`` input; ValueError out of range."""
    at = axis + rank if axis < 0 else axis
    if not 0 <= at < rank:
        raise ValueError(f"split: axis {axis} is out of range for rank {rank}")
    return at


def _copy_parts(
    x: np.ndarray, at: int, bounds: Sequence[tuple[int, int]], outs: Sequence[np.ndarray]
) -> None:
    """Copy ``x[..., start:stop, ...]`` (slice rules, along axis ``at``) into each output."""
    index: list[slice] = [slice(None)] * x.ndim
    for (start, stop), out in zip(bounds, outs, strict=True):
        index[at] = slice(start, stop)
        np.copyto(out, x[tuple(index)])


def _split_from_outputs(spec: list[int | None], axis: int) -> Kernel:
    def kernel(x: np.ndarray, *outs: np.ndarray) -> None:
        if len(spec) + 1 != len(outs):
            raise ValueError(
                f"split: indices_or_sections {tuple(spec)!r} make {len(spec) + 1} parts "
                f"but {len(outs)} outputs were given"
            )
        at = _split_axis(axis, x.ndim)
        sizes = [out.shape[at] for out in outs]
        starts = cut_points(x.shape[at], spec, sizes)
        _copy_parts(x, at, [(a, a + size) for a, size in zip(starts, sizes, strict=True)], outs)

    return kernel


def cut_points(n: int, spec: Sequence[int | None], sizes: Sequence[int]) -> list[int]:
    """The start of each part of ``np.split`` of a length-``n`` axis at ``spec``, where an
    index may be unknown (``None``), from the parts' ``sizes``.

    With the clamped points ``c_0 = 0, c_1..c_k`` (slice rules) and ``c_{k+1} = n``, part ``i``
    is ``[c_i, c_{i+1})`` and has ``max(0, c_{i+1} - c_i)`` elements. So a non-empty part ties
    its two ends (``c_{i+1} = c_i + size``) and an empty one orders them
    (``c_{i+1} <= c_i``). Bounds on each point are tightened along these relations until they
    settle; every non-empty part must then have one possible start. Points in order (equal
    ones too: the usual case) always do. A decreasing pair can leave a non-empty part between
    two empty ones whose start the sizes do not tell (``[6, 0, 1, 1]`` on 8: the part of size 1
    may start anywhere in ``[0, 6]``): that raises ValueError, since the VM has no other way
    to learn a dim index's value.
    """
    k = len(spec)
    if len(sizes) != k + 1 or any(s < 0 for s in sizes) or max(sizes, default=0) > n:
        raise ValueError(f"split: part sizes {list(sizes)} do not fit an axis of {n}")
    lo = [0] * (k + 2)
    hi = [n] * (k + 2)
    lo[0] = hi[0] = 0
    lo[k + 1] = n
    for i, v in enumerate(spec, 1):
        if v is not None:
            c = min(max(v + n if v < 0 else v, 0), n)
            lo[i] = hi[i] = c
    for _ in range(k + 2):  # each sweep settles at least one more point along the chain
        changed = False
        for i, size in enumerate(sizes):
            if size > 0:  # c_{i+1} = c_i + size
                a_lo, a_hi = max(lo[i], lo[i + 1] - size), min(hi[i], hi[i + 1] - size)
                b_lo, b_hi = a_lo + size, a_hi + size
            else:  # c_{i+1} <= c_i
                a_lo, a_hi = max(lo[i], lo[i + 1]), hi[i]
                b_lo, b_hi = lo[i + 1], min(hi[i + 1], hi[i])
            if (a_lo, a_hi, b_lo, b_hi) != (lo[i], hi[i], lo[i + 1], hi[i + 1]):
                lo[i], hi[i], lo[i + 1], hi[i + 1] = a_lo, a_hi, b_lo, b_hi
                changed = True
        if not changed:
            break
    for i, size in enumerate(sizes):
        if lo[i] > hi[i] or (size > 0 and lo[i] != hi[i]):
            raise ValueError(
                f"split: the cut points of indices_or_sections {tuple(spec)!r} cannot be "
                f"recovered from the part sizes {list(sizes)} of an axis of {n} (a non-empty "
                "part between two decreasing symbolic indices); write them as ints or in order"
            )
    return lo[: k + 1]


def slices(
    shape: Sequence[int], begin: Sequence[int], end: Sequence[int], strides: Sequence[int] | None
) -> tuple[slice, ...]:
    """Python slices for ``x[begin:end:strides]``, with the shape function's rules.

    The lists may be shorter than the rank and than each other: a missing begin or end is an
    omitted bound (the whole axis in the stride's direction), a missing stride is 1, and axes
    past every list are taken whole (``shape_funcs/ops/_common.py``, ``strided_slice_shape``).
    """
    steps = strides or ()
    count = max(len(begin), len(end), len(steps))
    if count > len(shape):
        raise ValueError(
            f"strided_slice: begin/end/strides cover {count} axes but x has rank {len(shape)}"
        )
    out = []
    for i in range(count):
        step = int(steps[i]) if i < len(steps) else 1
        if step == 0:
            raise ValueError(f"strided_slice: strides[{i}] is 0")
        start = int(begin[i]) if i < len(begin) else None
        stop = int(end[i]) if i < len(end) else None
        out.append(slice(start, stop, step))
    return tuple(out)


@register_kernel("strided_slice")
def strided_slice(attrs: Mapping[str, Any]) -> Kernel:
    """``x[begin:end:strides]`` (numpy clamping and negative indices): a view, copied."""
    begin, end, strides = attrs["begin"], attrs["end"], attrs["strides"]
    where = constant_slices(begin, end, strides)
    if where is None:  # a zero stride: the error at the call, as for any bad attribute

        def checked(x: np.ndarray, out: np.ndarray) -> None:
            np.copyto(out, x[slices(x.shape, begin, end, strides)])

        return checked
    count = len(where)

    def kernel(x: np.ndarray, out: np.ndarray) -> None:
        if x.ndim < count:
            slices(x.shape, begin, end, strides)  # raises, naming the ranks
        np.copyto(out, x[where])

    return kernel


def constant_slices(
    begin: Sequence[int], end: Sequence[int], strides: Sequence[int] | None
) -> tuple[slice, ...] | None:
    """``slices`` made once for attributes that do not depend on the input (they only need
    its rank to be at least their length, which the caller checks), or None where ``slices``
    would raise (a zero stride)."""
    count = max(len(begin), len(end), len(strides or ()))
    try:
        return slices((0,) * count, begin, end, strides)
    except ValueError:
        return None


#: Read-only index arrays (the executable's constants) known to be a contiguous ascending
#: range, by identity: ``id -> (the array, (first, stop) or None)``. The array is held so its
#: id stays its own; the table is bounded (cleared when full). Entries are the same from any
#: thread, so a race between two writers is harmless.
_RANGES: dict[int, tuple[np.ndarray, tuple[int, int] | None]] = {}
_RANGES_MAX = 256


def constant_range(indices: np.ndarray) -> tuple[int, int] | None:
    """``(first, stop)`` if the read-only 1-d ``indices`` are ``first, first + 1, ..., stop - 1``
    (``stop > first >= 0``), else None; None for writeable (run-time) indices, whose check
    would cost a pass over them on every call."""
    if indices.flags.writeable or indices.ndim != 1 or indices.dtype.kind not in "iu":
        return None
    hit = _RANGES.get(id(indices))
    if hit is not None and hit[0] is indices:
        return hit[1]
    span: tuple[int, int] | None = None
    if indices.size and int(indices[0]) >= 0:
        first = int(indices[0])
        if np.array_equal(indices, np.arange(first, first + indices.size)):
            span = (first, first + indices.size)
    if len(_RANGES) >= _RANGES_MAX:
        _RANGES.clear()
    _RANGES[id(indices)] = (indices, span)
    return span


#: From this many indices on, ``take`` checks them with one ``min`` and one ``max`` and gathers
#: with ``mode="wrap"``: numpy's ``mode="raise"`` with ``out=`` fills a buffered copy of
#: ``out`` and checks every index as it goes (0.81x of it at 5e5 float32 indices, measured;
#: design/compiler_fusion.md). Below, the two extra calls cost more than they save.
CHECKED_TAKE_MIN = 4096
#: ... and from this many output bytes on, whatever the indices: the buffered copy is then a
#: temporary as large as ``out`` (an embedding lookup of 1,024 rows of 128 floats: 512 KiB a
#: call, fresh pages whenever the C allocator had returned the last one's, 128 page faults).
CHECKED_TAKE_OUT_BYTES = 1 << 16


@register_kernel("take")
def take(attrs: Mapping[str, Any]) -> Kernel:
    """``np.take(data, indices, axis, out=out)`` (negative indices wrap; out of range raises,
    with numpy's message: indices found out of range are gathered by ``mode="raise"``).

    Constant indices that are a contiguous range in bounds (the columns ``merge_matmuls``
    takes from a merged matmul) copy a slice instead of gathering (measured 3x faster on
    (256, 96) -> (256, 32))."""
    axis = attrs["axis"]

    def kernel(data: np.ndarray, indices: np.ndarray, out: np.ndarray) -> None:
        if axis is not None and data.ndim:
            span = constant_range(indices)
            if span is not None and span[1] <= data.shape[axis]:
                where = [slice(None)] * data.ndim
                where[axis] = slice(span[0], span[1])
                np.copyto(out, data[tuple(where)])
                return
        checked = indices.size >= CHECKED_TAKE_MIN or out.nbytes >= CHECKED_TAKE_OUT_BYTES
        if checked and (axis is None or -data.ndim <= axis < data.ndim):
            n = data.size if axis is None else data.shape[axis]
            # in [-n, n), wrap gives each index what raise gives it
            if indices.min() >= -n and indices.max() < n:
                data.take(indices, axis, out, "wrap")
                return
        # The method, positional: np.take's wrapper is ~3 us a call, a decode step's gathers
        # are a microsecond of work each.
        data.take(indices, axis, out)

    return kernel


@register_kernel("tile")
def tile(attrs: Mapping[str, Any]) -> Kernel:
    """``np.tile`` without its temporary: the output seen as ``(r0, d0, r1, d1, ...)`` takes
    the input seen as ``(1, d0, 1, d1, ...)`` by broadcasting (the shorter of the input's shape
    and ``reps`` padded with leading 1s, as ``np.tile``). A rep that is ``None`` was a dim (the
    compiler writes no sympy): it is the output's extent over the input's there."""
    reps = tuple(attrs["reps"])

    def kernel(x: np.ndarray, out: np.ndarray) -> None:
        rank = max(x.ndim, len(reps))
        dims = (1,) * (rank - x.ndim) + x.shape
        given = (1,) * (rank - len(reps)) + reps
        if len(out.shape) != rank:
            raise ValueError(f"tile: the output has rank {out.ndim}, expected {rank}")
        counts = tuple(
            (o // d if d else 0) if r is None else r
            for r, d, o in zip(given, dims, out.shape, strict=True)
        )
        shape = tuple(d * r for d, r in zip(dims, counts, strict=True))
        if shape != out.shape or min(counts, default=0) < 0:
            raise ValueError(
                f"tile: reps {reps} on input shape {x.shape} give shape {shape}, "
                f"but the output is {out.shape}"
            )
        # out is C-contiguous, so both reshapes are views.
        np.copyto(
            out.reshape([v for pair in zip(counts, dims, strict=True) for v in pair]),
            x.reshape([v for d in dims for v in (1, d)]),
        )

    return kernel


#: Below this many repeats of the innermost axis, ``repeat`` uses ``np.repeat`` (see there).
_BROADCAST_MIN = 16


@register_kernel("repeat")
def repeat(attrs: Mapping[str, Any]) -> Kernel:
    """``np.repeat`` with one count. The output seen with the count as an extra axis after
    ``axis`` takes the input broadcast along it, with no temporary; except when that extra axis
    would be the innermost and short (the last axis, or ``axis=None``, repeated under
    ``_BROADCAST_MIN`` times), where ``np.repeat``'s own copy is twice as fast and the temporary
    it builds is the output's size (checked first). ``axis=None`` flattens the input (a copy of
    its size if it is not contiguous)."""
    repeats, axis = attrs["repeats"], attrs["axis"]
    if not isinstance(repeats, int):  # one count (a sequence would multiply the shape tuple)
        raise TypeError(f"repeat: repeats must be an int, got {repeats!r}")

    def kernel(x: np.ndarray, out: np.ndarray) -> None:
        if axis is None:
            lead: tuple[int, ...] = (x.size,)
            rest: tuple[int, ...] = ()
        elif -x.ndim <= axis < x.ndim:
            a = axis % x.ndim
            lead, rest = x.shape[: a + 1], x.shape[a + 1 :]
        else:
            raise ValueError(f"repeat: axis {axis} is out of bounds for input shape {x.shape}")
        shape = (*lead[:-1], lead[-1] * repeats, *rest)
        if shape != out.shape or repeats < 0:
            raise ValueError(
                f"repeat: {repeats} repeats along axis {axis} of input shape {x.shape} give "
                f"shape {shape}, but the output is {out.shape}"
            )
        if rest or repeats >= _BROADCAST_MIN:
            np.copyto(out.reshape((*lead, repeats, *rest)), x.reshape((*lead, 1, *rest)))
        else:
            np.copyto(out, np.repeat(x, repeats, axis=axis).reshape(out.shape))

    return kernel


@register_kernel("nn.pad")
def pad(attrs: Mapping[str, Any]) -> Kernel:
    """Constant padding: fill ``out`` with ``pad_value``, then copy ``x`` into the interior
    (``np.pad`` has no ``out=``; this needs no temporary)."""
    pad_width, value = attrs["pad_width"], attrs["pad_value"]

    def kernel(x: np.ndarray, out: np.ndarray) -> None:
        if len(pad_width) != x.ndim or any(b < 0 or a < 0 for b, a in pad_width):
            raise ValueError(
                f"nn.pad: pad_width {pad_width} does not fit rank {x.ndim} "
                "(one non-negative [before, after] pair per axis)"
            )
        shape = tuple(b + d + a for (b, a), d in zip(pad_width, x.shape, strict=True))
        if shape != out.shape:
            raise ValueError(
                f"nn.pad: pad_width {pad_width} on input shape {x.shape} gives shape {shape}, "
                f"but the output is {out.shape}"
            )
        out.fill(value)
        inner = tuple(slice(b, b + d) for (b, _), d in zip(pad_width, x.shape, strict=False))
        out[inner] = x

    return kernel
