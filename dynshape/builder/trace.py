"""Building typed IR one call at a time: the heart of the builder.

``apply(op_name, *args, **attrs)`` makes one ``ir.Call`` (located at the user's line) and gives
it its type at once, by running the op's dtype rule and its shape function in symbolic mode
(``SymbolicContext``), exactly as ``infer_types`` will when the module is compiled. So a call
whose shapes provably do not fit fails here, at the user's line, with the shape function's own
message; a fact that cannot be decided yet (``n == m``) is left for the compiler, which turns it
into a run-time check.

The IR nodes are built *untyped* (``ty=None``): the type lives on the ``Value`` wrapper, so the
built module prints as the user would have written it and compiles like parsed text.

Scopes. ``while_loop`` turns a Python function into a global IR function, which cannot capture
values of its caller. While such a function is traced, a ``Scope`` records every node made in
it; a node used there but made outside is a captured value, which ``control.py`` turns into an
extra parameter. The stack of open scopes follows the tracing Python code, so it is a context
variable: each thread (and asyncio task) traces with its own stack, and two loops traced at
once in two threads never record each other's nodes.

Types. ``_TYPES`` maps each node the builder made to its type. It is the one table shared by
every build, on purpose: a node's type is a fact about the node (a weight used by two
programs has one type), it is keyed by the node's identity and forgets it with the node.
"""

from __future__ import annotations

import contextlib
import contextvars
import weakref
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np

import ir
from ir import Constant, Expr, TensorType, TupleType, Type

from ..inference.op_result import op_result_type as infer_op_result_type
from ..inference.symbolic_context import SymbolicContext
from .location import errors_at, fail, user_span

# ---- scopes -----------------------------------------------------------------------------


class Scope:
    """The nodes made while one function body (a loop's condition and body) is traced."""

    def __init__(self) -> None:
        self.made: set[Expr] = set()
        """Every node built in this scope (nodes hash by identity)."""


#: The open scopes of this thread (or task), innermost last. A tuple, replaced on every push
#: and pop, so that a context copied for a new task never shares a list with its parent.
_SCOPES: contextvars.ContextVar[tuple[Scope, ...]] = contextvars.ContextVar(
    "dynshape_builder_scopes", default=()
)


def push_scope() -> Scope:
    """Start recording the nodes made from now on in this thread (until ``pop_scope``)."""
    scope = Scope()
    _SCOPES.set((*_SCOPES.get(), scope))
    return scope


def pop_scope(scope: Scope) -> None:
    """Stop recording into ``scope`` (which must be this thread's innermost)."""
    scopes = _SCOPES.get()
    assert scopes and scopes[-1] is scope
    _SCOPES.set(scopes[:-1])


def made(expr: Expr) -> Expr:
    """Record ``expr`` as made in this thread's innermost scope, if any; return it."""
    scopes = _SCOPES.get()
    if scopes:
        scopes[-1].made.add(expr)
    return expr


#: The symbol ranges the program being traced will declare, if its builder knows them while
#: tracing (``tracing_ranges``).
_RANGES: contextvars.ContextVar[Mapping[str, tuple[int, int | None]] | None] = (
    contextvars.ContextVar("dynshape_builder_ranges", default=None)
)


@contextlib.contextmanager
def tracing_ranges(ranges: Mapping[str, tuple[int, int | None]]) -> Iterator[None]:
    """Type the calls traced inside with ``ranges`` (symbol name -> ``(lo, hi)``), the ranges
    the program will be built with: facts are decided and clamps folded under them as
    ``build``'s type inference will, so the types stay small while tracing (the ONNX importer,
    whose sizes an exporter clamps with ``max``/``min`` that the ranges make moot). ``ranges``
    is read at every call: a caller may narrow it as it goes (narrower ranges keep every type
    computed under wider ones true)."""
    token = _RANGES.set(ranges)
    try:
        yield
    finally:
        _RANGES.reset(token)


# ---- values -----------------------------------------------------------------------------

#: The type of every node a Value was made for (``while_loop`` types the values it captures).
_TYPES: weakref.WeakKeyDictionary[Expr, Type] = weakref.WeakKeyDictionary()


def type_of(expr: Expr) -> Type:
    """The type the builder gave ``expr``."""
    try:
        return _TYPES[expr]
    except KeyError:
        raise fail(f"internal: the builder has no type for {type(expr).__name__}") from None


