"""The context protocol through which a shape function states facts, and its concrete mode.

A shape function never compares dims itself (``if a == b`` would be a sympy relational at
compile time, and ``max(a, b)`` would be wrong for unordered expressions). It asks its context:

- ``check_equal``, ``check``, ``check_divides``: a fact that must hold;
- ``broadcast``: numpy broadcasting of two dims;
- ``decide``: the truth of a comparison, for branching (``None`` when it cannot be known);
- ``max``, ``min``: the larger or smaller of two dims;
- ``fresh``: a new unknown dim, for results that depend on values not known yet;
- ``is_known``: whether a data-dependent input's value is available.

Two contexts implement the protocol. ``ConcreteContext`` (here) works on ints at run time: a
violated fact raises ShapeError, and the methods are a comparison each. The symbolic context
lives in the compiler (``dynshape/inference/symbolic_context.py``): it proves, refutes, or
records facts as run-time checks. This module must never import sympy: the run time does not
have it.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from .errors import ShapeError, fact_failure

#: A dimension: an ``int`` at run time; an ``int`` or a ``sympy.Expr`` at compile time.
#: (Spelled ``Any`` because this package must not import sympy, even for annotations.)
Dim = Any


class ShapeContext(Protocol):
    """What a shape function may ask about dims; implemented by both modes.

    Every ``what`` names the fact in terms of the op's inputs. Like a logging call, it is a
    ``str.format`` template completed by the trailing ``*args`` (``"x.shape[{}] == 1", axis``)
    only when the fact fails (concretely) or is recorded (symbolically): a passing check at run
    time builds no string.
    """

    symbolic: bool
    """True at compile time (dims may be sympy expressions), False at run time."""

    def check_equal(self, a: Dim, b: Dim, what: str, *args: object) -> None:
        """Require ``a == b``; ``what`` reads as that fact, e.g. ``"x.shape[1] == w.shape[1]"``."""
        ...

    def check(self, a: Dim, op: str, b: Dim, what: str, *args: object) -> None:
        """Require ``a op b`` for ``op`` in ``== != < <= > >=``; ``what`` reads as that fact."""
        ...

    def check_divides(self, divisor: Dim, value: Dim, what: str, *args: object) -> None:
        """Require ``value % divisor == 0`` (0 divides only 0); ``what`` reads as that fact."""
        ...

    def decide(self, a: Dim, op: str, b: Dim) -> bool | None:
        """The truth of ``a op b``: always a bool concretely; ``None`` if symbolically unknown."""
        ...

    def broadcast(self, a: Dim, b: Dim, what: str, *args: object) -> Dim:
        """The numpy broadcast of two dims; ``what`` names them (``"a.shape[0] with b.shape[1]"``).

        Symbolically, a pair that cannot be decided is recorded as the check ``a == b or a == 1
        or b == 1`` and the result is the dim that is correct whenever that check holds.
        """
        ...

    def max(self, a: Dim, b: Dim) -> Dim:
        """The larger of two dims (a symbolic ``Max`` when the order is unknown)."""
        ...

    def min(self, a: Dim, b: Dim) -> Dim:
        """The smaller of two dims (a symbolic ``Min`` when the order is unknown)."""
        ...

    def floor_div(self, a: Dim, b: Dim) -> Dim:
        """``a // b``, rounded down as Python's ``//`` (``b`` positive). Symbolically the same
        ``floor(a / b)`` as ``//`` on a sympy dim, built without sympy's assumption queries
        where it can (``ir.roundings``): ``//`` works too, only slower to compile."""
        ...

    def fresh(self, hint: str) -> Dim:
        """A new unknown dim (printed ``?``); only the symbolic mode can make one."""
        ...

    def is_known(self, value: Any) -> bool:
        """True if a data-dependent input's value is available (a numpy array)."""
        ...


@dataclass(frozen=True)
class UnknownValue:
    """A data-dependent input whose value is not known at compile time: only its type is."""

    shape: tuple[Dim, ...]
    """The value's shape (a shape tensor of shape ``(3,)`` holds a rank-3 shape)."""
    dtype: str = "int64"
    """The value's dtype."""


#: The comparisons of shape facts, by name: the one table below ``ir`` (the VM's ``check``
#: uses it too; ``ir.dims.COMPARE`` is the same table for the layers that may import ``ir``).
COMPARE: dict[str, Callable[[Any, Any], bool]] = {
    "==": operator.eq,
    "!=": operator.ne,
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
}


class ConcreteContext:
    """The run-time mode: dims are ints, facts are checked, violations raise ShapeError.

    It has no state, so one instance (``CONCRETE``) serves every call and nothing is allocated
    per call. Its errors carry only the failed fact; ``concrete_shapes`` adds the op and the
    inputs when it catches one.
    """

    __slots__ = ()
    symbolic = False

    def check_equal(self, a: int, b: int, what: str, *args: object) -> None:
        """Raise ShapeError unless ``a == b``."""
        if a != b:
            raise ShapeError(fact_failure("==", a, b, what, args))

    def check(self, a: int, op: str, b: int, what: str, *args: object) -> None:
        """Raise ShapeError unless ``a op b``."""
        if not COMPARE[op](a, b):
            raise ShapeError(fact_failure(op, a, b, what, args))

    def check_divides(self, divisor: int, value: int, what: str, *args: object) -> None:
        """Raise ShapeError unless ``divisor`` divides ``value`` (0 divides only 0)."""
        if (value % divisor if divisor else value) != 0:
            raise ShapeError(fact_failure("divides", divisor, value, what, args))

    def decide(self, a: int, op: str, b: int) -> bool:
        """The truth of ``a op b`` (always known for ints)."""
        return COMPARE[op](a, b)

    def broadcast(self, a: int, b: int, what: str, *args: object) -> int:
        """numpy broadcasting of two dims; raises ShapeError if they are different and not 1."""
        if a == b or b == 1:
            return a
        if a == 1:
            return b
        raise ShapeError(fact_failure("broadcast", a, b, what, args))

    def max(self, a: int, b: int) -> int:
        """The larger of two ints."""
        return a if a >= b else b

    def min(self, a: int, b: int) -> int:
        """The smaller of two ints."""
        return a if a <= b else b

    def floor_div(self, a: int, b: int) -> int:
        """``a // b``."""
        return a // b

    def fresh(self, hint: str) -> int:
        """Never valid at run time: every dim is known there. Raises ShapeError."""
        raise ShapeError(
            f"internal: a shape function asked for an unknown dim ({hint}) at run time"
        )

    def is_known(self, value: Any) -> bool:
        """Always True: every value is known at run time."""
        return True


#: The one concrete context; it is stateless.
CONCRETE = ConcreteContext()
