"""Softmax along the rows of a matrix: one shift for all rows where their range allows.

The textbook softmax subtracts each row's maximum before ``exp``. numpy reduces short rows
slowly: ``np.maximum.reduce`` along rows of 64 costs ~60 ns a row (4x4x64x64 float32 scores: 63
us), ``np.add.reduce`` ~22 ns, where the whole array's maximum takes 3 us and the row sums as
one matrix-vector product (BLAS) 3.5 us. Softmax is the same whatever constant a row is shifted
by, as long as ``exp`` neither overflows nor loses the row's largest terms: with ``hi`` and
``lo`` the whole matrix's largest and smallest values and ``hi - lo <= SHIFT_RANGE``, shifting
every row by ``hi`` keeps each row's largest ``exp`` at least ``exp(-SHIFT_RANGE)``, a normal
float, and every term normal. So from ``ONE_SHIFT_MIN_ROWS`` rows the two whole-array reductions
decide: within the range, one shift, ``exp``, the sums by a product with a column of ones, one
reciprocal of the sums and a multiply; else (a NaN, an infinity, a ``-inf`` mask, a wider
range) each row takes its own maximum, so a row whose every value is ``-inf`` gives NaN as the
textbook formula does. The two differ by float rounding only (the shift's subtraction and the
order of the sums). Used by ``nn.softmax`` and by ``nn.attention`` where its mask is as large
as its scores (T5's position bias).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .blas_threads import matmul as _matmul
from .elementwise import SHARED_UNARY

#: The widest range (largest minus smallest value) one shift serves: ``exp(-64)`` is 1.6e-28,
#: far inside float32's normal range.
SHIFT_RANGE = 64.0
#: The fewest rows for which one shift is tried: its whole-array reductions (and, in
#: ``nn.attention``, the mask's row maxima) and the matrix-vector product cost ~15-20 us more
#: calls than the per-row path, which pays ~100 ns a row (one attention call, float32,
#: medians: (2, 4, 32, 64) 256 rows 67 against 83 us, (4, 4, 64, 64) 199 against 289; a
#: decode step's (1, 4, 1, 17) 28 against 11, (8, 4, 1, 2049) 515 against 500: few rows, and
#: long ones, reduce fast).
ONE_SHIFT_MIN_ROWS = 256

_exp = SHARED_UNARY["exp"]
_ones: dict[tuple[int, np.dtype[Any]], np.ndarray] = {}


def ones_column(n: int, dtype: np.dtype[Any]) -> np.ndarray:
    """A read-only ``(n, 1)`` column of ones (kept: the row sums' vector)."""
    col = _ones.get((n, dtype))
    if col is None:
        col = np.ones((n, 1), dtype)
        col.flags.writeable = False
        _ones[(n, dtype)] = col  # the same value from any thread: a race is harmless
    return col


def softmax_rows(x: np.ndarray, out: np.ndarray) -> np.ndarray:
    """Softmax of each row of the C-contiguous 2-d ``x`` into ``out`` (the same shape; may be
    ``x``). Returns the rows' reciprocal sums, ``(rows, 1)``: NaN for a row holding a NaN (a
    result is NaN only in such a row: elsewhere the shifted ``exp`` is in ``[0, 1]`` and the
    sum at least a normal float)."""
    rows, n = x.shape
    if rows >= ONE_SHIFT_MIN_ROWS and n and x.dtype.kind == "f":
        hi = np.maximum.reduce(x, axis=None)
        # as Python floats: inf - inf is NaN without numpy's warning
        if float(hi) - float(np.minimum.reduce(x, axis=None)) <= SHIFT_RANGE:  # not NaN, inf
            np.subtract(x, hi, out)
            _exp(out, out)
            total = np.empty((rows, 1), out.dtype)
            _matmul(out, ones_column(n, out.dtype), total)
            return _scaled(out, total)
    np.subtract(x, np.maximum.reduce(x, axis=-1, keepdims=True), out)
    _exp(out, out)  # shared with the worker thread on large tensors
    return _scaled(out, np.add.reduce(out, axis=-1, keepdims=True))


def _scaled(out: np.ndarray, total: np.ndarray) -> np.ndarray:
    """``out`` times the reciprocals of the row sums ``total`` (one reciprocal a row, then a
    multiply over the matrix: half a divide's time at (256, 256)); returns the reciprocals."""
    np.reciprocal(total, total)
    np.multiply(out, total, out)
    return total
