"""A small CNN with a dynamic batch and spatial size: (batch, 3, h, w) -> conv 3x3 (8) -> relu ->
max-pool 2x2 -> conv 3x3 (16) -> relu -> global average pool -> flatten -> dense 10.

Built once with symbolic ``batch``, ``h`` and ``w`` (odd sizes included: the pool floors),
compiled once, run at every size of ``SIZES`` and compared with the numpy implementation;
prints the memory report at one size.

    python examples/cnn.py [--small]
"""

from __future__ import annotations

import sys

import numpy as np
from example_runner import run_example

import dynshape as ds

CHANNELS, C1, C2, CLASSES = 3, 8, 16, 10
SIZES = [(1, 32, 32), (8, 28, 28), (4, 64, 48), (16, 17, 23)]  # (batch, h, w)
SMALL_SIZES = [(1, 8, 8), (3, 7, 10)]
RTOL, ATOL = 1e-4, 1e-5


SIZE_LABEL = "(batch, h, w)"


def build_model() -> ds.Program:
    """Parameters first, then the data: ``run(k1, c1, k2, c2, w, b, x)``."""
    k1, c1 = ds.tensor("k1", (C1, CHANNELS, 3, 3)), ds.tensor("c1", (C1, 1, 1))
    k2, c2 = ds.tensor("k2", (C2, C1, 3, 3)), ds.tensor("c2", (C2, 1, 1))
    w, b = ds.tensor("w", (CLASSES, C2)), ds.tensor("b", (CLASSES,))
    x = ds.tensor("x", ("batch", CHANNELS, "h", "w"), "float32")
    y = ds.relu(ds.conv2d(x, k1, padding=[1, 1, 1, 1]) + c1)
    y = ds.max_pool2d(y, pool_size=[2, 2], strides=[2, 2])
    y = ds.relu(ds.conv2d(y, k2, padding=[1, 1, 1, 1]) + c2)
    y = ds.batch_flatten(ds.global_avg_pool2d(y))
    y = ds.dense(y, w) + b
    ranges = {"batch": (1, 256), "h": (2, 1024), "w": (2, 1024)}
    return ds.build(y, [k1, c1, k2, c2, w, b, x], ranges=ranges)


def conv3x3(x, k):
    """numpy 3x3 convolution, padding 1, NCHW / OIHW."""
    padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    windows = np.lib.stride_tricks.sliding_window_view(padded, (3, 3), axis=(2, 3))
    return np.einsum("nchwij,ocij->nohw", windows, k)


def numpy_reference(k1, c1, k2, c2, w, b, x):
    y = np.maximum(conv3x3(x, k1) + c1, 0)
    n, c, h, wd = y.shape
    y = y[:, :, : h // 2 * 2, : wd // 2 * 2].reshape(n, c, h // 2, 2, wd // 2, 2).max(axis=(3, 5))
    y = np.maximum(conv3x3(y, k2) + c2, 0)
    return y.mean(axis=(2, 3)) @ w.T + b


def make_params(rng: np.random.Generator) -> tuple[np.ndarray, ...]:
    def init(*shape: int) -> np.ndarray:
        fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else shape[0]
        return (rng.standard_normal(shape) / np.sqrt(fan_in)).astype(np.float32)

    return (
        init(C1, CHANNELS, 3, 3), init(C1, 1, 1),
        init(C2, C1, 3, 3), init(C2, 1, 1),
        init(CLASSES, C2), init(CLASSES),
    )  # fmt: skip


def make_inputs(rng: np.random.Generator, size: tuple[int, int, int]) -> tuple[np.ndarray, ...]:
    batch, h, w = size
    return (rng.standard_normal((batch, CHANNELS, h, w)).astype(np.float32),)


def bindings(size: tuple[int, int, int]) -> dict[str, int]:
    """The symbol values at ``size`` (for the memory report)."""
    return dict(zip(("batch", "h", "w"), size, strict=True))


def main(argv: list[str] | None = None) -> int:
    """Compile once, run at every size against numpy, print the memory report."""
    return run_example(sys.modules[__name__], argv)


if __name__ == "__main__":
    sys.exit(main())
