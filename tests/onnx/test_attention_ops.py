"""The transformer ops' converters (``dynshape/onnx/ops/attention.py``): Attention,
RMSNormalization, RotaryEmbedding, CausalConvWithState, LinearAttention and FlexAttention on
models with symbolic dims, against onnxruntime where it runs the op and the onnx reference
implementation (the op's definition) otherwise; and the messages of what is refused."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from hypothesis import given, settings
from hypothesis import strategies as st
from model_builder import compare, import_error, model, run
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

import dynshape
import dynshape.onnx

SETTINGS = settings(max_examples=6, deadline=None)


def _rand(rng: np.random.Generator, *shape: int, dtype: Any = np.float32) -> np.ndarray:
    return rng.standard_normal(shape).astype(dtype)


def against_reference(m: Any, feeds: list[np.ndarray], rtol: float = 1e-4) -> list[Any]:
    """Run ``m`` on dynshape and on the onnx reference implementation; every output equal."""
    names = [i.name for i in m.graph.input]
    want = ReferenceEvaluator(m).run(None, dict(zip(names, feeds, strict=True)))
    got = run(m, *feeds)
    got = list(got) if isinstance(got, (list, tuple)) else [got]
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert g.shape == w.shape and g.dtype == w.dtype, (g.shape, w.shape, g.dtype, w.dtype)
        np.testing.assert_allclose(g, w, rtol=rtol, atol=1e-5)
    return got


def _attention(
    inputs: list[tuple[str, str, list[Any]]], outputs: list[str], opset: int = 23, **attrs: Any
) -> Any:
    node = helper.make_node("Attention", [i[0] for i in inputs], outputs, **attrs)
    named = [o for o in outputs if o]
    return model([node], inputs, named, opset=opset, output_dtypes=["float32"] * len(named))


# ---- Attention --------------------------------------------------------------------------------


@SETTINGS
@given(
    batch=st.integers(1, 3),
    groups=st.sampled_from([1, 2, 3]),
    s_q=st.integers(1, 5),
    s_kv=st.integers(1, 6),
    causal=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_attention_4d_gqa_causal_symbolic(
    batch: int, groups: int, s_q: int, s_kv: int, causal: bool, seed: int
) -> None:
    """GQA (query heads a multiple of the kv heads), causal or not, over symbolic batch and
    sequence lengths: one compiled program, several shapes, onnxruntime's values."""
    rng = np.random.default_rng(seed)
    h_kv = 2
    m = _attention(
        [
            ("Q", "float32", ["b", h_kv * groups, "sq", 8]),
            ("K", "float32", ["b", h_kv, "skv", 8]),
            ("V", "float32", ["b", h_kv, "skv", 4]),
        ],
        ["Y"],
        is_causal=int(causal),
    )
    if causal:  # onnxruntime's causal mask is top-left: the same where S_q <= S_kv
        s_q = min(s_q, s_kv)
    feeds = [
        [
            _rand(rng, b, h_kv * groups, s_q, 8),
            _rand(rng, b, h_kv, s_kv, 8),
            _rand(rng, b, h_kv, s_kv, 4),
        ]
        for b in (batch, batch + 1)
    ]
    program = compare(m, *feeds)
    assert "(b, " in str(program)  # the batch stays a symbol


def test_attention_3d_with_past_and_bool_mask() -> None:
    """3-d inputs split into heads, a past key/value concatenated (the present outputs), a
    boolean mask over every key."""
    rng = np.random.default_rng(0)
    m = _attention(
        [
            ("Q", "float32", ["b", "s", 24]),
            ("K", "float32", ["b", "s", 24]),
            ("V", "float32", ["b", "s", 24]),
            ("mask", "bool", ["s", "t"]),
            ("pk", "float32", ["b", 3, "p", 8]),
            ("pv", "float32", ["b", 3, "p", 8]),
        ],
        ["Y", "present_key", "present_value"],
        q_num_heads=3,
        kv_num_heads=3,
    )
    for b, s, p in ((2, 4, 3), (1, 2, 5)):
        mask = rng.random((s, s + p)) > 0.3
        mask[:, 0] = True  # every row attends some key (onnxruntime gives NaN otherwise)
        x = [_rand(rng, b, s, 24) for _ in range(3)]
        feeds = [*x, mask, _rand(rng, b, 3, p, 8), _rand(rng, b, 3, p, 8)]
        compare(m, feeds)


