"""ValueBounds: the bounds and decisions the row proof reads, text in and bounds out, and every
bound checked against the values a compiled program computes (random index arithmetic)."""

from __future__ import annotations

import numpy as np
import pytest
import sympy
from hypothesis import given, settings
from hypothesis import strategies as st
from pass_helpers import parse_typed

import dynshape
import ir
from dynshape.analysis.row_values import ValueBounds
from ir import Let


def _bounds_of_result(source: str) -> tuple[ValueBounds, ir.Expr]:
    module, _ = parse_typed(source)
    fn = module["main"]
    lets: dict = {}
    node = fn.body
    while isinstance(node, Let):
        lets[node.var] = node.value
        node = node.body
    return ValueBounds(lets, ir.Ranges({ir.sym("n"): (1, None)})), node


def _main(body: str, params: str = "%x: Tensor[(n, k), float32]") -> str:
    return f"def @main({params}) {{\n{body}\n}}"


N, K = ir.sym("n"), ir.sym("k")

CASES = [
    ('cumsum(full(1i64, shape=[n], dtype="int64"), exclusive=True)', (0, N - 1)),
    ('cumsum(full(2i64, shape=[k], dtype="int64"))', (2, 2 * K)),
    ("take(shape_of(%x), 1i64)", (K, K)),
    ('arange(0i64, take(shape_of(%x), 0i64), 1i64, dtype="int64")', (0, N - 1)),
    ("add(const([[-1, 3]], int64), take(shape_of(%x), 1i64))", (K - 1, K + 3)),
    ("subtract(const([2, 5], int64), const([1, 4], int64))", (-2, 4)),
    ("multiply(const([1, 3], int64), take(shape_of(%x), 0i64))", (N, 3 * N)),
    ('cast(less(take(shape_of(%x), 0i64), 1i64), dtype="int64")', (0, 0)),
    ("where(greater_equal(take(shape_of(%x), 0i64), 1i64), 7i64, shape_of(%x))", (7, 7)),
    ('cast(const([0, 9], int64), dtype="int32")', (0, 9)),
    ("expand_dims(const([4, -4], int64), axis=0)", (-4, 4)),
]

UNKNOWN = [
    "multiply(const([-1, 3], int64), take(shape_of(%x), 0i64))",  # signs unknown
    'cast(take(shape_of(%x), 0i64), dtype="int32")',  # n may not fit an int32
    'cast(const([1, 2], int64), dtype="int4")',  # an int type numpy does not name
    "const([0.5, 2.0], float32)",
    'cast(const([0.5, 2.0], float32), dtype="int64")',
    "const([], int64)",
    "nn.relu(const([1, 2], int64))",  # an op the bounds do not read
]


@pytest.mark.parametrize(("body", "expected"), CASES)
def test_bounds(body, expected):
    values, node = _bounds_of_result(_main(body))
    lo, hi = values.of(node)
    assert sympy.simplify(sympy.sympify(lo) - expected[0]) == 0
    assert sympy.simplify(sympy.sympify(hi) - expected[1]) == 0


@pytest.mark.parametrize("body", UNKNOWN)
def test_unknown_bounds(body):
    values, node = _bounds_of_result(_main(body))
    assert values.of(node) is None


DECISIONS = [
    ('less(cumsum(full(1i64, shape=[n], dtype="int64"), exclusive=True), 0i64)', False),
    (
        'greater_equal(cumsum(full(1i64, shape=[n], dtype="int64"), exclusive=True), '
        "take(shape_of(%x), 0i64))",
        False,
    ),
    (
        'less(cumsum(full(1i64, shape=[n], dtype="int64")), add(take(shape_of(%x), 0i64), 1i64))',
        True,
    ),
    ("logical_or(less(take(shape_of(%x), 1i64), 0i64), const(False, bool))", False),
    ("logical_and(const(True, bool), greater(take(shape_of(%x), 0i64), 0i64))", True),
    ("logical_not(equal(const([3, 3], int64), 3i64))", False),
    ("not_equal(const([1, 2], int64), const([3, 4], int64))", True),
    ("less(take(shape_of(%x), 1i64), 4i64)", None),  # k may be anything
    ("equal(const([1, 2], int64), 1i64)", None),
]


@pytest.mark.parametrize(("body", "expected"), DECISIONS)
def test_decisions(body, expected):
    values, node = _bounds_of_result(_main(body))
    assert values.decided(node) is expected


def test_a_clamp_narrows_the_index_it_keeps():
    source = _main(
        """  %0 = add(%i, 1i64);
  %1 = logical_or(less(%0, 0i64), greater_equal(%0, 6i64));
  where(%1, 99i64, %0)""",
        "%i: Tensor[(n, 4), int64]",
    )
    values, node = _bounds_of_result(source)
    kept = node.args[2]
    assert values.of(kept) is None  # an input plus one: unknown
    assert values.refined(kept, node.args[0], holds=False) == (0, 5)
    assert values.refined(kept, node.args[0], holds=True) is None  # below 0 or above 5


def test_a_take_of_a_joined_index_reads_its_field():
    source = _main(
        """  %0 = expand_dims(cumsum(full(1i64, shape=[n], dtype="int64"), exclusive=True), axis=1);
  %1 = expand_dims(const([5], int64), axis=0);
  %2 = concatenate((%0, broadcast_to(%1, shape=[n, 1])), axis=1);
  take(%2, -1i64, axis=1)""",
    )
    values, node = _bounds_of_result(source)
    assert values.of(node) == (5, 5)


# -- every bound holds on the values a compiled program computes ---------------------------

_LEAVES = [
    'expand_dims(cumsum(full(1i64, shape=[n], dtype="int64"), exclusive=True), axis=1)',
    'expand_dims(cumsum(full(3i64, shape=[4], dtype="int64")), axis=0)',
    "stack((take(shape_of(%x), 0i64),))",
    "const([[-2, 0, 5, 1]], int64)",
]
_OPS = ["add", "subtract", "multiply", "where_less", "cumsum"]


def _program(choices: list[tuple[int, int, int]]) -> str:
    lines = [f"  %{i} = {leaf};" for i, leaf in enumerate(_LEAVES)]
    for op, a, b in choices:
        i = len(lines)
        x, y = f"%{a % i}", f"%{b % i}"
        if _OPS[op] == "where_less":
            expr = f"where(less({x}, {y}), {y}, {x})"
        elif _OPS[op] == "cumsum":
            expr = f"cumsum(broadcast_to({x}, shape=[n, 4]), axis=1)"
        else:
            expr = f"{_OPS[op]}({x}, {y})"
        lines.append(f"  %{i} = {expr};")
    last = len(lines) - 1
    return _main(
        "\n".join(lines) + f"\n  broadcast_to(%{last}, shape=[n, 4])", "%x: Tensor[(n, 4), float32]"
    )


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 4), st.integers(0, 20), st.integers(0, 20)), min_size=1, max_size=6
    ),
    st.integers(1, 5),
)
def test_bounds_hold_on_computed_values(choices, rows):
    source = _program(choices)
    values, node = _bounds_of_result(source)
    bounds = values.of(node)
    if bounds is None:
        return
    vm = dynshape.VirtualMachine(dynshape.compile(source))
    out = np.asarray(vm.run(np.zeros((rows, 4), np.float32)))
    lo, hi = (int(sympy.sympify(b).subs(N, rows)) for b in bounds)
    assert lo <= out.min() and out.max() <= hi, (lo, hi, out)
