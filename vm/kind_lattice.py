"""The lattice of register kinds: what a register holds, and how two paths' kinds merge.

``register_kinds.py`` runs the analysis over this lattice and ``kind_rules.py`` says, per opcode,
which kinds an instruction reads and writes. Kinds: ``int``, ``shape``, ``shapes`` (a shape
function's result), ``tensor``, ``storage`` (with its static size), ``tuple`` (with its fields),
``mixed``, and ``killed`` (unset by a ``kill``). Tuple kinds carry bounds kept through every merge:
``depth`` (levels of nesting) and ``nodes`` (values held, counting repeats).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .executable import TensorSpec, TupleSpec, TypeSpec

#: Deepest nesting of tuples a ``tuple`` instruction may build.
MAX_TUPLE_DEPTH = 8
#: Most values (a tuple and everything in it, counting repeats) a ``tuple`` instruction may build.
MAX_TUPLE_NODES = 1 << 14


@dataclass(frozen=True, slots=True)
class RegKind:
    """What a register holds: a kind name, plus the fields of a tuple or a static storage size."""

    name: str
    """``int``, ``shape``, ``shapes``, ``tensor``, ``storage``, ``tuple``, ``mixed``, or
    ``killed`` (unset by a ``kill``, on some path)."""
    fields: tuple[RegKind, ...] | None = None
    """The kind of each field of a tuple (None: a tuple of unknown fields)."""
    size: int | None = None
    """The bytes of a storage allocated with an immediate size; the pc of a ``kill``."""
    depth: int = 0
    """The most tuple levels a value of this kind can nest (a bound, also for ``mixed``)."""
    nodes: int = 1
    """The most values a value of this kind holds, itself included, counting repeats."""

    def __str__(self) -> str:
        if self.name == "tuple" and self.fields is not None and self.nodes <= 32:
            return "tuple(" + ", ".join(str(f) for f in self.fields) + ")"
        if self.name == "storage" and self.size is not None:
            return f"storage of {self.size} bytes"
        return self.name


INT = RegKind("int")
SHAPE = RegKind("shape")
SHAPES = RegKind("shapes")
TENSOR = RegKind("tensor")
STORAGE = RegKind("storage")
MIXED = RegKind("mixed")
#: Kinds a ``val`` operand may read: an int, a shape function's item (an int or a shape,
#: checked when used), or a tensor (a 0-d integer array computes like an int; anything else
#: fails when used, with a located error).
INTS = ("int", "shapes", "tensor")
SHAPE_LIKE = ("shape", "shapes")


def join(a: RegKind | None, b: RegKind | None) -> RegKind | None:
    """The kind of a register reached by two paths (None or ``killed``: unset on one of them)."""
    if a is b or a == b:
        return a
    unset = [k for k in (a, b) if k is None or k.name == "killed"]
    if unset:  # unset on some path; a kill is kept, to name it in the message
        return next((k for k in unset if k is not None), None)
    assert a is not None and b is not None
    if a.name == b.name:
        if a.name == "storage":
            return STORAGE
        if a.name == "tuple":
            if a.fields is not None and b.fields is not None and len(a.fields) == len(b.fields):
                fields = [join(x, y) for x, y in zip(a.fields, b.fields, strict=True)]
                if all(f is not None for f in fields):
                    return tuple_of(fields)  # type: ignore[arg-type]
            return _bounded("tuple", a, b)
        if a.name == "mixed":
            return _bounded("mixed", a, b)
        return a
    return _bounded("mixed", a, b)


def _bounded(name: str, a: RegKind, b: RegKind) -> RegKind:
    """A tuple of unknown fields, or a mixed kind, keeping the bounds of both ``a`` and ``b``."""
    depth, nodes = max(a.depth, b.depth), max(a.nodes, b.nodes)
    if depth == 0 and name == "mixed":
        return MIXED
    return RegKind(name, depth=depth, nodes=nodes)


def spec_kind(spec: TypeSpec) -> RegKind:
    """The kind of a value of a parameter or result type (a spec is a tree the file spells out,
    so this is linear in the file)."""
    if isinstance(spec, TensorSpec):
        return TENSOR
    assert isinstance(spec, TupleSpec)
    return tuple_of([spec_kind(f) for f in spec.fields])


def tuple_of(fields: Sequence[RegKind]) -> RegKind:
    """The kind of a tuple of values of kinds ``fields``, with its bounds."""
    depth = 1 + max((f.depth for f in fields), default=0)
    return RegKind("tuple", tuple(fields), depth=depth, nodes=1 + sum(f.nodes for f in fields))


def matches(value: RegKind, spec: RegKind) -> bool:
    """True if a value of kind ``value`` may be passed where ``spec`` (a parameter) is expected."""
    if spec.name != "tuple":
        return value.name == spec.name
    if value.name != "tuple":
        return False
    if spec.fields is None or value.fields is None:
        return spec.fields is None  # a parameter of unknown fields takes any tuple
    return len(spec.fields) == len(value.fields) and all(
        matches(v, s) for v, s in zip(value.fields, spec.fields, strict=True)
    )
