"""``Value``: a tensor being built, with numpy-like operators.

A Value is an IR expression and its (symbolic) type. Operators build op calls through
``trace.apply``, so each is type-checked at once: ``x + y`` with shapes ``(batch, 3)`` and
``(batch, 4)`` raises ``BuildError`` at the line that wrote it. Python numbers become constants
of the other operand's dtype (``x * 2`` with a float32 ``x`` multiplies by ``2f``).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import sympy

import ir
from ir import Expr, TensorType

from .location import fail
from .trace import apply


def apply_one(op_name: str, *args: Any, **attrs: Any) -> Value:
    """``trace.apply`` for an op with one result: the Value (operators, methods, indexing)."""
    out = apply(op_name, *args, **attrs)
    assert isinstance(out, Value), f"{op_name} has more than one result"
    return out


class Value:
    """A tensor-valued expression under construction. Build with operators and ``ds.*``."""

    __slots__ = ("expr", "type")
    __array_priority__ = 1000  # numpy defers to our operators: ``np_array + value`` is ours

    def __init__(self, expr: Expr, type: TensorType) -> None:
        self.expr = expr
        """The IR node that computes the value (untyped; see ``trace.py``)."""
        self.type = type
        """Its inferred type: a symbolic shape and a dtype."""

    # ---- the type ---------------------------------------------------------------------------
    @property
    def shape(self) -> tuple[ir.Dim, ...]:
        """The symbolic shape: ints and sympy expressions (``(batch, 512)``)."""
        return self.type.shape

    @property
    def dtype(self) -> str:
        """The element type (``"float32"``)."""
        return self.type.dtype

    @property
    def ndim(self) -> int:
        """The rank."""
        return self.type.rank

    def __repr__(self) -> str:
        return f"Value({self.type})"

    def __bool__(self) -> bool:
        raise fail(
            "the truth of a tensor is not known while building; use ds.cond(pred, then_fn, "
            "else_fn) or ds.where(cond, x, y)"
        )

    def __iter__(self) -> Iterator[Value]:
        raise fail("cannot iterate over a tensor while building; index it (x[i]) instead")

    def __len__(self) -> int:
        raise fail("len() of a tensor being built; use x.shape[0] (a symbolic dim)")

    __hash__ = object.__hash__  # == builds an op; identity keeps Values usable as dict keys

    # ---- arithmetic -------------------------------------------------------------------------
    def __add__(self, other: Any) -> Value:
        return apply_one("add", self, other)

    def __radd__(self, other: Any) -> Value:
        return apply_one("add", other, self)

    def __sub__(self, other: Any) -> Value:
        return apply_one("subtract", self, other)

    def __rsub__(self, other: Any) -> Value:
        return apply_one("subtract", other, self)

    def __mul__(self, other: Any) -> Value:
        return apply_one("multiply", self, other)

    def __rmul__(self, other: Any) -> Value:
        return apply_one("multiply", other, self)

    def __truediv__(self, other: Any) -> Value:
        return apply_one("divide", self, other)

    def __rtruediv__(self, other: Any) -> Value:
        return apply_one("divide", other, self)

    def __floordiv__(self, other: Any) -> Value:
        return apply_one("floor_divide", self, other)

    def __rfloordiv__(self, other: Any) -> Value:
        return apply_one("floor_divide", other, self)

    def __mod__(self, other: Any) -> Value:
        return apply_one("mod", self, other)

    def __rmod__(self, other: Any) -> Value:
        return apply_one("mod", other, self)

    def __pow__(self, other: Any) -> Value:
        return apply_one("power", self, other)

    def __rpow__(self, other: Any) -> Value:
        return apply_one("power", other, self)

    def __matmul__(self, other: Any) -> Value:
        return apply_one("nn.matmul", self, other)

    def __rmatmul__(self, other: Any) -> Value:
        return apply_one("nn.matmul", other, self)

    def __neg__(self) -> Value:
        return apply_one("negative", self)

    def __pos__(self) -> Value:
        return self

    def __abs__(self) -> Value:
        return apply_one("abs", self)

    # ---- comparisons and logic (bool results) -----------------------------------------------
    def __eq__(self, other: Any) -> Value:  # type: ignore[override]
        return apply_one("equal", self, other)

    def __ne__(self, other: Any) -> Value:  # type: ignore[override]
        return apply_one("not_equal", self, other)

    def __lt__(self, other: Any) -> Value:
        return apply_one("less", self, other)

    def __le__(self, other: Any) -> Value:
        return apply_one("less_equal", self, other)

    def __gt__(self, other: Any) -> Value:
        return apply_one("greater", self, other)

    def __ge__(self, other: Any) -> Value:
        return apply_one("greater_equal", self, other)

    def __and__(self, other: Any) -> Value:
        return apply_one("logical_and", self, other)

    def __rand__(self, other: Any) -> Value:
        return apply_one("logical_and", other, self)

    def __or__(self, other: Any) -> Value:
        return apply_one("logical_or", self, other)

    def __ror__(self, other: Any) -> Value:
        return apply_one("logical_or", other, self)

    def __invert__(self) -> Value:
        return apply_one("logical_not", self)

    # ---- layout -----------------------------------------------------------------------------
    def __getitem__(self, key: Any) -> Value:
        from .indexing import getitem

        return getitem(self, key)

    def reshape(self, *shape: Any) -> Value:
        """``reshape`` to ints (``0`` copies the input's dim, ``-1`` is inferred) or dims of
        the inputs' shapes: ``x.reshape(-1, 4)``, ``x.reshape((-1, 4))``,
        ``f.reshape(*x.shape)``, ``x.reshape(n // 2, -1)``."""
        if len(shape) == 1 and isinstance(shape[0], (list, tuple)):
            shape = tuple(shape[0])
        if not all(
            isinstance(d, sympy.Expr) or (isinstance(d, int) and not isinstance(d, bool))
            for d in shape
        ):
            raise fail(
                "reshape takes ints (0 copies the input's dim, -1 is inferred) or dims of the "
                f"inputs' shapes (x.shape[0], n // 2), got {shape}"
            )
        return apply_one("reshape", self, newshape=list(shape))

    def transpose(self, *axes: Any) -> Value:
        """Permute the axes (reverse them when none are given), as numpy."""
        if len(axes) == 1 and isinstance(axes[0], (list, tuple)):
            axes = tuple(axes[0])
        return apply_one("transpose", self, axes=list(axes) if axes else None)

    @property
    def T(self) -> Value:
        """The axes reversed."""
        return apply_one("transpose", self)

    def astype(self, dtype: str) -> Value:
        """A ``cast`` to ``dtype``."""
        return apply_one("cast", self, dtype=dtype)

    def flatten(self) -> Value:
        """The elements as a 1-d tensor."""
        return apply_one("reshape", self, newshape=[-1])

    def squeeze(self, axis: int | Sequence[int] | None = None) -> Value:
        """Remove 1-dims (all of them when ``axis`` is None)."""
        return apply_one("squeeze", self, axis=[axis] if isinstance(axis, int) else axis)

    # ---- reductions -------------------------------------------------------------------------
    def sum(self, axis: Any = None, keepdims: bool = False) -> Value:
        """Sum over ``axis`` (an int, a list, or None for all)."""
        return apply_one("sum", self, axis=_axes(axis), keepdims=keepdims)

    def mean(self, axis: Any = None, keepdims: bool = False) -> Value:
        """Mean over ``axis``."""
        return apply_one("mean", self, axis=_axes(axis), keepdims=keepdims)

    def max(self, axis: Any = None, keepdims: bool = False) -> Value:
        """Maximum over ``axis``."""
        return apply_one("max", self, axis=_axes(axis), keepdims=keepdims)

    def min(self, axis: Any = None, keepdims: bool = False) -> Value:
        """Minimum over ``axis``."""
        return apply_one("min", self, axis=_axes(axis), keepdims=keepdims)

    def prod(self, axis: Any = None, keepdims: bool = False) -> Value:
        """Product over ``axis``."""
        return apply_one("prod", self, axis=_axes(axis), keepdims=keepdims)

    def argmax(self, axis: Any = None, keepdims: bool = False) -> Value:
        """Index of the maximum over ``axis`` (int64)."""
        return apply_one("argmax", self, axis=_axes(axis), keepdims=keepdims)

    def argmin(self, axis: Any = None, keepdims: bool = False) -> Value:
        """Index of the minimum over ``axis`` (int64)."""
        return apply_one("argmin", self, axis=_axes(axis), keepdims=keepdims)


def _axes(axis: Any) -> Any:
    return list(axis) if isinstance(axis, tuple) else axis
