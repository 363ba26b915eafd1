"""Types and dims: construction verifies, types are hashable values, comparisons are three-valued."""

from __future__ import annotations

import pytest
import sympy

import ir
from ir import FuncType, IRError, TensorType, TupleType, compare, fresh, sym


def test_tensor_type_is_a_hashable_value() -> None:
    n = sym("n")
    a = TensorType((n, 10), "float32")
    b = TensorType((n, 10), "float32")
    assert a == b and hash(a) == hash(b)
    assert {a: 1}[b] == 1
    assert a != TensorType((n, 11), "float32")
    assert a != TensorType((n, 10), "float64")


def test_sympy_integers_become_ints_and_dims_are_simplified() -> None:
    n = sym("n")
    t = TensorType((sympy.Integer(3), n * 4 + n * 4), "int8")
    assert t.shape == (3, 8 * n)
    assert isinstance(t.shape[0], int)


def test_size_bytes_is_elements_times_itemsize() -> None:
    assert TensorType((10,), "float32").size_bytes() == 40
    n = sym("n")
    assert TensorType((n, 3), "float64").size_bytes() == 24 * n
    assert TensorType((), "int16").size_bytes() == 2


@pytest.mark.parametrize(
    ("shape", "dtype", "fragment"),
    [
        ((-1,), "float32", "bad dim -1: dims are non-negative"),
        ((-sym("n") - 1,), "float32", "bad dim -n - 1: dims are non-negative"),
        ((True,), "float32", "not a bool"),
        ((1.5,), "float32", "bad dim 1.5"),
        ((sympy.Symbol("x"),), "float32", "symbol x must be declared integer and non-negative"),
        ((sym("n") / 2,), "float32", "not an integer expression"),
        ((3,), "float8", "bad dtype 'float8'"),
        ("n", "float32", "expected a tuple of dims"),
    ],
)
def test_invalid_types_are_rejected_on_construction(shape, dtype, fragment) -> None:
    with pytest.raises(IRError, match=None) as info:
        TensorType(shape, dtype)
    assert fragment in str(info.value)


def test_scalars_are_rank_zero_tensors() -> None:
    assert ir.scalar("int64") == TensorType((), "int64")
    assert ir.scalar().rank == 0


def test_tuple_and_function_types_verify_their_parts() -> None:
    t = TensorType((2,), "float32")
    assert TupleType((t, TupleType((t,)))).fields[1] == TupleType((t,))
    with pytest.raises(IRError, match="bad tuple field type"):
        TupleType((t, 3))  # type: ignore[arg-type]
    assert FuncType((t,), t).ret == t
    with pytest.raises(IRError, match="bad function type component"):
        FuncType((t,), "float32")  # type: ignore[arg-type]


def test_anonymous_dims_are_all_different() -> None:
    a, b = fresh(), fresh()
    assert a != b
    assert ir.is_anonymous(a) and not ir.is_anonymous(sym("n"))
    assert TensorType((a,)) != TensorType((b,))


def test_named_symbols_are_shared_by_name() -> None:
    assert sym("n") is sym("n")
    with pytest.raises(IRError, match="bad symbol name"):
        sym("2n")


@pytest.mark.parametrize(
    ("a", "op", "b", "expected"),
    [
        (3, "==", 3, True),
        (3, "<", 2, False),
        (sym("n") + 1, ">", sym("n"), True),
        (sym("n"), "==", sym("m"), None),
        (2 * sym("n"), ">=", sym("n"), True),
        (2 * sym("n"), ">", sym("n"), None),  # n may be 0
        (sym("n"), ">=", 0, True),
        (sym("n"), "<", 0, False),
        (sym("n"), "!=", sym("n") + 1, True),
        (sym("n") * sym("m"), "==", sym("m") * sym("n"), True),
    ],
)
def test_compare_answers_true_false_or_unknown(a, op, b, expected) -> None:
    assert compare(a, op, b) is expected


def test_dim_max_and_min_simplify_when_provable() -> None:
    n, m = sym("n"), sym("m")
    assert ir.dim_max(n + 1, n) == n + 1
    assert ir.dim_min(n + 1, n) == n
    assert ir.dim_max(n, m) == sympy.Max(n, m)
    assert ir.dim_max(3, 5) == 5


def test_type_symbols_and_tensor_leaves() -> None:
    n, m = sym("n"), sym("m")
    t = TupleType((TensorType((n, 2)), TupleType((TensorType((m + n,)),))))
    assert ir.type_symbols(t) == {n, m}
    assert [leaf.shape for leaf in ir.tensor_leaves(t)] == [(n, 2), (m + n,)]


def test_a_large_dim_is_not_given_to_sympys_negativity_proof() -> None:
    """The planner's arena sizes (sums of products of floors) are not given to sympy's
    ``is_negative``, which took tens of seconds on a detector's; small dims still are."""
    h, w, b = sym("h"), sym("w"), sym("b")
    fh = sympy.floor((h - 1) / 4)
    # floor((h - k) / 4) is negative at h < k: not non-negative by structure
    big = sum(
        (k + 1) * b * sympy.floor((h - k) / 4) * sympy.floor((w - k) / 4) for k in range(1, 8)
    ) + sympy.Max(32, 8 * fh + 8)
    assert not ir.dims._nonnegative_by_structure(big)
    nodes = sum(1 for _ in sympy.preorder_traversal(big))
    assert nodes > ir.dims.NEGATIVITY_PROOF_NODES
    assert ir.check_dim(big) == big
    assert ir.check_dim(fh + 1) == fh + 1
    assert ir.dims._proved_negative(-h - 2 * w - 1)
    assert not ir.dims._proved_negative(fh)  # -1 at h = 0 only
