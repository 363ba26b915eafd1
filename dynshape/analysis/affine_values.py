"""Integer values that are affine in their own index: which gathers only enumerate an axis.

Exporters gather a flattened mask at ``row * seq + column``, the row and the column numbers
built from shapes (``cumsum`` of ones, ``arange``, ``take(shape_of(x), k)``), broadcast
against each other and, by torch's dynamo exporter, joined and taken apart again. Such an
index reads every element of the gathered axis once, in order: the gather is a reshape.
``AffineValues.of(expr)`` gives ``Affine(offset, coefs)``, every entry of the value at index
``(i_0, ..., i_{r-1})`` being ``offset + sum(coefs[k] * i_k)`` for every binding of the dims,
or None when not known; ``enumerated_shape(take)`` gives the shape of the reshape a gather is,
or None.

Sound and incomplete like ``row_values`` (whose ``ValueBounds`` it asks for decided
conditions and for the field a ``take`` picks from a ``concatenate``): only the ops listed
here are read, on ``int32`` and ``int64`` values, whose arithmetic is taken not to wrap (the
values are built from dims of arrays that exist, as ``row_values`` takes them). An operand
broadcast along an axis contributes nothing there: its dim must be 1, or provably the
result's (a dim that might be 1 at run time while the result's is not is not read).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ir import Call, Constant, Expr, TensorType, Tuple

from .row_states import product
from .row_values import ValueBounds

#: The dtypes whose values are read (the index dtypes exporters write).
_INTEGERS = frozenset(["int32", "int64"])


@dataclass(frozen=True)
class Affine:
    """Every entry of a value as ``offset + sum(coefs[k] * i_k)`` over its index; dims (ints
    or sympy expressions), one coefficient per axis of the value."""

    offset: Any
    coefs: tuple[Any, ...]

    def is_constant(self) -> bool:
        """Whether every entry is ``offset`` (no coefficient is anything but 0)."""
        return all(c == 0 for c in self.coefs)  # (a sympy expression: only a plain 0)


class AffineValues:
    """The affine integer values of one function, read with the help of ``values`` (its
    ``ValueBounds``: definitions of let-bound vars, decided conditions, picked fields)."""

    def __init__(self, values: ValueBounds) -> None:
        self.values = values
        self._memo: dict[Expr, Affine | None] = {}

    def of(self, expr: Expr) -> Affine | None:
        """The affine form of the integer value ``expr``, or None when not known."""
        node = self.values.definition(expr)
        if node not in self._memo:
            self._memo[node] = self._compute(node)
        return self._memo[node]

    def enumerated_shape(self, take: Call) -> tuple[Any, ...] | None:
        """The shape ``take(data, index, axis)`` has when ``index`` (not a scalar) holds ``0,
        1, ..., n - 1`` in C order, ``n`` the length of the gathered axis (of ``data``
        flattened when ``axis`` is None): then the gather is a reshape of ``data`` to it.
        None otherwise."""
        data_ty, index_ty = take.args[0].ty, take.args[1].ty
        if not (isinstance(data_ty, TensorType) and isinstance(index_ty, TensorType)):
            return None
        if not index_ty.shape:  # one entry of a one-entry axis: a reshape, but no gain
            return None
        index = self.of(take.args[1])
        if index is None or not self._equal(index.offset, 0):
            return None
        shape = index_ty.shape
        stride: Any = 1
        for k in reversed(range(len(shape))):
            if shape[k] != 1 and not self._equal(index.coefs[k], stride):
                return None
            stride = stride * shape[k]
        axis = take.attrs.axis
        if axis is None:
            length = product(data_ty.shape)
            result: tuple[Any, ...] = tuple(shape)
        else:
            at = axis % len(data_ty.shape) if data_ty.shape else None
            if at is None:
                return None
            length = data_ty.shape[at]
            result = (*data_ty.shape[:at], *shape, *data_ty.shape[at + 1 :])
        return result if self._equal(length, stride) else None

    # -- the rules --------------------------------------------------------------------------

    def _equal(self, a: Any, b: Any) -> bool:
        return self.values.compare(a, "==", b) is True

    def _compute(self, node: Expr) -> Affine | None:
        if isinstance(node, Constant):
            return _constant(node.value)
        ty = node.ty
        if not isinstance(node, Call) or node.op is None or not isinstance(ty, TensorType):
            return None
        if ty.dtype not in _INTEGERS:
            return None
        rule = _RULES.get(node.op.name)
        return rule(self, node) if rule is not None else None

    def aligned(self, operand: Expr, shape: Sequence[Any]) -> Affine | None:
        """``operand``'s form broadcast to ``shape`` (aligned right): axes it lacks or has as
        1 contribute nothing; any other dim must be provably the result's."""
        form, ty = self.of(operand), operand.ty
        if form is None or not isinstance(ty, TensorType) or len(ty.shape) > len(shape):
            return None
        lead = len(shape) - len(ty.shape)
        coefs: list[Any] = [0] * lead
        for dim, target, coef in zip(ty.shape, shape[lead:], form.coefs, strict=True):
            if dim == 1:
                coefs.append(0)
            elif self._equal(dim, target):
                coefs.append(coef)
            else:
                return None
        return Affine(form.offset, tuple(coefs))

    def scalar(self, operand: Expr) -> Any | None:
        """The one value every entry of ``operand`` has, or None."""
        form = self.of(operand)
        return form.offset if form is not None and form.is_constant() else None


