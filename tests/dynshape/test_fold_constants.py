"""fold_constants: calls of layout, cast and arithmetic ops on constants are constants (IR
before/after, what is kept), the values are the kernels' own (random chains, bit for bit), a
call that would fail or warn at run time still does, and a 1-d convolution's weight reaches
the convolution as a constant."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dynshape
import ir
from dynshape.passes.fold_constants import FOLD_MAX_BYTES, FoldConstants
from tests.dynshape.pass_helpers import check_pass, compile_without, parse_typed


def test_a_conv1d_weight_laid_out_at_compile_time() -> None:
    check_pass(
        FoldConstants(),
        """
        def @main(%x: Tensor[(n, 2, 1, t), float32]) {
          nn.conv2d(%x, expand_dims(const([[1.0, 2.0], [3.0, 4.0]], float32), axis=2, num_newaxis=2))
        }
        """,
        """
        def @main(%x: Tensor[(n, 2, 1, t), float32]) {
          nn.conv2d(%x, const([[[[1.0]], [[2.0]]], [[[3.0]], [[4.0]]]], float32))
        }
        """,
    )


def test_a_chain_folds_whole() -> None:
    check_pass(
        FoldConstants(),
        """
        def @main(%x: Tensor[(n, 3), int64]) {
          add(%x, cast(multiply(transpose(const([[1], [2], [3]], int32)), 2i32), dtype="int64"))
        }
        """,
        """
        def @main(%x: Tensor[(n, 3), int64]) {
          add(%x, const([[2, 4, 6]], int64))
        }
        """,
    )


KEPT = {
    "a symbolic shape": "broadcast_to(const([1.0, 2.0], float32), shape=[n, 2])",
    "an op not folded": "exp(const([1.0, 2.0], float32))",
    "a large broadcast": f"broadcast_to(const([1.0], float32), shape=[{FOLD_MAX_BYTES}])",
    "an operand computed at run time": "add(const([1.0], float32), take(%x, 0i64, axis=0))",
}


@pytest.mark.parametrize("name", sorted(KEPT))
def test_what_is_kept(name: str) -> None:
    module, _ = parse_typed(f"def @main(%x: Tensor[(n, 2), float32]) {{ {KEPT[name]} }}")
    p = FoldConstants()
    assert p.run(module) is module and p.folded == 0


def test_a_gather_that_fails_still_fails() -> None:
    program = """
    def @main(%x: Tensor[(n, 2), float32]) {
      add(%x, take(const([1.0, 2.0], float32), const([0, 5], int64), axis=0))
    }
    """
    module, _ = parse_typed(program)
    assert FoldConstants().run(module) is module
    vm = dynshape.VirtualMachine(dynshape.compile(program))
    with pytest.raises(dynshape.DynShapeError, match="out of bounds"):
        vm.run(np.ones((3, 2), np.float32))


def test_an_overflow_still_warns_at_run_time() -> None:
    """``3e38 * 10`` overflows float32: folded, the run's warning (or, under
    ``np.errstate(over="raise")``, its error) would be gone."""
    program = """
    def @main(%x: Tensor[(n,), float32]) {
      add(%x, multiply(const([3e38], float32), 10f))
    }
    """
    module, _ = parse_typed(program)
    assert FoldConstants().run(module) is module
    vm = dynshape.VirtualMachine(dynshape.compile(program))
    with np.errstate(over="raise"), pytest.raises(dynshape.DynShapeError, match="overflow"):
        vm.run(np.ones(2, np.float32))


# -- folded values are the kernels' own, bit for bit ---------------------------------------

_UNARY = [
    "transpose({})",
    "expand_dims({}, axis=0)",
    "reshape({}, newshape=[-1])",
    'cast({}, dtype="float64")',
    "negative({})",
    "strided_slice({}, begin=[1], end=[3])",
    "take({}, const([2, 0], int64), axis=0)",
]
_BINARY = ["add({}, {})", "subtract({}, {})", "multiply({}, {})", "maximum({}, {})"]


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(st.booleans(), st.integers(0, 6), st.integers(0, 9)), min_size=1, max_size=5
    ),
    st.integers(0, 999),
)
def test_folded_chains_compute_what_the_kernels_do(steps, seed):
    rng = np.random.default_rng(seed)
    values = [rng.standard_normal((3, 3)).astype(np.float32) for _ in range(2)]
    exprs = [f"const({v.tolist()}, float32)" for v in values]
    for binary, unary, other in steps:
        if binary:
            exprs.append(_BINARY[unary % len(_BINARY)].format(exprs[-1], exprs[other % len(exprs)]))
        else:
            exprs.append(_UNARY[unary].format(exprs[-1]))
    program = f"def @main(%x: Tensor[(n,), float32]) {{ ({exprs[-1]}, %x) }}"
    try:
        folded = dynshape.VirtualMachine(dynshape.compile(program))
    except dynshape.DynShapeError:
        return  # shapes that do not fit: refused either way
    kept = dynshape.VirtualMachine(compile_without(FoldConstants, program))
    x = np.ones(2, np.float32)
    got, want = _outcome(folded, x), _outcome(kept, x)
    if isinstance(want, str) or isinstance(got, str):  # a gather out of range: both fail
        assert got == want
        return
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


def _outcome(vm: dynshape.VirtualMachine, x: np.ndarray) -> np.ndarray | str:
    try:
        return np.asarray(vm.run(x)[0])
    except dynshape.DynShapeError as e:  # (the fused kernel's name differs: not the message)
        return type(e).__name__


def test_the_pass_counts_its_folds() -> None:
    module, _ = parse_typed(
        """
        def @main(%x: Tensor[(n, 2), float32]) {
          add(%x, expand_dims(negative(const([1.0, 2.0], float32)), axis=0))
        }
        """
    )
    p = FoldConstants()
    out = p.run(module)
    assert p.folded == 2
    body = out["main"].body
    assert isinstance(body, ir.Call) and isinstance(body.args[1], ir.Constant)
    assert not body.args[1].value.flags.writeable
