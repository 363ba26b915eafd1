"""Finding output elements a kernel did not write: poison, run, look for the poison.

A kernel gets pre-allocated outputs and must write every element of them. One it skips holds
whatever the buffer held before - stale data of another tensor, or fresh pool memory - and the
program returns it as if computed. To catch that, fill each output with a byte pattern before
the kernel runs and look for the pattern afterwards.

One run cannot tell "not written" from "written with a value whose bytes happen to be the
poison" (an int8 output may well hold ``0xA5`` = -91; a float kernel may propagate an all-ones
NaN). So a suspicious run is repeated with a second, different byte: an element is unwritten
only if it holds the first poison after the first run and the second poison after the second.
That is exact for a deterministic kernel that does not read its outputs (the calling
convention, design/vm.md); the repeat happens only when the first poison is seen, so correct
kernels pay one fill and one comparison per output.

Used by the memory sanitizer (``check_memory=True``, ``sanitizer.py``) and by
``dynshape.testing.check_op``. numpy only, like the rest of the VM.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

#: The first poison byte (the sanitizer's non-float poison: a large odd integer in every width).
FIRST_POISON = 0xA5
#: The second poison byte, used only to confirm elements that held the first one.
SECOND_POISON = 0x5A


def checkable(out: Any) -> bool:
    """True if ``out`` is an array whose bytes can be poisoned in place and inspected (a
    non-empty C-contiguous ndarray)."""
    return type(out) is np.ndarray and out.size > 0 and out.flags.c_contiguous


def poison(out: np.ndarray, byte: int) -> None:
    """Fill every byte of ``out`` (a ``checkable`` array) with ``byte``."""
    out.reshape(-1).view(np.uint8).fill(byte)


def holding(out: np.ndarray, byte: int) -> np.ndarray:
    """A flat bool mask: the elements of ``out`` all of whose bytes are ``byte``."""
    raw = out.reshape(-1).view(np.uint8).reshape(out.size, out.itemsize)
    mask: np.ndarray = np.all(raw == byte, axis=1)
    return mask


def shares_any(out: np.ndarray, inputs: Sequence[Any]) -> bool:
    """True if ``out`` overlaps any input (an array, or a tuple of arrays): an in-place call,
    whose output must not be poisoned - that would destroy the input."""
    for x in inputs:
        parts = x if type(x) is tuple else (x,)
        for p in parts:
            if isinstance(p, np.ndarray) and np.shares_memory(out, p):
                return True
    return False


def unwritten_elements(
    run: Callable[[], object], outputs: Sequence[np.ndarray]
) -> list[tuple[int, np.ndarray]]:
    """Run ``run()`` (a call of the kernel writing ``outputs``) with the outputs poisoned and
    return ``(output index, flat indices)`` for each output with elements it did not write.

    Every output must be ``checkable`` and overlap no input. ``run`` is called once, or twice
    when the first poison remains somewhere (see the module doc); after it returns, the
    outputs hold what the last run wrote.
    """
    for out in outputs:
        poison(out, FIRST_POISON)
    run()
    suspects = [(k, holding(out, FIRST_POISON)) for k, out in enumerate(outputs)]
    suspects = [(k, mask) for k, mask in suspects if mask.any()]
    if not suspects:
        return []
    for out in outputs:
        poison(out, SECOND_POISON)
    run()
    found = []
    for k, mask in suspects:
        both = mask & holding(outputs[k], SECOND_POISON)
        if both.any():
            found.append((k, np.flatnonzero(both)))
    return found


def describe_unwritten(out: np.ndarray, flat: np.ndarray) -> str:
    """``3 of 5 elements (first at index (4,))``: how much of ``out`` was not written."""
    first = tuple(int(i) for i in np.unravel_index(int(flat[0]), out.shape))
    return f"{len(flat)} of {out.size} element(s) (the first at index {first})"
