"""Kernels never build temporaries that their attributes or input values size.

An executable file may give a kernel attributes that disagree with the output buffer its
bytecode allocated (``tile`` with reps ``[100000, 3000]`` on a (2, 3) input and a (4, 6)
output). Every kernel that would build something of an attribute- or value-decided size checks
that size against its output first, in integer arithmetic, and raises ValueError naming the op
and the shapes (which the VM reports as a KernelError naming the instruction). These tests give
each such kernel inconsistent attributes and check that it fails before allocating anything big
(the peak traced by ``tracemalloc``, which numpy reports its buffers to), and that consistent
attributes still give numpy's answer.
"""

from __future__ import annotations

import math
import tracemalloc
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from vm_testlib import KERNEL_SETTINGS, run_kernel

from vm import Assembler, Executable, KernelError, VirtualMachine, tensor
from vm.kernels import get_kernel_factory
from vm.kernels.nn import PAD_FACTOR, PAD_SLACK

#: What a refused call may allocate at its peak (the test's own small arrays are made first).
SMALL = 1 << 20


def refused(
    op: str, attrs: Mapping[str, Any], inputs: Sequence[Any], outs: Sequence[np.ndarray], match: str
) -> str:
    """Run ``op`` on inconsistent attributes: it raises ValueError matching ``match`` and its
    peak allocation stays under ``SMALL``. Returns the message."""
    kernel = get_kernel_factory(op)(dict(attrs))
    tracemalloc.start()
    try:
        with pytest.raises(ValueError, match=match) as info:
            kernel(*inputs, *outs)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < SMALL, f"{op} allocated {peak} bytes before failing"
    return str(info.value)


def f32(*shape: int) -> np.ndarray:
    return np.arange(math.prod(shape), dtype=np.float32).reshape(shape)


# ---- tile and repeat -------------------------------------------------------------------------
def test_tile_with_huge_reps_fails_before_building_them():
    msg = refused(
        "tile",
        {"reps": (100000, 3000)},
        [f32(2, 3)],
        [np.empty((4, 6), np.float32)],
        r"tile: reps \(100000, 3000\) on input shape \(2, 3\) give shape \(200000, 9000\), "
        r"but the output is \(4, 6\)",
    )
    assert "tile" in msg


def test_tile_with_negative_reps_is_refused():
    refused("tile", {"reps": (-1, 2)}, [f32(2, 3)], [np.empty((2, 6), np.float32)], "tile: reps")


@KERNEL_SETTINGS
@given(
    x=hnp.arrays(np.int16, hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=3)),
    reps=st.lists(st.integers(0, 3), max_size=4).map(tuple),
)
def test_tile_matches_numpy(x, reps):
    expected = np.tile(x, reps)
    (got,) = run_kernel("tile", {"reps": reps}, [x], [(expected.shape, x.dtype)])
    np.testing.assert_array_equal(got, expected)


def test_repeat_with_a_huge_count_fails_before_building_it():
    refused(
        "repeat",
        {"repeats": 10**12, "axis": 0},
        [f32(2, 3)],
        [np.empty((4, 3), np.float32)],
        r"repeat: 1000000000000 repeats along axis 0 of input shape \(2, 3\) give shape "
        r"\(2000000000000, 3\), but the output is \(4, 3\)",
    )
    refused(
        "repeat",
        {"repeats": 10**9, "axis": None},
        [f32(2, 3)],
        [np.empty((12,), np.float32)],
        r"repeat: .* give shape \(6000000000,\), but the output is \(12,\)",
    )
    refused(
        "repeat",
        {"repeats": 2, "axis": 5},
        [f32(2, 3)],
        [np.empty((4, 3), np.float32)],
        "repeat: axis 5 is out of bounds",
    )


def test_repeat_refuses_a_sequence_of_counts_when_bound():
    with pytest.raises(TypeError, match="repeats must be an int"):
        get_kernel_factory("repeat")({"repeats": (2, 3), "axis": 0})


