"""Shape programs: floor semantics, min/max/comparisons, validation, errors, generated code."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vm import FormatError, RunTimeShapeError, ShapeProgram, ShapeProgramBuilder
from vm.codegen import UnsafeSourceError, check_source
from vm.shape_program import BINARY, MAX_NODES, generate_source, generate_step_source

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


# Generated code, against an independent evaluator --------------------------------------------


def _floordiv(a: int, b: int) -> int:
    """Floor of the exact quotient (a definition independent of Python's ``//``)."""
    return math.floor(Fraction(a, b))


REFERENCE = {
    "add": lambda a, b: a + b,
    "sub": lambda a, b: a - b,
    "mul": lambda a, b: a * b,
    "floordiv": _floordiv,
    "mod": lambda a, b: a - b * _floordiv(a, b),
    "min": min,
    "max": max,
    "eq": lambda a, b: 1 if a == b else 0,
    "ne": lambda a, b: 1 if a != b else 0,
    "lt": lambda a, b: 1 if a < b else 0,
    "le": lambda a, b: 1 if a <= b else 0,
    "gt": lambda a, b: 1 if a > b else 0,
    "ge": lambda a, b: 1 if a >= b else 0,
}


def evaluate(prog: ShapeProgram, inputs: list[int]) -> list:
    """The program's outputs, node by node; raises ZeroDivisionError like the program."""
    v = list(inputs)
    for node in prog.nodes:
        if node[0] == "const":
            v.append(node[1])
        elif node[0] == "neg":
            v.append(-v[node[1]])
        else:
            v.append(REFERENCE[node[0]](v[node[1]], v[node[2]]))
    return [tuple(v[i] for i in o) if isinstance(o, tuple) else v[o] for o in prog.outputs]


def test_the_reference_covers_every_op():
    assert set(REFERENCE) == set(BINARY)


@st.composite
def programs(draw):
    """A random program over 0-3 inputs, every op reachable, and input values for it."""
    n_in = draw(st.integers(0, 3))
    b = ShapeProgramBuilder([f"s{i}" for i in range(n_in)])
    values = list(b.inputs)
    for _ in range(draw(st.integers(0, 25))):
        op = draw(st.sampled_from(["const", "neg", *BINARY]))
        if op == "const" or not values:
            values.append(b.lift(draw(st.integers(-(1 << 62), 1 << 62) | st.integers(-9, 9))))
        elif op == "neg":
            values.append(-draw(st.sampled_from(values)))
        else:
            x, y = draw(st.sampled_from(values)), draw(st.sampled_from(values))
            values.append(b.node(op, x, y))
    outputs: list = []
    for _ in range(draw(st.integers(0, 4))):
        if values and draw(st.booleans()):
            outputs.append(draw(st.sampled_from(values)))
        else:
            outputs.append(
                tuple(draw(st.lists(st.sampled_from(values), max_size=3))) if values else ()
            )
    prog = b.build(outputs)
    inputs = draw(st.lists(st.integers(-20, 20), min_size=n_in, max_size=n_in))
    return prog, inputs


@settings(max_examples=300, deadline=None)
@given(case=programs())
def test_random_programs_agree_with_the_reference(case):
    prog, inputs = case
    run = prog.compile()
    try:
        want = evaluate(prog, inputs)
    except ZeroDivisionError:
        with pytest.raises(RunTimeShapeError, match="division by zero"):
            run(inputs)
        return
    flat = [v for w in want for v in (w if isinstance(w, tuple) else (w,))]
    if any(abs(v) >= 1 << 63 for v in flat):  # beyond any size or dim: the run stops
        with pytest.raises(RunTimeShapeError, match=r"integer of 2\*\*63 or more"):
            run(inputs)
        return
    got = run(inputs)
    assert got == want
    assert [type(g) for g in got] == [type(w) for w in want]


@pytest.mark.parametrize("op", ["floordiv", "mod"])
@pytest.mark.parametrize(("a", "b"), [(7, 2), (-7, 2), (7, -2), (-7, -2), (0, -3), (-1, 5)])
def test_floor_semantics_on_negative_numbers(op, a, b):
    p = ShapeProgramBuilder(["a", "b"])
    x, y = p.inputs
    got = p.build([p.node(op, x, y), p.node(op, x, -3), p.node(op, -7, y)]).compile()([a, b])
    assert got == [REFERENCE[op](a, b), REFERENCE[op](a, -3), REFERENCE[op](-7, b)]


@pytest.mark.parametrize(
    ("build", "inputs", "listing"),
    [
        (lambda p, n, m: [n // m], [3, 0], "(n, m) -> [n // m]"),
        (lambda p, n, m: [n * 2, (n % m,)], [-3, 0], "(n, m) -> [n * 2, (n % m,)]"),
        # both operands constant: Python's compiler must not fold (or reject) 4 // 0
        (lambda p, n, m: [p.lift(4) // 0], [1, 2], "(n, m) -> [4 // 0]"),
    ],
)
def test_division_by_zero_message(build, inputs, listing):
    p = ShapeProgramBuilder(["n", "m"])
    run = p.build(build(p, *p.inputs)).compile()
    with pytest.raises(RunTimeShapeError) as info:
        run(inputs)
    assert str(info.value) == (
        f"division by zero in shape program {listing} with inputs {tuple(inputs)}"
    )
    assert info.value.__cause__ is None and info.value.__suppress_context__


def test_the_generated_source_is_straight_line():
    p = ShapeProgramBuilder(["n"])
    (n,) = p.inputs
    prog = p.build([4 * n, (n,), p.min(n, -2), p.node("lt", n, 3)])
    assert generate_source(prog) == (
        "def run(inputs):\n"
        "    v0, = inputs\n"
        "    v2 = 4 * v0\n"
        "    v4 = v0 if v0 <= (-2) else (-2)\n"
        "    v6 = 1 if v0 < 3 else 0\n"
        # 4 * n could pass 2**63 (n is a dim below it): the one output checked at run time
        "    if v2 >= 9223372036854775808 or v2 <= -9223372036854775808:\n"
        "        raise huge(inputs)\n"
        "    return [v2, (v0,), v4, v6]\n"
    )
    assert prog.compile()([5]) == [20, (5,), -2, 0]
    assert ShapeProgram(0, (), ()).compile()([]) == []


def test_the_instruction_form_reads_and_writes_registers():
    p = ShapeProgramBuilder(["n", "m"])
    n, m = p.inputs
    prog = p.build([4 * n, (n, m // 2)])
    assert generate_step_source(prog, (3, 7), (4, 5), 9) == (
        "def step(r):\n"
        "    v0 = r[3]\n"
        "    v1 = r[7]\n"
        "    try:\n"
        "        v3 = 4 * v0\n"
        "        v5 = v1 // 2\n"
        "    except ZeroDivisionError:\n"
        "        raise fail((v0, v1, )) from None\n"
        "    if v3 >= 9223372036854775808 or v3 <= -9223372036854775808:\n"
        "        raise huge((v0, v1, ))\n"
        "    r[4] = v3\n"
        "    r[5] = (v0, v5)\n"
        "    return 9\n"
    )
    regs = [None] * 8
    regs[3], regs[7] = 5, 9
    assert prog.compile_step((3, 7), (4, 5), 9)(regs) == 9
    assert regs[4] == 20 and regs[5] == (5, 4)
    with pytest.raises(UnsafeSourceError, match="registers do not match"):
        generate_step_source(prog, (3,), (4, 5), 9)


def test_the_instruction_form_reports_a_division_by_zero_with_its_inputs():
    p = ShapeProgramBuilder(["n", "m"])
    n, m = p.inputs
    step = p.build([n // m]).compile_step((0, 1), (2,), 1)
    with pytest.raises(RunTimeShapeError) as info:
        step([3, 0, None])
    assert (
        str(info.value) == "division by zero in shape program (n, m) -> [n // m] with inputs (3, 0)"
    )


def test_a_program_of_the_largest_size_compiles_and_runs():
    # A chain: each node reads the one before (the deepest possible expression, were it nested).
    nodes = [("const", 1)]
    for i in range(MAX_NODES - 1):
        prev = 1 + i
        nodes.append(("add", prev, 0) if i % 3 else ("mod", prev, 1))
    prog = ShapeProgram(1, tuple(nodes), (MAX_NODES, (1, MAX_NODES)))
    prog.validate()
    run = prog.compile()
    for x in (7, -7):
        assert run([x]) == evaluate(prog, [x])


class _EvilInt(int):
    def __repr__(self) -> str:
        return "__import__('os').system('echo pwned')"

    __str__ = __repr__


@pytest.mark.parametrize(
    "program",
    [
        ShapeProgram(1, (("add); __import__('os').system('echo pwned'); (", 0, 0),), (1,)),
        ShapeProgram(1, (("const", "__import__('os')"),), (1,)),
        ShapeProgram(1, (("const", 1.5),), (1,)),
        ShapeProgram(1, (("add", 0, "v0"),), (1,)),
        ShapeProgram(1, (("add", 0, 0),), ("v0",)),
        ShapeProgram(1, (("add", 0, 1),), (1,)),  # a forward reference
        ShapeProgram(1, ((_EvilInt(0), 0, 0),), (1,)),
    ],
)
def test_a_hostile_program_is_refused_by_validation_and_by_the_generator(program):
    with pytest.raises(FormatError):
        program.validate()
    with pytest.raises(UnsafeSourceError):
        program.compile()


def test_an_int_subclass_cannot_choose_the_text_of_a_literal(capfd):
    prog = ShapeProgram(1, (("const", _EvilInt(5)), ("add", 0, _EvilInt(1))), (_EvilInt(2),))
    prog.validate()  # validation accepts int subclasses: the generator must not trust them
    assert "pwned" not in generate_source(prog)
    assert prog.compile()([3]) == [8]
    assert "pwned" not in capfd.readouterr().out


def test_the_safety_check_refuses_text_no_generator_makes():
    for source in [
        "def run(inputs):\n    return ['a']\n",
        "def run(inputs):\n    return inputs.pop()\n",
        "def run(inputs):\n    return open(inputs)\n",
        "def run(inputs):\n    return 1e5\n",
        "def run(inputs):\n    return [v0] # x\n",
    ]:
        with pytest.raises(UnsafeSourceError):
            check_source(source, {"run", "inputs"})
    check_source("def run(inputs):\n    v0, = inputs\n    return [v0 // 2]\n", {"run", "inputs"})


def test_an_integer_that_could_explode_is_refused_at_load():
    """Python ints are unbounded: 20 squarings of a dim would need gigabytes of digits."""
    p = ShapeProgramBuilder(["n"])
    (x,) = p.inputs
    for _ in range(20):
        x = x * x
    with pytest.raises(FormatError, match=r"may compute an integer of \d+ bits \(the limit is"):
        p.build([x]).validate()


def test_outputs_that_reach_2_63_stop_the_run():
    """The loader's bound assumes inputs below 2**63, so outputs that could pass it are checked
    (they could feed the next program: bounds would compound otherwise)."""
    p = ShapeProgramBuilder(["n"])
    (n,) = p.inputs
    prog = p.build([n * n * n, (n,)])
    assert prog.compile()([1000]) == [10**9, (1000,)]
    with pytest.raises(RunTimeShapeError, match=r"computed an integer of 2\*\*63 or more"):
        prog.compile()([2**30])
