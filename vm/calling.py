"""Checking and converting the arguments of ``run``/``invoke`` against a function's signature.

Each parameter gets one converter, built once per VM: the common case (a numpy array of the right
dtype) costs a dtype comparison, a rank comparison and one comparison per static dim. Errors name
the function, the parameter (by its name in the signature) and the axis.
"""

from __future__ import annotations

import difflib
import math
import operator
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from .errors import VMArgumentError
from .executable import Function, TensorSpec, TupleSpec, TypeSpec

Converter = Callable[[Any], Any]


def scalar_to_array(value: Any, dt: np.dtype, what: str) -> np.ndarray:
    """A Python (or numpy) scalar as a 0-d array of ``dt``, if the conversion loses nothing.

    Lossless means: bools only for bool; ints within an integer dtype's range; ints exactly
    representable in a float dtype; floats for float dtypes unless they overflow it (rounding a
    float literal to float32 is what writing it for a float32 parameter means); integral floats
    within range for integer dtypes.
    """
    if isinstance(value, np.generic):
        value = value.item()
    ok = False
    if dt.kind == "b":
        ok = isinstance(value, bool)
    elif isinstance(value, bool):
        ok = False
    elif dt.kind in "iu":
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if isinstance(value, int):
            info = np.iinfo(dt)
            ok = info.min <= value <= info.max
    elif dt.kind == "f":
        if isinstance(value, int):
            with np.errstate(over="ignore"):
                conv = dt.type(value)
            ok = bool(np.isfinite(conv)) and int(conv) == value
        elif isinstance(value, float):
            with np.errstate(over="ignore"):
                ok = bool(np.isfinite(dt.type(value))) or not math.isfinite(value)
    if not ok:
        raise VMArgumentError(f"{what}: {value!r} cannot be converted to {dt.name} without loss")
    return np.array(value, dtype=dt)


def tensor_converter(spec: TensorSpec, what: str) -> Converter:
    """The converter of a tensor parameter described as ``what`` (``main: parameter x``)."""
    dt = np.dtype(spec.dtype)
    rank = len(spec.shape)
    static = [(ax, d) for ax, d in enumerate(spec.shape) if isinstance(d, int)]
    convert = _checking_converter(spec, what, dt, static)
    ndarray = np.ndarray
    if not static:

        def convert_symbolic(a: Any) -> Any:
            # The common case: a type, a dtype identity (numpy's built-in dtypes are
            # singletons; an equal dtype that is another object takes ``convert``) and a rank.
            if type(a) is ndarray and a.dtype is dt and a.ndim == rank:
                return a
            return convert(a)

        return convert_symbolic
    if len(static) == rank:
        full = tuple(d for _, d in static)

        def convert_static(a: Any) -> Any:
            if type(a) is ndarray and a.dtype is dt and a.shape == full:
                return a  # a weight: one type, one dtype and one shape comparison
            return convert(a)

        return convert_static
    return convert


def _checking_converter(
    spec: TensorSpec, what: str, dt: np.dtype[Any], static: list[tuple[int, int]]
) -> Converter:
    """The converter that checks everything (and says what is wrong): the fast paths of
    ``tensor_converter`` fall back to it."""
    rank = len(spec.shape)

    def convert(a: Any) -> Any:
        if not isinstance(a, np.ndarray):
            if isinstance(a, (bool, int, float, np.generic)):
                if rank != 0:
                    raise VMArgumentError(f"{what}: expected a tensor {spec}, got the scalar {a!r}")
                return scalar_to_array(a, dt, what)
            raise VMArgumentError(f"{what}: expected a numpy array {spec}, got {type(a).__name__}")
        if a.dtype != dt or a.ndim != rank:
            raise _mismatch(a, spec, what, dt, static)
        shape = a.shape
        for ax, d in static:
            if shape[ax] != d:
                raise _mismatch(a, spec, what, dt, static)
        return a

    return convert


def _mismatch(
    a: np.ndarray, spec: TensorSpec, what: str, dt: np.dtype[Any], static: list[tuple[int, int]]
) -> VMArgumentError:
    """Why array ``a`` is not a ``spec`` (its dtype, byte order, rank or a static dim)."""
    rank = len(spec.shape)
    if a.dtype != dt and a.dtype.newbyteorder("=") == dt:
        order = "big-endian" if a.dtype.byteorder == ">" else "little-endian"
        return VMArgumentError(
            f"{what}: expected {dt.name} in the machine's byte order, got {order} "
            f"{a.dtype.str!r} (convert it with a.astype({dt.name!r}))"
        )
    if a.dtype != dt:
        return VMArgumentError(
            f"{what}: expected dtype {dt.name}, got {a.dtype.name} "
            f"(expected {spec}, no implicit casts)"
        )
    if a.ndim != rank:
        return VMArgumentError(
            f"{what}: expected rank {rank} {spec}, got rank {a.ndim} with shape {a.shape}"
        )
    for ax, d in static:
        if a.shape[ax] != d:
            return VMArgumentError(
                f"{what}: axis {ax} must be {d}, got {a.shape[ax]} "
                f"(expected {spec}, got shape {a.shape})"
            )
    raise AssertionError("unreachable")  # pragma: no cover


