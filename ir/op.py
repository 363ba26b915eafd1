"""Operator definitions and the op registry.

An op is declared once, as plain data (``shape_funcs.declarations.OpDecl``: its name, operands,
attributes with kinds and defaults, fusion pattern, dtype rule's name); ``OpDef.from_declaration``
makes the IR's definition of it, adding what only the IR has: the typed attribute kinds and the
dtype rule's code. Shape functions (``shape_funcs``) and kernels (``vm``) are registered
elsewhere, by the op's name.
"""

from __future__ import annotations

import difflib
import enum
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from shape_funcs.declarations import MEMORY_DIALECT as MEMORY_DIALECT  # ir.op's name for it
from shape_funcs.declarations import OpDecl

from .attrs import AttrDef, Attrs, attr, kind_of
from .errors import IRError
from .span import Span


class OpPattern(enum.IntEnum):
    """How an op may take part in fusion; a smaller value fuses more freely (TVM's order)."""

    ELEMWISE = 0
    """Output element i depends on input element i only."""
    BROADCAST = 1
    """Elementwise after numpy broadcasting of the inputs."""
    INJECTIVE = 2
    """Each output element is one input element moved (reshape, transpose, slice, take...)."""
    REDUCTION = 3
    """Combines elements along axes (sum, max, argmax, softmax...)."""
    OUT_ELEMWISE_FUSABLE = 4
    """Complex ops (dense, matmul, conv) whose result may feed a fused elementwise epilogue."""
    OPAQUE = 8
    """Never fused (data-dependent ops, creation from values, memory ops)."""


#: The pattern of each pattern name a declaration uses (``shape_funcs.declarations.PATTERNS``).
PATTERN_OF: Mapping[str, OpPattern] = {
    "elementwise": OpPattern.ELEMWISE,
    "broadcast": OpPattern.BROADCAST,
    "injective": OpPattern.INJECTIVE,
    "reduction": OpPattern.REDUCTION,
    "out_elementwise_fusable": OpPattern.OUT_ELEMWISE_FUSABLE,
    "opaque": OpPattern.OPAQUE,
}

#: ``dtype_rule(input_dtypes, attrs) -> dtype or tuple of dtypes (for tuple results)``.
#: An input dtype is ``None`` when that input is a tuple; it is a tuple of dtypes then.
DTypeRule = Callable[[Sequence[Any], Attrs], str | tuple[str, ...]]


@dataclass(frozen=True, eq=False)
class Operand:
    """One positional operand of an op."""

    name: str
    """The operand's name, used in error messages."""
    is_tuple: bool = False
    """True if the operand is a tuple of tensors (``concatenate``'s input)."""


@dataclass(frozen=True, eq=False)
class OpDef:
    """The declaration of one op. Ops compare by identity; the registry holds one per name."""

    name: str
    """The op's name in the text format (``add``, ``nn.conv2d``)."""
    operands: tuple[Operand, ...]
    """Positional operands, in order."""
    attrs: tuple[AttrDef, ...]
    """Keyword attributes, with their kinds and defaults."""
    pattern: OpPattern
    """Fusion pattern."""
    dtype_rule: DTypeRule
    """How the result dtype(s) follow from the input dtypes and attributes."""
    doc: str = ""
    """One line describing the op (shown in the op table of the README)."""
    in_place: bool = False
    """Its kernel may write its (single) output over its first input when the two have the
    same type (softmax, layer norm). Elementwise and broadcast ops may over any such input
    without saying so: their kernels must work in place anyway (fused chains rely on it)."""
    dim_values: tuple[str, ...] = ()
    """Attributes whose dim entries its kernel needs as values, computed at every call
    (``OpDecl.dim_values``; ``strided_slice``'s begin, end and strides)."""
    attr_index: Mapping[str, AttrDef] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "attr_index", {a.name: a for a in self.attrs})

    @classmethod
    def from_declaration(cls, decl: OpDecl, dtype_rule: DTypeRule) -> OpDef:
        """The definition of the op ``decl`` declares, whose result dtype ``dtype_rule`` gives
        (the rule ``decl.dtype`` names, which the caller resolves: ``ir/ops/_declare.py``)."""
        return cls(
            decl.name,
            tuple(
                Operand(o[1:], is_tuple=True) if o[0] == "*" else Operand(o) for o in decl.operands
            ),
            tuple(
                attr(a.name, kind_of(a.kind), *(() if a.required else (a.default,)))
                for a in decl.attrs
            ),
            PATTERN_OF[decl.pattern],
            dtype_rule,
            decl.doc,
            decl.in_place,
            decl.dim_values,
        )

    @property
    def arity(self) -> int:
        """The number of operands."""
        return len(self.operands)

    def make_attrs(self, given: Mapping[str, Any], span: Span | None = None) -> Attrs:
        """Check ``given`` against the declaration and fill in defaults.

        Raises IRError naming the op and the attribute when an attribute is unknown, missing,
        or has a value of the wrong kind.
        """
        for key in given:
            if key not in self.attr_index:
                known = ", ".join(self.attr_index) or "none"
                close = difflib.get_close_matches(key, list(self.attr_index), n=1)
                hint = f"did you mean {close[0]!r}? " if close else ""
                raise IRError(
                    f"op {self.name} has no attribute {key!r} ({hint}its attributes: {known})",
                    span,
                )
        values: dict[str, Any] = {}
        for a in self.attrs:
            if a.name in given:
                try:
                    values[a.name] = a.kind.normalize(given[a.name])
                except TypeError as e:
                    raise IRError(
                        f"op {self.name}: attribute {a.name}={given[a.name]!r} is ill-typed: {e}",
                        span,
                    ) from None
            elif a.required:
                raise IRError(f"op {self.name}: missing required attribute {a.name!r}", span)
            else:
                values[a.name] = a.default
        return Attrs(values)

    def __repr__(self) -> str:
        return f"OpDef({self.name})"


