"""Control flow: ``if`` whose branches have different shapes (a ``?``-typed result), conditions
computed in the program or passed in, nested ifs; recursion as loops (growing a tensor by
concatenation, accumulating a sum, carrying tuple state), mutual and non-tail recursion."""

from __future__ import annotations

from typing import Any

import numpy as np
from harness import Binding, Case, uniform


def _signed_by_binding(rng: np.random.Generator, shape: Any, dtype: np.dtype, b: Binding) -> Any:
    """Normal values whose sign alternates with the binding, so both branches run."""
    sign = -1.0 if sum(b.values()) % 2 else 1.0
    return (sign * np.abs(rng.standard_normal(shape))).astype(dtype)


def _fib(k: int) -> int:
    a, b = 0, 1
    for _ in range(k):
        a, b = b, a + b
    return a


def _nested_if_ref(x: np.ndarray) -> np.ndarray:
    total = int(x.sum())
    if total > 0:
        return x * 2 if total > 10 else x + 1
    return (-x)[0:1]


def _nested_if_inputs(rng: np.random.Generator, b: Binding) -> tuple[Any, ...]:
    """Row sums steered by the binding: positive large, positive small or non-positive."""
    n = b["n"]
    x = rng.integers(-2, 3, (n, 3)).astype(np.int32)
    x[:, 0] += {0: 0, 1: 2, 2: -4, 3: 6}.get(n % 4, 0)
    return (x,)


def _count_if_ref(x: np.ndarray) -> np.ndarray:
    positive = x[x > 0]
    return positive if positive.size > 2 else np.zeros(1, np.float32)


def _tuple_loop_ref(x: np.ndarray, s: np.ndarray) -> tuple[Any, ...]:
    v, acc = x.copy(), np.float32(s)
    for _ in range(3):
        v = v * np.float32(2)
        acc = np.float32(acc + v.sum())
    return v, acc


def _grow_cols_inputs(rng: np.random.Generator, b: Binding) -> tuple[Any, ...]:
    n = b["n"]
    return rng.standard_normal((n, 1)).astype(np.float32), np.int32(n % 3 + 1)


def _grow_cols_ref(x: np.ndarray, k: np.ndarray) -> np.ndarray:
    acc = x.copy()
    for i in range(int(k)):
        acc = np.concatenate([acc, x * np.float32(i + 2)], axis=1)
    return acc


def _shrink_ref(x: np.ndarray) -> np.ndarray:
    for _ in range(3):
        x = x - np.float32(0.5)
        x = x[x > 0]
    return x


