"""Values whose contents the importer knows: constants, and shapes computed from shapes.

An ONNX graph computes shapes with tensor ops (``Shape -> Gather -> Unsqueeze -> Concat ->
Reshape``). The importer runs such ops at import time on ``Known`` values: a numpy array whose
elements are numbers, or, for an integer array, dims (ints and sympy expressions of the input
dim symbols: ``Shape(x)`` of ``x: (batch, seq, 64)`` is ``[batch, seq, 64]``). So a reshape
gets ``newshape=[batch, seq, 4, 16]`` rather than a run-time shape tensor, and the program keeps
its symbolic shapes. A value that depends on tensor data is never ``Known``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import sympy

import ir


@dataclass(frozen=True, eq=False)
class Known:
    """A tensor whose elements are known at import time (see the module docstring).

    ``array`` holds numbers (a numeric dtype) or, when some element is symbolic, ints and
    sympy dims (``object`` dtype); ``dtype`` is the tensor's dtype in the IR's spelling
    (``int64`` for a shape), which an ``object`` array cannot tell. A float ``Known`` may hold
    dims as floats too (``float_dims.py``: ``Cast(Shape(x), float)``). An ``object`` array
    whose elements are all numbers is stored as a numeric one: a concrete ``[16]`` cut from a
    partly symbolic shape is a number, not a shape value.
    """

    array: np.ndarray
    dtype: str

    def __post_init__(self) -> None:
        array = self.array
        if not isinstance(array, np.ndarray):  # np.take of a 0-d index gives an element
            array = np.array(array, dtype=object)
        if array.dtype == object and all(_is_number(v) for v in array.flat):
            flat = [_number(v, self.dtype) for v in array.flat]
            array = np.array(flat, dtype=self.dtype).reshape(array.shape)
        object.__setattr__(self, "array", array)

    @staticmethod
    def of(values: Any, dtype: str) -> Known:
        """A known tensor of ``values`` (nested lists, numbers, dims), simplified to a numeric
        array when no element is symbolic."""
        array = np.array(values, dtype=object)
        if all(_is_number(v) for v in array.flat):
            return Known(array, dtype)  # numeric once built
        if np.dtype(dtype).kind == "f":  # dims as floats: expressions, not dims
            return Known(np.vectorize(_float_elem, otypes=[object])(array), dtype)
        return Known(np.vectorize(_dim, otypes=[object])(array), dtype)

    @property
    def symbolic(self) -> bool:
        """True if some element is a sympy dim, not a number."""
        return self.array.dtype == object

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.array.shape)

    def dims(self) -> list[ir.Dim]:
        """The elements as dims (ints or sympy expressions), flattened."""
        return [_dim(v) for v in self.array.flat]

    def numeric(self) -> np.ndarray | None:
        """The array when no element is symbolic, else None."""
        return None if self.symbolic else self.array


def _is_number(v: Any) -> bool:
    """A plain number: a Python or numpy number, or a sympy number (an integer, a rational)."""
    if isinstance(v, sympy.Basic):
        return bool(v.is_number)
    return isinstance(v, (int, float, bool, np.number, np.bool_))


def _number(v: Any, dtype: str) -> Any:
    """A number element as the Python number ``np.array(..., dtype)`` takes exactly."""
    if isinstance(v, sympy.Basic):
        return int(v) if v.is_Integer else float(v)
    return v


def _float_elem(v: Any) -> Any:
    return sympy.sympify(v) if isinstance(v, sympy.Basic) else v


def _dim(v: Any) -> ir.Dim:
    if isinstance(v, sympy.Basic):
        return int(v) if v.is_Integer else ir.check_dim(v)
    return int(v)
