"""Symbol ranges in the compiler: type inference proves with them, entry checks enforce them."""

from __future__ import annotations

import textwrap

import numpy as np
import pytest

import dynshape
import ir
from dynshape.inference.symbolic_context import SymbolicContext
from dynshape.passes.infer_types import InferTypes
from vm import RunTimeShapeError


def _infer(source: str) -> tuple[ir.Module, InferTypes]:
    infer = InferTypes()
    return infer.run(ir.parse(textwrap.dedent(source))), infer


def _deferred(source: str) -> list[str]:
    return [str(c) for c in _infer(source)[1].deferred["main"]]


# ---- inference ---------------------------------------------------------------------------------


def test_ranges_that_do_not_decide_a_fact_leave_it_deferred() -> None:
    src = """
    def @main(%x: Tensor[(n, 4), float32], %y: Tensor[(m, 4), float32]) where n in [2, 10], m in [2, 10] {
      add(%x, %y)
    }
    """
    typed, _ = _infer(src)
    assert _deferred(src) == ["add: a.shape[0] with b.shape[0]: n == m or n == 1 or m == 1"]
    # Both are provably not 1, so broadcasting (when it succeeds) gives n, not max(n, m)*...
    assert str(typed["main"].body.ty) == "Tensor[(n, 4), float32]"


def test_a_one_value_range_proves_divisibility() -> None:
    src = """
    def @main(%x: Tensor[(n,), float32]) where n in [4, 4] {
      reshape(%x, newshape=[-1, 4])
    }
    """
    assert _deferred(src) == []
    assert _deferred(src.replace(" where n in [4, 4]", "")) == [
        "reshape: the element count of x divisible by the other dims of newshape: n % 4 == 0"
    ]


def test_a_lower_bound_proves_non_zero() -> None:
    src = """
    def @main(%x: Tensor[(n, 3), float32]) where n in [1, ...] {
      reshape(%x, newshape=[0, -1])
    }
    """
    assert _deferred(src) == []
    without = _deferred(src.replace(" where n in [1, ...]", ""))
    assert any("n != 0" in c for c in without)


def test_an_upper_bound_proves_topk() -> None:
    src = """
    def @main(%x: Tensor[(n,), float32]) where n in [5, 100] {
      topk(%x, k=5, ret_type="values")
    }
    """
    assert _deferred(src) == []
    assert _deferred(src.replace("[5, 100]", "[0, 100]")) == ["topk: k <= x.shape[0]: 5 <= n"]


def test_ranges_refute_at_compile_time() -> None:
    src = """
    def @main(%x: Tensor[(n,), float32]) where n in [5, 100] {
      topk(%x, k=200, ret_type="values")
    }
    """
    with pytest.raises(dynshape.CompileError) as info:
        _infer(src)
    assert "topk: expected k <= x.shape[0], got 200 > n" in str(info.value)


def test_ranges_apply_inside_primitives_and_annotations() -> None:
    src = """
    def @main(%x: Tensor[(n,), float32]) where n in [3, 3] {
      let %y: Tensor[(3,), float32] = %x;
      %y
    }
    """
    assert _deferred(src) == []
    assert _deferred(src.replace("[3, 3]", "[2, 3]")) == [
        "%y.shape[0] == its annotation in Tensor[(3,), float32]: n == 3"
    ]


def test_symbolic_context_takes_ranges() -> None:
    n = ir.sym("n")
    assert SymbolicContext().decide(n, "<=", 10) is None
    ctx = SymbolicContext({"n": (0, 10)})
    assert ctx.decide(n, "<=", 10) is True
    assert ctx.max(n, 10) == 10
    assert ctx.min(n, 10) == n
    assert ctx.ranges == {n: (0, 10)}


# ---- passes keep the ranges --------------------------------------------------------------------

PROGRAM = """
def @main(%x: Tensor[(n, 4), float32], %y: Tensor[(m,), float32]) -> Tensor[(n, 4), float32] where m in [0, ...], n in [2, 8] {
  %0 = add(%x, %x);
  multiply(%0, %x)
}
"""


def test_every_stage_keeps_the_ranges() -> None:
    for stage, module in dynshape.stages(textwrap.dedent(PROGRAM), debug=True).items():
        assert dict(module["main"].ranges) == {ir.sym("n"): (2, 8), ir.sym("m"): (0, None)}, stage
        assert "where m in [0, ...], n in [2, 8]" in str(module), stage


# ---- entry checks ------------------------------------------------------------------------------


def _vm(source: str = PROGRAM) -> dynshape.VirtualMachine:
    return dynshape.VirtualMachine(dynshape.compile(textwrap.dedent(source)))


@pytest.mark.parametrize("rows", [2, 5, 8])
def test_values_in_range_run(rows: int) -> None:
    x = np.arange(rows * 4, dtype="float32").reshape(rows, 4)
    out = _vm().run(x, np.zeros(3, "float32"))
    np.testing.assert_array_equal(out.numpy() if hasattr(out, "numpy") else out, (x + x) * x)


@pytest.mark.parametrize("rows", [0, 1, 9, 5000])
def test_values_out_of_range_fail_at_entry(rows: int) -> None:
    x = np.zeros((rows, 4), "float32")
    with pytest.raises(RunTimeShapeError) as info:
        _vm().run(x, np.zeros(3, "float32"))
    assert (
        str(info.value).splitlines()[0]
        == f"n = {rows} is outside its declared range [2, 8] (bound by x.shape[0])"
    )


def test_the_message_names_the_binding_axis() -> None:
    src = """
    def @main(%x: (Tensor[(4,), float32], Tensor[(n, 4), float32])) -> Tensor[(n, 4), float32] where n in [1, 4096] {
      %x.1
    }
    """
    with pytest.raises(RunTimeShapeError) as info:
        _vm(src).run((np.zeros(4, "float32"), np.zeros((5000, 4), "float32")))
    assert str(info.value).splitlines()[0] == (
        "n = 5000 is outside its declared range [1, 4096] (bound by x.1.shape[0])"
    )


def test_only_the_bounds_that_restrict_are_checked() -> None:
    def checks(where: str) -> int:
        src = f"""
        def @main(%x: Tensor[(n,), float32]) -> Tensor[(n,), float32]{where} {{
          negative(%x)
        }}
        """
        (fn,) = dynshape.compile(textwrap.dedent(src)).functions
        return sum(1 for ins in fn.code if any("declared range" in str(o) for o in ins.operands))

    assert checks("") == 0
    assert checks(" where n in [0, ...]") == 0
    assert checks(" where n in [0, 10]") == 1
    assert checks(" where n in [3, ...]") == 1
    assert checks(" where n in [3, 10]") == 2
