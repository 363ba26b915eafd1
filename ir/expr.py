"""Expression nodes of the IR.

Nodes are immutable and compare by identity: two ``add(%x, %x)`` calls are different nodes, and
a node used twice is shared (the program is a DAG, as in Relay's graph form). Structural
equality is the explicit function ``ir.structurally_equal``. Nodes carry no names of their own
beyond a hint: the printer chooses names.

Every node may carry ``span`` (where it came from) and ``ty`` (its type, filled in by type
inference, which builds new nodes rather than mutating old ones).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Union

import numpy as np

from .attrs import Attrs
from .dtypes import DTYPES
from .errors import IRError
from .function_attrs import FunctionAttrs
from .op import OpDef, get_op
from .ranges import Ranges
from .span import Span
from .types import TensorType, Type, type_symbols


@dataclass(frozen=True, eq=False)
class Expr:
    """Base class of expression nodes."""

    span: Span | None = field(default=None, kw_only=True, repr=False)
    """Where the node came from in the source text, if known."""
    ty: Type | None = field(default=None, kw_only=True, repr=False)
    """The node's type once inferred (``None`` before type inference)."""
    facts: tuple[Any, ...] = field(default=(), kw_only=True, repr=False)
    """The facts about dims that type inference could not decide and that must hold before
    this node's value is used (run-time checks, ``dynshape``'s ``DeferredCheck``s). Set with
    ``ty`` and, like it, kept by the passes and re-derived by inference after parsing."""

    def __str__(self) -> str:
        from .text.printer import expr_to_text  # the printer owns the text form

        return expr_to_text(self)

    def with_type(self, ty: Type) -> Expr:
        """A copy of this node with ``ty`` set (a new node: nodes are immutable)."""
        import dataclasses

        return dataclasses.replace(self, ty=ty)


@dataclass(frozen=True, eq=False)
class Var(Expr):
    """A variable: a function parameter or a let-bound name. Identity is the variable."""

    name_hint: str
    """The name it was written with; the printer may add a suffix to keep names unique."""
    type_annotation: Type | None = None
    """The declared type, if any."""

    def __post_init__(self) -> None:
        if not isinstance(self.name_hint, str) or not self.name_hint:
            raise IRError(f"bad variable name {self.name_hint!r}", self.span)


@dataclass(frozen=True, eq=False)
class GlobalVar(Expr):
    """A reference to a global function of the module, by name (``@main``)."""

    name: str
    """The global's name, without the ``@``."""


@dataclass(frozen=True, eq=False)
class Constant(Expr):
    """A constant tensor. The array is copied and made read-only, unless it already is
    read-only and owns its memory (the ONNX importer's weights: one copy of a large model's
    bytes, not two)."""

    value: np.ndarray
    """The value; its dtype must be one of the IR's dtypes."""

    def __post_init__(self) -> None:
        value = self.value
        frozen = isinstance(value, np.ndarray) and not value.flags.writeable
        if not (frozen and value.flags.owndata and value.flags.c_contiguous):
            value = np.array(value, copy=True)
        if value.dtype.name not in DTYPES:
            raise IRError(f"constant has unsupported dtype {value.dtype.name}", self.span)
        value.setflags(write=False)
        object.__setattr__(self, "value", value)

    @property
    def tensor_type(self) -> TensorType:
        """The (static) type of the constant."""
        return TensorType(self.value.shape, self.value.dtype.name)


Callee = Union[OpDef, "Expr"]


@dataclass(frozen=True, eq=False)
class Call(Expr):
    """A call of an op (with attributes), a function value, a variable or a global."""

    callee: Callee
    """An ``OpDef``, or an expression evaluating to a function (Function, Var, GlobalVar)."""
    args: tuple[Expr, ...]
    """The positional arguments."""
    attrs: Attrs = field(default_factory=Attrs)
    """Attributes, for op calls only (checked and completed with defaults)."""

    def __post_init__(self) -> None:
        args = tuple(self.args)
        for a in args:
            if not isinstance(a, Expr):
                raise IRError(f"call argument {a!r} is not an expression", self.span)
        object.__setattr__(self, "args", args)
        if isinstance(self.callee, OpDef):
            op = self.callee
            if len(args) != op.arity:
                names = ", ".join(o.name for o in op.operands)
                raise IRError(
                    f"op {op.name} takes {op.arity} argument{'s' * (op.arity != 1)} "
                    f"({names}), got {len(args)}",
                    self.span,
                )
            object.__setattr__(self, "attrs", op.make_attrs(self.attrs, self.span))
        elif isinstance(self.callee, Expr):
            if self.attrs:
                raise IRError("only op calls take attributes", self.span)
        else:
            raise IRError(f"cannot call {self.callee!r}", self.span)

    @property
    def op(self) -> OpDef | None:
        """The op called, or None when the callee is a function value."""
        return self.callee if isinstance(self.callee, OpDef) else None


