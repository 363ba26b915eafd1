"""Layouts of a kernel's constant operands, made once per VM instead of once per call.

A convolution on a small plane multiplies by its weight laid out channels-last; a recurrent
layer multiplies every step by ``R^T`` laid out contiguous. Made from the operand on every call,
such a layout is a copy of the whole weight per call (ResNet-18's small-plane convolutions: 13
copies, ~270 us of a 7 ms call; an LSTM tagger's ``R^T``: more than the short sequence's own
steps save by it). Where the operand is a constant of the executable (a fused step reading
``Ref("const", i)``), the VM asks the kernel, once, for a version of itself that keeps such
layouts (``with_constants``), as onnxruntime's kernels pre-pack constant initializers.

The protocol, optional for any kernel: a kernel may carry an attribute ``with_constants``, a
callable taking ``{operand position: array}`` and returning a kernel with the same calling
convention and **the same results, bit for bit**, when called with those arrays at those
positions (what it keeps must be what it would have computed from them). ``build_fused``
(``vm/fused.py``) calls it for every step with constant operands. One exception, documented
where it is taken: a path that pays only with a kept layout (``nn.conv2d``'s channels-last
product of all images for a kept weight, its few-row product by a kept weight's panels,
``row_panels``, and its depthwise tap matrices past the small-plane bound,
``DEPTHWISE_DENSE_FEW``) may be chosen for a constant alone; its results then agree with the plain
kernel's within the product's rounding, and every call of a VM runs the same kernel, so its
bits do not change from call to call.

A ``ConstantLayouts`` is what such a kernel keeps: ``get(array, key, make)`` returns
``make(array)``, computed once per ``key`` and kept read-only when ``array`` is one of the
constants it was given (by identity: the fused kernel passes the same constant object on every
call), and computed afresh for any other array. At most ``LAYOUTS_MAX`` layouts per kernel are
kept, so the memory is bounded by that many copies of the constants; two threads that make the
same layout at once both keep an equal array, which is harmless.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Mapping
from typing import Any

import numpy as np

from .registry import Kernel

#: Layouts one kernel keeps at most (a convolution keeps one per path and dtype it meets).
LAYOUTS_MAX = 16


class ConstantLayouts:
    """The layouts a kernel keeps of its constant operands (see the module doc); empty (every
    ``get`` computes) when made without constants."""

    def __init__(self, constants: Iterable[np.ndarray] = ()) -> None:
        self._constants = tuple(constants)
        self._ids = frozenset(id(c) for c in self._constants)
        self._made: dict[tuple[int, Hashable], np.ndarray] = {}

    def get(self, array: np.ndarray, key: Hashable, make: Callable[[np.ndarray], Any]) -> Any:
        """``make(array)``: kept per ``key`` when ``array`` is one of the constants."""
        for c in self._constants:  # a loop, not any(): a generator costs ~0.3 us a call
            if array is c:
                break
        else:
            return make(array)
        slot = (id(array), key)
        found = self._made.get(slot)
        if found is None:
            found = make(array)
            if isinstance(found, np.ndarray) and found.flags.writeable:
                # shared by every later call: kept read-only, through a view of its own (the
                # layout may be the operand itself, whose flags are its owner's)
                found = found.view()
                found.flags.writeable = False
            if len(self._made) >= LAYOUTS_MAX:
                self._made.clear()
            self._made[slot] = found
        return found

    def keeps(self, array: np.ndarray) -> bool:
        """Whether ``array`` is one of the constants (its layouts are kept, not made per call)."""
        # by identity: the ids stay the constants' while this object holds them
        return id(array) in self._ids

    def __len__(self) -> int:
        return len(self._made)


def with_constants(kernel: Kernel, constants: Mapping[int, np.ndarray]) -> Kernel:
    """``kernel`` specialised on its constant operands (by position) where it offers that
    (``kernel.with_constants``), else ``kernel`` itself."""
    prepare = getattr(kernel, "with_constants", None)
    if prepare is None or not constants:
        return kernel
    prepared: Kernel = prepare(constants)
    return prepared