def converter(spec: TypeSpec, what: str) -> Converter:
    """The converter of a parameter of any type."""
    if isinstance(spec, TensorSpec):
        return tensor_converter(spec, what)
    assert isinstance(spec, TupleSpec)
    fields = [converter(f, f"{what}[{i}]") for i, f in enumerate(spec.fields)]

    def convert(a: Any) -> Any:
        if not isinstance(a, (tuple, list)) or len(a) != len(fields):
            raise VMArgumentError(
                f"{what}: expected a tuple of {len(fields)} {spec}, got {type(a).__name__}"
            )
        return tuple(f(x) for f, x in zip(fields, a, strict=False))

    return convert


def arguments_checker(fn: Function) -> Callable[[Sequence[Any]], list[Any]]:
    """A function mapping the user's arguments to the initial registers of ``fn``."""
    convs = [converter(p.type, f"{fn.name}: parameter {p.name!r}") for p in fn.params]
    names = ", ".join(p.name for p in fn.params)
    n = len(convs)
    pad = [None] * (fn.num_registers - n)

    def count_error(args: Sequence[Any]) -> VMArgumentError:
        return VMArgumentError(
            f"{fn.name} takes {n} argument(s) ({names}), got {len(args)}"
            f"\n  signature: {fn.signature}"
        )

    # Specialised by arity (this runs on every call): a comprehension, a zip and a list
    # concatenation cost more than the conversions themselves.
    if n == 1:
        (c0,) = convs

        def check1(args: Sequence[Any]) -> list[Any]:
            if len(args) != 1:
                raise count_error(args)
            return [c0(args[0]), *pad]

        return check1
    if n == 2:
        c0, c1 = convs

        def check2(args: Sequence[Any]) -> list[Any]:
            if len(args) != 2:
                raise count_error(args)
            a, b = args
            return [c0(a), c1(b), *pad]

        return check2

    def check(args: Sequence[Any]) -> list[Any]:
        if len(args) != n:
            raise count_error(args)
        regs = list(map(_call, convs, args))
        regs += pad
        return regs

    return check


def _call_py(convert: Converter, value: Any) -> Any:
    return convert(value)


#: ``f(x)`` as a C function where Python has one (3.11): no Python frame per argument.
_call: Callable[[Converter, Any], Any] = getattr(operator, "call", _call_py)


def positional(fn: Function, args: Sequence[Any], named: Mapping[str, Any]) -> tuple[Any, ...]:
    """The arguments of a call of ``fn`` by position, from ``args`` and ``named``: positional
    arguments first, then names for the rest (as in Python), or one mapping of names to
    arguments (``run({"x": x})``, as ``InferenceSession.run`` takes its feeds). An unknown,
    missing or doubly given parameter is a VMArgumentError naming it."""
    if not named and len(args) == 1 and isinstance(args[0], Mapping):
        named, args = args[0], ()
    names = [p.name for p in fn.params]
    for key in named:
        if not isinstance(key, str) or key not in names:
            close = difflib.get_close_matches(str(key), names, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise VMArgumentError(
                f"{fn.name} has no parameter {key!r} (its parameters: {', '.join(names)}{hint})"
                f"\n  signature: {fn.signature}"
            )
    if len(args) > len(names):
        raise VMArgumentError(
            f"{fn.name} takes {len(names)} argument(s) ({', '.join(names)}), got {len(args)}"
            f"\n  signature: {fn.signature}"
        )
    twice = [n for n in names[: len(args)] if n in named]
    if twice:
        raise VMArgumentError(
            f"{fn.name}: parameter {twice[0]!r} given both by position and by name"
        )
    missing = [n for n in names[len(args) :] if n not in named]
    if missing:
        raise VMArgumentError(
            f"{fn.name}: missing argument(s) {', '.join(map(repr, missing))}"
            f"\n  signature: {fn.signature}"
        )
    return (*args, *(named[n] for n in names[len(args) :]))
