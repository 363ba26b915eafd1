"""Neural-network ATen ops: ``linear`` and the matmuls, normalisations (``layer_norm``, eval
``batch_norm`` folded to ``x*a + b``), ``embedding`` and ``scaled_dot_product_attention``
(one ``nn.attention``)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

import ir
from dynshape.builder import Value, trace

from .ops_elementwise import operand
from .registry import Call, Unsupported, converter


def const_array(v: Any) -> np.ndarray | None:
    """The contents of ``v`` when it is a constant (a weight), else None."""
    expr = getattr(v, "expr", None)
    return expr.value if isinstance(expr, ir.Constant) else None


@converter("aten.linear.default")
def linear(call: Call) -> Any:
    """``input @ weight.T + bias`` as ``nn.dense`` (any leading dims)."""
    x, w, b = call["input"], call["weight"], call["bias"]
    y = trace.apply("nn.dense", x, w)
    return y if b is None else trace.apply("add", y, b)


@converter("aten.addmm.default")
def addmm(call: Call) -> Any:
    """``beta * self + alpha * mat1 @ mat2``."""
    y = trace.apply("nn.matmul", call["mat1"], call["mat2"])
    if call["alpha"] != 1:
        y = trace.apply("multiply", y, operand(call, call["alpha"], y.dtype))
    bias = call["self"]
    if call["beta"] != 1:
        bias = trace.apply("multiply", bias, operand(call, call["beta"], y.dtype))
    return trace.apply("add", y, bias)


@converter("aten.matmul.default", "aten.mm.default", "aten.bmm.default")
def matmul(call: Call) -> Any:
    """numpy's matmul (batched, broadcasting)."""
    other = call["other"] if "other" in call.args else call["mat2"]
    return trace.apply("nn.matmul", call["self"], other)


@converter("aten.layer_norm.default")
def layer_norm(call: Call) -> Any:
    """``nn.layer_norm`` over the last axis (``normalized_shape`` of one dim)."""
    x = call["input"]
    shape = list(call["normalized_shape"])
    if len(shape) != 1:
        raise Unsupported(f"layer_norm over {len(shape)} axes (one only)")
    return _layer_norm(x, call["weight"], call["bias"], float(call["eps"]), shape[0])


@converter("aten.native_layer_norm.default")
def native_layer_norm(call: Call) -> Any:
    """The core-ATen form: the normalised tensor, and the mean and rstd, which inference
    does not use (refused if read: ``getitem`` of them)."""
    shape = list(call["normalized_shape"])
    if len(shape) != 1:
        raise Unsupported(f"layer_norm over {len(shape)} axes (one only)")
    y = _layer_norm(call["input"], call["weight"], call["bias"], float(call["eps"]), shape[0])
    return (y, None, None)


def _layer_norm(x: Value, gamma: Any, beta: Any, eps: float, size: Any) -> Any:
    if gamma is None:
        gamma = trace.constant(np.ones(int(size), dtype=x.dtype), None)
    if beta is None:
        beta = trace.constant(np.zeros(int(size), dtype=x.dtype), None)
    return trace.apply("nn.layer_norm", x, gamma, beta, axis=-1, epsilon=eps)


