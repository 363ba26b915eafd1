"""merge_matmuls: matmuls sharing an input with constant weights become one (IR before/after),
and the program computes what the unmerged one computes (VM, sanitizer, threads, memory)."""

from __future__ import annotations

import numpy as np
import pytest

import dynshape
from dynshape.passes.merge_matmuls import MergeSharedMatmuls
from tests.dynshape.pass_helpers import assert_threads_agree, check_pass, compile_without

W1 = "const([[1.0, 2.0], [3.0, 4.0]], float32)"
W2 = "const([[5.0, 6.0]], float32)"
W12 = "const([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]], float32)"


def test_dense_with_constant_weights_is_merged() -> None:
    check_pass(
        MergeSharedMatmuls(),
        f"""
        def @main(%x: Tensor[(s, 2), float32]) {{
          %a = transpose(nn.dense(%x, {W1}), axes=[1, 0]);
          add(reshape(%a, newshape=[-1]), reshape(nn.dense(%x, {W2}), newshape=[-1]))
        }}
        """,
        f"""
        def @main(%x: Tensor[(s, 2), float32]) {{
          %0 = nn.dense(%x, {W12});
          %1 = transpose(take(%0, const([0, 1], int64), axis=-1), axes=[1, 0]);
          add(reshape(%1, newshape=[-1]), reshape(take(%0, const([2], int64), axis=-1), newshape=[-1]))
        }}
        """,
    )


def test_bias_adds_are_merged_into_the_matmul() -> None:
    check_pass(
        MergeSharedMatmuls(),
        f"""
        def @main(%x: Tensor[(b, s, 2), float32]) {{
          %q = add(nn.matmul(%x, const([[1.0], [2.0]], float32)), const([0.5], float32));
          %k = add(const([1.0, 2.0], float32), nn.matmul(%x, {W1}));
          add(reshape(%q, newshape=[b, s, 1]), reshape(%k, newshape=[b, s, 2]))
        }}
        """,
        """
        def @main(%x: Tensor[(b, s, 2), float32]) {
          %0 = nn.matmul(%x, const([[1.0, 1.0, 2.0], [2.0, 3.0, 4.0]], float32));
          %1 = add(%0, const([0.5, 1.0, 2.0], float32));
          %2 = reshape(take(%1, const([0], int64), axis=-1), newshape=[b, s, 1]);
          add(%2, reshape(take(%1, const([1, 2], int64), axis=-1), newshape=[b, s, 2]))
        }
        """,
    )


UNCHANGED = {
    "elementwise users (each matmul is its users' epilogue anchor)": f"""
        def @main(%x: Tensor[(s, 2), float32]) {{
          add(nn.relu(nn.dense(%x, {W1})), tanh(nn.dense(%x, {W1})))
        }}""",
    "a bias add with an elementwise user": f"""
        def @main(%x: Tensor[(s, 2), float32]) {{
          %a = nn.relu(add(nn.dense(%x, {W1}), const([1.0, 2.0], float32)));
          add(%a, reshape(nn.dense(%x, {W1}), newshape=[s, 2]))
        }}""",
    "weights are parameters": """
        def @main(%x: Tensor[(s, 2), float32], %w: Tensor[(2, 2), float32]) {
          add(reshape(nn.dense(%x, %w), newshape=[-1]), reshape(nn.dense(%x, %w), newshape=[-1]))
        }""",
    "a user is a reduction": f"""
        def @main(%x: Tensor[(s, 2), float32]) {{
          add(sum(nn.dense(%x, {W1}), axis=[1]), sum(nn.dense(%x, {W2}), axis=[1]))
        }}""",
    "different inputs": f"""
        def @main(%x: Tensor[(s, 2), float32], %y: Tensor[(s, 2), float32]) {{
          add(transpose(nn.dense(%x, {W1})), transpose(nn.dense(%y, {W1})))
        }}""",
    "a single matmul": f"""
        def @main(%x: Tensor[(s, 2), float32]) {{
          transpose(nn.dense(%x, {W1}))
        }}""",
}