@KERNEL_SETTINGS
@given(
    x=hnp.arrays(np.float32, hnp.array_shapes(min_dims=1, max_dims=3, min_side=0, max_side=3)),
    repeats=st.sampled_from([0, 1, 2, 3, 17]),  # 17: the broadcast path on the last axis too
    data=st.data(),
)
def test_repeat_matches_numpy(x, repeats, data):
    axis = data.draw(st.one_of(st.none(), st.integers(-x.ndim, x.ndim - 1)))
    expected = np.repeat(x, repeats, axis=axis)
    attrs = {"repeats": repeats, "axis": axis}
    (got,) = run_kernel("repeat", attrs, [x], [(expected.shape, x.dtype)])
    np.testing.assert_array_equal(got, expected)


def test_repeat_of_a_scalar_along_no_axis():
    (got,) = run_kernel("repeat", {"repeats": 3, "axis": None}, [np.array(7)], [((3,), int)])
    np.testing.assert_array_equal(got, [7, 7, 7])


# ---- arange ----------------------------------------------------------------------------------
def test_arange_whose_values_ask_for_more_than_the_output_fails_before_building_them():
    start, stop, step = np.array(0.0), np.array(1e12), np.array(1.0)
    refused(
        "arange",
        {},
        [start, stop, step],
        [np.empty((5,), np.float64)],
        r"arange\(0.0, 1000000000000.0, 1.0\) has 1000000000000 values but the output has "
        r"shape \(5,\)",
    )
    refused(
        "arange",
        {},
        [np.array(0), np.array(5), np.array(0)],
        [np.empty((5,), np.int64)],
        "arange: step must not be 0",
    )


def test_arange_matches_numpy():
    for args, dtype in [((0, 5, 1), np.int64), ((1.5, -2.0, -0.5), np.float32), ((3, 3, 1), int)]:
        expected = np.arange(*args, dtype=dtype)
        ins = [np.array(v, dtype=dtype) for v in args]
        (got,) = run_kernel("arange", {}, ins, [(expected.shape, dtype)])
        np.testing.assert_array_equal(got, expected)


# ---- padding copies in convolution and pooling -----------------------------------------------
CONV = {"strides": (1, 1), "dilation": (1, 1), "groups": 1}


def test_conv2d_with_huge_padding_and_stride_fails_before_padding():
    # stride 10^6 keeps the output 1 x 1, so only the padded copy would be huge (10^12 elements)
    attrs = {**CONV, "strides": (10**6, 10**6), "padding": (500_000, 500_000)}
    msg = refused(
        "nn.conv2d",
        attrs,
        [f32(1, 1, 2, 2), np.ones((1, 1, 1, 1), np.float32)],
        [np.empty((1, 1, 1, 1), np.float32)],
        r"nn.conv2d: padding \(500000, 500000, 500000, 500000\) on input shape \(1, 1, 2, 2\) "
        r"gives a padded copy of shape \(1, 1, 1000002, 1000002\)",
    )
    assert f"{PAD_FACTOR} times" in msg


def test_conv2d_padding_that_disagrees_with_the_output_fails_before_padding():
    refused(
        "nn.conv2d",
        {**CONV, "padding": (3000, 3000)},
        [f32(1, 1, 2, 2), np.ones((1, 1, 1, 1), np.float32)],
        [np.empty((1, 1, 2, 2), np.float32)],
        r"nn.conv2d: (output H, W should be \(6002, 6002\)|padding)",
    )


@pytest.mark.parametrize("op", ["nn.max_pool2d", "nn.avg_pool2d"])
def test_pools_with_huge_padding_fail_before_padding(op):
    attrs = {
        "pool_size": (100_000, 100_000),
        "strides": (10**9, 10**9),
        "padding": (50_000,),
        "dilation": (1, 1),
    }
    refused(
        op,
        attrs,
        [f32(1, 1, 2, 2)],
        [np.empty((1, 1, 1, 1), np.float32)],
        rf"{op}: padding \(50000, 50000, 50000, 50000\) on input shape \(1, 1, 2, 2\) gives a "
        r"padded copy of shape \(1, 1, 100002, 100002\), more than",
    )


def test_avg_pool_of_an_empty_batch_does_not_pad_a_huge_plane():
    # no element to pad, but the plane of counts would still be 10^10 elements
    attrs = {
        "pool_size": (100_000, 100_000),
        "strides": (10**9, 10**9),
        "padding": (50_000,),
        "dilation": (1, 1),
    }
    refused(
        "nn.avg_pool2d",
        attrs,
        [np.empty((0, 3, 2, 2), np.float32)],
        [np.empty((0, 3, 1, 1), np.float32)],
        "nn.avg_pool2d: padding",
    )