@converter("aten.batch_norm.default", "aten._native_batch_norm_legit_no_training.default")
def batch_norm(call: Call) -> Any:
    """Inference batch norm over axis 1: ``x * a + b`` with ``a = weight / sqrt(var + eps)``
    and ``b = bias - mean * a``, folded at import when the statistics are constants."""
    if call.get("training", False):
        raise Unsupported("batch_norm in training mode (export the model in eval mode)")
    x = call["input"]
    eps = float(call["eps"])
    parts = [call["weight"], call["bias"], call["running_mean"], call["running_var"]]
    arrays = [const_array(p) if p is not None else None for p in parts]
    shape = [-1] + [1] * (x.ndim - 2)
    if all(a is not None or p is None for a, p in zip(arrays, parts, strict=True)):
        mean = arrays[2].astype(np.float64)  # type: ignore[union-attr]
        var = arrays[3].astype(np.float64)  # type: ignore[union-attr]
        w = arrays[0].astype(np.float64) if arrays[0] is not None else np.ones_like(mean)
        b = arrays[1].astype(np.float64) if arrays[1] is not None else np.zeros_like(mean)
        scale = w / np.sqrt(var + eps)
        shift = b - mean * scale
        a_c = trace.constant(scale.astype(x.dtype).reshape(shape), None)
        b_c = trace.constant(shift.astype(x.dtype).reshape(shape), None)
        y = trace.apply("add", trace.apply("multiply", x, a_c), b_c)
    else:
        raise Unsupported("batch_norm whose statistics are not constants")
    if call.target.startswith("aten._native_batch_norm_legit"):
        return (y, None, None)
    return y


@converter("aten._weight_norm.default")
def weight_norm(call: Call) -> Any:
    """``v * g / ||v||``, the norm over every axis but ``dim`` (wav2vec2's positional
    convolution): computed at import when ``v`` and ``g`` are constants (weights)."""
    v, g = const_array(call["v"]), const_array(call["g"])
    if v is None or g is None:
        raise Unsupported("_weight_norm of tensors that are not weights")
    dim = int(call["dim"]) % max(v.ndim, 1)
    axes = tuple(a for a in range(v.ndim) if a != dim)
    norm = np.sqrt(np.sum(v.astype(np.float64) ** 2, axis=axes, keepdims=True))
    w = v.astype(np.float64) * g.astype(np.float64).reshape(norm.shape) / norm
    return trace.constant(w.astype(v.dtype), None)


@converter("aten.embedding.default")
def embedding(call: Call) -> Any:
    """``take(weight, indices, axis=0)``."""
    return trace.apply("take", call["weight"], call["indices"], axis=0)


@converter("aten.scaled_dot_product_attention.default")
def sdpa(call: Call) -> Any:
    """One ``nn.attention``: scale ``1/sqrt(E)`` by default, a bool mask as ``0``/``-inf``, a
    float mask added, ``is_causal`` as the top-left lower triangle (torch's), built from the
    score shape so its dims stay symbolic."""
    q, k, v = call["query"], call["key"], call["value"]
    if call["dropout_p"]:
        raise Unsupported("attention dropout (export in eval mode with dropout_p=0)")
    if call.get("enable_gqa", False):
        raise Unsupported("enable_gqa")
    dt = q.dtype
    scale = call.get("scale")
    if scale is None:
        e = q.shape[-1]
        if not isinstance(e, int):
            raise Unsupported("a symbolic head size with the default scale")
        scale = 1 / math.sqrt(e)
    mask = call["attn_mask"]
    zero = trace.constant(np.asarray(0, dtype=dt), dt)
    ninf = trace.constant(np.asarray(-np.inf, dtype=dt), dt)
    if mask is not None and mask.dtype == "bool":
        mask = trace.apply("where", mask, zero, ninf)
    elif mask is not None and mask.dtype != dt:
        mask = trace.apply("cast", mask, dtype=dt)
    if call["is_causal"]:
        causal = _causal(q.shape[-2], k.shape[-2], zero, ninf)
        mask = causal if mask is None else trace.apply("add", mask, causal)
    if mask is None:
        mask = zero
    return trace.apply("nn.attention", q, k, v, mask, scale=float(scale))


def _causal(sq: Any, sk: Any, zero: Any, ninf: Any) -> Any:
    """``0`` where ``j <= i``, ``-inf`` above: rows and columns counted by ``cumsum`` of ones
    of shape ``(sq, sk)`` (no index tensor computed from the dims)."""
    ones = trace.apply("ones", shape=[sq, sk], dtype="int64")
    rows = trace.apply("cumsum", ones, axis=0)
    cols = trace.apply("cumsum", ones, axis=1)
    return trace.apply("where", trace.apply("less_equal", cols, rows), zero, ninf)
