"""The declaration of an op: its data, written once, that every layer reads.

An ``OpDecl`` is plain data (strings, tuples, plain Python defaults), so that the IR (which
builds its ``OpDef`` from it), the VM (which checks a loaded kernel's attributes against it),
the builder and the importer read one declaration and hold no copy. Built-in ops are declared in
``catalogue/``; ``dynshape.register_op`` builds one ``OpDecl`` for a custom op. What only one
layer can know stays in that layer, keyed by the op's name: the IR's dtype rules (the declaration
names one, ``dtype``), the shape function (``shape_funcs/ops``) and the kernel (``vm/kernels``).

A declaration is checked when it is made: a bad one raises DeclarationError naming the op.
"""

from __future__ import annotations

import keyword
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from .dtypes import DTYPE_NAMES
from .errors import DeclarationError
from .kinds import parse_kind, value_check


class _Required:
    """The default of a required attribute (a call must give it)."""

    def __repr__(self) -> str:
        return "REQUIRED"


REQUIRED: Any = _Required()

#: Fusion patterns, from the most freely fused to never fused (``ir.OpPattern`` by these names).
PATTERNS = (
    "elementwise",
    "broadcast",
    "injective",
    "reduction",
    "out_elementwise_fusable",
    "opaque",
)

#: The named dtype rules (their code is in ``ir/ops/_declare.py``); a dtype name (``"int64"``)
#: means "always that dtype".
DTYPE_RULES = {
    "first": "the first input's dtype",
    "same": "every input has one dtype, the result's",
    "same_numeric": "as same, and not bool",
    "same_float": "as same, and floating point",
    "same_integer": "as same, and a signed or unsigned integer (not bool)",
    "float": "the first input is floating point; the result has its dtype",
    "numeric": "the first input is a number (not bool); the result has its dtype",
    "integer": "the first input is a signed or unsigned integer (not bool), the result's dtype",
    "bool": "inputs of one dtype; the result is bool (a comparison; not the dtype bool)",
    "logical": "every input is bool; so is the result",
    "mean": "numpy's mean: a float keeps its dtype, an integer gives float64",
    "attr": "the value of the attribute 'dtype'",
    "dialect": "none: the memory dialect types its ops by its own rules",
    "own": "the op's own rule, written in the IR under the op's name",
}

#: Ops whose names start with this belong to the memory dialect (no shape function, no kernel).
MEMORY_DIALECT = "memory."


@dataclass(frozen=True)
class AttrDecl:
    """One attribute: its name, its kind's text (``kinds.py``) and its default, a plain value
    (lists become tuples), or ``REQUIRED``."""

    name: str
    kind: str
    default: Any = REQUIRED

    @property
    def required(self) -> bool:
        """True if a call must give this attribute."""
        return self.default is REQUIRED

    @property
    def choices(self) -> tuple[str, ...]:
        """The strings a choice kind accepts (``'a' | 'b'`` -> ``("a", "b")``); () otherwise."""
        return tuple(c for a in parse_kind(self.kind) if isinstance(a, tuple) for c in a)


@dataclass(frozen=True)
class OpDecl:
    """The declaration of one op (see the module doc)."""

    name: str
    """The op's name in the text format (``add``, ``nn.conv2d``): a dotted identifier."""
    operands: tuple[str, ...]
    """Positional operands, in order; ``"*name"`` is a tuple of tensors (``concatenate``'s)."""
    attrs: tuple[AttrDecl, ...]
    """Keyword attributes, in the order the builder takes them positionally."""
    pattern: str
    """How the op takes part in fusion, one of ``PATTERNS``."""
    dtype: str
    """The name of its dtype rule (``DTYPE_RULES``), or the one dtype of its result."""
    doc: str = ""
    """One line describing the op (the README's op table, the builder's docstring)."""
    in_place: bool = False
    """Its kernel may write its single output over its first input of the same type."""
    blockwise: bool = False
    """Its kernel may run on blocks of rows of its (broadcast) operands and give the rows of
    the whole result: a fused chain of such ops runs block by block (``vm/fused_blocked.py``)."""
    reshape_like: bool = False
    """Its result is its (first) input's elements, in order, in another shape: a fused group of
    such ops alone is a view of its input (``dynshape/passes/fuse_ops.py``)."""
    dim_values: tuple[str, ...] = ()
    """Attributes (of a ``list[int | dim]`` kind) whose dim entries its kernel needs as values
    (``strided_slice``'s ``begin=[k]``: the output's shape does not tell where it starts). The
    caller computes them at every call and the VM fills them in (an extra input of the
    ``invoke``, design/vm.md "Attribute values computed at run time"); a call with such an
    entry is not fused. Other ops' dim entries reach the VM as None (their kernels take the
    extents from their outputs)."""
    attr_index: dict[str, AttrDecl] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "operands", tuple(self.operands))
        object.__setattr__(self, "attrs", tuple(_frozen_default(a) for a in self.attrs))
        object.__setattr__(self, "attr_index", {a.name: a for a in self.attrs})
        _check(self)

    @property
    def operand_names(self) -> tuple[str, ...]:
        """The operands' names, without the ``*`` of a tuple operand."""
        return tuple(o.lstrip("*") for o in self.operands)

    @property
    def computes_tensors(self) -> bool:
        """True unless the op belongs to the memory dialect: it has a shape function and a
        kernel."""
        return not self.name.startswith(MEMORY_DIALECT)

    @property
    def schema(self) -> dict[str, str]:
        """Attribute name -> kind text, in order: what the VM checks a kernel's attributes by."""
        return {a.name: a.kind for a in self.attrs}

    def choices(self, attr_name: str) -> tuple[str, ...]:
        """The strings attribute ``attr_name`` accepts (its modes)."""
        return self.attr_index[attr_name].choices


