"""Update kernels: a copy of the operand with some of its elements replaced (``scatter_nd``,
``scatter_elements``, ``dynamic_update_slice``), written into the operand's own bytes when the
planner gave the output those bytes.

All three are declared ``in_place`` (``shape_funcs/declarations/catalogue/transform.py``): the
memory planner may place the output over the operand when the operand dies at the kernel
(``dynshape/analysis/in_place.py``). The kernel then finds ``out`` to be the operand's very
memory (``same_array``) and skips the copy, so an update costs the bytes it writes, not the
operand's size. That is safe because every index and start is read, converted and checked
before the first write, and an update that overlaps the output is read before it is
overwritten (numpy's assignment copies an overlapping source first; ``ufunc.at`` is given a
copy). Any other overlap (none the planner makes) is still right: ``np.copyto`` handles
overlapping arrays.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from .registry import Kernel, register_kernel


def same_array(a: np.ndarray, b: np.ndarray) -> bool:
    """True if ``a`` and ``b`` view the very same elements (one address, shape, strides and
    dtype): copying one into the other would change nothing."""
    return (
        a.shape == b.shape
        and a.strides == b.strides
        and a.dtype == b.dtype
        and a.__array_interface__["data"][0] == b.__array_interface__["data"][0]
    )


def copy_operand(operand: np.ndarray, out: np.ndarray) -> None:
    """``out = operand``, unless ``out`` is the operand's own memory (an in-place update)."""
    if not same_array(operand, out):
        np.copyto(out, operand)


#: The ufunc whose ``.at`` combines a scatter's updates with what is there (``None``: write).
_SCATTER_UFUNCS: dict[str, Any] = {
    "none": None,
    "add": np.add,
    "mul": np.multiply,
    "max": np.maximum,
    "min": np.minimum,
}


def _scatter_ufunc(op: str, reduction: Any) -> Any:
    if reduction not in _SCATTER_UFUNCS:
        raise ValueError(f"{op}: unknown reduction {reduction!r} (one of {list(_SCATTER_UFUNCS)})")
    return _SCATTER_UFUNCS[reduction]


def _check_scatter_inputs(
    op: str, data: np.ndarray, indices: np.ndarray, updates: np.ndarray, out: np.ndarray
) -> None:
    """What both scatters need of their arrays beyond the shape relations of each."""
    if indices.dtype.kind not in "iu":
        raise ValueError(f"{op}: indices must be integers, got {indices.dtype}")
    if indices.dtype == np.uint64 and indices.size and int(indices.max()) > 2**63 - 1:
        # past int64 (the dtype the indices are wrapped in): out of range of any dim
        raise ValueError(f"{op}: index {int(indices.max())} is out of range")
    if updates.dtype != data.dtype or out.dtype != data.dtype:
        raise ValueError(
            f"{op}: data {data.dtype}, updates {updates.dtype} and output {out.dtype} must have "
            "one dtype"
        )
    if out.shape != data.shape:
        raise ValueError(f"{op}: output {out.shape} for data of shape {data.shape}")


def _position(flat: int, shape: tuple[int, ...], *tail: str) -> str:
    """The coordinates of element ``flat`` of ``shape``, as ``1, 0`` (and ``tail``)."""
    return ", ".join([*(str(int(i)) for i in np.unravel_index(flat, shape)), *tail])


def _scatter_rows(
    out: np.ndarray, data: np.ndarray, rows: int, flat: np.ndarray, updates: np.ndarray, ufunc: Any
) -> None:
    """``out = data`` (nothing to copy in place), then row ``flat[j]`` of ``out`` seen as
    ``(rows, ...)`` receives ``updates[j]`` for each ``j`` in order: written (the last of
    repeated rows wins, as a sequential loop) or combined by ``ufunc.at`` (repeated rows
    accumulate). ``flat`` holds valid rows. A non-contiguous ``out`` (a reshape would copy it)
    goes through a temporary."""
    target = out if out.flags.c_contiguous else np.empty(out.shape, out.dtype)
    copy_operand(data, target)
    view = target.reshape((rows, *updates.shape[1:]))
    if ufunc is None:
        # numpy leaves the winner among repeated fancy-assignment indices unspecified: keep
        # only each row's last update, so the result does not depend on numpy's order.
        last = flat.size - 1 - np.unique(flat[::-1], return_index=True)[1]
        view[flat[last]] = updates[last]
    else:
        if np.may_share_memory(updates, view):  # the updates are read as ufunc.at writes
            updates = updates.copy()
        ufunc.at(view, flat, updates)
    if target is not out:
        np.copyto(out, target)


