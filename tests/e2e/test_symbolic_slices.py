"""Slices of tensors whose length is a symbolic expression (``2*n``, ``3*n + 1``), with random
begin, end and strides (negative ones too): every dim the shape function writes (floors and
ceilings of fractions, mins and maxes) must compile into a shape program and give numpy's
result at every size."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import dynshape

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
