"""Image ops: resize (an exporter's nearest upsampling by 2 with symbolic dims, and a linear
resize to a fixed size with align_corners), against plain numpy: ``repeat`` and ``np.interp``."""

from __future__ import annotations

import numpy as np
from harness import Case


def _interp_row(row: np.ndarray, at: np.ndarray, grid: np.ndarray) -> np.ndarray:
    return np.interp(at, grid, row)


def _align_corners(m: np.ndarray, sizes: tuple[int, int]) -> np.ndarray:
    """Linear interpolation through both corners, one axis after the other (``np.interp``)."""
    out = m.astype(np.float64)
    for axis, n_out in enumerate(sizes):
        n_in = out.shape[axis]
        at = np.arange(n_out) * (n_in - 1) / max(n_out - 1, 1)
        out = np.apply_along_axis(_interp_row, axis, out, at, np.arange(n_in))
    return out.astype(m.dtype)


CASES = [
    Case(
        name="resize_nearest_by_two_and_linear_align_corners",
        source="""
def @main(%x: Tensor[(n, c, h, w), float32], %m: Tensor[(h, w), float32]) {
  (resize(%x, sizes=[n, c, 2*h, 2*w], scales=[1.0, 1.0, 2.0, 2.0]), resize(%m, sizes=[5, 3], mode="linear", coordinate_transformation_mode="align_corners"))
}
""",
        reference=lambda x, m: (x.repeat(2, 2).repeat(2, 3), _align_corners(m, (5, 3))),
        bindings=[
            {"n": 0, "c": 1, "h": 1, "w": 2},
            {"n": 2, "c": 3, "h": 3, "w": 1},
            {"n": 1, "c": 2, "h": 4, "w": 5},
        ],
    ),
]
