"""dense_layout: ``nn.dense`` by a constant weight becomes ``nn.matmul`` by its contiguous
transpose (IR before/after, what is left alone), and compiled programs compute what numpy does
(VM, sanitizer, threads)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dynshape
import ir
from dynshape.passes.dense_layout import DenseWeightLayout
from tests.dynshape.pass_helpers import (
    assert_threads_agree,
    check_pass,
    compile_without,
    parse_typed,
)

W = "const([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], float32)"
WT = "const([[1.0, 4.0], [2.0, 5.0], [3.0, 6.0]], float32)"


def test_a_constant_weight_is_transposed_once_into_a_matmul() -> None:
    check_pass(
        DenseWeightLayout(),
        f"""
        def @main(%x: Tensor[(b, s, 3), float32]) {{
          nn.relu(add(nn.dense(%x, {W}), const([0.5, 1.5], float32)))
        }}
        """,
        f"""
        def @main(%x: Tensor[(b, s, 3), float32]) {{
          nn.relu(add(nn.matmul(%x, {WT}), const([0.5, 1.5], float32)))
        }}
        """,
    )


def test_a_weight_shared_by_two_denses_becomes_one_shared_constant() -> None:
    module, _ = parse_typed(
        f"""
        def @main(%x: Tensor[(n, 3), float32], %y: Tensor[(m, 3), float32]) {{
          %w = {W};
          (nn.dense(%x, %w), nn.dense(%y, %w))
        }}
        """
    )
    layout = DenseWeightLayout()
    out = layout.run(module)
    assert layout.rewritten == 2
    body = out["main"].body
    assert isinstance(body, ir.Tuple)
    first, second = body.fields
    assert isinstance(first, ir.Call) and isinstance(second, ir.Call)
    assert first.op is not None and first.op.name == "nn.matmul"
    assert first.args[1] is second.args[1]
    weight = first.args[1]
    assert isinstance(weight, ir.Constant) and weight.value.flags.c_contiguous
    np.testing.assert_array_equal(weight.value, [[1, 4], [2, 5], [3, 6]])


UNCHANGED = {
    "the weight is a parameter": """
        def @main(%x: Tensor[(n, 3), float32], %w: Tensor[(2, 3), float32]) {
          nn.dense(%x, %w)
        }""",
    "the weight is a computed value": f"""
        def @main(%x: Tensor[(n, 3), float32]) {{
          nn.dense(%x, multiply({W}, 2f))
        }}""",
    "the constant has another use": f"""
        def @main(%x: Tensor[(n, 3), float32]) {{
          %w = {W};
          (nn.dense(%x, %w), sum(%w))
        }}""",
    "the constant is also the data of a dense": f"""
        def @main(%x: Tensor[(n, 3), float32]) {{
          %w = {W};
          (nn.dense(%x, %w), nn.dense(%w, %w))
        }}""",
    "1-d data": f"""
        def @main(%x: Tensor[(3,), float32]) {{
          nn.dense(%x, {W})
        }}""",
    "an integer weight (no BLAS)": """
        def @main(%x: Tensor[(n, 2), int32]) {
          nn.dense(%x, const([[1, 2], [3, 4]], int32))
        }""",
    "a float16 weight (no BLAS)": """
        def @main(%x: Tensor[(n, 2), float16]) {
          nn.dense(%x, const([[1.0, 2.0], [3.0, 4.0]], float16))
        }""",
    "a matmul already": f"""
        def @main(%x: Tensor[(n, 2), float32]) {{
          nn.matmul(%x, {W})
        }}""",
}


@pytest.mark.parametrize("case", sorted(UNCHANGED))
def test_what_is_left_alone(case: str) -> None:
    check_pass(DenseWeightLayout(), UNCHANGED[case], UNCHANGED[case])


def test_the_default_pipeline_lays_out_a_gemm_weight() -> None:
    rewritten = str(dynshape.stages(_program(np.ones((4, 3), np.float32)), debug=True)["rewritten"])
    assert "nn.matmul(" in rewritten and "nn.dense(" not in rewritten


def _program(weight: np.ndarray) -> str:
    features = weight.shape[1]
    return (
        f"def @main(%x: Tensor[(b, {features}), float32]) {{\n"
        f"  nn.relu(nn.dense(%x, const({weight.tolist()}, float32)))\n}}"
    )


@settings(max_examples=25, deadline=None)
@given(
    units=st.integers(1, 40),
    features=st.integers(1, 40),
    batch=st.integers(0, 9),
    seed=st.integers(0, 2**16),
)
def test_compiled_dense_layers_compute_what_numpy_does(
    units: int, features: int, batch: int, seed: int
) -> None:
    rng = np.random.default_rng(seed)
    weight = rng.standard_normal((units, features)).astype(np.float32)
    x = rng.standard_normal((batch, features)).astype(np.float32)
    program = _program(weight)
    got = dynshape.VirtualMachine(dynshape.compile(program), check_memory=True).run(x)
    plain = dynshape.VirtualMachine(compile_without(DenseWeightLayout, program)).run(x)
    want = np.maximum(x @ weight.T, 0)
    assert got.shape == want.shape == (batch, units) and got.dtype == np.float32
    # Products summed in another order (the weight laid out for BLAS) differ by rounding only:
    # at most ~features float32 roundings of the sum of the terms' magnitudes (a fixed
    # tolerance failed on a cancelling sum, 0.316 off by 2e-6).
    bound = 2 * features * np.finfo(np.float32).eps * (np.abs(x) @ np.abs(weight).T)
    assert np.all(np.abs(got - want) <= bound)
    assert np.all(np.abs(got - plain) <= bound)


def test_threads_sharing_a_vm_get_their_own_answers() -> None:
    rng = np.random.default_rng(3)
    weight = rng.standard_normal((24, 16)).astype(np.float32)
    vm = dynshape.VirtualMachine(dynshape.compile(_program(weight)))
    inputs = [rng.standard_normal((i + 1, 16)).astype(np.float32) for i in range(6)]
    assert_threads_agree(vm, inputs, [np.maximum(x @ weight.T, 0) for x in inputs], calls=20)
