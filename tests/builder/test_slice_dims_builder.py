"""The builder's slices by dims (issue 30, item 1): ``y[: n // 2]``, ``x[:, k:]`` and dim
steps become ``strided_slice`` dim attributes typed with numpy's clamping; the bounds a dim
cannot be are refused with what to write instead. (Numbers against numpy on random shapes:
``tests/e2e/test_symbolic_slices.py``.)"""

from __future__ import annotations

import re

import numpy as np
import pytest
import sympy

import dynshape
import dynshape.builder as ds
import ir
from vm.errors import RunTimeShapeError

n, m, k = ir.sym("n"), ir.sym("m"), ir.sym("k")


def test_slices_by_dims_are_typed_with_min_and_max() -> None:
    x, y, z = ds.tensor("x", ("n", "m")), ds.tensor("y", ("n",)), ds.tensor("z", ("k",))
    kd = z.shape[0]
    assert y[: n // 2].shape == (n // 2,)
    assert x[:, kd:].shape == (n, m - sympy.Min(k, m))
    assert y[:kd].shape == (sympy.Min(k, n),)
    assert x[kd:, ::2].shape[0] == n - sympy.Min(k, n)
    program = str(ds.build((y[: n // 2], x[:, kd:]), [x, y, z]))
    assert "strided_slice(%y, begin=[], end=[(n // 2)])" in program
    assert "strided_slice(%x, begin=[0, k], end=[])" in program
    assert "4611686018427387904" not in program  # a dim is written, never a stand-in


def test_the_int_path_keeps_int_attributes() -> None:
    x = ds.tensor("x", ("b", "n"))
    program = str(ds.build(x[:, :1], [x]))
    # the interior omitted end of axis 0 is an omitted bound (typed as such), not a dim: the
    # kernel's attributes stay ints, so no values are computed per call
    assert "strided_slice(%x, begin=[], end=[4611686018427387904, 1])" in program
    exe = dynshape.compile(ds.build(x[:, :1], [x]))
    assert "from input" not in exe.bytecode
    assert str(exe.outputs[0]) == "Tensor[(b, min(1, n)), float32]"


def test_never_positive_dim_bounds_and_steps_are_refused_with_a_hint() -> None:
    y, z = ds.tensor("y", ("n",)), ds.tensor("z", ("k",))
    kd = z.shape[0]
    with pytest.raises(
        dynshape.BuildError,
        match=r"slice start -k of axis 0 is never positive: numpy "
        r"counts -k from the end, except where it is 0, the start",
    ):
        y[-kd:]
    with pytest.raises(
        dynshape.BuildError,
        match=r"slice step -k of axis 0 is never positive: a dim "
        r"step is forward",
    ):
        y[::-kd]
    with pytest.raises(
        dynshape.BuildError, match=r"cannot index a tensor with the dim k: an int index"
    ):
        y[kd]
    with pytest.raises(dynshape.BuildError, match=r"must be an int or a dim"):
        y[: sympy.Rational(1, 2)]


def test_a_data_dependent_bound_is_a_clear_compile_error() -> None:
    x, y = ds.tensor("x", ("n",)), ds.tensor("y", ("m",))
    count = ds.argwhere(x > 0).shape[0]
    with pytest.raises(dynshape.BuildError) as info:
        dynshape.compile(ds.build(y[:count], [x, y]))
    message = str(info.value)
    # (the attribute prints the anonymous symbol's name: argwhere0, or another count)
    assert re.search(
        r"op strided_slice: attribute end=\[\w+\] uses \?, which no parameter", message
    )
    assert "passed as a tensor instead: dyn.strided_slice" in message


def test_a_dim_bound_that_may_be_negative_is_checked_at_run_time() -> None:
    y = ds.tensor("y", ("n",))
    vm = dynshape.VirtualMachine(dynshape.compile(ds.build(y[y.shape[0] - 3 :], [y])))
    np.testing.assert_array_equal(vm.run(np.arange(5, dtype=np.float32)), [2, 3, 4])
    with pytest.raises(RunTimeShapeError, match=r"begin\[0\] = n - 3 to be >= 0"):
        vm.run(np.arange(2, dtype=np.float32))


def test_the_ranges_known_while_tracing_fold_clamps_and_decide_facts() -> None:
    """``tracing_ranges`` (the ONNX importer's): the types of the calls traced inside are those
    ``build`` gives under the same ranges, so a clamp the ranges make moot is gone at once."""
    from dynshape.builder.trace import tracing_ranges

    x = ds.tensor("x", ("b", "n"))
    assert x[:, :1].shape == (b := ir.sym("b"), sympy.Min(1, n))
    ranges = {"n": (1, None)}
    with tracing_ranges(ranges):
        sliced = x[:, :1]
        assert sliced.shape == (b, 1)
        ranges["n"] = (3, None)  # narrowed as the caller goes: read at every call
        assert x[:, 1:3].shape == (b, 2)
        with pytest.raises(dynshape.BuildError, match="element count"):
            x[0].reshape(2)  # n == 2 is refuted under n >= 3 (deferred without ranges)
    assert x[:, :1].shape == (b, sympy.Min(1, n))  # the ranges end with the block
    assert x[0].reshape(2).shape == (2,)
    exe = dynshape.compile(ds.build(sliced, [x], ranges=ranges))
    assert str(exe.outputs[0]) == "Tensor[(b, 1), float32]"