@pytest.mark.parametrize("mode", [0, 1, 2, 3])
def test_attention_softcap_and_qk_matmul_output(mode: int) -> None:
    """The composed path: softcap before the additive mask, each ``qk_matmul_output_mode``."""
    rng = np.random.default_rng(mode)
    m = _attention(
        [
            ("Q", "float32", [1, 2, 3, 8]),
            ("K", "float32", [1, 2, 5, 8]),
            ("V", "float32", [1, 2, 5, 8]),
            ("mask", "float32", [3, 5]),
        ],
        ["Y", "", "", "qk"],
        softcap=2.0,
        qk_matmul_output_mode=mode,
    )
    feeds = [_rand(rng, 1, 2, 3, 8), _rand(rng, 1, 2, 5, 8), _rand(rng, 1, 2, 5, 8)]
    feeds.append(_rand(rng, 3, 5))
    if mode != 0:  # the reference softcaps mode 0's output too, against the spec's "raw QK"
        against_reference(m, feeds)
    got = run(m, *feeds)
    if mode == 0:
        q, k = feeds[0], feeds[1]
        np.testing.assert_allclose(got[1], q @ k.swapaxes(-1, -2) / np.sqrt(8), rtol=1e-5)


def test_attention_fully_masked_row_is_zero() -> None:
    """A query row with no key allowed (a boolean mask's row all false) gives zeros, not NaN,
    in Y and in the probabilities (mode 3), as the spec says."""
    rng = np.random.default_rng(1)
    m = _attention(
        [
            ("Q", "float32", [1, 2, 2, 8]),
            ("K", "float32", [1, 2, 2, 8]),
            ("V", "float32", [1, 2, 2, 8]),
            ("mask", "bool", [2, 2]),
        ],
        ["Y", "", "", "P"],
        qk_matmul_output_mode=3,
    )
    mask = np.array([[True, False], [False, False]])
    feeds = [_rand(rng, 1, 2, 2, 8) for _ in range(3)] + [mask]
    y, p = against_reference(m, feeds)
    assert (y[:, :, 1] == 0).all() and (p[:, :, 1] == 0).all()


def test_attention_external_cache_and_window() -> None:
    """``nonpad_kv_seqlen`` (opset 24 on): per-batch causal offsets and padding; a left
    window (opset 25) composed with them."""
    rng = np.random.default_rng(2)
    m = _attention(
        [
            ("Q", "float32", [2, 2, 3, 8]),
            ("K", "float32", [2, 2, 6, 8]),
            ("V", "float32", [2, 2, 6, 8]),
            ("n", "int64", [2]),
        ],
        ["Y"],
        opset=25,
        is_causal=1,
        left_window_size=2,
    )
    m.graph.node[0].input[:] = ["Q", "K", "V", "", "", "", "n"]
    feeds = [_rand(rng, 2, 2, 3, 8), _rand(rng, 2, 2, 6, 8), _rand(rng, 2, 2, 6, 8)]
    against_reference(m, [*feeds, np.array([5, 2], np.int64)])


