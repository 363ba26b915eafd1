"""The attention kernel: ``softmax(q @ k^T * scale + mask, axis=-1) @ v`` in one call.

Layout: each operand is first permuted by its ``*_axes`` attribute (``None``: as given), which
is a numpy view, never a copy: the head split ``(B, S, H, D) -> (B, H, S, D)`` and the
transposed key of an exported model are read in place, and so is the result, written through
the inverse permutation of ``out_axes`` (the head merge). After the permutations the operands
are ``(..., S_q, D)``, ``(..., S_k, D)``, ``(..., S_k, Dv)``, the leading axes broadcasting as
numpy's matmul does (grouped-query attention's shared kv heads can be a 1-axis); ``mask`` is
additive, of the operands' dtype, broadcast to the scores ``(..., S_q, S_k)``.

Steps: the scores by one batched matmul (BLAS; ``blas_threads.matmul``), the scale and the mask
applied in place, the softmax in place (max-shifted, exp, sum, one reciprocal of the sums, a
multiply: the same arithmetic as the ``nn.softmax`` kernel, so a row whose every score is
``-inf`` gives NaN as the unfused program does), then one batched matmul into ``out``.

The scores are the kernel's one temporary, ``prod(leading) * S_q * S_k`` elements. It is
bounded: past ``SCORES_MAX_BYTES`` the leading axes are processed in blocks (outermost first),
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

from .blas_threads import LOW
from .blas_threads import matmul as _matmul
from .elementwise import SHARED_UNARY
from .registry import Kernel, register_kernel
from .workspace import Workspace

#: The largest scores block the kernel allocates at once (bytes): 16 MiB, a (1, 8, 512, 1024)
#: float32 block, well past the sizes where a block's matmuls stop paying their dispatch.
SCORES_MAX_BYTES = 1 << 24

#: Scores below this many bytes of products below ``blas_threads.LOW`` are numpy's own
#: allocation (a decode step's, tens of bytes to kilobytes); larger ones are carved from the
#: workspace (a BERT encoder's (4, 4, 64, 64): 256 KiB a call, fresh pages whenever the C
#: allocator had returned the last call's).
NUMPY_SCORES_BYTES = 1 << 16

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
    """Softmax along the last axis, in place; the arithmetic of ``nn.softmax``'s kernel.
    Returns the rows' reciprocal sums: NaN for a row holding a NaN (a result is NaN only in
    such a row: elsewhere the max-shifted ``exp`` is in ``[0, 1]`` and the sum ``>= 1``)."""
    np.subtract(s, np.maximum.reduce(s, axis=-1, keepdims=True), s)
    _exp(s, s)  # shared with the worker thread on large scores
    total = np.add.reduce(s, axis=-1, keepdims=True)
    np.reciprocal(total, total)
    np.multiply(s, total, s)
    return total


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
    if out.ndim > 2 and out.size // out.shape[-1] * s_k * out.itemsize > SCORES_MAX_BYTES:
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
    """``_attend`` for scores past ``SCORES_MAX_BYTES``: blocks of the outermost leading axis
    (the next one when it is 1), each within the bound, one after the other in the same
    ``workspace``."""
    n = out.shape[0]
    if n == 1:  # every operand's axis is 1 there: the next axis is the one to block
        m = None if mask is None else mask[0]
        _attend(q[0], k[0], v[0], m, scale, out[0], nan_to_zero, workspace)
        return
    size = out.size // out.shape[-1] * k.shape[-2] * out.itemsize
    step = max(1, n * SCORES_MAX_BYTES // size)

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
