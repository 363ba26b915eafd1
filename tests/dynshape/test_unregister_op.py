"""``dynshape.unregister_op``: a custom op removed from every registry, and registered again.

The case it exists for: a notebook cell that registers an op, run a second time. Each test
registers under its own name and removes it in a ``finally``, so no op outlives its test.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import dynshape
import dynshape.builder as ds
import ir
import shape_funcs
import vm
from dynshape import BuildError
from vm.kernels.attr_schema import has_schema


def _register_scale(name: str, factor_kernel: Callable[..., Any]) -> Callable[..., Any]:
    """The registration cell: ``name`` scales its input by ``factor``."""
    return dynshape.register_op(
        name,
        inputs=["x"],
        attrs={"factor": 1.0},
        pattern="elementwise",
        kernel=factor_kernel,
    )


def _times(x: np.ndarray, out: np.ndarray, factor: float) -> None:
    np.multiply(x, x.dtype.type(factor), out=out)


def _plus(x: np.ndarray, out: np.ndarray, factor: float) -> None:
    np.add(x, x.dtype.type(factor), out=out)


def _run(op: Callable[..., Any], x: np.ndarray) -> np.ndarray:
    """Build, compile and run ``op(x, factor=3)`` on ``x``."""
    v = ds.tensor("x", ("n",), "float32")
    program = ds.build(op(v, factor=3.0), [v])
    result: np.ndarray = dynshape.VirtualMachine(dynshape.compile(program)).run(x)
    return result


def _registered_in(name: str) -> list[str]:
    checks = {
        "ir": ir.has_op,
        "shape_funcs": shape_funcs.has_shape_func,
        "vm": vm.has_kernel,
        "schema": has_schema,
    }
    return [where for where, has in checks.items() if has(name)]


def test_register_unregister_register_again_compiles_and_runs_the_new_op() -> None:
    name = "test_unregister.scale"
    x = np.arange(4, dtype=np.float32)
    try:
        scale = _register_scale(name, _times)
        np.testing.assert_array_equal(_run(scale, x), x * 3)
        assert _registered_in(name) == ["ir", "shape_funcs", "vm", "schema"]

        # Running the cell again without unregistering says how to get the name back.
        with pytest.raises(BuildError) as info:
            _register_scale(name, _times)
        assert str(info.value) == (
            f"register_op: '{name}' is already registered (an IR op, a shape function, a "
            f"kernel); dynshape.unregister_op('{name}') removes it"
        )

        dynshape.unregister_op(name)
        assert _registered_in(name) == []

        scale = _register_scale(name, _plus)  # the cell, edited and run again
        np.testing.assert_array_equal(_run(scale, x), x + 3)
        text = f"def @main(%x: Tensor[(n,), float32]) {{ {name}(%x, factor=3.0) }}"
        np.testing.assert_array_equal(dynshape.VirtualMachine(dynshape.compile(text)).run(x), x + 3)
    finally:
        if ir.has_op(name):
            dynshape.unregister_op(name)


def test_what_was_made_with_a_removed_op_fails_naming_it() -> None:
    name = "test_unregister.stale"
    x = np.ones(2, dtype=np.float32)
    try:
        scale = _register_scale(name, _times)
        v = ds.tensor("x", ("n",), "float32")
        executable = dynshape.compile(ds.build(scale(v), [v]))
        dynshape.unregister_op(name)

        with pytest.raises(BuildError, match=f"unknown op '{name}'"):
            scale(v)  # the builder function made before looks the op up by name
        with pytest.raises(dynshape.ParseError, match=f"unknown op '{name}'"):
            ir.parse(f"def @main(%x: Tensor[(2,), float32]) {{ {name}(%x) }}")
        with pytest.raises(vm.VMError, match=f"'{name}' has no registered kernel"):
            dynshape.VirtualMachine(executable)

        _register_scale(name, _plus)  # a VM made now uses the new kernel
        np.testing.assert_array_equal(dynshape.VirtualMachine(executable).run(x), x + 1)
    finally:
        if ir.has_op(name):
            dynshape.unregister_op(name)


def test_an_op_registered_piece_by_piece_is_removed_too() -> None:
    name = "test_unregister.pieces"
    declared = ir.OpDef(
        name,
        (ir.Operand("x"),),
        (),
        ir.OpPattern.OPAQUE,
        lambda dtypes, attrs: dtypes[0],
    )
    ir.register_op(declared)
    shape_funcs.register_shape_func(name)(lambda ctx, x: x)
    assert _registered_in(name) == ["ir", "shape_funcs"]
    dynshape.unregister_op(name)
    assert _registered_in(name) == []


def test_a_builtin_op_cannot_be_unregistered() -> None:
    with pytest.raises(BuildError) as info:
        dynshape.unregister_op("add")
    assert str(info.value) == (
        "unregister_op: 'add' is a built-in op; only ops added with register_op can be removed"
    )
    assert _registered_in("add") == ["ir", "shape_funcs", "vm", "schema"]


def test_unregistering_an_unknown_name_raises() -> None:
    with pytest.raises(BuildError) as info:
        dynshape.unregister_op("test_unregister.never")
    assert str(info.value) == (
        "unregister_op: no op 'test_unregister.never' is registered (as an IR op, a shape "
        "function, a kernel, a kernel attribute schema)"
    )


def test_unregistering_twice_raises() -> None:
    name = "test_unregister.twice"
    _register_scale(name, _times)
    dynshape.unregister_op(name)
    with pytest.raises(BuildError, match=f"no op '{name}' is registered"):
        dynshape.unregister_op(name)
