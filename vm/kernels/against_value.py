"""``maximum`` and ``minimum`` of an array and one value, at the speed of two arrays.

numpy 2.4's ``maximum``, ``minimum``, ``fmax`` and ``fmin`` loops take a scalar operand (a
stride-0 one: a Python number, a 0-d array, a broadcast size-1 array) ~4-5x slower than an
array operand; its ``add`` or ``multiply`` do not (the SIMD loops of the extrema cover two
contiguous arrays only). Measured on 32 Ki float32 elements: ``np.maximum(x, 0)`` 10.5 us,
``np.maximum(x, zeros)`` 2.0-2.4 us, ``np.add(x, 0)`` 1.9 us; int64 9.2 against 4.9 us. ReLU is
``maximum(x, 0)``, on most activations of a CNN.

So the value is read from a block of ``VALUE_BLOCK`` copies of it, made once per dtype and value
and kept read-only for every thread: an array as large as the operand up to the block, and the
block again for each slice of a larger contiguous operand (64 Ki float32 copies are 256 KiB: in
a core's L2 while the slices stream by, where an operand-sized copy would be one more stream
from memory). Measured against the scalar operand (float32, medians): 4 Ki elements 1.9 -> 1.1
us, 32 Ki 10.6 -> 2.9, 256 Ki 80 -> 27, 2 Mi 634 -> 210, 8 Mi 2,622 -> 1,379. The same
elementwise comparison either way, so the same bits (NaN payloads and signed zeros included).
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

#: Copies of the value in a block (see the module doc): the largest slice one ufunc call takes.
VALUE_BLOCK = 1 << 16
#: Blocks kept at most (per dtype and value; a model has a few: 0 for ReLU, its clamps' bounds).
BLOCKS_MAX = 32

#: Below this many elements the plain call is faster (``nn.relu`` on float32, medians: 64
#: elements 0.63 us plain, 0.76 through the block; 1 Ki 0.95 and 1.20; 4 Ki 1.89 and 1.42).
SMALL = 1 << 11

_blocks: dict[tuple[np.dtype, int | bytes], np.ndarray] = {}
_blocks_lock = threading.Lock()


def _block(value: Any, dtype: np.dtype) -> np.ndarray:
    """The kept read-only block of ``VALUE_BLOCK`` copies of ``value`` (a Python int, exact in
    ``dtype``, or a 0-d array of ``dtype``). Keyed without making an array for an int: the
    lookup is most of the call on a small tensor."""
    key = (dtype, value if isinstance(value, int) else value.tobytes())
    block = _blocks.get(key)
    if block is None:
        block = np.full(VALUE_BLOCK, value, dtype)
        block.flags.writeable = False
        with _blocks_lock:
            if len(_blocks) >= BLOCKS_MAX:
                _blocks.clear()
            _blocks[key] = block
    return block


def against_value(
    ufunc: np.ufunc, x: np.ndarray, value: Any, out: np.ndarray, value_first: bool = False
) -> None:
    """``ufunc(x, value, out=out)`` (``ufunc(value, x, out=out)`` with ``value_first``: the
    order decides which NaN a pair of them gives) for ``np.maximum`` or ``np.minimum``, the
    value read from a kept block of copies (see the module doc). ``value`` is a
    Python int exact in ``out``'s dtype (as 0 always is) or a 0-d array of that dtype, and
    ``x`` must have ``out``'s dtype and shape: anything else, tensors below ``SMALL`` elements
    (where the lookup costs what the block saves), and operands the
    slices cannot cut (a larger operand that is not C-contiguous, or that overlaps ``out``
    without being laid out as it), runs as the plain call, as does any other ufunc: ``fmax``
    and ``fmin`` pick between signed zeros differently in their two loops (float32 and
    float64), so a block would change their bits."""
    n = out.size
    if (
        n < SMALL
        or (ufunc is not np.maximum and ufunc is not np.minimum)
        or x.shape != out.shape
        or x.dtype != out.dtype
        or not (isinstance(value, int) or getattr(value, "dtype", None) == out.dtype)
    ):
        _plain(ufunc, x, value, out, value_first)
        return
    block = _block(value, out.dtype)
    if n <= VALUE_BLOCK:
        _plain(ufunc, x, block[:n].reshape(out.shape), out, value_first)
        return
    if not (x.flags.c_contiguous and out.flags.c_contiguous) or (
        x is not out and np.may_share_memory(x, out) and not same_view(x, out)
    ):
        _plain(ufunc, x, value, out, value_first)
        return
    src, dst = x.reshape(-1), out.reshape(-1)
    for i in range(0, n, VALUE_BLOCK):
        j = min(i + VALUE_BLOCK, n)
        _plain(ufunc, src[i:j], block[: j - i], dst[i:j], value_first)


def _plain(ufunc: np.ufunc, x: np.ndarray, value: Any, out: np.ndarray, value_first: bool) -> None:
    if value_first:
        ufunc(value, x, out=out)
    else:
        ufunc(x, value, out=out)


def same_view(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether ``a`` and ``b`` are the same elements in the same layout (the planner may pass
    an operand's storage as the output under another array object)."""
    return (
        a.dtype == b.dtype
        and a.shape == b.shape
        and a.strides == b.strides
        and a.__array_interface__["data"][0] == b.__array_interface__["data"][0]
    )