def test_attention_refusals() -> None:
    q = ("Q", "float32", [1, 2, 3, 8])
    kv = [("K", "float32", [1, 2, 3, 8]), ("V", "float32", [1, 2, 3, 8])]
    assert "q_num_heads and kv_num_heads must be given" in import_error(
        _attention(
            [
                ("Q", "float32", [1, 3, 16]),
                *kv[:0],
                ("K", "float32", [1, 3, 16]),
                ("V", "float32", [1, 3, 16]),
            ],
            ["Y"],
        )
    )
    three = [("Q", "float32", [1, 3, 8, 8]), *kv]
    assert "3 query heads are not a multiple of 2 kv heads" in import_error(
        _attention(three, ["Y"])
    )
    assert "unsupported: softmax_precision=16" in import_error(
        _attention(
            [q, *kv], ["Y", "", "", "P"], opset=24, softmax_precision=16, qk_matmul_output_mode=3
        )
    )
    m = _attention([q, *kv], ["Y"])
    for v in m.graph.input:
        v.type.tensor_type.elem_type = TensorProto.BFLOAT16
    assert "unsupported: bfloat16 attention is not supported" in import_error(m)
    long = _attention([q, *kv, ("mask", "float32", [3, 4])], ["Y"])
    assert "attn_mask has 4 keys, more than the 3 keys" in import_error(long)


# ---- RMSNormalization, RotaryEmbedding, CausalConvWithState ----------------------------------


@SETTINGS
@given(rank=st.integers(1, 4), data=st.data(), seed=st.integers(0, 2**16))
def test_rms_normalization(rank: int, data: st.DataObject, seed: int) -> None:
    """Every axis, a symbolic leading dim, onnxruntime's values."""
    rng = np.random.default_rng(seed)
    axis = data.draw(st.integers(-rank, rank - 1))
    shape = [data.draw(st.integers(1, 4)) for _ in range(rank)]
    dims: list[Any] = ["n", *shape[1:]]
    node = helper.make_node("RMSNormalization", ["X", "W"], ["Y"], axis=axis, epsilon=1e-3)
    w_shape = shape[axis % rank :]
    m = model(
        [node],
        [("X", "float32", dims), ("W", "float32", w_shape)],
        ["Y"],
        opset=23,
        output_dtypes=["float32"],
    )
    grow = 2 if axis % rank else 0  # the scale covers the leading dim when axis is 0
    feeds = [[_rand(rng, n, *shape[1:]), _rand(rng, *w_shape)] for n in (shape[0], shape[0] + grow)]
    compare(m, *feeds)


def test_rms_normalization_float16() -> None:
    """float16 is normalised in float32 (stash_type 1), as the spec and onnxruntime."""
    rng = np.random.default_rng(3)
    node = helper.make_node("RMSNormalization", ["X", "W"], ["Y"])
    m = model(
        [node],
        [("X", "float16", ["n", 16]), ("W", "float16", [16])],
        ["Y"],
        opset=23,
        output_dtypes=["float16"],
    )
    compare(
        m,
        [_rand(rng, 5, 16, dtype=np.float16), _rand(rng, 16, dtype=np.float16)],
        rtol=1e-3,
        atol=1e-3,
    )


def test_rms_normalization_over_the_last_axis_compiles_to_one_rms_norm() -> None:
    """The importer's spelling (x * x, mean, rsqrt, the scale last) is what fuse_rms_norm
    matches: one ``nn.rms_norm``, no mean left; over two axes it stays unfused."""
    for axis, fused in ((-1, True), (1, False)):
        node = helper.make_node("RMSNormalization", ["X", "W"], ["Y"], axis=axis)
        w_shape = [16] if fused else [3, 16]
        m = model(
            [node],
            [("X", "float32", ["n", 3, 16]), ("W", "float32", w_shape)],
            ["Y"],
            opset=23,
            output_dtypes=["float32"],
        )
        rewritten = str(dynshape.stages(dynshape.onnx.load(m), plan_memory=False)["rewritten"])
        assert ("nn.rms_norm(" in rewritten) is fused
        assert ("mean(" in rewritten) is not fused


