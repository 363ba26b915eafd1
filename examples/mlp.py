"""An MLP with a dynamic batch: (batch, 64) -> dense 128 -> relu -> dense 64 -> relu -> dense 10
-> softmax.

Built once with symbolic ``batch``, compiled once, run at every size of ``SIZES`` and compared
with the numpy implementation; prints the memory report at one batch size.

    python examples/mlp.py [--small]
"""

from __future__ import annotations

import sys

import numpy as np
from example_runner import run_example

import dynshape as ds

FEATURES, HIDDEN, CLASSES = 64, 128, 10
SIZES = [1, 8, 64, 512]
SMALL_SIZES = [1, 3, 17]
RTOL, ATOL = 1e-4, 1e-5


SIZE_LABEL = "batch"


def build_model() -> ds.Program:
    """Parameters first, then the data: ``run(w1, b1, w2, b2, w3, b3, x)``."""
    w1, b1 = ds.tensor("w1", (HIDDEN, FEATURES)), ds.tensor("b1", (HIDDEN,))
    w2, b2 = ds.tensor("w2", (FEATURES, HIDDEN)), ds.tensor("b2", (FEATURES,))
    w3, b3 = ds.tensor("w3", (CLASSES, FEATURES)), ds.tensor("b3", (CLASSES,))
    x = ds.tensor("x", ("batch", FEATURES), "float32")
    h = ds.relu(ds.dense(x, w1) + b1)
    h = ds.relu(ds.dense(h, w2) + b2)
    y = ds.softmax(ds.dense(h, w3) + b3, axis=-1)
    return ds.build(y, [w1, b1, w2, b2, w3, b3, x], ranges={"batch": (1, 4096)})


def numpy_reference(w1, b1, w2, b2, w3, b3, x):
    h = np.maximum(x @ w1.T + b1, 0)
    h = np.maximum(h @ w2.T + b2, 0)
    logits = h @ w3.T + b3
    e = np.exp(logits - logits.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def make_params(rng: np.random.Generator) -> tuple[np.ndarray, ...]:
    def glorot(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) / np.sqrt(shape[-1])).astype(np.float32)

    return (
        glorot(HIDDEN, FEATURES), glorot(HIDDEN),
        glorot(FEATURES, HIDDEN), glorot(FEATURES),
        glorot(CLASSES, FEATURES), glorot(CLASSES),
    )  # fmt: skip


def make_inputs(rng: np.random.Generator, size: int) -> tuple[np.ndarray, ...]:
    return (rng.standard_normal((size, FEATURES)).astype(np.float32),)


def bindings(size: int) -> dict[str, int]:
    """The symbol values at ``size`` (for the memory report)."""
    return {"batch": size}


def main(argv: list[str] | None = None) -> int:
    """Compile once, run at every size against numpy, print the memory report."""
    return run_example(sys.modules[__name__], argv)


if __name__ == "__main__":
    sys.exit(main())
