"""Symbol ranges: the ``where`` clause, ``Function.ranges``, and proofs under ranges."""

from __future__ import annotations

import textwrap

import pytest
import sympy
from hypothesis import given, settings
from hypothesis import strategies as st

import ir
from ir.ranges import Ranges

n, m, k = ir.sym("n"), ir.sym("m"), ir.sym("k")

SOURCE = textwrap.dedent(
    """\
    def @main(%x: Tensor[(n, 4), float32], %y: Tensor[(m,), float32]) -> Tensor[(n, 4), float32] where m in [2, ...], n in [1, 4096] {
      %x
    }"""
)


# ---- text format -------------------------------------------------------------------------------


def test_where_clause_round_trips() -> None:
    module = ir.parse(SOURCE)
    assert dict(module["main"].ranges) == {n: (1, 4096), m: (2, None)}
    assert str(module) == SOURCE
    again = ir.parse(str(module))
    assert str(again) == SOURCE
    assert ir.structurally_equal(again, module)


def test_where_clause_prints_sorted_by_name() -> None:
    text = SOURCE.replace(
        "where m in [2, ...], n in [1, 4096]", "where n in [1, 4096], m in [2, ...]"
    )
    assert str(ir.parse(text)) == SOURCE


def test_where_clause_without_result_type_and_on_inline_functions() -> None:
    text = textwrap.dedent(
        """\
        def @main(%x: Tensor[(n,), float32]) where n in [0, 7] {
          %0 = fn (%p: Tensor[(k, n), float32]) -> Tensor[(k, n), float32] where k in [3, 3] {
            %p
          };
          (%0, %x)
        }"""
    )
    module = ir.parse(text)
    assert str(module) == text
    assert module["main"].ranges == {n: (0, 7)}


def test_no_where_clause_means_no_ranges() -> None:
    module = ir.parse("def @main(%x: Tensor[(n,), float32]) { %x }")
    assert module["main"].ranges == {}
    assert "where" not in str(module)


def _pos(text: str, needle: str) -> tuple[int, int]:
    offset = text.index(needle, text.index("where"))
    line = text.count("\n", 0, offset) + 1
    column = offset - (text.rfind("\n", 0, offset) + 1) + 1
    return line, column


def _where(clause: str) -> str:
    return (
        "def @main(%x: Tensor[(n, 4), float32],\n"
        "          %y: Tensor[(m,), float32]) -> float32\n"
        f"    where {clause} {{\n"
        "  sum(%x)\n}"
    )


ERRORS = [
    ("n in [-1, 10]", "-1", "the lower bound of n is negative: ranges of dims are >= 0"),
    ("n in [1, -10]", "-10", "the upper bound of n is negative: ranges of dims are >= 0"),
    ("n in [5, 2]", "2]", "empty range for n: [5, 2] (the upper bound is below the lower bound)"),
    ("k in [1, 2]", "k", "symbol k in the where clause does not occur in the parameter types"),
    ("n in [1, 2], n in [1, 3]", "n in [1, 3]", "duplicate range for n"),
    ("m >= 2", ">", "unexpected character '>'"),
    ("n = 4", "=", "expected 'in' and a range '[lo, hi]' after n, found '='"),
    ("n in (1, 4)", "(", "expected '[' starting the range of n, found '('"),
    ("n in [1.5, 4]", "1.5", "expected a non-negative integer lower bound for n, found '1.5'"),
    ("n in [1, 4i64]", "4i64", "expected a non-negative integer upper bound for n or '...'"),
    ("n in [1, ..]", "..", "expected '...' (no upper bound)"),
    ("n in [1]", "]", "expected ',' and an upper bound (or '...') in the range of n, found ']'"),
    ("?a in [1, 2]", "?a", "expected a symbol name in the where clause ('n in [lo, hi]')"),
    ("n in [1, 4] m in [0, 1]", "m in", "expected '{' starting a block, found 'm'"),
]