@register_kernel("scatter_nd")
def scatter_nd(attrs: Mapping[str, Any]) -> Kernel:
    """Copy ``data`` into ``out`` (unless ``out`` is ``data``'s memory), then scatter: the index
    tuples (the last axis of ``indices``, ``q`` long, negative coordinates wrapped) become row
    numbers of ``out`` seen as ``(prod(data.shape[:q]), *data.shape[q:])``, and each row
    receives its slice of ``updates`` (``_scatter_rows``). A coordinate out of range raises
    ValueError naming it, before anything is written."""
    ufunc = _scatter_ufunc("scatter_nd", attrs["reduction"])

    def kernel(data: np.ndarray, indices: np.ndarray, updates: np.ndarray, out: np.ndarray) -> None:
        _check_scatter_inputs("scatter_nd", data, indices, updates, out)
        if indices.ndim < 1 or indices.shape[-1] > data.ndim:
            raise ValueError(
                f"scatter_nd: indices of shape {indices.shape} for data of rank {data.ndim} "
                "(the last dim, the index tuple's length, must be at most the data's rank)"
            )
        q = indices.shape[-1]
        expected = (*indices.shape[:-1], *data.shape[q:])
        if updates.shape != expected:
            raise ValueError(
                f"scatter_nd: updates of shape {updates.shape} for indices {indices.shape} and "
                f"data {data.shape} (expected {expected})"
            )
        dims = np.array(data.shape[:q], dtype=np.int64)
        tuples = indices.reshape(math.prod(indices.shape[:-1]), q).astype(np.int64)
        bad = np.nonzero(((tuples < -dims) | (tuples >= dims)).any(axis=1))[0]
        if bad.size:
            at = _position(int(bad[0]), indices.shape[:-1], ":")
            raise ValueError(
                f"scatter_nd: index {tuples[bad[0]].tolist()} at indices[{at}] is out of range "
                f"for the leading dims {data.shape[:q]} of data"
            )
        tuples = np.where(tuples < 0, tuples + dims, tuples)
        # Row-major strides of the leading dims: (d1*..*d(q-1), .., d(q-1), 1).
        strides = np.cumprod([1, *dims[:0:-1]], dtype=np.int64)[::-1] if q else dims
        flat = tuples @ strides
        rows = int(np.prod(dims, dtype=np.int64))
        _scatter_rows(out, data, rows, flat, updates.reshape((len(tuples), *data.shape[q:])), ufunc)

    return kernel


