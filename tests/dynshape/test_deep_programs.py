"""Programs at the nesting limit (ir.MAX_NESTING): compiled, run on the VM and interpreted just
below it; a fast error naming the limit just above it (design/ir.md, "Recursion depth")."""

from __future__ import annotations

import numpy as np
import pytest

import dynshape as ds
import ir
from dynshape.testing import InterpreterError, interpret
from ir import MAX_NESTING
from tests.counting import assert_linear

TOO_DEEP = f"nested too deeply in @main: more than {MAX_NESTING} levels.*let"


def chain(levels: int) -> ir.Module:
    """``add(...add(add(%x, 1f), 1f)..., 1f)``, ``levels`` calls deep, built with the IR API."""
    x = ir.Var("x", ir.TensorType((ir.sym("n"),), "float32"))
    e: ir.Expr = x
    for _ in range(levels):
        e = ir.call("add", e, ir.const(1.0, "float32"))
    return ir.Module({"main": ir.function([x], e)})


def test_just_below_the_limit_compiles_runs_and_interprets() -> None:
    levels = MAX_NESTING - 2  # the function, the calls and %x: MAX_NESTING levels
    module = chain(levels)
    assert ir.nesting_depth(module.main) == MAX_NESTING
    stages = ds.stages(module)
    assert all(str(m) for m in stages.values())  # every stage prints
    x = np.arange(3, dtype="float32")
    out = ds.VirtualMachine(ds.compile(module)).run(x)
    np.testing.assert_array_equal(out, x + levels)
    np.testing.assert_array_equal(interpret(module, x), x + levels)
    np.testing.assert_array_equal(interpret(stages["planned"], x), x + levels)


def test_just_above_the_limit_is_a_fast_error() -> None:
    module = chain(MAX_NESTING)
    x = np.zeros(3, dtype="float32")
    with pytest.raises(ds.CompileError, match=TOO_DEEP):
        ds.compile(module)
    with pytest.raises(ds.CompileError, match=TOO_DEEP):
        ds.stages(module)
    with pytest.raises(InterpreterError, match=TOO_DEEP):
        interpret(module, x)
    # Fast: the error's work grows linearly with the program (counted in Python calls).
    modules = {n: chain(n) for n in (MAX_NESTING, 2 * MAX_NESTING)}
    for f in (ds.compile, lambda m: interpret(m, x)):

        def failing(n: int, f=f) -> None:  # type: ignore[no-untyped-def]
            with pytest.raises(ds.DynShapeError):
                f(modules[n])

        assert_linear(failing, MAX_NESTING)


def test_text_above_the_limit_is_a_parse_error_from_compile() -> None:
    def text(levels: int) -> str:
        return "fn (%x: float32) {\n  " + "exp(" * levels + "%x" + ")" * levels + "\n}"

    with pytest.raises(ds.ParseError, match="nested too deeply") as info:
        ds.compile(text(MAX_NESTING))
    assert info.value.line == 2

    def failing(levels: int) -> None:
        with pytest.raises(ds.ParseError, match="nested too deeply"):
            ds.compile(text(levels))

    assert_linear(failing, MAX_NESTING)  # fast: counted in Python calls, not seconds


def test_the_builder_rejects_a_program_above_the_limit_at_the_users_line() -> None:
    x = ds.tensor("x", (3,), "float32")
    y = x
    for _ in range(MAX_NESTING):
        y = y + 1.0
    with pytest.raises(ds.BuildError, match=r"nested too deeply in the program ds\.build") as info:
        ds.build(y, inputs=[x])
    assert info.value.span is not None and info.value.span.source == __file__


def test_the_builder_below_the_limit_builds_and_runs() -> None:
    x = ds.tensor("x", (3,), "float32")
    y = x
    for _ in range(MAX_NESTING - 10):
        y = y + 1.0
    exe = ds.compile(ds.build(y, inputs=[x]))
    out = ds.VirtualMachine(exe).run(np.zeros(3, "float32"))
    np.testing.assert_array_equal(out, np.full(3, MAX_NESTING - 10, "float32"))
