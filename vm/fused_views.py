"""Layout steps of a fused kernel as numpy views instead of copies.

A fused kernel's ``reshape``, ``transpose``, ``expand_dims``, ``squeeze``, ``broadcast_to``,
``strided_slice`` or ``take`` of constant indices that are a range (a merged projection's
split), writing scratch, copies its input into a buffer of the result's shape, which the next
step reads: the rotary embedding of an exported decoder copies each head twice (``reshape``
then ``transpose``) before it slices and multiplies. numpy gives all of them as
views, which every kernel reads as it reads a buffer. So ``build_fused`` (``fused.py``) makes
such a step bind a name of its own to the view, ``w2 = v2(t1, t2)`` (the scratch buffer is
still passed: its shape and dtype are what the view is checked against, so a malformed file
gets an error, not a different array), which the later steps read for that scratch until one
writes it again; a step always writes a scratch's own buffer (``t2``), never through a view
(so a slot the step plan reuses, as it does for values that died, keeps its views: an
exported attention mask's builder puts four values in one slot), when no later step can tell
the difference:

- the result is scratch (an output is the caller's buffer), and the step reads one array and
  takes no attribute computed at run time;
- a view shares memory with what it views, and with everything that views the same memory
  (its *alias class*): no later step may write a member of the class, which would change what
  the view shows. (Steps after the view read it freely: every kernel reads strided arrays.
  Classes are kept per slot and only grow, so a slot written again stays in its old class:
  more copies than needed, never fewer.)

``reshape`` of an array numpy cannot view with the new shape (a transposed one) is a copy, as
``np.reshape`` makes it: no alias then, and nothing else changes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from .kernels.transform import constant_range, constant_slices, slices

#: The attribute of a fused kernel's ``run`` naming the operand positions (among its outputs
#: and the scratch its caller passes) it may leave unwritten: scratch a view replaced, and a
#: step's workspace (``fused.workspaces``). The memory sanitizer checks every other output
#: (``sanitize_rules.py``).
SCRATCH_VIEWS = "scratch_views"

#: A view maker: ``view(x, scratch)`` is ``x`` seen with the scratch's shape and dtype.
View = Callable[[np.ndarray, np.ndarray], np.ndarray]


def _checked(view: np.ndarray, scratch: np.ndarray, op: str) -> np.ndarray:
    if view.shape != scratch.shape or view.dtype != scratch.dtype:
        raise ValueError(
            f"{op}: the view is {view.shape} {view.dtype} where the step's scratch is "
            f"{scratch.shape} {scratch.dtype}"
        )
    return view


def _reshape(attrs: Mapping[str, Any]) -> View:
    def view(x: np.ndarray, scratch: np.ndarray) -> np.ndarray:
        if x.size != scratch.size:
            raise ValueError(f"reshape: {x.shape} has no view of shape {scratch.shape}")
        return _checked(x.reshape(scratch.shape), scratch, "reshape")

    return view


#: ``np.broadcast_to`` is Python (an ``nditer``): ~5 us a call, the time ``np.copyto`` takes to
#: fill ~16 KiB (measured on this machine). Below this many bytes a broadcast is copied into its
#: scratch as the plain step does; above, the view saves the copy.
BROADCAST_VIEW_MIN_BYTES = 1 << 16


def _broadcast_to(attrs: Mapping[str, Any]) -> View:
    def view(x: np.ndarray, scratch: np.ndarray) -> np.ndarray:
        if scratch.nbytes < BROADCAST_VIEW_MIN_BYTES:
            np.copyto(scratch, x)
            return scratch
        return _checked(np.broadcast_to(x, scratch.shape), scratch, "broadcast_to")

    return view


def _transpose(attrs: Mapping[str, Any]) -> View:
    axes = attrs["axes"]

    def view(x: np.ndarray, scratch: np.ndarray) -> np.ndarray:
        return _checked(x.transpose(axes), scratch, "transpose")

    return view


def _strided_slice(attrs: Mapping[str, Any]) -> View:
    begin, end, strides = attrs["begin"], attrs["end"], attrs["strides"]
    where = constant_slices(begin, end, strides)

    def view(x: np.ndarray, scratch: np.ndarray) -> np.ndarray:
        if where is None or x.ndim < len(where):
            slices(x.shape, begin, end, strides)  # raises, naming what is wrong
        return _checked(x[where], scratch, "strided_slice")

    return view


def _take_range(axis: int, span: tuple[int, int]) -> View:
    """``take`` of the constant indices ``first, first + 1, ..., stop - 1`` along ``axis``: the
    slice ``first:stop`` of it (the columns a merged projection's split takes)."""
    first, stop = span
    cut = slice(first, stop)
    # the index tuple: the axis counted from the front, or from the back after an Ellipsis
    where: tuple[Any, ...] = (
        (*([slice(None)] * axis), cut)
        if axis >= 0
        else (Ellipsis, cut, *([slice(None)] * (-axis - 1)))
    )

    def view(x: np.ndarray, scratch: np.ndarray) -> np.ndarray:
        if axis >= x.ndim or axis < -x.ndim or stop > x.shape[axis]:
            raise ValueError(f"take: indices {first}..{stop - 1} out of range of {x.shape}")
        return _checked(x[where], scratch, "take")

    return view


#: The ops whose step may be a view, each with its view maker's factory (from the attributes).
VIEW_OPS: dict[str, Callable[[Mapping[str, Any]], View]] = {
    "reshape": _reshape,
    "expand_dims": _reshape,
    "squeeze": _reshape,
    "nn.batch_flatten": _reshape,
    "broadcast_to": _broadcast_to,
    "transpose": _transpose,
    "strided_slice": _strided_slice,
}


def _maker(step: Any, constants: Sequence[np.ndarray]) -> View | None:
    """The view maker of ``step``, if it reads one array (a ``take`` of constant indices that
    are a range counts: its other operand is no array at run time), else None."""
    if step.runtime_attrs:
        return None
    if step.op == "take" and len(step.inputs) == 2 and step.attrs.get("axis") is not None:
        indices = step.inputs[1]
        if isinstance(indices, tuple) or indices.kind != "const":
            return None
        if not 0 <= indices.index < len(constants):
            return None
        span = constant_range(constants[indices.index])
        return None if span is None else _take_range(int(step.attrs["axis"]), span)
    factory = VIEW_OPS.get(step.op)
    return None if factory is None or len(step.inputs) != 1 else factory(step.attrs)


def view_steps(steps: Sequence[Any], constants: Sequence[np.ndarray] = ()) -> dict[int, View]:
    """The steps of a fused kernel (``FusedStep``s; ``constants``, the executable's pool) that
    may run as views (see the module doc), each with its view maker."""
    writes = [{(r.kind, r.index) for r in s.outputs} for s in steps]
    classes: dict[tuple[str, int], set[tuple[str, int]]] = {}
    found: dict[int, View] = {}
    for i, step in enumerate(steps):
        maker = _maker(step, constants)
        if maker is None:
            continue
        if isinstance(step.inputs[0], tuple) or len(step.outputs) != 1:
            continue
        x = (step.inputs[0].kind, step.inputs[0].index)
        y = (step.outputs[0].kind, step.outputs[0].index)
        if y[0] != "tmp" or y == x:
            continue
        viewed = classes.get(x, {x})
        if any(writes[j] & viewed for j in range(i + 1, len(steps))):
            continue  # what it views written later: the view would see the write
        members = viewed | {y}
        for m in members:
            classes[m] = members
        found[i] = maker
    return found
