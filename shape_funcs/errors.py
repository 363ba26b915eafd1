"""Errors raised by shape functions and their registry, and the wording of failed facts.

Both modes of a shape function (see ``context.py``) word a violated fact the same way, so the
wording lives here, in one function, ``fact_failure``. A context raises a ShapeError carrying only
the failed fact (the *detail*); whoever called the shape function knows the op and its inputs
and adds them with ``ShapeError.in_op``. Doing it there, and only on failure, keeps the success
path free of string building.
"""

from __future__ import annotations

from dynshape_errors import DynShapeError


class ShapeError(DynShapeError):
    """A shape fact does not hold: the inputs of an op have incompatible shapes or values.

    Raised at run time by the concrete mode, and at compile time when the symbolic mode refutes
    a fact. The message names the op, the fact (which input, which axis) with its dims, and the
    inputs, e.g. ``add: cannot broadcast a.shape[1] with b.shape[1]: 3 vs 4 (inputs: a (2, 3),
    b (2, 4))``.
    """

    def __init__(self, detail: str, op_name: str | None = None, inputs: str | None = None):
        self.detail = detail
        """The failed fact, worded without the op (``expected k <= x.shape[1], got 5 > 3``)."""
        self.op_name = op_name
        """The op whose shape function failed, once known."""
        self.inputs = inputs
        """The op's inputs as text (``a (2, 3), b (2, 4)``), once known."""
        text = detail if op_name is None else f"{op_name}: {detail}"
        if inputs is not None:
            text = f"{text} (inputs: {inputs})"
        super().__init__(text)

    def in_op(self, op_name: str, inputs: str) -> ShapeError:
        """This error with the op and its inputs named (unchanged if they already are)."""
        if self.op_name is not None:
            return self
        return ShapeError(self.detail, op_name, inputs)


class ShapeFuncRegistryError(DynShapeError):
    """A shape function is registered twice, or looked up for an op that has none."""


#: The relation that holds when a comparison fails, for the ``got ...`` part of a message.
NEGATION = {"==": "!=", "!=": "==", "<": ">=", "<=": ">", ">": "<=", ">=": "<"}

#: Every kind of fact a context checks: the six comparisons, divisibility and broadcasting.
FACT_KINDS = (*NEGATION, "divides", "broadcast")


def fact_failure(kind: str, a: object, b: object, what: str, args: tuple[object, ...] = ()) -> str:
    """The words for a violated fact, shared by the concrete and the symbolic modes.

    ``kind`` is a comparison (``a kind b``), ``"divides"`` (``a`` divides ``b``) or
    ``"broadcast"`` (``a`` and ``b`` broadcast); ``what`` names the fact in terms of the op's
    inputs (``"x.shape[1] == w.shape[1]"``, ``"a.shape[1] with b.shape[1]"``), completed by
    ``what.format(*args)`` when there are ``args``.
    """
    what = format_what(what, args)
    if kind == "broadcast":
        return f"cannot broadcast {what}: {a} vs {b}"
    if kind == "divides":
        return f"expected {what}, got {b} not divisible by {a}"
    return f"expected {what}, got {a} {NEGATION[kind]} {b}"


def format_what(what: str, args: tuple[object, ...]) -> str:
    """``what`` completed by ``args``, the lazy template of a context call (see context.py)."""
    return what.format(*args) if args else what


def fact_text(kind: str, a: object, b: object) -> str:
    """The fact itself as a formula over the dims (``n == m or n == 1 or m == 1``)."""
    if kind == "broadcast":
        return f"{a} == {b} or {a} == 1 or {b} == 1"
    if kind == "divides":
        return f"{b} % {a} == 0"
    return f"{a} {kind} {b}"