@pytest.mark.parametrize("interleaved", [0, 1])
@pytest.mark.parametrize("rotary_dim", [0, 4])
@pytest.mark.parametrize("three_d", [False, True])
def test_rotary_embedding(interleaved: int, rotary_dim: int, three_d: bool) -> None:
    """Halves or interleaved pairs, whole or partial rotation, 3-d or 4-d input, symbolic
    batch and sequence, position ids into the caches."""
    rng = np.random.default_rng(interleaved + rotary_dim)
    half = (rotary_dim or 8) // 2
    attrs: dict[str, Any] = {"interleaved": interleaved, "rotary_embedding_dim": rotary_dim}
    x_dims: list[Any] = ["b", "s", 32] if three_d else ["b", 4, "s", 8]
    if three_d:
        attrs["num_heads"] = 4
    node = helper.make_node("RotaryEmbedding", ["X", "cos", "sin", "pos"], ["Y"], **attrs)
    m = model(
        [node],
        [
            ("X", "float32", x_dims),
            ("cos", "float32", [50, half]),
            ("sin", "float32", [50, half]),
            ("pos", "int64", ["b", "s"]),
        ],
        ["Y"],
        opset=23,
        output_dtypes=["float32"],
    )
    feeds = []
    for b, s in ((2, 3), (1, 5)):
        x = _rand(rng, b, s, 32) if three_d else _rand(rng, b, 4, s, 8)
        angles = rng.random((50, half))
        pos = rng.integers(0, 50, (b, s))
        feeds.append([x, np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32), pos])
    compare(m, *feeds)


@pytest.mark.parametrize("past", [False, True])
@pytest.mark.parametrize("activation", ["none", "silu"])
def test_causal_conv_with_state(past: bool, activation: str) -> None:
    """A symbolic length, with and without a carried state, with bias and SiLU."""
    rng = np.random.default_rng(4)
    names = ["x", "w", "bias", "state" if past else ""]
    node = helper.make_node("CausalConvWithState", names, ["y", "present"], activation=activation)
    inputs: list[tuple[str, str, list[Any]]] = [
        ("x", "float32", ["b", 4, "l"]),
        ("w", "float32", [4, 1, 3]),
        ("bias", "float32", [4]),
    ]
    if past:
        inputs.append(("state", "float32", ["b", 4, 2]))
    m = model([node], inputs, ["y", "present"], opset=27)
    for b, length in ((2, 5), (1, 1)):
        feeds = [_rand(rng, b, 4, length), _rand(rng, 4, 1, 3), _rand(rng, 4)]
        if past:
            feeds.append(_rand(rng, b, 4, 2))
        against_reference(m, feeds)


# ---- LinearAttention, FlexAttention ---------------------------------------------------------


@pytest.mark.parametrize("rule", ["linear", "gated", "delta", "gated_delta"])
def test_linear_attention_rules_over_a_symbolic_length(rule: str) -> None:
    """Each update rule, GQA (4 query heads on 2 kv heads), a past state; one program run at
    several lengths (the loop's count is the symbolic T)."""
    rng = np.random.default_rng(5)
    names = ["q", "k", "v", "past"]
    inputs: list[tuple[str, str, list[Any]]] = [
        ("q", "float32", [2, "t", 32]),
        ("k", "float32", [2, "t", 16]),
        ("v", "float32", [2, "t", 12]),
        ("past", "float32", [2, 2, 8, 6]),
    ]
    if rule in ("gated", "gated_delta"):
        names.append("decay")
        inputs.append(("decay", "float32", [2, "t", 16]))
    if rule in ("delta", "gated_delta"):
        names += [""] * (5 - len(names)) + ["beta"]
        inputs.append(("beta", "float32", [2, "t", 2]))
    node = helper.make_node(
        "LinearAttention", names, ["o", "s"], q_num_heads=4, kv_num_heads=2, update_rule=rule
    )
    m = model([node], inputs, ["o", "s"], opset=27)
    program = dynshape.onnx.load(m)
    vm = dynshape.VirtualMachine(dynshape.compile(program))
    for t in (1, 5):
        feeds = [
            _rand(rng, 2, t, 32) * 0.5,
            _rand(rng, 2, t, 16) * 0.5,
            _rand(rng, 2, t, 12),
            _rand(rng, 2, 2, 8, 6),
        ]
        if "decay" in names:
            feeds.append(-rng.random((2, t, 16)).astype(np.float32))
        if "beta" in names:
            feeds.append(rng.random((2, t, 2)).astype(np.float32))
        want = ReferenceEvaluator(m).run(
            None, {i[0]: f for i, f in zip(inputs, feeds, strict=True)}
        )
        got = vm.run(*feeds)
        for g, w in zip(got, want, strict=True):
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)


