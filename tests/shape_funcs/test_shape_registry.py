"""The registry as a public extension point, the concrete context, and the layering promise."""

from __future__ import annotations

import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import ir
from dynshape.inference.symbolic_context import SymbolicContext
from shape_funcs import (
    CONCRETE,
    ShapeContext,
    ShapeError,
    ShapeFuncRegistryError,
    UnknownValue,
    concrete_shapes,
    get_shape_func,
    has_shape_func,
    register_shape_func,
    registered_ops,
    unregister_shape_func,
)

ROOT = Path(__file__).resolve().parents[2]


# ---- a user's ops, registered from outside the package, as a user would --------------------
@register_shape_func("user.rows_concat")
def rows_concat(
    ctx: ShapeContext, top: tuple[Any, ...], bottom: tuple[Any, ...]
) -> tuple[Any, ...]:
    """(n, k) on (m, k) -> (n + m, k)."""
    ctx.check_equal(top[1], bottom[1], "top.shape[1] == bottom.shape[1]")
    return (top[0] + bottom[0], top[1])


@register_shape_func("user.head", data_dependent=[False, True])
def head(
    ctx: ShapeContext, x: tuple[Any, ...], count: Any, *, keep: bool = True
) -> tuple[Any, ...]:
    """The first ``count`` rows of x, ``count`` held in a scalar tensor."""
    if not ctx.is_known(count):
        return (ctx.fresh("head"), *x[1:])
    n = int(count)
    ctx.check(n, "<=", x[0], "count <= x.shape[0]")
    return (n, *x[1:])


def test_a_user_op_works_in_both_modes() -> None:
    assert has_shape_func("user.rows_concat") and "user.rows_concat" in registered_ops()
    assert get_shape_func("user.rows_concat").input_names == ("top", "bottom")
    assert concrete_shapes("user.rows_concat", [(2, 3), (4, 3)]) == (6, 3)
    with pytest.raises(ShapeError) as info:
        concrete_shapes("user.rows_concat", [(2, 3), (4, 5)])
    assert str(info.value) == (
        "user.rows_concat: expected top.shape[1] == bottom.shape[1], got 3 != 5 "
        "(inputs: top (2, 3), bottom (4, 5))"
    )
    n, m, k = ir.sym("n"), ir.sym("m"), ir.sym("k")
    ctx = SymbolicContext()
    assert ctx.shapes("user.rows_concat", [(n, k), (m, k)]) == (n + m, k)
    assert ctx.deferred == []
    ctx.shapes("user.rows_concat", [(n, k), (m, 3)])
    assert [c.description for c in ctx.deferred] == [
        "user.rows_concat: top.shape[1] == bottom.shape[1]: k == 3"
    ]


def test_a_user_data_dependent_op_works_in_both_modes() -> None:
    sf = get_shape_func("user.head")
    assert sf.data_dependent == (False, True) and sf.is_data_dependent
    assert concrete_shapes("user.head", [(5, 2), np.array(3)], {"keep": True}) == (3, 2)
    with pytest.raises(ShapeError, match=r"user.head: expected count <= x.shape\[0\], got 7 > 5"):
        concrete_shapes("user.head", [(5, 2), np.array(7)])
    n = ir.sym("n")
    unknown = SymbolicContext().shapes("user.head", [(n, 2), UnknownValue((), "int64")])
    assert ir.is_anonymous(unknown[0]) and unknown[1] == 2
    ctx = SymbolicContext()
    assert ctx.shapes("user.head", [(n, 2), np.array(3)]) == (3, 2)
    assert [c.kind for c in ctx.deferred] == ["<="]


def test_registering_twice_raises() -> None:
    name = f"user.twice_{uuid.uuid4().hex}"
    register_shape_func(name)(rows_concat)
    with pytest.raises(ShapeFuncRegistryError, match=f"op '{name}' already has a shape function"):
        register_shape_func(name)(rows_concat)
    with pytest.raises(ShapeFuncRegistryError, match="already has a shape function"):
        register_shape_func("add")(rows_concat)


