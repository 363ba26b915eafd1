"""Convolution (plain and transposed) and pooling on BLAS and whole-tensor ufuncs (issue 27).

Layouts as in ``nn``: NCHW data, OIHW weights (a transposed convolution's is (C_in,
C_out / groups, KH, KW)); padding ``[top, left, bottom, right]`` (or ``[h, w]``).

How each op runs (the measurements behind each choice: design/vm.md, "Convolution on BLAS
(issue 27)"):

- ``nn.conv2d``: an im2col buffer (N, C, KH, KW, OH, OW), then one ``np.matmul`` of the
  (G, O/G, C/G*KH*KW) weight by the (N, G, C/G*KH*KW, OH*OW) buffer, written straight into
  ``out`` viewed as (N, G, O/G, OH*OW): the groups are the batch axis of that one call.
  Everything that depends only on the shapes and attributes (the checks, the taps that reach
  the input, the path, the block size) is computed once per shape (``_plan``, at most
  ``PLANS_MAX`` per kernel). The buffer is filled (``FILL``):

  * stride 1, padded: "flat": a zero-padded copy of the rectangle the taps read, whose rows
    laid end to end make each tap's (OH, WR) plane one shifted run of OH * WR elements (WR the
    padded width): the buffer is one copy of that view with long inner loops, the matmul
    gives WR - OW junk columns a row, dropped in one copy into ``out``; a few whole images at
    a time, so that the buffer is still in the cache when the product reads it;
  * otherwise one copy of the window view (``nn.windows``) of the input, or of the padded
    copy of the rectangle read when padded (bounded by ``PAD_FACTOR``), in blocks of output
    rows; where the weight has many rows for a block's columns (``FOLD_ROWS_RATIO``) a
    block's images are the columns of one product instead of one product an image;
  * ``"taps"`` (forced only): the one strided-slice copy per tap, clipped, after a zero fill.

  Taps that read padding only (small maps under wide padding) are dropped when their weights
  cost less than their buffer; a 1x1 map's lone centre tap is then a plain matmul.
  One group on small output planes (``LAST_IM2COL_*``: up to a 7x7 plane, 14x14 at stride 1,
  any plane at stride 1 from batch 2 with 128 channels or 2 MiB flat buffers an image, weights
  not too many for the product's columns): the "last_im2col" path copies the input
  channels-last and its windows into an (N, OH, OW, KH, KW, C) buffer, whose runs are a kernel
  row's taps times the channels (NCHW's run a few elements each), and multiplies all images
  at once by the weights laid out alike. One image on tiny planes (``GATHER_MAX_OUTPUTS``):
  the "gather" path fills the NCHW buffer with one ``np.take`` of the zero-padded region by
  an index table kept in the plan. A one-row output read by one kernel row (``Conv1d`` as
  imported: (N, C, 1, W) by (O, C, 1, KW)) takes the "row" path (``ROW_PATH``): the padded
  row's (C, KW, OW) windows in one copy, one product an image into ``out``, the planning and
  copies of the 2-d paths without their per-call cost.
  Stride 1, one group, a large plane and no more output channels than input channels
  (``TAPSUM_*``): the "tapsum" path (``conv_tapsum.py``) makes no buffer at all, summing one
  product a tap over shifted slices of the flat padded input, in blocks that stay in the cache.
  Depthwise convolutions (one input channel per group) take the im2col path: against KH*KW
  shifted multiply-adds over the whole tensor (clipped or over a padded copy, NCHW or
  channels-last) it was the fastest on 3 of 6 shapes and within 1.5x of the fastest on the
  others, where each other spelling lost 2.2-3.4x somewhere. Except on tiny maps (2 to
  ``DEPTHWISE_LAST_MAX`` outputs a plane): there im2col's copies run in pieces of a few
  elements, one piece per (image, channel, tap), and the "last" path (``_depthwise_last``)
  lays the padded input out channels-last, so that every tap's window is a strided view
  whose inner run is all images' channels: one multiply of that view by the weights, one
  sum over the taps. Where that run is long (``DEPTHWISE_ROWS_MIN_RUN`` images times
  channels, or ``DEPTHWISE_ROWS_MIN_RUN_STRIDED`` strided, ``DEPTHWISE_ROWS_MIN`` to
  ``DEPTHWISE_ROWS_MAX`` outputs a plane, at stride 1 ``DEPTHWISE_ROWS_STRIDE1_*``) the "rows" path
  (``_depthwise_rows``) takes the same channels-last region and contracts it one kernel row
  at a time with ``np.einsum`` (no product of every tap stored, no im2col buffer). On small
  planes (``DEPTHWISE_DENSE_*``: input plane times output plane at most 4,096; for a kept
  weight also input planes of a few times the taps, ``DEPTHWISE_DENSE_FEW``) the "dense" path
  goes first: each channel's convolution as a matrix from its input plane to its output plane
  (the weights at the inputs each output's taps read, kept per constant weight and input size),
  one batched product for all channels (``_conv_dense``). A 7x7 or larger depthwise kernel on a
  larger plane takes the "tiled" path (``TILED_*``): the output cut into 8x8 (or 6x6, 4x4)
  tiles, every tile the same matrix product of the input rectangle it reads (``_conv_tiled``).
  The buffer is bounded by ``SCRATCH_FACTOR`` times the input and output (filled and
  multiplied in blocks of output rows past it; if even one row would pass it, the einsum
  contraction of the padded input's window view runs instead, as before issue 27). Every
  path's buffers are carved from the call's *workspace* (its last argument, planned by the
  compiler from the op's rule, ``shape_funcs/ops/nn.py`` ``conv2d_workspace``;
  ``workspace.py``) when it has room, else allocated as before.
- 1x1, stride 1, no padding: the matmul alone over ``data`` viewed as (N, G, C/G, H*W).
- ``nn.conv2d_transpose``: one batched matmul gives every input pixel's contribution to every
  tap, then one strided-slice add per tap scatters it into ``out`` (col2im; a copy where the
  taps land on distinct outputs, as a 2x2 kernel at stride 2 does, with no zero fill where
  they cover the output); past
  ``SCRATCH_FACTOR`` the taps are multiplied one at a time over the input rows and columns that
  reach the output.
- ``nn.max_pool2d`` / ``nn.avg_pool2d``: per tap, one ufunc (``maximum`` / ``add``) of the
  tap's strided view of the input into ``out`` clipped to where it lands (padding is never read:
  max ignores it, the average divides by the count of real taps, an outer product of the two
  axes' counts); from 2x2 up, separably (the rows' taps, then the columns'; a small padded
  input is first copied padded with the op's identity, so no tap is clipped). Few outputs per
  call and many taps (``TAPS_MIN_OUTPUT``, ``TAPS_FEW_CALLS``): one reduction of the strided
  window view of ``nn.windows``. The temporaries (the padded copy, the rows' or columns'
  pass, average pooling's float32 accumulator) are carved from the call's workspace, planned
  from the ops' rule (``shape_funcs/ops/nn.py`` ``pool2d_workspace``).

Weights: what a path derives from the weight (its kept taps, channels-last, float32 for float16)
is made once per VM when the weight is a constant (``constant_layouts.py``), else per call.

float16: sums accumulate in float32 and are rounded once into ``out`` (the operands are
converted in the im2col copy itself, or by the ufunc's type promotion); max pooling needs no
such path.
"""

from __future__ import annotations

import functools
import sys
import types
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np

from . import blas_threads, row_panels
from .blas_threads import matmul as _matmul
from .constant_layouts import ConstantLayouts
from .conv_tapsum import conv_tapsum, tapsum_offsets, tapsum_weights
from .nn import (
    F16,
    PAD_SLACK,
    _check_hw,
    _pad_hw,
    _padded_shape,
    _transpose_span,
    padding4,
    windows,
)
from .registry import Kernel, register_kernel
from .workspace import Workspace

#: A convolution's im2col buffer (and a transposed convolution's table of contributions) may
#: hold at most ``SCRATCH_FACTOR`` times the elements of the input and the output together,
#: plus ``PAD_SLACK``: a 3x3 convolution at stride 1 needs 9 * C / (C + O) times them, a 7x7
#: stem at stride 2 about 2 times. Past the bound the work is split into blocks that fit it, so
#: that no attribute can make a kernel allocate more than its tensors' size allows.
SCRATCH_FACTOR = 32


#: A kernel tap's reach along one axis: ``(tap, lo, hi, input slice)`` (see ``_spans``).
_Span = tuple[int, int, int, slice]


def _scratch_limit(*arrays: np.ndarray) -> int:
    """The elements a kernel's scratch may hold for these operands (see ``SCRATCH_FACTOR``)."""
    return SCRATCH_FACTOR * sum(int(a.size) for a in arrays) + PAD_SLACK


