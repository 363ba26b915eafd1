"""Shape programs: floor semantics, min/max/comparisons, validation, and errors."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from vm import FormatError, RunTimeShapeError, ShapeProgram, ShapeProgramBuilder

INTS = st.integers(-50, 50)


@given(a=INTS, b=INTS.filter(lambda v: v != 0), c=INTS)
def test_arithmetic_has_python_floor_semantics(a, b, c):
    p = ShapeProgramBuilder(["a", "b", "c"])
    x, y, z = p.inputs
    prog = p.build(
        [
            x + y * z,
            x // y,
            x % y,
            -x - 3,
            p.min(x, z),
            p.max(y, 7),
            10 - x,
            2 * z,
            100 // y,
            7 % y,
            (x // y, z % y),
            p.node("lt", x, z),
            p.node("eq", x, x),
            p.node("ge", y, 0),
        ]
    )
    got = prog.compile()([a, b, c])
    assert got == [
        a + b * c,
        a // b,
        a % b,
        -a - 3,
        min(a, c),
        max(b, 7),
        10 - a,
        2 * c,
        100 // b,
        7 % b,
        (a // b, c % b),
        int(a < c),
        1,
        int(b >= 0),
    ]


def test_division_by_zero_is_a_run_time_shape_error():
    p = ShapeProgramBuilder(["n", "m"])
    n, m = p.inputs
    run = p.build([n // m]).compile()
    with pytest.raises(RunTimeShapeError, match=r"division by zero .*\(n, m\) -> \[n // m\]"):
        run([3, 0])


@pytest.mark.parametrize(
    ("program", "message"),
    [
        (ShapeProgram(1, (("add", 0, 1),), (0,)), "operand"),
        (ShapeProgram(1, (("pow", 0, 0),), (1,)), "unknown op 'pow'"),
        (ShapeProgram(1, (("const", 1.5),), (1,)), "expected an int"),
        (ShapeProgram(1, (), (3,)), "output"),
        (ShapeProgram(-1, (), ()), "num_inputs"),
        (ShapeProgram(1, (("neg", 0, 0),), (1,)), "neg takes 1"),
    ],
)
def test_validation(program, message):
    with pytest.raises(FormatError, match=message):
        program.validate()
