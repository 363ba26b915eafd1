"""Every op's shape function against numpy, in both modes, on random valid inputs.

For each op a Hypothesis strategy (shape_cases_*.py) draws a valid call and the shape the real
numpy operation produced. The concrete mode must give exactly that shape. The symbolic mode is
then run three ways: on the same static dims (same result, nothing deferred), and with dims
replaced by symbols, with data-dependent inputs known (the result, with the symbols replaced by
the drawn values, is the concrete result, and every deferred check holds there) and unknown
(rank is right, every dim not involving a fresh ``?`` symbol is right).
"""

from __future__ import annotations

import inspect
from typing import Any

import pytest
import shape_cases_basic  # noqa: F401  (registers cases)
import shape_cases_more  # noqa: F401  (registers cases)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from shape_cases_kit import CASES, evaluate, has_anonymous, symbolise

import ir
from dynshape.inference.symbolic_context import SymbolicContext
from shape_funcs import concrete_shapes, get_shape_func, registered_ops

BASE = settings(
    deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much]
)
#: The ops whose shape functions have the most cases (clamping, signs, 0 and 1 dims, pairs of
#: symbols that broadcast) get more examples than the ones that return their input's shape.
THOROUGH = {
    "add",
    "where",
    "nn.matmul",
    "nn.batch_matmul",
    "broadcast_to",
    "reshape",
    "dyn.reshape",
    "split",
    "strided_slice",
    "dyn.strided_slice",
    "nn.conv2d",
    "nn.conv2d_transpose",
    "nn.max_pool2d",
    "tile",
    "sum",
    "argmax",
    "take",
    "arange",
    "squeeze",
}


def _shapes(result: Any) -> list[tuple[Any, ...]]:
    return result if isinstance(result, list) else [result]


def _as_ints(result: Any) -> Any:
    if isinstance(result, list):
        return [_as_ints(r) for r in result]
    assert all(isinstance(d, int) or getattr(d, "is_Integer", False) for d in result), result
    return tuple(int(d) for d in result)


@pytest.mark.parametrize("op", sorted(set(CASES) - THOROUGH))
@settings(BASE, max_examples=30)
@given(data=st.data())
def test_shape_function_matches_numpy_in_both_modes(op: str, data: st.DataObject) -> None:
    check_case(op, data)


@pytest.mark.parametrize("op", sorted(THOROUGH))
@settings(BASE, max_examples=150)
@given(data=st.data())
def test_intricate_shape_function_matches_numpy_in_both_modes(op: str, data: st.DataObject) -> None:
    check_case(op, data)


def check_case(op: str, data: st.DataObject) -> None:
    """Draw a case of ``op`` and check both modes against numpy (see the module docstring)."""
    case = data.draw(CASES[op], label="case")
    sf = get_shape_func(op)

    concrete = concrete_shapes(op, case.inputs, case.attrs)
    assert concrete == case.expected
    assert all(type(d) is int for s in _shapes(concrete) for d in s), "dims must be Python ints"

    static = SymbolicContext()
    assert _as_ints(static.shapes(op, case.inputs, case.attrs)) == case.expected
    assert static.deferred == [], "static dims leave nothing to run time"

    mask = data.draw(st.lists(st.booleans(), min_size=1, max_size=5), label="symbolic dims")
    for known in (True, False) if sf.is_data_dependent else (True,):
        sym = symbolise(case, mask, sf.data_dependent, known)
        ctx = SymbolicContext()
        result = ctx.shapes(op, sym.inputs, case.attrs)
        for shape in _shapes(result):
            ir.TensorType(shape)  # every symbolic result is a valid type
        checks = [c for c in ctx.deferred if not any(has_anonymous(d) for d in c.dims)]
        for check in checks:
            assert check.holds(sym.binding), check.failure(sym.binding)
        if known:
            assert evaluate(result, sym.binding) == case.expected
            continue
        for got, want in zip(_shapes(result), _shapes(case.expected), strict=True):
            assert len(got) == len(want), "the rank is known even when values are not"
            for d, w in zip(got, want, strict=True):
                if not has_anonymous(d):
                    assert evaluate((d,), sym.binding) == (w,)


def test_every_catalogue_op_has_a_shape_function_exercised_here() -> None:
    ops = {op.name for op in ir.tensor_ops(builtin_only=True)}
    assert not ops - set(registered_ops()), "ops without a shape function"
    assert set(CASES) == ops, "every op of the catalogue has a property case, and only those"
    exercised = {get_shape_func(op).fn for op in CASES}
    builtin = {get_shape_func(op).fn for op in registered_ops() if op in ops}
    assert builtin <= exercised


@pytest.mark.parametrize("op", sorted(op.name for op in ir.tensor_ops(builtin_only=True)))
def test_signature_matches_the_op_declaration(op: str) -> None:
    """Inputs are the op's operands and keyword parameters its attributes, with its defaults."""
    decl = ir.get_op(op)
    sf = get_shape_func(op)
    assert len(sf.input_names) == decl.arity
    assert len(sf.data_dependent) == decl.arity
    params = inspect.signature(sf.fn).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return  # a family function that ignores its attributes (the unary ops)
    keywords = {n: p for n, p in params.items() if p.kind is inspect.Parameter.KEYWORD_ONLY}
    assert set(keywords) == {a.name for a in decl.attrs}
    for a in decl.attrs:
        p = keywords[a.name]
        if a.required:
            assert p.default is inspect.Parameter.empty, a.name
        else:
            default = a.kind.normalize(p.default)
            assert default == a.default, (a.name, p.default, a.default)