@pytest.mark.parametrize(("clause", "at", "message"), ERRORS, ids=[e[0] for e in ERRORS])
def test_where_clause_errors(clause: str, at: str, message: str) -> None:
    text = _where(clause)
    line, column = _pos(text, at)
    with pytest.raises(ir.ParseError) as info:
        ir.parse(text)
    err = info.value
    assert message in err.message
    assert err.span is not None
    assert (err.span.line, err.span.column) == (line, column), str(err)
    assert f":{line}:{column}:" in str(err)


# ---- the Function field and the Python API -----------------------------------------------------


def _fn(**kwargs: object) -> ir.Function:
    x = ir.Var("x", ir.TensorType((n, m), "float32"))
    return ir.function([x], x, **kwargs)  # type: ignore[arg-type]


def test_function_accepts_names_and_symbols() -> None:
    by_name = _fn(ranges={"n": (1, 4096), "m": (0, None)})
    by_symbol = _fn(ranges={n: (1, 4096), m: (0, None)})
    assert by_name.ranges == by_symbol.ranges == {n: (1, 4096), m: (0, None)}
    assert isinstance(by_name.ranges, Ranges)
    assert hash(by_name.ranges) == hash(by_symbol.ranges)
    assert ir.structurally_equal(by_name, by_symbol)
    assert "where m in [0, ...], n in [1, 4096]" in str(by_name)


def test_ranges_are_immutable() -> None:
    fn = _fn(ranges={"n": (1, 8)})
    with pytest.raises(TypeError):
        fn.ranges[n] = (0, 1)  # type: ignore[index]
    spec = {"n": (1, 8)}
    fn2 = _fn(ranges=spec)
    spec["n"] = (0, 0)
    assert fn2.ranges[n] == (1, 8)


@pytest.mark.parametrize(
    ("ranges", "message"),
    [
        ({"n": (-1, 4)}, "the lower bound -1 is negative"),
        ({"n": (5, 4)}, "[5, 4] is empty (hi < lo)"),
        ({"n": (1.5, 4)}, "bounds must be ints"),
        ({"n": (True, 4)}, "bounds must be ints"),
        ({"n": (1, 2, 3)}, "expected (lo, hi)"),
        ({ir.fresh(): (1, 2)}, "only named symbols"),
        ({sympy.Symbol("n"): (1, 2)}, "must be a dim symbol"),
        ({"k": (1, 2)}, "symbol k does not occur in the parameter types"),
        ({"n": (1, 2), n: (1, 3)}, "duplicate range for n"),
        ({"2n": (1, 2)}, "is not a symbol name"),
    ],
)
def test_function_rejects_bad_ranges(ranges: dict, message: str) -> None:
    with pytest.raises(ir.IRError) as info:
        _fn(ranges=ranges)
    assert message in str(info.value)


def test_structural_equality_compares_ranges() -> None:
    assert not ir.structurally_equal(_fn(ranges={"n": (1, 8)}), _fn(ranges={"n": (1, 9)}))
    assert not ir.structurally_equal(_fn(ranges={"n": (1, 8)}), _fn())
    assert ir.structurally_equal(_fn(ranges={"n": (1, None)}), _fn(ranges={n: (1, None)}))


def test_mutators_keep_ranges() -> None:
    class Rewrite(ir.ExprMutator):
        def visit_call(self, call: ir.Call) -> ir.Expr:
            return ir.call("negative", *(self.visit(a) for a in call.args))

    x = ir.Var("x", ir.TensorType((n,), "float32"))
    fn = ir.function([x], ir.call("abs", x), ranges={"n": (2, 5)})
    new = Rewrite().visit(fn)
    assert isinstance(new, ir.Function) and new is not fn
    assert new.ranges == {n: (2, 5)}


# ---- proofs ------------------------------------------------------------------------------------

R = {"n": (1, 10), "m": (2, 10)}

