"""fuse_attention on the spellings PyTorch's exporters write (issue 27): grouped-query attention's
``repeat_kv`` folded into ``nn.attention``'s grouped form (no copy of the cache), a mask as long
as ``total_seq`` against ``past_seq + seq`` keys, and SDPA's ``where(p != p, 0, p)`` after the
softmax (``nan_to_zero``). Text in / text out, what is left alone, and the numbers: every
stage against the unfused program (the reference interpreter) and numpy, on random shapes."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ir
from dynshape.passes.fuse_attention import FuseAttention
from dynshape.testing.differential import check_stages
from tests.dynshape.pass_helpers import check_pass, parse_typed

PARAMS = (
    "%q: Tensor[(b, 4, s, 8), float32], %k: Tensor[(b, 2, t, 8), float32], "
    "%v: Tensor[(b, 2, t, 8), float32], %m: Tensor[(b, 1, s, u), float32]"
)


def test_repeat_kv_becomes_the_grouped_form() -> None:
    # TorchScript's Llama: k and v repeated by expand_dims -> broadcast_to -> reshape (a copy of
    # the cache), k^T a transpose of the repeat, a (b, 1, s, total_seq) mask, the merge
    # transpose. Grouped: q split (b, 2, 2, s, 8) by a reshape (a view), k and v the cache with
    # a 1-axis (views), the mask a 1-axis more, the result merged back by reshapes.
    check_pass(
        FuseAttention(),
        f"""
        def @main({PARAMS}) {{
          %0 = reshape(broadcast_to(expand_dims(%k, axis=2), shape=[b, 2, 2, t, 8]), newshape=[b, 4, t, 8]);
          %1 = add(divide(nn.matmul(%q, transpose(%0, axes=[0, 1, 3, 2])), 2f), %m);
          %2 = reshape(broadcast_to(expand_dims(%v, axis=2), shape=[b, 2, 2, t, 8]), newshape=[b, 4, t, 8]);
          %3 = nn.matmul(nn.softmax(%1, axis=3), %2);
          reshape(transpose(%3, axes=[0, 2, 1, 3]), newshape=[b, s, 32])
        }}
        """,
        f"""
        def @main({PARAMS}) {{
          %0 = reshape(%q, newshape=[0, 2, 2, s, 8]);
          %1 = expand_dims(%k, axis=2);
          %2 = expand_dims(%v, axis=2);
          %3 = expand_dims(%m, axis=1);
          %4 = nn.attention(%0, %1, %2, %3, scale=0.5, out_axes=[0, 3, 1, 2, 4]);
          reshape(reshape(%4, newshape=[0, 0, 4, 8]), newshape=[b, s, 32])
        }}
        """,
    )


def test_sdpa_nan_cleanup_and_a_tiled_repeat() -> None:
    # torch.export's SDPA: sqrt(scale) on q and k, where(p != p, 0, p) after the softmax; the
    # kv heads tiled (expand_dims at the heads' own axis: head h reads kv head h % 2), so the
    # split is (group, kv head); no merge transpose: the result is reshaped back alone.
    check_pass(
        FuseAttention(),
        """
        def @main(%q: Tensor[(4, s, 8), float32], %k: Tensor[(2, t, 8), float32], %v: Tensor[(4, t, 3), float32], %m: Tensor[(s, t), float32]) {
          %0 = reshape(broadcast_to(expand_dims(%k, axis=0), shape=[2, 2, t, 8]), newshape=[4, t, 8]);
          %1 = nn.matmul(multiply(%q, 0.5f), transpose(multiply(%0, 0.5f), axes=[0, 2, 1]));
          %2 = nn.softmax(add(%1, %m), axis=-1);
          nn.matmul(where(not_equal(%2, %2), const([0.0], float32), %2), %v)
        }
        """,
        """
        def @main(%q: Tensor[(4, s, 8), float32], %k: Tensor[(2, t, 8), float32], %v: Tensor[(4, t, 3), float32], %m: Tensor[(s, t), float32]) {
          %0 = reshape(%q, newshape=[2, 2, s, 8]);
          %1 = expand_dims(%k, axis=0);
          %2 = reshape(%v, newshape=[2, 2, t, 3]);
          %3 = nn.attention(%0, %1, %2, %m, scale=0.25, nan_to_zero=True);
          reshape(%3, newshape=[4, s, 3])
        }
        """,
    )


def test_torch_export_flat_key_transpose_is_a_view() -> None:
    # torch.export's k^T of a 4-d key through a 3-d layout: reshape to (b*h, t, 8), transpose
    # the last two, reshape back to (b, h, 8, t). The same as one transpose: a view of k.
    check_pass(
        FuseAttention(),
        """
        def @main(%q: Tensor[(b, 4, s, 8), float32], %k: Tensor[(b, 4, t, 8), float32], %v: Tensor[(b, 4, t, 8), float32]) {
          %0 = reshape(transpose(reshape(%k, newshape=[-1, t, 8]), axes=[0, 2, 1]), newshape=[b, 4, 8, t]);
          nn.matmul(nn.softmax(nn.matmul(%q, %0), axis=-1), %v)
        }
        """,
        """
        def @main(%q: Tensor[(b, 4, s, 8), float32], %k: Tensor[(b, 4, t, 8), float32], %v: Tensor[(b, 4, t, 8), float32]) {
          nn.attention(%q, %k, %v, 0f)
        }
        """,
    )


def test_a_flat_reshape_that_moves_the_merged_axis_stays() -> None:
    # the transpose moves the merged (b*h) axis: not a transpose of k's trailing axes
    module, _ = parse_typed(
        """
        def @main(%q: Tensor[(2, 3, s, 8), float32], %k: Tensor[(2, 3, 6, 8), float32], %v: Tensor[(2, 3, 6, 8), float32]) {
          %0 = reshape(transpose(reshape(%k, newshape=[6, 6, 8]), axes=[1, 2, 0]), newshape=[2, 3, 8, 6]);
          nn.matmul(nn.softmax(nn.matmul(%q, %0), axis=-1), %v)
        }
        """
    )
    text = str(FuseAttention().run(module))
    assert "nn.attention(" in text and "axes=[1, 2, 0]" in text


KEPT = {
    "a repeat along the keys (not a head axis)": """
        def @main(%q: Tensor[(2, s, 8), float32], %k: Tensor[(2, t, 8), float32], %v: Tensor[(2, t, 8), float32]) {
          %0 = reshape(broadcast_to(expand_dims(%k, axis=2), shape=[2, t, 2, 8]), newshape=[2, t, 16]);
          nn.matmul(nn.softmax(nn.matmul(%q, %0), axis=-1), %v)
        }
        """,
    "k and v repeated by different factors": """
        def @main(%q: Tensor[(4, s, 8), float32], %k: Tensor[(2, t, 8), float32], %v: Tensor[(1, t, 8), float32]) {
          %0 = reshape(broadcast_to(expand_dims(%k, axis=1), shape=[2, 2, t, 8]), newshape=[4, t, 8]);
          %1 = reshape(broadcast_to(expand_dims(%v, axis=1), shape=[1, 4, t, 8]), newshape=[4, t, 8]);
          nn.matmul(nn.softmax(nn.matmul(%q, transpose(%0, axes=[0, 2, 1])), axis=-1), %1)
        }
        """,
}
"""Chains whose repeat the split cannot express: fused with the repeat kept (a copy)."""


@pytest.mark.parametrize("why", list(KEPT))
def test_repeats_the_split_cannot_express_stay(why: str) -> None:
    module, _ = parse_typed(KEPT[why])
    text = str(FuseAttention().run(module))
    assert "broadcast_to" in text, why


NOT_FUSED = {
    "the probabilities' NaN test has another use": """
        def @main(%q: Tensor[(n, 8), float32], %k: Tensor[(8, n), float32], %v: Tensor[(n, 8), float32]) {
          %0 = nn.softmax(nn.matmul(%q, %k), axis=-1);
          %1 = not_equal(%0, %0);
          (nn.matmul(where(%1, 0f, %0), %v), %1)
        }
        """,
    "NaNs replaced by a non-zero": """
        def @main(%q: Tensor[(n, 8), float32], %k: Tensor[(8, n), float32], %v: Tensor[(n, 8), float32]) {
          %0 = nn.softmax(nn.matmul(%q, %k), axis=-1);
          nn.matmul(where(not_equal(%0, %0), 1f, %0), %v)
        }
        """,
    "NaNs replaced by -0": """
        def @main(%q: Tensor[(n, 8), float32], %k: Tensor[(8, n), float32], %v: Tensor[(n, 8), float32]) {
          %0 = nn.softmax(nn.matmul(%q, %k), axis=-1);
          nn.matmul(where(not_equal(%0, %0), -0f, %0), %v)
        }
        """,
    "a where testing something else": """
        def @main(%q: Tensor[(n, 8), float32], %k: Tensor[(8, n), float32], %v: Tensor[(n, 8), float32], %c: Tensor[(n, n), bool]) {
          %0 = nn.softmax(nn.matmul(%q, %k), axis=-1);
          nn.matmul(where(%c, 0f, %0), %v)
        }
        """,
    "a mask as long as the keys only by luck (v's rows are another length)": """
        def @main(%q: Tensor[(n, 8), float32], %k: Tensor[(8, t), float32], %v: Tensor[(u, 8), float32], %m: Tensor[(n, u), float32]) {
          nn.matmul(nn.softmax(add(nn.matmul(%q, %k), %m), axis=-1), %v)
        }
        """,
    "a mask widening the queries' axis": """
        def @main(%q: Tensor[(n, 8), float32], %k: Tensor[(8, t), float32], %v: Tensor[(t, 8), float32], %m: Tensor[(u, t), float32]) {
          nn.matmul(nn.softmax(add(nn.matmul(%q, %k), %m), axis=-1), %v)
        }
        """,
}


@pytest.mark.parametrize("why", list(NOT_FUSED))
def test_anything_inexact_is_left_unchanged(why: str) -> None:
    module, _ = parse_typed(NOT_FUSED[why])
    p = FuseAttention()
    out = p.run(module)
    assert p.rewritten == 0 and out is module, why


def _program(kv: int, groups: int, tiled: bool, cleanup: bool) -> str:
    """A decoder step's attention as TorchScript writes it (``tiled``: kv heads tiled, not
    interleaved; ``cleanup``: SDPA's NaN cleanup), over a batch, a past and new tokens."""
    h, d = kv * groups, 5
    axis = 1 if tiled else 2
    shape = f"[b, {groups}, {kv}, t, {d}]" if tiled else f"[b, {kv}, {groups}, t, {d}]"
    probs = "%p"
    if cleanup:
        probs = "where(not_equal(%p, %p), 0f, %p)"
    return f"""
        def @main(%q: Tensor[(b, s, {h}, {d}), float32], %k: Tensor[(b, {kv}, t, {d}), float32], %v: Tensor[(b, {kv}, t, {d}), float32], %m: Tensor[(b, 1, s, u), float32]) {{
          %qt = transpose(%q, axes=[0, 2, 1, 3]);
          %kr = reshape(broadcast_to(expand_dims(%k, axis={axis}), shape={shape}), newshape=[b, {h}, t, {d}]);
          %vr = reshape(broadcast_to(expand_dims(%v, axis={axis}), shape={shape}), newshape=[b, {h}, t, {d}]);
          %sc = add(multiply(nn.matmul(%qt, transpose(%kr, axes=[0, 1, 3, 2])), 0.4472136f), %m);
          %p = nn.softmax(%sc, axis=3);
          reshape(transpose(nn.matmul({probs}, %vr), axes=[0, 2, 1, 3]), newshape=[b, s, {h * d}])
        }}
        """


