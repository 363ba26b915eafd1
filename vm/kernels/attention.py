"""The attention kernel: ``softmax(q @ k^T * scale + mask, axis=-1) @ v`` in one call.

Layout: each operand is first permuted by its ``*_axes`` attribute (``None``: as given), which
is a numpy view, never a copy: the head split ``(B, S, H, D) -> (B, H, S, D)`` and the
transposed key of an exported model are read in place, and so is the result, written through
the inverse permutation of ``out_axes`` (the head merge). After the permutations the operands
are ``(..., S_q, D)``, ``(..., S_k, D)``, ``(..., S_k, Dv)``, the leading axes broadcasting as
numpy's matmul does (grouped-query attention's shared kv heads can be a 1-axis); ``mask`` is
additive, of the operands' dtype, broadcast to the scores ``(..., S_q, S_k)``.

Steps: the scores by one batched matmul (BLAS; ``blas_threads.matmul``) and the scale applied in
place; then, for many rows where the scores' range allows (``_one_shift``: finite scores within
``SHIFT_RANGE``, an ordinary mask), one shift serves every row: the mask and the shift added in
one pass, exp, the row sums by one matrix-vector product, the product by ``v`` into ``out``
and each of its rows divided by its sum. Elsewhere the mask is added and the rows take the
``nn.softmax`` kernel's arithmetic (``row_softmax``: one shift again when the sums' range
allows, as for a mask as large as the scores, T5's position bias; else each row its own
maximum), then the product by ``v``, so a row whose every score is ``-inf`` gives NaN as the
unfused program does. All agree with the unfused program within float rounding (``tests/vm/
test_attention_softmax.py``).

The scores are the kernel's one temporary, ``prod(leading) * S_q * S_k`` elements. It is
bounded: past ``SCORES_MAX_BYTES`` (``SCORES_ALONE_BYTES`` where the kernel works alone: a block
then stays in the L2 cache) the leading axes are processed in blocks (outermost first),
so a long sequence never allocates more than the bound (unless one ``(S_q, S_k)`` matrix is
larger by itself). It is carved from the call's workspace (its last argument: scratch the
compiler plans from the op's rule, ``shape_funcs/ops/nn.py`` ``attention_workspace``, every
block in turn in the same bytes) when there is one with room, else allocated (a kernel called
on its own; small scores of products below ``blas_threads.LOW``, where numpy's matmul
allocates: ``NUMPY_SCORES_BYTES``).

``nan_to_zero``: after the softmax, its NaNs become 0 (exporters' ``where(p != p, 0, p)``
after the softmax: a fully masked row gives zeros, not NaN).

float16: computed in float32 (the operands are converted, a copy each) and rounded once into
``out``, as the softmax kernel does.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..worker_thread import use_threads
from .blas_threads import LOW
from .blas_threads import matmul as _matmul
from .elementwise import SHARED_UNARY
from .registry import Kernel, register_kernel
from .row_softmax import ONE_SHIFT_MIN_ROWS, SHIFT_RANGE, ones_column, softmax_rows
from .workspace import Workspace

#: The largest scores block the kernel allocates at once (bytes): 16 MiB, a (1, 8, 512, 1024)
#: float32 block, well past the sizes where a block's matmuls stop paying their dispatch.
SCORES_MAX_BYTES = 1 << 24
#: The bound instead where the kernel works alone (``worker_thread.use_threads()`` False: a
#: batch split's piece, a process pinned to one core): a block's scores then stay in the core's
#: L2 cache (2 MiB here) through the scale, the exp, the sums and the product by ``v``, where a
#: 10 MB block went through memory at each pass. Measured alone (session 34, interleaved, medians
#: of 7), 1 MiB against 16 MiB: (4, 4, 400, 16) 0.85x, (1, 12, 512, 64) 0.91x, (2, 8, 256, 64)
#: 0.88x, (8, 4, 128, 32) 0.88x, (4, 4, 64, 32) 0.96x (one block either way); 512 KiB measured
#: as 1 MiB. With the worker thread the large blocks stay: their matmuls and exp are shared
#: with it, which small blocks fall below (1 MiB: 0.92-1.15x there).
SCORES_ALONE_BYTES = 1 << 20

#: Scores below this many bytes of products below ``blas_threads.LOW`` are numpy's own
#: allocation (a decode step's, tens of bytes to kilobytes); larger ones are carved from the
#: workspace (a BERT encoder's (4, 4, 64, 64): 256 KiB a call, fresh pages whenever the C
#: allocator had returned the last call's).
NUMPY_SCORES_BYTES = 1 << 16

#: A mask row whose largest value is past this in magnitude takes the per-row path. The unfused
#: program adds the mask before it shifts, rounding the scores to the mask's ulp (2^-15 at 256
#: in float32); one shift adds ``mask - c`` and keeps their bits. Past this bound the two
#: would differ by more than float rounding: a row masked entirely with ``finfo.min`` is
#: uniform in the unfused program (every score rounds to ``finfo.min``). Real masks' row
#: maxima are 0 (padding, causal: a row keeps a key) or a small bias.
MASK_ROW_LIMIT = 256.0
#: The one-shift path is taken when the mask has at most this fraction of the scores' elements.
MASK_SIZE_FRACTION = 4

_F16 = np.dtype(np.float16)
_exp = SHARED_UNARY["exp"]


def _view(x: np.ndarray, axes: Sequence[int] | None) -> np.ndarray:
    return x if axes is None else x.transpose(axes)


def _inverse(axes: Sequence[int] | None) -> tuple[int, ...] | None:
    if axes is None:
        return None
    inv = [0] * len(axes)
    for i, a in enumerate(axes):
        inv[a] = i
    return tuple(inv)  # numpy's transpose takes a tuple as it is, a list it converts


def _is_zero_scalar(mask: np.ndarray) -> bool:
    """A 0-d zero mask (what the rewrite passes when there is none): adding it is skipped."""
    return mask.ndim == 0 and not mask


def _softmax_rows(s: np.ndarray) -> np.ndarray:
    """Softmax along the last axis of the 2-d scores, in place (``row_softmax``: one shift
    for every row where their range allows, as ``nn.softmax``'s kernel). Returns the rows'
    reciprocal sums: NaN for a row holding a NaN, and only there."""
    return softmax_rows(s, s)


def _one_shift(scores: np.ndarray, mask: np.ndarray | None) -> np.ndarray | None:
    """What to add to the scaled ``scores`` so that one ``exp`` needs no per-row maximum, or
    None where the rows need their own (then ``_softmax_rows``).

    Softmax is the same whatever constant a row is shifted by, as long as ``exp`` neither
    overflows nor loses the row's largest terms. With ``hi``/``lo`` the scores' largest and
    smallest values (before the mask) and ``r_i`` the largest value of the mask's row ``i``,
    ``c_i = hi + r_i`` bounds row ``i`` of ``scores + mask`` from above and lies within
    ``hi - lo`` of its maximum (the mask's largest entry lands on some score >= ``lo``): for
    ``hi - lo <= SHIFT_RANGE`` every row's largest ``exp`` is at least ``exp(-SHIFT_RANGE)``,
    a normal float, and none overflows. The returned term is ``mask - c`` (``-hi`` without a
    mask), one broadcast add. Per-row maxima cost more than the rest of the softmax on short
    rows (numpy reduces a row of 128 at ~70 ns: 280 us for a BERT layer's (8, 4, 128, 128)
    scores, against 30 us for the two whole-array reductions here).

    The rows take their own maxima when a score is not finite or the range is wider (NaN and
    infinities behave as in the unfused program there), when a mask row's largest value is
    not finite or so large that adding it first, as the unfused program does, rounds the
    scores (``MASK_ROW_LIMIT``: a row masked entirely with ``finfo.min`` is uniform there), and
    when the mask is about as large as the scores (its row maxima would cost what the scores'
    do). The caller takes this path only from ``ONE_SHIFT_MIN_ROWS`` rows."""
    if mask is not None and mask.size * MASK_SIZE_FRACTION > scores.size:
        return None  # decided before the scores are reduced: that would be wasted
    hi = np.maximum.reduce(scores, axis=None)
    lo = np.minimum.reduce(scores, axis=None)
    if not hi - lo <= SHIFT_RANGE:  # NaN, an infinity or a wide range
        return None
    if mask is None:
        shift: np.ndarray = np.negative(hi)
        return shift
    row_max = np.maximum.reduce(mask, axis=-1, keepdims=True)
    if not (np.absolute(row_max) <= MASK_ROW_LIMIT).all():
        return None
    term: np.ndarray = np.subtract(mask, row_max)
    np.subtract(term, hi, term)
    return term


def _softmax_times_v(scores: np.ndarray, term: np.ndarray, v: np.ndarray, out: np.ndarray) -> None:
    """``softmax(scores + term) @ v`` into ``out`` for the term of ``_one_shift``: the scores
    exponentiated in place, the product by ``v`` and then each row of the result divided by
    its row's sum (``Dv`` numbers a row instead of ``S_k``). The sums are one matrix-vector
    product (BLAS: 19 us for 4,096 rows of 128, where numpy's row reduction takes 146)."""
    s_k = scores.shape[-1]
    np.add(scores, term, scores)
    _exp(scores, scores)
    flat = scores.reshape(-1, s_k)
    sums = np.empty((flat.shape[0], 1), scores.dtype)
    _matmul(flat, ones_column(s_k, scores.dtype), sums)
    np.reciprocal(sums, sums)
    _matmul(scores, v, out)
    np.multiply(out, sums.reshape((*scores.shape[:-1], 1)), out)


def _attend(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    mask: np.ndarray | None,
    scale: float,
    out: np.ndarray,
    nan_to_zero: bool = False,
    workspace: np.ndarray | None = None,
) -> None:
    """The whole computation for operands already permuted, of one rank (leading 1-axes where
    they broadcast), into ``out``; blocks along the outermost leading axis past the bound. The
    scores are carved from ``workspace`` when it has room (the op's planned scratch)."""
    s_k = k.shape[-2]
    # scores: (rows of out) * s_k elements; out.size // Dv, not a loop over the leading dims
    # (a decode step's attention is ~40 us of numpy calls: Python around them shows)
    if out.ndim > 2 and out.size // out.shape[-1] * s_k * out.itemsize > _scores_bound():
        _attend_blocks(q, k, v, mask, scale, out, nan_to_zero, workspace)
        return
    kt = k.swapaxes(-1, -2)
    if (
        q.shape[-2] * q.shape[-1] * s_k <= LOW
        and out.size // out.shape[-1] * s_k * out.itemsize < NUMPY_SCORES_BYTES
    ):
        # small scores of a product below the thread policy's bound (blas_threads.LOW): numpy
        # allocates them and broadcasts the leading axes in C
        scores = np.matmul(q, kt)
    else:
        # The operands have one rank (the kernel made it so) and broadcast (their matmul
        # checks): each leading dim is the one that is not 1.
        lead = tuple(b if a == 1 else a for a, b in zip(q.shape[:-2], k.shape[:-2], strict=True))
        # planned memory when the caller passes it: per call, megabytes of fresh pages
        # whenever the C allocator had returned the last call's scores to the system
        ws = Workspace(workspace, q, k, v, out, *(() if mask is None else (mask,)))
        scores = ws.empty((*lead, q.shape[-2], s_k), out.dtype)
        _matmul(q, kt, scores)
    if scores.size:
        if scale != 1.0:
            np.multiply(scores, scale, scores)
        term = _one_shift(scores, mask) if scores.size >= ONE_SHIFT_MIN_ROWS * s_k else None
        if term is not None:
            _softmax_times_v(scores, term, v, out)
            return
        if mask is not None:
            np.add(scores, mask, scores)
        # one row a matrix row: the reductions run over a 2-d view (the scores are
        # contiguous), cheaper than over the leading axes
        inverse = _softmax_rows(scores.reshape(-1, s_k))
        if nan_to_zero and np.isnan(inverse).any():
            # where(p != p, 0, p) of the unfused program, elementwise; only a row whose sum
            # is NaN holds a NaN (see _softmax_rows), so the others are not searched
            np.copyto(scores, 0, where=np.isnan(scores))
    # With S_k == 0 the scores are empty and the result is 0 (an empty sum), as numpy's.
    _matmul(scores, v, out)


def _scores_bound() -> int:
    """The scores block's bound in bytes: ``SCORES_MAX_BYTES``, or ``SCORES_ALONE_BYTES`` where
    no worker thread shares the work."""
    return SCORES_MAX_BYTES if use_threads() else SCORES_ALONE_BYTES


def _attend_blocks(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    mask: np.ndarray | None,
    scale: float,
    out: np.ndarray,
    nan_to_zero: bool,
    workspace: np.ndarray | None,
) -> None:
    """``_attend`` for scores past the bound (``_scores_bound``): blocks of the outermost
    leading axis (the next one when it is 1), each within the bound, one after the other in
    the same ``workspace``."""
    n = out.shape[0]
    if n == 1:  # every operand's axis is 1 there: the next axis is the one to block
        m = None if mask is None else mask[0]
        _attend(q[0], k[0], v[0], m, scale, out[0], nan_to_zero, workspace)
        return
    size = out.size // out.shape[-1] * k.shape[-2] * out.itemsize
    step = max(1, n * _scores_bound() // size)

    def part(x: np.ndarray | None, i: int, j: int) -> np.ndarray | None:
        return x if x is None or x.shape[0] == 1 else x[i:j]

    for i in range(0, n, step):
        j = min(n, i + step)
        qb, kb, vb = part(q, i, j), part(k, i, j), part(v, i, j)
        assert qb is not None and kb is not None and vb is not None
        _attend(qb, kb, vb, part(mask, i, j), scale, out[i:j], nan_to_zero, workspace)


@register_kernel("nn.attention")
def attention(attrs: Mapping[str, Any]) -> Kernel:
    """``softmax(q @ k^T * scale + mask, axis=-1) @ v`` with the operands permuted by their
    ``*_axes`` (views) and the result written through ``out_axes``' inverse (see the module
    doc)."""
    scale = float(attrs["scale"])
    q_axes, k_axes, v_axes = attrs["q_axes"], attrs["k_axes"], attrs["v_axes"]
    out_inverse = _inverse(attrs["out_axes"])
    nan_to_zero = bool(attrs.get("nan_to_zero", False))

    def kernel(
        q: np.ndarray,
        k: np.ndarray,
        v: np.ndarray,
        mask: np.ndarray,
        out: np.ndarray,
        workspace: np.ndarray | None = None,
    ) -> None:
        target = _view(out, out_inverse)
        if target.size == 0:
            return
        ops = [_view(q, q_axes), _view(k, k_axes), _view(v, v_axes)]
        m: np.ndarray | None = None if _is_zero_scalar(mask) else mask
        rank = max(ops[0].ndim, ops[1].ndim, ops[2].ndim)
        if not ops[0].ndim == ops[1].ndim == ops[2].ndim:  # leading 1-axes where they broadcast
            ops = [x.reshape((1,) * (rank - x.ndim) + x.shape) for x in ops]
        if m is not None and m.ndim < rank:
            m = m.reshape((1,) * (rank - m.ndim) + m.shape)
        if out.dtype == _F16:
            ops = [x.astype(np.float32) for x in ops]
            m = None if m is None else m.astype(np.float32)
            result = np.empty(target.shape, np.float32)
            _attend(ops[0], ops[1], ops[2], m, scale, result, nan_to_zero, workspace)
            np.copyto(target, result)
            return
        _attend(ops[0], ops[1], ops[2], m, scale, target, nan_to_zero, workspace)

    return kernel
