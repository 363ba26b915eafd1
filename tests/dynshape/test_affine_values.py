"""AffineValues: integer values affine in their index, text in and forms out, the gathers
whose index enumerates their axis, and every form checked against the values a compiled
program computes (random index arithmetic)."""

from __future__ import annotations

import numpy as np
import pytest
import sympy
from hypothesis import given, settings
from hypothesis import strategies as st
from test_batch_row_numbers import DYNAMO, ROBERTA, TORCHSCRIPT
from test_row_values import _bounds_of_result

import dynshape
import ir
from dynshape.analysis.affine_values import Affine, AffineValues
from dynshape.analysis.dataflow import use_graph
from ir import Call

N, K = ir.sym("n"), ir.sym("k")


def _analysed(source: str) -> tuple[AffineValues, ir.Expr, list[Call]]:
    """The analysis of ``main``, its result and its ``take`` calls (in order)."""
    values, node = _bounds_of_result(source)
    nodes = [n for v in [*values.lets.values(), node] for n in use_graph(v).order]
    takes = [n for n in nodes if isinstance(n, Call) and n.op is not None and n.op.name == "take"]
    return AffineValues(values), node, takes


def _main(body: str, params: str = "%x: Tensor[(n, k), float32]") -> str:
    return f"def @main({params}) {{\n{body}\n}}"


def _same(a: object, b: object) -> bool:
    return sympy.simplify(sympy.sympify(a) - sympy.sympify(b)) == 0


ROWS = 'expand_dims(cumsum(full(1i64, shape=[n], dtype="int64"), exclusive=True), axis=1)'

FORMS = [
    ('cumsum(full(1i64, shape=[n], dtype="int64"), exclusive=True)', (0, (1,))),
    ('cumsum(full(3i64, shape=[k], dtype="int64"))', (3, (3,))),
    ("take(shape_of(%x), 1i64)", (K, ())),
    ('arange(2i64, take(shape_of(%x), 0i64), 3i64, dtype="int64")', (2, (3,))),
    ("const([[5, 8, 11]], int64)", (5, (0, 3))),
    ("const([[7, 7], [7, 7]], int32)", (7, (0, 0))),
    (f"multiply({ROWS}, stack((take(shape_of(%x), 1i64),)))", (0, (K, 0))),
    (f"subtract(broadcast_to({ROWS}, shape=[n, k]), 1i64)", (-1, (1, 0))),
    (f"transpose(add({ROWS}, const([[0, 1, 2]], int64)), axes=[1, 0])", (0, (1, 1))),
    (f"reshape(expand_dims({ROWS}, axis=0), newshape=[n])", (0, (1,))),
    (f"squeeze({ROWS}, axis=[1])", (0, (1,))),
    (f'cast({ROWS}, dtype="int32")', (0, (1, 0))),
    (f"where(less({ROWS}, 0i64), 9i64, {ROWS})", (0, (1, 0))),  # decided: never below 0
    (
        f"take(concatenate((expand_dims(broadcast_to({ROWS}, shape=[n, 3]), axis=2), "
        "expand_dims(broadcast_to(const([[4, 5, 6]], int64), shape=[n, 3]), axis=2)), axis=2), "
        "1i64, axis=-1)",
        (4, (0, 1)),
    ),
]

UNKNOWN = [
    "const([[-2, 0, 5, 1]], int64)",  # no constant step
    "const([0.5, 1.5], float32)",
    'cumsum(full(1i64, shape=[n], dtype="int64"), reverse=True)',
    f"multiply({ROWS}, {ROWS})",  # a square: not affine
    f"where(less({ROWS}, 3i64), 9i64, {ROWS})",  # undecided
    'cast(cast(take(shape_of(%x), 0i64), dtype="float32"), dtype="int64")',
    # two lengths the types do not relate: one of them is broadcast or the run fails
    'add(cumsum(full(1i64, shape=[n], dtype="int64")), cumsum(full(1i64, shape=[k], dtype="int64")))',
]


@pytest.mark.parametrize(("body", "expected"), FORMS)
def test_forms(body, expected):
    values, node, _ = _analysed(_main(body))
    form = values.of(node)
    assert form is not None
    assert _same(form.offset, expected[0]), form
    assert len(form.coefs) == len(expected[1]) and all(
        _same(c, e) for c, e in zip(form.coefs, expected[1], strict=True)
    ), form


@pytest.mark.parametrize("body", UNKNOWN)
def test_unknown_forms(body):
    values, node, _ = _analysed(_main(body))
    assert values.of(node) is None


# -- gathers that enumerate their axis -----------------------------------------------------


