"""Transformer ops: ``Attention`` (opsets 23-25), ``RMSNormalization``, ``RotaryEmbedding``,
``CausalConvWithState``, ``LinearAttention`` and ``ai.onnx.preview.FlexAttention``, composed of
catalogue ops (design/onnx.md, "Attention and the other transformer ops").

``Attention`` is the fused ``nn.attention`` where its semantics match (no softcap, no
``qk_matmul_output``, float32/float64) and ``nn.matmul`` / ``nn.softmax`` composed otherwise,
with the onnx reference's arithmetic: ``Q`` and ``K`` each scaled by ``sqrt(scale)``, the bias
(mask, causal frontier, window, padding) added after the softcap, a row whose bias is all
``-inf`` giving zeros instead of NaN. Grouped-query attention never copies the shared kv heads:
``Q`` is viewed as ``(B, H_kv, group, S_q, D)`` against ``K``, ``V`` of ``(B, H_kv, 1, S_k, D)``.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import sympy

from dynshape.builder import control, trace

from ..known import Known
from ..model import dtype_of
from ..registry import Node, NodeError, Unsupported, converter
from .operands import normalize_axis, value_dtype, value_shape

_FLOATS = ("float16", "float32", "float64")


def _const(value: Any, dtype: str) -> Any:
    return trace.constant(np.asarray(value, dtype=dtype), dtype)


def _float_input(node: Node, i: int, what: str) -> str:
    dtype = value_dtype(node.input(i))
    if dtype not in _FLOATS:
        raise NodeError(f"{what} must be float16, float32 or float64, got {dtype}")
    return dtype


def _int(dim: Any, what: str) -> int:
    """``dim`` as an int; Unsupported when it is symbolic (it decides a rank or an attribute)."""
    if isinstance(dim, (int, np.integer)):
        return int(dim)
    raise Unsupported(f"{what} must be static, got {dim}")


def _same(a: Any, b: Any) -> bool:
    return bool(sympy.simplify(sympy.sympify(a) - sympy.sympify(b)) == 0)


def _positions(n: Any) -> Any:
    """``[0, 1, ..., n - 1]`` (int64) for a dim ``n``: a constant when static, else counted
    from a tensor of that length (no data-dependent size, as ``Range`` does)."""
    if isinstance(n, (int, np.integer)):
        return _const(np.arange(int(n)), "int64")
    ones = trace.apply("full", _const(1, "int64"), shape=[n], dtype="int64")
    return trace.apply("cumsum", ones, axis=0, exclusive=True)


def _dim_tensor(node: Node, dim: Any) -> Any:
    """A 0-d int64 tensor holding ``dim``."""
    if isinstance(dim, (int, np.integer)):
        return _const(int(dim), "int64")
    return trace.apply("reshape", node.materialize(Known.of([dim], "int64")), newshape=[])


def _last2(x: Any) -> Any:
    rank = len(value_shape(x))
    return trace.apply("transpose", x, axes=[*range(rank - 2), rank - 1, rank - 2])


# ---- RMSNormalization -------------------------------------------------------------------------


@converter("RMSNormalization")
def rms_normalization(node: Node) -> Any:
    """``X / sqrt(mean(X^2 over [axis, rank)) + epsilon) * scale``; the first stage in the
    ``stash_type`` precision (float32 by default: float16 is computed in float32 and rounded
    once, as the spec says)."""
    dtype = _float_input(node, 0, "X")
    rank = len(value_shape(node.input(0)))
    axis = normalize_axis(int(node.attr("axis", -1)), rank)
    eps = float(node.attr("epsilon", 1e-5))
    stash = dtype_of(int(node.attr("stash_type", 1)), "stash_type")
    if stash not in _FLOATS:
        raise Unsupported(f"stash_type {stash} is not supported (float16, float32, float64)")
    x = node.tensor(0)
    if stash != dtype:
        x = trace.apply("cast", x, dtype=stash)
    axes = list(range(axis, rank))
    mean = trace.apply(
        "mean", trace.apply("multiply", x, x), axis=axes, keepdims=True, exclude=False
    )
    inv = trace.apply("rsqrt", trace.apply("add", mean, _const(eps, stash)))
    out = trace.apply("multiply", x, inv)
    if stash != dtype:
        out = trace.apply("cast", out, dtype=dtype)
    scale = node.tensor(1)
    if value_dtype(node.input(1)) != dtype:
        raise Unsupported(
            f"a scale of {value_dtype(node.input(1))} for X of {dtype} is not supported"
        )
    return trace.apply("multiply", out, scale)


# ---- RotaryEmbedding --------------------------------------------------------------------------


@converter("RotaryEmbedding")
def rotary_embedding(node: Node) -> Any:
    """Rotates the first ``rotary_embedding_dim`` features of each head by the cached angles
    (``cos_cache[position_ids]``), halves or interleaved pairs; the rest pass through. A 4-d
    input ``(B, H, S, D)`` keeps its layout (the angles are laid along ``S``); a 3-d one
    ``(B, S, H * D)`` is viewed as ``(B, S, H, D)``."""
    _float_input(node, 0, "the input")
    shape = value_shape(node.input(0))
    rank = len(shape)
    x = node.tensor(0)
    if rank == 3:
        heads = int(node.attr("num_heads", 0))
        if heads <= 0:
            raise NodeError("num_heads must be given (and positive) for a 3-d input")
        x = trace.apply("reshape", x, newshape=[0, 0, heads, -1])
    elif rank != 4:
        raise NodeError(f"the input must be 3-d or 4-d, got rank {rank}")
    head = value_shape(x)[3]
    half = _int(value_shape(node.input(1))[-1], "the caches' last dim")
    rot = int(node.attr("rotary_embedding_dim", 0)) or 2 * half
    if rot != 2 * half:
        raise NodeError(f"the caches' last dim {half} is not rotary_embedding_dim/2 ({rot}/2)")
    interleaved = bool(node.attr("interleaved", 0))
    cos, sin = node.tensor(1), node.tensor(2)
    if node.input(3) is not None:
        ids = node.tensor(3)
        cos = trace.apply("take", cos, ids, axis=0)  # (B, S, rot/2)
        sin = trace.apply("take", sin, ids, axis=0)
    elif len(value_shape(node.input(1))) != 3:
        raise NodeError("without position_ids the caches must be (batch, seq, rotary_dim/2)")
    # (B, S, 1, rot/2) against (B, S, H, .) for 3-d; (B, 1, S, rot/2) against (B, H, S, .)
    axis = 2 if rank == 3 else 1
    cos = trace.apply("expand_dims", cos, axis=axis)
    sin = trace.apply("expand_dims", sin, axis=axis)
    whole = isinstance(head, int) and rot == head
    if not whole and not (isinstance(head, int) and rot < head):
        if not isinstance(head, int):
            raise Unsupported(f"a head size {head} that is not static with a partial rotation")
        raise NodeError(f"rotary_embedding_dim {rot} exceeds the head size {head}")
    part = x if whole else _slice_last(x, 0, rot, 1)
    if interleaved:
        x1, x2 = _slice_last(part, 0, None, 2), _slice_last(part, 1, None, 2)
    else:
        x1, x2 = trace.apply("split", part, indices_or_sections=2, axis=3)
    real = trace.apply(
        "subtract", trace.apply("multiply", cos, x1), trace.apply("multiply", sin, x2)
    )
    imag = trace.apply("add", trace.apply("multiply", sin, x1), trace.apply("multiply", cos, x2))
    if interleaved:
        pairs = trace.apply("stack", [real, imag], axis=4)
        rotated = trace.apply("reshape", pairs, newshape=[0, 0, 0, rot])
    else:
        rotated = trace.apply("concatenate", [real, imag], axis=3)
    if not whole:
        rotated = trace.apply("concatenate", [rotated, _slice_last(x, rot, None, 1)], axis=3)
    if rank == 3:
        return trace.apply("reshape", rotated, newshape=list(shape))
    return rotated


def _slice_last(x: Any, begin: int, end: int | None, step: int) -> Any:
    """``x[..., begin:end:step]`` of a 4-d ``x``."""
    big = 2**62
    return trace.apply(
        "strided_slice",
        x,
        begin=[0, 0, 0, begin],
        end=[big, big, big, big if end is None else end],
        strides=[1, 1, 1, step],
    )


# ---- CausalConvWithState ----------------------------------------------------------------------


@converter("CausalConvWithState")
def causal_conv_with_state(node: Node) -> list[Any]:
    """A depthwise 1-d convolution over ``concat(past_state or zeros, input)`` (``nn.conv2d``
    over a height of 1, ``groups`` = channels), optional bias and SiLU (in float32 for float16,
    as the reference); ``present_state`` is the last ``k - 1`` positions of that sequence."""
    dtype = _float_input(node, 0, "the input")
    shape = value_shape(node.input(0))
    w_shape = value_shape(node.input(1))
    if len(shape) != 3 or len(w_shape) != 3:
        raise NodeError(
            f"input and weight must be rank 3, got shapes {list(shape)} and {list(w_shape)}"
        )
    channels = _int(w_shape[0], "the channel count")
    k = _int(w_shape[2], "the kernel size")
    activation = node.attr("activation", "none")
    if activation not in ("none", "silu", "swish"):
        raise NodeError(f"activation={activation!r} is not one of 'none', 'silu', 'swish'")
    x = node.tensor(0)
    if node.input(3) is not None:
        padded = trace.apply("concatenate", [node.tensor(3), x], axis=2)
    else:
        padded = trace.apply("nn.pad", x, pad_width=[[0, 0], [0, 0], [k - 1, 0]], pad_value=0.0)
    out = trace.apply(
        "nn.conv2d",
        trace.apply("expand_dims", padded, axis=2),
        trace.apply("expand_dims", node.tensor(1), axis=2),
        groups=channels,
    )
    out = trace.apply("squeeze", out, axis=[2])
    if node.input(2) is not None:
        out = trace.apply("nn.bias_add", out, node.tensor(2), axis=1)
    if activation != "none":
        wide = out if dtype != "float16" else trace.apply("cast", out, dtype="float32")
        wide = trace.apply("multiply", wide, trace.apply("sigmoid", wide))
        out = wide if dtype != "float16" else trace.apply("cast", wide, dtype=dtype)
    big = 2**62
    if k > 1:
        state = trace.apply(
            "strided_slice", padded, begin=[0, 0, -(k - 1)], end=[big, big, big], strides=None
        )
    else:
        state = trace.apply(
            "strided_slice", padded, begin=[0, 0, 0], end=[big, big, 0], strides=None
        )
    return [out, state]


# ---- Attention --------------------------------------------------------------------------------

#: softmax_precision (an ONNX element type) -> the dtype the softmax runs in.
_PRECISIONS = {1: "float32", 10: "float16", 11: "float64"}


def _heads_4d(x: Any, heads: int) -> Any:
    """``(B, S, H * D)`` -> ``(B, H, S, D)``."""
    x = trace.apply("reshape", x, newshape=[0, 0, heads, -1])
    return trace.apply("transpose", x, axes=[0, 2, 1, 3])


class _Bias:
    """The additive bias of the scores, built from the mask, the causal frontier, the sliding
    window and the padding of an external cache; ``value`` is None when there is none, and
    ``guard`` says whether a row may be all ``-inf`` (then it must give zeros, not NaN)."""

    def __init__(self, node: Node, dtype: str, s_q: Any, s_k: Any, past: Any) -> None:
        self.dtype = dtype
        mask = self._mask(node, s_k)
        causal = bool(node.attr("is_causal", 0))
        left = int(node.attr("left_window_size", -1))
        right = int(node.attr("right_window_size", -1))
        if left < -1 or right < -1:
            raise NodeError(f"window sizes must be -1 or >= 0, got {left} and {right}")
        windowed = left >= 0 or right >= 0
        nonpad = node.tensor(6) if node.input(6) is not None else None
        if nonpad is not None and past is not None:
            raise NodeError("nonpad_kv_seqlen cannot be combined with past_key/past_value")
        allowed = None
        static_rows = False  # the frontier alone leaves every row some key
        if causal or windowed or nonpad is not None:
            i = trace.apply("reshape", _positions(s_q), newshape=[-1, 1])
            j = trace.apply("reshape", _positions(s_k), newshape=[1, -1])
            if nonpad is not None:
                seqlen = trace.apply("reshape", nonpad, newshape=[-1, 1, 1])
                offset = trace.apply("subtract", seqlen, _dim_tensor(node, s_q))
                at = trace.apply("add", i, offset)  # (B, S_q, 1)
            elif past is not None:
                at = trace.apply("add", i, _dim_tensor(node, past))
            else:
                at = i
            conds = []
            if causal:
                conds.append(trace.apply("less_equal", j, at))
            if windowed:
                diff = trace.apply("subtract", at, j)
                if left >= 0:
                    conds.append(trace.apply("less_equal", diff, _const(left, "int64")))
                if right >= 0:
                    conds.append(
                        trace.apply(
                            "less_equal", trace.apply("negative", diff), _const(right, "int64")
                        )
                    )
            for c in conds:
                allowed = c if allowed is None else trace.apply("logical_and", allowed, c)
            if allowed is not None and nonpad is not None:  # (B, S_q, S_k) -> (B, 1, S_q, S_k)
                allowed = trace.apply("expand_dims", allowed, axis=1)
            if nonpad is not None:
                valid = trace.apply("less", j, trace.apply("reshape", nonpad, newshape=[-1, 1]))
                valid = trace.apply("reshape", valid, newshape=[-1, 1, 1, s_k])
                allowed = valid if allowed is None else trace.apply("logical_and", allowed, valid)
            static_rows = causal and nonpad is None and not windowed
        self.guard = mask is not None or (allowed is not None and not static_rows)
        if allowed is None:
            self.value = mask
        else:
            base = mask if mask is not None else _const(0, dtype)
            self.value = trace.apply("where", allowed, base, _const(-np.inf, dtype))

    def _mask(self, node: Node, s_k: Any) -> Any:
        """``attn_mask`` as an additive float mask (True -> 0, False -> -inf), padded with
        ``-inf`` to ``S_k`` keys when shorter (an external cache)."""
        if node.input(3) is None:
            return None
        m_dtype = value_dtype(node.input(3))
        m = node.tensor(3)
        if m_dtype == "bool":
            m = trace.apply("where", m, _const(0, self.dtype), _const(-np.inf, self.dtype))
        elif m_dtype != self.dtype:
            raise NodeError(f"attn_mask must be bool or {self.dtype}, got {m_dtype}")
        shape = value_shape(m)
        last = shape[-1]
        if not _same(last, s_k):
            if not (isinstance(last, int) and isinstance(s_k, int)):
                # taken to be the key count (an exporter's "total sequence length"), which
                # the reshape checks at run time: a shorter mask needs static lengths
                return trace.apply("reshape", m, newshape=[*shape[:-1], s_k])
            if last > s_k:
                raise NodeError(f"attn_mask has {last} keys, more than the {s_k} keys")
            widths = [[0, 0]] * (len(shape) - 1) + [[0, s_k - last]]
            m = trace.apply("nn.pad", m, pad_width=widths, pad_value=-math.inf)
        return m


def _grouped(x: Any, groups: int) -> Any:
    """A ``(..., H, S, N)`` tensor (rank <= 4, broadcasting) laid out as ``(B?, H_kv, groups,
    S, N)`` for grouped-query attention: ``H`` split as ``(H_kv, groups)`` (query head ``h``
    uses kv head ``h // groups``), or a 1 kept as two 1-axes."""
    shape = value_shape(x)
    if len(shape) < 4:
        x = trace.apply("reshape", x, newshape=[*([1] * (4 - len(shape))), *shape])
        shape = value_shape(x)
    if shape[1] == 1:
        return trace.apply("expand_dims", x, axis=2)
    return trace.apply("reshape", x, newshape=[shape[0], -1, groups, shape[2], shape[3]])


def _qkv(node: Node) -> tuple[Any, Any, Any, Any]:
    """Q, K, V as ``(B, H, S, D)`` (a 3-d input split into its heads), K and V after the
    past ones (the present key and value), and the past length (None without a cache)."""
    rank = len(value_shape(node.input(0)))
    q, k, v = node.tensor(0), node.tensor(1), node.tensor(2)
    if rank == 3:
        q_heads, kv_heads = node.attr("q_num_heads"), node.attr("kv_num_heads")
        if not q_heads or not kv_heads:
            raise NodeError("q_num_heads and kv_num_heads must be given for 3-d inputs")
        q = _heads_4d(q, int(q_heads))
        k, v = _heads_4d(k, int(kv_heads)), _heads_4d(v, int(kv_heads))
    elif rank != 4:
        raise NodeError(f"Q, K and V must be 3-d or 4-d, got rank {rank}")
    if (node.input(4) is None) != (node.input(5) is None):
        raise NodeError("past_key and past_value must be given together")
    if node.input(4) is None:
        return q, k, v, None
    k = trace.apply("concatenate", [node.tensor(4), k], axis=2)
    v = trace.apply("concatenate", [node.tensor(5), v], axis=2)
    return q, k, v, value_shape(node.input(4))[2]


def _groups(h_q: Any, h_kv: Any) -> int:
    """Query heads per kv head (1 when the counts are the same dim)."""
    if _same(h_q, h_kv):
        return 1
    n_q, n_kv = _int(h_q, "the query head count"), _int(h_kv, "the kv head count")
    if n_kv <= 0 or n_q % n_kv:
        raise NodeError(f"{n_q} query heads are not a multiple of {n_kv} kv heads")
    return n_q // n_kv


def _scale(node: Node, head: Any) -> float:
    scale = node.attr("scale")
    if scale is None:
        return 1.0 / math.sqrt(_int(head, "the head size (for the default scale)"))
    return float(scale)


def _scores(q: Any, k: Any, scale: float, dtype: str) -> Any:
    """``(Q * sqrt(scale)) @ (K * sqrt(scale))^T``, the reference's arithmetic (the factor
    rounded to the operands' dtype)."""
    root = _const(math.sqrt(scale), dtype)
    qs, ks = trace.apply("multiply", q, root), trace.apply("multiply", k, root)
    return trace.apply("nn.matmul", qs, _last2(ks))


def _ungrouped(x: Any, q_shape: Any, last: Any) -> Any:
    """``(B, H_kv, groups, S_q, N)`` back to ``(B, H_q, S_q, N)``."""
    return trace.apply("reshape", x, newshape=[q_shape[0], q_shape[1], q_shape[2], last])


@converter("Attention")
def attention(node: Node) -> list[Any]:
    """Scaled dot-product attention (opsets 23-25; see the module doc)."""
    if value_dtype(node.input(0)) == "bfloat16":
        # The onnx reference rounds every step to bfloat16, its sums and dot products
        # included (ml_dtypes accumulates in bfloat16): float32 arithmetic rounded once is a
        # bfloat16 ulp (2^-8) away, past the cases' 1e-3 tolerance.
        raise Unsupported("bfloat16 attention is not supported (dynshape stores bfloat16 only)")
    dtype = _float_input(node, 0, "Q")
    q, k, v, past = _qkv(node)
    q_shape, k_shape = value_shape(q), value_shape(k)
    groups = _groups(q_shape[1], k_shape[1])
    scale = _scale(node, q_shape[3])
    softcap = float(node.attr("softcap", 0.0))
    mode = int(node.attr("qk_matmul_output_mode", 0))
    if mode not in (0, 1, 2, 3):
        raise NodeError(f"qk_matmul_output_mode={mode} is not one of 0, 1, 2, 3")
    precision = node.attr("softmax_precision")
    if precision is not None and int(precision) not in _PRECISIONS:
        raise Unsupported(f"softmax_precision={precision} is not supported (1, 10, 11)")
    soft_dtype = dtype if precision is None else _PRECISIONS[int(precision)]
    bias = _Bias(node, dtype, q_shape[2], k_shape[2], past)
    present = [k if node.wants(1) else None, v if node.wants(2) else None]
    b = bias.value
    if groups > 1:
        q = _grouped(q, groups)
        k, v = trace.apply("expand_dims", k, axis=2), trace.apply("expand_dims", v, axis=2)
        b = None if b is None else _grouped(b, groups)
    masked_rows = None
    if bias.guard and b is not None:
        rows = trace.apply("max", b, axis=[-1], keepdims=True, exclude=False)
        masked_rows = trace.apply("equal", rows, _const(-np.inf, dtype))
    qk_out = None
    if softcap <= 0 and not node.wants(3) and soft_dtype == dtype:
        # float16 too: the kernel computes in float32 and rounds once
        mask = b if b is not None else _const(0, dtype)
        y = trace.apply("nn.attention", q, k, v, mask, scale=scale)
        if masked_rows is not None:
            y = trace.apply("where", masked_rows, _const(0, dtype), y)
    else:
        y, qk_out = _composed(q, k, v, b, masked_rows, scale, softcap, mode, dtype, soft_dtype)
    if groups > 1:
        y = _ungrouped(y, q_shape, -1)
        qk_out = None if qk_out is None else _ungrouped(qk_out, q_shape, k_shape[2])
    if len(value_shape(node.input(0))) == 3:
        y = trace.apply("transpose", y, axes=[0, 2, 1, 3])
        y = trace.apply("reshape", y, newshape=[0, 0, -1])
    outs = [y, *present, qk_out if node.wants(3) else None]
    return outs[: max(node.num_outputs, 1)]


def _composed(
    q: Any,
    k: Any,
    v: Any,
    bias: Any,
    masked_rows: Any,
    scale: float,
    softcap: float,
    mode: int,
    dtype: str,
    soft_dtype: str,
) -> tuple[Any, Any]:
    """``Y`` and ``qk_matmul_output`` (mode 0: the raw scores, as the spec says; 1: after the
    softcap; 2: plus the bias; 3: the probabilities, a fully masked row zero)."""
    scores = _scores(q, k, scale, dtype)
    qk_out = scores
    if softcap > 0:
        cap = _const(softcap, dtype)
        scores = trace.apply(
            "multiply", trace.apply("tanh", trace.apply("divide", scores, cap)), cap
        )
        if mode == 1:
            qk_out = scores
    if bias is not None:
        scores = trace.apply("add", scores, bias)
    if mode == 2:
        qk_out = scores
    if soft_dtype != dtype:
        scores = trace.apply("cast", scores, dtype=soft_dtype)
    probs = trace.apply("nn.softmax", scores, axis=-1)
    if masked_rows is not None:
        probs = trace.apply("where", masked_rows, _const(0, soft_dtype), probs)
    if soft_dtype != dtype:
        probs = trace.apply("cast", probs, dtype=dtype)
    if mode == 3:
        qk_out = probs
    return trace.apply("nn.matmul", probs, v), qk_out


# ---- LinearAttention --------------------------------------------------------------------------

_RULES = ("linear", "gated", "delta", "gated_delta")


def _steps(x: Any, heads: int, t: Any) -> Any:
    """A packed ``(B, T, heads * N)`` input as ``(B, heads, T, N)`` in float32."""
    x = trace.apply("reshape", x, newshape=[0, t, heads, -1])
    x = trace.apply("transpose", x, axes=[0, 2, 1, 3])
    return x if value_dtype(x) == "float32" else trace.apply("cast", x, dtype="float32")


@converter("LinearAttention")
def linear_attention(node: Node) -> list[Any]:
    """The recurrence, one time step per iteration of a ``while_loop`` over ``T`` (float32
    state, as the reference): the state decays by ``exp(decay_t)`` (gated rules), the value is
    corrected by what the state retrieves for the key and weighted by ``beta_t`` (delta rules),
    the outer product ``k_t v_t^T`` is added, and ``scale * q_t^T S_t`` is the step's output,
    appended to an accumulator reshaped to ``(T, ...)`` after the loop. Grouped query heads read
    their kv head's state through a ``(B, H_kv, groups, d_k)`` view of the query."""
    dtype = _float_input(node, 0, "query")
    rule = node.attr("update_rule", "gated_delta")
    if rule not in _RULES:
        raise NodeError(f"update_rule={rule!r} is not one of {', '.join(_RULES)}")
    h_q, h_kv = int(node.attr("q_num_heads", 0)), int(node.attr("kv_num_heads", 0))
    if h_q <= 0 or h_kv <= 0 or h_q % h_kv:
        raise NodeError(f"q_num_heads ({h_q}) must be a positive multiple of kv_num_heads ({h_kv})")
    gated, delta = rule in ("gated", "gated_delta"), rule in ("delta", "gated_delta")
    for i, name, wanted in ((4, "decay", gated), (5, "beta", delta)):
        if (node.input(i) is not None) != wanted:
            verb = "needs" if wanted else "takes no"
            raise NodeError(f"update_rule {rule!r} {verb} the {name} input")
    shapes = [value_shape(node.input(i)) for i in range(3)]
    if any(len(sh) != 3 for sh in shapes):
        raise NodeError(f"query, key and value must be rank 3, got {[list(s) for s in shapes]}")
    batch, t = shapes[0][0], shapes[0][1]
    d_k = _int(shapes[0][2], "the query's hidden size") // h_q
    d_v = _int(shapes[2][2], "the value's hidden size") // h_kv
    groups = h_q // h_kv
    q = trace.apply("reshape", _steps(node.tensor(0), h_q, t), newshape=[0, h_kv, groups, t, d_k])
    k, v = _steps(node.tensor(1), h_kv, t), _steps(node.tensor(2), h_kv, t)
    decay = _per_step(node, 4, h_kv, d_k, t) if gated else None
    beta = _per_step(node, 5, h_kv, 1, t) if delta else None
    if node.input(3) is not None:
        state = node.tensor(3)
        state_dtype = value_dtype(state)
        if state_dtype != "float32":
            state = trace.apply("cast", state, dtype="float32")
    else:
        state_dtype = dtype
        state = trace.apply("zeros", shape=[batch, h_kv, d_k, d_v], dtype="float32")
    scale = float(node.attr("scale", 0.0)) or 1.0 / math.sqrt(d_k)
    scale_c = _const(scale, "float32")
    limit = _dim_tensor(node, t)
    one = _const(1, "int64")

    def cond_fn(i: Any, *_: Any) -> Any:
        return trace.apply("less", i, limit)

    def body_fn(i: Any, s: Any, acc: Any) -> tuple[Any, Any, Any]:
        k_t, v_t = trace.apply("take", k, i, axis=2), trace.apply("take", v, i, axis=2)
        if decay is not None:
            g = trace.apply("exp", trace.apply("take", decay, i, axis=2))
            s = trace.apply("multiply", s, trace.apply("expand_dims", g, axis=3))
        if beta is not None:
            seen = trace.apply("nn.matmul", trace.apply("expand_dims", k_t, axis=2), s)
            seen = trace.apply("squeeze", seen, axis=[2])
            b_t = trace.apply("take", beta, i, axis=2)
            v_t = trace.apply("multiply", b_t, trace.apply("subtract", v_t, seen))
        outer = trace.apply(
            "multiply",
            trace.apply("expand_dims", k_t, axis=3),
            trace.apply("expand_dims", v_t, axis=2),
        )
        s = trace.apply("add", s, outer)
        o = trace.apply("nn.matmul", trace.apply("take", q, i, axis=3), s)  # (B, H_kv, g, d_v)
        o = trace.apply("multiply", o, scale_c)
        acc = trace.apply("concatenate", [acc, trace.apply("expand_dims", o, axis=0)], axis=0)
        return trace.apply("add", i, one), s, acc

    start = trace.apply("zeros", shape=[0, batch, h_kv, groups, d_v], dtype="float32")
    _, state, acc = control.while_loop(cond_fn, body_fn, (_const(0, "int64"), state, start))
    out = trace.apply("reshape", acc, newshape=[t, batch, h_kv, groups, d_v])
    out = trace.apply("transpose", out, axes=[1, 0, 2, 3, 4])
    out = trace.apply("reshape", out, newshape=[batch, t, h_q * d_v])
    if dtype != "float32":
        out = trace.apply("cast", out, dtype=dtype)
    if state_dtype != "float32":
        state = trace.apply("cast", state, dtype=state_dtype)
    return [out, state]


def _per_step(node: Node, i: int, heads: int, size: int, t: Any) -> Any:
    """``decay`` or ``beta`` (``(B, T, heads)``, ``(B, T, heads * size)`` or for beta ``(B, T,
    1)``) as ``(B, heads or 1, T, 1 or size)`` in float32."""
    shape = value_shape(node.input(i))
    name = "decay" if i == 4 else "beta"
    if len(shape) != 3:
        raise NodeError(f"{name} must be rank 3, got shape {list(shape)}")
    last = _int(shape[2], f"{name}'s last dim")
    x = node.tensor(i)
    if last in (heads, 1) and (last == heads or i == 5):
        x = trace.apply("reshape", x, newshape=[0, t, last, 1])
    elif last == heads * size:
        x = trace.apply("reshape", x, newshape=[0, t, heads, size])
    else:
        raise NodeError(f"{name}'s last dim {last} must be {heads} or {heads * size}")
    x = trace.apply("transpose", x, axes=[0, 2, 1, 3])
    return x if value_dtype(x) == "float32" else trace.apply("cast", x, dtype="float32")


# ---- FlexAttention (ai.onnx.preview) ----------------------------------------------------------


@converter("ai.onnx.preview.FlexAttention")
def flex_attention(node: Node) -> Any:
    """``softmax(score_mod(Q K^T * scale)) -> prob_mod -> @ V`` on rank-4 inputs, the modifier
    subgraphs converted in place on the scores (in ``softmax_precision``: float32 for float16
    inputs, as the reference). Without modifiers: ``nn.attention``."""
    dtype = _float_input(node, 0, "Q")
    shapes = [value_shape(node.input(i)) for i in range(3)]
    if any(len(s) != 4 for s in shapes):
        raise NodeError(f"Q, K and V must be rank 4, got shapes {[list(s) for s in shapes]}")
    q_shape, k_shape = shapes[0], shapes[1]
    groups = _groups(q_shape[1], k_shape[1])
    scale = _scale(node, q_shape[3])
    precision = node.attr("softmax_precision")
    if precision is not None and int(precision) not in _PRECISIONS:
        raise Unsupported(f"softmax_precision={precision} is not supported (1, 10, 11)")
    soft_dtype = (
        _PRECISIONS[int(precision)]
        if precision is not None
        else ("float32" if dtype == "float16" else dtype)
    )
    score_mod, prob_mod = node.attr("score_mod"), node.attr("prob_mod")
    q, k, v = node.tensor(0), node.tensor(1), node.tensor(2)
    if groups > 1:
        q = _grouped(q, groups)
        k, v = trace.apply("expand_dims", k, axis=2), trace.apply("expand_dims", v, axis=2)
    if score_mod is None and prob_mod is None and (soft_dtype == dtype or dtype == "float16"):
        y = trace.apply("nn.attention", q, k, v, _const(0, dtype), scale=scale)
    else:
        scores = _scores(q, k, scale, dtype)
        if soft_dtype != dtype:
            scores = trace.apply("cast", scores, dtype=soft_dtype)
        scores = _modified(node, score_mod, scores, groups, q_shape)
        probs = trace.apply("nn.softmax", scores, axis=-1)
        probs = _modified(node, prob_mod, probs, groups, q_shape)
        if soft_dtype != dtype:
            v = trace.apply("cast", v, dtype=soft_dtype)
        y = trace.apply("nn.matmul", probs, v)
        if soft_dtype != dtype:
            y = trace.apply("cast", y, dtype=dtype)
    return _ungrouped(y, q_shape, -1) if groups > 1 else y


def _modified(node: Node, graph: Any, x: Any, groups: int, q_shape: Any) -> Any:
    """``graph`` (a modifier subgraph) applied to ``x``, which it sees as ``(B, H_q, S_q,
    S_k)`` (grouped scores are reshaped there and back)."""
    if graph is None:
        return x
    if node.subgraph is None:
        raise NodeError("a score_mod/prob_mod subgraph cannot be converted here")
    grouped = groups > 1
    if grouped:
        x = _ungrouped(x, q_shape, value_shape(x)[-1])
    outs = node.subgraph(graph, [x])
    if len(outs) != 1:
        raise NodeError(f"a modifier subgraph must have one output, got {len(outs)}")
    out = outs[0]
    if isinstance(out, Known):
        out = node.materialize(out)
    if grouped:
        out = _grouped(out, groups)
    return out