def _span(
    size_in: int, size_out: int, tap: int, stride: int, dilation: int, begin: int
) -> tuple[int, int, int]:
    """For kernel tap ``tap`` of an axis: the outputs ``[lo, hi)`` whose input position
    ``o * stride + tap * dilation - begin`` lies in ``[0, size_in)``, and the first of those
    input positions (``lo >= hi`` when there is none)."""
    shift = tap * dilation - begin
    lo = max(0, -(shift // stride))  # the least o with o * stride + shift >= 0
    hi = min(size_out, (size_in - 1 - shift) // stride + 1)
    return lo, hi, lo * stride + shift


#: Axes with at most this many taps and outputs have their spans and tap counts cached (see
#: ``_axis``); beyond, they are computed per call, so the cache's memory stays bounded.
CACHED_TAPS_MAX = 64
CACHED_OUTPUTS_MAX = 1 << 12


def _axis(
    size_in: int, size_out: int, k: int, stride: int, dilation: int, begin: int
) -> tuple[Sequence[_Span], np.ndarray]:
    """The non-empty ``_span`` of each tap of an axis, ``(tap, lo, hi, input slice)``, and how
    many taps reach each output (read-only). Cached per shape and attributes (LRU, 512 axes of
    at most ``CACHED_TAPS_MAX`` taps and ``CACHED_OUTPUTS_MAX`` outputs): the Python loop over
    the taps costs ~1 us a tap, as much as a small pool itself."""
    if k <= CACHED_TAPS_MAX and size_out <= CACHED_OUTPUTS_MAX:
        return _cached_axis(size_in, size_out, k, stride, dilation, begin)
    return _compute_axis(size_in, size_out, k, stride, dilation, begin)


def _compute_axis(
    size_in: int, size_out: int, k: int, stride: int, dilation: int, begin: int
) -> tuple[Sequence[_Span], np.ndarray]:
    found = []
    counts = np.zeros(size_out, np.int64)
    for t in range(k):
        lo, hi, first = _span(size_in, size_out, t, stride, dilation, begin)
        if lo < hi:
            found.append((t, lo, hi, slice(first, first + (hi - lo - 1) * stride + 1, stride)))
            counts[lo:hi] += 1
    counts.flags.writeable = False
    return tuple(found), counts


_cached_axis = functools.lru_cache(maxsize=512)(_compute_axis)


def _spans(
    size_in: int, size_out: int, k: int, stride: int, dilation: int, begin: int
) -> Sequence[_Span]:
    """``_span`` for each tap of an axis: ``(tap, lo, hi, input slice)``, the empty ones
    left out (see ``_axis``)."""
    return _axis(size_in, size_out, k, stride, dilation, begin)[0]


def _rows_view(a: np.ndarray, r0: int, r1: int, shape: tuple[int, ...]) -> np.ndarray:
    """Rows ``[r0, r1)`` of the C-contiguous NCHW ``a`` as a view of ``shape`` (the last axis
    merges the rows with the full-width columns, which is a view because ``a`` is contiguous)."""
    return a[:, :, r0:r1].reshape(shape, copy=False)


def _accumulator(out: np.ndarray, wide: bool, ws: Workspace | None = None) -> np.ndarray:
    """Where a kernel sums: ``out`` itself, or a contiguous float32 (float16 output) or
    contiguous (strided output) array of its shape, copied into ``out`` at the end (carved
    from ``ws`` when one is given)."""
    if not wide and out.flags.c_contiguous:
        return out
    return (ws or Workspace()).empty(out.shape, np.float32 if wide else out.dtype)


def _fill_block(
    block: np.ndarray,
    data: np.ndarray,
    r0: int,
    r1: int,
    row_spans: Sequence[_Span],
    col_spans: Sequence[_Span],
    stride: int,
) -> None:
    """Output rows ``[r0, r1)`` of the im2col buffer, from a padded input: each tap's slice
    of ``data`` clipped to it, zeros where the tap reads padding."""
    kh, kw, _, ow = block.shape[2:]
    # One zero fill when some tap reads padding in this block, then one copy per tap
    # (zeroing each tap's borders instead, up to 4 calls a tap, measured 0.8-1.1x this).
    if (
        not all(lo <= r0 and hi >= r1 for _, lo, hi, _ in row_spans)
        or len(row_spans) < kh
        or len(col_spans) < kw
        or any(clo > 0 or chi < ow for _, clo, chi, _ in col_spans)
    ):
        block.fill(0)
    for i, lo, hi, rsl in row_spans:
        a, b = max(lo, r0), min(hi, r1)
        if a >= b:
            continue
        first = rsl.start + (a - lo) * stride
        src_rows = slice(first, first + (b - a - 1) * stride + 1, stride)
        for j, clo, chi, csl in col_spans:
            np.copyto(block[:, :, i, j, a - r0 : b - r0, clo:chi], data[:, :, src_rows, csl])


#: The im2col buffer of the "window" and "taps" paths (strided convolutions: the stems) is
#: filled and multiplied in blocks of output rows of at most this many elements (at least one
#: row; 256 KiB of float32), so that a block is still in the cache when its product reads it,
#: where the scratch bound alone made one block of up to tens of MB (a 7x7 stem at 8x3x128x128:
#: 19 MB). One kernel, before/after, warm / after a 32 MB sweep: that stem 0.51x / 0.68x,
#: 1x3x64x64 0.70x / 0.78x, 8x16x32x32 3x3 stride 2 0.93x / 0.90x, 1x3x224x224 3x3 stride 2
#: 1.11x / 1.05x; 1 << 17 was 0.50-1.06x. ResNet-18 a call, in one process, the bound toggled
#: between 15 rounds: small 0.97x, mid 0.91x, large 0.90x; MobileNetV3 0.95-1.01x.
#: The stride-1 "flat" buffer is filled and multiplied a few whole images at a time (as many as
#: fit this bound, at least one; ``_Plan.images``): each image's product is one GEMM either way
#: (numpy's matmul loops over the images of a broadcast weight), and its buffer is still in the
#: cache when the product reads it. One kernel, one thread, against the whole batch's buffer at
#: once (session 30, a Xeon with 2 MB of L2 a core): 8x16x32x32 0.61x, 8x32x16x16 0.72-0.88x,
#: 4x8x64x64 0.66x, 4x16x24x24 0.94x, one image or small buffers 0.99-1.02x. Cut into blocks
#: of rows within an image, its products lost more than the cache gave (warm 1.28-1.40x on
#: the EPYC; here 0.93-1.36x, and 1.28x at 1x64x56x56), so an image is never cut.
BLOCK_ELEMENTS = 1 << 16

#: A grouped convolution's "window" and "taps" buffers (depthwise ones at stride 2 on larger
#: maps) are filled and multiplied whole images at a time, as many as fit this bound: its
#: products are one an image and group a block, a (1, 9) x (9, rows * OW) one for a
#: 3x3 depthwise kernel, so blocks of a few rows across the batch (``BLOCK_ELEMENTS``) made
#: thousands of tiny products (4x64x48x48 at stride 2: 24 blocks of 4 x 64) where whole images
#: make 256; past the bound an image is cut into blocks of rows. One kernel, one thread,
#: against the blocks of rows across the batch (session 30), 3x3 stride 2: 4x64x48x48 0.74x,
#: 8x64x64x64 0.68x, 4x16x96x96 0.94x, 1x16x64x64 0.92x, 1x64x48x48 1.01x (1 << 18: 0.75-1.03x,
#: 1 << 19: 0.77-1.10x; the whole batch in one block lost on the cache).
GROUPED_BLOCK_ELEMENTS = 1 << 17

#: How the im2col buffer of a padded convolution is filled (see ``_plan``): ``"auto"`` (a
#: zero-padded copy of the region the taps read, then one copy of its window view, or for
#: stride 1 of its "flat" rows view), or one of ``"flat"``, ``"window"``, ``"taps"`` (one
#: strided-slice copy per tap, clipped, after one zero fill) to force a path (tests).
FILL = "auto"

#: Below this many outputs per (N, C) plane (a 4x4 map), ``"auto"`` fills a padded stride-1
#: convolution's buffer tap by tap: the flat view's junk columns turn a 1x1 map's gemv into a
#: GEMM that packs the whole weight (1,083 against 203 us, 512 channels), and the window copy
#: of a padded copy cost 1.05-1.35x the tap copies on 1x1 and 2x2 maps.
TINY_OUTPUTS = 16

#: Up to this many outputs per (N, C) plane (a 5x5 map) a depthwise convolution takes the
#: channels-last path (``_depthwise_last``): 0.33-1.02x im2col's time over batches 1-8,
#: 16-288 channels, 3x3 and 5x5 kernels, strides 1-2 (36 to 49 outputs: 0.5-1.26x, no rule).
DEPTHWISE_LAST_MAX = 25

#: A depthwise convolution whose channels-last inner run (images times channels) is at least
#: ``DEPTHWISE_ROWS_MIN_RUN`` elements, on planes of ``DEPTHWISE_ROWS_MIN`` (a 3x3 map) to
#: ``DEPTHWISE_ROWS_MAX`` outputs (28x28), takes the "rows" path (``_depthwise_rows``): the
#: channels-last region of the "last" path, contracted one kernel row at a time by
#: ``np.einsum`` over that row's taps (no product of every tap is stored). Over 84 shapes
#: (batch 1-8, 16-288 channels, 3x3 to 12x12 and 16-28 maps, 3x3 and 5x5, strides 1-2)
#: against the paths before it: 0.23-1.03x from a run of 288 and 9 outputs (geometric mean
#: 0.55x), 1.1-2.7x below a run of 64; at 1,024 outputs (8x96x32x32) 1.7x; on 2x2 maps 5x5
#: kernels (most taps in the padding) 1.3-1.5x.
DEPTHWISE_ROWS_MIN_RUN = 288
#: Strided, where im2col copies a strided window view (more than ``DEPTHWISE_LAST_MAX`` and at
#: most ``DEPTHWISE_ROWS_STRIDED_MAX`` outputs a plane), a run of ``DEPTHWISE_ROWS_MIN_RUN_STRIDED``
#: suffices: over 13 strided shapes with runs of 64 to 192 and 36-196 outputs the rows path took
#: 0.46-0.97x im2col's time (MobileNetV3's 5x5 stride-2 on 4x48x12x12: 189 against 414 us); at
#: a run of 16 it lost (1.1-2.0x), at 576-784 outputs 1.06-1.22x.
DEPTHWISE_ROWS_MIN_RUN_STRIDED = 64
DEPTHWISE_ROWS_STRIDED_MAX = 196
DEPTHWISE_ROWS_MIN = 9
DEPTHWISE_ROWS_MAX = 784
#: At stride 1, the rows path only up to ``DEPTHWISE_ROWS_STRIDE1_MAX`` outputs a plane (a 10x10
#: map) for kernels of up to 9 taps, ``DEPTHWISE_ROWS_STRIDE1_WIDE_MAX`` (14x14) for larger
#: ones: past them the stride-1 paths (the "flat" buffer, or the tiles of a 5x5 kernel) are
#: faster on this project's host (session 40, an AMD EPYC: one kernel, one thread, a constant
#: weight, 3x3 and 5x5 kernels on 6x6 to 32x32 maps, 1-8 images of 48-576 channels with runs
#: of at least 288, against the rows path: 3x3 on 12x12 geometric mean 0.82x, 14x14 0.71x,
#: 16x16 to 28x28 0.53-0.59x (4x96x24x24: 661 -> 367 us); 5x5 on 16x16 0.75x, 20x20 to 28x28
#: 0.68-0.94x, on 14x14 1.03x and on 10x10 1.12x; 3x3 on 10x10 0.99x and below 1.2-1.5x).
#: Strided, the rows path stays: the window buffer took 0.88-2.4x its time.
DEPTHWISE_ROWS_STRIDE1_MAX = 100
DEPTHWISE_ROWS_STRIDE1_WIDE_MAX = 196

#: On a small plane a depthwise convolution is, channel by channel, a linear map from the input
#: plane to the output plane, and the "dense" path (``_conv_dense``) multiplies by that map's
#: matrix: the weights at the inputs each output's taps read, zeros elsewhere (taps in the
#: padding drop out), laid out once per weight and input size like any constant's layout; the
#: call is one product batched over the channels, with no copy of the input at batch 1. It takes
#: convolutions of one input channel a group whose input plane times output plane is at most
#: ``DEPTHWISE_DENSE_MAX`` (an 8x8 map at stride 1) and whose matrices hold at most
#: ``DEPTHWISE_DENSE_ELEMENTS`` (1 MiB of float32). Over 216 shapes (batch 1 and 4, 64-576
#: channels, 2x2 to 14x14 maps, 3x3 and 5x5 kernels, strides 1-2, one thread, medians), the 136
#: inside the bounds took 0.12-1.06x the time of the paths before it (geometric mean 0.37x);
#: outside, the matrices' zeros cost up to 21x (a 14x14 map at stride 1: 196 x 196 a channel).
DEPTHWISE_DENSE_MAX = 4096
DEPTHWISE_DENSE_ELEMENTS = 1 << 18
#: A kept weight's matrices are laid out once and read once a call for every image, so on two
#: images or more their bound is ``DEPTHWISE_DENSE_KEPT_IMAGE`` an image, up to
#: ``DEPTHWISE_DENSE_KEPT_MAX`` (16 MiB of float32); one image keeps the bound above (its
#: matrices are read cold, from memory, for that one image). One thread, 5x5 kernels, against
#: the "rows" path (session 31): 8x240x8x8 943 -> 304 us, 8x144x8x8 423 -> 164, 8x120x8x8 331 ->
#: 124, 8x288x8x8 at stride 2 457 -> 130, 8x672x7x7 2,102 -> 613, 4x960x7x7 1,406 -> 627; at
#: batch 1, 1x960x7x7 (2.3 Mi elements of matrices) 226 -> 366 us and 1x576x7x7 137 -> 218. In
#: process, against 256 Ki an image up to 2 Mi: LR-ASPP (real, 960-channel 5x5 dilated layers)
#: mid 0.93-0.95x, large 0.84-0.86x, batch 1 unchanged; peak RSS over its three sizes 512 ->
#: 548 MB (the matrices kept).
DEPTHWISE_DENSE_KEPT_IMAGE = 1 << 20
DEPTHWISE_DENSE_KEPT_MAX = 1 << 22
#: Past ``DEPTHWISE_DENSE_MAX``, a kept weight's matrices are still taken where they cost few
#: multiply-adds more than the taps (an input plane of at most ``DEPTHWISE_DENSE_FEW`` times the
#: taps: a 7x7 kernel on a 12x12 plane, 2.9x) on two images or more, within the kept bounds
#: above; and, at any batch, where the buffers' plan is the stride-1 "window" im2col (the
#: fallback a 7x7 kernel on 10x10 to 14x14 planes took) and the plane is at most
#: ``DEPTHWISE_DENSE_WINDOW_FEW`` times the taps, within ``DEPTHWISE_DENSE_KEPT_MAX``. One kernel,
#: one thread, a constant weight (session 40; 3x3, 5x5 and 7x7 kernels, 4x4 to 28x28 planes,
#: 32-576 channels, strides 1 and 2), against the paths planned before: two images or more
#: within 3x, 28 shapes at 0.17-0.99x (4x64x12x12 7x7: 727 -> 86 us); the window path within
#: 4x, 20 shapes at 0.17-0.62x (one image of 96 channels, 7x7 on 12x12: 184 -> 64 us); past
#: those the matrices lost to the rows, flat and tiled paths (up to 2.5x at 7.8x the taps, one
#: image) and to the strided window path at one image (1.12-1.23x). ``DEPTHWISE_DENSE_FEW = 0``
#: switches both off.
DEPTHWISE_DENSE_FEW = 3
DEPTHWISE_DENSE_WINDOW_FEW = 4

#: A depthwise convolution of at least ``TILED_MIN_TAPS`` taps (7x7) and ``TILED_MIN_OUTPUTS``
#: outputs a plane (15x15), too large for the "dense" path, takes the "tiled" path
#: (``_conv_tiled``): its output plane cut into T x T tiles, each tile one (patch, T * T) matrix
#: product of the input rectangle it reads (the same matrices for every tile, over a
#: zero-padded copy of the input: a convolution does not depend on where the tile sits), T the
#: first of ``TILE_SIZES`` whose matrices hold at most ``TILED_ELEMENTS`` (4 MiB of float32, kept
#: once per weight: they do not depend on the input size). 7x7 kernels, one thread, against the
#: paths before it: 4x48x56x56 15.9 -> 5.1 ms, 1x32x112x112 10.9 -> 1.9 ms, 1x96x28x28 1.8 ->
#: 0.55 ms, 2x64x30x30 at stride 2 0.61x (0.18-0.61x); on 14x14 planes 0.98-1.10x and on 9x9
#: 1.30x (hence the bound on outputs). Smaller kernels: ``TILED_BUFFER_*`` below.
TILED_MIN_TAPS = 49
TILED_MIN_OUTPUTS = 225
#: A depthwise kernel of at least ``TILED_BUFFER_MIN_TAPS`` taps (5x5) takes the "tiled" path
#: too where the buffers' plan is the stride-1 "flat" im2col buffer of at least
#: ``TILED_BUFFER_MIN`` elements (10 MiB of float32, past the caches). 5x5, one thread, 36
#: shapes (batch 1/4/8, 40/120/240 channels, 16x16 to 56x56, strides 1-2): the 11 it takes ran
#: 0.27-0.85x the "flat" path (4x40x56x56: 8.0 -> 2.1 ms; 1x240x28x28 2.9 -> 1.2 ms); below the
#: bound (1x120x28x28, 2.35 Mi elements: 1.13x), against the "rows" path (1.13-1.63x on 7
#: shapes) and, at stride 2, against the "window" path (0.51-1.25x) it lost or had no rule.
TILED_BUFFER_MIN_TAPS = 25
TILED_BUFFER_MIN = 5 << 19
TILE_SIZES = (8, 6, 4)
TILED_ELEMENTS = 1 << 20

#: A convolution of one group whose output planes are small (at most
#: ``LAST_IM2COL_MAX_OUTPUTS`` a plane, or ``LAST_IM2COL_STRIDE1_MAX`` at stride 1) takes the
#: channels-last im2col path (``_conv_last_im2col``), where its weights are at most
#: ``LAST_IM2COL_WEIGHT_RATIO`` times the columns of its product (O <= ratio * N * OH * OW: the
#: weights are laid out channels-last on every call, which a product with few columns does not
#: repay). There the NCHW buffer's copies run a few elements at a time (one run per image,
#: channel, tap and output row); channels-last each run is a kernel row's taps times all
#: channels, and all images are the columns of one product instead of a small product each.
#: Measured over 213 shapes (batch 1-8, 16-256 channels, 3x3 to 28x28 maps, 3x3 kernels,
#: strides 1-2, one thread): 0.56-1.0x the NCHW paths' time inside those bounds (ResNet
#: blocks at batch 4 on 3x3 to 6x6 maps 0.65-0.76x); outside them it lost up to 2.3x (batch 1,
#: 256 channels on a 3x3 map: the weights' layout costs more than the product) and from 576
#: outputs a plane up to 1.5x. A weight the kernel keeps (a constant, ``ConstantLayouts``) is
#: laid out once, so the ratio does not apply to it (session 30): there the product of all
#: images at once reads the weight once where the NCHW paths' product an image (and block)
#: read it again each time: full-width ResNet-18's 4x512x3x3 by 9 MB of weights 6,349 ->
#: 1,464 us, 4x256x6x6 at stride 2 2,551 -> 840 us.
LAST_IM2COL_MAX_OUTPUTS = 49
LAST_IM2COL_STRIDE1_MAX = 196
LAST_IM2COL_WEIGHT_RATIO = 4
#: At stride 1 on two images or more, larger planes take the channels-last path too where the
#: "flat" path's product an image is a poor GEMM: from ``LAST_IM2COL_WIDE_CHANNELS`` input
#: channels, or where an image's flat buffer holds at least ``LAST_IM2COL_FLAT_IMAGE`` elements
#: (2 MiB of float32: past a core's L2, which the product then reads from further away).
#: 3x3, C -> C, one thread (session 31, a Xeon with 2 MB of L2 a core), channels-last over
#: flat: 128 and 256 channels on 8x8 to 32x32 maps at batch 2-8 0.62-0.95x (8x128x16x16 5,044
#: -> 3,744 us, 4x256x14x14 6,639 -> 4,811), one exception 1.07x (2x256x32x32); 64 channels
#: on 32x32 at batch 2-8 0.72-0.86x; smaller buffers of 32-64 channels 0.72-1.4x (no rule),
#: batch 1 0.9-1.17x.
LAST_IM2COL_WIDE_CHANNELS = 128
LAST_IM2COL_FLAT_IMAGE = 1 << 19

#: A convolution of one group on one image with at most ``GATHER_MAX_OUTPUTS`` outputs (an 8x8
#: plane) takes the "gather" path (``_conv_gather``): its im2col buffer is one ``np.take`` of
#: the zero-padded region by an index table kept in the plan, where the tap copies are one
#: call per tap of a few elements each and the channels-last path lays out the weights on
#: every call. Over 36 shapes at batch 1 (16-512 channels, 2x2 to 16x16 maps, 3x3 kernels,
#: strides 1-2, one thread) against the paths before it: 0.34-0.98x up to 64 outputs, 0.72-1.03x
#: at 144-256. With more images the channels-last path's one product for all of them won
#: (4x128x3x3: 1.18x for the gather, whose products are one an image; 16 channels lost
#: nothing), so the path is for one image.
GATHER_MAX_OUTPUTS = 64

#: A convolution of one group at stride 1 takes the "tapsum" path (``conv_tapsum.py``: one
#: product a tap over the flat padded input, summed, no im2col buffer) where the im2col
#: buffer's traffic outweighs its one long product: from ``TAPSUM_MIN_CHANNELS`` input
#: channels, with at most half as many output channels on planes of at least
#: ``TAPSUM_REDUCING_OUTPUTS`` outputs, or with at most as many and at most
#: ``TAPSUM_NARROW`` on planes of at least ``TAPSUM_NARROW_OUTPUTS``. Its partial sums are
#: computed in blocks of whole images, or of output rows, whose input, partial sums and one
#: tap's product hold at most ``TAPSUM_BLOCK`` elements (512 KiB of float32; 1 << 16 lost up to
#: 1.15x on 64-256 channels, 1 << 18 up to 1.7x on 8x16x128x128 -> 8).
#: One thread, against the paths before it (session 36, 249 shapes: 3x3 kernels, batch 1 and
#: 4, 8-256 channels, 16x16 to 128x128 planes, and Conv1d's): reducing the channels by half or
#: more on 32x32 and up 0.25-1.11x (57 shapes, geometric mean 0.61x; 4x32x128x128 -> 8 32.0 ->
#: 8.3 ms against a channels-last buffer of 75 MB, 1x64x128x128 -> 8 14.3 -> 3.6 ms); up to 32
#: channels kept on 64x64 and up 0.47-1.04x (12 shapes, 0.70x); elsewhere no rule: as many or more
#: output channels 0.9-1.3x (the im2col product's inner dimension, 9 * C, makes the better
#: GEMM when the output has the channels to use it), 16x16 planes 0.7-1.25x, Conv1d's (1, T)
#: planes of 100-1,600 steps 0.8-1.4x.
TAPSUM_MIN_CHANNELS = 8
TAPSUM_REDUCING_OUTPUTS = 1024
TAPSUM_NARROW = 32
TAPSUM_NARROW_OUTPUTS = 4096
TAPSUM_BLOCK = 1 << 17

#: A convolution of one group whose output is one row read by one kept kernel row (a 1-d
#: convolution: Conv1d as the importer lowers it, (N, C, 1, W) by (O, C, 1, KW)) takes the "row"
#: path (``_conv_row``): the input row zero-padded where the taps reach past it, its (C, KW, OW)
#: windows copied into one buffer, one product an image into ``out``: the copies of the paths
#: planned for 2-d maps, with less to do per call. Where the weight has more than
#: ``ROW_WEIGHT_RATIO`` times as many rows as an image's product has columns (O > 4 * OW: a
#: strided front end's few outputs by many channels) it does not apply, except to one image
#: of at most ``GATHER_MAX_OUTPUTS`` outputs, and a kept weight's panels (``_few_rows``) and the
#: "tapsum" path come first. One kernel, one thread, a constant weight, 704 shapes (batch 1,
#: 4, 8; 16-512 channels; 16-1,500 steps; kernels 1-10, strides 1-5, dilation 1 and 4),
#: against the paths planned before: inside the bounds 550 shapes at 0.44-1.11x (geometric
#: mean 0.80x over all 704; TCN's 4x32x1x64 by 32x32x1x3 29 -> 20 us, 1x32x1x16 9.6 -> 5.6
#: us), outside them up to 3.4x (4x256x1x16 by 256 channels, kernel 10 at stride 5: 2 outputs
#: an image). ``ROW_PATH = False`` plans such convolutions like 2-d ones (tests, measurements).
ROW_PATH = True
ROW_WEIGHT_RATIO = 4

#: Plans cached per kernel (per shapes of data, weight and output); the dict is cleared when
#: it reaches this many entries, so its memory stays bounded under any stream of shapes.
PLANS_MAX = 64


class _Plan:
    """What one shape of ``nn.conv2d`` does, computed once per (shapes, attributes) and
    reused: the taps that reach the input (``i0:i1``, ``j0:j1``; the others read padding only
    and are dropped), the rectangle ``rows`` x ``cols`` of the padded input they read (input
    coordinates, may stick out of the input), the path, the output rows per block (the tile
    size of the "tiled" path), and the index table of the "gather" path (every (tap, output)
    pair's element in that rectangle) or of the "dense" and "tiled" ones (``_dense_table``);
    ``images``, the images per block of the "flat", "window", "taps" and "tapsum" paths (see
    ``BLOCK_ELEMENTS``, ``GROUPED_BLOCK_ELEMENTS`` and ``TAPSUM_BLOCK``)."""

    __slots__ = (
        "block",
        "col_spans",
        "cols",
        "images",
        "path",
        "row_spans",
        "rows",
        "table",
        "taps",
    )

    def __init__(
        self,
        path: str,
        taps: tuple[int, int, int, int],
        rows: tuple[int, int],
        cols: tuple[int, int],
        block: int,
        row_spans: Sequence[_Span],
        col_spans: Sequence[_Span],
        table: np.ndarray | None = None,
        images: int = 0,
    ) -> None:
        self.path = path
        self.taps = taps
        self.rows = rows
        self.cols = cols
        self.block = block
        self.row_spans = row_spans
        self.col_spans = col_spans
        self.table = table
        self.images = images


class _PlannedModule(types.ModuleType):
    """This module's type: setting any of its attributes after import (a tunable such as
    ``FILL`` or ``GATHER_MAX_OUTPUTS``, as tests and measurements do) starts a new plan
    generation (``_generation``), which the kernels' plan keys hold, so their plans follow the
    change. A call's key is then its operands' shapes, dtype and that number, not every
    tunable's value (the key and its lookup: 0.35 against 1.3 us with the other core busy;
    a TCN's (1, 16, 1, 16) x (32, 16, 3, 3) convolution 11.7 -> 11.1 us, quiet; session 39)."""

    def __setattr__(self, name: str, value: Any) -> None:
        super().__setattr__(name, value)
        if name != "_generation":
            super().__setattr__("_generation", self.__dict__["_generation"] + 1)


_generation = 0
sys.modules[__name__].__class__ = _PlannedModule

#: A kernel's plans hold None for shapes with nothing to compute; this marks a missing one.
_UNPLANNED = _Plan("unplanned", (0, 0, 0, 0), (0, 0), (0, 0), 0, (), ())


def _plan(
    data_shape: tuple[int, ...],
    weight_shape: tuple[int, ...],
    out_hw: tuple[int, int],
    pad: tuple[int, int, int, int],
    strides: Sequence[int],
    dilation: Sequence[int],
    limit: int,
    kept: bool = False,
    panels: bool = False,
) -> _Plan:
    """The path of a (validated, non-empty) convolution; ``limit`` bounds its scratch, ``kept``
    says that the weight is a constant whose layouts the kernel keeps, ``panels`` that a
    float32 product of a few rows may go by the weight's panels (``row_panels``). A depthwise
    convolution may go by tap matrices (``_matrix_plan``) instead of the path the buffers' plan
    (``_buffer_plan``) chooses."""
    conv = _Geometry(data_shape, weight_shape, out_hw, pad, strides, dilation, limit, kept, panels)
    buffers = _buffer_plan(conv)
    return _matrix_plan(conv, buffers) or buffers


class _Geometry(NamedTuple):
    """A convolution's shapes and attributes and the bound on its scratch (``_plan``'s
    arguments), for the planners of its paths."""

    data_shape: tuple[int, ...]
    weight_shape: tuple[int, ...]
    out_hw: tuple[int, int]
    pad: tuple[int, int, int, int]
    strides: Sequence[int]
    dilation: Sequence[int]
    limit: int
    kept: bool = False
    panels: bool = False


def _buffer_plan(conv: _Geometry) -> _Plan:
    """The path of a convolution on im2col-style buffers (or its channels-last forms)."""
    data_shape, weight_shape, out_hw, pad, strides, dilation, limit = conv[:7]
    n, c, h, w = data_shape
    kh, kw = weight_shape[2:]
    oh, ow = out_hw
    (sh, sw), (dh, dw) = strides, dilation
    row_spans = _spans(h, oh, kh, sh, dh, pad[0])
    col_spans = _spans(w, ow, kw, sw, dw, pad[1])
    if not row_spans or not col_spans:  # every tap reads padding only: the output is zeros
        return _Plan("zeros", (0, 0, 0, 0), (0, 0), (0, 0), 0, row_spans, col_spans)
    i0, i1 = row_spans[0][0], row_spans[-1][0] + 1
    j0, j1 = col_spans[0][0], col_spans[-1][0] + 1
    kt = (i1 - i0) * (j1 - j0)
    # Dropping the taps that read padding only costs a strided copy of the weight's other
    # taps; it pays when that is less than the buffer it saves (on a 1x1 map a 512-channel
    # 3x3's gemv over the whole weight took 0.6x the time of copying its centre tap first).
    if (
        kt < kh * kw
        and weight_shape[0] * weight_shape[1] * kh * kw > n * c * (kh * kw - kt) * oh * ow
    ):
        i0, i1, j0, j1, kt = 0, kh, 0, kw, kh * kw
    taps = (i0, i1, j0, j1)
    rows = (i0 * dh - pad[0], (oh - 1) * sh + (i1 - 1) * dh - pad[0] + 1)
    cols = (j0 * dw - pad[1], (ow - 1) * sw + (j1 - 1) * dw - pad[1] + 1)
    padded = rows[0] < 0 or cols[0] < 0 or rows[1] > h or cols[1] > w
    if kt == 1 and (sh, sw) == (1, 1) and rows == (0, h) and cols == (0, w):
        return _Plan("matmul", taps, rows, cols, oh, row_spans, col_spans)
    depthwise = weight_shape[1] == 1 and weight_shape[0] == c
    region = (rows[1] - rows[0]) * (cols[1] - cols[0])
    if (
        depthwise
        and FILL == "auto"
        and (
            n * c >= DEPTHWISE_ROWS_MIN_RUN
            or (
                (sh, sw) != (1, 1)
                and n * c >= DEPTHWISE_ROWS_MIN_RUN_STRIDED
                and DEPTHWISE_LAST_MAX < oh * ow <= DEPTHWISE_ROWS_STRIDED_MAX
            )
        )
        and DEPTHWISE_ROWS_MIN <= oh * ow <= DEPTHWISE_ROWS_MAX
        and ((sh, sw) != (1, 1) or oh * ow <= _rows_stride1_max(kh * kw))
        # its scratch: the channels-last region, the sum and one kernel row's part of it
        and n * c * (region + 2 * oh * ow) <= limit
    ):
        return _Plan("rows", taps, rows, cols, oh, row_spans, col_spans)
    if (
        depthwise
        and FILL == "auto"
        and 2 <= oh * ow <= DEPTHWISE_LAST_MAX
        # its scratch: the channels-last region and the products of every tap
        and n * c * (region + kt * oh * ow) <= limit
    ):
        return _Plan("last", taps, rows, cols, oh, row_spans, col_spans)
    o = weight_shape[0]
    products = _product_plan(conv, taps, kt, (rows, cols), (row_spans, col_spans))
    if products is not None:
        return products
    if (
        ROW_PATH
        and FILL == "auto"
        and weight_shape[1] == c
        and oh == 1
        and i1 - i0 == 1
        and (o <= ROW_WEIGHT_RATIO * ow or (n == 1 and ow <= GATHER_MAX_OUTPUTS))
        # its scratch: the padded row and the buffer
        and n * c * ((cols[1] - cols[0]) + kt * ow) <= limit
    ):
        return _Plan("row", taps, rows, cols, oh, row_spans, col_spans)
    if (
        weight_shape[1] == c
        and FILL == "auto"
        and n == 1
        and oh * ow <= GATHER_MAX_OUTPUTS
        # its scratch: the zero-padded region and the buffer
        and n * c * (region + kt * oh * ow) <= limit
    ):
        table = _gather_table(taps, cols[1] - cols[0], out_hw, strides, dilation)
        return _Plan("gather", taps, rows, cols, oh, row_spans, col_spans, table)
    if (
        weight_shape[1] == c
        and FILL == "auto"
        and _channels_last_plane(n, c, kt, out_hw, (sh, sw), cols[1] - cols[0])
        # a kept weight is laid out once (no ratio, no scratch): then the product of every
        # image at once reads the weight once, where one product an image reads it N times
        and (conv.kept or o <= LAST_IM2COL_WEIGHT_RATIO * n * oh * ow)
        # its scratch: the channels-last region, the buffer, the weights and the product
        and n * c * region
        + n * oh * ow * c * kt
        + (0 if conv.kept else o * c * kt)
        + n * oh * ow * o
        <= limit
    ):
        return _Plan("last_im2col", taps, rows, cols, oh, row_spans, col_spans)
    wr = cols[1] - cols[0]
    mode = FILL
    if mode == "flat" and (sh, sw) != (1, 1):
        mode = "window"
    if mode == "auto" and (sh, sw) == (1, 1) and oh * ow < TINY_OUTPUTS:
        mode = "taps"
    elif mode == "auto":
        mode = "flat" if (sh, sw) == (1, 1) and padded else "window"
    # the flat path's scratch: its buffer, the padded copy (one extra row) and the product
    flat = n * (c * kt * oh + c * (rows[1] - rows[0] + 1) + weight_shape[0] * oh) * wr
    if mode == "flat" and flat <= limit:
        images = max(1, min(n, BLOCK_ELEMENTS // (c * kt * oh * wr)))
        return _Plan("flat", taps, rows, cols, oh, row_spans, col_spans, images=images)
    if mode == "taps" and padded:
        # one clipped copy per tap (the spans of taps that read padding only are empty), no
        # padded copy: the buffer spans all KH * KW taps
        taps, kt = (0, kh, 0, kw), kh * kw
        path = "taps"
    else:
        path = "window"
    return _window_plan(path, conv, taps, kt, (rows, cols), (row_spans, col_spans))


def _rows_stride1_max(taps: int) -> int:
    """The most outputs a plane for which a stride-1 depthwise convolution of ``taps`` taps
    takes the rows path (``DEPTHWISE_ROWS_STRIDE1_*``)."""
    return DEPTHWISE_ROWS_STRIDE1_MAX if taps <= 9 else DEPTHWISE_ROWS_STRIDE1_WIDE_MAX


def _product_plan(
    conv: _Geometry,
    taps: tuple[int, int, int, int],
    kt: int,
    region: tuple[tuple[int, int], tuple[int, int]],
    spans: tuple[Sequence[_Span], Sequence[_Span]],
) -> _Plan | None:
    """The plan of a one-group convolution whose product decides its path, or None: the
    "tapsum" plan at stride 1 (``_tapsum_plan``), else "last_im2col" for a plane of a few
    outputs by a large constant weight (``_few_rows``)."""
    if conv.weight_shape[1] != conv.data_shape[1] or FILL != "auto":
        return None
    if tuple(conv.strides) == (1, 1):
        tapsum = _tapsum_plan(conv, taps, kt, region, spans)
        if tapsum is not None:
            return tapsum
    (top, bottom), (left, right) = region
    if _few_rows(conv, kt, (bottom - top) * (right - left)):
        return _Plan("last_im2col", taps, *region, conv.out_hw[0], *spans)
    return None


def _few_rows(conv: _Geometry, kt: int, region: int) -> bool:
    """Whether a one-group convolution of ``kt`` kept taps, reading ``region`` elements of each
    channel, goes by the "last_im2col" path's buffer times the kept panels of its weight
    (``row_panels``): a plane of a few outputs by a large constant weight, where the "gather"
    path's product (the weight's rows by the buffer's few columns) packs the whole weight on
    every call. Only for a kept weight: from any other the panels would be copied per call.
    Measured (session 39, one image, the weights cold, gather -> panels): 512 channels on a 2x2
    plane (9.4 MB of weights) 714 -> 399 us, 256 -> 512 at stride 2 465 -> 199, 128 -> 256 at
    stride 2 on 8x8 149 -> 107, 128 channels on 4x4 87 -> 63; ResNet-18 at 1x3x64x64 0.75-0.81x
    a call (design/vm.md, "Products of a few rows by column panels")."""
    n, c = conv.data_shape[:2]
    p = n * conv.out_hw[0] * conv.out_hw[1]
    return (
        conv.kept
        and conv.panels
        and row_panels.columns(p, c * kt, conv.weight_shape[0]) > 0
        # its scratch: the channels-last region, the buffer and the product
        and n * c * region + p * (c * kt + conv.weight_shape[0]) <= conv.limit
    )


def _tapsum_plan(
    conv: _Geometry,
    taps: tuple[int, int, int, int],
    kt: int,
    region: tuple[tuple[int, int], tuple[int, int]],
    spans: tuple[Sequence[_Span], Sequence[_Span]],
) -> _Plan | None:
    """The "tapsum" plan of a stride-1 convolution of one group (``TAPSUM_*``), or None: its
    blocks are whole images while an image's input, partial sums and product fit
    ``TAPSUM_BLOCK``, else rows of one image. Its scratch (the padded region with one extra
    row, a block's partial sums and one tap's product) must fit ``limit`` and the flat path's
    buffer and product, which the op's workspace rule counts."""
    n, c = conv.data_shape[:2]
    o = conv.weight_shape[0]
    oh, ow = conv.out_hw
    outputs = oh * ow
    reducing = 2 * o <= c and outputs >= TAPSUM_REDUCING_OUTPUTS
    narrow = o <= min(c, TAPSUM_NARROW) and outputs >= TAPSUM_NARROW_OUTPUTS
    if c < TAPSUM_MIN_CHANNELS or not (reducing or narrow):
        return None
    (top, bottom), (left, right) = region
    wr = right - left
    column = c + 2 * o  # a block column's input and partial sums (and the tap's product)
    image = column * oh * wr
    if image <= TAPSUM_BLOCK:
        images, rows = min(n, TAPSUM_BLOCK // image), oh
    else:
        images, rows = 1, min(oh, max(1, TAPSUM_BLOCK // (column * wr)))
    sums = images * o * rows * wr * (1 if wr == ow else 2)
    need = n * c * (bottom - top + 1) * wr + sums
    if need > conv.limit or sums > n * (c * kt + o) * oh * wr:
        return None
    return _Plan("tapsum", taps, *region, rows, *spans, images=images)


def _channels_last_plane(
    n: int, c: int, kt: int, out_hw: tuple[int, int], strides: tuple[int, int], width: int
) -> bool:
    """Whether a one-group convolution's output plane suits the "last_im2col" path
    (``LAST_IM2COL_*``): small, or at stride 1 larger where the flat path's product an image
    is a poor GEMM (``width``: the padded region's, the flat buffer's row)."""
    oh, ow = out_hw
    if oh * ow <= LAST_IM2COL_MAX_OUTPUTS:
        return True
    if strides != (1, 1):
        return False
    if oh * ow <= LAST_IM2COL_STRIDE1_MAX:
        return True
    wide = c >= LAST_IM2COL_WIDE_CHANNELS or c * kt * oh * width >= LAST_IM2COL_FLAT_IMAGE
    return n >= 2 and wide


def _window_plan(
    path: str,
    conv: _Geometry,
    taps: tuple[int, int, int, int],
    kt: int,
    region: tuple[tuple[int, int], tuple[int, int]],
    spans: tuple[Sequence[_Span], Sequence[_Span]],
) -> _Plan:
    """The blocks of the "window" or "taps" path (``path``) of ``kt`` kept taps: rows across
    the batch (``BLOCK_ELEMENTS``), or images then rows for a grouped convolution
    (``GROUPED_BLOCK_ELEMENTS``); the "einsum" path when not even one row fits the scratch
    bound."""
    n, c = conv.data_shape[:2]
    oh, ow = conv.out_hw
    limit = conv.limit
    per_row = n * c * kt * ow
    if limit // per_row < 1:
        return _Plan("einsum", taps, *region, 0, *spans)
    image_row = c * kt * ow
    if conv.weight_shape[1] < c:
        # Grouped (depthwise): one product an image and group a block, so blocks of images
        # first, then of an image's rows
        room = min(GROUPED_BLOCK_ELEMENTS, limit)
        if image_row * oh <= room:
            images = min(n, room // (image_row * oh))
            return _Plan(path, taps, *region, oh, *spans, images=images)
        block = min(oh, max(1, room // image_row))  # one row fits the bound: per_row does
        return _Plan(path, taps, *region, block, *spans, images=1)
    block = min(limit // per_row, max(1, BLOCK_ELEMENTS // per_row))
    return _Plan(path, taps, *region, min(oh, block), *spans, images=n)


def _gather_table(
    taps: tuple[int, int, int, int],
    width: int,
    out_hw: tuple[int, int],
    strides: Sequence[int],
    dilation: Sequence[int],
) -> np.ndarray:
    """The "gather" path's index table (read-only): for each kept tap (i, j) and output (r, q),
    in that order, the flat position ``(r * SH + i * DH) * width + q * SW + j * DW`` of the
    element it reads in the region of its plan (``width`` columns), whose first row and column
    are the first kept tap's reach."""
    i0, i1, j0, j1 = taps
    oh, ow = out_hw
    (sh, sw), (dh, dw) = strides, dilation
    r = np.arange(i1 - i0)[:, None, None, None] * dh + np.arange(oh)[None, None, :, None] * sh
    q = np.arange(j1 - j0)[None, :, None, None] * dw + np.arange(ow)[None, None, None, :] * sw
    table = (r * width + q).reshape(-1).astype(np.intp)
    table.flags.writeable = False
    return table


def _region(
    data: np.ndarray,
    rows: tuple[int, int],
    cols: tuple[int, int],
    extra: int,
    dtype: Any,
    ws: Workspace,
) -> np.ndarray:
    """``data``'s (N, C, rows, cols) rectangle of its zero-padded extension (plus ``extra``
    zero rows below): a view of ``data`` when it lies inside it and no row is added and no
    conversion is needed, else an array carved from ``ws`` (bounded: inside the padded shape
    that ``_padded_shape`` checked, plus ``extra`` rows)."""
    n, c, h, w = data.shape
    if rows[0] >= 0 and cols[0] >= 0 and rows[1] <= h and cols[1] <= w and not extra:
        view = data[:, :, rows[0] : rows[1], cols[0] : cols[1]]
        return view if view.dtype == dtype else _converted(view, dtype, ws)
    hr, wr = rows[1] - rows[0], cols[1] - cols[0]
    x = ws.zeros((n, c, hr + extra, wr), dtype)
    r0, r1 = max(rows[0], 0), min(rows[1], h)
    c0, c1 = max(cols[0], 0), min(cols[1], w)
    if r0 < r1 and c0 < c1:
        x[:, :, r0 - rows[0] : r1 - rows[0], c0 - cols[0] : c1 - cols[0]] = data[:, :, r0:r1, c0:c1]
    return x


def _conv_im2col(
    data: np.ndarray,
    weight: np.ndarray,
    acc: np.ndarray,
    groups: int,
    plan: _Plan,
    strides: Sequence[int],
    dilation: Sequence[int],
    layouts: ConstantLayouts,
    ws: Workspace,
) -> None:
    n, c = data.shape[:2]
    o, cg = weight.shape[:2]
    oh, ow = acc.shape[2:]
    i0, i1, j0, j1 = plan.taps
    kh, kw = i1 - i0, j1 - j0
    og, k = o // groups, cg * kh * kw
    dt = acc.dtype
    wt = layouts.get(
        weight, ("grouped", plan.taps, groups, dt), lambda w: _tap_weights(w, plan.taps, groups, dt)
    )
    if plan.path == "flat":
        # Stride 1: output (r, q) of a tap is element r * WR + q of the padded rectangle's
        # rows laid end to end (WR its width), shifted by the tap's offset: the buffer is one
        # copy of that view with OH * WR columns (the last WR - OW of each row are junk, never
        # copied out), from a copy padded by one extra zero row so that the view stays inside.
        wr = plan.cols[1] - plan.cols[0]
        x = _region(data, plan.rows, plan.cols, 1, dt, ws)
        q = oh * wr
        shifted = windows(x, (kh, kw), (1, 1), dilation, (1, q))[:, :, 0].transpose(0, 1, 3, 4, 2)
        step = plan.images
        buf = ws.empty((step, c, kh, kw, q), dt)
        res = ws.empty((step, groups, og, q), dt) if wr != ow else None
        for a in range(0, n, step):
            b = min(n, a + step)
            part = buf[: b - a]
            np.copyto(part, shifted[a:b])
            whole = part.reshape(b - a, groups, k, q)
            if res is None:  # one column of taps: no junk columns, straight into acc
                _matmul(wt, whole, acc[a:b].reshape(b - a, groups, og, q))
                continue
            _matmul(wt, whole, res[: b - a])
            np.copyto(acc[a:b], res[: b - a].reshape(b - a, o, oh, wr)[:, :, :, :ow])
        return
    win: np.ndarray | None = None
    if plan.path == "window":
        (top, bottom), (left, right) = plan.rows, plan.cols
        h, w = data.shape[2:]
        inside = top >= 0 and left >= 0 and bottom <= h and right <= w
        if inside and data.flags.c_contiguous and data.dtype == dt:  # no copy: view data
            win = windows(data, (kh, kw), strides, dilation, (oh, ow), (top, left))
        else:
            x = _region(data, plan.rows, plan.cols, 0, dt, ws)
            win = windows(x, (kh, kw), strides, dilation, (oh, ow))
    rows, step = plan.block, plan.images
    room = ws.empty((step * c * kh * kw * rows * ow,), dt)
    if win is not None and groups == 1 and step > 1 and o >= FOLD_ROWS_RATIO * rows * ow:
        _window_images_folded(win, wt.reshape(o, k), acc, (rows, step), ws, room)
        return
    for a in range(0, n, step):
        b = min(n, a + step)
        for r0 in range(0, oh, rows):
            r1 = min(oh, r0 + rows)
            # the last block may be shorter: the front of the same room
            size = (b - a) * c * kh * kw * (r1 - r0) * ow
            block = room[:size].reshape(b - a, c, kh, kw, r1 - r0, ow)
            if win is not None:  # the window view itself, in one copy
                np.copyto(block, win[a:b, :, r0:r1].transpose(0, 1, 4, 5, 2, 3))
            else:
                _fill_block(block, data[a:b], r0, r1, plan.row_spans, plan.col_spans, strides[0])
            p = (r1 - r0) * ow
            flat = block.reshape(b - a, groups, k, p, copy=False)
            _matmul(wt, flat, _rows_view(acc[a:b], r0, r1, (b - a, groups, og, p)))


#: The "window" path of one group multiplies a block's images in one product (their columns side
#: by side: ``_window_images_folded``) where the weight has at least this many times more rows
#: than an image's block has columns: one product an image then packs the whole weight again
#: for a few columns (a large plane's stride-2 convolution in blocks of one output row).
#: One thread (session 31), against one product an image: 8x128x16x16 -> 256 at stride 2
#: 6,728 -> 3,377 us, 8x64x32x32 -> 128 4,872 -> 3,479, 4x128x28x28 -> 256 9,715 -> 4,913,
#: 4x64x56x56 -> 128 6,277 -> 4,774, 8x32x16x16 -> 64 (ratio 2.7) 317 -> 300; below the ratio
#: the output's transposed copy costs more than it saves (a 7x7 stem to 64 channels, 64
#: columns an image: 5,488 -> 7,683 us; 8x16x32x32 -> 32: 364 -> 440).
FOLD_ROWS_RATIO = 4


def _window_images_folded(
    win: np.ndarray,
    wt: np.ndarray,
    acc: np.ndarray,
    blocks: tuple[int, int],
    ws: Workspace,
    room: np.ndarray,
) -> None:
    """The "window" path of one group with a block's images as the columns of one product:
    the block (C, KH, KW, images, rows, OW) copied from the window view ``win``, multiplied by
    the (O, K) weight ``wt`` into an (O, images * rows * OW) result, copied into ``acc``'s
    images and rows (blocks of ``rows`` output rows and ``step`` images: ``blocks``)."""
    n, c, oh, ow, kh, kw = win.shape
    o, k = wt.shape
    rows, step = blocks
    res_room = ws.empty((o * step * rows * ow,), acc.dtype)
    for a in range(0, n, step):
        b = min(n, a + step)
        for r0 in range(0, oh, rows):
            r1 = min(oh, r0 + rows)
            p = (b - a) * (r1 - r0) * ow
            block = room[: k * p].reshape(c, kh, kw, b - a, r1 - r0, ow)
            np.copyto(block, win[a:b, :, r0:r1].transpose(1, 4, 5, 0, 2, 3))
            res = res_room[: o * p].reshape(o, p)
            _matmul(wt, block.reshape(k, p), res)
            np.copyto(acc[a:b, :, r0:r1], res.reshape(o, b - a, r1 - r0, ow).transpose(1, 0, 2, 3))


@register_kernel("nn.conv2d")
def conv2d(attrs: Mapping[str, Any]) -> Kernel:
    """2-d convolution, NCHW x OIHW, with strides, dilation, padding and groups: an im2col
    buffer and one BLAS matmul (groups as its batch axis), a plain matmul for 1x1 convolutions,
    depthwise ones on the im2col path too (see the module doc). float16 accumulates in
    float32 and rounds once into ``out``. The checks and the plan (``_plan``) are computed once
    per shape of the operands and kept (at most ``PLANS_MAX`` per kernel).
    """
    strides, dilation, groups = attrs["strides"], attrs["dilation"], attrs["groups"]
    pad = padding4(attrs["padding"])
    plans: dict[tuple[Any, ...], _Plan | None] = {}

    def check(data: np.ndarray, weight: np.ndarray, out: np.ndarray, kept: bool) -> _Plan | None:
        if weight.ndim != 4:
            raise ValueError(f"nn.conv2d: expected an OIHW weight, got shape {weight.shape}")
        o, cg, kh, kw = weight.shape
        if data.ndim != 4 or groups < 1 or data.shape[1] != cg * groups or o % groups:
            raise ValueError(
                f"nn.conv2d: data {data.shape} and weight {weight.shape} do not fit groups={groups}"
            )
        shape = _padded_shape("nn.conv2d", data, pad, out)
        oh, ow = _check_hw("nn.conv2d", shape, (kh, kw), strides, dilation, out)
        if out.size == 0 or cg == 0:
            return None
        limit = _scratch_limit(data, out)
        # the panels are taken by the ``one`` thread policy's products only (``row_panels``)
        panels = (
            kept
            and blas_threads.direct_sgemm()
            and blas_threads.policy() == "one"
            and out.dtype in _PANEL_DTYPES
        )
        geometry = (data.shape, weight.shape, (oh, ow), pad, strides, dilation, limit)
        return _plan(*geometry, kept, panels)

    def build(layouts: ConstantLayouts) -> Kernel:
        # the kept weight's prepared paths, by plan key (``_PREPARED_PATHS``)
        runners: dict[tuple[Any, ...], _Runner] = {}

        def kernel(
            data: np.ndarray,
            weight: np.ndarray,
            out: np.ndarray,
            workspace: np.ndarray | None = None,
        ) -> None:
            run(data, weight, out, layouts, workspace, runners)

        def prepared(constants: Mapping[int, np.ndarray]) -> Kernel:
            weight = constants.get(1)
            # a 1x1 weight multiplies as a matrix without the plans (``_pointwise``)
            return (
                kernel
                if weight is None
                else _pointwise(weight, build(ConstantLayouts([weight])), attrs)
            )

        kernel.with_constants = prepared  # type: ignore[attr-defined]
        return kernel

    def run(
        data: np.ndarray,
        weight: np.ndarray,
        out: np.ndarray,
        layouts: ConstantLayouts,
        workspace: np.ndarray | None,
        runners: dict[tuple[Any, ...], _Runner],
    ) -> None:
        kept = layouts.keeps(weight)
        # the plans follow every module setting through its generation (``_PlannedModule``)
        key = (
            data.shape,
            weight.shape,
            out.shape,
            out.dtype,
            kept,
            blas_threads.direct_sgemm(),
            blas_threads.policy(),
            _generation,
        )
        plan = plans.get(key, _UNPLANNED)  # one lookup: another thread may clear the dict
        if plan is _UNPLANNED:
            plan = check(data, weight, out, kept)
            if len(plans) >= PLANS_MAX:
                plans.clear()
            plans[key] = plan
        if plan is None or plan.path == "zeros":
            # an empty output, no input channels (every sum is empty) or every tap in the padding
            out.fill(0)
            return
        if plan.path == "matmul" and data.dtype == out.dtype != F16 and out.flags.c_contiguous:
            # The commonest convolution (1x1, stride 1: most of a MobileNet's) is one product
            # into ``out``, with nothing to carve or convert: straight there, without the
            # general path's dispatch (0.4-0.6 us of a 4-20 us call, measured; MobileNetV3-small
            # at 1x3x64x64 0.98x a call).
            _one_tap_product(data, weight, out, groups, plan, layouts)
            return
        ws = Workspace(workspace, data, weight, out)
        operands = (data, weight, out)
        if kept and _ran_prepared(runners, key, operands, plan, (strides, dilation), ws, layouts):
            return
        _convolve(data, weight, out, plan, (groups, pad, strides, dilation), layouts, ws)

    return build(ConstantLayouts())


def _pointwise(weight: np.ndarray, general: Kernel, attrs: Mapping[str, Any]) -> Kernel:
    """For the constant ``weight`` of a 1x1 convolution (one group, stride 1, no padding: a
    plain matmul whatever the dilation), a kernel that multiplies it as a 2-d matrix by
    ``data`` viewed ``(C, H*W)`` (one image) or ``(N, C, H*W)``, straight into ``out``; any
    other call (float16, strided arrays, shapes that do not fit, empty ones) runs ``general``.
    The same BLAS calls as the general path's ``matmul`` plan (the same bits) without its
    per-call planning: its key, plan lookup, layout lookup and 4-d views cost 4-5 us of a
    squeeze-excite convolution's 6.6 us ((6, 96) x (96, 1); session 38). ``general`` itself
    when the weight is not a 1x1 float32/float64 one or the attributes not as above."""
    pad, strides = padding4(attrs["padding"]), tuple(attrs["strides"])
    if attrs["groups"] != 1 or pad != (0, 0, 0, 0) or strides != (1, 1):
        return general
    if weight.ndim != 4 or weight.shape[2:] != (1, 1) or weight.dtype not in _PLAIN_FLOATS:
        return general
    o, c = weight.shape[:2]
    matrix = weight.reshape(o, c)

    def kernel(
        data: np.ndarray,
        weight_: np.ndarray,
        out: np.ndarray,
        workspace: np.ndarray | None = None,
    ) -> None:
        shape = data.shape
        if (
            weight_ is weight
            and data.dtype is matrix.dtype
            and out.dtype is matrix.dtype
            and len(shape) == 4
            and shape[1] == c
            and out.shape == (shape[0], o, shape[2], shape[3])
            and data.size
            and data.flags.c_contiguous
            and out.flags.c_contiguous
        ):
            n, hw = shape[0], shape[2] * shape[3]
            if n == 1:
                _matmul(matrix, data.reshape(c, hw), out.reshape(o, hw))
            else:
                _matmul(matrix, data.reshape(n, c, hw), out.reshape(n, o, hw))
            return
        general(data, weight_, out, workspace)

    kernel.with_constants = getattr(general, "with_constants", None)  # type: ignore[attr-defined]
    return kernel


_PLAIN_FLOATS = frozenset({np.dtype(np.float32), np.dtype(np.float64)})
#: The outputs whose products are float32 (float16 accumulates in float32): ``row_panels``'.
_PANEL_DTYPES = frozenset({np.dtype(np.float32), F16})


def _convolve(
    data: np.ndarray,
    weight: np.ndarray,
    out: np.ndarray,
    plan: _Plan,
    conv: tuple[int, tuple[int, int, int, int], Sequence[int], Sequence[int]],
    layouts: ConstantLayouts,
    ws: Workspace,
) -> None:
    """Run ``plan``'s path (not ``zeros``) into ``out``; ``conv`` is the attributes (groups,
    padding, strides, dilation). float16 accumulates in a float32 array copied into ``out``.
    The paths' temporary arrays are carved from ``ws``."""
    groups, pad, strides, dilation = conv
    acc = _accumulator(out, data.dtype == F16, ws)
    if plan.path == "matmul":
        x = data if data.dtype == acc.dtype else _converted(data, acc.dtype, ws)
        _one_tap_product(x, weight, acc, groups, plan, layouts)
    elif plan.path in _PLANNED_PATHS:
        _PLANNED_PATHS[plan.path](data, weight, acc, plan, strides, dilation, layouts, ws)
    elif plan.path == "einsum":
        _conv_einsum(data, weight, acc, groups, pad, strides, dilation, layouts)
    else:
        _conv_im2col(data, weight, acc, groups, plan, strides, dilation, layouts, ws)
    if acc is not out:
        np.copyto(out, acc)


def _one_tap_product(
    data: np.ndarray,
    weight: np.ndarray,
    acc: np.ndarray,
    groups: int,
    plan: _Plan,
    layouts: ConstantLayouts,
) -> None:
    """The ``matmul`` path: one tap reaches the input and every output pixel reads the input
    pixel under it (stride 1), so the convolution is one matmul per group of ``data`` (in
    ``acc``'s dtype: float32 for float16 data) into the C-contiguous ``acc``."""
    n, cg, h, w = data.shape[0], weight.shape[1], *data.shape[2:]
    dt = acc.dtype
    x = data.reshape(n, groups, cg, h * w)
    # one tap reaches the input (a 1x1 kernel, or a 1x1 map padded): its weights
    wt = layouts.get(
        weight, ("grouped", plan.taps, groups, dt), lambda w: _tap_weights(w, plan.taps, groups, dt)
    )
    _matmul(wt, x, acc.reshape(n, groups, weight.shape[0] // groups, h * w, copy=False))


def _converted(x: np.ndarray, dt: Any, ws: Workspace) -> np.ndarray:
    """``x`` in dtype ``dt``, copied into an array carved from ``ws``."""
    out = ws.empty(x.shape, dt)
    np.copyto(out, x)
    return out


def _tap_weights(
    weight: np.ndarray, taps: tuple[int, int, int, int], groups: int, dt: Any
) -> np.ndarray:
    """The weights of the kept ``taps`` (rows ``i0:i1``, columns ``j0:j1``) as ``(groups,
    O / groups, C / groups * taps)`` in ``dt`` (a view of ``weight`` where no tap is dropped and
    the dtype is the same)."""
    i0, i1, j0, j1 = taps
    if (i1 - i0, j1 - j0) != weight.shape[2:]:
        weight = weight[:, :, i0:i1, j0:j1]
    o, cg = weight.shape[:2]
    laid: np.ndarray = weight.reshape(groups, o // groups, cg * (i1 - i0) * (j1 - j0))
    return laid.astype(dt, copy=False)


def _conv_gather(
    data: np.ndarray,
    weight: np.ndarray,
    acc: np.ndarray,
    plan: _Plan,
    strides: Sequence[int],
    dilation: Sequence[int],
    layouts: ConstantLayouts,
    ws: Workspace,
) -> None:
    """The "gather" path (one group, one image, a tiny plane): the im2col buffer (N, C, KH * KW,
    OH * OW) as one ``np.take`` of the zero-padded region by the plan's table, then one product
    per image. ``strides`` and ``dilation`` are in the table."""
    n, c = data.shape[:2]
    o = weight.shape[0]
    i0, i1, j0, j1 = plan.taps
    dt = acc.dtype
    x = _region(data, plan.rows, plan.cols, 0, dt, ws)
    k, p = c * (i1 - i0) * (j1 - j0), acc.shape[2] * acc.shape[3]
    assert plan.table is not None  # (made with the plan)
    buf = ws.empty((n, c, len(plan.table)), dt)
    np.take(x.reshape(n, c, x.shape[2] * x.shape[3]), plan.table, axis=2, out=buf)
    wt = layouts.get(
        weight, ("grouped", plan.taps, 1, dt), lambda w: _tap_weights(w, plan.taps, 1, dt)
    )
    _matmul(wt.reshape(o, k), buf.reshape(n, k, p), acc.reshape(n, o, p))


#: A channels-last copy of an input whose channels lie a multiple of ``ALIASED_STRIDE`` bytes
#: apart (a 32x32 or 64x64 float32 plane) goes through a row-major copy first
#: (``_channels_last_region``): the direct copy reads one element of each channel in turn,
#: and addresses 4 KiB apart fall in the same L1 set. Measured (session 30, NCHW to (H, W, N,
#: C)): 8x72x32x32 1,882 -> 687 us, 8x96x32x32 4,492 -> 942, 8x64x32x32 1,395 -> 638,
#: 8x48x64x64 4,451 -> 2,480, 4x64x32x32 224 -> 146, 1x72x64x64 209 -> 186; on other strides
#: the extra pass costs 1.3-1.6x (8x72x28x28 209 -> 312), so only these take it. MobileNetV3's
#: 3x3 stride-2 depthwise layer on 8x72x32x32 (the "rows" path) 2,541 -> ~1,000 us.
ALIASED_STRIDE = 4096
ALIASED_MIN_ELEMENTS = 1 << 14


def _channels_last_region(
    data: np.ndarray, plan: _Plan, order: tuple[int, int, int, int], dt: Any, ws: Workspace
) -> np.ndarray:
    """The rectangle ``plan`` says the taps read, copied zero-padded in ``dt`` into an array
    carved from ``ws`` whose axes are ``data``'s NCHW axes in ``order`` (channels-last: C at
    the end)."""
    n, c, h, w = data.shape
    (r0, r1), (c0, c1) = plan.rows, plan.cols
    sizes = (n, c, r1 - r0, c1 - c0)
    x = ws.zeros(tuple(sizes[i] for i in order), dt)
    a, b, e, f = max(r0, 0), min(r1, h), max(c0, 0), min(c1, w)
    if a < b and e < f:
        inside = (slice(None), slice(None), slice(a - r0, b - r0), slice(e - c0, f - c0))
        src = data[:, :, a:b, e:f]
        if data.strides[1] % ALIASED_STRIDE == 0 and src.size >= ALIASED_MIN_ELEMENTS:
            # Channels ALIASED_STRIDE bytes apart share the L1 cache's sets: reading one from
            # each, as the copy's channels-innermost order does, evicts every line before its
            # next element is read. Rows first (W stays innermost), then the channels of one
            # row, ``w * itemsize`` bytes apart.
            rows = ws.empty((n, b - a, c, f - e), dt)
            np.copyto(rows, src.transpose(0, 2, 1, 3))
            src = rows.transpose(0, 2, 1, 3)
        np.copyto(x[tuple(inside[i] for i in order)], src.transpose(order))
    return x


def _conv_last_im2col(
    data: np.ndarray,
    weight: np.ndarray,
    acc: np.ndarray,
    plan: _Plan,
    strides: Sequence[int],
    dilation: Sequence[int],
    layouts: ConstantLayouts,
    ws: Workspace,
) -> None:
    """The ``last_im2col`` path (one group): the rectangle the taps read, copied zero-padded
    and channels-last (N, rows, cols, C); its windows copied into an (N, OH, OW, KH, KW, C)
    buffer, whose runs are a kernel row's taps times the channels; one product of that buffer's
    (N * OH * OW, K) rows by the weights laid out alike, (O, KH, KW, C); the (N * OH * OW, O)
    result copied into NCHW ``acc``."""
    n, c = data.shape[:2]
    o = weight.shape[0]
    oh, ow = acc.shape[2:]
    dt = acc.dtype
    i0, i1, j0, j1 = plan.taps
    x = _channels_last_region(data, plan, (0, 2, 3, 1), dt, ws)
    (sh, sw), (dh, dw) = strides, dilation
    ns, rs, cs, chs = x.strides
    kh, kw = i1 - i0, j1 - j0
    # numpy's constructor checks that the view stays inside x (the plan's rectangle holds
    # every tap's reach)
    windows_view = np.ndarray(
        (n, oh, ow, kh, kw, c), dt, x, 0, (ns, rs * sh, cs * sw, rs * dh, cs * dw, chs)
    )
    buf = ws.empty((n, oh, ow, kh, kw, c), dt)
    np.copyto(buf, windows_view)
    k = kh * kw * c
    laid = layouts.get(
        weight,
        ("channels_last", plan.taps, dt),
        lambda w: np.ascontiguousarray(w[:, :, i0:i1, j0:j1].transpose(0, 2, 3, 1), dtype=dt),
    )
    res = ws.empty((n * oh * ow, o), dt)
    right = laid.reshape(o, k).T

    def kept(w: int) -> row_panels.Laid:
        key = ("channels_last_panels", plan.taps, dt, w)
        panels: row_panels.Laid = layouts.get(weight, key, lambda _: row_panels.panels(right, w))
        return panels

    _matmul(buf.reshape(n * oh * ow, k), right, res, kept if layouts.keeps(weight) else None)
    np.copyto(acc.reshape(n, o, oh * ow), res.reshape(n, oh * ow, o).transpose(0, 2, 1))


def _channels_last_taps(
    data: np.ndarray,
    plan: _Plan,
    out_hw: tuple[int, ...],
    strides: Sequence[int],
    dilation: Sequence[int],
    dt: Any,
    ws: Workspace,
) -> np.ndarray:
    """Every tap's windows of a depthwise convolution as one (KH, KW, OH, OW, N, C) view of
    the rectangle ``plan`` says the taps read, copied zero-padded and channels-last (rows,
    cols, N, C) in ``dt``: the inner run of each window is all images' channels."""
    n, c = data.shape[:2]
    x = _channels_last_region(data, plan, (2, 3, 0, 1), dt, ws)
    i0, i1, j0, j1 = plan.taps
    (sh, sw), (dh, dw) = strides, dilation
    rs, cs, ns, chs = x.strides
    # numpy's constructor checks that the view stays inside x (the plan's rectangle holds
    # every tap's reach, so it does)
    taps: np.ndarray = np.ndarray(
        (i1 - i0, j1 - j0, *out_hw, n, c), dt, x, 0, (rs * dh, cs * dw, rs * sh, cs * sw, ns, chs)
    )
    return taps


def _channels_last_weights(
    weight: np.ndarray, plan: _Plan, dt: Any, layouts: ConstantLayouts
) -> np.ndarray:
    """The (C, 1, KH, KW) weights of the plan's taps as a contiguous (KH, KW, C) array (an
    einsum's inner loop over a strided operand is several times slower)."""
    i0, i1, j0, j1 = plan.taps

    def lay(w: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(w[:, 0, i0:i1, j0:j1].transpose(1, 2, 0), dtype=dt)

    laid: np.ndarray = layouts.get(weight, ("depthwise_last", plan.taps, dt), lay)
    return laid


def _depthwise_last(
    data: np.ndarray,
    weight: np.ndarray,
    acc: np.ndarray,
    plan: _Plan,
    strides: Sequence[int],
    dilation: Sequence[int],
    layouts: ConstantLayouts,
    ws: Workspace,
) -> None:
    """The ``last`` path of a depthwise convolution (weight (C, 1, KH, KW)) on a tiny map: the
    tap view of ``_channels_last_taps`` times the weights laid out (KH, KW, 1, 1, 1, C) in
    one multiply, one sum over the taps, then one copy into ``acc`` (NCHW)."""
    dt = acc.dtype
    taps = _channels_last_taps(data, plan, acc.shape[2:], strides, dilation, dt, ws)
    kh, kw, oh, ow, n, c = taps.shape
    wl = _channels_last_weights(weight, plan, dt, layouts).reshape(kh, kw, 1, 1, 1, c)
    prod = ws.empty((kh * kw, oh, ow, n, c), dt)
    np.multiply(taps, wl, out=prod.reshape(taps.shape))
    total = ws.empty((oh, ow, n, c), dt)
    np.add.reduce(prod, axis=0, out=total)
    np.copyto(acc, total.transpose(2, 3, 0, 1))


def _depthwise_rows(
    data: np.ndarray,
    weight: np.ndarray,
    acc: np.ndarray,
    plan: _Plan,
    strides: Sequence[int],
    dilation: Sequence[int],
    layouts: ConstantLayouts,
    ws: Workspace,
) -> None:
    """The ``rows`` path of a depthwise convolution with a long channels-last run: per kernel
    row, one ``np.einsum`` of that row's (KW, OH, OW, N, C) taps (``_channels_last_taps``)
    with its (KW, C) weights, summed over the row's taps as it goes (its inner loop runs over
    the N * C contiguous elements), the rows' sums added, one copy into ``acc`` (NCHW)."""
    dt = acc.dtype
    taps = _channels_last_taps(data, plan, acc.shape[2:], strides, dilation, dt, ws)
    wl = _channels_last_weights(weight, plan, dt, layouts)
    total = ws.empty(taps.shape[2:], dt)
    part = ws.empty(taps.shape[2:], dt) if len(taps) > 1 else total
    for i in range(len(taps)):
        np.einsum("jabnc,jc->abnc", taps[i], wl[i], out=total if i == 0 else part)
        if i:
            np.add(total, part, total)
    np.copyto(acc, total.transpose(2, 3, 0, 1))


def _dense_table(
    hw: tuple[int, int],
    kernel: tuple[int, int],
    out_hw: tuple[int, int],
    pad: tuple[int, int, int, int],
    strides: Sequence[int],
    dilation: Sequence[int],
) -> np.ndarray:
    """The "dense" path's table (read-only, 2 x taps that reach the input): row 0 the flat
    position ``k * OH * OW + p`` in a channel's (H * W, OH * OW) matrix of each (tap, output p)
    pair whose input ``k`` lies inside the plane, row 1 that tap's index in the (KH * KW)
    kernel. No two pairs share a position (two taps of one output read different inputs)."""
    (h, w), (kh, kw), (oh, ow) = hw, kernel, out_hw
    (sh, sw), (dh, dw) = strides, dilation
    i = np.arange(kh)[:, None, None, None]
    j = np.arange(kw)[None, :, None, None]
    y = np.arange(oh)[None, None, :, None]
    x = np.arange(ow)[None, None, None, :]
    r = y * sh + i * dh - pad[0]
    q = x * sw + j * dw - pad[1]
    inside = (r >= 0) & (r < h) & (q >= 0) & (q < w)
    position = (r * w + q) * (oh * ow) + y * ow + x
    tap = np.broadcast_to(i * kw + j, inside.shape)
    table = np.stack([position[inside], tap[inside]]).astype(np.intp)
    table.flags.writeable = False
    return table


def _dense_matrices(weight: np.ndarray, table: np.ndarray, hw: int, p: int, dt: Any) -> np.ndarray:
    """The (C, 1, KH, KW) weights as every channel's (H * W, OH * OW) matrix (``_dense_table``)
    in ``dt``: row ``k``, column ``p`` holds the weight of the tap by which output ``p`` reads
    input ``k``."""
    c = weight.shape[0]
    matrices = np.zeros((c, hw * p), dt)
    matrices[:, table[0]] = weight.reshape(c, -1)[:, table[1]]
    return matrices.reshape(c, hw, p)


def _conv_dense(
    data: np.ndarray,
    weight: np.ndarray,
    acc: np.ndarray,
    plan: _Plan,
    strides: Sequence[int],
    dilation: Sequence[int],
    layouts: ConstantLayouts,
    ws: Workspace,
) -> None:
    """The ``dense`` path of a depthwise convolution on a small plane: each channel's (N, H *
    W) planes times its matrix (``_dense_matrices``, kept for a constant weight), one product
    batched over the channels; at batch 1 the input and ``acc`` are only viewed channel-major."""
    n, c, h, w = data.shape
    p = acc.shape[2] * acc.shape[3]
    dt = acc.dtype
    table = plan.table
    assert table is not None  # (made with the plan)
    matrices = layouts.get(
        weight, ("dense", h, w, dt), lambda wt: _dense_matrices(wt, table, h * w, p, dt)
    )
    x = data.reshape(n, c, h * w).transpose(1, 0, 2)
    out = acc.reshape(n, c, p).transpose(1, 0, 2)
    if n == 1:  # views: (C, 1, H * W) of the contiguous arrays
        _matmul(x if x.dtype == dt else _converted(x, dt, ws), matrices, out)
        return
    planes = ws.empty(x.shape, dt)
    np.copyto(planes, x)
    res = ws.empty(out.shape, dt)
    _matmul(planes, matrices, res)
    np.copyto(out, res)


def _matrix_plan(conv: _Geometry, buffers: _Plan) -> _Plan | None:
    """The plan of a depthwise convolution by tap matrices, or None (keep ``buffers``, the
    buffers' plan): the "dense" path on a small plane, else the "tiled" one for a kernel of
    many taps, or of fewer taps where the buffers' plan is a stride-1 im2col buffer too large
    for the caches (the bounds: the module constants above)."""
    data_shape, weight_shape, out_hw, pad, strides, dilation, limit = conv[:7]
    n, c, h, w = data_shape
    oh, ow = out_hw
    kernel = (weight_shape[2], weight_shape[3])
    if weight_shape[1] != 1 or weight_shape[0] != c or FILL != "auto":  # not depthwise
        return None
    if buffers.path in ("zeros", "matmul"):
        return None
    spans = (buffers.taps, buffers.row_spans, buffers.col_spans)
    if _dense(conv, buffers) and n * c * (h * w + oh * ow) <= limit:
        # (its scratch: the planes channel-major and the product; batch 1: neither)
        table = _dense_table((h, w), kernel, out_hw, pad, strides, dilation)
        everything = ((-pad[0], h - pad[0]), (-pad[1], w - pad[1]))
        return _Plan("dense", spans[0], *everything, oh, *spans[1:], table)
    taps = kernel[0] * kernel[1]
    many = taps >= TILED_MIN_TAPS and oh * ow >= TILED_MIN_OUTPUTS
    large = (
        taps >= TILED_BUFFER_MIN_TAPS
        and buffers.path == "flat"
        and n * c * taps * oh * ow >= TILED_BUFFER_MIN
    )
    tile = _tile(c, kernel, out_hw, strides, dilation) if many or large else None
    if tile is None or n * c * tile[2] > limit:
        return None
    t, patch, _ = tile
    table = _dense_table(patch, kernel, (t, t), (0, 0, 0, 0), strides, dilation)
    # the zero-padded rectangle every tile reads, from the padding's top left corner
    th, tw = -(-oh // t), -(-ow // t)
    rows = (-pad[0], -pad[0] + (th - 1) * t * strides[0] + patch[0])
    cols = (-pad[1], -pad[1] + (tw - 1) * t * strides[1] + patch[1])
    return _Plan("tiled", spans[0], rows, cols, t, *spans[1:], table)


def _dense(conv: _Geometry, buffers: _Plan) -> bool:
    """Whether a depthwise convolution's tap matrices are within the "dense" path's bounds
    (``DEPTHWISE_DENSE_*``): a small plane; or, for a kept weight, an input plane of a few
    times the taps on two images or more, or where ``buffers`` (the buffers' plan) is the
    stride-1 window im2col."""
    n, c, h, w = conv.data_shape
    oh, ow = conv.out_hw
    elements = c * oh * ow * h * w
    if not conv.kept:
        return oh * ow * h * w <= DEPTHWISE_DENSE_MAX and elements <= DEPTHWISE_DENSE_ELEMENTS
    if n > 1:
        bound = min(n * DEPTHWISE_DENSE_KEPT_IMAGE, DEPTHWISE_DENSE_KEPT_MAX)
    else:
        bound = DEPTHWISE_DENSE_ELEMENTS
    if oh * ow * h * w <= DEPTHWISE_DENSE_MAX and elements <= bound:
        return True
    taps = conv.weight_shape[2] * conv.weight_shape[3]
    if n > 1 and h * w <= DEPTHWISE_DENSE_FEW * taps and elements <= bound:
        return True
    window = buffers.path == "window" and tuple(conv.strides) == (1, 1)
    return (
        window
        and DEPTHWISE_DENSE_FEW > 0
        and h * w <= DEPTHWISE_DENSE_WINDOW_FEW * taps
        and elements <= DEPTHWISE_DENSE_KEPT_MAX
    )


def _tile(
    c: int,
    kernel: tuple[int, int],
    out_hw: tuple[int, int],
    strides: Sequence[int],
    dilation: Sequence[int],
) -> tuple[int, tuple[int, int], int] | None:
    """The "tiled" path's tile size T, the (rows, cols) of the input rectangle a tile reads,
    and the scratch elements an image and channel take (the padded input, the patches, the
    products, the tiles' whole plane); None when no tile size fits both ``TILED_ELEMENTS`` and
    the im2col buffer that the op's workspace rule counts (so that the path always fits the
    planned workspace)."""
    (kh, kw), (oh, ow) = kernel, out_hw
    (sh, sw), (dh, dw) = strides, dilation
    for t in TILE_SIZES:
        ph, pw = (t - 1) * sh + (kh - 1) * dh + 1, (t - 1) * sw + (kw - 1) * dw + 1
        if c * ph * pw * t * t > TILED_ELEMENTS:
            continue
        th, tw = -(-oh // t), -(-ow // t)
        padded = ((th - 1) * t * sh + ph) * ((tw - 1) * t * sw + pw)
        need = padded + th * tw * (ph * pw + 2 * t * t)
        if need <= kh * kw * oh * (ow * sw + (kw - 1) * dw):  # the rule's im2col term
            return t, (ph, pw), need
    return None


def _conv_tiled(
    data: np.ndarray,
    weight: np.ndarray,
    acc: np.ndarray,
    plan: _Plan,
    strides: Sequence[int],
    dilation: Sequence[int],
    layouts: ConstantLayouts,
    ws: Workspace,
) -> None:
    """The ``tiled`` path of a depthwise convolution with many taps: the zero-padded input
    rectangle the tiles read, every T x T tile's patch of it copied channel-major, one product
    batched over the channels by the one (patch, T * T) matrix of each channel
    (``_dense_matrices``, kept for a constant weight), the tiles laid back into the plane."""
    n, c = data.shape[:2]
    oh, ow = acc.shape[2:]
    t = plan.block
    dt = acc.dtype
    table = plan.table
    assert table is not None  # (made with the plan)
    ph = (t - 1) * strides[0] + (weight.shape[2] - 1) * dilation[0] + 1
    pw = (t - 1) * strides[1] + (weight.shape[3] - 1) * dilation[1] + 1
    th, tw = -(-oh // t), -(-ow // t)
    matrices = layouts.get(
        weight, ("tiled", t, dt), lambda wt: _dense_matrices(wt, table, ph * pw, t * t, dt)
    )
    x = _region(data, plan.rows, plan.cols, 0, dt, ws)
    tiles = windows(x, (ph, pw), (t * strides[0], t * strides[1]), (1, 1), (th, tw))
    patches = ws.empty((c, n, th, tw, ph, pw), dt)
    np.copyto(patches, tiles.transpose(1, 0, 2, 3, 4, 5))
    res = ws.empty((c, n * th * tw, t * t), dt)
    _matmul(patches.reshape(c, n * th * tw, ph * pw), matrices, res)
    laid = res.reshape(c, n, th, tw, t, t).transpose(1, 0, 2, 4, 3, 5)
    if (th * t, tw * t) == (oh, ow):
        np.copyto(acc.reshape(n, c, th, t, tw, t), laid)
        return
    plane = ws.empty((n, c, th, t, tw, t), dt)
    np.copyto(plane, laid)
    np.copyto(acc, plane.reshape(n, c, th * t, tw * t)[:, :, :oh, :ow])


def _conv_tapsum(
    data: np.ndarray,
    weight: np.ndarray,
    acc: np.ndarray,
    plan: _Plan,
    strides: Sequence[int],
    dilation: Sequence[int],
    layouts: ConstantLayouts,
    ws: Workspace,
) -> None:
    """The "tapsum" path (``conv_tapsum.py``): the zero-padded region the kept taps read, with
    one extra row, and their weights (kept for a constant weight), summed tap by tap."""
    dt = acc.dtype
    x = _region(data, plan.rows, plan.cols, 1, dt, ws)
    wt = layouts.get(weight, ("tapsum", plan.taps, dt), lambda w: tapsum_weights(w, plan.taps, dt))
    offsets = tapsum_offsets(plan.taps, x.shape[3], (dilation[0], dilation[1]))
    conv_tapsum(x, wt, offsets, acc, (plan.images, plan.block), ws)


def _conv_row(
    data: np.ndarray,
    weight: np.ndarray,
    acc: np.ndarray,
    plan: _Plan,
    strides: Sequence[int],
    dilation: Sequence[int],
    layouts: ConstantLayouts,
    ws: Workspace,
) -> None:
    """The ``row`` path (see ``ROW_PATH``): the one input row the taps read (``plan.rows``),
    copied zero-padded where they reach past it (else viewed in place), its (N, C, KW, OW)
    windows copied into one buffer, multiplied by the (O, C * KW) weights of the kept taps
    straight into ``acc`` (N, O, 1, OW), one product an image."""
    _row_runner(data.shape, weight, acc, plan, strides, dilation, layouts)(data, acc, ws)


#: A path prepared for one set of shapes and a weight: ``runner(data, acc, ws)``.
_Runner = Callable[[np.ndarray, np.ndarray, Workspace], None]


def _row_runner(
    data_shape: tuple[int, ...],
    weight: np.ndarray,
    acc: np.ndarray,
    plan: _Plan,
    strides: Sequence[int],
    dilation: Sequence[int],
    layouts: ConstantLayouts,
) -> _Runner:
    """``_conv_row`` with what the shapes and the weight fix computed once: the row's padding,
    the windows' strides and the weights' layout. A kept weight's runner is kept per shape
    (``_PREPARED_PATHS``): at one image that was ~2.2 us of a (1, 32, 1, 16) x (32, 32, 1, 3)
    convolution's 8.4 (session 42); the same numpy calls, the same bits."""
    n, c, _, w = data_shape
    o, ow, dt = weight.shape[0], acc.shape[3], acc.dtype
    kw = plan.taps[3] - plan.taps[2]
    row = plan.rows[0]
    left, right = plan.cols
    inside = left >= 0 and right <= w
    a, b = max(left, 0), min(right, w)
    taps = plan.taps
    wt = layouts.get(weight, ("grouped", taps, 1, dt), lambda x: _tap_weights(x, taps, 1, dt))[0]
    step = dt.itemsize
    tap_steps = (step * dilation[1], step * strides[1])
    window_shape, padded = (n, c, kw, ow), (n, c, right - left)
    rows, products = ((c * kw, ow), (o, ow)) if n == 1 else ((n, c * kw, ow), (n, o, ow))

    def runner(data: np.ndarray, acc: np.ndarray, ws: Workspace) -> None:
        if inside and data.dtype == dt and data.flags.c_contiguous:
            base, offset = data, (row * w + left) * step  # the windows of data itself
        else:
            base, offset = ws.empty(padded, dt), 0
            if a > left:
                base[:, :, : a - left].fill(0)
            if b < right:
                base[:, :, max(b, a) - left :].fill(0)
            if a < b:
                np.copyto(base[:, :, a - left : b - left], data[:, :, row, a:b])
        # numpy's constructor checks that the view stays inside base (the plan's columns hold
        # every tap's reach)
        sn, sc = base.strides[:2]
        windows_view = np.ndarray(window_shape, dt, base, offset, (sn, sc, *tap_steps))
        buf = ws.empty(window_shape, dt)
        np.copyto(buf, windows_view)
        _matmul(wt, buf.reshape(rows), acc.reshape(products))

    return runner


#: The paths prepared once per shape for a kept weight (``conv2d``'s ``run``), by plan name.
_PREPARED_PATHS: dict[str, Callable[..., _Runner]] = {"row": _row_runner}


def _ran_prepared(
    runners: dict[tuple[Any, ...], _Runner],
    key: tuple[Any, ...],
    operands: tuple[np.ndarray, np.ndarray, np.ndarray],
    plan: _Plan,
    steps: tuple[Sequence[int], Sequence[int]],
    ws: Workspace,
    layouts: ConstantLayouts,
) -> bool:
    """Run a kept weight's convolution by its path prepared for these shapes (``runners``, by
    plan ``key``; made on the first call) when the plan's path has one and the path sums into
    ``out`` itself (not float16 data, a C-contiguous ``out``); False when it does not."""
    data, weight, out = operands
    prepare = _PREPARED_PATHS.get(plan.path)
    if prepare is None or data.dtype == F16 or not out.flags.c_contiguous:
        return False
    runner = runners.get(key)  # one lookup: another thread may clear the dict
    if runner is None:
        runner = prepare(data.shape, weight, out, plan, *steps, layouts)
        if len(runners) >= PLANS_MAX:
            runners.clear()
        runners[key] = runner
    runner(data, out, ws)
    return True


#: The paths of one group or depthwise convolutions (their plan holds all they need), by
#: their plan's name.
_PLANNED_PATHS = {
    "tiled": _conv_tiled,
    "dense": _conv_dense,
    "last": _depthwise_last,
    "rows": _depthwise_rows,
    "last_im2col": _conv_last_im2col,
    "gather": _conv_gather,
    "tapsum": _conv_tapsum,
    "row": _conv_row,
}


def _conv_einsum(
    data: np.ndarray,
    weight: np.ndarray,
    acc: np.ndarray,
    groups: int,
    pad: tuple[int, int, int, int],
    strides: Sequence[int],
    dilation: Sequence[int],
    layouts: ConstantLayouts,
) -> None:
    """The contraction without im2col, for an output row whose buffer would pass the bound:
    ``np.einsum`` of the (padded, bounded by ``PAD_FACTOR``) input's windows per group."""
    o, cg, kh, kw = weight.shape
    x = _pad_hw(data, pad, 0, acc.dtype)
    dt = acc.dtype
    wt = layouts.get(weight, ("astype", dt), lambda w: w.astype(dt, copy=False))
    win = windows(x, (kh, kw), strides, dilation, acc.shape[2:])
    og = o // groups  # groups <= o here, so the loop is bounded by the output's channels
    for g in range(groups):
        np.einsum(
            "nchwij,ocij->nohw",
            win[:, g * cg : (g + 1) * cg],
            wt[g * og : (g + 1) * og],
            out=acc[:, g * og : (g + 1) * og],
        )


@register_kernel("nn.conv2d_transpose")
def conv2d_transpose(attrs: Mapping[str, Any]) -> Kernel:
    """2-d transposed convolution, NCHW data x (C_in, C_out / groups, KH, KW) weight.

    One batched matmul per call (the groups are its batch axis) of the transposed weight by the
    input viewed as (N, G, C_in / G, H*W) gives every input pixel's contribution to each kernel
    tap, a (N, G, C_out / G, KH, KW, H, W) temporary; then one strided-slice add per tap
    scatters its plane into ``out`` (col2im), or a copy where the taps land on distinct outputs
    (the kernel within one stride), without zeroing ``out`` first where they cover it. Padding
    clips each tap's slice to the output, output_padding is rows/columns no tap reaches
    (zeros). Past ``SCRATCH_FACTOR`` the taps are multiplied one at a time, each over the input
    rows and columns that reach the output (a temporary of at most the output's size).
    float16 sums in float32, rounded once into ``out``; a strided ``out`` gets a contiguous
    result copied into it. The temporaries are carved from the call's workspace (its last
    argument, planned by the compiler from the op's rule, ``shape_funcs/ops/nn.py``
    ``conv2d_transpose_workspace``), else allocated.
    """
    strides, dilation, groups = attrs["strides"], attrs["dilation"], attrs["groups"]
    output_padding = attrs["output_padding"]
    top, left, bottom, right = padding4(attrs["padding"])

    def kernel(
        data: np.ndarray, weight: np.ndarray, out: np.ndarray, workspace: np.ndarray | None = None
    ) -> None:
        kind = "nn.conv2d_transpose"
        if data.ndim != 4 or weight.ndim != 4 or out.ndim != 4:
            raise ValueError(
                f"{kind}: expected NCHW data, a 4-d weight and an NCHW output, got "
                f"{data.shape}, {weight.shape} and {out.shape}"
            )
        if (
            len(strides) != 2
            or len(dilation) != 2
            or len(output_padding) != 2
            or min(*strides, *dilation) < 1
            or min(top, left, bottom, right, *output_padding) < 0
        ):
            raise ValueError(
                f"{kind}: strides {tuple(strides)} and dilation {tuple(dilation)} must be 2 "
                f"positive entries, padding {(top, left, bottom, right)} and output_padding "
                f"{tuple(output_padding)} non-negative"
            )
        n, c, h, w = data.shape
        ci, og, kh, kw = weight.shape
        if groups < 1 or c != ci or c % groups:
            raise ValueError(
                f"{kind}: data {data.shape} and weight {weight.shape} do not fit groups={groups}"
            )
        expected = (
            n,
            og * groups,
            (h - 1) * strides[0] - top - bottom + dilation[0] * (kh - 1) + output_padding[0] + 1,
            (w - 1) * strides[1] - left - right + dilation[1] * (kw - 1) + output_padding[1] + 1,
        )
        if out.shape != expected or min(h, w, kh, kw) < 1:
            raise ValueError(f"{kind}: output should be {expected}, got {out.shape}")
        if out.size == 0:
            return
        ws = Workspace(workspace, data, weight, out)
        acc = _accumulator(out, data.dtype == F16, ws)
        # Taps closer than the stride land on distinct outputs (the kernel fits in one stride,
        # UNet's and segmentation decoders' 2x2 at stride 2): each output takes at most one
        # contribution, copied; where every output takes one (the kernel is the stride and no
        # output_padding) nothing is zeroed first.
        reach = (dilation[0] * (kh - 1), dilation[1] * (kw - 1))
        distinct = reach[0] < strides[0] and reach[1] < strides[1]
        covered = distinct and tuple(strides) == (kh, kw) and tuple(dilation) == (1, 1)
        if c == 0 or not covered or any(output_padding):
            acc.fill(0)
        if c > 0:  # else no input channels: every sum is empty
            place = np.copyto if distinct else _add_into
            conv = ((top, left), strides, dilation)
            _transpose_taps(data, weight, acc, groups, conv, place, ws)
        if acc is not out:
            np.copyto(out, acc)

    return kernel


def _transpose_taps(
    data: np.ndarray,
    weight: np.ndarray,
    acc: np.ndarray,
    groups: int,
    conv: tuple[tuple[int, int], Sequence[int], Sequence[int]],
    place: Callable[[np.ndarray, np.ndarray], Any],
    ws: Workspace,
) -> None:
    """Lay every tap's contributions into the contiguous ``acc`` with ``place`` (see
    ``conv2d_transpose``): ``_add_into`` a zeroed ``acc`` where taps overlap, ``np.copyto``
    where each output takes at most one. ``conv`` is the padding's top and left, the strides
    and the dilation; the contributions (and float16 operands in float32) are carved from
    ``ws``."""
    begin, strides, dilation = conv
    n, c, h, w = data.shape
    _, og, kh, kw = weight.shape
    oh, ow = acc.shape[2:]
    cg = c // groups
    dt = acc.dtype
    if weight.dtype != dt:
        weight = _converted(weight, dt, ws)
    # (G, Og*KH*KW, Cg): the weight's groups, each transposed (a view; BLAS reads it so)
    wt = weight.reshape(groups, cg, og * kh * kw).swapaxes(1, 2)
    target = acc.reshape(n, groups, og, oh, ow, copy=False)
    spans = []
    for i in range(kh):
        rlo, rhi, r0 = _transpose_span(h, i, strides[0], dilation[0], begin[0], oh)
        if r0 is None:
            continue
        rows = slice(r0, r0 + (rhi - rlo - 1) * strides[0] + 1, strides[0])
        for j in range(kw):
            clo, chi, c0 = _transpose_span(w, j, strides[1], dilation[1], begin[1], ow)
            if c0 is not None:
                cols = slice(c0, c0 + (chi - clo - 1) * strides[1] + 1, strides[1])
                spans.append((i, j, rlo, rhi, clo, chi, rows, cols))
    if n * og * groups * kh * kw * h * w <= _scratch_limit(data, acc):
        x = data if data.dtype == dt else _converted(data, dt, ws)
        parts = ws.empty((n, groups, og * kh * kw, h * w), dt)
        _matmul(wt, x.reshape(n, groups, cg, h * w), parts)
        taps = parts.reshape(n, groups, og, kh, kw, h, w, copy=False)
        for i, j, rlo, rhi, clo, chi, rows, cols in spans:
            place(target[:, :, :, rows, cols], taps[:, :, :, i, j, rlo:rhi, clo:chi])
        return
    # One tap at a time: its input rows/columns land on distinct outputs, so each product is
    # at most the output's size.
    wt = wt.reshape(groups, og, kh, kw, cg)
    rooms = ws.empty((n * c * h * w,), dt), ws.empty((n * og * groups * h * w,), dt)
    for i, j, rlo, rhi, clo, chi, rows, cols in spans:
        pixels = (rhi - rlo) * (chi - clo)
        x = rooms[0][: n * c * pixels].reshape(n, c, rhi - rlo, chi - clo)
        np.copyto(x, data[:, :, rlo:rhi, clo:chi])
        part = rooms[1][: n * og * groups * pixels].reshape(n, groups, og, pixels)
        _matmul(wt[:, :, i, j], x.reshape(n, groups, cg, pixels), part)
        region = target[:, :, :, rows, cols]
        place(region, part.reshape(region.shape))


def _add_into(region: np.ndarray, contribution: np.ndarray) -> None:
    """``region += contribution``, in place."""
    np.add(region, contribution, region)


def _pool_setup(
    attrs: Mapping[str, Any],
) -> tuple[tuple[int, int], Sequence[int], tuple[int, int, int, int], Sequence[int]]:
    size = attrs["pool_size"]
    if len(size) == 1:
        size = (size[0], size[0])
    if len(size) != 2:
        raise ValueError(f"pool_size must have 2 entries, got {tuple(size)}")
    return (size[0], size[1]), attrs["strides"], padding4(attrs["padding"]), attrs["dilation"]


#: Pooling runs one ufunc call per tap (``_pool_taps``) when the output has at least this many
#: elements per call (KH * KW calls, or KH + KW when separable); below it one reduction of the
#: window view costs less than the calls' overhead. Measured: taps 1.2-12x faster from 1,024
#: outputs of a 3x3 pool up; the window 1.25x faster at 128 outputs of a 3x3 pool and at a
#: global-like 7x7 average over 512 7x7 maps.
TAPS_MIN_OUTPUT = 64

#: How separable pools (KH * KW > KH + KW) run: ``"padded"`` (when padded: a copy padded
#: with the op's identity, then every tap's whole strided view, rows first), ``"rows"`` (the
#: rows' clipped taps into an (N, C, OH, W) temporary, then the columns'), ``"cols"`` (the
#: columns' first, into (N, C, H, OW)). Rows first keeps the first pass's inner loops whole
#: contiguous rows and shrinks the data before the strided column pass.
POOL_SEPARABLE = "padded"
#: ``"padded"`` only up to this many input elements (a 1x16x64x64 map); beyond, "rows"
#: (4x64x56x56: 1,208 us padded against 1,023 rows first).
POOL_PAD_MAX = 1 << 16


#: Up to this many ufunc calls (3x3 separable, 2x2) the taps run whatever the output's size:
#: measured on 8 to 512 outputs, 1.3-2.5x faster than the window reduction.
TAPS_FEW_CALLS = 6


def _use_taps(size: tuple[int, int], out: np.ndarray) -> bool:
    calls = size[0] + size[1] if size[0] * size[1] >= size[0] + size[1] else size[0] * size[1]
    return calls <= TAPS_FEW_CALLS or int(out.size) >= TAPS_MIN_OUTPUT * calls


def _accumulate(
    dst: np.ndarray,
    src: np.ndarray,
    row_spans: Sequence[_Span],
    col_spans: Sequence[_Span],
    op: np.ufunc,
    fill: Any,
) -> None:
    """``op``-accumulate ``src[:, :, rows, cols]`` into ``dst[:, :, lo:hi, clo:chi]`` for each
    pair of spans; the outputs no pair reaches hold ``fill``. Two pairs that reach every output
    start ``dst`` in one call (``op`` of both), one such pair with a copy: no fill pass, and no
    copy pass either where there are two (3x3 pools at stride 2, one thread: 0.86-0.88x)."""
    oh, ow = dst.shape[2:]
    first = next(
        (
            (i, j, rsl, csl)
            for i, lo, hi, rsl in row_spans
            if (lo, hi) == (0, oh)
            for j, clo, chi, csl in col_spans
            if (clo, chi) == (0, ow)
        ),
        None,
    )
    second = None
    if first is None:
        dst.fill(fill)
    else:  # a pair that reaches every output starts the result (no fill pass)
        second = next(
            (
                (i, j, rsl, csl)
                for i, lo, hi, rsl in row_spans
                if (lo, hi) == (0, oh)
                for j, clo, chi, csl in col_spans
                if (clo, chi) == (0, ow) and (i, j) != first[:2]
            ),
            None,
        )
        if second is None:
            np.copyto(dst, src[:, :, first[2], first[3]])
        else:  # and with a second one, in one call (no copy pass either), in ``dst``'s dtype
            # (float16 data sums in float32: the loop of the inputs' dtype would round the pair)
            a, b = src[:, :, first[2], first[3]], src[:, :, second[2], second[3]]
            op(a, b, out=dst, dtype=dst.dtype)
    done = [pair[:2] for pair in (first, second) if pair is not None]
    for i, lo, hi, rsl in row_spans:
        for j, clo, chi, csl in col_spans:
            if (i, j) in done:
                continue
            region = dst[:, :, lo:hi, clo:chi]
            op(region, src[:, :, rsl, csl], out=region)


def _pool_taps(
    data: np.ndarray,
    acc: np.ndarray,
    size: tuple[int, int],
    strides: Sequence[int],
    dilation: Sequence[int],
    pad: tuple[int, int, int, int],
    op: np.ufunc,
    fill: Any,
    ws: Workspace,
) -> tuple[np.ndarray, np.ndarray]:
    """``op``-accumulate each tap's strided view of ``data`` into ``acc`` where it lands (the
    rest of ``acc`` holds ``fill``); returns how many taps reach each output row and column.
    The temporaries are carved from ``ws``.

    Max and sum are separable: when KH * KW >= KH + KW (2x2 and up), the rows' taps are
    accumulated first into an (N, C, OH, W) temporary, then its columns' taps into ``acc``:
    KH + KW calls instead of KH * KW (1.3-2.3x faster at 3x3, measured), and the second pass
    reads the first one's smaller result (2x2 at stride 2, session 36: max 0.51-0.67x, average
    0.66-0.75x on 1x64x112x112 to 8x8x128x128, 0.94-0.97x on 16x16 maps); see
    ``POOL_SEPARABLE`` for the order and the padded copy. Where two taps reach every output of
    a pass, the pass starts with one call of ``op`` on both (``_accumulate``)."""
    h, w = data.shape[2:]
    oh, ow = acc.shape[2:]
    row_spans = _spans(h, oh, size[0], strides[0], dilation[0], pad[0])
    col_spans = _spans(w, ow, size[1], strides[1], dilation[1], pad[1])
    separable = size[0] * size[1] >= size[0] + size[1]
    if separable and POOL_SEPARABLE == "padded" and any(pad) and data.size <= POOL_PAD_MAX:
        # a copy padded with ``fill`` (bounded by PAD_FACTOR, checked by _padded_shape): every
        # tap's view is whole, no clipping; rows first, as below
        x = _pad_hw(data, pad, fill, acc.dtype, ws)
        wp = x.shape[3]
        row_taps = [
            slice(i * dilation[0], i * dilation[0] + (oh - 1) * strides[0] + 1, strides[0])
            for i in range(size[0])
        ]
        col_taps = [
            slice(j * dilation[1], j * dilation[1] + (ow - 1) * strides[1] + 1, strides[1])
            for j in range(size[1])
        ]
        tmp = ws.empty((*data.shape[:2], oh, wp), acc.dtype)
        op(x[:, :, row_taps[0]], x[:, :, row_taps[1]], out=tmp)
        for rs in row_taps[2:]:
            op(tmp, x[:, :, rs], out=tmp)
        op(tmp[..., col_taps[0]], tmp[..., col_taps[1]], out=acc)
        for cs in col_taps[2:]:
            op(acc, tmp[..., cs], out=acc)
    elif separable and POOL_SEPARABLE != "cols":
        tmp = ws.empty((*data.shape[:2], oh, w), acc.dtype)
        _accumulate(tmp, data, row_spans, [(0, 0, w, slice(0, w))], op, fill)
        _accumulate(acc, tmp, [(0, 0, oh, slice(0, oh))], col_spans, op, fill)
    elif separable:
        tmp = ws.empty((*data.shape[:3], ow), acc.dtype)
        _accumulate(tmp, data, [(0, 0, h, slice(0, h))], col_spans, op, fill)
        _accumulate(acc, tmp, row_spans, [(0, 0, ow, slice(0, ow))], op, fill)
    else:
        _accumulate(acc, data, row_spans, col_spans, op, fill)
    return (
        _axis(h, oh, size[0], strides[0], dilation[0], pad[0])[1],
        _axis(w, ow, size[1], strides[1], dilation[1], pad[1])[1],
    )


def _lowest(dtype: np.dtype[Any]) -> Any:
    """The value that never wins a max: -inf, or an integer type's least value."""
    if dtype.kind == "f":
        return -np.inf
    if dtype.kind == "b":
        return False
    return np.iinfo(dtype).min


@register_kernel("nn.max_pool2d")
def max_pool2d(attrs: Mapping[str, Any]) -> Kernel:
    """Max pooling (NCHW), windows dilated by ``dilation``: ``np.maximum`` of each tap's
    strided view into ``out`` where it lands (clipped, or over a -inf-padded copy of a small
    input), so padding never wins (a window of padding only is -inf). Few outputs per tap:
    one ``np.max`` over the window view of the -inf-padded input (a temporary bounded by
    ``PAD_FACTOR``)."""
    size, strides, pad, dilation = _pool_setup(attrs)

    def kernel(data: np.ndarray, out: np.ndarray, workspace: np.ndarray | None = None) -> None:
        shape = _padded_shape("nn.max_pool2d", data, pad, out)
        oh, ow = _check_hw("nn.max_pool2d", shape, size, strides, dilation, out)
        if out.size == 0:
            return
        ws = Workspace(workspace, data, out)
        if _use_taps(size, out):
            lowest = _lowest(out.dtype)
            _pool_taps(data, out, size, strides, dilation, pad, np.maximum, lowest, ws)
            return
        x = _pad_hw(data, pad, _lowest(data.dtype), None, ws)
        np.max(windows(x, size, strides, dilation, (oh, ow)), axis=(4, 5), out=out)

    return kernel


@register_kernel("nn.avg_pool2d")
def avg_pool2d(attrs: Mapping[str, Any]) -> Kernel:
    """Average pooling (NCHW), padding excluded from the count: the sums of each window's
    real taps (windows dilated by ``dilation``; one ``np.add`` of each tap's strided view where
    it lands) divided by their number, the outer product of the rows' and the columns' counts.
    Few outputs per tap: one ``np.sum`` over the window view of the zero-padded input (bounded
    by ``PAD_FACTOR``). float16 sums into a float32 result, rounded once into ``out``."""
    size, strides, pad, dilation = _pool_setup(attrs)

    def kernel(data: np.ndarray, out: np.ndarray, workspace: np.ndarray | None = None) -> None:
        shape = _padded_shape("nn.avg_pool2d", data, pad, out)
        oh, ow = _check_hw("nn.avg_pool2d", shape, size, strides, dilation, out)
        if out.size == 0:
            return
        ws = Workspace(workspace, data, out)
        acc = _accumulator(out, data.dtype == F16, ws)
        h, w = data.shape[2:]
        if _use_taps(size, out):
            rows, cols = _pool_taps(data, acc, size, strides, dilation, pad, np.add, 0, ws)
        else:
            x = _pad_hw(data, pad, 0, None, ws)
            win = windows(x, size, strides, dilation, (oh, ow))
            np.sum(win, axis=(4, 5), dtype=acc.dtype, out=acc)
            rows = _axis(h, oh, size[0], strides[0], dilation[0], pad[0])[1]
            cols = _axis(w, ow, size[1], strides[1], dilation[1], pad[1])[1]
        counts = np.multiply.outer(rows, cols).astype(np.float64)
        np.divide(acc, counts, acc, casting="unsafe")
        if acc is not out:
            np.copyto(out, acc)

    return kernel
