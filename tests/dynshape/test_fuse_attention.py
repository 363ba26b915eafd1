"""fuse_attention: the exported attention chain becomes one ``nn.attention`` call (IR before and
after), and everything that does not match exactly is left as it is."""

from __future__ import annotations

import textwrap

import pytest

import ir
from dynshape.passes.fuse_attention import FuseAttention
from tests.dynshape.pass_helpers import check_pass, parse_typed

QKV = (
    "%q: Tensor[(b, s, 4, 8), float32], %k: Tensor[(b, s, 4, 8), float32], "
    "%v: Tensor[(b, s, 4, 8), float32], %m: Tensor[(b, 1, 1, s), float32]"
)


def test_the_exported_pattern_with_head_split_and_merge() -> None:
    # TorchScript's encoder: k^T by one transpose of the head split, scores / sqrt(d), an
    # additive mask, softmax on the last axis, the merge transpose: all folded (views).
    check_pass(
        FuseAttention(),
        f"""
        def @main({QKV}) {{
          %0 = transpose(%q, axes=[0, 2, 1, 3]);
          %1 = transpose(%k, axes=[0, 2, 3, 1]);
          %2 = transpose(%v, axes=[0, 2, 1, 3]);
          %3 = add(divide(nn.matmul(%0, %1), 2f), %m);
          %4 = nn.matmul(nn.softmax(%3, axis=3), %2);
          reshape(transpose(%4, axes=[0, 2, 1, 3]), newshape=[b, s, 32])
        }}
        """,
        f"""
        def @main({QKV}) {{
          %0 = nn.attention(%q, %k, %v, %m, scale=0.5, q_axes=[0, 2, 1, 3], k_axes=[0, 2, 1, 3], v_axes=[0, 2, 1, 3], out_axes=[0, 2, 1, 3]);
          reshape(%0, newshape=[b, s, 32])
        }}
        """,
    )


def test_torch_export_scales_q_and_k_and_no_mask() -> None:
    # sqrt(scale) on q and on k^T, the mask add missing: the scale is the product, the mask 0.
    check_pass(
        FuseAttention(),
        """
        def @main(%q: Tensor[(2, n, 8), float32], %k: Tensor[(2, n, 8), float32], %v: Tensor[(2, n, 3), float32]) {
          %0 = multiply(%q, 0.5f);
          %1 = multiply(0.25f, transpose(%k, axes=[0, 2, 1]));
          nn.matmul(nn.softmax(nn.matmul(%0, %1), axis=-1), %v)
        }
        """,
        """
        def @main(%q: Tensor[(2, n, 8), float32], %k: Tensor[(2, n, 8), float32], %v: Tensor[(2, n, 3), float32]) {
          nn.attention(%q, %k, %v, 0f, scale=0.125)
        }
        """,
    )


def test_k_transposed_in_the_matmul_operand_is_a_view_too() -> None:
    # matmul(q, kt) with kt a parameter: the op reads kt with its last two axes swapped.
    check_pass(
        FuseAttention(),
        """
        def @main(%q: Tensor[(h, n, 8), float32], %kt: Tensor[(h, 8, m), float32], %v: Tensor[(h, m, 8), float32], %mask: Tensor[(n, m), float32]) {
          nn.matmul(nn.softmax(add(%mask, nn.matmul(%q, %kt)), axis=-1), %v)
        }
        """,
        """
        def @main(%q: Tensor[(h, n, 8), float32], %kt: Tensor[(h, 8, m), float32], %v: Tensor[(h, m, 8), float32], %mask: Tensor[(n, m), float32]) {
          nn.attention(%q, %kt, %v, %mask, k_axes=[0, 2, 1])
        }
        """,
    )


def test_batch_matmul_as_the_builder_writes_it() -> None:
    check_pass(
        FuseAttention(),
        """
        def @main(%q: Tensor[(b, n, 8), float64], %k: Tensor[(b, n, 8), float64], %v: Tensor[(b, n, 4), float64]) {
          %0 = multiply(nn.batch_matmul(%q, %k), 0.25f64);
          nn.batch_matmul(nn.softmax(%0, axis=-1), %v, transpose_b=False)
        }
        """,
        """
        def @main(%q: Tensor[(b, n, 8), float64], %k: Tensor[(b, n, 8), float64], %v: Tensor[(b, n, 4), float64]) {
          nn.attention(%q, %k, %v, 0f64, scale=0.25)
        }
        """,
    )