def test_negative_padding_is_refused_by_name():
    refused(
        "nn.max_pool2d",
        {"pool_size": (1, 1), "strides": (1, 1), "padding": (-1, 0, 0, 0), "dilation": (1, 1)},
        [f32(1, 1, 2, 2)],
        [np.empty((1, 1, 1, 2), np.float32)],
        r"nn.max_pool2d: padding \(-1, 0, 0, 0\) has a negative entry",
    )


def test_conv2d_with_huge_groups_and_no_channels_does_not_loop():
    attrs = {**CONV, "padding": (0, 0), "groups": 10**15}
    x, w = np.empty((1, 0, 2, 2), np.float32), np.empty((0, 0, 1, 1), np.float32)
    (got,) = run_kernel("nn.conv2d", attrs, [x, w], [((1, 0, 2, 2), np.float32)])
    assert got.shape == (1, 0, 2, 2)
    x, w = np.empty((1, 0, 2, 2), np.float32), np.empty((2, 0, 1, 1), np.float32)
    attrs = {**attrs, "groups": 2}
    (got,) = run_kernel("nn.conv2d", attrs, [x, w], [((1, 2, 2, 2), np.float32)])
    np.testing.assert_array_equal(got, 0)


def test_ordinary_padding_stays_within_the_bound():
    # "same" padding of a 7 x 7 window over 1 x 1 maps: 49 padded elements per input element,
    # the worst a real network does; allowed up to PAD_FACTOR * (input + output) + PAD_SLACK
    n, c = 2, 64
    x = np.ones((n, c, 1, 1), np.float32)
    attrs = {"pool_size": (7, 7), "strides": (1, 1), "padding": (3, 3), "dilation": (1, 1)}
    assert n * c * 49 <= PAD_FACTOR * 2 * n * c + PAD_SLACK
    (got,) = run_kernel("nn.avg_pool2d", attrs, [x], [((n, c, 1, 1), np.float32)])
    np.testing.assert_array_equal(got, 1)
    w = np.ones((5, c, 3, 3), np.float32)
    (got,) = run_kernel("nn.conv2d", {**CONV, "padding": (1, 1)}, [x, w], [((n, 5, 1, 1), "f4")])
    np.testing.assert_array_equal(got, c)


# ---- data-dependent kernels: topk, argwhere --------------------------------------------------
def test_topk_with_a_k_larger_than_the_axis_is_refused_before_sorting():
    attrs = {"axis": -1, "ret_type": "both", "is_ascend": False, "dtype": "int64"}
    x = f32(3, 4)
    refused(
        "topk",
        {**attrs, "k": 9},
        [x],
        [np.empty((3, 9), np.float32), np.empty((3, 9), np.int64)],
        r"topk: outputs \[\(3, 9\), \(3, 9\)\] do not fit input shape \(3, 4\)",
    )
    refused(
        "topk",
        {**attrs, "k": 2},
        [x],
        [np.empty((3, 2), np.float32), np.empty((4, 2), np.int64)],
        "topk: outputs",
    )
    refused("topk", {**attrs, "k": 2}, [x], [np.empty((3, 2), np.float32)], "makes 2 outputs")
    refused(
        "dyn.topk",
        {**attrs, "axis": 2},
        [x, np.array(2)],
        [np.empty((3, 2), np.float32), np.empty((3, 2), np.int64)],
        "topk: axis 2 is out of bounds",
    )


def test_topk_still_matches_numpy():
    x = np.array([[3, 1, 3, 2], [0, 5, 5, 1]], np.float32)
    attrs = {"k": 2, "axis": -1, "ret_type": "both", "is_ascend": False, "dtype": "int64"}
    values, indices = run_kernel("topk", attrs, [x], [((2, 2), np.float32), ((2, 2), np.int64)])
    np.testing.assert_array_equal(values, [[3, 3], [5, 5]])
    np.testing.assert_array_equal(indices, [[0, 2], [1, 2]])