def test_unregistering_frees_the_name_for_a_new_function() -> None:
    name = f"user.again_{uuid.uuid4().hex}"
    register_shape_func(name)(rows_concat)
    removed = unregister_shape_func(name)
    assert removed.fn is rows_concat and removed.op_name == name
    assert not has_shape_func(name) and name not in registered_ops()
    with pytest.raises(ShapeFuncRegistryError, match="has no registered shape function"):
        concrete_shapes(name, [(2, 3), (4, 3)])  # the run-time table forgot it too

    @register_shape_func(name)
    def rows_only(ctx: ShapeContext, top: tuple[Any, ...]) -> tuple[Any, ...]:
        return (top[0],)

    assert get_shape_func(name).input_names == ("top",)
    assert concrete_shapes(name, [(2, 3)]) == (2,)
    unregister_shape_func(name)


def test_unregistering_a_builtin_or_unknown_shape_function_raises() -> None:
    with pytest.raises(ShapeFuncRegistryError) as info:
        unregister_shape_func("add")
    assert str(info.value) == (
        "the shape function of 'add' is built in: only those added with register_shape_func "
        "can be removed"
    )
    assert has_shape_func("add")
    with pytest.raises(ShapeFuncRegistryError) as info:
        unregister_shape_func("no.such_op")
    assert str(info.value) == "cannot unregister: op 'no.such_op' has no registered shape function"


def test_data_dependent_flags_must_match_the_inputs() -> None:
    with pytest.raises(ShapeFuncRegistryError, match=r"1 flags for 2 inputs \(top, bottom\)"):
        register_shape_func(f"user.bad_{uuid.uuid4().hex}", data_dependent=[True])(rows_concat)


def test_looking_up_an_op_without_a_shape_function_names_it() -> None:
    with pytest.raises(ShapeFuncRegistryError, match=r"op 'no\.such_op' has no registered shape"):
        get_shape_func("no.such_op")
    with pytest.raises(ShapeFuncRegistryError, match=r"'no\.such_op'"):
        concrete_shapes("no.such_op", [(1,)])
    assert not has_shape_func("no.such_op")


def test_the_concrete_context_is_plain_and_cannot_invent_dims() -> None:
    assert CONCRETE.symbolic is False
    assert CONCRETE.decide(2, "<", 3) is True
    assert CONCRETE.broadcast(1, 0, "x") == 0
    assert CONCRETE.max(2, 5) == 5 and CONCRETE.min(2, 5) == 2
    assert CONCRETE.is_known(UnknownValue((2,)))
    with pytest.raises(ShapeError, match="unknown dim"):
        CONCRETE.fresh("x")
    with pytest.raises(ShapeError, match=r"expected x.shape\[2\] == 1, got 3 != 1"):
        CONCRETE.check_equal(3, 1, "x.shape[{}] == 1", 2)
    with pytest.raises(ShapeError, match="got 3 not divisible by 0"):
        CONCRETE.check_divides(0, 3, "n divisible by k")
    CONCRETE.check_divides(0, 0, "0 divides 0")


def test_importing_shape_funcs_does_not_import_sympy_and_runs_without_it() -> None:
    code = (
        "import sys, numpy as np, shape_funcs\n"
        "assert 'sympy' not in sys.modules, 'sympy imported'\n"
        "print(shape_funcs.concrete_shapes('nn.conv2d', [(1, 3, 9, 9), (4, 3, 3, 3)], {}))\n"
        "print(shape_funcs.concrete_shapes('arange', [np.array(0.), np.array(1.), "
        "np.array(.25)]))\n"
        "assert 'sympy' not in sys.modules, 'sympy imported by a call'\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=False
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[:2] == ["(1, 4, 7, 7)", "(4,)"]


def test_the_benchmark_runs_in_quick_mode() -> None:
    out = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "shape_func_overhead.py"), "--quick"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    assert "trivial python call" in out.stdout and "conv2d" in out.stdout