def attr(name: str, kind: str, default: Any = REQUIRED) -> AttrDecl:
    """An attribute declaration (shorthand for the catalogue)."""
    return AttrDecl(name, kind, default)


def declare(
    name: str,
    operands: Sequence[str],
    pattern: str,
    dtype: str,
    attrs: Sequence[AttrDecl] = (),
    doc: str = "",
    *,
    in_place: bool = False,
    blockwise: bool = False,
    reshape_like: bool = False,
    dim_values: Sequence[str] = (),
) -> OpDecl:
    """An op declaration (shorthand for the catalogue): checked, registered nowhere."""
    return OpDecl(
        name,
        tuple(operands),
        tuple(attrs),
        pattern,
        dtype,
        doc,
        in_place,
        blockwise,
        reshape_like,
        tuple(dim_values),
    )


def _frozen(value: Any) -> Any:
    """Lists as tuples, all the way down: a declaration never changes."""
    if isinstance(value, (list, tuple)):
        return tuple(_frozen(v) for v in value)
    return value


def _frozen_default(a: AttrDecl) -> AttrDecl:
    if not isinstance(a, AttrDecl):
        raise DeclarationError(f"an attribute is declared with attr(name, kind), got {a!r}")
    return a if a.required else AttrDecl(a.name, a.kind, _frozen(a.default))


def _identifier(name: object) -> bool:
    return isinstance(name, str) and name.isidentifier() and not keyword.iskeyword(name)


def _check(op: OpDecl) -> None:
    """Raise DeclarationError naming ``op`` and what is wrong with its declaration."""
    if not isinstance(op.name, str) or not all(p.isidentifier() for p in op.name.split(".")):
        raise DeclarationError(f"bad op name {op.name!r} (a dotted identifier)")
    where = f"op {op.name}"
    for o in op.operands:
        if not isinstance(o, str) or not _identifier(o.removeprefix("*")):
            raise DeclarationError(f"{where}: bad operand {o!r} (an identifier, '*' for a tuple)")
    names = [*op.operand_names, *(a.name for a in op.attrs)]
    for n in (a.name for a in op.attrs):
        if not _identifier(n):
            raise DeclarationError(f"{where}: bad attribute name {n!r} (an identifier)")
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise DeclarationError(f"{where}: operands and attributes share the name(s) {twice}")
    if op.pattern not in PATTERNS:
        raise DeclarationError(
            f"{where}: unknown pattern {op.pattern!r} (one of {', '.join(PATTERNS)})"
        )
    if op.dtype not in DTYPE_RULES and op.dtype not in DTYPE_NAMES:
        raise DeclarationError(
            f"{where}: unknown dtype rule {op.dtype!r} (one of {', '.join(DTYPE_RULES)}, or a "
            "dtype name)"
        )
    for a in op.attrs:
        try:
            check = value_check(a.kind)
        except DeclarationError as e:
            raise DeclarationError(f"{where}: attribute {a.name!r}: {e}") from None
        alternatives = parse_kind(a.kind)
        if "None" in alternatives[:-1] or alternatives == ("None",):
            # the IR's kind is "X or None" (ir/attrs.py), spelt so; None alone takes nothing
            raise DeclarationError(
                f"{where}: attribute {a.name!r}: None comes last in a kind, after another: "
                f"{a.kind!r}"
            )
        if not a.required and not check(a.default):
            raise DeclarationError(
                f"{where}: attribute {a.name!r}: default {a.default!r} is not {a.kind}"
            )
    for n in op.dim_values:
        found = op.attr_index.get(n) if isinstance(n, str) else None
        if found is None or "list[int | dim]" not in parse_kind(found.kind):
            raise DeclarationError(
                f"{where}: dim_values names {n!r}, which is not an attribute of kind "
                "list[int | dim]"
            )