PROOFS = [
    # (a, op, b, ranges, expected)
    (n, "<=", 16, R, True),
    (n, ">", 10, R, False),
    (n, ">=", 1, R, True),
    (n, "==", 0, R, False),
    (n, "!=", 0, R, True),
    (n, "<", 5, R, None),
    (n, "==", m, R, None),
    (m, "==", 1, R, False),
    (n * m, ">=", m, R, True),  # needs the lower bound inside a product
    (n * m, "<=", 100, R, True),
    (n * m, "<", 100, R, None),
    (4 * n + 8, "<=", 48, R, True),
    (sympy.floor(n / 4), "<=", 2, R, True),
    (sympy.Mod(n, 16), "==", n, R, True),  # n < 16: n % 16 is n
    (sympy.Mod(k, 4), "<", 4, {}, True),  # no ranges: proved by ir.dim_proofs
    (sympy.Mod(k, m), "<", 10, R, True),
    (sympy.Max(n, m), "<=", 10, R, True),
    (sympy.Min(n, m) - 1, ">=", 0, R, True),
    (sympy.ceiling(n / 3), "<=", 4, R, True),
    (n, "==", 4, {"n": (4, 4)}, True),
    (sympy.floor(n / 4) * 4, "==", n, {"n": (8, 8)}, True),
    (n - 3, ">=", 0, {"n": (3, None)}, True),
    (n, "<=", 10**6, {"n": (3, None)}, None),
    (2 * n, ">", n + 1, {"n": (2, None)}, True),
]


@pytest.mark.parametrize(("a", "op", "b", "ranges", "expected"), PROOFS)
def test_compare_with_ranges(a: ir.Dim, op: str, b: ir.Dim, ranges: dict, expected: object) -> None:
    a, b = ir.check_dim(a) if not isinstance(a, int) else a, b
    assert ir.compare(a, op, b, ranges=ranges) is expected


def test_compare_without_ranges_is_unchanged() -> None:
    assert ir.compare(n, "<=", 16) is None
    assert ir.compare(n, "<=", 16, ranges={}) is None
    assert ir.compare(n + 1, ">", n, ranges=R) is True  # sympy's proof still comes first
    assert ir.compare(3, "<", 4, ranges=R) is True


def test_dim_max_min_under_ranges() -> None:
    assert ir.dim_max(n, 16, R) == 16
    assert ir.dim_min(n, 0, R) == 0
    assert ir.dim_min(n, 1, R) == 1
    assert isinstance(ir.dim_max(n, m, R), sympy.Max)


BOUNDS = [
    (7, {}, (7, 7)),
    (n, {}, (0, None)),
    (n, R, (1, 10)),
    (4 * n * m, R, (8, 400)),
    (n - 1, R, (0, 9)),
    (sympy.floor(n / 3), R, (0, 3)),
    (sympy.ceiling(n / 3), R, (1, 4)),
    (sympy.Mod(n, m), R, (0, 9)),
    (sympy.Max(n, m) + sympy.Min(n, 3), R, (3, 13)),
    (n * k, R, (0, None)),
    (ir.fresh() + n, R, (1, None)),
    (n * n, {"n": (3, 5)}, (9, 25)),
]


@pytest.mark.parametrize(("dim", "ranges", "expected"), BOUNDS)
def test_bounds(dim: ir.Dim, ranges: dict, expected: tuple) -> None:
    assert ir.bounds(dim, ranges) == expected
    assert ir.dims.bounds(dim, ranges) == expected
    assert ir.upper_bound(dim, ranges) == expected[1]
    assert ir.dims.upper_bound(dim, ranges) == expected[1]


_frames = sympy.floor(ir.sym("samples") / 320 - sympy.Rational(5, 4)) + 1
SIMPLIFIED = [
    (sympy.Max(0, n - 3), {"n": (3, None)}, n - 3),
    (sympy.Max(0, n - 3), {"n": (2, None)}, sympy.Max(0, n - 3)),  # n = 2 gives 0
    (sympy.Min(1, n) * m, {"n": (1, 8)}, m),
    (sympy.Mod(n, 16), {"n": (1, 15)}, n),
    (sympy.floor(n / 8), {"n": (0, 7)}, 0),
    # a speech encoder's frames clamped by a broadcast, moot from 400 samples on
    (sympy.Max(0, _frames) * sympy.Min(1, _frames), {"samples": (400, None)}, _frames),
    (sympy.Max(0, n - 3), {}, sympy.Max(0, n - 3)),  # no ranges: nothing to decide with
    (7, {"n": (1, 2)}, 7),
]