@dataclass(frozen=True, eq=False)
class Function(Expr):
    """A function: parameters, a body, an optional result type, attributes and symbol ranges."""

    params: tuple[Var, ...]
    """The parameters, in order."""
    body: Expr
    """The result expression."""
    ret_type: Type | None = None
    """The declared result type, if any."""
    attrs: FunctionAttrs = field(default_factory=FunctionAttrs)
    """What the compiler records on the function (``Primitive=1``, its step plan, ...): typed
    fields, printed as attributes (``ir/function_attrs.py``)."""
    ranges: Ranges = field(default_factory=Ranges)
    """Declared ranges of named symbols of the parameter types: symbol -> ``(lo, hi)``
    inclusive, ``hi`` None for no upper bound (``where n in [1, 4096]`` in the text). A
    mapping with names or symbols as keys is accepted and normalised to ``Ranges``."""

    def __post_init__(self) -> None:
        params = tuple(self.params)
        for p in params:
            if not isinstance(p, Var):
                raise IRError(f"function parameter {p!r} is not a Var", self.span)
        object.__setattr__(self, "params", params)
        if not isinstance(self.attrs, FunctionAttrs):
            raise IRError(f"function attributes {self.attrs!r} are not FunctionAttrs", self.span)
        if not isinstance(self.ranges, Ranges):
            try:
                object.__setattr__(self, "ranges", Ranges(self.ranges))
            except IRError as e:
                raise IRError(e.message, self.span) from None
        if self.ranges:
            known = self.param_symbols()
            for s in self.ranges:
                if s not in known:
                    raise IRError(
                        f"range for {s}: symbol {s} does not occur in the parameter types",
                        self.span,
                    )

    def param_symbols(self) -> frozenset[Any]:
        """The symbols of the parameters' types (annotated, else inferred)."""
        out: frozenset[Any] = frozenset()
        for p in self.params:
            ty = p.type_annotation or p.ty
            if ty is not None:
                out |= type_symbols(ty)
        return out

    @property
    def is_primitive(self) -> bool:
        """True for fused primitive functions (``Primitive=1``)."""
        return self.attrs.primitive


@dataclass(frozen=True, eq=False)
class Let(Expr):
    """``let var = value; body``."""

    var: Var
    """The variable bound."""
    value: Expr
    """The bound expression."""
    body: Expr
    """Where the variable is in scope; its value is the Let's value."""


@dataclass(frozen=True, eq=False)
class Tuple(Expr):
    """A tuple of values."""

    fields: tuple[Expr, ...]
    """The elements, in order."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "fields", tuple(self.fields))


@dataclass(frozen=True, eq=False)
class TupleGetItem(Expr):
    """Projection ``tuple_value.index``."""

    tuple_value: Expr
    """An expression of tuple type."""
    index: int
    """Which element (0-based)."""

    def __post_init__(self) -> None:
        if isinstance(self.index, bool) or not isinstance(self.index, int) or self.index < 0:
            raise IRError(f"bad tuple index {self.index!r}", self.span)


@dataclass(frozen=True, eq=False)
class If(Expr):
    """``if (cond) { then_branch } else { else_branch }``; ``cond`` is a scalar bool tensor."""

    cond: Expr
    """The condition."""
    then_branch: Expr
    """Evaluated when the condition is true."""
    else_branch: Expr
    """Evaluated when the condition is false."""


def let_chain(expr: Expr, stop: Callable[[Let], bool] | None = None) -> tuple[list[Let], Expr]:
    """The lets of the let chain that starts at ``expr``, outermost first, and its result.

    ``let %a = f(%x); let %b = g(%a); h(%b)`` is a chain of two lets, each the body of the one
    before, whose result is ``h(%b)``: the first body that is not a ``Let``. So a walk reads

        lets, result = ir.let_chain(fn.body)
        for let in lets: ...     # let.var, let.value
        ... result ...

    and ``let_chain(e)`` is ``([], e)`` when ``e`` is not a let. Walks that must not enter a
    let they have already handled (a memoising visitor: a let can be shared) pass ``stop``:
    the chain then ends before the first let ``l`` after ``expr`` with ``stop(l)`` true, which
    is the result. Iterative, as every walk of a chain must be: an ANF body is one chain as
    long as the program, and ``ir.MAX_NESTING`` does not count let bodies.
    """
    lets: list[Let] = []
    node = expr
    while isinstance(node, Let) and not (lets and stop is not None and stop(node)):
        lets.append(node)
        node = node.body
    return lets, node


Binding = tuple[Var, Expr, Span | None, tuple[Any, ...]]
"""A let to build with ``nest_lets``: its variable, value, location and facts."""


def nest_lets(bindings: Sequence[Binding], result: Expr) -> Expr:
    """The let chain binding ``bindings`` in order, outermost first, around ``result``; each let
    is typed as its body (the passes build typed nodes). The inverse of ``let_chain``, and
    iterative for the same reason."""
    body = result
    for var, value, span, facts in reversed(bindings):
        body = Let(var, value, body, span=span, ty=body.ty, facts=facts)
    return body


def call(op_name: str, *args: Expr, span: Span | None = None, **attrs: Any) -> Call:
    """Build a call of the registered op ``op_name`` (attributes checked, defaults filled)."""
    return Call(get_op(op_name, span), tuple(args), Attrs(attrs), span=span)


def const(value: Any, dtype: str | None = None, span: Span | None = None) -> Constant:
    """Build a constant from anything numpy accepts (``const(1.5, "float32")``)."""
    return Constant(np.asarray(value, dtype=dtype), span=span)


def tuple_of(fields: Sequence[Expr], span: Span | None = None) -> Tuple:
    """Build a tuple expression."""
    return Tuple(tuple(fields), span=span)


def function(
    params: Sequence[Var],
    body: Expr,
    ret_type: Type | None = None,
    attrs: FunctionAttrs | Mapping[str, Any] | None = None,
    span: Span | None = None,
    ranges: Mapping[Any, tuple[int, int | None]] | None = None,
) -> Function:
    """Build a function. ``attrs`` may be a mapping (``{"Primitive": 1}``, see
    ``FunctionAttrs.of``). ``ranges`` declares symbol ranges, keyed by name or symbol:
    ``ranges={"n": (1, 4096), "m": (2, None)}`` (``None``: no upper bound)."""
    if not isinstance(attrs, FunctionAttrs):
        try:
            attrs = FunctionAttrs.of(attrs or {})
        except IRError as e:
            raise IRError(e.message, span) from None
    return Function(tuple(params), body, ret_type, attrs, Ranges(ranges or {}), span=span)
