"""Reductions: sum, mean, max, min, prod, argmax, argmin with int and list axes (negative ones
too), keepdims, exclude, ``axis=[]``, all axes, and several dtypes (bool for max, min, argmax
and argmin; ints for mean, whose result is then float64).

Reductions without an identity (max, min, argmax, argmin) need non-empty reduced axes: their
cases bind the reduced dims to >= 1, or reduce static axes so the batch may still be 0.
"""

from __future__ import annotations

import numpy as np
from harness import Case, distinct, ints, uniform


def _arg_flat(x: np.ndarray, axes: tuple[int, ...], fn: str, keepdims: bool = False) -> np.ndarray:
    """argmax/argmin over ``axes`` flattened, in increasing axis order, into one axis."""
    kept = [a for a in range(x.ndim) if a not in axes]
    moved = x.transpose(kept + list(axes))
    size = int(np.prod([x.shape[a] for a in axes]))
    flat = moved.reshape([x.shape[a] for a in kept] + [size])
    out = getattr(flat, fn)(axis=-1)
    if keepdims:
        out = out.reshape([1 if a in axes else x.shape[a] for a in range(x.ndim)])
    return out


def _exclusive_reverse_cumsum(y):
    """Each element's sum of the elements after it along axis 0."""
    return y[::-1].cumsum(0)[::-1] - y


