"""call_work: a call's operations as a formula of the input dims, text in, formula out, and
checked against a count made by hand at a binding."""

from __future__ import annotations

import sympy
from pass_helpers import parse_typed

from dynshape.analysis.call_work import call_work

n, h, w = sympy.symbols("n h w", integer=True, nonnegative=True)


def _work(source: str) -> sympy.Expr:
    module, _ = parse_typed(source)
    return call_work(module["main"])


def test_elementwise_ops_count_their_outputs():
    got = _work("def @main(%x: Tensor[(n, 4), float32]) { tanh(add(%x, %x)) }")
    assert sympy.simplify(got - 2 * 4 * n) == 0


def test_dense_and_matmul_count_two_per_multiply_add():
    dense = _work(
        "def @main(%x: Tensor[(n, 8), float32], %w: Tensor[(3, 8), float32]) { nn.dense(%x, %w) }"
    )
    assert sympy.simplify(dense - 2 * 8 * 3 * n) == 0
    matmul = _work(
        "def @main(%x: Tensor[(n, 5, 8), float32], %w: Tensor[(8, 3), float32]) "
        "{ nn.matmul(%x, %w) }"
    )
    assert sympy.simplify(matmul - 2 * 8 * 5 * 3 * n) == 0


def test_conv2d_counts_its_window_per_output():
    got = _work(
        "def @main(%x: Tensor[(n, 4, h, w), float32], %k: Tensor[(6, 2, 3, 3), float32]) "
        "{ nn.conv2d(%x, %k, padding=[1, 1, 1, 1], groups=2) }"
    )
    # output (n, 6, h, w); each element a window of 2 channels (its group) by 3 x 3
    assert sympy.simplify(got - 2 * (2 * 3 * 3) * 6 * n * h * w) == 0
    assert got.subs({n: 2, h: 5, w: 7}) == 2 * 18 * 6 * 2 * 5 * 7


def test_a_chain_adds_up():
    got = _work(
        "def @main(%x: Tensor[(n, 8), float32], %w: Tensor[(3, 8), float32]) "
        "{ nn.relu(nn.dense(%x, %w)) }"
    )
    assert sympy.simplify(got - (2 * 8 * 3 * n + 3 * n)) == 0
