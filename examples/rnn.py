"""A GRU over a dynamic number of steps: x (steps, batch, 16), h0 (batch, 32) -> all hidden
states (steps, batch, 32) and the last one (batch, 32).

The recurrence is a ``ds.while_loop`` (a recursive ``@loop`` function in the IR) running while
``i < steps``, with ``steps`` read from the input's shape (``shape_of(x)[0]``), so one compiled
program runs any sequence length (0 included: the outputs are then empty and h0). Each step
takes ``x[i]``, applies the GRU cell (PyTorch's gate order r, z, n) and appends the new state to
the outputs with ``concatenate``. Built once, compiled once, run at every size of ``SIZES`` and
compared with the numpy implementation; prints the memory report at one size.

    python examples/rnn.py [--small]
"""

from __future__ import annotations

import sys

import numpy as np
from example_runner import run_example

import dynshape as ds

INPUT, HIDDEN = 16, 32
SIZES = [(0, 4), (1, 1), (10, 8), (50, 32)]  # (steps, batch)
SMALL_SIZES = [(0, 2), (1, 1), (6, 3)]
RTOL, ATOL = 1e-4, 1e-5


SIZE_LABEL = "(steps, batch)"
REPORT_NOTE = " (? sizes evaluated at 3)"


def gru_cell(x, h, wi, wh, bi, bh, dense, sigmoid, tanh):
    """One GRU step; the same formula for builder Values and numpy arrays."""
    gi, gh = dense(x, wi) + bi, dense(h, wh) + bh
    r = sigmoid(gi[:, :HIDDEN] + gh[:, :HIDDEN])
    z = sigmoid(gi[:, HIDDEN : 2 * HIDDEN] + gh[:, HIDDEN : 2 * HIDDEN])
    n = tanh(gi[:, 2 * HIDDEN :] + r * gh[:, 2 * HIDDEN :])
    return (1 - z) * n + z * h


def build_model() -> ds.Program:
    """Parameters first, then the data: ``run(wi, wh, bi, bh, x, h0)``."""
    wi, wh = ds.tensor("wi", (3 * HIDDEN, INPUT)), ds.tensor("wh", (3 * HIDDEN, HIDDEN))
    bi, bh = ds.tensor("bi", (3 * HIDDEN,)), ds.tensor("bh", (3 * HIDDEN,))
    x = ds.tensor("x", ("steps", "batch", INPUT), "float32")
    h0 = ds.tensor("h0", ("batch", HIDDEN), "float32")
    steps = ds.shape_of(x, dtype="int32")[0]

    def body(i: ds.Value, h: ds.Value, outs: ds.Value) -> tuple[ds.Value, ...]:
        h = gru_cell(ds.take(x, i, axis=0), h, wi, wh, bi, bh, ds.dense, ds.sigmoid, ds.tanh)
        return i + 1, h, ds.concatenate([outs, h[None]], axis=0)

    init = (0, h0, h0[None][:0])  # outs starts as (0, batch, HIDDEN)
    _, h, outs = ds.while_loop(lambda i, h, outs: i < steps, body, init)
    ranges = {"steps": (0, 10_000), "batch": (1, 1024)}
    return ds.build((outs, h), [wi, wh, bi, bh, x, h0], ranges=ranges)


def numpy_reference(wi, wh, bi, bh, x, h0):
    h, outs = h0, []
    dense = lambda a, w: a @ w.T  # noqa: E731
    sigmoid = lambda v: 1 / (1 + np.exp(-v))  # noqa: E731
    for t in range(x.shape[0]):
        h = gru_cell(x[t], h, wi, wh, bi, bh, dense, sigmoid, np.tanh)
        outs.append(h)
    return np.stack(outs) if outs else np.zeros((0, *h0.shape), np.float32), h


def make_params(rng: np.random.Generator) -> tuple[np.ndarray, ...]:
    scale = 1 / np.sqrt(HIDDEN)
    shapes = [(3 * HIDDEN, INPUT), (3 * HIDDEN, HIDDEN), (3 * HIDDEN,), (3 * HIDDEN,)]
    return tuple((scale * rng.uniform(-1, 1, s)).astype(np.float32) for s in shapes)


def make_inputs(rng: np.random.Generator, size: tuple[int, int]) -> tuple[np.ndarray, ...]:
    steps, batch = size
    x = rng.standard_normal((steps, batch, INPUT)).astype(np.float32)
    return x, rng.standard_normal((batch, HIDDEN)).astype(np.float32)


def bindings(size: tuple[int, int]) -> dict[str, int]:
    """The symbol values at ``size`` (for the memory report)."""
    return dict(zip(("steps", "batch"), size, strict=True))


def main(argv: list[str] | None = None) -> int:
    """Compile once, run at every size against numpy, print the memory report."""
    return run_example(sys.modules[__name__], argv)


if __name__ == "__main__":
    sys.exit(main())