def test_argwhere_count_is_checked_before_the_indices_are_built():
    x = np.ones((300, 300), bool)  # 90000 non-zeros: 1.4 MB of indices
    refused(
        "argwhere",
        {},
        [x],
        [np.empty((3, 2), np.int64)],
        r"argwhere: input of shape \(300, 300\) has 90000 non-zero elements, giving shape "
        r"\(90000, 2\), but the output is \(3, 2\)",
    )
    x = np.array([[0, 2], [3, 0]])
    (got,) = run_kernel("argwhere", {}, [x], [((2, 2), np.int64)])
    np.testing.assert_array_equal(got, np.argwhere(x))


# ---- split, nn.pad, erf ----------------------------------------------------------------------
def test_split_into_more_parts_than_outputs_is_refused_before_splitting():
    refused(
        "split",
        {"indices_or_sections": 10**9, "axis": 0},
        [np.empty((0, 3), np.float32)],
        [np.empty((0, 3), np.float32)],
        r"split: indices_or_sections 1000000000 make 1000000000 parts but 1 outputs were given",
    )
    refused(
        "split",
        {"indices_or_sections": tuple(range(10_000)), "axis": 0},
        [f32(4, 3)],
        [np.empty((0, 3), np.float32)] * 2,
        "make 10001 parts but 2 outputs",
    )
    parts = run_kernel("split", {"indices_or_sections": (1, 3), "axis": 0}, [f32(4, 3)],
                       [((1, 3), "f4"), ((2, 3), "f4"), ((1, 3), "f4")])  # fmt: skip
    for got, want in zip(parts, np.split(f32(4, 3), [1, 3]), strict=True):
        np.testing.assert_array_equal(got, want)


def test_pad_widths_that_disagree_with_the_output_are_refused():
    refused(
        "nn.pad",
        {"pad_width": ((1, 1), (10**9, 0)), "pad_value": 0.0},
        [f32(2, 3)],
        [np.empty((4, 5), np.float32)],
        r"nn.pad: pad_width .* on input shape \(2, 3\) gives shape \(4, 1000000003\), "
        r"but the output is \(4, 5\)",
    )
    (got,) = run_kernel(
        "nn.pad", {"pad_width": ((1, 0), (0, 2)), "pad_value": -1.0}, [f32(2, 3)], [((3, 5), "f4")]
    )
    np.testing.assert_array_equal(got, np.pad(f32(2, 3), ((1, 0), (0, 2)), constant_values=-1))


def test_erf_works_in_fixed_size_chunks():
    from vm.kernels.erf import ERF_CHUNK

    x = np.linspace(-3, 3, 3 * ERF_CHUNK + 5).astype(np.float32)
    want = np.array([math.erf(v) for v in x.tolist()]).astype(np.float32)
    (got,) = run_kernel("erf", {}, [x], [(x.shape, np.float32)])
    # float32: within 4 ulp of the correctly rounded value (test_erf.py)
    ulps = np.abs(got.view(np.int32).astype(np.int64) - want.view(np.int32).astype(np.int64))
    assert ulps.max() <= 4
    get_kernel_factory("erf")({})(x, x)  # in place
    np.testing.assert_array_equal(x, got)
    refused("erf", {}, [f32(2, 3)], [np.empty((3, 2), np.float32)], r"erf: input shape \(2, 3\)")


# ---- through the VM: a crafted executable gives a KernelError, quickly ------------------------
def test_crafted_tile_in_an_executable_file_is_a_kernel_error(tmp_path):
    asm = Assembler()
    k = asm.kernel("tile", {"reps": (100000, 3000)})
    f = asm.function("main", [("x", tensor("float32", (2, 3)))])
    (x,) = f.params
    out = f.empty((4, 6), "float32")
    f.invoke(k, [x], [out])
    f.ret(out)
    path = tmp_path / "crafted.dsx"
    asm.build().save(path)
    vm = VirtualMachine(Executable.load(path))
    tracemalloc.start()
    try:
        with pytest.raises(KernelError, match=r"kernel tile failed: ValueError: tile: reps") as e:
            vm.run(f32(2, 3))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert "(200000, 9000), but the output is (4, 6)" in str(e.value)
    assert peak < SMALL