def _numpy(q: np.ndarray, k: np.ndarray, v: np.ndarray, m: np.ndarray, tiled: bool) -> np.ndarray:
    """The oracle in float64: repeat_kv written out, then the chain op by op."""
    heads = q.shape[2]
    groups = heads // k.shape[1]

    def rep(x: np.ndarray) -> np.ndarray:
        x = x.astype(np.float64)
        return np.tile(x, (1, groups, 1, 1)) if tiled else np.repeat(x, groups, 1)

    qt = q.astype(np.float64).transpose(0, 2, 1, 3)
    kr, vr = rep(k), rep(v)
    scores = qt @ kr.swapaxes(-1, -2) * np.float64(np.float32(0.4472136)) + m
    with np.errstate(invalid="ignore"):  # a fully masked row: -inf - -inf is NaN, as intended
        scores = scores - scores.max(-1, keepdims=True)
        p = np.exp(scores)
        p /= p.sum(-1, keepdims=True)
    p = np.where(np.isnan(p), 0.0, p)
    out = (p @ vr).transpose(0, 2, 1, 3)
    return np.asarray(out.reshape(out.shape[0], out.shape[1], -1))


@settings(max_examples=25, deadline=None)
@given(
    kv=st.sampled_from([1, 2, 3]),
    groups=st.sampled_from([1, 2, 4]),
    batch=st.integers(1, 3),
    past=st.sampled_from([0, 1, 7]),
    new=st.integers(1, 3),
    tiled=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_grouped_decoder_attention_matches_the_unfused_program_and_numpy(
    kv: int, groups: int, batch: int, past: int, new: int, tiled: bool, seed: int
) -> None:
    rng = np.random.default_rng(seed)
    t, h, d = past + new, kv * groups, 5
    q = rng.standard_normal((batch, new, h, d)).astype(np.float32)
    k = rng.standard_normal((batch, kv, t, d)).astype(np.float32)
    v = rng.standard_normal((batch, kv, t, d)).astype(np.float32)
    # causal over the past, some padding: float32's min as transformers writes it
    keep = np.arange(t)[None, :] <= (past + np.arange(new))[:, None]
    keep = keep[None, None] & (rng.random((batch, 1, 1, t)) > 0.2)
    keep[..., -1] = True  # every row keeps its own token: no row is fully masked
    m = np.where(keep, 0.0, np.finfo(np.float32).min).astype(np.float32)
    source = _program(kv, groups, tiled, cleanup=False)
    results = check_stages(source, q, k, v, m)
    rewritten = str(results.modules["rewritten"])
    assert "nn.attention(" in rewritten and "broadcast_to" not in rewritten
    np.testing.assert_allclose(
        results.outputs["vm"], _numpy(q, k, v, m, tiled), rtol=1e-4, atol=1e-5
    )


@settings(max_examples=15, deadline=None)
@given(
    kv=st.sampled_from([1, 2]),
    groups=st.sampled_from([1, 2, 4]),
    batch=st.integers(1, 2),
    new=st.integers(1, 4),
    seed=st.integers(0, 2**16),
)
def test_fully_masked_rows_give_zeros_with_the_nan_cleanup(
    kv: int, groups: int, batch: int, new: int, seed: int
) -> None:
    # -inf masks: a padded batch row masks every key, its softmax is NaN, the cleanup zeros it
    rng = np.random.default_rng(seed)
    t, h, d = new, kv * groups, 5
    q = rng.standard_normal((batch, new, h, d)).astype(np.float32)
    k = rng.standard_normal((batch, kv, t, d)).astype(np.float32)
    v = rng.standard_normal((batch, kv, t, d)).astype(np.float32)
    keep = rng.random((batch, 1, new, t)) > 0.5
    keep[0, 0, 0, :] = False
    m = np.where(keep, 0.0, -np.inf).astype(np.float32)
    results = check_stages(_program(kv, groups, False, cleanup=True), q, k, v, m)
    rewritten = str(results.modules["rewritten"])
    assert "nan_to_zero=True" in rewritten and "broadcast_to" not in rewritten
    out = results.outputs["vm"]
    assert not np.isnan(out).any()
    np.testing.assert_allclose(out, _numpy(q, k, v, m, False), rtol=1e-4, atol=1e-5)


def test_a_mask_longer_than_the_keys_fails_as_the_unfused_program_does() -> None:
    # total_seq != past_seq + seq: the unfused program's matmul check fails; the fused op's
    # mask check fails the same way (an error of the project's, never a wrong answer).
    import dynshape

    source = _program(2, 2, False, cleanup=False)
    exe = dynshape.compile(ir.parse(source))
    q = np.zeros((1, 1, 4, 5), np.float32)
    k = v = np.zeros((1, 2, 1, 5), np.float32)
    m = np.zeros((1, 1, 1, 3), np.float32)
    with pytest.raises(dynshape.DynShapeError, match="mask"):
        dynshape.VirtualMachine(exe).run(q, k, v, m)


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
def test_the_kernels_nan_to_zero_is_the_unfused_where(dtype: str) -> None:
    # rows with every key masked (-inf), a NaN in the mask, a +inf in the mask, an ordinary
    # row: the kernel's nan_to_zero against softmax, where(p != p, 0, p), matmul in numpy
    from vm.kernels.attention import attention

    rng = np.random.default_rng(0)
    q = rng.standard_normal((2, 4, 3)).astype(dtype)
    k = rng.standard_normal((2, 5, 3)).astype(dtype)
    v = rng.standard_normal((2, 5, 2)).astype(dtype)
    mask = np.zeros((2, 4, 5), dtype)
    mask[0, 0] = -np.inf
    mask[0, 1, 2] = np.nan
    mask[1, 2, 4] = np.inf
    kernel = attention(
        {"scale": 0.5, "q_axes": None, "k_axes": None, "v_axes": None, "out_axes": None}
        | {"nan_to_zero": True}
    )
    out = np.empty((2, 4, 2), dtype)
    with np.errstate(invalid="ignore"):
        kernel(q, k, v, mask, out)
        s = (q.astype(np.float64) @ k.astype(np.float64).swapaxes(-1, -2)) * 0.5 + mask
        e = np.exp(s - s.max(-1, keepdims=True))
        p = e / e.sum(-1, keepdims=True)
    want = np.where(p != p, 0.0, p) @ v.astype(np.float64)
    assert not np.isnan(out).any()
    assert (out[0, :2] == 0).all() and (out[1, 2] == 0).all()
    np.testing.assert_allclose(out, want, rtol=2e-3 if dtype == "float16" else 1e-5, atol=1e-3)


def test_the_llama_family_decodes_as_onnxruntime_with_the_cache_never_repeated() -> None:
    # examples/exported/families.py's Llama step (4 query heads on 2 kv heads, TorchScript's
    # spelling): both layers fused, no broadcast_to of the cache left; a prefill and decode
    # steps of a batch of 2 (one row padded on the left) give onnxruntime's answers.
    onnx = pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    import sys
    import tempfile
    from pathlib import Path

    import dynshape
    import dynshape.onnx

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples" / "exported"))
    import families

    with tempfile.TemporaryDirectory() as tmp:
        path = str(Path(tmp) / "llama.onnx")
        onnx.save(families.llama_decoder_step(), path)
        rewritten = str(dynshape.stages(dynshape.onnx.load(path), plan_memory=False)["rewritten"])
        exe = dynshape.compile(path)
        session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    assert rewritten.count("nn.attention(") == 2
    copies = [
        line
        for line in rewritten.splitlines()
        if "broadcast_to(" in line and "past_seq + seq, 32), float32" in line
    ]
    assert not copies, copies
    names = [p.name for p in exe.inputs]
    vm = dynshape.VirtualMachine(exe)
    rng = np.random.default_rng(1)
    cache = {n: np.zeros((2, 2, 0, 32), np.float32) for n in names if n.startswith("past_")}
    ids = rng.integers(1, 1000, (2, 5), dtype=np.int64)
    mask = np.ones((2, 5), np.int64)
    mask[1, :2] = 0
    for _ in range(4):
        past = next(iter(cache.values())).shape[2]
        seq = ids.shape[1]
        positions = np.broadcast_to(np.arange(past, past + seq), (2, seq)).copy()
        feeds = {"input_ids": ids, "attention_mask": mask, "position_ids": positions, **cache}
        got = vm.run(feeds)
        want = session.run(None, feeds)
        for g, w in zip(got, want, strict=True):
            np.testing.assert_allclose(g, w, rtol=1e-3, atol=1e-4)
        cache = dict(zip([n for n in names if n.startswith("past_")], want[1:], strict=True))
        ids = want[0][:, -1].argmax(-1).reshape(2, 1).astype(np.int64)
        mask = np.concatenate([mask, np.ones((2, 1), np.int64)], axis=1)