@pytest.mark.parametrize(("source", "shape"), [(TORCHSCRIPT, (N, 4, 1)), (DYNAMO, (N, 4))])
def test_the_exporters_mask_gathers_enumerate_the_mask(source, shape):
    values, _, takes = _analysed(source)
    (gather,) = [t for t in takes if t.args[0].ty.shape[0] == 4 * N]
    found = values.enumerated_shape(gather)
    assert found is not None and len(found) == len(shape)
    assert all(_same(a, b) for a, b in zip(found, shape, strict=True)), found


def _gather(index: str, data: str = "reshape(%m, newshape=[n*4])", axis: str = ", axis=0") -> str:
    return _main(
        f"  %rows = {ROWS};\n"
        '  %cols = expand_dims(cumsum(full(1i64, shape=[4], dtype="int64"), exclusive=True), axis=0);\n'
        f"  take({data}, {index}{axis})",
        "%m: Tensor[(n, 4), int64]",
    )


ENUMERATING = {
    "rows_then_columns": ("add(multiply(%rows, 4i64), %cols)", (N, 4)),
    "flattened": ("add(multiply(%rows, 4i64), %cols)", (N, 4), "%m", ""),
    "one_axis_of_several": ("squeeze(%rows, axis=[1])", (N, 4), "%m", ", axis=0"),
}

NOT_ENUMERATING = {
    "columns_first": "add(%rows, multiply(%cols, 4i64))",  # every entry, out of order
    "shifted": "add(add(multiply(%rows, 4i64), %cols), 1i64)",  # past the end
    "a_row_short": "add(multiply(%rows, 3i64), %cols)",  # repeats entries
    "half_the_axis": "multiply(%rows, 4i64)",  # every fourth entry
}


@pytest.mark.parametrize("name", sorted(ENUMERATING))
def test_enumerating_gathers(name):
    index, shape, *where = ENUMERATING[name]
    values, node, _ = _analysed(_gather(index, *where))
    found = values.enumerated_shape(node)
    assert found is not None and all(_same(a, b) for a, b in zip(found, shape, strict=True))


@pytest.mark.parametrize("name", sorted(NOT_ENUMERATING))
def test_gathers_that_do_not_enumerate(name):
    values, node, _ = _analysed(_gather(NOT_ENUMERATING[name]))
    assert values.enumerated_shape(node) is None


def test_a_scalar_read_is_left_a_take():
    """``take(shape_of(x), 0)`` enumerates a one-entry array, but a reshape would gain
    nothing (and change a program the other passes see)."""
    values, node, _ = _analysed(_main("take(const([7], int64), 0i64)"))
    assert values.enumerated_shape(node) is None


def test_roberta_positions_are_not_an_enumeration():
    values, _, takes = _analysed(ROBERTA)
    assert all(values.enumerated_shape(t) is None for t in takes)


# -- every form holds on the values a compiled program computes ----------------------------

_LEAVES = [
    ROWS,
    'expand_dims(cumsum(full(3i64, shape=[4], dtype="int64")), axis=0)',
    "stack((take(shape_of(%x), 0i64),))",
    "const([[-2, 0, 5, 1]], int64)",
    "const([[1, 3, 5, 7]], int64)",
    'reshape(arange(1i64, add(take(shape_of(%x), 0i64), 1i64), 1i64, dtype="int64"), newshape=[n, 1])',
    f"where(greater_equal({ROWS}, 0i64), {ROWS}, 5i64)",
]
_OPS = ["add", "subtract", "multiply", "transpose_back"]


def _program(choices: list[tuple[int, int, int]]) -> str:
    lines = [f"  %{i} = broadcast_to({leaf}, shape=[n, 4]);" for i, leaf in enumerate(_LEAVES)]
    for op, a, b in choices:
        i = len(lines)
        x, y = f"%{a % i}", f"%{b % i}"
        if _OPS[op] == "transpose_back":
            expr = f"transpose(transpose({x}, axes=[1, 0]), axes=[1, 0])"
        else:
            expr = f"{_OPS[op]}({x}, {y})"
        lines.append(f"  %{i} = {expr};")
    return _main("\n".join(lines) + f"\n  %{len(lines) - 1}", "%x: Tensor[(n, 4), float32]")


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 3), st.integers(0, 30), st.integers(0, 30)), min_size=1, max_size=6
    ),
    st.integers(1, 5),
)
def test_forms_hold_on_computed_values(choices, rows):
    source = _program(choices)
    values, node, _ = _analysed(source)
    form = values.of(node)
    if form is None:
        return
    vm = dynshape.VirtualMachine(dynshape.compile(source))
    out = np.asarray(vm.run(np.zeros((rows, 4), np.float32)))
    offset, c0, c1 = (int(sympy.sympify(d).subs(N, rows)) for d in (form.offset, *form.coefs))
    i, j = np.indices(out.shape)
    np.testing.assert_array_equal(out, offset + c0 * i + c1 * j)


def test_an_affine_value_knows_when_it_is_one_value():
    assert Affine(3, (0, 0)).is_constant()
    assert not Affine(3, (0, N)).is_constant()
