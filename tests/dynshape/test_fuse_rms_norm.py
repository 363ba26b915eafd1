"""fuse_rms_norm: the exported RMSNorm chain becomes one ``nn.rms_norm`` call (IR before and
after, every spelling), everything that does not match exactly is left as it is, and the fused
program computes the unfused one's values."""

from __future__ import annotations

import textwrap

import numpy as np
import pytest

import dynshape
import ir
from dynshape.passes.fuse_rms_norm import FuseRMSNorm
from tests.dynshape.pass_helpers import check_pass, parse_typed

X = "%x: Tensor[(b, s, 8), float32], %w: Tensor[(8,), float32]"
FUSED = f"""
    def @main({X}) {{
      nn.rms_norm(%x, %w, epsilon=1e-06)
    }}
    """

#: The chain as exporters write it, one spelling each (all equal to FUSED).
SPELLINGS = {
    # torch.onnx's LlamaRMSNorm: Pow 2, ReduceMean, Add, Sqrt, Div 1 by it, Mul, Mul weight
    "llama": "multiply(%w, multiply(%x, divide(1f, sqrt(add(mean(power(%x, 2f), axis=[2], keepdims=True), 1e-06f)))))",
    # the ONNX importer's RMSNormalization: x * x, rsqrt, weight last
    "rsqrt": "multiply(multiply(%x, rsqrt(add(mean(multiply(%x, %x), axis=[-1], keepdims=True), 1e-06f))), %w)",
    # T5LayerNorm's division by the root, eps first, the factor first
    "divide": "multiply(%w, divide(%x, sqrt(add(1e-06f, mean(multiply(%x, %x), axis=[2], keepdims=True)))))",
    "factor first": "multiply(multiply(rsqrt(add(mean(power(%x, 2f), axis=[2], keepdims=True), 1e-06f)), %x), %w)",
}


@pytest.mark.parametrize("spelling", list(SPELLINGS))
def test_each_exported_spelling_becomes_one_call(spelling: str) -> None:
    source = f"""
        def @main({X}) {{
          {SPELLINGS[spelling]}
        }}
        """
    check_pass(FuseRMSNorm(), source, FUSED)


def test_the_result_feeds_its_users_and_x_keeps_its_others() -> None:
    check_pass(
        FuseRMSNorm(),
        f"""
        def @main({X}) {{
          %0 = multiply(%x, rsqrt(add(mean(multiply(%x, %x), axis=[2], keepdims=True), 0f)));
          %1 = multiply(%0, %w);
          (add(%1, %x), %x)
        }}
        """,
        f"""
        def @main({X}) {{
          %0 = nn.rms_norm(%x, %w, epsilon=0.0);
          (add(%0, %x), %x)
        }}
        """,
    )


KEPT = {
    "an intermediate with another use": f"""
        def @main({X}) {{
          %0 = mean(multiply(%x, %x), axis=[2], keepdims=True);
          %1 = multiply(%w, multiply(%x, rsqrt(add(%0, 1e-06f))));
          (%1, %0)
        }}
        """,
    "the mean over another axis": """
        def @main(%x: Tensor[(b, 8, 8), float32], %w: Tensor[(8,), float32]) {
          multiply(%w, multiply(%x, rsqrt(add(mean(multiply(%x, %x), axis=[1], keepdims=True), 1e-06f))))
        }
        """,
    "the mean without keepdims": """
        def @main(%x: Tensor[(8,), float32], %w: Tensor[(8,), float32]) {
          multiply(%w, multiply(%x, rsqrt(add(mean(multiply(%x, %x), axis=[0]), 1e-06f))))
        }
        """,
    "no weight": f"""
        def @main({X}) {{
          multiply(%x, rsqrt(add(mean(multiply(%x, %x), axis=[2], keepdims=True), 1e-06f)))
        }}
        """,
    "a weight that widens the result": """
        def @main(%x: Tensor[(b, 1), float32], %w: Tensor[(8,), float32]) {
          multiply(%w, multiply(%x, rsqrt(add(mean(multiply(%x, %x), axis=[1], keepdims=True), 1e-06f))))
        }
        """,
    "a 2-d weight": f"""
        def @main({X}, %w2: Tensor[(s, 8), float32]) {{
          multiply(%w2, multiply(%x, rsqrt(add(mean(multiply(%x, %x), axis=[2], keepdims=True), 1e-06f))))
        }}
        """,
    "a square of another tensor": f"""
        def @main({X}, %y: Tensor[(b, s, 8), float32]) {{
          multiply(%w, multiply(%x, rsqrt(add(mean(multiply(%y, %y), axis=[2], keepdims=True), 1e-06f))))
        }}
        """,
    "a cube": f"""
        def @main({X}) {{
          multiply(%w, multiply(%x, rsqrt(add(mean(power(%x, 3f), axis=[2], keepdims=True), 1e-06f))))
        }}
        """,
    "a negative epsilon": f"""
        def @main({X}) {{
          multiply(%w, multiply(%x, rsqrt(add(mean(multiply(%x, %x), axis=[2], keepdims=True), -1f))))
        }}
        """,
    "a tensor epsilon": f"""
        def @main({X}, %e: Tensor[(b, s, 1), float32]) {{
          multiply(%w, multiply(%x, rsqrt(add(mean(multiply(%x, %x), axis=[2], keepdims=True), %e))))
        }}
        """,
    "2 divided by the root": f"""
        def @main({X}) {{
          multiply(%w, multiply(%x, divide(2f, sqrt(add(mean(multiply(%x, %x), axis=[2], keepdims=True), 1e-06f)))))
        }}
        """,
    "float16": """
        def @main(%x: Tensor[(b, 8), float16], %w: Tensor[(8,), float16]) {
          multiply(%w, multiply(%x, rsqrt(add(mean(multiply(%x, %x), axis=[1], keepdims=True), 0.001f16))))
        }
        """,
    "a let in the function": f"""
        def @main({X}) {{
          let %m = mean(multiply(%x, %x), axis=[2], keepdims=True);
          multiply(%w, multiply(%x, rsqrt(add(%m, 1e-06f))))
        }}
        """,
}


@pytest.mark.parametrize("why", list(KEPT))
def test_anything_else_is_left_unchanged(why: str) -> None:
    module, _ = parse_typed(KEPT[why])
    p = FuseRMSNorm()
    out = p.run(module)
    assert p.rewritten == 0 and out is module, why


@pytest.mark.parametrize("spelling", list(SPELLINGS))
@pytest.mark.parametrize("shape", [(1, 1), (3, 5), (0, 2)])
def test_the_fused_program_computes_the_unfused_values(
    spelling: str, shape: tuple[int, int]
) -> None:
    source = textwrap.dedent(
        f"""
        def @main({X}) {{
          {SPELLINGS[spelling]}
        }}
        """
    )
    stages = dynshape.stages(ir.parse(source), debug=True)
    assert "nn.rms_norm" in str(stages["rewritten"])
    fused = dynshape.compile(ir.parse(source))
    rng = np.random.default_rng(sum(shape))
    x = rng.standard_normal((*shape, 8)).astype(np.float32) * 3
    w = rng.standard_normal(8).astype(np.float32)
    want = x / np.sqrt((x.astype(np.float64) ** 2).mean(axis=-1, keepdims=True) + 1e-6) * w
    from vm import VirtualMachine

    got = VirtualMachine(fused).run(x, w)
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=2e-6)
