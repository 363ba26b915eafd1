"""Program structure: global functions called with symbolic arguments (bound per call, result
types rewritten in the caller's terms), tuples (nested, as parameters and results of main and of
globals, empty and one-field), typed lets and shadowing, shared subexpressions, more dtypes,
local function values (inlined: called once, at two shapes, nested, capturing, in branches)."""

from __future__ import annotations

import numpy as np
from harness import Case, ints


def _norm_rows(v: np.ndarray) -> np.ndarray:
    return v / (np.sqrt((v * v).sum(axis=1, keepdims=True)) + np.float32(1))


CASES = [
    Case(
        name="global_called_with_symbolic_arg_after_concat",
        source="""
def @f(%x: Tensor[(k, 4), float32]) -> Tensor[(k, 4), float32] {
  multiply(tanh(%x), 2f)
}

def @main(%x: Tensor[(n, 4), float32]) -> Tensor[(2*n, 4), float32] {
  @f(concatenate((%x, %x)))
}
""",
        reference=lambda x: np.tanh(np.concatenate([x, x])) * 2,
        bindings=[{"n": 0}, {"n": 1}, {"n": 3}, {"n": 16}],
    ),
    Case(
        name="global_returns_tuple_used_twice",
        source="""
def @stats(%x: Tensor[(r, c), float32]) -> (Tensor[(r,), float32], Tensor[(c,), float32]) {
  (sum(%x, axis=1), sum(%x, axis=0))
}

def @main(%x: Tensor[(n, m), float32]) -> (Tensor[(m,), float32], Tensor[(n,), float32], Tensor[(m,), float32]) {
  %s = @stats(%x);
  %t = @stats(transpose(%x));
  (%s.1, %s.0, %t.0)
}
""",
        reference=lambda x: (x.sum(0), x.sum(1), x.sum(0)),
        bindings=[{"n": 0, "m": 3}, {"n": 1, "m": 1}, {"n": 5, "m": 0}, {"n": 4, "m": 6}],
    ),
    Case(
        name="main_takes_nested_tuple",
        source="""
def @main(%t: ((Tensor[(n,), float32], Tensor[(n, 2), int32]), float32)) -> ((Tensor[(n,), float32], Tensor[(n, 2), int32]), (float32,)) {
  %inner = %t.0;
  ((add(%inner.0, %t.1), %inner.1), (%t.1,))
}
""",
        reference=lambda t: ((t[0][0] + t[1], t[0][1].copy()), (np.float32(t[1]),)),
        bindings=[{"n": 0}, {"n": 1}, {"n": 7}],
    ),
    Case(
        name="global_with_nested_tuple_param_and_result",
        source="""
def @swap(%p: (Tensor[(a,), float32], (Tensor[(b,), float32], float32))) -> ((Tensor[(b,), float32], float32), Tensor[(a,), float32]) {
  (%p.1, %p.0)
}

def @main(%x: Tensor[(n,), float32], %y: Tensor[(m,), float32], %s: float32) -> (Tensor[(m,), float32], Tensor[(n,), float32]) {
  %r = @swap((%x, (%y, %s)));
  %front = %r.0;
  (multiply(%front.0, %front.1), %r.1)
}
""",
        reference=lambda x, y, s: (y * s, x.copy()),
        bindings=[{"n": 0, "m": 2}, {"n": 1, "m": 1}, {"n": 4, "m": 0}, {"n": 6, "m": 9}],
    ),
    Case(
        name="global_called_on_three_shapes",
        source="""
def @norm(%v: Tensor[(k, d), float32]) -> Tensor[(k, d), float32] {
  %len = sqrt(sum(multiply(%v, %v), axis=1, keepdims=True));
  divide(%v, add(%len, 1f))
}

def @main(%x: Tensor[(n, 3), float32], %y: Tensor[(m, 3), float32]) -> (Tensor[(n, 3), float32], Tensor[(m, 3), float32], Tensor[(n + m, 3), float32]) {
  (@norm(%x), @norm(%y), @norm(concatenate((%x, %y))))
}
""",
        reference=lambda x, y: (_norm_rows(x), _norm_rows(y), _norm_rows(np.concatenate([x, y]))),
        bindings=[{"n": 0, "m": 2}, {"n": 1, "m": 1}, {"n": 3, "m": 0}, {"n": 8, "m": 5}],
    ),
    Case(
        name="global_chain_with_dim_arithmetic",
        source="""
def @pad1(%x: Tensor[(k,), float32]) -> Tensor[(k + 1,), float32] {
  concatenate((%x, ones(shape=[1])))
}

def @pad2(%x: Tensor[(k,), float32]) -> Tensor[(k + 2,), float32] {
  @pad1(@pad1(%x))
}

def @scale(%x: Tensor[(k,), float32], %s: float32) -> Tensor[(k,), float32] {
  multiply(%x, %s)
}

def @main(%x: Tensor[(n,), float32], %y: Tensor[(m,), float32]) -> Tensor[(n + m + 2,), float32] {
  %both = concatenate((%x, %y));
  @scale(@pad2(%both), rsqrt(add(sum(multiply(%both, %both)), 1f)))
}
""",
        reference=lambda x, y: (
            np.concatenate([x, y, np.ones(2, np.float32)])
            / np.sqrt((np.concatenate([x, y]) ** 2).sum() + 1)
        ),
        bindings=[{"n": 0, "m": 0}, {"n": 1, "m": 1}, {"n": 2, "m": 5}, {"n": 9, "m": 3}],
    ),
    Case(
        name="global_static_and_symbolic_params",
        source="""
def @proj(%x: Tensor[(b, s, 8), float32], %w: Tensor[(4, 8), float32]) -> Tensor[(b, s, 4), float32] {
  nn.dense(%x, %w)
}

def @main(%x: Tensor[(b, s, 8), float32], %w: Tensor[(4, 8), float32]) {
  %tail = strided_slice(%x, begin=[0, 1], end=[100, 100]);
  (@proj(%x, %w), @proj(%tail, %w))
}
""",
        reference=lambda x, w: (x @ w.T, x[:, 1:] @ w.T),
        bindings=[{"b": 0, "s": 3}, {"b": 1, "s": 1}, {"b": 2, "s": 0}, {"b": 3, "s": 5}],
    ),
    Case(
        name="typed_lets_and_shadowing",
        source="""
def @main(%x: Tensor[(n, 4), float32]) -> Tensor[(?, 2), float32] {
  let %a: Tensor[(n, 4), float32] = add(%x, 1f);
  let %b: Tensor[(?, 2), float32] = reshape(%a, newshape=[-1, 2]);
  let %a = multiply(%b, %b);
  %a
}
""",
        reference=lambda x: ((x + 1).reshape(-1, 2)) ** 2,
        bindings=[{"n": 0}, {"n": 1}, {"n": 6}],
    ),
    Case(
        name="local_function_called_once",
        source="""
def @main(%x: Tensor[(n,), float32]) {
  %f = fn (%a: Tensor[(n,), float32]) { add(%a, %a) };
  %f(%x)
}
""",
        reference=lambda x: x + x,
        bindings=[{"n": 0}, {"n": 1}, {"n": 7}],
    ),
    Case(
        name="local_function_called_at_two_shapes",
        source="""
def @main(%x: Tensor[(n,), float32], %y: Tensor[(m, 2), float32]) {
  let %f = fn (%a: Tensor[(k,), float32]) -> Tensor[(k,), float32] {
    let %e = exp(negative(%a));
    multiply(%e, %a)
  };
  (%f(%x), %f(reshape(%y, newshape=[-1])), add(%f(%x), %x))
}
""",
        reference=lambda x, y: (
            np.exp(-x) * x,
            np.exp(-y.ravel()) * y.ravel(),
            np.exp(-x) * x + x,
        ),
        bindings=[{"n": 0, "m": 3}, {"n": 1, "m": 1}, {"n": 5, "m": 0}, {"n": 9, "m": 4}],
    ),
    Case(
        name="local_functions_nested_capturing_in_if_branches",
        source="""
def @main(%c: bool, %x: Tensor[(n, 4), float32], %y: Tensor[(4,), float32]) {
  let %scale = fn (%a: Tensor[(r, 4), float32]) {
    let %shift = fn (%b: Tensor[(r, 4), float32]) { subtract(%b, %y) };
    multiply(%shift(%a), %y)
  };
  if (%c) { %scale(exp(%x)) } else { add(%scale(%x), sum(%scale(%x), axis=0)) }
}
""",
        reference=lambda c, x, y: (np.exp(x) - y) * y if c else (x - y) * y + ((x - y) * y).sum(0),
        bindings=[{"n": 0}, {"n": 1}, {"n": 3}, {"n": 6}],
        make_inputs=lambda rng, b: (
            np.bool_(b["n"] % 2 == 1),
            rng.standard_normal((b["n"], 4)).astype(np.float32),
            rng.standard_normal(4).astype(np.float32),
        ),
    ),
    Case(
        name="split_projections_into_stack",
        source="""
def @main(%x: Tensor[(n, 6), float32]) -> Tensor[(3, n, 2), float32] {
  let %parts: (Tensor[(n, 2), float32], Tensor[(n, 2), float32], Tensor[(n, 2), float32]) = split(%x, indices_or_sections=3, axis=-1);
  stack((%parts.2, %parts.0, add(%parts.1, %parts.0)))
}
""",
        reference=lambda x: np.stack([x[:, 4:], x[:, :2], x[:, 2:4] + x[:, :2]]),
        bindings=[{"n": 0}, {"n": 1}, {"n": 5}],
    ),
    Case(
        name="shared_subexpressions",
        source="""
def @main(%x: Tensor[(n, m), float32]) {
  %y = exp(negative(abs(%x)));
  %z = add(%y, %y);
  (%z, multiply(%y, %z), %y, sum(%z, axis=0))
}
""",
        reference=lambda x: (
            2 * np.exp(-np.abs(x)),
            np.exp(-np.abs(x)) * 2 * np.exp(-np.abs(x)),
            np.exp(-np.abs(x)),
            (2 * np.exp(-np.abs(x))).sum(0),
        ),
        bindings=[{"n": 0, "m": 3}, {"n": 1, "m": 1}, {"n": 6, "m": 4}],
    ),
    Case(
        name="empty_and_one_field_tuples",
        source="""
def @main(%x: Tensor[(n,), float32]) -> ((), (Tensor[(n,), float32],), ((Tensor[(n,), float32],), ())) {
  %one = (negative(%x),);
  ((), %one, (%one, ()))
}
""",
        reference=lambda x: ((), (-x,), ((-x,), ())),
        bindings=[{"n": 0}, {"n": 1}, {"n": 4}],
    ),
    Case(
        name="int8_int16_arith_and_casts",
        source="""
def @main(%a: Tensor[(n,), int8], %b: Tensor[(n, m), int16]) {
  %wide = cast(%a, dtype="int16");
  (add(%a, %a), multiply(%b, 3i16), add(%b, expand_dims(%wide, axis=1)), negative(%a), cast(%b, dtype="int8"))
}
""",
        reference=lambda a, b: (
            a + a,
            b * np.int16(3),
            b + a.astype(np.int16)[:, None],
            -a,
            b.astype(np.int8),
        ),
        bindings=[{"n": 0, "m": 3}, {"n": 1, "m": 1}, {"n": 5, "m": 4}],
        inputs={"a": ints(-128, 128), "b": ints(-1000, 1000)},
    ),
    Case(
        name="results_alias_inputs_views_and_each_other",
        source="""
def @main(%x: Tensor[(n, 6), float32]) {
  %y = exp(%x);
  (%x, reshape(%x, newshape=[0, 2, 3]), %y, reshape(%y, newshape=[-1]), %y, (%y, %x))
}
""",
        reference=lambda x: (
            x.copy(),
            x.reshape(-1, 2, 3),
            np.exp(x),
            np.exp(x).reshape(-1),
            np.exp(x),
            (np.exp(x), x.copy()),
        ),
        bindings=[{"n": 0}, {"n": 1}, {"n": 5}],
    ),
    Case(
        name="long_chain_with_layout_changes_and_late_uses",
        source="""
def @main(%x: Tensor[(n, 8), float32]) -> (Tensor[(4, 2*n), float32], Tensor[(n, 8), float32]) {
  %a = add(%x, 1f);
  %b = multiply(%a, %a);
  %t = transpose(%b);
  %r = reshape(%t, newshape=[4, -1]);
  %c = subtract(%r, 0.5f);
  %d = tanh(%c);
  %e = concatenate((%d, %r), axis=1);
  %f = strided_slice(%e, begin=[0, 0], end=[4, -1], strides=[1, 2]);
  %g = multiply(%f, 3f);
  %h = add(%g, sum(%a));
  %i = reshape(%h, newshape=[4, -1]);
  %early = multiply(%x, %a);
  (%i, %early)
}
""",
        reference=lambda x: (
            (
                np.concatenate(
                    [
                        np.tanh(((x + 1) ** 2).T.reshape(4, -1) - 0.5),
                        ((x + 1) ** 2).T.reshape(4, -1),
                    ],
                    axis=1,
                )[:, 0:-1:2]
                * 3
                + (x + 1).sum()
            ),
            x * (x + 1),
        ),
        bindings=[{"n": 0}, {"n": 1}, {"n": 3}, {"n": 10}],
        rtol=1e-4,
        atol=1e-4,
    ),
]
