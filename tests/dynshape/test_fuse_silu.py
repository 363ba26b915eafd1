"""fuse_silu: ``x * sigmoid(x)`` becomes one ``silu`` call (IR before and after, both operand
orders, chains of them), everything that does not match exactly is left as it is, and the fused
program computes the unfused one's values (against float64 numpy, and against the pipeline
without the pass)."""

from __future__ import annotations

import textwrap

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import dynshape
import ir
from dynshape.passes.fuse_silu import FuseSiLU
from tests.dynshape.pass_helpers import check_pass, compile_without, parse_typed
from vm import VirtualMachine

X = "%x: Tensor[(b, 8), float32]"


@pytest.mark.parametrize("product", ["multiply(%x, sigmoid(%x))", "multiply(sigmoid(%x), %x)"])
def test_either_operand_order_becomes_one_call(product: str) -> None:
    check_pass(
        FuseSiLU(),
        f"""
        def @main({X}) {{
          {product}
        }}
        """,
        f"""
        def @main({X}) {{
          silu(%x)
        }}
        """,
    )


def test_the_result_feeds_its_users_and_x_keeps_its_others() -> None:
    # an EfficientNet block: the activation of a convolution's output, then a squeeze-excite
    # product of it; the pre-activation value is returned too, so it has another use
    check_pass(
        FuseSiLU(),
        """
        def @main(%x: Tensor[(n, 4, h, w), float32], %k: Tensor[(4, 4, 3, 3), float32]) {
          %0 = nn.conv2d(%x, %k, padding=[1, 1, 1, 1]);
          %1 = multiply(%0, sigmoid(%0));
          %2 = mean(%1, axis=[2, 3], keepdims=True);
          (multiply(%1, sigmoid(%2)), %0)
        }
        """,
        """
        def @main(%x: Tensor[(n, 4, h, w), float32], %k: Tensor[(4, 4, 3, 3), float32]) {
          %0 = nn.conv2d(%x, %k, padding=[1, 1, 1, 1]);
          %1 = silu(%0);
          %2 = mean(%1, axis=[2, 3], keepdims=True);
          (multiply(%1, sigmoid(%2)), %0)
        }
        """,
    )


def test_a_chain_of_them_is_rewritten_inside_out() -> None:
    check_pass(
        FuseSiLU(),
        f"""
        def @main({X}) {{
          %0 = multiply(%x, sigmoid(%x));
          multiply(%0, sigmoid(%0))
        }}
        """,
        f"""
        def @main({X}) {{
          silu(silu(%x))
        }}
        """,
    )


KEPT = {
    "a sigmoid with another use": f"""
        def @main({X}) {{
          %0 = sigmoid(%x);
          (multiply(%x, %0), %0)
        }}
        """,
    "a gate of another value (GLU)": f"""
        def @main({X}, %y: Tensor[(b, 8), float32]) {{
          multiply(%y, sigmoid(%x))
        }}
        """,
    "the quick GELU, a sigmoid of a scaled x": f"""
        def @main({X}) {{
          multiply(%x, sigmoid(multiply(%x, 1.702f)))
        }}
        """,
    "a product that broadcasts x": """
        def @main(%x: Tensor[(b, 1), float32], %y: Tensor[(b, 8), float32]) {
          multiply(%x, sigmoid(add(%x, %y)))
        }
        """,
    "x squared times its sigmoid": f"""
        def @main({X}) {{
          multiply(multiply(%x, %x), sigmoid(%x))
        }}
        """,
    "a let in the function": f"""
        def @main({X}) {{
          let %s = sigmoid(%x);
          multiply(%x, %s)
        }}
        """,
}


@pytest.mark.parametrize("why", list(KEPT))
def test_anything_else_is_left_unchanged(why: str) -> None:
    module, _ = parse_typed(KEPT[why])
    p = FuseSiLU()
    out = p.run(module)
    assert p.rewritten == 0 and out is module, why


SILU_SOURCE = """
    def @main(%x: Tensor[(b, c), DTYPE]) {
      multiply(%x, sigmoid(%x))
    }
    """