def test_linear_attention_refusals() -> None:
    inputs = [("q", "float32", [1, 2, 8]), ("k", "float32", [1, 2, 8]), ("v", "float32", [1, 2, 8])]
    node = helper.make_node(
        "LinearAttention", ["q", "k", "v"], ["o", "s"], q_num_heads=2, kv_num_heads=2
    )
    m = model([node], inputs, ["o", "s"], opset=27)
    assert "update_rule 'gated_delta' needs the decay input" in import_error(m)
    node = helper.make_node(
        "LinearAttention",
        ["q", "k", "v"],
        ["o", "s"],
        q_num_heads=3,
        kv_num_heads=2,
        update_rule="linear",
    )
    m = model([node], inputs, ["o", "s"], opset=27)
    assert "q_num_heads (3) must be a positive multiple of kv_num_heads (2)" in import_error(m)


def test_flex_attention_score_mod_gqa() -> None:
    """A ``score_mod`` subgraph (a causal mask written with Shape/Range/Where) on grouped
    heads: the subgraph sees ``(B, H_q, L, S)`` scores."""
    rng = np.random.default_rng(6)
    nodes = [
        helper.make_node("Shape", ["scores"], ["shape"]),
        helper.make_node("Gather", ["shape", "two"], ["l"], axis=0),
        helper.make_node("Gather", ["shape", "three"], ["s"], axis=0),
        helper.make_node("Range", ["zero", "l", "one"], ["qi"]),
        helper.make_node("Unsqueeze", ["qi", "one_axis"], ["qcol"]),
        helper.make_node("Range", ["zero", "s", "one"], ["ki"]),
        helper.make_node("GreaterOrEqual", ["qcol", "ki"], ["keep"]),
        helper.make_node("Where", ["keep", "scores", "neg"], ["out"]),
    ]
    consts: dict[str, np.ndarray] = {
        "two": np.array(2, np.int64),
        "three": np.array(3, np.int64),
        "zero": np.array(0, np.int64),
        "one": np.array(1, np.int64),
        "one_axis": np.array([1], np.int64),
        "neg": np.array(-np.inf, np.float32),
    }
    body = helper.make_graph(
        nodes,
        "causal",
        [helper.make_tensor_value_info("scores", TensorProto.FLOAT, None)],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)],
        [
            helper.make_tensor(
                n,
                TensorProto.INT64 if a.dtype == np.int64 else TensorProto.FLOAT,
                a.shape,
                a.reshape(-1).tolist(),
            )
            for n, a in consts.items()
        ],
    )
    node = helper.make_node(
        "FlexAttention", ["Q", "K", "V"], ["Y"], domain="ai.onnx.preview", score_mod=body
    )
    graph = helper.make_graph(
        [node],
        "flex",
        [
            helper.make_tensor_value_info("Q", TensorProto.FLOAT, [1, 4, 3, 8]),
            helper.make_tensor_value_info("K", TensorProto.FLOAT, [1, 2, 3, 8]),
            helper.make_tensor_value_info("V", TensorProto.FLOAT, [1, 2, 3, 8]),
        ],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)],
    )
    m = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", 26), helper.make_opsetid("ai.onnx.preview", 1)],
    )
    feeds = [_rand(rng, 1, 4, 3, 8), _rand(rng, 1, 2, 3, 8), _rand(rng, 1, 2, 3, 8)]
    against_reference(m, feeds)
