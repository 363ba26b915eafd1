"""``strided_slice`` with dims among begin/end/strides (issue 30, item 1), as text: it prints
and parses back, and infers numpy's clamping as ``min``/``max`` of dims (TVM Relax's
``begin=[k]`` on a dim of 8 is ``max(8 - k, 0)``), with a run-time check where a dim index may
be negative."""

from __future__ import annotations

import pytest
import sympy

import dynshape
import ir

k, n = ir.sym("k"), ir.sym("n")


@pytest.mark.parametrize(
    "text",
    [
        "strided_slice(%x, begin=[k], end=[(n // 2)])",
        "strided_slice(%x, begin=[0, k], end=[n, 4611686018427387904], strides=[1, k])",
        "strided_slice(%x, begin=[n - 1], end=[-4611686018427387904], strides=[-1])",
        "strided_slice(%x, begin=[], end=[max(2, k)])",
    ],
)
def test_dim_bounds_print_and_parse_back(text: str) -> None:
    source = f"def @main(%x: Tensor[(n, m), float32], %y: Tensor[(k,), int8]) {{\n  {text}\n}}"
    module = ir.parse(source)
    printed = str(module)
    assert text in printed
    again = ir.parse(printed)
    assert ir.structurally_equal(again, module)
    assert str(again) == printed


def _result(source: str) -> ir.Type:
    module = dynshape.stages(source)["types"]
    ty = module["main"].body.ty
    assert ty is not None
    return ty


def _dims(ty: ir.Type) -> list[ir.Dim]:
    assert isinstance(ty, ir.TensorType)
    return list(ty.shape)


def _same(a: ir.Dim, b: ir.Dim, symbols: list[sympy.Symbol], top: int = 12) -> None:
    """``a`` and ``b`` agree at every binding of ``symbols`` in ``[0, top]``."""
    import itertools

    for values in itertools.product(range(top + 1), repeat=len(symbols)):
        binding = {s: sympy.Integer(v) for s, v in zip(symbols, values, strict=True)}
        assert sympy.sympify(a).xreplace(binding) == sympy.sympify(b).xreplace(binding), binding


def test_begin_k_of_a_dim_of_8_is_relax_max_8_minus_k_0() -> None:
    ty = _result(
        "def @main(%x: Tensor[(8,), float32], %y: Tensor[(k,), int8]) {\n"
        "  strided_slice(%x, begin=[k], end=[8])\n}"
    )
    (d,) = _dims(ty)
    assert str(ty) == "Tensor[(8 - min(8, k),), float32]"
    _same(d, sympy.Max(8 - k, 0), [k], top=20)


def test_x_to_k_of_n_is_min_k_n_and_never_a_stand_in() -> None:
    ty = _result(
        "def @main(%x: Tensor[(n, 3), float32], %y: Tensor[(k,), int8]) {\n"
        "  strided_slice(%x, begin=[0, 1], end=[k, 4611686018427387904])\n}"
    )
    assert str(ty) == "Tensor[(min(k, n), 2), float32]"
    ty = _result(
        "def @main(%x: Tensor[(n,), float32], %y: Tensor[(k,), int8]) {\n"
        "  strided_slice(%x, begin=[k], end=[(n // 2)])\n}"
    )
    (d,) = _dims(ty)
    _same(d, sympy.Max(n // 2 - sympy.Min(k, n), 0), [k, n])


def test_a_dim_step_and_a_reversed_slice_from_a_dim() -> None:
    ty = _result(
        "def @main(%x: Tensor[(n,), float32], %y: Tensor[(k,), int8]) {\n"
        "  (strided_slice(%x, begin=[], end=[], strides=[k]),\n"
        "   strided_slice(%x, begin=[k], end=[-4611686018427387904], strides=[-1]))\n}"
    )
    assert isinstance(ty, ir.TupleType)
    step, back = (_dims(f)[0] for f in ty.fields)
    for nv in range(10):
        for kv in range(10):
            b = {n: sympy.Integer(nv), k: sympy.Integer(kv)}
            if kv >= 1:
                assert step.xreplace(b) == len(range(nv)[::kv])
            assert back.xreplace(b) == len(range(nv)[kv::-1])


def test_a_dim_index_that_may_be_negative_is_a_run_time_check() -> None:
    types = str(
        dynshape.stages(
            "def @main(%x: Tensor[(n,), float32], %y: Tensor[(k,), int8]) {\n"
            "  strided_slice(%x, begin=[n - 3], end=[n], strides=[k])\n}"
        )["types"]["main"]
    )
    assert "check strided_slice: n - 3 >= 0" in types
    assert "check strided_slice: k >= 1" in types


def test_a_symbol_no_parameter_binds_is_refused_in_begin() -> None:
    with pytest.raises(ir.ParseError) as info:
        ir.parse(
            "def @main(%x: Tensor[(n,), float32]) {\n  strided_slice(%x, begin=[j], end=[n])\n}"
        )
    assert "attribute begin uses j, which no parameter of the function binds" in str(info.value)
