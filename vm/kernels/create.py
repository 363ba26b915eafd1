"""Creation kernels: zeros, ones, full and arange (their shapes come from the caller)."""

from __future__ import annotations

import numpy as np

from shape_funcs import ShapeError
from shape_funcs.ops.create import arange_length, arange_operands

from .registry import register_table


def _zeros(out: np.ndarray) -> None:
    """Zeros (no inputs; ``out.fill``)."""
    out.fill(0)


def _ones(out: np.ndarray) -> None:
    """Ones (no inputs; ``out.fill``)."""
    out.fill(1)


def _full(fill_value: np.ndarray, out: np.ndarray) -> None:
    """``fill_value`` (a scalar tensor) everywhere, converted to the output's dtype."""
    np.copyto(out, fill_value, casting="unsafe")


def _arange(start: np.ndarray, stop: np.ndarray, step: np.ndarray, out: np.ndarray) -> None:
    """``np.arange(start, stop, step)`` in the output's dtype (scalar tensor inputs).

    ``np.arange`` has no ``out=``: it builds the values, then they are copied. The output's
    length was computed by the data-dependent shape function; the length the inputs give is
    computed first (scalar arithmetic) and a mismatch raises before anything is built, so the
    temporary is the output's size.
    """
    # The same scalars and length as the shape function, so that they agree to the element.
    try:
        length = arange_length(start, stop, step)
    except ShapeError as e:
        raise ValueError(f"arange: {e}") from e
    if (length,) != out.shape:
        raise ValueError(
            f"arange({start.item()}, {stop.item()}, {step.item()}) has "
            f"{length} values but the output has shape {out.shape}"
        )
    values = np.arange(*arange_operands(start, stop, step), dtype=out.dtype)
    if values.shape != out.shape:
        raise ValueError(
            f"arange({start.item()}, {stop.item()}, {step.item()}) has "
            f"{values.size} values but the output has shape {out.shape}"
        )
    np.copyto(out, values)


register_table({"zeros": _zeros, "ones": _ones, "full": _full, "arange": _arange})
