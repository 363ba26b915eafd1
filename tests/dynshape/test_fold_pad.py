"""fold_pad: a zero ``nn.pad`` before a convolution (2-d, or 1-d as the importer writes it)
becomes the convolution's padding (IR before/after, what is kept), and the folded program
computes what the unfolded one does (random pads, strides, dilations, groups and sizes, too
small inputs included)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dynshape
from dynshape.passes.fold_pad import FoldPadIntoConv
from tests.dynshape.pass_helpers import check_pass, compile_without, parse_typed

W1 = "const([[[[1.0, 2.0, 3.0]], [[0.5, -1.0, 2.0]]]], float32)"  # (1, 2, 1, 3)
W2 = "const([[[[1.0, 2.0], [3.0, 4.0]]], [[[0.5, -1.0], [2.0, 1.0]]]], float32)"  # (2, 1, 2, 2)


def test_a_causal_pad_before_a_1d_convolution() -> None:
    check_pass(
        FoldPadIntoConv(),
        f"""
        def @main(%x: Tensor[(n, 2, t), float32]) {{
          %0 = nn.pad(%x, pad_width=[[0, 0], [0, 0], [2, 0]]);
          nn.conv2d(expand_dims(%0, axis=2), {W1}, padding=[0, 1, 0, 1], dilation=[1, 2])
        }}
        """,
        f"""
        def @main(%x: Tensor[(n, 2, t), float32]) {{
          nn.conv2d(expand_dims(%x, axis=2), {W1}, padding=[0, 3, 0, 1], dilation=[1, 2])
        }}
        """,
    )


def test_a_pad_of_both_spatial_axes_before_a_grouped_convolution() -> None:
    check_pass(
        FoldPadIntoConv(),
        f"""
        def @main(%x: Tensor[(n, 2, h, w), float32]) {{
          %0 = nn.pad(%x, pad_width=[[0, 0], [0, 0], [1, 2], [0, 3]]);
          nn.conv2d(%0, {W2}, strides=[2, 1], groups=2)
        }}
        """,
        f"""
        def @main(%x: Tensor[(n, 2, h, w), float32]) {{
          nn.conv2d(%x, {W2}, strides=[2, 1], padding=[1, 0, 2, 3], groups=2)
        }}
        """,
    )


def test_a_convolution_padded_by_height_and_width_pairs() -> None:
    check_pass(
        FoldPadIntoConv(),
        f"""
        def @main(%x: Tensor[(n, 2, h, w), float32]) {{
          nn.conv2d(nn.pad(%x, pad_width=[[0, 0], [0, 0], [0, 1], [2, 0]]), {W2}, padding=[1, 3],
            groups=2)
        }}
        """,
        f"""
        def @main(%x: Tensor[(n, 2, h, w), float32]) {{
          nn.conv2d(%x, {W2}, padding=[1, 5, 2, 3], groups=2)
        }}
        """,
    )


def test_one_pad_read_by_two_convolutions_folds_into_both() -> None:
    # WaveNet's gated unit: tanh(conv_f(pad(h))) * sigmoid(conv_g(pad(h)))
    check_pass(
        FoldPadIntoConv(),
        f"""
        def @main(%x: Tensor[(n, 2, t), float32]) {{
          %0 = nn.pad(%x, pad_width=[[0, 0], [0, 0], [2, 0]]);
          %1 = nn.conv2d(expand_dims(%0, axis=2), {W1}, dilation=[1, 2]);
          %2 = nn.conv2d(expand_dims(%0, axis=2), {W1}, dilation=[1, 2]);
          multiply(tanh(%1), sigmoid(%2))
        }}
        """,
        f"""
        def @main(%x: Tensor[(n, 2, t), float32]) {{
          %0 = nn.conv2d(expand_dims(%x, axis=2), {W1}, padding=[0, 2, 0, 0], dilation=[1, 2]);
          %1 = nn.conv2d(expand_dims(%x, axis=2), {W1}, padding=[0, 2, 0, 0], dilation=[1, 2]);
          multiply(tanh(%0), sigmoid(%1))
        }}
        """,
    )


KEPT = {
    "a pad of another value": f"nn.conv2d(nn.pad(%x, pad_width=[[0, 0], [0, 0], [1, 1], [1, 1]], "
    f"pad_value=1.0), {W2}, groups=2)",
    "a pad of negative zero": f"nn.conv2d(nn.pad(%x, pad_width=[[0, 0], [0, 0], [1, 1], [1, 1]], "
    f"pad_value=-0.0), {W2}, groups=2)",
    "a pad of the channels": "nn.conv2d(nn.pad(%x, pad_width=[[0, 0], [1, 1], [0, 0], [0, 0]]), "
    "const([[[[1.0]], [[2.0]], [[3.0]], [[4.0]]]], float32))",
    "a pad before a pool": "nn.max_pool2d(nn.pad(%x, pad_width=[[0, 0], [0, 0], [1, 1], [1, 1]]), "
    "pool_size=[2, 2])",
    "a pad also used elsewhere": "%0 = nn.pad(%x, pad_width=[[0, 0], [0, 0], [1, 1], [1, 1]]); "
    f"(nn.conv2d(%0, {W2}, groups=2), %0)",
    "a pad whose height is also used elsewhere": "%0 = expand_dims(nn.pad(%y, "
    f"pad_width=[[0, 0], [0, 0], [1, 0]]), axis=2); (nn.conv2d(%0, {W1}), %0)",
    "a height of 1 added elsewhere": "nn.conv2d(expand_dims(nn.pad(%y, "
    "pad_width=[[0, 0], [0, 0], [1, 0]]), axis=3), "
    "const([[[[1.0], [2.0]]], [[[0.5], [-1.0]]]], float32), groups=2)",
}


@pytest.mark.parametrize("name", sorted(KEPT))
def test_what_is_kept(name: str) -> None:
    source = (
        "def @main(%x: Tensor[(n, 2, h, w), float32], %y: Tensor[(n, 2, t), float32]) "
        f"{{ {KEPT[name]} }}"
    )
    module, _ = parse_typed(source)
    p = FoldPadIntoConv()
    assert p.run(module) is module
    assert p.rewritten == 0


def test_the_pass_counts_its_folds() -> None:
    module, _ = parse_typed(
        f"""
        def @main(%x: Tensor[(n, 2, h, w), float32]) {{
          %0 = nn.conv2d(nn.pad(%x, pad_width=[[0, 0], [0, 0], [1, 1], [1, 1]]), {W2}, groups=2);
          nn.conv2d(nn.pad(%0, pad_width=[[0, 0], [0, 0], [0, 1], [2, 0]]), {W2}, groups=2)
        }}
        """
    )
    p = FoldPadIntoConv()
    out = p.run(module)
    assert p.rewritten == 2
    assert "nn.pad" not in str(out)


@settings(max_examples=40, deadline=None)
@given(
    pad=st.lists(st.integers(0, 3), min_size=4, max_size=4),
    padding=st.lists(st.integers(0, 2), min_size=4, max_size=4),
    strides=st.lists(st.integers(1, 2), min_size=2, max_size=2),
    dilation=st.lists(st.integers(1, 2), min_size=2, max_size=2),
    groups=st.sampled_from([1, 2]),
    one_dimensional=st.booleans(),
    readers=st.sampled_from([1, 2]),
    seed=st.integers(0, 999),
)
def test_folded_convolutions_compute_what_the_unfolded_do(
    pad, padding, strides, dilation, groups, one_dimensional, readers, seed
):
    rng = np.random.default_rng(seed)
    kernel_h = 1 if one_dimensional else 2
    weight = rng.standard_normal((4, 4 // groups, kernel_h, 3)).astype(np.float32)
    attrs = f"strides={strides}, padding={padding}, dilation={dilation}, groups={groups}"
    if one_dimensional:
        data, shape = "expand_dims(%0, axis=2)", "(n, 4, w)"
        width = f"[[0, 0], [0, 0], [{pad[1]}, {pad[3]}]]"
    else:
        data, shape = "%0", "(n, 4, h, w)"
        width = f"[[0, 0], [0, 0], [{pad[0]}, {pad[2]}], [{pad[1]}, {pad[3]}]]"
    convs = [
        f"nn.conv2d({data}, const({(weight * (i + 1)).tolist()}, float32), {attrs})"
        for i in range(readers)  # (two: one pad read by both)
    ]
    program = (
        f"def @main(%x: Tensor[{shape}, float32]) {{ %0 = nn.pad(%x, pad_width={width}); "
        f"({', '.join(convs)}) }}"
    )
    folded = dynshape.VirtualMachine(dynshape.compile(program))
    assert "nn.pad" not in str(dynshape.stages(program)["rewritten"])
    kept = dynshape.VirtualMachine(compile_without(FoldPadIntoConv, program))
    for size in (1, 2, 5, 9):  # a too-small input fails both ways
        x = rng.standard_normal((2, 4, size, size)[: 3 if one_dimensional else 4])
        got, want = _outcome(folded, x.astype(np.float32)), _outcome(kept, x.astype(np.float32))
        if isinstance(want, str) or isinstance(got, str):
            assert got == want
            continue
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def _outcome(vm: dynshape.VirtualMachine, x: np.ndarray) -> np.ndarray | str:
    try:
        return np.stack([np.asarray(r) for r in vm.run(x)])
    except dynshape.DynShapeError as e:
        return type(e).__name__
