"""Products with few rows, by column panels of the right operand: OpenBLAS's direct SGEMM.

A product ``a @ b`` whose ``a`` has a few rows (a token, a short sequence, a small batch: the
(16, 128) x (128, 512) of a BERT layer at batch 1, a decoder step at batch 4) is the one where
OpenBLAS does worst: its GEMM packs ``b`` into its own layout on every call, which costs as much
as the product and more. OpenBLAS's x86-64 builds for AVX-512 cores (``SkylakeX``,
``Cooperlake``, ``SapphireRapids``; numpy's wheel picks SkylakeX on an AVX-512 AMD Zen too)
carry a second float32 kernel, "direct" SGEMM, which reads both operands where they lie, with no
copy; OpenBLAS takes it by itself only for small products (``m * n * k`` below 2^20, measured
on 0.3.31, and not above 358,400 while OpenBLAS may use several threads) in row-major order
with neither operand transposed.

So a product of ``M`` rows (2 to ``PANEL_ROWS_MAX``) that OpenBLAS would pack is computed as
products of its column panels: ``b``'s columns in panels of ``W`` (64, or 32 where 64 would pass
the direct bound), each ``(M, K) x (K, W)`` below the bound, all in one batched ``np.matmul``
whose output is ``out`` viewed panel by panel; the ``N mod W`` columns left over are one more
product. A constant ``b`` (a layer's weight) is kept laid out as contiguous ``(N / W, K, W)``
panels and its last columns (``panels``); any other ``b`` with unit column stride is viewed so,
without a copy, and a ``b`` of another layout (``dense``'s transposed weight) is copied: the
direct kernel gives the same bits on all three (tested), so a constant and a computed operand
give the same bits, as the constant-operand protocol requires.

Measured (session 39, through ``blas_threads.matmul`` on one thread, float32, medians of 300
interleaved calls, plain -> kept panels, us): (4, 256) x (256, 1024) 88.8 -> 17.6, (16, 256) x
(256, 1024) 111.7 -> 52.2, (4, 768) x (768, 3072) 590 -> 222, (16, 768) x (768, 3072) 644 ->
482, (2, 1024) x (1024, 1024) 99 -> 46, (32, 768) x (768, 768) 249 -> 181 (W 32),
(16, 512) x (512, 128) 19.2 -> 12.4; a viewed ``b``: 0.24-1.02x. A weight streamed from memory
(cold): 0.15-0.45x. Where no width keeps the panels below the bound ((16, 3072) x (3072, 768)
would need 16 columns, which gained 0.74-0.86x only) and where the whole product is below it
(1.1-1.6x: OpenBLAS runs it directly itself) the product goes as it is; so do rows of 1 (a
matrix-vector product, which OpenBLAS does well already). A BERT-base-sized encoder (hidden
768, 4 layers) exported by PyTorch: 0.78x a call at 16 tokens, 0.73x at 4 x 8.

Only where it pays: float32, OpenBLAS's core one of the above (``direct_sgemm``: asked once,
through the library's ``openblas_get_corename``), and inside the thread policy's single-thread
span (``blas_threads.matmul``), where the direct kernel's bound is 2^20. On other cores (AVX2's
``Haswell``) panels measured 0.95-1.3x the plain product's time, so they are not used there.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import numpy as np

#: Products of at most this many rows (of ``a`` folded to a matrix) go by panels: from 48 rows
#: the panels measured 0.9-1.3x the plain product's time.
PANEL_ROWS_MAX = 32
#: The panel widths tried, widest first: the first whose panel product ``M * K * W`` stays
#: below ``DIRECT_MNK`` is taken (at the bound the direct kernel is not used and panels took
#: 0.9-1.2x the plain time; 16 columns gained 0.74-0.86x only and is not tried).
PANEL_WIDTHS = (64, 32)
#: OpenBLAS 0.3.31 runs an SGEMM directly below this ``m * n * k`` (measured: 786,432 did,
#: 1,048,576 did not, on every shape tried).
DIRECT_MNK = 1 << 20

_F32 = np.dtype(np.float32)

#: A right operand laid out for ``multiply``: its ``(N / W, K, W)`` panels, contiguous, and its
#: last ``N mod W`` columns, contiguous (None when there are none).
Laid = tuple[np.ndarray, "np.ndarray | None"]
#: Returns the kept layout of a constant ``b`` for a width ``W`` (``panels``).
KeptPanels = Callable[[int], Laid]


def width(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> int:
    """The panel width for ``np.matmul(a, b, out=out)``, or 0 where it goes as it is: float32
    operands, a 2-d ``b`` of at least two panels, ``a``'s rows (all its axes but the last)
    between 2 and ``PANEL_ROWS_MAX``. Whether the BLAS has the direct kernel is the caller's
    check (``blas_threads``)."""
    if b.ndim != 2 or a.shape[-1] != b.shape[0] or not b.shape[1]:
        return 0
    k, n = b.shape
    w = columns(out.size // n, k, n)  # integers first: this runs before every product past LOW
    if not w or a.dtype != _F32 or b.dtype != _F32 or out.dtype != _F32:
        return 0
    return w


def columns(m: int, k: int, n: int) -> int:
    """The panel width for a float32 product ``(m, k) x (k, n)`` of 2 to ``PANEL_ROWS_MAX``
    rows that OpenBLAS would pack (``m * k * n`` at least ``DIRECT_MNK``): the widest of
    ``PANEL_WIDTHS`` whose panel products stay below ``DIRECT_MNK``, with at least two panels;
    0 for any other product."""
    if not 2 <= m <= PANEL_ROWS_MAX or m * k * n < DIRECT_MNK:
        return 0
    for w in PANEL_WIDTHS:
        if m * k * w < DIRECT_MNK and n >= 2 * w:
            return w
    return 0


def panels(b: np.ndarray, w: int) -> Laid:
    """``b`` laid out for ``multiply`` by panels of ``w`` columns, in new contiguous arrays."""
    k, n = b.shape
    p = n // w
    laid = np.ascontiguousarray(b[:, : p * w].reshape(k, p, w).transpose(1, 0, 2))
    tail = np.ascontiguousarray(b[:, p * w :]) if p * w < n else None
    return laid, tail


class Panelled(NamedTuple):
    """A product laid out by ``prepare``: ``np.matmul(rows, laid, out=grid)`` computes its
    panels' columns (a batch of products, one a panel), ``np.matmul(rows, tail, out=rest)`` the
    columns left over (when ``tail`` is not None)."""

    rows: np.ndarray
    laid: np.ndarray
    grid: np.ndarray
    tail: np.ndarray | None
    rest: np.ndarray


def prepare(
    a: np.ndarray, b: np.ndarray, out: np.ndarray, w: int, kept: KeptPanels | None = None
) -> Panelled | None:
    """``np.matmul(a, b, out=out)`` laid out by panels of ``w`` columns (``width``), from
    ``kept(w)`` when given (``b``'s layout, kept by the caller), else from ``b`` itself: viewed
    where its columns are contiguous, else copied (the direct kernel gives the same bits on all
    three, so the bits depend on ``b``'s values only). None where ``a`` or ``out`` cannot be
    viewed as the matrices the panels need, or ``out`` overlaps an operand (the caller then
    multiplies as usual)."""
    k, n = b.shape
    m = out.size // n
    if not out.flags.c_contiguous or np.may_share_memory(out, a) or np.may_share_memory(out, b):
        return None
    if a.ndim == 2:
        if a.strides[1] != a.itemsize:
            return None
        rows = a
    elif a.flags.c_contiguous and a.size == m * k:
        rows = a.reshape(m, k)
    else:
        return None
    p = n // w
    full = p * w
    grid = out.reshape(m, n)
    tail: np.ndarray | None
    if kept is not None:
        laid, tail = kept(w)
    elif b.strides[1] == b.itemsize:
        laid = b[:, :full].reshape(k, p, w).transpose(1, 0, 2)  # a view
        tail = b[:, full:] if full < n else None
    else:
        laid, tail = panels(b, w)
    panel_out = grid[:, :full].reshape(m, p, w).transpose(1, 0, 2)
    return Panelled(rows, laid, panel_out, tail, grid[:, full:])


def multiply(
    a: np.ndarray, b: np.ndarray, out: np.ndarray, w: int, kept: KeptPanels | None = None
) -> bool:
    """``np.matmul(a, b, out=out)`` by panels of ``w`` columns (``prepare``), on the calling
    thread; False, with nothing written, where ``prepare`` declines."""
    done = prepare(a, b, out, w, kept)
    if done is None:
        return False
    run(done)
    return True


def run(done: Panelled) -> None:
    """The products of a ``prepare``d product, on the calling thread."""
    np.matmul(done.rows, done.laid, out=done.grid)
    if done.tail is not None:
        np.matmul(done.rows, done.tail, out=done.rest)
