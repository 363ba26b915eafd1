"""Types of IR values: tensors with symbolic shapes, tuples and functions.

Types are frozen, hashable values that verify themselves on construction, so an invalid type
cannot exist and any type can be a dict key.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TypeAlias

import sympy

from .dims import Dim, check_dim, free_symbols, simplify
from .dtypes import ITEMSIZE, dtype_name
from .errors import IRError


@dataclass(frozen=True)
class TensorType:
    """A tensor of ``dtype`` whose ``shape`` is a tuple of dims. Rank 0 is a scalar."""

    shape: tuple[Dim, ...]
    """One dim per axis: an int, or a sympy expression over dimension symbols."""
    dtype: str = "float32"
    """One of ``ir.dtypes.DTYPES``."""

    def __post_init__(self) -> None:
        if not isinstance(self.shape, Iterable) or isinstance(self.shape, str):
            raise IRError(f"bad shape {self.shape!r}: expected a tuple of dims")
        shape = tuple(simplify(check_dim(d)) for d in self.shape)
        object.__setattr__(self, "shape", shape)
        object.__setattr__(self, "dtype", dtype_name(self.dtype))

    @property
    def rank(self) -> int:
        """The number of axes."""
        return len(self.shape)

    @property
    def itemsize(self) -> int:
        """Bytes per element."""
        return ITEMSIZE[self.dtype]

    @property
    def is_static(self) -> bool:
        """True when every dim is an int."""
        return all(isinstance(d, int) for d in self.shape)

    def num_elements(self) -> Dim:
        """The product of the dims (an int when static)."""
        total: Dim = 1
        for d in self.shape:
            total = total * d
        return simplify(total)

    def size_bytes(self) -> Dim:
        """Storage this tensor needs, in bytes."""
        # num_elements is canonical, and sympy distributes an integer factor over a sum: the
        # product needs no second expansion (a third of manifest_alloc's time).
        return self.num_elements() * self.itemsize


@dataclass(frozen=True)
class TupleType:
    """A tuple of values, each with its own type."""

    fields: tuple[Type, ...]
    """The types of the elements, in order."""

    def __post_init__(self) -> None:
        fields = tuple(self.fields)
        for f in fields:
            if not isinstance(f, _TYPES):
                raise IRError(f"bad tuple field type {f!r}")
        object.__setattr__(self, "fields", fields)


@dataclass(frozen=True)
class FuncType:
    """The type of a function: parameter types and the result type."""

    params: tuple[Type, ...]
    """Types of the parameters, in order."""
    ret: Type
    """Type of the result."""

    def __post_init__(self) -> None:
        params = tuple(self.params)
        for p in (*params, self.ret):
            if not isinstance(p, _TYPES):
                raise IRError(f"bad function type component {p!r}")
        object.__setattr__(self, "params", params)


@dataclass(frozen=True)
class StorageType:
    """The type of a storage: an aligned byte buffer that tensors are views into.

    Only the memory dialect (``memory.alloc_storage``) makes values of this type; its size is
    an attribute of the allocation, not part of the type.
    """


Type: TypeAlias = TensorType | TupleType | FuncType | StorageType


def scalar(dtype: str = "float32") -> TensorType:
    """The rank-0 tensor type of ``dtype``."""
    return TensorType((), dtype)


def type_symbols(ty: Type) -> frozenset[sympy.Symbol]:
    """Every dimension symbol mentioned anywhere in ``ty``."""
    if isinstance(ty, TensorType):
        out: set[sympy.Symbol] = set()
        for d in ty.shape:
            out |= free_symbols(d)
        return frozenset(out)
    if isinstance(ty, TupleType):
        return frozenset().union(*(type_symbols(f) for f in ty.fields))
    if isinstance(ty, StorageType):
        return frozenset()
    return frozenset().union(*(type_symbols(p) for p in ty.params), type_symbols(ty.ret))


def plain_symbols(ty: Type | None) -> frozenset[sympy.Symbol]:
    """The symbols that are a whole dim of a tensor in ``ty``: what a value of the type binds
    (its shape gives their values), unlike a symbol inside a compound dim such as ``2*n``."""
    if isinstance(ty, TensorType):
        return frozenset(d for d in ty.shape if isinstance(d, sympy.Symbol))
    if isinstance(ty, TupleType):
        return frozenset().union(*(plain_symbols(f) for f in ty.fields))
    return frozenset()


def tensor_leaves(ty: Type) -> list[TensorType]:
    """The tensor types of a (possibly nested) tuple type, flattened left to right."""
    if isinstance(ty, TensorType):
        return [ty]
    if isinstance(ty, TupleType):
        return [leaf for f in ty.fields for leaf in tensor_leaves(f)]
    raise IRError(f"a function type has no tensor leaves: {ty}")


def _type_str(self: Type) -> str:
    from .text.printer import type_to_text  # the printer owns the text form of types

    return type_to_text(self)


_TYPES = (TensorType, TupleType, FuncType, StorageType)

TensorType.__str__ = _type_str  # type: ignore[method-assign,assignment]
StorageType.__str__ = _type_str  # type: ignore[method-assign,assignment]
TupleType.__str__ = _type_str  # type: ignore[method-assign,assignment]
FuncType.__str__ = _type_str  # type: ignore[method-assign,assignment]
