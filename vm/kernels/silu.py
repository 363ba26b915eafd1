"""SiLU (``x * sigmoid(x)``, "swish") as one kernel, in cache-sized chunks.

The product as exported is two kernels: ``sigmoid`` (four numpy passes: ``x / 2``, ``tanh``,
``+ 1``, ``/ 2``) and the multiply, five passes over the tensor, each reading what the one
before wrote back to memory once the tensor outgrows the caches. With ``h = x / 2``,
``x * sigmoid(x) = h + h * tanh(h)``: four passes (``h``, ``tanh``, the product, the sum), run
over ``SILU_CHUNK`` elements at a time so that the three after the first read what is still in
the cache (design/vm.md, "SiLU as one kernel").

Accuracy: the same formula as the two kernels' (``sigmoid`` computes ``(1 + tanh(x / 2)) / 2``),
so the same behaviour: within a few float32 ulp of ``x * sigmoid(x)`` where that is not small,
and an absolute error below ``|x| * 2**-24`` where ``tanh(h)`` nears -1 (x below about -5:
``h + h * tanh(h)`` cancels, as ``1 + tanh(h)`` does in ``sigmoid``; below -17 both give 0
where the value is under ``|x| * 1e-7``). float16 is computed in float32 and rounded once.
"""

from __future__ import annotations

import numpy as np

from ..worker_thread import shared
from .registry import register_table
from .thread_scratch import scratch

#: Elements per chunk: the chunk of ``x``, its ``h`` and its ``tanh`` (float32: 3 x 128 KiB)
#: stay in a core's L2 between the four passes. Measured (session 37, one thread, inputs
#: rotated through 32 MB so that each call starts from memory, as in a model): against the
#: two kernels, 4x96x24x24 331 -> 238 us, 4x64x48x48 921 -> 619, 8x64x56x56 2,380 -> 1,636,
#: 4x160x12x12 126 -> 103, 1x64x32x32 88 -> 69; chunks of 16 Ki elements took 1.06-1.15x
#: the time of 32 Ki, of 8 Ki 1.24-1.30x, and the four passes over the whole tensor (no
#: chunks) 0.76-0.98x the two kernels' time.
SILU_CHUNK = 1 << 15
#: Elements from which the chunks are shared with the worker thread (``vm/worker_thread.py``;
#: the adaptive choice there keeps each size's bucket on one thread where help does not pay),
#: as the transcendental kernels share theirs (``elementwise.SHARED_MIN``).
SILU_THREAD_MIN = 1 << 16

_F16 = np.dtype(np.float16)


def _scratch(dtype: np.dtype) -> tuple[np.ndarray, ...]:
    """This thread's two ``SILU_CHUNK``-element scratch arrays of ``dtype`` (``h`` and ``t``;
    ``thread_scratch``)."""
    return scratch("silu", dtype, 2, SILU_CHUNK)


def _silu_chunk(x: np.ndarray, out: np.ndarray, h: np.ndarray, t: np.ndarray) -> None:
    """``silu`` of the flat chunk ``x`` into ``out`` (the same size; may be ``x``, which only
    the first pass reads); ``h`` and ``t`` are scratch of the computing dtype of at least that
    size (``h`` unused unless ``out`` is float16: then ``h`` is float32 and holds ``x / 2``)."""
    k = x.size
    t = t[:k]
    if out.dtype == _F16:
        h = h[:k]
        np.multiply(x, 0.5, h, dtype=np.float32)
    else:
        h = out
        np.multiply(x, 0.5, h)
    np.tanh(h, t)
    np.multiply(t, h, t)
    np.add(t, h, out)


def _silu(x: np.ndarray, out: np.ndarray) -> None:
    """``x * sigmoid(x)`` into ``out`` (see the module doc), in chunks of ``SILU_CHUNK``
    elements, shared with the worker thread from ``SILU_THREAD_MIN``: each chunk is computed
    the same way whichever thread takes it, so the bits do not depend on the sharing. Safe in
    place; a non-contiguous ``x`` is first copied into ``out``, a non-contiguous ``out`` gets
    the result of a contiguous array."""
    if x.shape != out.shape or x.dtype != out.dtype:
        raise ValueError(
            f"silu: input {x.dtype}{list(x.shape)} but output {out.dtype}{list(out.shape)}"
        )
    n = out.size
    if n == 0:
        return
    if not out.flags.c_contiguous:  # the chunks work on flat views of out
        whole = np.empty(out.shape, out.dtype)
        _silu(x, whole)
        np.copyto(out, whole)
        return
    if not x.flags.c_contiguous:
        np.copyto(out, x)
        x = out
    src, dst = x.reshape(-1), out.reshape(-1)
    work_dtype = np.dtype(np.float32) if out.dtype == _F16 else out.dtype
    if n <= SILU_CHUNK:  # one chunk: no closure
        _silu_chunk(src, dst, *_scratch(work_dtype))
        return
    chunks = iter(range(0, n, SILU_CHUNK))

    def work() -> None:
        h, t = _scratch(work_dtype)  # this thread's
        for i in chunks:
            _silu_chunk(src[i : i + SILU_CHUNK], dst[i : i + SILU_CHUNK], h, t)

    if n >= SILU_THREAD_MIN:
        shared(work, "silu", n)
    else:
        work()


register_table({"silu": _silu})
