"""The "tapsum" path of ``nn.conv2d``: a stride-1 convolution of one group as the sum over its
kernel's taps of one product each, with no im2col buffer.

At stride 1, lay the rows of the zero-padded input (width ``WR``) end to end: output ``(r, q)``
of tap ``(i, j)`` reads element ``r * WR + q`` shifted by the tap's offset ``i * DH * WR + j *
DW``, so a block of output rows ``[r0, r1)`` of that tap is the product of the tap's ``(O, C)``
weights by one ``(C, (r1 - r0) * WR)`` slice of the flat padded input: a strided BLAS operand
(row stride the padded plane), not a copy. The ``WR - OW`` junk columns of each row are
computed and dropped when the block is copied into the output. The im2col paths copy every
input element ``KH * KW`` times into a buffer (75 MB for a UNet decoder layer at 8x16x128x128)
and read it back; here each tap's product reads the padded input where it lies, a block's
partial sums (``TAPSUM_BLOCK`` elements, ``conv.py``) stay in the cache, and the price is
``KH * KW - 1`` additions of a block and products whose inner dimension is only ``C``, which
is why the path is for layers of enough channels on planes large enough (the rule and its
measurements: ``conv.py``, ``TAPSUM_*``).

The sum runs over the taps in one fixed order and the blocks depend on the shapes only, so a
call gives the same bits every time.
"""

from __future__ import annotations

import numpy as np

from .blas_threads import matmul as _matmul
from .workspace import Workspace


def tapsum_weights(weight: np.ndarray, taps: tuple[int, int, int, int], dt: object) -> np.ndarray:
    """The kept taps' weights (rows ``i0:i1``, columns ``j0:j1`` of the OIHW ``weight``) as a
    C-contiguous ``(taps, O, C)`` array in ``dt``, tap by tap in row-major order."""
    i0, i1, j0, j1 = taps
    o, c = weight.shape[:2]
    kept = weight[:, :, i0:i1, j0:j1].transpose(2, 3, 0, 1).reshape(-1, o, c)
    return np.ascontiguousarray(kept, dtype=dt)  # type: ignore[call-overload,no-any-return]


def tapsum_offsets(
    taps: tuple[int, int, int, int], width: int, dilation: tuple[int, int]
) -> list[int]:
    """Each kept tap's offset in the flat padded input (``width`` its rows' length), in the
    order of ``tapsum_weights``."""
    i0, i1, j0, j1 = taps
    dh, dw = dilation
    return [(i - i0) * dh * width + (j - j0) * dw for i in range(i0, i1) for j in range(j0, j1)]


def conv_tapsum(
    region: np.ndarray,
    weights: np.ndarray,
    offsets: list[int],
    acc: np.ndarray,
    blocks: tuple[int, int],
    ws: Workspace,
) -> None:
    """Sum the taps' products into the C-contiguous NCHW ``acc``: ``region`` is the contiguous
    zero-padded input the taps read, ``(N, C, OH + reach + 1, WR)`` (one zero row more than the
    taps reach, so that the last tap's flat slice stays inside), ``weights`` and ``offsets``
    the kept taps' (``tapsum_weights``, ``tapsum_offsets``), ``blocks`` the images and output
    rows a block takes. A block's partial sums and one tap's product are carved from ``ws``;
    the sums go straight into ``acc`` where the padded rows have no junk columns (``WR ==
    OW``). One thread: sharing the blocks with the worker thread measured slower (1x16x64x64
    -> 8: 0.29 ms alone, 0.46 ms shared; 1x16x128x128 -> 8: 0.97 against 1.41; only
    1x64x128x128 -> 16 gained, 6.1 -> 5.4 ms): its products and additions are too short for
    two threads that take turns on the GIL."""
    n, c, _, wr = region.shape
    o, oh, ow = acc.shape[1:]
    images, rows = blocks
    flat = region.reshape(n, c, -1)
    size = images * o * rows * wr
    part = None if wr == ow else ws.empty((size,), acc.dtype)
    term = ws.empty((size,), acc.dtype)
    for a in range(0, n, images):
        b = min(n, a + images)
        for r0 in range(0, oh, rows):
            r1 = min(oh, r0 + rows)
            span = (r1 - r0) * wr
            shape = (b - a, o, span)
            if part is None:
                block = acc[a:b, :, r0:r1].reshape(shape, copy=False)
            else:
                block = part[: (b - a) * o * span].reshape(shape)
            product = term[: (b - a) * o * span].reshape(shape)
            start = r0 * wr
            for t, offset in enumerate(offsets):
                view = flat[a:b, :, start + offset : start + offset + span]
                if t == 0:
                    _matmul(weights[0], view, block)
                else:
                    _matmul(weights[t], view, product)
                    np.add(block, product, out=block)
            if part is not None:
                np.copyto(acc[a:b, :, r0:r1], block.reshape(b - a, o, r1 - r0, wr)[..., :ow])
