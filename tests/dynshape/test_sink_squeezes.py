"""sink_squeezes: a squeeze moves below the elementwise ops that read it and cancels against the
``expand_dims`` that undoes it (IR before and after: the imported Conv1d block, each kind of
other operand, what is left alone), and the rewritten program computes the original's values
with fewer kernels (end to end, against the pipeline without the pass)."""

from __future__ import annotations

import textwrap

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dynshape
import ir
from dynshape.passes.sink_squeezes import SinkSqueezes
from tests.dynshape.pass_helpers import check_pass, compile_without, parse_typed
from vm import VirtualMachine

#: Two imported Conv1d layers (a TCN block: causal padding, dilation, bias, ReLU, the residual
#: add of the block's input), as the ONNX importer writes them.
CONV1D_BLOCK = """
    def @main(%x: Tensor[(n, 4, t), float32], %k: Tensor[(4, 4, 1, 3), float32],
              %b: Tensor[(4,), float32]) {
      %0 = expand_dims(%x, axis=2);
      %1 = nn.conv2d(%0, %k, padding=[0, 4, 0, 0], dilation=[1, 2]);
      %2 = squeeze(nn.bias_add(%1, %b), axis=[2]);
      %3 = nn.relu(%2);
      %4 = expand_dims(%3, axis=2);
      %5 = nn.conv2d(%4, %k, padding=[0, 4, 0, 0], dilation=[1, 2]);
      %6 = squeeze(nn.bias_add(%5, %b), axis=[2]);
      nn.relu(add(nn.relu(%6), %x))
    }
    """


def test_the_conv1d_block_stays_on_the_unit_axis() -> None:
    p = SinkSqueezes()
    check_pass(
        p,
        CONV1D_BLOCK,
        """
        def @main(%x: Tensor[(n, 4, t), float32], %k: Tensor[(4, 4, 1, 3), float32],
                  %b: Tensor[(4,), float32]) {
          %0 = expand_dims(%x, axis=2);
          %1 = nn.conv2d(%0, %k, padding=[0, 4, 0, 0], dilation=[1, 2]);
          %2 = nn.relu(nn.bias_add(%1, %b));
          %3 = nn.conv2d(%2, %k, padding=[0, 4, 0, 0], dilation=[1, 2]);
          %4 = nn.relu(nn.bias_add(%3, %b));
          squeeze(nn.relu(add(%4, expand_dims(%x, axis=2))), axis=[2])
        }
        """,
    )
    assert (p.sunk, p.cancelled) == (4, 1)


def test_other_operands_get_the_unit_axes_their_broadcast_needs() -> None:
    # a scalar and a trailing-axes operand broadcast as they are; an operand spanning the
    # squeezed axis gets it (a constant reshaped, a value expand_dims-ed); another squeeze of
    # the same axis gives its input; negative axes count from the end
    check_pass(
        SinkSqueezes(),
        """
        def @main(%x: Tensor[(n, 3, 1, t), float32], %y: Tensor[(n, 3, 1, t), float32],
                  %w: Tensor[(3, t), float32], %v: Tensor[(t,), float32]) {
          %0 = squeeze(%x, axis=[-2]);
          %1 = multiply(add(%0, 2f), %v);
          where(greater(%1, const([[1], [2], [3]], float32)), %w, squeeze(%y, axis=[2]))
        }
        """,
        """
        def @main(%x: Tensor[(n, 3, 1, t), float32], %y: Tensor[(n, 3, 1, t), float32],
                  %w: Tensor[(3, t), float32], %v: Tensor[(t,), float32]) {
          %0 = multiply(add(%x, 2f), %v);
          %1 = greater(%0, const([[[1]], [[2]], [[3]]], float32));
          squeeze(where(%1, expand_dims(%w, axis=1), %y), axis=[2])
        }
        """,
    )


