"""Slices of tensors whose length is a symbolic expression (``2*n``, ``3*n + 1``), with random
begin, end and strides (negative ones too): every dim the shape function writes (floors and
ceilings of fractions, mins and maxes) must compile into a shape program and give numpy's
result at every size."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dynshape
import dynshape.builder as ds
from vm.errors import RunTimeShapeError

_INDEX = st.integers(-7, 7)
_STRIDE = st.integers(-3, 3).filter(lambda s: s != 0)


@settings(max_examples=40, deadline=None)
@given(
    copies=st.integers(1, 3),
    extra=st.booleans(),
    begin=_INDEX,
    end=_INDEX,
    stride=_STRIDE,
)
def test_a_strided_slice_of_a_symbolic_length_runs_as_numpy(
    copies: int, extra: bool, begin: int, end: int, stride: int
) -> None:
    # (y, y, ...) concatenated: length copies*n, and one more element with `extra`.
    parts = ", ".join(["%y"] * copies + (["%one"] if extra else []))
    source = f"""
    def @main(%y: Tensor[(n,), float32], %one: Tensor[(1,), float32]) {{
      strided_slice(concatenate(({parts},)), begin=[{begin}], end=[{end}], strides=[{stride}])
    }}
    """
    vm = dynshape.VirtualMachine(dynshape.compile(source))
    one = np.array([-1.0], dtype=np.float32)
    for n in (0, 1, 2, 3, 5, 8):
        y = np.arange(n, dtype=np.float32)
        whole = np.concatenate([y] * copies + ([one] if extra else []))
        got = vm.run(y, one)
        np.testing.assert_array_equal(got, whole[begin:end:stride], err_msg=f"n = {n}")


def test_the_slice_that_needed_a_fraction_of_a_min_compiles() -> None:
    # Its output dim is written by sympy as ceil(min(5, 2*n)/2) - min(2, 2*n)/2.
    source = """
    def @main(%y: Tensor[(n,), float32]) {
      strided_slice(concatenate((%y, %y)), begin=[2], end=[5], strides=[2])
    }
    """
    vm = dynshape.VirtualMachine(dynshape.compile(source))
    for n in range(6):
        y = np.arange(n, dtype=np.float32)
        np.testing.assert_array_equal(vm.run(y), np.concatenate((y, y))[2:5:2])


def test_a_bound_of_two_to_the_62_is_an_omitted_one() -> None:
    """numpy's "to the end" idiom (the builder's and the importer's stand-in where an interior
    bound must be written) types as the whole axis, not as ``min(2**62, b)``; reversed too."""
    far = 1 << 62
    source = f"""
    def @main(%x: Tensor[(b, n), float32]) {{
      (strided_slice(%x, begin=[0, 0], end=[{far}, 1]),
       strided_slice(%x, begin=[{far}, 1], end=[-{far}, {far}], strides=[-1, 1]))
    }}
    """
    types = str(dynshape.stages(source)["types"]["main"])
    assert "Tensor[(b, min(1, n)), float32], Tensor[(b, n - min(1, n)), float32]" in types, types
    assert str(far) not in types.split("->")[-1]
    vm = dynshape.VirtualMachine(dynshape.compile(source))
    for b, n in [(0, 0), (1, 3), (4, 1), (3, 5)]:
        x = np.arange(b * n, dtype=np.float32).reshape(b, n)
        first, second = vm.run(x)
        np.testing.assert_array_equal(first, x[:far, :1])
        np.testing.assert_array_equal(second, x[far:-far:-1, 1:far])


# ---- bounds and steps that are dims (issue 30, item 1) ----------------------------------------

#: A bound of a slice of a (n,) vector: an int, or a dim of the symbols n and k.
_DIM_BOUNDS = ["k", "n", "(n // 2)", "k + 2", "2*k", "max(k, 3)", "min(k, n)"]


def _bound_value(text: str, n: int, k: int) -> int:
    return int(eval(text, {"max": max, "min": min}, {"n": n, "k": k}))


@settings(max_examples=40, deadline=None)
@given(
    begin=st.one_of(st.none(), _INDEX, st.sampled_from(_DIM_BOUNDS)),
    end=st.one_of(st.none(), _INDEX, st.sampled_from(_DIM_BOUNDS)),
    stride=st.one_of(_STRIDE, st.just("k")),
    bindings=st.lists(st.tuples(st.integers(0, 9), st.integers(0, 12)), min_size=1, max_size=4),
)
def test_a_slice_by_dims_runs_as_numpy(
    begin: str | int | None, end: str | int | None, stride: int | str, bindings: list[Any]
) -> None:
    """``x[begin:end:stride]`` with dims among them, on random sizes and dim values: k > n,
    k = 0 and empty results included; a dim stride is k, so k = 0 is its run-time check."""
    far = 1 << 62
    forward = stride == "k" or int(stride) > 0
    b = begin if begin is not None else (0 if forward else -1)
    e = end if end is not None else (far if forward else -far)
    source = f"""
    def @main(%x: Tensor[(n,), float32], %y: Tensor[(k,), float32]) {{
      strided_slice(%x, begin=[{b}], end=[{e}], strides=[{stride}])
    }}
    """
    vm = dynshape.VirtualMachine(dynshape.compile(source))
    for n, k in bindings:
        x = np.arange(n, dtype=np.float32)
        y = np.zeros(k, np.float32)
        step = k if stride == "k" else int(stride)
        bv = None if begin is None else _bound_value(str(begin), n, k)
        ev = None if end is None else _bound_value(str(end), n, k)
        if step == 0:
            with pytest.raises(RunTimeShapeError, match=r"strides\[0\] = k to be >= 1"):
                vm.run(x, y)
            continue
        np.testing.assert_array_equal(vm.run(x, y), x[bv:ev:step], err_msg=f"n={n}, k={k}")


@settings(max_examples=25, deadline=None)
@given(
    shape=st.tuples(st.integers(0, 6), st.integers(0, 6)),
    k=st.integers(0, 9),
    step=st.sampled_from([1, 2, -1, -2]),
)
def test_builder_slices_by_dims_run_as_numpy(shape: tuple[int, int], k: int, step: int) -> None:
    """The builder: ``y[: n // 2]``, ``x[:, k:]``, ``x[k::step]`` (negative steps too),
    ``x[:k, ::step]`` and a slice fused with an add, against numpy on random shapes and k."""
    x = ds.tensor("x", ("n", "m"))
    y = ds.tensor("y", ("n",))
    kk = ds.tensor("kk", ("k",))
    n, kd = x.shape[0], kk.shape[0]
    outs = (y[: n // 2], x[:, kd:], x[kd::step], x[:kd, ::step], y[kd:] + 1.0)
    vm = dynshape.VirtualMachine(dynshape.compile(ds.build(outs, [x, y, kk])))
    xv = np.arange(shape[0] * shape[1], dtype=np.float32).reshape(shape)
    yv = np.arange(shape[0], dtype=np.float32)
    got = vm.run(xv, yv, np.zeros(k, np.float32))
    nv = shape[0]
    want = (yv[: nv // 2], xv[:, k:], xv[k::step], xv[:k, ::step], yv[k:] + 1.0)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g, w)