@pytest.mark.parametrize("case", sorted(UNCHANGED))
def test_what_is_not_merged(case: str) -> None:
    check_pass(MergeSharedMatmuls(), UNCHANGED[case], UNCHANGED[case])


# Three projections of one input (the q/k/v of attention), biased, then reshaped and
# transposed as the imported ONNX encoder does; weights constant.
def _qkv_program(seed: int = 0) -> str:
    rng = np.random.default_rng(seed)

    def const(*shape: int) -> str:
        values = np.round(rng.standard_normal(shape), 3).tolist()
        return f"const({values}, float32)"

    parts = []
    for name in "qkv":
        parts.append(
            f"%{name} = transpose(reshape(add(nn.matmul(%x, {const(8, 8)}), {const(8)}),"
            f" newshape=[b, s, 2, 4]), axes=[0, 2, 1, 3]);"
        )
    return (
        "def @main(%x: Tensor[(b, s, 8), float32]) {\n  "
        + "\n  ".join(parts)
        + "\n  nn.matmul(nn.softmax(nn.matmul(%q, transpose(%k, axes=[0, 1, 3, 2]))), %v)\n}"
    )


SHAPES = [(1, 8), (3, 7), (2, 0), (0, 5), (4, 33)]


def test_the_encoder_projections_merge_into_one_matmul() -> None:
    rewritten = dynshape.stages(_qkv_program(), debug=True)["rewritten"]
    text = str(rewritten)
    assert text.count("nn.matmul(%x") == 1 and text.count("take(") == 3


@pytest.mark.parametrize("check_memory", [False, True])
def test_merged_program_computes_what_the_unmerged_one_does(check_memory: bool) -> None:
    program = _qkv_program()
    merged = dynshape.VirtualMachine(dynshape.compile(program), check_memory=check_memory)
    plain = dynshape.VirtualMachine(
        compile_without(MergeSharedMatmuls, program), check_memory=check_memory
    )
    for b, s in SHAPES:
        x = np.random.default_rng(b * 10 + s).standard_normal((b, s, 8)).astype(np.float32)
        got, want = merged.run(x), plain.run(x)
        assert got.dtype == want.dtype and got.shape == want.shape == (b, 2, s, 4)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_merged_program_allocates_nothing_new_in_steady_state() -> None:
    vm = dynshape.VirtualMachine(dynshape.compile(_qkv_program()))
    x = np.random.default_rng(1).standard_normal((2, 9, 8)).astype(np.float32)
    for _ in range(3):
        vm.run(x)
    before = vm.allocator.stats.allocations
    for _ in range(5):
        vm.run(x)
    assert vm.allocator.stats.allocations == before


def test_threads_sharing_a_vm_get_their_own_answers() -> None:
    vm = dynshape.VirtualMachine(dynshape.compile(_qkv_program()))
    plain = dynshape.VirtualMachine(compile_without(MergeSharedMatmuls, _qkv_program()))
    inputs = [
        np.random.default_rng(i).standard_normal((i % 3 + 1, 5 + i, 8)).astype(np.float32)
        for i in range(6)
    ]
    assert_threads_agree(vm, inputs, [plain.run(x) for x in inputs])


def test_the_take_kernel_copies_a_constant_range_and_gathers_otherwise() -> None:
    from vm.kernels.registry import get_kernel_factory

    take = get_kernel_factory("take")({"axis": -1})
    data = np.arange(2 * 3 * 10, dtype=np.float32).reshape(2, 3, 10)
    for idx in ([3, 4, 5], [5, 4, 3], [0, 2, 4], [-3, -2, -1], [8, 9], [9]):
        indices = np.array(idx, np.int64)
        indices.setflags(write=False)  # as the executable's constants are
        for ind in (indices, np.array(idx, np.int64)):
            out = np.empty((2, 3, len(idx)), np.float32)
            take(data, ind, out)
            np.testing.assert_array_equal(out, np.take(data, ind, axis=-1))
    out_of_range = np.array([9, 10], np.int64)
    out_of_range.setflags(write=False)
    with pytest.raises(IndexError):
        take(data, out_of_range, np.empty((2, 3, 2), np.float32))