Rule = Callable[[AffineValues, Call], "Affine | None"]


def _shape(node: Expr) -> tuple[Any, ...]:
    ty = node.ty
    assert isinstance(ty, TensorType)
    return tuple(ty.shape)


def _constant(value: Any) -> Affine | None:
    """A constant whose entries step by one amount along each axis (one integer everywhere,
    a run ``a, a + d, a + 2d, ...``, a grid of them)."""
    a = np.asarray(value)
    if a.dtype.name not in _INTEGERS or a.size == 0:
        return None
    offset = int(a.flat[0])
    coefs = tuple(
        int(a[tuple(int(j == k) for j in range(a.ndim))]) - offset if a.shape[k] > 1 else 0
        for k in range(a.ndim)
    )
    grid = sum((c * i for c, i in zip(coefs, np.indices(a.shape), strict=True)), offset)
    return Affine(offset, coefs) if np.array_equal(a, grid) else None


def _fill(av: AffineValues, node: Call) -> Affine | None:
    name = node.op.name if node.op is not None else ""
    value = {"zeros": 0, "ones": 1}.get(name)
    if value is None:
        value = av.scalar(node.args[0])
    return None if value is None else Affine(value, (0,) * len(_shape(node)))


def _cumsum(av: AffineValues, node: Call) -> Affine | None:
    """Running sums of one value ``c`` along an axis: ``c * i`` (exclusive) or ``c * (i + 1)``."""
    c = av.scalar(node.args[0])
    axis = node.attrs.axis
    if c is None or node.attrs.reverse:
        return None
    rank = len(_shape(node))
    at = axis % rank
    coefs = tuple(c if k == at else 0 for k in range(rank))
    return Affine(0 if node.attrs.exclusive else c, coefs)


def _arange(av: AffineValues, node: Call) -> Affine | None:
    start, step = av.scalar(node.args[0]), av.scalar(node.args[2])
    return None if start is None or step is None else Affine(start, (step,))


def _cast(av: AffineValues, node: Call) -> Affine | None:
    source = node.args[0].ty
    if not isinstance(source, TensorType) or source.dtype not in _INTEGERS:
        return None
    return av.of(node.args[0])


def _expand_dims(av: AffineValues, node: Call) -> Affine | None:
    form = av.of(node.args[0])
    if form is None:
        return None
    rank = len(form.coefs)
    axis = node.attrs.axis
    at = axis + rank + 1 if axis < 0 else axis
    new = (0,) * node.attrs.num_newaxis
    return Affine(form.offset, (*form.coefs[:at], *new, *form.coefs[at:]))


