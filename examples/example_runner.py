"""The run loop every example shares: compile once, run at each size, check against numpy,
print the memory report.

An example module defines ``build_model()``, ``make_params(rng)``, ``make_inputs(rng, size)``,
``numpy_reference(*params, *inputs)``, ``bindings(size)``, ``SIZES``, ``SMALL_SIZES``,
``RTOL``, ``ATOL`` and ``SIZE_LABEL``; its ``main`` is ``run_example(module, argv)``.
"""

from __future__ import annotations

import argparse
from types import ModuleType
from typing import Any

import numpy as np

import dynshape
from dynshape.memory_report import memory_report


def _check(got: Any, want: Any, rtol: float, atol: float) -> None:
    """Outputs equal within tolerance, with the same shapes and dtypes (tuples field by field)."""
    if isinstance(want, tuple):
        assert isinstance(got, tuple) and len(got) == len(want), "output tuple differs"
        for g, w in zip(got, want, strict=True):
            _check(g, w, rtol, atol)
        return
    assert got.shape == want.shape, f"shape {got.shape} != {want.shape}"
    assert got.dtype == want.dtype, f"dtype {got.dtype} != {want.dtype}"
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)


def _shapes(value: Any) -> str:
    if isinstance(value, tuple):
        return ", ".join(_shapes(v) for v in value)
    return str(tuple(value.shape))


def run_example(model: ModuleType, argv: list[str] | None = None) -> int:
    """Run ``model``'s example; return the exit status (1 if any numpy check failed)."""
    parser = argparse.ArgumentParser(description=(model.__doc__ or "").splitlines()[0])
    parser.add_argument("--small", action="store_true", help="a few small sizes (for tests)")
    args = parser.parse_args(argv)
    sizes = model.SMALL_SIZES if args.small else model.SIZES
    label = model.SIZE_LABEL
    rng = np.random.default_rng(0)
    program = model.build_model()
    vm = dynshape.VirtualMachine(dynshape.compile(program))  # compiled once, for every size
    params = model.make_params(rng)
    ok = True
    for size in sizes:
        inputs = model.make_inputs(rng, size)
        got = vm.run(*params, *inputs)
        try:
            _check(got, model.numpy_reference(*params, *inputs), model.RTOL, model.ATOL)
            print(f"{label}={size}: output {_shapes(got)}: numpy check passed")
        except AssertionError as error:
            ok = False
            print(f"{label}={size}: numpy check FAILED\n{error}")
    note = getattr(model, "REPORT_NOTE", "")
    print(f"\nmemory report at {label}={sizes[-1]}{note}:")
    for fn in memory_report(program, model.bindings(sizes[-1])).values():
        print(fn.format())
    print("all numpy checks passed" if ok else "numpy check FAILED")
    return 0 if ok else 1