def test_a_squeeze_of_two_axes_cancels_against_one_expand_dims_of_two() -> None:
    check_pass(
        SinkSqueezes(),
        """
        def @main(%x: Tensor[(n, 1, 1, c), float32]) {
          expand_dims(exp(squeeze(%x, axis=[1, 2])), axis=1, num_newaxis=2)
        }
        """,
        """
        def @main(%x: Tensor[(n, 1, 1, c), float32]) {
          exp(%x)
        }
        """,
    )


KEPT = {
    "an op with an axis after the squeeze (bias_add)": """
        def @main(%x: Tensor[(n, 3, 1, t), float32], %b: Tensor[(3,), float32]) {
          nn.bias_add(squeeze(%x, axis=[2]), %b)
        }
        """,
    "a squeeze of every unit axis (no axes given)": """
        def @main(%x: Tensor[(n, 3, 1, t), float32]) {
          exp(squeeze(%x))
        }
        """,
    "squeezes of different axes in one op": """
        def @main(%x: Tensor[(2, 1, 3, 1), float32]) {
          add(squeeze(%x, axis=[1]), squeeze(%x, axis=[3]))
        }
        """,
    "a squeezed value broadcast to a higher rank": """
        def @main(%x: Tensor[(3, 1, 5), float32], %y: Tensor[(2, 3, 5), float32]) {
          add(squeeze(%x, axis=[1]), %y)
        }
        """,
    "an expand_dims of another axis": """
        def @main(%x: Tensor[(n, 3, 1, t), float32]) {
          expand_dims(squeeze(%x, axis=[2]), axis=1)
        }
        """,
    "a squeeze read by a reduction": """
        def @main(%x: Tensor[(n, 3, 1, t), float32]) {
          sum(squeeze(%x, axis=[2]), axis=[1])
        }
        """,
    "a let in the function": """
        def @main(%x: Tensor[(n, 3, 1, t), float32]) {
          let %s = squeeze(%x, axis=[2]);
          exp(%s)
        }
        """,
}


@pytest.mark.parametrize("why", list(KEPT))
def test_anything_else_is_left_unchanged(why: str) -> None:
    module, _ = parse_typed(KEPT[why])
    p = SinkSqueezes()
    out = p.run(module)
    assert (p.sunk, p.cancelled) == (0, 0) and out is module, why


@settings(max_examples=25, deadline=None)
@given(n=st.integers(0, 3), t=st.integers(1, 40), seed=st.integers(0, 2**16))
def test_the_block_computes_the_original_values_with_fewer_kernels(
    n: int, t: int, seed: int
) -> None:
    source = textwrap.dedent(CONV1D_BLOCK)
    sunk = dynshape.compile(ir.parse(source))
    original = compile_without(SinkSqueezes, source)
    rng = np.random.default_rng(seed)
    args = (
        rng.standard_normal((n, 4, t)).astype(np.float32),
        rng.standard_normal((4, 4, 1, 3)).astype(np.float32),
        rng.standard_normal(4).astype(np.float32),
    )
    got = VirtualMachine(sunk).run(*args)
    want = VirtualMachine(original).run(*args)
    assert got.shape == want.shape == (n, 4, t) and got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    # each convolution now takes its bias and activation as one kernel
    assert len(sunk.kernels) < len(original.kernels)


def test_ops_with_value_attributes_are_sunk_and_others_are_not():
    # cast, clip and leaky_relu take values, not axes; bias_add's axis would mean another axis
    # on the unsqueezed value
    check_pass(
        SinkSqueezes(),
        """
        def @main(%x: Tensor[(n, 3, 1, t), float32], %b: Tensor[(3,), float64]) {
          %0 = squeeze(%x, axis=[2]);
          %1 = cast(nn.leaky_relu(clip(%0, a_min=-1, a_max=1), alpha=0.1), dtype="float64");
          nn.bias_add(%1, %b)
        }
        """,
        """
        def @main(%x: Tensor[(n, 3, 1, t), float32], %b: Tensor[(3,), float64]) {
          %0 = cast(nn.leaky_relu(clip(%x, a_min=-1, a_max=1), alpha=0.1), dtype="float64");
          nn.bias_add(squeeze(%0, axis=[2]), %b)
        }
        """,
    )