CASES = [
    Case(
        name="if_branches_of_different_shapes",
        source="""
def @main(%x: Tensor[(n, 4), float32]) -> Tensor[(?, 4), float32] {
  if (less(sum(%x), 0f)) { concatenate((%x, %x)) } else { %x }
}
""",
        reference=lambda x: np.concatenate([x, x]) if x.sum() < 0 else x.copy(),
        bindings=[{"n": 0}, {"n": 1}, {"n": 2}, {"n": 5}],
        inputs={"x": _signed_by_binding},
    ),
    Case(
        name="if_on_bool_param_swaps_tuple",
        source="""
def @main(%flag: bool, %x: Tensor[(n,), float32], %y: Tensor[(m,), float32]) -> (Tensor[(?,), float32], Tensor[(?,), float32]) {
  if (%flag) { (%x, %y) } else { (%y, negative(%x)) }
}
""",
        reference=lambda flag, x, y: (x.copy(), y.copy()) if flag else (y.copy(), -x),
        bindings=[{"n": 0, "m": 3}, {"n": 1, "m": 1}, {"n": 4, "m": 2}, {"n": 3, "m": 0}],
        make_inputs=lambda rng, b: (
            np.bool_(b["n"] % 2 == 0),
            rng.standard_normal(b["n"]).astype(np.float32),
            rng.standard_normal(b["m"]).astype(np.float32),
        ),
    ),
    Case(
        name="if_nested_with_lets",
        source="""
def @main(%x: Tensor[(n, 3), int32]) -> Tensor[(?, 3), int32] {
  let %total = sum(%x);
  if (greater(%total, 0)) {
    if (greater(%total, 10)) { multiply(%x, 2) } else { add(%x, 1) }
  } else {
    let %neg = negative(%x);
    strided_slice(%neg, begin=[0], end=[1])
  }
}
""",
        reference=_nested_if_ref,
        bindings=[{"n": 0}, {"n": 1}, {"n": 2}, {"n": 3}, {"n": 7}],
        make_inputs=_nested_if_inputs,
    ),
    Case(
        name="if_on_data_dependent_count",
        source="""
def @main(%x: Tensor[(n,), float32]) -> Tensor[(?,), float32] {
  %pos = argwhere(greater(%x, 0f));
  %count = take(shape_of(%pos), 0);
  if (greater(%count, 2i64)) { take(%x, squeeze(%pos, axis=[1])) } else { zeros(shape=[1], dtype="float32") }
}
""",
        reference=_count_if_ref,
        bindings=[{"n": 0}, {"n": 1}, {"n": 3}, {"n": 12}],
    ),
    Case(
        name="if_as_scalar_operand",
        source="""
def @main(%x: Tensor[(n, m), float32]) -> Tensor[(n, m), float32] {
  %scale = if (less(mean(sum(%x, axis=0, keepdims=True)), 0f)) { 2f } else { 0.5f };
  multiply(%x, %scale)
}
""",
        reference=lambda x: x * np.float32(2 if x.sum(0).mean() < 0 else 0.5),
        bindings=[{"n": 0, "m": 2}, {"n": 1, "m": 1}, {"n": 3, "m": 4}, {"n": 6, "m": 3}],
        inputs={"x": _signed_by_binding},
    ),
    Case(
        name="recursion_grows_rows_by_concatenation",
        source="""
def @loop(%i: int32, %n: int32, %acc: Tensor[(?, 1), int32]) -> Tensor[(?, 1), int32] {
  if (less(%i, %n)) {
    %row = reshape(%i, newshape=[1, 1]);
    @loop(add(%i, 1), %n, concatenate((%acc, %row)))
  } else {
    %acc
  }
}

def @main(%x: Tensor[(n, 1), int32]) -> Tensor[(?, 1), int32] {
  %count = cast(take(shape_of(%x), 0), dtype="int32");
  %rows = @loop(0, %count, zeros(shape=[0, 1], dtype="int32"));
  add(%rows, %x)
}
""",
        reference=lambda x: np.arange(x.shape[0], dtype=np.int32).reshape(-1, 1) + x,
        bindings=[{"n": 0}, {"n": 1}, {"n": 4}, {"n": 21}],
    ),
    Case(
        name="recursion_grows_columns_scalar_count",
        source="""
def @grow(%x: Tensor[(n, 1), float32], %acc: Tensor[(n, ?), float32], %i: int32, %k: int32) -> Tensor[(n, ?), float32] {
  if (greater_equal(%i, %k)) {
    %acc
  } else {
    %col = multiply(%x, cast(add(%i, 2), dtype="float32"));
    @grow(%x, concatenate((%acc, %col), axis=1), add(%i, 1), %k)
  }
}

def @main(%x: Tensor[(n, 1), float32], %k: int32) -> Tensor[(n, ?), float32] {
  @grow(%x, %x, 0, %k)
}
""",
        reference=_grow_cols_ref,
        bindings=[{"n": 0}, {"n": 1}, {"n": 3}, {"n": 8}],
        make_inputs=_grow_cols_inputs,
    ),
    Case(
        name="recursion_accumulates_sum",
        source="""
def @sum_loop(%i: int32, %x: Tensor[(n,), float32], %acc: float32) -> float32 {
  if (less(%i, cast(take(shape_of(%x), 0), dtype="int32"))) {
    @sum_loop(add(%i, 1), %x, add(%acc, take(%x, %i)))
  } else {
    %acc
  }
}

def @main(%x: Tensor[(n,), float32]) -> float32 {
  @sum_loop(0, %x, 0f)
}
""",
        reference=lambda x: np.float32(x.astype(np.float64).sum()),
        bindings=[{"n": 0}, {"n": 1}, {"n": 5}, {"n": 33}],
    ),
    Case(
        name="mutual_recursion_parity_of_length",
        source="""
def @is_even(%k: int64) -> bool {
  if (equal(%k, 0i64)) { True } else { @is_odd(subtract(%k, 1i64)) }
}

def @is_odd(%k: int64) -> bool {
  if (equal(%k, 0i64)) { False } else { @is_even(subtract(%k, 1i64)) }
}

def @main(%x: Tensor[(n,), float32]) -> (bool, Tensor[(n,), float32]) {
  %even = @is_even(take(shape_of(%x), 0));
  (%even, where(%even, %x, negative(%x)))
}
""",
        reference=lambda x: (np.bool_(x.shape[0] % 2 == 0), x if x.shape[0] % 2 == 0 else -x),
        bindings=[{"n": 0}, {"n": 1}, {"n": 6}, {"n": 13}],
    ),
    Case(
        name="fibonacci_non_tail_recursion",
        source="""
def @fib(%k: int64) -> int64 {
  if (less(%k, 2i64)) {
    %k
  } else {
    add(@fib(subtract(%k, 1i64)), @fib(subtract(%k, 2i64)))
  }
}

def @main(%x: Tensor[(n,), int64]) -> Tensor[(n,), int64] {
  add(%x, @fib(take(shape_of(%x), 0)))
}
""",
        reference=lambda x: x + _fib(x.shape[0]),
        bindings=[{"n": 0}, {"n": 1}, {"n": 2}, {"n": 10}],
    ),
    Case(
        name="loop_with_tuple_state",
        source="""
def @loop(%i: int32, %state: (Tensor[(n,), float32], float32)) -> (Tensor[(n,), float32], float32) {
  if (less(%i, 3)) {
    %v = multiply(%state.0, 2f);
    @loop(add(%i, 1), (%v, add(%state.1, sum(%v))))
  } else {
    %state
  }
}

def @main(%x: Tensor[(n,), float32], %s: float32) -> (Tensor[(n,), float32], float32) {
  @loop(0, (%x, %s))
}
""",
        reference=_tuple_loop_ref,
        bindings=[{"n": 0}, {"n": 1}, {"n": 4}, {"n": 19}],
    ),
    Case(
        name="if_inside_global_called_on_two_shapes",
        source="""
def @pick(%v: Tensor[(k,), float32]) -> Tensor[(?,), float32] {
  if (greater(sum(%v), 0f)) { %v } else { concatenate((%v, %v)) }
}

def @main(%x: Tensor[(n,), float32], %y: Tensor[(m,), float32]) -> (Tensor[(?,), float32], Tensor[(?,), float32]) {
  (@pick(%x), @pick(concatenate((%x, %y))))
}
""",
        reference=lambda x, y: tuple(
            v.copy() if v.sum() > 0 else np.concatenate([v, v]) for v in (x, np.concatenate([x, y]))
        ),
        bindings=[{"n": 0, "m": 2}, {"n": 1, "m": 1}, {"n": 3, "m": 0}, {"n": 5, "m": 4}],
        inputs={"x": _signed_by_binding},
    ),
    Case(
        name="recursion_with_data_dependent_filter",
        source="""
def @shrink(%x: Tensor[(?,), float32], %i: int32) -> Tensor[(?,), float32] {
  if (less(%i, 3)) {
    %lower = subtract(%x, 0.5f);
    %keep = squeeze(argwhere(greater(%lower, 0f)), axis=[1]);
    @shrink(take(%lower, %keep, axis=0), add(%i, 1))
  } else {
    %x
  }
}

def @main(%x: Tensor[(n,), float32]) -> Tensor[(?,), float32] {
  @shrink(%x, 0)
}
""",
        reference=_shrink_ref,
        bindings=[{"n": 0}, {"n": 1}, {"n": 6}, {"n": 40}],
        inputs={"x": uniform(-1.0, 3.0)},
    ),
]
