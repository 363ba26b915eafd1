"""The registry of shape functions: one per op, looked up by the op's name.

A shape function is ordinary Python over dims, written once, called as

    fn(ctx, *inputs, **attrs) -> shape | list[shape]

where ``shape`` is a tuple of dims. It returns a tuple for a tensor result and a list of tuples
for a tuple result. The inputs are the function's positional parameters without defaults (their
names are used in error messages); the attributes are keyword parameters, keyword-only by
convention, with the op's defaults. Each input is, by the op's operand kinds and
``data_dependent`` flags:

- the input's shape (a tuple of dims), for an ordinary tensor input;
- a list of shapes, for a tuple input (``concatenate``'s);
- the input's *value*, for a data-dependent input: a numpy array at run time; at compile time a
  numpy array when the value is a known constant, else an ``UnknownValue`` (see context.py).

Dims are ints at run time and ints or sympy expressions at compile time; the function never
needs to know which, because every fact it needs goes through ``ctx`` (see context.py).

This is a public extension point: code outside the package registers the shape function of a
new op with ``@register_shape_func("my.op")`` and both modes work for it at once;
``unregister_shape_func("my.op")`` takes it back (the built-in ops' shape functions stay).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from .context import CONCRETE, UnknownValue
from .errors import ShapeError, ShapeFuncRegistryError

F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class ShapeFunc:
    """A registered shape function."""

    op_name: str
    """The op it computes shapes for."""
    fn: Callable[..., Any]
    """The function itself."""
    data_dependent: tuple[bool, ...]
    """Per input: True if the function reads that input's value rather than its shape."""
    input_names: tuple[str, ...]
    """The names of the inputs, from the function's parameters (used in error messages)."""

    @property
    def is_data_dependent(self) -> bool:
        """True if any input is read by value."""
        return any(self.data_dependent)


_REGISTRY: dict[str, ShapeFunc] = {}
# The bare functions, for the one dict lookup on the run-time path of ``concrete_shapes``.
_FUNCTIONS: dict[str, Callable[..., Any]] = {}
# The ops whose shape functions the package itself registers (``shape_funcs/ops``), recorded by
# the package's ``__init__`` once they all are: those cannot be unregistered.
_BUILTIN: set[str] = set()


@functools.lru_cache(maxsize=1024)
def input_names_of(fn: Callable[..., Any]) -> tuple[str, ...]:
    """The input names of a shape function: positional parameters after ``ctx`` without defaults."""
    params = list(inspect.signature(fn).parameters.values())[1:]
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return tuple(
        p.name for p in params if p.kind in positional and p.default is inspect.Parameter.empty
    )


def register_shape_func(op_name: str, *, data_dependent: Sequence[bool] = ()) -> Callable[[F], F]:
    """Decorator registering the shape function of ``op_name``.

    ``data_dependent`` lists, per input, whether the function reads that input's value
    (``[False, True]``: the second input's value); empty means no input is. Registering an op
    twice raises ShapeFuncRegistryError, as does a ``data_dependent`` of the wrong length.
    """

    def decorate(fn: F) -> F:
        if op_name in _REGISTRY:
            raise ShapeFuncRegistryError(f"op {op_name!r} already has a shape function")
        names = input_names_of(fn)
        flags = tuple(bool(d) for d in data_dependent) or (False,) * len(names)
        if len(flags) != len(names):
            raise ShapeFuncRegistryError(
                f"shape function of {op_name!r}: data_dependent has {len(flags)} flags for "
                f"{len(names)} inputs ({', '.join(names) or 'none'})"
            )
        _REGISTRY[op_name] = ShapeFunc(op_name, fn, flags, names)
        _FUNCTIONS[op_name] = fn
        return fn

    return decorate