@register_kernel("scatter_elements")
def scatter_elements(attrs: Mapping[str, Any]) -> Kernel:
    """Copy ``data`` into ``out`` (unless ``out`` is ``data``'s memory), then ``out[i0, ..,
    indices[i0, .., ik], .., ik]`` receives ``updates[i0, .., ik]`` (the index, negative ones
    wrapped, replacing the coordinate along ``axis``), in row-major order of ``indices``
    (``_scatter_rows`` on the flattened output). An index out of range raises ValueError naming
    it, before anything is written."""
    axis = attrs["axis"]
    ufunc = _scatter_ufunc("scatter_elements", attrs["reduction"])

    def kernel(data: np.ndarray, indices: np.ndarray, updates: np.ndarray, out: np.ndarray) -> None:
        _check_scatter_inputs("scatter_elements", data, indices, updates, out)
        rank = data.ndim
        if not -rank <= axis < rank:
            raise ValueError(f"scatter_elements: axis {axis} is out of range for rank {rank}")
        a = axis % rank
        if indices.ndim != rank or updates.shape != indices.shape:
            raise ValueError(
                f"scatter_elements: indices {indices.shape} and updates {updates.shape} must have "
                f"one shape, of the data's rank {rank}"
            )
        if any(
            i != a and m > d for i, (m, d) in enumerate(zip(indices.shape, data.shape, strict=True))
        ):
            raise ValueError(
                f"scatter_elements: indices {indices.shape} exceed the data {data.shape} along "
                f"an axis other than {a}"
            )
        n = data.shape[a]
        index = indices.astype(np.int64)
        bad = np.nonzero(((index < -n) | (index >= n)).reshape(-1))[0]
        if bad.size:
            at = _position(int(bad[0]), indices.shape)
            raise ValueError(
                f"scatter_elements: index {int(index.reshape(-1)[bad[0]])} at indices[{at}] is "
                f"out of range for axis {a} of size {n}"
            )
        index = np.where(index < 0, index + n, index)
        flat = np.zeros(indices.shape, np.int64)
        stride = 1
        for i in reversed(range(rank)):
            if i == a:
                flat += index * stride
            else:
                iota = np.arange(indices.shape[i], dtype=np.int64) * stride
                flat += iota.reshape([-1 if j == i else 1 for j in range(rank)])
            stride *= data.shape[i]
        _scatter_rows(out, data, data.size, flat.reshape(-1), updates.reshape(-1), ufunc)

    return kernel


@register_kernel("dynamic_update_slice")
def dynamic_update_slice(attrs: Mapping[str, Any]) -> Kernel:
    """XLA's DynamicUpdateSlice: copy ``operand`` into ``out`` (unless ``out`` is the operand's
    memory), then write ``update`` at the starts, each clamped to ``[0, operand.shape[i] -
    update.shape[i]]`` so the whole update fits. ``start_indices`` is a tuple: one integer
    scalar per axis, or one 1-d integer array of ``rank`` elements."""

    def kernel(
        operand: np.ndarray,
        update: np.ndarray,
        start_indices: Sequence[np.ndarray],
        out: np.ndarray,
    ) -> None:
        starts = read_starts(operand, update, start_indices, out)
        copy_operand(operand, out)
        # numpy copies an update that overlaps out before writing it
        out[tuple(slice(b, b + u) for b, u in zip(starts, update.shape, strict=True))] = update

    return kernel


def read_starts(
    operand: np.ndarray, update: np.ndarray, start_indices: Sequence[np.ndarray], out: np.ndarray
) -> list[int]:
    """The clamped starts of ``dynamic_update_slice``, as Python ints (no overflow whatever the
    index dtype), after checking every relation the shape function states; ValueError names
    what does not fit."""
    rank = operand.ndim
    if out.shape != operand.shape or out.dtype != operand.dtype:
        raise ValueError(
            f"dynamic_update_slice: output {out.dtype} {out.shape} for operand {operand.dtype} "
            f"{operand.shape}"
        )
    if update.dtype != operand.dtype:
        raise ValueError(f"dynamic_update_slice: update {update.dtype} for operand {operand.dtype}")
    if update.ndim != rank or any(u > d for u, d in zip(update.shape, operand.shape, strict=True)):
        raise ValueError(
            f"dynamic_update_slice: update of shape {update.shape} does not fit in the operand "
            f"of shape {operand.shape} (same rank, no dim larger)"
        )
    for i, s in enumerate(start_indices):
        if s.dtype.kind not in "iu":
            raise ValueError(
                f"dynamic_update_slice: start_indices[{i}] must be integers, got {s.dtype}"
            )
    values: list[int] | None = None  # None: neither form
    if len(start_indices) == 1 and start_indices[0].ndim == 1:
        values = [int(v) for v in start_indices[0].tolist()]
    elif all(s.ndim == 0 for s in start_indices):
        values = [int(s) for s in start_indices]
    if values is None or len(values) != rank:
        raise ValueError(
            f"dynamic_update_slice: start_indices of shapes "
            f"{[s.shape for s in start_indices]} for an operand of rank {rank} (one scalar per "
            "axis, or one 1-d tensor of rank elements)"
        )
    return [
        min(max(v, 0), d - u) for v, d, u in zip(values, operand.shape, update.shape, strict=True)
    ]