def _relaid(av: AffineValues, node: Call) -> Affine | None:
    """``squeeze`` and ``reshape`` that only drop or insert 1-dims: the other dims, in order,
    provably the same."""
    form = av.of(node.args[0])
    if form is None:
        return None
    source = [(d, c) for d, c in zip(_shape(node.args[0]), form.coefs, strict=True) if d != 1]
    target = _shape(node)
    kept = [k for k, d in enumerate(target) if d != 1]
    if len(kept) != len(source):
        return None
    coefs: list[Any] = [0] * len(target)
    for k, (dim, coef) in zip(kept, source, strict=True):
        if not av._equal(dim, target[k]):
            return None
        coefs[k] = coef
    return Affine(form.offset, tuple(coefs))


def _broadcast_to(av: AffineValues, node: Call) -> Affine | None:
    return av.aligned(node.args[0], _shape(node))


def _transpose(av: AffineValues, node: Call) -> Affine | None:
    form = av.of(node.args[0])
    axes = node.attrs.axes
    if form is None:
        return None
    order = range(len(form.coefs))[::-1] if axes is None else axes
    return Affine(form.offset, tuple(form.coefs[a] for a in order))


def _add(av: AffineValues, node: Call) -> Affine | None:
    shape = _shape(node)
    a, b = av.aligned(node.args[0], shape), av.aligned(node.args[1], shape)
    if a is None or b is None:
        return None
    sign = -1 if node.op is not None and node.op.name == "subtract" else 1
    coefs = tuple(x + sign * y for x, y in zip(a.coefs, b.coefs, strict=True))
    return Affine(a.offset + sign * b.offset, coefs)


def _multiply(av: AffineValues, node: Call) -> Affine | None:
    """One operand the same value everywhere scales the other."""
    shape = _shape(node)
    a, b = av.aligned(node.args[0], shape), av.aligned(node.args[1], shape)
    if a is None or b is None:
        return None
    if not a.is_constant():
        a, b = b, a
    if not a.is_constant():
        return None
    k = a.offset
    return Affine(b.offset * k, tuple(c * k for c in b.coefs))


def _take(av: AffineValues, node: Call) -> Affine | None:
    """A dim read from a shape, or the field of a ``concatenate`` a constant index picks
    along the joined axis (a field of one entry there: the axis goes)."""
    data, index = (av.values.definition(a) for a in node.args)
    if isinstance(data, Call) and data.op is not None and data.op.name == "shape_of":
        if not isinstance(index, Constant) or np.ndim(index.value):
            return None
        shape = data.args[0].ty
        at = int(index.value)
        if not isinstance(shape, TensorType) or not -len(shape.shape) <= at < len(shape.shape):
            return None
        return Affine(shape.shape[at], ())
    field = av.values.picked_field(node)
    if field is None:
        return None
    form = av.of(field)
    rank = len(_shape(field))
    at = node.attrs.axis % rank
    if form is None or _shape(field)[at] != 1:
        return None
    return Affine(form.offset, form.coefs[:at] + form.coefs[at + 1 :])


def _stack(av: AffineValues, node: Call) -> Affine | None:
    """One scalar stacked: a 1-d value of one entry."""
    fields = av.values.definition(node.args[0])
    if not isinstance(fields, Tuple) or len(fields.fields) != 1:
        return None
    value = av.scalar(fields.fields[0])
    return None if value is None else Affine(value, (0,) * len(_shape(node)))


def _where(av: AffineValues, node: Call) -> Affine | None:
    """A ``where`` whose condition is decided is its branch."""
    verdict = av.values.decided(node.args[0])
    if verdict is None:
        return None
    return av.aligned(node.args[1] if verdict else node.args[2], _shape(node))


_RULES: dict[str, Rule] = {
    "full": _fill,
    "zeros": _fill,
    "ones": _fill,
    "cumsum": _cumsum,
    "arange": _arange,
    "cast": _cast,
    "expand_dims": _expand_dims,
    "squeeze": _relaid,
    "reshape": _relaid,
    "broadcast_to": _broadcast_to,
    "transpose": _transpose,
    "add": _add,
    "subtract": _add,
    "multiply": _multiply,
    "take": _take,
    "stack": _stack,
    "where": _where,
}
