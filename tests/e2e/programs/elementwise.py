"""Elementwise ops: unary math, casts, clipping, arithmetic and comparisons with broadcasting,
logical ops and ``where``, over several dtypes and rank-0 (scalar) parameters."""

from __future__ import annotations

import math

import numpy as np
from harness import (
    Case,
    away_from_zero,
    halves,
    ints,
    nonzero_ints,
    positive,
    uniform,
)

_erf = np.vectorize(math.erf, otypes=[np.float64])


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x.astype(np.float64)))


N = [{"n": 0}, {"n": 1}, {"n": 5}, {"n": 17}]
NM = [{"n": 0, "m": 3}, {"n": 1, "m": 1}, {"n": 4, "m": 7}, {"n": 9, "m": 2}]

CASES = [
    Case(
        name="unary_float_chain",
        source="""
def @main(%x: Tensor[(n, 4), float32]) -> (Tensor[(n, 4), float32], Tensor[(n, 4), float32], Tensor[(n, 4), float32]) {
  %e = exp(%x);
  %s = add(sin(%x), cos(%x));
  %t = multiply(tanh(%x), sigmoid(%x));
  (%e, %s, %t)
}
""",
        reference=lambda x: (np.exp(x), np.sin(x) + np.cos(x), np.tanh(x) * _sigmoid(x)),
        bindings=N,
    ),
    Case(
        name="log_sqrt_rsqrt_of_positive",
        source="""
def @main(%x: Tensor[(n, m), float32]) -> Tensor[(n, m), float32] {
  %a = log(%x);
  %b = sqrt(%x);
  %c = rsqrt(%x);
  add(multiply(%a, %b), %c)
}
""",
        reference=lambda x: np.log(x) * np.sqrt(x) + 1 / np.sqrt(x),
        bindings=NM,
        inputs={"x": positive()},
    ),
    Case(
        # silu written out, and the product fuse_silu makes of it, side by side
        name="silu_written_and_fused",
        source="""
def @main(%x: Tensor[(n, m), float32]) -> (Tensor[(n, m), float32], Tensor[(n, m), float32]) {
  (silu(%x), multiply(sigmoid(%x), %x))
}
""",
        reference=lambda x: (x * _sigmoid(x), x * _sigmoid(x)),
        bindings=NM,
        inputs={"x": uniform(-12.0, 12.0)},
    ),
    Case(
        name="erf_float64",
        source="""
def @main(%x: Tensor[(n,), float64]) -> (Tensor[(n,), float64], Tensor[(n,), float64]) {
  %e = erf(%x);
  (%e, subtract(1f64, %e))
}
""",
        reference=lambda x: (_erf(x), 1.0 - _erf(x)),
        bindings=N,
        inputs={"x": uniform(-3.0, 3.0)},
    ),
    Case(
        name="floor_ceil_round_half_to_even",
        source="""
def @main(%x: Tensor[(n, 3), float32]) -> (Tensor[(n, 3), float32], Tensor[(n, 3), float32], Tensor[(n, 3), float32]) {
  (floor(%x), ceil(%x), round(%x))
}
""",
        reference=lambda x: (np.floor(x), np.ceil(x), np.round(x)),
        bindings=N,
        inputs={"x": halves()},
    ),
    Case(
        name="negative_abs_int_and_float16",
        source="""
def @main(%a: Tensor[(n,), int32], %b: Tensor[(n, 2), int64], %c: Tensor[(m,), float16]) -> (Tensor[(n,), int32], Tensor[(n, 2), int64], Tensor[(n,), int32], Tensor[(m,), float16]) {
  %na = negative(%a);
  (%na, abs(%b), abs(%na), negative(abs(%c)))
}
""",
        reference=lambda a, b, c: (-a, np.abs(b), np.abs(a), -np.abs(c)),
        bindings=NM,
    ),
    Case(
        name="copy_zeros_like_ones_like",
        source="""
def @main(%x: Tensor[(n, m), uint8], %f: Tensor[(n,), bool]) -> (Tensor[(n, m), uint8], Tensor[(n, m), uint8], Tensor[(n,), bool], Tensor[(n,), bool], Tensor[(n,), bool]) {
  (copy(%x), zeros_like(%x), ones_like(%f), zeros_like(%f), copy(%f))
}
""",
        reference=lambda x, f: (
            x.copy(),
            np.zeros_like(x),
            np.ones_like(f),
            np.zeros_like(f),
            f.copy(),
        ),
        bindings=NM,
    ),
    Case(
        name="cast_between_dtypes",
        source="""
def @main(%x: Tensor[(n, 3), float32]) {
  %i = cast(%x, dtype="int32");
  %f = cast(%i, dtype="float64");
  %b = cast(%x, dtype="bool");
  %u = cast(%b, dtype="uint8");
  %h = cast(%x, dtype="float16");
  %l = cast(%u, dtype="int64");
  (%i, %f, %b, %u, %h, %l)
}
""",
        reference=lambda x: (
            x.astype(np.int32),
            x.astype(np.int32).astype(np.float64),
            x.astype(bool),
            x.astype(bool).astype(np.uint8),
            x.astype(np.float16),
            x.astype(bool).astype(np.int64),
        ),
        bindings=N,
        inputs={"x": halves(-6.0, 6.0)},
    ),
    Case(
        name="clip_float_int_and_infinite_bound",
        source="""
def @main(%x: Tensor[(n, 4), float32], %y: Tensor[(m,), int32], %z: Tensor[(m,), int64]) -> (Tensor[(n, 4), float32], Tensor[(m,), int32], Tensor[(m,), int64]) {
  (clip(%x, a_min=-0.5, a_max=0.75), clip(%y, a_min=-1.5, a_max=2.5), clip(%z, a_min=-inf, a_max=0.0))
}
""",
        # Integer clipping clips the exact values: [-1.5, 2.5] keeps the ints in [-1, 2].
        reference=lambda x, y, z: (np.clip(x, -0.5, 0.75), np.clip(y, -1, 2), np.minimum(z, 0)),
        bindings=NM,
    ),
    Case(
        name="relu_and_leaky_relu",
        source="""
def @main(%x: Tensor[(n, 5), float32], %k: Tensor[(n,), int32]) -> (Tensor[(n, 5), float32], Tensor[(n, 5), float32], Tensor[(n, 5), float32], Tensor[(n,), int32]) {
  (nn.relu(%x), nn.leaky_relu(%x, alpha=0.2), nn.leaky_relu(%x), nn.relu(%k))
}
""",
        reference=lambda x, k: (
            np.maximum(x, 0),
            np.where(x > 0, x, 0.2 * x),
            np.where(x > 0, x, 0.01 * x),
            np.maximum(k, 0),
        ),
        bindings=N,
    ),
    Case(
        name="float_arith_broadcast_symbolic_one_static",
        source="""
def @main(%a: Tensor[(n, 1), float32], %b: Tensor[(m,), float32], %c: Tensor[(2, 1, m), float32]) -> Tensor[(2, n, m), float32] {
  %s = add(%a, %b);
  %d = subtract(%s, %c);
  %p = multiply(%d, %a);
  divide(%p, %b)
}
""",
        reference=lambda a, b, c: ((a + b) - c) * a / b,
        bindings=[{"n": 0, "m": 4}, {"n": 1, "m": 1}, {"n": 3, "m": 5}, {"n": 6, "m": 2}],
        inputs={"b": away_from_zero()},
    ),
    Case(
        name="int_divide_floor_divide_mod",
        source="""
def @main(%a: Tensor[(n, m), int32], %b: Tensor[(m,), int32], %x: Tensor[(n,), float32]) {
  (divide(%a, %b), floor_divide(%a, %b), mod(%a, %b), mod(%x, -1.5f), floor_divide(%x, 0.75f), divide(%x, 4f))
}
""",
        reference=lambda a, b, x: (
            a // b,
            a // b,
            np.mod(a, b),
            np.mod(x, np.float32(-1.5)),
            np.floor_divide(x, np.float32(0.75)),
            x / np.float32(4),
        ),
        bindings=NM,
        inputs={"a": ints(-20, 21), "b": nonzero_ints(-6, 7), "x": uniform(-5, 5)},
    ),
    Case(
        name="power_small_exponents",
        source="""
def @main(%base: Tensor[(n, 3), float32], %e: Tensor[(3,), float32], %ib: Tensor[(n,), int64], %ie: Tensor[(n,), int64]) {
  (power(%base, %e), power(%base, 2f), power(%ib, %ie), power(2i64, %ie))
}
""",
        reference=lambda base, e, ib, ie: (base**e, base**2, ib**ie, np.int64(2) ** ie),
        bindings=N,
        inputs={
            "base": positive(0.2, 3.0),
            "e": uniform(-2.0, 2.0),
            "ib": ints(-3, 4),
            "ie": ints(0, 4),
        },
    ),
    Case(
        name="maximum_minimum_with_scalars",
        source="""
def @main(%x: Tensor[(n, m), int64], %y: Tensor[(m,), int64], %s: int64, %f: Tensor[(n,), float32]) -> (Tensor[(n, m), int64], Tensor[(n, m), int64], Tensor[(n,), float32], int64) {
  (maximum(%x, %y), minimum(%x, %s), maximum(%f, 0.5f), minimum(%s, -2i64))
}
""",
        reference=lambda x, y, s, f: (
            np.maximum(x, y),
            np.minimum(x, s),
            np.maximum(f, np.float32(0.5)),
            np.minimum(s, -2),
        ),
        bindings=NM,
    ),
    Case(
        name="comparisons_with_ties",
        source="""
def @main(%a: Tensor[(n, m), int32], %b: Tensor[(m,), int32]) {
  (equal(%a, %b), not_equal(%a, %b), less(%a, %b), less_equal(%a, %b), greater(%a, %b), greater_equal(%a, 0))
}
""",
        reference=lambda a, b: (a == b, a != b, a < b, a <= b, a > b, a >= 0),
        bindings=NM,
        inputs={"a": ints(-2, 3), "b": ints(-2, 3)},
    ),
    Case(
        name="logical_ops_broadcast",
        source="""
def @main(%p: Tensor[(n, 1), bool], %q: Tensor[(m,), bool]) {
  (logical_and(%p, %q), logical_or(%p, %q), logical_not(%p), logical_and(logical_not(%q), True), logical_or(%q, False))
}
""",
        reference=lambda p, q: (p & q, p | q, ~p, ~q, q.copy()),
        bindings=NM,
    ),
    Case(
        name="where_broadcast_and_scalar_branches",
        source="""
def @main(%c: Tensor[(n, 1), bool], %x: Tensor[(n, m), float32], %y: Tensor[(m,), int32]) {
  %0 = where(%c, %x, 0f);
  %1 = where(greater(%x, 0f), %x, multiply(%x, 0.1f));
  %2 = where(less(%y, 0), negative(%y), %y);
  (%0, %1, %2)
}
""",
        reference=lambda c, x, y: (
            np.where(c, x, np.float32(0)),
            np.where(x > 0, x, x * np.float32(0.1)),
            np.abs(y),
        ),
        bindings=NM,
    ),
    Case(
        name="rank0_params_as_python_scalars",
        source="""
def @main(%x: Tensor[(n,), float32], %t: float32, %k: int32) -> (Tensor[(n,), float32], float32, int32) {
  %0 = add(multiply(%x, %t), cast(%k, dtype="float32"));
  (%0, multiply(%t, %t), add(%k, 1))
}
""",
        reference=lambda x, t, k: (
            x * np.float32(t) + np.float32(k),
            np.float32(t) * np.float32(t),
            np.int32(k + 1),
        ),
        bindings=N,
        # Python scalars for the rank-0 parameters (the VM converts them losslessly).
        make_inputs=lambda rng, b: (
            rng.standard_normal(b["n"]).astype(np.float32),
            1.5,
            int(rng.integers(-4, 5)),
        ),
    ),
    Case(
        name="float16_arith",
        source="""
def @main(%a: Tensor[(n, 8), float16], %b: Tensor[(8,), float16]) -> (Tensor[(n, 8), float16], Tensor[(n, 8), float16]) {
  %0 = add(multiply(%a, %b), 1f16);
  (%0, exp(multiply(subtract(%a, %b), 0.5f16)))
}
""",
        reference=lambda a, b: (a * b + np.float16(1), np.exp((a - b) * np.float16(0.5))),
        bindings=N,
    ),
    Case(
        name="uint8_wraparound",
        source="""
def @main(%a: Tensor[(n,), uint8], %b: Tensor[(n,), uint8], %c: Tensor[(n,), uint8]) {
  (add(%a, %b), subtract(%a, %b), multiply(%a, 3u8), maximum(%a, %b), floor_divide(%a, %c), mod(%b, %c))
}
""",
        reference=lambda a, b, c: (a + b, a - b, a * np.uint8(3), np.maximum(a, b), a // c, b % c),
        bindings=N,
        inputs={"a": ints(0, 256), "b": ints(0, 256), "c": ints(1, 12)},
    ),
    Case(
        name="rank0_float64_arith",
        source="""
def @main(%a: float64, %b: float64, %x: Tensor[(n,), float64]) -> (float64, float64, Tensor[(n,), float64], float64) {
  (subtract(%a, %b), divide(%a, %b), add(%x, %a), power(abs(%a), 0.5f64))
}
""",
        reference=lambda a, b, x: (a - b, a / b, x + a, np.abs(a) ** 0.5),
        bindings=N,
        inputs={"b": away_from_zero()},
    ),
    Case(
        name="int64_mixed_chain_broadcast",
        source="""
def @main(%a: Tensor[(n, 1), int64], %b: Tensor[(1, m), int64]) -> Tensor[(n, m), int64] {
  %0 = add(multiply(%a, 3i64), %b);
  %1 = floor_divide(%0, 2i64);
  %2 = mod(%1, 5i64);
  subtract(%2, -2i64)
}
""",
        reference=lambda a, b: ((a * 3 + b) // 2) % 5 + 2,
        bindings=NM,
        inputs={"a": ints(-50, 50), "b": ints(-50, 50)},
    ),
    Case(
        name="trigonometric_hyperbolic",
        source="""
def @main(%x: Tensor[(n, m), float32], %y: Tensor[(n, m), float32]) -> (Tensor[(n, m), float32], Tensor[(n, m), float32], Tensor[(n, m), float32]) {
  %t = add(tan(%x), atan(%x));
  %a = add(asin(%x), add(acos(%x), atanh(%x)));
  %h = add(sinh(%x), add(cosh(%x), add(asinh(%y), acosh(%y))));
  (%t, %a, %h)
}
""",
        reference=lambda x, y: (
            np.tan(x) + np.arctan(x),
            np.arcsin(x) + np.arccos(x) + np.arctanh(x),
            np.sinh(x) + np.cosh(x) + np.arcsinh(y) + np.arccosh(y),
        ),
        bindings=NM,
        inputs={"x": uniform(-0.9, 0.9), "y": uniform(1.0, 6.0)},
    ),
    Case(
        name="bitwise_shifts_bitcast",
        source="""
def @main(%a: Tensor[(n, m), int32], %b: Tensor[(m,), int32], %x: Tensor[(n,), float32]) -> (Tensor[(n, m), int32], Tensor[(n, m), int32], Tensor[(n, m), int32], Tensor[(n,), int32], Tensor[(n,), float32]) {
  %0 = bitwise_xor(bitwise_and(%a, %b), bitwise_or(%a, bitwise_not(%b)));
  %bits = bitcast(%x, dtype="int32");
  (%0, left_shift(%a, %b), right_shift(%a, %b), %bits, bitcast(%bits, dtype="float32"))
}
""",
        # Shift counts from -2 to 39: outside [0, 32) a left shift gives 0 and a right shift
        # the sign fill (ONNX's BitShift, numpy's shifts).
        reference=lambda a, b, x: (
            (a & b) ^ (a | ~b),
            np.where((b >= 0) & (b < 32), a << np.clip(b, 0, 31), 0),
            np.where((b >= 0) & (b < 32), a >> np.clip(b, 0, 31), np.where(a < 0, -1, 0)),
            x.view(np.int32),
            x,
        ),
        bindings=NM,
        inputs={"a": ints(-(2**31), 2**31), "b": ints(-2, 40)},
    ),
]
