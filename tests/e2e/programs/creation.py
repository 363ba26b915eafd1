"""Creation ops with static shapes (zeros, ones, full) and ``arange``, whose length is known at
compile time for constant inputs and only at run time for computed or parameter inputs."""

from __future__ import annotations

from typing import Any

import numpy as np
from harness import Binding, Case


def _arange_args(rng: np.random.Generator, b: Binding) -> tuple[Any, ...]:
    """start, stop, step with ``n`` values for step 1 (odd n) and about n/2 for step 2."""
    n = b["n"]
    start = int(rng.integers(-3, 4))
    step = 1 if n % 2 else 2
    x = rng.integers(-5, 6, n).astype(np.int64)
    return np.int64(start), np.int64(start + n), np.int64(step), x


CASES = [
    Case(
        name="zeros_ones_full_static_shapes",
        source="""
def @main(%x: Tensor[(n, 3), int32]) {
  %z = zeros(shape=[3], dtype="int32");
  %two = full(2, shape=[1, 3], dtype="int32");
  (add(%x, %z), ones(shape=[0, 4]), full(3.5f, shape=[2], dtype="float64"), multiply(%x, %two), ones(shape=[], dtype="bool"), zeros(shape=[2, 2]))
}
""",
        reference=lambda x: (
            x.copy(),
            np.ones((0, 4), np.float32),
            np.full(2, 3.5),
            x * 2,
            np.bool_(True),
            np.zeros((2, 2), np.float32),
        ),
        bindings=[{"n": 0}, {"n": 1}, {"n": 6}],
    ),
    Case(
        name="full_from_scalar_params",
        source="""
def @main(%v: int32, %w: float32, %x: Tensor[(n,), int64]) -> (Tensor[(2, n), int64], Tensor[(3,), float16]) {
  %f = full(%v, shape=[2, 1], dtype="int64");
  (add(%f, %x), full(%w, shape=[3], dtype="float16"))
}
""",
        reference=lambda v, w, x: (
            np.int64(v) + x[None, :] + np.zeros((2, 1), np.int64),
            np.full(3, w, np.float16),
        ),
        bindings=[{"n": 0}, {"n": 1}, {"n": 5}],
    ),
    Case(
        name="arange_constant_inputs",
        source="""
def @main(%x: Tensor[(n,), float32]) -> (Tensor[(4,), float32], Tensor[(4,), int32], Tensor[(5,), float64], Tensor[(n,), float32]) {
  %r = arange(1f, 4f, 1f);
  (arange(0f, 1f, 0.25f), arange(5, -3, -2, dtype="int32"), arange(0f64, 2.5f64, 0.5f64, dtype="float64"), add(%x, sum(%r)))
}
""",
        reference=lambda x: (
            np.arange(0, 1, 0.25, dtype=np.float32),
            np.arange(5, -3, -2, dtype=np.int32),
            np.arange(0, 2.5, 0.5),
            x + np.float32(6),
        ),
        bindings=[{"n": 0}, {"n": 1}, {"n": 8}],
    ),
    Case(
        name="arange_from_scalar_params",
        source="""
def @main(%start: int64, %stop: int64, %step: int64, %x: Tensor[(n,), int64]) -> (Tensor[(?,), int64], Tensor[(?,), int32], Tensor[(?,), float32], Tensor[(n,), int64]) {
  %f = arange(cast(%start, dtype="float32"), cast(%stop, dtype="float32"), 0.5f);
  (arange(%start, %stop, %step, dtype="int64"), arange(%stop, %start, negative(%step), dtype="int32"), %f, add(%x, %step))
}
""",
        reference=lambda start, stop, step, x: (
            np.arange(start, stop, step, dtype=np.int64),
            np.arange(stop, start, -step, dtype=np.int32),
            np.arange(np.float32(start), np.float32(stop), np.float32(0.5), dtype=np.float32),
            x + step,
        ),
        bindings=[{"n": 0}, {"n": 1}, {"n": 4}, {"n": 9}],
        make_inputs=_arange_args,
    ),
    Case(
        name="arange_float32_length_in_float32",
        source="""
def @main(%a: float32, %b: float32, %c: float32, %x: Tensor[(n,), float32]) -> (Tensor[(3,), float32], Tensor[(?,), float32], Tensor[(n,), float32]) {
  (arange(0f, 0.3f, 0.1f), arange(%a, %b, %c), multiply(%x, %c))
}
""",
        # design/shapes.md: the length is numpy's for float32 scalars, computed in float32:
        # (0.3f - 0f) / 0.1f rounds to 3, so 3 values (float64 arithmetic would give 4).
        reference=lambda a, b, c, x: (
            np.arange(np.float32(0), np.float32(0.3), np.float32(0.1), dtype=np.float32),
            np.arange(a[()], b[()], c[()], dtype=np.float32),
            x * c,
        ),
        bindings=[{"n": 0}, {"n": 1}, {"n": 3}],
        make_inputs=lambda rng, b: (
            np.array(0.1 * (b["n"] % 2), np.float32),
            np.array(0.7 if b["n"] % 2 else 0.3, np.float32),
            np.array(0.2 if b["n"] % 2 else 0.1, np.float32),
            rng.standard_normal(b["n"]).astype(np.float32),
        ),
    ),
]
