"""The symbolic context: proving, refuting and deferring facts, and data-dependent results."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest

import ir
from dynshape.inference.symbolic_context import DeferredCheck, SymbolicContext
from shape_funcs import ShapeError, UnknownValue

n, m = ir.sym("n"), ir.sym("m")


def _at(dim: ir.Dim, **values: int) -> int:
    if isinstance(dim, int):
        return dim
    binding = {ir.sym(k): v for k, v in values.items()}
    return int(dim.xreplace(binding))


def test_proved_facts_leave_nothing_and_unknown_ones_are_recorded_once() -> None:
    ctx = SymbolicContext()
    ctx.check(n + 1, ">", n, "n + 1 > n")
    ctx.check_equal(2 * n, n + n, "2n == n + n")
    ctx.check_divides(3, 6 * n, "3 divides 6n")
    assert ctx.deferred == []
    ctx.check(n, "<=", m, "n <= m")
    ctx.check(n, "<=", m, "said again")
    ctx.check_divides(4, n, "4 divides n")
    assert [(c.kind, c.dims) for c in ctx.deferred] == [("<=", (n, m)), ("divides", (4, n))]
    assert ctx.deferred[0].description == "n <= m: n <= m"  # no op: stated by a pass
    assert ctx.deferred[1].holds({n: 8}) and not ctx.deferred[1].holds({n: 6})


def test_refuted_facts_raise_at_once() -> None:
    ctx = SymbolicContext()
    with pytest.raises(ShapeError, match="expected n == n \\+ 1, got n != n \\+ 1"):
        ctx.check_equal(n, n + 1, "n == n + 1")
    with pytest.raises(ShapeError, match="cannot broadcast a with b: n \\+ 2 vs n \\+ 3"):
        ctx.broadcast(n + 2, n + 3, "a with b")
    assert ctx.deferred == []


def test_broadcast_results_are_exact_whenever_the_check_holds() -> None:
    """Including (1, 0) -> 0 and (0, 1) -> 0, where Max(a, b) alone would say 1."""
    ctx = SymbolicContext()
    assert ctx.broadcast(n, 1, "") == n and ctx.broadcast(1, n, "") == n
    assert ctx.broadcast(n, n, "") == n
    assert ctx.deferred == []
    assert ctx.broadcast(n, 3, "") == 3  # 3 is not 1, so it wins whenever broadcasting works
    assert ctx.broadcast(n + 2, m, "") == n + 2
    general = ctx.broadcast(n, m, "a with b")
    for a, b in itertools.product(range(4), repeat=2):
        if a == b or a == 1 or b == 1:
            assert _at(general, n=a, m=b) == np.broadcast_shapes((a,), (b,))[0], (a, b)
    assert all(c.kind == "broadcast" for c in ctx.deferred)
    assert len(ctx.deferred) == 3


def test_decide_max_min_fresh_and_is_known() -> None:
    ctx = SymbolicContext()
    assert ctx.decide(n, "<", n + 1) is True
    assert ctx.decide(n, "<", m) is None
    assert ctx.max(n, n + 2) == n + 2 and ctx.min(n, n + 2) == n
    assert _at(ctx.max(n, m), n=2, m=5) == 5
    a, b = ctx.fresh("x"), ctx.fresh("x")
    assert ir.is_anonymous(a) and a != b
    assert ctx.is_known(np.array([1])) and not ctx.is_known(UnknownValue((1,)))
    assert ctx.symbolic is True


def test_deferred_checks_are_frozen_values() -> None:
    check = DeferredCheck("==", (n, 3), "op", "op: x: n == 3")
    with pytest.raises(AttributeError):
        check.kind = "!="  # type: ignore[misc]
    assert str(check) == "op: x: n == 3"


def test_squeeze_all_keeps_a_maybe_one_dim_and_checks_it_is_not_one() -> None:
    ctx = SymbolicContext()
    assert ctx.shapes("squeeze", [(n, 1, n + 2, 3)], {}) == (n, n + 2, 3)
    [check] = ctx.deferred
    assert (check.kind, check.dims) == ("!=", (n, 1))
    assert check.failure({n: 1}) == (
        "squeeze: expected x.shape[0] != 1 (kept by squeeze with axis=None), got 1 == 1 "
        "(inputs: x (n, 1, n + 2, 3); n = 1)"
    )


def test_known_data_dependent_inputs_give_exact_shapes() -> None:
    ctx = SymbolicContext()
    assert ctx.shapes("dyn.reshape", [(n, 6), np.array([-1, 3], np.int64)]) == (2 * n, 3)
    assert ctx.shapes("arange", [np.array(0.0), np.array(10.0), np.array(1.0)]) == (10,)
    assert ctx.shapes("dyn.zeros", [np.array([2, 3], np.int64)]) == (2, 3)
    assert ctx.shapes("dyn.topk", [(n, 5), np.array(2, np.int64)], {"ret_type": "values"}) == (n, 2)
    assert ctx.deferred == []


def test_unknown_data_dependent_inputs_keep_the_rank_with_fresh_dims() -> None:
    ctx = SymbolicContext()
    shape = ctx.shapes("shape_of", [(n, 3)])
    assert shape == (2,)
    zeros = ctx.shapes("dyn.zeros", [UnknownValue(shape, "int64")])
    assert len(zeros) == 2 and all(ir.is_anonymous(d) for d in zeros)
    count, rank = ctx.shapes("argwhere", [UnknownValue((n, m), "float32")])
    assert ir.is_anonymous(count) and rank == 2
    scalar = UnknownValue((), "float32")
    [length] = ctx.shapes("arange", [np.array(0.0), scalar, np.array(1.0)])
    assert ir.is_anonymous(length)
    sliced = ctx.shapes("dyn.strided_slice", [(n, m, 4)] + [UnknownValue((2,))] * 3)
    assert ir.is_anonymous(sliced[0]) and ir.is_anonymous(sliced[1]) and sliced[2] == 4
    values, indices = ctx.shapes("dyn.topk", [(n, 7), UnknownValue(())])
    assert values == indices and values[0] == n and ir.is_anonymous(values[1])
    assert ctx.deferred == []
    with pytest.raises(ShapeError, match="newshape must have a static length"):
        ctx.shapes("dyn.reshape", [(n,), UnknownValue((m,))])


def test_symbolic_results_are_valid_types() -> None:
    ctx = SymbolicContext()
    calls: list[tuple[str, list[Any], dict[str, Any]]] = [
        ("strided_slice", [(n, m)], {"begin": [1, -3], "end": [-1, 100], "strides": [2, -1]}),
        ("nn.conv2d", [(n, 3, m, m), (8, 3, 3, 3)], {"padding": [1, 1], "strides": [2, 2]}),
        ("split", [(n, 4)], {"indices_or_sections": [2, -1]}),
        ("add", [(n, 1), (m,)], {}),
    ]
    for op, inputs, attrs in calls:
        result = ctx.shapes(op, inputs, attrs)
        for shape in result if isinstance(result, list) else [result]:
            ir.TensorType(shape)
