"""Assertion helpers for users' test suites: a program checked against a numpy reference.

    assert_program(
        "def @main(%x: Tensor[(n, 3), float32]) { sum(%x, axis=1) }",
        lambda x: x.sum(axis=1),
        bindings=[{"n": 0}, {"n": 1}, {"n": 1000}],
    )

The program is compiled once and run on the VM at every binding of its symbols; inputs are
random (seeded) in the shapes the binding gives ``@main``'s parameters, or built by
``make_inputs(rng, binding)``. A failure says which binding, which output, the shapes and dtypes
and the largest absolute and relative errors.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from ir import Module

from .compare import difference
from .inputs import random_inputs

DEFAULT_BINDINGS: tuple[Mapping[str, int], ...] = ({"n": 0}, {"n": 1}, {"n": 1000})


def _copy(value: Any) -> Any:
    if isinstance(value, tuple):
        return tuple(_copy(v) for v in value)
    return np.array(value, copy=True) if isinstance(value, np.ndarray) else value


def _describe_args(args: Sequence[Any]) -> str:
    def one(a: Any) -> str:
        if isinstance(a, tuple):
            return "(" + ", ".join(one(x) for x in a) + ")"
        v = np.asarray(a)
        return f"{v.dtype}{list(v.shape)}"

    return ", ".join(one(a) for a in args)


def assert_program(
    program: Module | str,
    reference: Callable[..., Any],
    bindings: Sequence[Mapping[str, int]] = DEFAULT_BINDINGS,
    make_inputs: Callable[[np.random.Generator, Mapping[str, int]], Sequence[Any]] | None = None,
    rtol: float | None = None,
    atol: float | None = None,
    seed: int = 0,
    check_stages: bool = False,
) -> None:
    """Check ``program`` against the numpy ``reference`` at every binding of its symbols.

    ``reference`` takes copies of ``@main``'s arguments and returns an array (or a tuple of
    them). Floats compare with ``rtol``/``atol`` (defaults by dtype), other dtypes exactly, and
    the VM's dtype must be the kind of the reference's (the reference may compute in float64).
    With ``check_stages`` every stage of the compiler is also interpreted and compared (see
    ``check_stages``). Raises AssertionError naming the binding and the output.
    """
    import dynshape
    from dynshape.pipeline import as_module

    from .differential import check_stages as run_checked

    module = as_module(program)
    machine = dynshape.VirtualMachine(dynshape.compile(module))
    for binding in bindings:
        label = ", ".join(f"{k}={v}" for k, v in binding.items()) or "no symbols"
        rng = np.random.default_rng(seed + zlib.crc32(label.encode()))
        try:
            args = list(
                make_inputs(rng, binding) if make_inputs else random_inputs(module, binding, rng)
            )
        except ValueError as e:
            raise AssertionError(f"binding {label}: cannot make inputs: {e}") from None
        try:
            with np.errstate(all="ignore"):
                expected = reference(*_copy(args))
        except Exception as e:
            raise AssertionError(
                f"binding {label}: the reference raises {type(e).__name__}: {e}\n"
                f"  inputs: {_describe_args(args)}"
            ) from e
        if check_stages:
            run_checked(module, *args, rtol=rtol, atol=atol)
        try:
            actual = machine.run(*args)
        except dynshape.DynShapeError as e:
            raise AssertionError(
                f"binding {label}: the program fails on inputs {_describe_args(args)}: {e}"
            ) from e
        found = difference(actual, _as_result(expected), rtol, atol, exact_dtype=False)
        if found:
            raise AssertionError(f"binding {label}: {found}\n  inputs: {_describe_args(args)}")


def _as_result(value: Any) -> Any:
    if isinstance(value, (tuple, list)):
        return tuple(_as_result(v) for v in value)
    return np.asarray(value)