KEPT = {
    "the scores have another use": """
        def @main(%q: Tensor[(n, 8), float32], %k: Tensor[(8, n), float32], %v: Tensor[(n, 8), float32]) {
          %0 = nn.matmul(%q, %k);
          (nn.matmul(nn.softmax(%0, axis=-1), %v), %0)
        }
        """,
    "the probabilities have another use": """
        def @main(%q: Tensor[(n, 8), float32], %k: Tensor[(8, n), float32], %v: Tensor[(n, 8), float32]) {
          %0 = nn.softmax(nn.matmul(%q, %k), axis=-1);
          (nn.matmul(%0, %v), %0)
        }
        """,
    "the masked scores have another use": """
        def @main(%q: Tensor[(n, 8), float32], %k: Tensor[(8, n), float32], %v: Tensor[(n, 8), float32], %m: Tensor[(n, n), float32]) {
          %0 = add(nn.matmul(%q, %k), %m);
          (nn.matmul(nn.softmax(%0, axis=-1), %v), %0)
        }
        """,
    "softmax on another axis": """
        def @main(%q: Tensor[(n, 8), float32], %k: Tensor[(8, n), float32], %v: Tensor[(n, 8), float32]) {
          nn.matmul(nn.softmax(nn.matmul(%q, %k), axis=0), %v)
        }
        """,
    "a mask that widens the scores": """
        def @main(%q: Tensor[(n, 8), float32], %k: Tensor[(8, n), float32], %v: Tensor[(n, 8), float32], %m: Tensor[(2, n, n), float32]) {
          nn.matmul(nn.softmax(add(nn.matmul(%q, %k), %m), axis=-1), %v)
        }
        """,
    "a scale that is a tensor": """
        def @main(%q: Tensor[(n, 8), float32], %k: Tensor[(8, n), float32], %v: Tensor[(n, 8), float32], %c: Tensor[(n, 1), float32]) {
          nn.matmul(nn.softmax(divide(nn.matmul(%q, %k), %c), axis=-1), %v)
        }
        """,
    "a scale of zero": """
        def @main(%q: Tensor[(n, 8), float32], %k: Tensor[(8, n), float32], %v: Tensor[(n, 8), float32]) {
          nn.matmul(nn.softmax(divide(nn.matmul(%q, %k), 0f), axis=-1), %v)
        }
        """,
    "log_softmax": """
        def @main(%q: Tensor[(n, 8), float32], %k: Tensor[(8, n), float32], %v: Tensor[(n, 8), float32]) {
          nn.matmul(nn.log_softmax(nn.matmul(%q, %k), axis=-1), %v)
        }
        """,
    "an elementwise op between softmax and matmul": """
        def @main(%q: Tensor[(n, 8), float32], %k: Tensor[(8, n), float32], %v: Tensor[(n, 8), float32]) {
          nn.matmul(exp(nn.softmax(nn.matmul(%q, %k), axis=-1)), %v)
        }
        """,
    "1-d operands (matmul's vector rule)": """
        def @main(%q: Tensor[(8,), float32], %k: Tensor[(8, n), float32], %v: Tensor[(n, 8), float32]) {
          %0 = nn.matmul(%q, %k);
          nn.matmul(expand_dims(nn.softmax(%0, axis=-1), axis=0), %v)
        }
        """,
    "a transposed first operand of batch_matmul": """
        def @main(%q: Tensor[(b, 8, n), float32], %k: Tensor[(b, n, 8), float32], %v: Tensor[(b, n, 4), float32]) {
          nn.batch_matmul(nn.softmax(nn.batch_matmul(%q, %k, transpose_a=True), axis=-1), %v, transpose_a=True, transpose_b=False)
        }
        """,
    "a let in the function": """
        def @main(%q: Tensor[(n, 8), float32], %k: Tensor[(8, n), float32], %v: Tensor[(n, 8), float32]) {
          let %s = nn.matmul(%q, %k);
          nn.matmul(nn.softmax(%s, axis=-1), %v)
        }
        """,
}


@pytest.mark.parametrize("why", list(KEPT))
def test_anything_else_is_left_unchanged(why: str) -> None:
    module, _ = parse_typed(KEPT[why])
    p = FuseAttention()
    out = p.run(module)
    assert p.rewritten == 0 and out is module, why


def test_integer_matmuls_are_not_attention() -> None:
    # softmax refuses integers, so the chain cannot even be typed with int scores; an integer
    # second matmul over float probabilities is refused by nn.matmul too: nothing to rewrite.
    source = """
        def @main(%q: Tensor[(n, 8), int32], %k: Tensor[(8, n), int32]) {
          nn.matmul(%q, %k)
        }
        """
    module, _ = parse_typed(source)
    assert FuseAttention().run(module) is module


def test_the_merge_transpose_is_kept_when_the_result_has_other_uses() -> None:
    module, _ = parse_typed(
        """
        def @main(%q: Tensor[(n, 8), float32], %k: Tensor[(8, n), float32], %v: Tensor[(n, 8), float32]) {
          %0 = nn.matmul(nn.softmax(nn.matmul(%q, %k), axis=-1), %v);
          (transpose(%0, axes=[1, 0]), %0)
        }
        """
    )
    text = str(FuseAttention().run(module))
    assert "nn.attention(%q, %k, %v, 0f, k_axes=[1, 0])" in text
    assert "out_axes" not in text and "transpose(" in text


def test_the_pipeline_runs_it_in_the_rewritten_stage() -> None:
    import dynshape

    source = textwrap.dedent(
        """
        def @main(%q: Tensor[(n, 8), float32], %k: Tensor[(8, n), float32], %v: Tensor[(n, 8), float32]) {
          nn.matmul(nn.softmax(nn.matmul(%q, %k), axis=-1), %v)
        }
        """
    )
    out = dynshape.stages(ir.parse(source), debug=True)
    assert "nn.attention" in str(out["rewritten"]) and "nn.softmax" not in str(out["rewritten"])