def wrap(expr: Expr, ty: Type) -> Any:
    """A tensor-typed node as a ``Value``; a tuple-typed one as a tuple of them (projections)."""
    from .value import Value

    made(expr)
    _TYPES[expr] = ty
    if isinstance(ty, TensorType):
        return Value(expr, ty)
    if isinstance(ty, TupleType):
        return tuple(
            wrap(ir.TupleGetItem(expr, i, span=expr.span), f) for i, f in enumerate(ty.fields)
        )
    raise fail(f"cannot use a value of type {ty} in the builder")


def constant(value: Any, dtype: str | None, span: ir.Span | None = None) -> Any:
    """A constant ``Value`` from a Python number or a numpy array (``dtype`` converts)."""
    if isinstance(value, (bool, np.bool_)) and dtype is None:
        dtype = "bool"
    given = np.asarray(value)
    array = np.asarray(value, dtype=dtype)
    if given.dtype.kind == "f" and array.dtype.kind in "iu" and not np.array_equal(array, given):
        raise fail(f"{value!r} is not a whole number: it cannot be a {dtype} constant")
    python_number = not isinstance(value, (np.ndarray, np.generic))  # numpy's keep their dtype
    if array.dtype == np.float64 and dtype is None and python_number:
        array = array.astype(np.float32)  # Python floats default to float32, as in the text
    if array.dtype == np.int64 and dtype is None and python_number:
        array = array.astype(np.int32)  # and Python ints to int32
    with errors_at(span):
        node = Constant(array, span=span)
    return wrap(node, node.tensor_type)


def _is_python_scalar(x: Any) -> bool:
    return isinstance(x, (bool, int, float, np.number, np.bool_))


def _hint_dtype(op_name: str, args: Sequence[Any]) -> str | None:
    """The dtype a Python scalar argument takes: that of the other tensor arguments.

    ``where``'s condition is skipped (its data decide); a non-bool dtype is preferred, so that
    ``less(x, 0)`` makes ``0`` of x's dtype.
    """
    from .value import Value

    values = [a for i, a in enumerate(args) if isinstance(a, Value) and (op_name != "where" or i)]
    for v in values:
        if v.dtype != "bool":
            return v.dtype
    return values[0].dtype if values else None


def as_operand(x: Any, is_tuple: bool, dtype_hint: str | None, span: ir.Span | None) -> Any:
    """An argument as a Value (or a list of them for a tuple operand)."""
    from .value import Value

    if isinstance(x, Value):
        return x
    if is_tuple and isinstance(x, (list, tuple)):
        return [as_operand(v, False, dtype_hint, span) for v in x]
    if _is_python_scalar(x):
        return constant(x, None if isinstance(x, (bool, np.bool_)) else dtype_hint, span)
    if isinstance(x, np.ndarray):
        return constant(x, None, span)
    raise fail(f"expected a tensor value, a number or a numpy array, got {type(x).__name__}")


# ---- one typed op call ------------------------------------------------------------------


def apply(op_name: str, *args: Any, **attrs: Any) -> Any:
    """Call op ``op_name`` on ``args`` (Values, numbers, numpy arrays; a list for a tuple
    operand) with attributes; returns a Value, or a tuple of Values for a tuple result.

    Raises BuildError at the user's line when the call is ill-formed or its shapes cannot fit.
    """
    span = user_span()
    with errors_at(span):
        op = ir.get_op(op_name, span)
        hint = _hint_dtype(op_name, args)
        flags = [o.is_tuple for o in op.operands]
        operands = [
            as_operand(a, flags[i] if i < len(flags) else False, hint, span)
            for i, a in enumerate(args)
        ]
        exprs = [
            made(ir.Tuple(tuple(v.expr for v in a), span=span)) if isinstance(a, list) else a.expr
            for a in operands
        ]
        call = ir.Call(op, tuple(exprs), ir.Attrs(attrs), span=span)
        ty = op_result_type(op, call, operands)
    return wrap(call, ty)


def op_result_type(op: ir.OpDef, call: ir.Call, operands: Sequence[Any]) -> Type:
    """The type of ``call``, by the compiler's own rule (``inference.op_result.op_result_type``)."""
    arg_types: list[Type] = [
        TupleType(tuple(TensorType(v.shape, v.dtype) for v in a))
        if isinstance(a, list)
        else TensorType(a.shape, a.dtype)
        for a in operands
    ]
    return infer_op_result_type(
        SymbolicContext(_RANGES.get()), op, call.attrs, call.args, arg_types
    )