# The registry. This module defines it and knows nothing of the catalogue (``ir/ops``), which
# imports this module and registers into it: the dependency goes one way only.
_REGISTRY: dict[str, OpDef] = {}
# The names the catalogue declared, recorded as they are registered (``_declare.declare``), so
# that "is this op built in?" is answered here without importing the catalogue.
_BUILTIN: set[str] = set()


def register_op(op: OpDef) -> OpDef:
    """Add ``op`` to the registry. Registering a name twice raises IRError."""
    return _register(op, builtin=False)


def _register(op: OpDef, *, builtin: bool) -> OpDef:
    """Add ``op``; ``builtin`` marks an op of the catalogue (only ``ir/ops`` passes True)."""
    if op.name in _REGISTRY:
        raise IRError(f"op {op.name!r} is already registered")
    _REGISTRY[op.name] = op
    if builtin:
        _BUILTIN.add(op.name)
    return op


def unregister_op(name: str) -> OpDef:
    """Remove the op called ``name`` from the registry and return its declaration.

    For ops registered with ``register_op`` (tests, a notebook cell run again): afterwards the
    name is free to register anew. IR already built keeps the declaration it holds; whatever
    looks ops up by name (the parser, ``get_op``) no longer finds it. Raises IRError for an op
    of the built-in catalogue and for a name that is not registered.
    """
    if name in _BUILTIN:
        raise IRError(f"op {name!r} is built in: only ops added with register_op can be removed")
    try:
        return _REGISTRY.pop(name)
    except KeyError:
        raise IRError(f"cannot unregister op {name!r}: no op of that name is registered") from None


def get_op(name: str, span: Span | None = None) -> OpDef:
    """The op called ``name``; raises IRError naming it when there is none."""
    try:
        return _REGISTRY[name]
    except KeyError:
        close = difflib.get_close_matches(str(name), list(_REGISTRY), n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise IRError(f"unknown op {name!r}{hint}", span) from None


def has_op(name: str) -> bool:
    """True if an op called ``name`` is registered."""
    return name in _REGISTRY


def is_builtin_op(name: str) -> bool:
    """True if ``name`` is an op of the built-in catalogue (``ir/ops``), not a registered one."""
    return name in _BUILTIN


def all_ops() -> list[OpDef]:
    """Every registered op, sorted by name."""
    return [_REGISTRY[k] for k in sorted(_REGISTRY)]


def tensor_ops(builtin_only: bool = False) -> list[OpDef]:
    """Every registered op except the memory dialect: the ops that compute tensors, each with
    a shape function and a kernel. ``builtin_only`` leaves out ops users registered."""
    return [
        op
        for op in all_ops()
        if not op.name.startswith(MEMORY_DIALECT) and (not builtin_only or op.name in _BUILTIN)
    ]
