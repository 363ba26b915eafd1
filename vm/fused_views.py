"""Layout steps of a fused kernel as numpy views instead of copies.

A fused kernel's ``reshape``, ``transpose``, ``expand_dims``, ``squeeze``, ``broadcast_to`` or
``strided_slice`` writing scratch copies its input into a buffer of the result's shape, which
the next step reads: the rotary embedding of an exported decoder copies each head twice
(``reshape`` then ``transpose``) before it slices and multiplies. numpy gives all of them as
views, which every kernel reads as it reads a buffer. So ``build_fused`` (``fused.py``) makes
such a step rebind its scratch name to the view, ``t2 = v2(t1, t2)`` (the scratch buffer is
still passed: its shape and dtype are what the view is checked against, so a malformed file
gets an error, not a different array), when no later step can tell the difference:

- the result is scratch (an output is the caller's buffer) written by no other step, and the
  step reads one array and takes no attribute computed at run time;
- a view shares memory with what it views, and with everything that views the same memory
  (its *alias class*): no later step may write any member of the class. (Steps after the view
  read it freely: every kernel reads strided arrays. Writes are another matter: a kernel may
  write its output through a reshape of it, which for a strided view is a copy, and an
  in-place step on the view would change what the other members hold.)

``reshape`` of an array numpy cannot view with the new shape (a transposed one) is a copy, as
``np.reshape`` makes it: no alias then, and nothing else changes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from .kernels.transform import constant_slices, slices

#: The attribute of a fused kernel's ``run`` naming the operand positions (among its outputs
#: and the scratch its caller passes) it may leave unwritten: scratch a view replaced. The
#: memory sanitizer checks every other output (``sanitize_rules.py``).
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


def _broadcast_to(attrs: Mapping[str, Any]) -> View:
    def view(x: np.ndarray, scratch: np.ndarray) -> np.ndarray:
        return _checked(np.broadcast_to(x, scratch.shape), scratch, "broadcast_to")

    return view


def _transpose(attrs: Mapping[str, Any]) -> View:
    axes = attrs["axes"]

    def view(x: np.ndarray, scratch: np.ndarray) -> np.ndarray:
        return _checked(np.transpose(x, axes), scratch, "transpose")

    return view


def _strided_slice(attrs: Mapping[str, Any]) -> View:
    begin, end, strides = attrs["begin"], attrs["end"], attrs["strides"]
    where = constant_slices(begin, end, strides)

    def view(x: np.ndarray, scratch: np.ndarray) -> np.ndarray:
        if where is None or x.ndim < len(where):
            slices(x.shape, begin, end, strides)  # raises, naming what is wrong
        return _checked(x[where], scratch, "strided_slice")

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


def view_steps(steps: Sequence[Any]) -> dict[int, View]:
    """The steps of a fused kernel (``FusedStep``s) that may run as views (see the module
    doc), each with its view maker."""
    writes = [{(r.kind, r.index) for r in s.outputs} for s in steps]
    classes: dict[tuple[str, int], set[tuple[str, int]]] = {}
    found: dict[int, View] = {}
    for i, step in enumerate(steps):
        factory = VIEW_OPS.get(step.op)
        if factory is None or step.runtime_attrs or len(step.inputs) != 1:
            continue
        if isinstance(step.inputs[0], tuple) or len(step.outputs) != 1:
            continue
        x = (step.inputs[0].kind, step.inputs[0].index)
        y = (step.outputs[0].kind, step.outputs[0].index)
        if y[0] != "tmp" or y == x or any(y in w for j, w in enumerate(writes) if j != i):
            continue
        members = classes.get(x, {x}) | {y}
        if any(writes[j] & members for j in range(i + 1, len(steps))):
            continue  # written later: the copy keeps that write from the other members
        for m in members:
            classes[m] = members
        found[i] = factory(step.attrs)
    return found