#: float16 is computed in float32 and rounded once (half an ulp of the result); float32 within
#: a few ulp of the result where it is not small, and an absolute error of about |x| * 2**-24
#: where tanh(x / 2) nears -1 (module doc of ``vm/kernels/silu.py``).
TOLERANCE = {"float16": (1e-3, 1e-3), "float32": (3e-6, 2e-7), "float64": (1e-14, 1e-16)}


@pytest.mark.parametrize("dtype", sorted(TOLERANCE))
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_the_fused_program_computes_x_times_its_sigmoid(dtype: str, data) -> None:
    source = textwrap.dedent(SILU_SOURCE.replace("DTYPE", dtype))
    stages = dynshape.stages(ir.parse(source), debug=True)
    assert "silu(" in str(stages["rewritten"])
    shape = data.draw(hnp.array_shapes(min_dims=2, max_dims=2, min_side=0, max_side=40))
    finite = st.floats(-60, 60, width=16 if dtype == "float16" else 32)
    x = data.draw(hnp.arrays(dtype, shape, elements=finite))
    got = VirtualMachine(dynshape.compile(ir.parse(source))).run(x)
    wide = x.astype(np.float64)
    want = wide / (1 + np.exp(-wide))
    rtol, scale = TOLERANCE[dtype]
    assert got.dtype == x.dtype and got.shape == x.shape
    # the absolute part scales with |x| (the cancellation where sigmoid is small)
    err = np.abs(got.astype(np.float64) - want)
    assert (err <= rtol * np.abs(want) + scale * np.maximum(np.abs(wide), 1)).all()


def test_the_fused_program_and_the_unfused_one_agree_on_a_large_tensor() -> None:
    # past one chunk of the kernel (and past its sharing with the worker thread), with the
    # non-finite values: NaN stays NaN, silu(inf) = inf, and silu(-inf) is NaN as the product
    # -inf * sigmoid(-inf) = -inf * 0 is (so are torch's x / (1 + exp(-x)) and onnxruntime's)
    source = textwrap.dedent(SILU_SOURCE.replace("DTYPE", "float32"))
    rng = np.random.default_rng(7)
    x = (rng.standard_normal((300, 1000)) * 8).astype(np.float32)
    x[0, :3] = [np.nan, np.inf, -np.inf]
    fused = VirtualMachine(dynshape.compile(ir.parse(source))).run(x)
    unfused = VirtualMachine(compile_without(FuseSiLU, source)).run(x)
    assert np.isnan(fused[0, 0]) and fused[0, 1] == np.inf and np.isnan(fused[0, 2])
    np.testing.assert_allclose(fused, unfused, rtol=3e-6, atol=1e-6)


def test_a_large_chain_through_the_blocked_runner_gives_the_values_of_small_calls(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # past the blocked runner's threshold (vm/fused_blocked.py): silu runs on blocks of rows,
    # from either thread, and shares its chunks with the worker (which may be running blocks)
    from vm import fused_blocked

    blocked_runs: list[int] = []
    run_blocks = fused_blocked.BlockedPlan._run_blocks

    def counted(self: fused_blocked.BlockedPlan, *args: object) -> None:
        blocked_runs.append(1)
        return run_blocks(self, *args)

    monkeypatch.setattr(fused_blocked.BlockedPlan, "_run_blocks", counted)

    source = textwrap.dedent(
        """
        def @main(%x: Tensor[(n, 1024), float32]) {
          %0 = add(%x, 1f);
          multiply(%0, sigmoid(%0))
        }
        """
    )
    rows = fused_blocked.BLOCKED_MIN_ELEMENTS // 1024 + 5
    rng = np.random.default_rng(11)
    x = (rng.standard_normal((rows, 1024)) * 6).astype(np.float32)
    machine = VirtualMachine(dynshape.compile(ir.parse(source)))
    whole = machine.run(x)
    assert blocked_runs, "the chain did not run blocked"
    pieces = np.concatenate([machine.run(x[i : i + 7]) for i in range(0, 70, 7)])
    np.testing.assert_array_equal(whole[:70], pieces)
    wide = x.astype(np.float64) + 1
    np.testing.assert_allclose(whole, wide / (1 + np.exp(-wide)), rtol=3e-6, atol=3e-6)
