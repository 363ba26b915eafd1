"""Copying a strided view into a contiguous array whose last axis is short.

``np.copyto`` walks the destination in its own memory order, so its innermost loop runs along
the destination's last axis. When that axis is short and the source reads it with a stride (a
pixel shuffle's ``(N, C, H, 2, W, 2)`` from ``(N, C, 2, 2, H, W)``, a channels-last copy of
three or four channels), each inner loop copies 2-4 elements and the copy costs ~1-5 ns an
element. Copied one index of that axis at a time, each copy's inner loop runs along the next
axis (``W``: unit stride in the source, a short stride in the destination). Measured (float32,
medians): ``DepthToSpace`` with block 2 on 4x16x96x96, 776 -> 140 us; (4, 3, 9216) to (4, 9216,
3) 97 -> 30 us; a last axis of 4 1.8x faster, of 8 1.17x, of 16 0.77x and of 64 0.49x (so only
up to ``SHORT_AXIS_MAX``); below ~3 Ki elements the extra calls cost more than they save
(``SPLIT_MIN_ELEMENTS``).
"""

from __future__ import annotations

import numpy as np

#: The longest last axis that is copied one index at a time (see the module doc).
SHORT_AXIS_MAX = 4
#: The fewest elements for which that pays (1 Ki elements: 1.1 -> 2.5 us; 2 Ki: 2.8 -> 1.9).
SPLIT_MIN_ELEMENTS = 1 << 12


def copy_into(out: np.ndarray, x: np.ndarray) -> None:
    """``np.copyto(out, x)`` for ``x`` of ``out``'s shape; a C-contiguous ``out`` whose last
    axis is short and which ``x`` reads with a stride is copied one index of that axis at a
    time (the same elements, so the same result)."""
    n = out.shape[-1] if out.ndim >= 2 else 0
    if (
        1 < n <= SHORT_AXIS_MAX
        and out.size >= SPLIT_MIN_ELEMENTS
        and x.shape == out.shape
        and x.strides[-1] != x.itemsize
        and out.flags.c_contiguous
        and not np.may_share_memory(out, x)
    ):
        for j in range(n):
            np.copyto(out[..., j], x[..., j])
        return
    np.copyto(out, x)
