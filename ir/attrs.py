"""Typed operator attributes: each kind validates and normalises a value once, at construction.

Attribute values are immutable (lists become tuples) so that a call's attributes are hashable and
can never change after the call is built.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import sympy

from shape_funcs.declarations import parse_kind

from .dims import check_dim
from .dtypes import SUPPORTED, dtype_name
from .errors import IRError


class AttrKind:
    """A kind of attribute value. ``normalize`` returns the canonical value or raises TypeError."""

    name = "attr"

    def normalize(self, value: Any) -> Any:
        raise NotImplementedError

    def __repr__(self) -> str:
        return self.name


# numpy scalars are accepted where Python's are (``axis=np.int64(1)``, as numpy takes them);
# bools are never ints or numbers here.
_BOOLS = (bool, np.bool_)
_NUMBERS = (int, float, np.integer, np.floating)


class _Int(AttrKind):
    name = "int"

    def normalize(self, value: Any) -> Any:
        if isinstance(value, _BOOLS) or not isinstance(value, (int, np.integer)):
            raise TypeError("expected an int")
        return int(value)


class _Float(AttrKind):
    name = "float"

    def normalize(self, value: Any) -> Any:
        if isinstance(value, _BOOLS) or not isinstance(value, _NUMBERS):
            raise TypeError("expected a number")
        return float(value)


class _Bool(AttrKind):
    name = "bool"

    def normalize(self, value: Any) -> Any:
        if not isinstance(value, _BOOLS):
            raise TypeError("expected True or False")
        return bool(value)


class _Str(AttrKind):
    name = "str"

    def normalize(self, value: Any) -> Any:
        if not isinstance(value, str):
            raise TypeError("expected a string")
        return value


class _DType(AttrKind):
    name = "dtype"

    def normalize(self, value: Any) -> Any:
        try:
            return dtype_name(value)  # any numpy spelling: np.int32, "i4", np.dtype(...)
        except IRError:
            raise TypeError(f"expected a dtype, one of {SUPPORTED}") from None


class _IntList(AttrKind):
    name = "list[int]"

    def normalize(self, value: Any) -> Any:
        value = _listed(value)
        if not isinstance(value, (list, tuple)):
            raise TypeError("expected a list of ints")
        return tuple(INT.normalize(v) for v in value)


def _listed(value: Any) -> Any:
    """A 1-d numpy array as the list of its items (numpy takes one where it takes a list)."""
    if isinstance(value, np.ndarray) and value.ndim == 1:
        return value.tolist()
    return value


class _Optional(AttrKind):
    def __init__(self, inner: AttrKind) -> None:
        self.inner = inner
        self.name = f"{inner.name} or None"

    def normalize(self, value: Any) -> Any:
        return None if value is None else self.inner.normalize(value)


class _OneOf(AttrKind):
    """The first of several kinds that accepts the value wins."""

    def __init__(self, *kinds: AttrKind) -> None:
        self.kinds = kinds
        self.name = " or ".join(k.name for k in kinds)

    def normalize(self, value: Any) -> Any:
        for kind in self.kinds:
            try:
                return kind.normalize(value)
            except TypeError:
                continue
        raise TypeError(f"expected {self.name}")


class _Choice(AttrKind):
    def __init__(self, *choices: str) -> None:
        self.choices = choices
        self.name = " | ".join(repr(c) for c in choices)

    def normalize(self, value: Any) -> Any:
        if value not in self.choices:
            raise TypeError(f"expected one of {self.name}")
        return value


class _PairList(AttrKind):
    name = "list[[int, int]]"

    def normalize(self, value: Any) -> Any:
        if not isinstance(value, (list, tuple)):
            raise TypeError("expected a list of [before, after] pairs")
        out = []
        for pair in value:
            pair = INT_LIST.normalize(pair)
            if len(pair) != 2:
                raise TypeError("expected a list of [before, after] pairs")
            out.append(pair)
        return tuple(out)


class _Dim(AttrKind):
    name = "dim"

    def normalize(self, value: Any) -> Any:
        if isinstance(value, np.integer) and not isinstance(value, np.bool_):
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, (int, sympy.Expr)):
            raise TypeError("expected a dim (an int or an expression of symbols)")
        try:
            return check_dim(value)
        except IRError as e:
            raise TypeError(e.message) from None


class _IntOrDimList(AttrKind):
    """A list whose entries are ints of any sign (an op's special values, such as reshape's 0
    and -1, or split's negative indices) or dims over the function's symbols (``n``,
    ``2*n``, ``m // 2``). Only the ops that declare it take symbolic entries; everything else
    keeps ``list[int]``."""

    name = "list[int | dim]"

    def normalize(self, value: Any) -> Any:
        value = _listed(value)
        if not isinstance(value, (list, tuple)):
            raise TypeError("expected a list of ints or dims")
        out: list[Any] = []
        for v in value:
            if isinstance(v, np.integer) and not isinstance(v, np.bool_):
                v = int(v)
            if isinstance(v, sympy.Integer):
                v = int(v)  # a folded dim (n - n + 3) is the int it is, negative or not
            if isinstance(v, sympy.Expr):
                out.append(DIM.normalize(v))
            elif isinstance(v, bool) or not isinstance(v, int):
                raise TypeError("expected an int or a dim (an expression of symbols)")
            else:
                out.append(int(v))
        return tuple(out)


def has_symbolic_entries(value: Any) -> bool:
    """True if an attribute value is a list with a dim entry (an ``INT_OR_DIM_LIST`` value that
    the compiler must resolve before the VM sees it)."""
    return isinstance(value, tuple) and any(isinstance(v, sympy.Expr) for v in value)


def takes_dims(kind: AttrKind) -> bool:
    """True if ``kind`` accepts ``INT_OR_DIM_LIST`` values (alone or among other kinds): an op
    attribute whose dims must use the symbols the function binds at entry."""
    if isinstance(kind, (_Optional,)):
        return takes_dims(kind.inner)
    if isinstance(kind, _OneOf):
        return any(takes_dims(k) for k in kind.kinds)
    return isinstance(kind, _IntOrDimList)


class _ListOf(AttrKind):
    def __init__(self, inner: AttrKind) -> None:
        self.inner = inner
        self.name = f"list[{inner.name}]"

    def normalize(self, value: Any) -> Any:
        if not isinstance(value, (list, tuple)):
            raise TypeError(f"expected {self.name}")
        return tuple(self.inner.normalize(v) for v in value)


INT: AttrKind = _Int()
FLOAT: AttrKind = _Float()
BOOL: AttrKind = _Bool()
STR: AttrKind = _Str()
DTYPE: AttrKind = _DType()
INT_LIST: AttrKind = _IntList()
PAIR_LIST: AttrKind = _PairList()
#: A dim over the function's symbols (the memory dialect's sizes, offsets and shapes).
DIM: AttrKind = _Dim()
DIM_LIST: AttrKind = _ListOf(DIM)
DIM_LISTS: AttrKind = _ListOf(DIM_LIST)
#: A list of numbers, one per axis (resize's ``scales``).
FLOAT_LIST: AttrKind = _ListOf(FLOAT)
#: A list of ints or dims: reshape's ``newshape=[n, -1]``, split's ``indices_or_sections=[n // 2]``.
INT_OR_DIM_LIST: AttrKind = _IntOrDimList()
#: An axis argument: one int, a list of ints, or None for "all axes".
AXES: AttrKind = _Optional(_OneOf(INT, INT_LIST))


#: The kind of each basic kind's text (``shape_funcs/declarations/kinds.py``).
_BY_TEXT: dict[str, AttrKind] = {
    k.name: k
    for k in (
        INT,
        FLOAT,
        BOOL,
        STR,
        DTYPE,
        INT_LIST,
        PAIR_LIST,
        DIM,
        DIM_LIST,
        DIM_LISTS,
        FLOAT_LIST,
        INT_OR_DIM_LIST,
    )
}


def kind_of(text: str) -> AttrKind:
    """The kind a declaration's kind text names (``"int or None"``, ``"'a' | 'b'"``): its
    ``name`` is that text again. Raises DeclarationError for text no kind has."""
    alternatives = parse_kind(text)
    takes_none = len(alternatives) > 1 and alternatives[-1] == "None"
    kinds = [
        _BY_TEXT[a] if isinstance(a, str) else choice(*a)
        for a in (alternatives[:-1] if takes_none else alternatives)
    ]
    kind = kinds[0] if len(kinds) == 1 else one_of(*kinds)
    return optional(kind) if takes_none else kind


def optional(kind: AttrKind) -> AttrKind:
    """The kind that accepts None or a value of ``kind``."""
    return _Optional(kind)


def one_of(*kinds: AttrKind) -> AttrKind:
    """The kind that accepts a value of any of ``kinds`` (tried in order)."""
    return _OneOf(*kinds)


def choice(*choices: str) -> AttrKind:
    """The kind that accepts one of a fixed set of strings."""
    return _Choice(*choices)


_REQUIRED = object()


@dataclass(frozen=True)
class AttrDef:
    """One attribute of an op: its name, kind, and default (absent when required)."""

    name: str
    """The keyword used in the text format and the builder."""
    kind: AttrKind
    """What values are allowed."""
    default: Any = _REQUIRED
    """The value used when a call does not give one; absent for required attributes."""

    @property
    def required(self) -> bool:
        """True if a call must give this attribute."""
        return self.default is _REQUIRED


def attr(name: str, kind: AttrKind, default: Any = _REQUIRED) -> AttrDef:
    """Declare an attribute (shorthand used by the op catalogue)."""
    if default is not _REQUIRED:
        default = kind.normalize(default)
    return AttrDef(name, kind, default)


class Attrs(Mapping[str, Any]):
    """An immutable, hashable mapping of attribute names to normalised values."""

    __slots__ = ("_hash", "_items")

    def __init__(self, items: Mapping[str, Any] | None = None) -> None:
        self._items: dict[str, Any] = dict(items or {})
        self._hash: int | None = None

    def __getitem__(self, key: str) -> Any:
        return self._items[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __hash__(self) -> int:
        if self._hash is None:
            self._hash = hash(tuple(sorted(self._items.items(), key=lambda kv: kv[0])))
        return self._hash

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Attrs):
            return self._items == other._items
        return NotImplemented

    def __getattr__(self, key: str) -> Any:
        if key.startswith("_"):
            raise AttributeError(key)
        try:
            return self._items[key]
        except KeyError:
            raise AttributeError(key) from None

    def __repr__(self) -> str:
        return f"Attrs({self._items!r})"