@pytest.mark.parametrize(("dim", "ranges", "expected"), SIMPLIFIED)
def test_simplify_under_folds_what_the_ranges_decide(
    dim: ir.Dim, ranges: dict, expected: object
) -> None:
    assert ir.simplify_under(dim, ranges) == expected


# ---- soundness: bounds contain every value, proofs hold at every value -------------------------

_SYMS = (n, m, k)


def _exprs() -> st.SearchStrategy[sympy.Expr]:
    leaves = st.one_of(st.sampled_from(_SYMS), st.integers(0, 6).map(sympy.Integer))

    def extend(sub: st.SearchStrategy[sympy.Expr]) -> st.SearchStrategy[sympy.Expr]:
        pair = st.tuples(sub, sub)
        return st.one_of(
            pair.map(lambda p: p[0] + p[1]),
            pair.map(lambda p: p[0] * p[1]),
            pair.map(lambda p: sympy.Max(*p)),
            pair.map(lambda p: sympy.Min(*p)),
            st.tuples(sub, st.integers(1, 5)).map(lambda p: sympy.floor(p[0] / p[1])),
            st.tuples(sub, st.integers(1, 5)).map(lambda p: sympy.ceiling(p[0] / p[1])),
            st.tuples(sub, st.integers(1, 5)).map(lambda p: sympy.Mod(p[0], p[1])),
            pair.map(lambda p: sympy.Mod(p[0], p[1] + 1)),
        )

    return st.recursive(leaves, extend, max_leaves=6)


@st.composite
def _ranges_and_values(draw: st.DrawFn) -> tuple[dict, dict]:
    ranges, values = {}, {}
    for s in _SYMS:
        lo = draw(st.integers(0, 6))
        hi = draw(st.one_of(st.none(), st.integers(lo, lo + 6)))
        if draw(st.booleans()):
            ranges[s] = (lo, hi)
            values[s] = draw(st.integers(lo, hi if hi is not None else lo + 20))
        else:
            values[s] = draw(st.integers(0, 20))
    return ranges, values


@settings(max_examples=200, deadline=None)
@given(
    _exprs(), _exprs(), _ranges_and_values(), st.sampled_from(["==", "!=", "<", "<=", ">", ">="])
)
def test_proofs_and_bounds_are_sound(
    a: sympy.Expr, b: sympy.Expr, rv: tuple[dict, dict], op: str
) -> None:
    ranges, values = rv
    a_val = int(sympy.sympify(a).xreplace(values))
    b_val = int(sympy.sympify(b).xreplace(values))
    for expr, val in ((a, a_val), (b, b_val)):
        dim = int(expr) if isinstance(expr, sympy.Integer) else expr
        lo, hi = ir.bounds(dim, ranges)
        assert lo <= val and (hi is None or val <= hi), (expr, ranges, values)
        simpler = sympy.sympify(ir.simplify_under(dim, ranges))
        assert int(simpler.xreplace(values)) == val, (expr, simpler, ranges, values)
    verdict = ir.compare(
        int(a) if isinstance(a, sympy.Integer) else a,
        op,
        int(b) if isinstance(b, sympy.Integer) else b,
        ranges=ranges,
    )
    truth = {
        "==": a_val == b_val,
        "!=": a_val != b_val,
        "<": a_val < b_val,
        "<=": a_val <= b_val,
        ">": a_val > b_val,
        ">=": a_val >= b_val,
    }[op]
    assert verdict is None or verdict == truth, (a, op, b, ranges, values)