def unregister_shape_func(op_name: str) -> ShapeFunc:
    """Remove the shape function of ``op_name`` and return it; the name may then be registered
    again (tests, a notebook cell run again). Raises ShapeFuncRegistryError for a built-in op's
    shape function and for an op that has none."""
    if op_name in _BUILTIN:
        raise ShapeFuncRegistryError(
            f"the shape function of {op_name!r} is built in: only those added with "
            "register_shape_func can be removed"
        )
    try:
        removed = _REGISTRY.pop(op_name)
    except KeyError:
        raise ShapeFuncRegistryError(
            f"cannot unregister: op {op_name!r} has no registered shape function"
        ) from None
    del _FUNCTIONS[op_name]
    return removed


def _record_builtins() -> None:
    """Mark every shape function registered so far as built in (called once, by __init__)."""
    _BUILTIN.update(_REGISTRY)


def get_shape_func(op_name: str) -> ShapeFunc:
    """The shape function of ``op_name``; raises ShapeFuncRegistryError naming the op if none."""
    try:
        return _REGISTRY[op_name]
    except KeyError:
        raise ShapeFuncRegistryError(f"op {op_name!r} has no registered shape function") from None


def has_shape_func(op_name: str) -> bool:
    """True if ``op_name`` has a shape function."""
    return op_name in _REGISTRY


def registered_ops() -> list[str]:
    """Names of every op with a shape function, sorted."""
    return sorted(_REGISTRY)


def concrete_shapes(
    op_name: str, inputs: Sequence[Any], attrs: Mapping[str, Any] | None = None
) -> Any:
    """Run the shape function of ``op_name`` at run time: int dims, numpy values.

    Returns a tuple of ints (a tensor result) or a list of them (a tuple result). A violated
    fact raises ShapeError naming the op, the fact and the input shapes. On success this costs
    one dict lookup and the call: the error text is only built when something fails.
    """
    try:
        fn = _FUNCTIONS[op_name]
    except KeyError:
        raise ShapeFuncRegistryError(f"op {op_name!r} has no registered shape function") from None
    try:
        if attrs:
            return fn(CONCRETE, *inputs, **attrs)
        return fn(CONCRETE, *inputs)
    except ShapeError as e:
        raise e.in_op(op_name, describe_inputs(op_name, inputs)) from None
    except (TypeError, ValueError, IndexError, KeyError, ZeroDivisionError) as e:
        # A malformed call (wrong arity, an unknown attribute, a value of the wrong kind) is
        # still a failure of this op's shapes; the original error stays chained for debugging.
        raise ShapeError(
            f"bad call of the shape function: {type(e).__name__}: {e}",
            op_name,
            describe_inputs(op_name, inputs),
        ) from e


def describe_inputs(op_name: str, inputs: Sequence[Any]) -> str:
    """The inputs of a call of ``op_name``'s shape function as text: ``a (2, 3), b (2, 4)``."""
    names: Sequence[str] = _REGISTRY[op_name].input_names if op_name in _REGISTRY else ()
    parts = []
    for i, value in enumerate(inputs):
        name = names[i] if i < len(names) else f"input{i}"
        parts.append(f"{name} {describe_value(value)}")
    return ", ".join(parts)


def describe_value(value: Any) -> str:
    """One input as text: a shape ``(2, 3)``, a list of shapes, or a value ``= [2, -1]``."""
    if isinstance(value, tuple):
        return shape_text(value)
    if isinstance(value, list):
        return "[" + ", ".join(describe_value(v) for v in value) + "]"
    if isinstance(value, UnknownValue):
        return f"= ? ({value.dtype} {shape_text(value.shape)})"
    if hasattr(value, "tolist") and hasattr(value, "shape"):
        if getattr(value, "size", 0) <= 8:
            return f"= {value.tolist()}"
        return f"= <{value.dtype} array {shape_text(value.shape)}>"
    return repr(value)


def shape_text(shape: Sequence[Any]) -> str:
    """A shape as text, as Python writes tuples: ``(2, 3)``, ``(n,)``, ``()``."""
    if len(shape) == 1:
        return f"({shape[0]},)"
    return "(" + ", ".join(str(d) for d in shape) + ")"