CASES = [
    Case(
        name="cumsum_inclusive_exclusive_reverse",
        source="""
def @main(%mask: Tensor[(b, n), int64], %y: Tensor[(n, 3), float32]) {
  (cumsum(%mask, axis=1), cumsum(%y, axis=0, exclusive=True, reverse=True), cumsum(%y, axis=-1))
}
""",
        reference=lambda mask, y: (mask.cumsum(1), _exclusive_reverse_cumsum(y), y.cumsum(-1)),
        bindings=[{"b": 0, "n": 3}, {"b": 2, "n": 1}, {"b": 3, "n": 0}, {"b": 2, "n": 6}],
    ),
    Case(
        name="cumprod_inclusive_exclusive_reverse",
        source="""
def @main(%k: Tensor[(b, n), int64], %y: Tensor[(n, 3), float32]) {
  (cumprod(%k, axis=1), cumprod(%y, axis=0, exclusive=True, reverse=True), cumprod(%y, axis=-1))
}
""",
        reference=lambda k, y: (
            k.cumprod(1),
            np.concatenate([y[::-1].cumprod(0)[::-1][1:], np.ones((min(len(y), 1), 3))]),
            y.cumprod(-1),
        ),
        bindings=[{"b": 0, "n": 3}, {"b": 2, "n": 1}, {"b": 3, "n": 0}, {"b": 2, "n": 6}],
        inputs={"k": ints(-3, 4), "y": uniform(0.5, 1.5)},
    ),
    Case(
        name="sum_axes_keepdims_exclude_empty_list",
        source="""
def @main(%x: Tensor[(n, m, 3), float32]) {
  (sum(%x, axis=1), sum(%x, axis=[0, 2], keepdims=True), sum(%x, axis=[-1], exclude=True), sum(%x), sum(%x, axis=[]))
}
""",
        reference=lambda x: (
            x.sum(1),
            x.sum((0, 2), keepdims=True),
            x.sum((0, 1)),
            x.sum(),
            x.copy(),
        ),
        bindings=[{"n": 0, "m": 2}, {"n": 1, "m": 1}, {"n": 3, "m": 0}, {"n": 5, "m": 4}],
    ),
    Case(
        name="sum_prod_ints",
        source="""
def @main(%a: Tensor[(n, m), int32], %b: Tensor[(n, 4), int64]) {
  (sum(%a), sum(%a, axis=0), prod(%b, axis=-1), prod(%b, axis=0, keepdims=True), prod(%a, axis=[0, 1]))
}
""",
        reference=lambda a, b: (
            a.sum(),
            a.sum(0),
            b.prod(-1),
            b.prod(0, keepdims=True),
            a.prod(),
        ),
        bindings=[{"n": 0, "m": 3}, {"n": 1, "m": 1}, {"n": 4, "m": 7}, {"n": 9, "m": 2}],
        inputs={"a": ints(-1, 2), "b": ints(-2, 3)},
    ),
    Case(
        name="mean_float64_and_exclude",
        source="""
def @main(%x: Tensor[(n, 6), float64], %y: Tensor[(4, m, 2), float32]) {
  (mean(%x, axis=1), mean(%x, axis=[-1], keepdims=True), mean(%y, axis=[1], exclude=True), mean(%y, axis=[0, 2], keepdims=True))
}
""",
        reference=lambda x, y: (
            x.mean(1),
            x.mean(-1, keepdims=True),
            y.mean((0, 2)),
            y.mean((0, 2), keepdims=True),
        ),
        bindings=[{"n": 0, "m": 3}, {"n": 1, "m": 0}, {"n": 4, "m": 1}, {"n": 7, "m": 5}],
    ),
    Case(
        name="max_min_over_static_axis",
        source="""
def @main(%x: Tensor[(n, 5), float32], %y: Tensor[(n, 3), int64]) {
  (max(%x, axis=1), min(%x, axis=-1, keepdims=True), max(%y, axis=[1], keepdims=True), min(%y, axis=[0], exclude=True))
}
""",
        reference=lambda x, y: (
            x.max(1),
            x.min(-1, keepdims=True),
            y.max(1, keepdims=True),
            y.min(1),
        ),
        bindings=[{"n": 0}, {"n": 1}, {"n": 6}, {"n": 13}],
    ),
    Case(
        name="max_min_all_axes_nonempty",
        source="""
def @main(%x: Tensor[(n, m), uint8], %y: Tensor[(m, n), float64]) {
  (max(%x), min(%x, axis=0), max(%y, axis=[0, 1], keepdims=True), min(%y, axis=None))
}
""",
        reference=lambda x, y: (x.max(), x.min(0), y.max(keepdims=True), y.min()),
        bindings=[{"n": 1, "m": 1}, {"n": 2, "m": 5}, {"n": 7, "m": 3}],
        inputs={"x": ints(0, 256)},
    ),
    Case(
        name="argmax_argmin_several_axes",
        source="""
def @main(%x: Tensor[(n, 3, m), float32]) {
  (argmax(%x, axis=[1, 2]), argmin(%x, axis=-1, keepdims=True), argmin(%x, axis=[0, 2], exclude=True))
}
""",
        reference=lambda x: (
            _arg_flat(x, (1, 2), "argmax"),
            x.argmin(-1)[..., None],
            x.argmin(1),
        ),
        bindings=[{"n": 0, "m": 2}, {"n": 1, "m": 1}, {"n": 4, "m": 3}, {"n": 6, "m": 5}],
        inputs={"x": distinct(0.5)},
    ),
    Case(
        name="argmax_argmin_all_axes_and_exclude_int",
        source="""
def @main(%x: Tensor[(4, n, 2), int32]) -> (int64, Tensor[(4,), int64], Tensor[(1, 1, 2), int64]) {
  (argmax(%x), argmax(%x, axis=[0], exclude=True), argmin(%x, axis=[0, 1], keepdims=True))
}
""",
        reference=lambda x: (
            x.argmax(),
            _arg_flat(x, (1, 2), "argmax"),
            _arg_flat(x, (0, 1), "argmin", keepdims=True),
        ),
        bindings=[{"n": 1}, {"n": 3}, {"n": 8}],
        inputs={"x": distinct()},
    ),
    Case(
        name="bool_max_min_argmax_argmin",
        source="""
def @main(%x: Tensor[(n, m), bool]) -> (Tensor[(n,), bool], bool, Tensor[(1, m), bool], Tensor[(m,), int64], Tensor[(1, 1), int64], int64) {
  (max(%x, axis=1), min(%x), min(%x, axis=0, keepdims=True), argmax(%x, axis=0), argmin(%x, axis=[0, 1], keepdims=True), argmax(%x))
}
""",
        reference=lambda x: (
            x.max(1),
            x.min(),
            x.min(0, keepdims=True),
            x.argmax(0),
            _arg_flat(x, (0, 1), "argmin", keepdims=True),
            x.argmax(),
        ),
        bindings=[{"n": 1, "m": 1}, {"n": 2, "m": 5}, {"n": 7, "m": 3}, {"n": 16, "m": 4}],
    ),
    Case(
        name="mean_of_ints_is_float64",
        source="""
def @main(%a: Tensor[(n, m), int32], %b: Tensor[(n, 3), uint8]) -> (Tensor[(n,), float64], float64, Tensor[(1, 3), float64]) {
  (mean(%a, axis=1), mean(%a), mean(%b, axis=0, keepdims=True))
}
""",
        reference=lambda a, b: (a.mean(1), a.mean(), b.mean(0, keepdims=True)),
        bindings=[{"n": 1, "m": 1}, {"n": 4, "m": 7}, {"n": 9, "m": 2}],
        inputs={"a": ints(-1000, 1000), "b": ints(0, 256)},
    ),
    Case(
        name="uint8_sum_wraps_and_bool_counts",
        source="""
def @main(%x: Tensor[(n, m), uint8], %f: Tensor[(n, m), float32]) {
  %pos = cast(greater(%f, 0f), dtype="int32");
  (sum(%x, axis=1), sum(%pos, axis=-1), sum(%pos))
}
""",
        reference=lambda x, f: (
            x.sum(axis=1, dtype=np.uint8),
            (f > 0).astype(np.int32).sum(-1),
            (f > 0).astype(np.int32).sum(),
        ),
        bindings=[{"n": 0, "m": 3}, {"n": 1, "m": 1}, {"n": 4, "m": 9}, {"n": 9, "m": 2}],
        inputs={"x": ints(0, 256)},
    ),
    Case(
        name="prod_sum_of_empty_and_rank0",
        source="""
def @main(%x: Tensor[(n,), float32]) -> (float32, float32, float32, Tensor[(1,), float32]) {
  %s = sum(%x);
  (prod(%x), %s, sum(%s), prod(%x, keepdims=True))
}
""",
        reference=lambda x: (x.prod(), x.sum(), x.sum(), x.prod(keepdims=True)),
        bindings=[{"n": 0}, {"n": 1}, {"n": 4}, {"n": 11}],
    ),
    Case(
        name="normalize_rows_by_mean_and_max",
        source="""
def @main(%x: Tensor[(n, m), float32]) -> Tensor[(n, m), float32] {
  %centered = subtract(%x, mean(%x, axis=1, keepdims=True));
  %scale = max(abs(%centered), axis=-1, keepdims=True);
  divide(%centered, add(%scale, 1f))
}
""",
        reference=lambda x: (
            (x - x.mean(1, keepdims=True))
            / (np.abs(x - x.mean(1, keepdims=True)).max(-1, keepdims=True) + 1)
        ),
        bindings=[{"n": 0, "m": 3}, {"n": 1, "m": 1}, {"n": 5, "m": 8}, {"n": 12, "m": 2}],
    ),
]
