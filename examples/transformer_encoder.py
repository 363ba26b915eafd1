"""A transformer encoder block with a dynamic sequence length (pre-layer-norm):

    h = x + MultiHeadAttention(LayerNorm(x));  y = h + Dense(GELU(Dense(LayerNorm(h))))

on x of shape (seq, 64), 4 heads of 16, feed-forward width 256, GELU by its tanh
approximation. Built once with symbolic ``seq``, compiled once, run at every size of ``SIZES``
and compared with the numpy implementation; prints the memory report at one length.

    python examples/transformer_encoder.py [--small]
"""

from __future__ import annotations

import sys

import numpy as np
from example_runner import run_example

import dynshape as ds

D_MODEL, HEADS, D_FF = 64, 4, 256
D_HEAD = D_MODEL // HEADS
SIZES = [8, 64, 256, 1024]
SMALL_SIZES = [1, 5, 16]
RTOL, ATOL = 1e-4, 1e-4
PARAM_SHAPES = {
    "g1": (D_MODEL,), "be1": (D_MODEL,),
    "wq": (D_MODEL, D_MODEL), "wk": (D_MODEL, D_MODEL), "wv": (D_MODEL, D_MODEL),
    "wo": (D_MODEL, D_MODEL), "bo": (D_MODEL,),
    "g2": (D_MODEL,), "be2": (D_MODEL,),
    "w1": (D_FF, D_MODEL), "b1": (D_FF,), "w2": (D_MODEL, D_FF), "b2": (D_MODEL,),
}  # fmt: skip


SIZE_LABEL = "seq"


def gelu(x, tanh=np.tanh):
    """GELU, tanh approximation; the same formula for builder Values and numpy arrays."""
    return 0.5 * x * (1 + tanh(0.7978845608 * (x + 0.044715 * (x * x * x))))


def build_model() -> ds.Program:
    """Parameters first (in ``PARAM_SHAPES`` order), then the data: ``run(*params, x)``."""
    p = {name: ds.tensor(name, shape) for name, shape in PARAM_SHAPES.items()}
    x = ds.tensor("x", ("seq", D_MODEL), "float32")

    def heads(t: ds.Value) -> ds.Value:  # (seq, D_MODEL) -> (HEADS, seq, D_HEAD)
        return t.reshape(-1, HEADS, D_HEAD).transpose(1, 0, 2)

    a = ds.layer_norm(x, p["g1"], p["be1"])
    q, k, v = (heads(ds.dense(a, p[w])) for w in ("wq", "wk", "wv"))
    scores = ds.batch_matmul(q, k) * (1 / np.sqrt(D_HEAD))  # q @ k^T: (HEADS, seq, seq)
    ctx = ds.batch_matmul(ds.softmax(scores, axis=-1), v, transpose_b=False)
    ctx = ctx.transpose(1, 0, 2).reshape(-1, D_MODEL)
    h = x + ds.dense(ctx, p["wo"]) + p["bo"]
    f = ds.layer_norm(h, p["g2"], p["be2"])
    f = gelu(ds.dense(f, p["w1"]) + p["b1"], tanh=ds.tanh)
    y = h + ds.dense(f, p["w2"]) + p["b2"]
    return ds.build(y, [*p.values(), x], ranges={"seq": (1, 4096)})


def layer_norm(x, g, b, eps=1e-5):
    mu, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * g + b


def numpy_reference(g1, be1, wq, wk, wv, wo, bo, g2, be2, w1, b1, w2, b2, x):
    seq = x.shape[0]
    a = layer_norm(x, g1, be1)
    q, k, v = ((a @ w.T).reshape(seq, HEADS, D_HEAD).transpose(1, 0, 2) for w in (wq, wk, wv))
    scores = q @ k.transpose(0, 2, 1) / np.sqrt(D_HEAD)
    e = np.exp(scores - scores.max(-1, keepdims=True))
    ctx = (e / e.sum(-1, keepdims=True)) @ v
    h = x + ctx.transpose(1, 0, 2).reshape(seq, D_MODEL) @ wo.T + bo
    f = gelu(layer_norm(h, g2, be2) @ w1.T + b1)
    return (h + f @ w2.T + b2).astype(np.float32)  # the float64 constants of gelu promote


def make_params(rng: np.random.Generator) -> tuple[np.ndarray, ...]:
    def init(name: str, shape: tuple[int, ...]) -> np.ndarray:
        if name.startswith("g"):  # layer-norm scales near 1
            return (1 + 0.1 * rng.standard_normal(shape)).astype(np.float32)
        scale = 1 / np.sqrt(shape[-1]) if len(shape) == 2 else 0.1
        return (scale * rng.standard_normal(shape)).astype(np.float32)

    return tuple(init(name, shape) for name, shape in PARAM_SHAPES.items())


def make_inputs(rng: np.random.Generator, size: int) -> tuple[np.ndarray, ...]:
    return (rng.standard_normal((size, D_MODEL)).astype(np.float32),)


def bindings(size: int) -> dict[str, int]:
    """The symbol values at ``size`` (for the memory report)."""
    return {"seq": size}


def main(argv: list[str] | None = None) -> int:
    """Compile once, run at every size against numpy, print the memory report."""
    return run_example(sys.modules[__name__], argv)


if __name__ == "__main__":
    sys.exit(main())
