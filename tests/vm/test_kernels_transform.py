"""Layout kernels against plain numpy."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from vm_testlib import (
    ALL,
    FLOATS,
    KERNEL_SETTINGS,
    arrays,
    assert_same,
    run_kernel,
    run_like,
    shapes,
    tol,
)

from vm.kernels import get_kernel_factory

DTYPE = st.sampled_from(ALL)


@KERNEL_SETTINGS
@given(data=st.data(), dtype=DTYPE)
def test_reshape_family(data, dtype):
    x = data.draw(arrays(dtype, shapes()))
    flat = x.reshape(-1)
    assert_same(run_like("reshape", {"newshape": (-1,)}, [x], flat), flat)
    e = np.expand_dims(x, 0)
    assert_same(run_like("expand_dims", {"axis": 0, "num_newaxis": 1}, [x], e), e)
    s = np.squeeze(e, 0)
    assert_same(run_like("squeeze", {"axis": (0,)}, [e], s), s)
    if x.ndim >= 1:
        b = x.reshape(x.shape[0], -1) if x.shape[0] else x.reshape(0, int(np.prod(x.shape[1:])))
        assert_same(run_like("nn.batch_flatten", {}, [x], b), b)


@KERNEL_SETTINGS
@given(data=st.data(), dtype=DTYPE)
def test_transpose(data, dtype):
    x = data.draw(arrays(dtype, shapes()))
    perm = tuple(data.draw(st.permutations(range(x.ndim))))
    for axes in (None, perm):
        e = np.transpose(x, axes)
        assert_same(run_like("transpose", {"axes": axes}, [x], e), e)


@KERNEL_SETTINGS
@given(data=st.data(), dtype=DTYPE)
def test_concatenate_stack_split(data, dtype):
    shape = data.draw(shapes(min_dims=1))
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    parts = []
    for _ in range(data.draw(st.integers(1, 3))):
        s = list(shape)
        s[axis] = data.draw(st.integers(0, 3))
        parts.append(data.draw(arrays(dtype, tuple(s))))
    e = np.concatenate(parts, axis=axis)
    assert_same(run_like("concatenate", {"axis": axis}, [tuple(parts)], e), e)
    same = [data.draw(arrays(dtype, shape)) for _ in range(len(parts))]
    e = np.stack(same, axis=axis)
    assert_same(run_like("stack", {"axis": axis}, [tuple(same)], e), e)
    # split: sections dividing the axis, and explicit indices
    n = e.shape[axis]
    for spec in ([1] if n == 0 else [1, n]) + [(0, n // 2)]:
        ref = np.split(e, list(spec) if isinstance(spec, tuple) else spec, axis=axis)
        got = run_kernel(
            "split",
            {"indices_or_sections": spec, "axis": axis},
            [e],
            [(r.shape, r.dtype) for r in ref],
        )
        for g, r in zip(got, ref, strict=True):
            assert_same(g, r)


@KERNEL_SETTINGS
@given(data=st.data(), dtype=DTYPE)
def test_strided_slice(data, dtype):
    x = data.draw(arrays(dtype, shapes(min_dims=1, max_side=5)))
    k = data.draw(st.integers(1, x.ndim))
    begin = tuple(data.draw(st.integers(-6, 6)) for _ in range(k))
    end = tuple(data.draw(st.integers(-6, 6)) for _ in range(k))
    strides = data.draw(st.one_of(st.none(), st.tuples(*[st.sampled_from([-2, -1, 1, 2])] * k)))
    steps = strides or (1,) * k
    e = x[tuple(slice(b, en, s) for b, en, s in zip(begin, end, steps, strict=True))]
    attrs = {"begin": begin, "end": end, "strides": strides}
    assert_same(run_like("strided_slice", attrs, [x], e), e)


@KERNEL_SETTINGS
@given(data=st.data(), dtype=DTYPE, itype=st.sampled_from(["int32", "int64"]))
def test_take(data, dtype, itype):
    x = data.draw(arrays(dtype, shapes(min_dims=1, min_side=1)))
    axis = data.draw(st.one_of(st.none(), st.integers(-x.ndim, x.ndim - 1)))
    n = x.size if axis is None else x.shape[axis]
    idx = data.draw(arrays(itype, shapes(max_dims=2)).map(lambda a: a % n - (n // 2)))
    e = np.take(x, idx, axis=axis)
    assert_same(run_like("take", {"axis": axis}, [x, idx], e), e)


@pytest.mark.parametrize("itype", ["int32", "int64", "uint16"])
@pytest.mark.parametrize("axis", [None, 0, 1, -1])
def test_take_of_many_indices_checks_them_all(axis, itype):
    # at and above CHECKED_TAKE_MIN the kernel checks the indices with min/max, then wraps:
    # in-range ones (negative too) gather as np.take, one out of range raises numpy's error
    from vm.kernels.transform import CHECKED_TAKE_MIN

    rng = np.random.default_rng(0)
    x = rng.standard_normal((37, 129)).astype(np.float32)
    n = x.size if axis is None else x.shape[axis]
    for size in (CHECKED_TAKE_MIN - 1, CHECKED_TAKE_MIN, 3 * CHECKED_TAKE_MIN + 5):
        low = 0 if itype.startswith("u") else -n
        idx = rng.integers(low, n, size).astype(itype)
        e = np.take(x, idx, axis=axis)
        assert_same(run_like("take", {"axis": axis}, [x, idx], e), e)
        for bad in (n, -n - 1):
            if bad < 0 and itype.startswith("u"):
                continue
            wrong = idx.astype(np.int64)
            wrong[size // 2] = bad
            with pytest.raises(IndexError, match="out of bounds"):
                run_like("take", {"axis": axis}, [x, wrong], e)


@KERNEL_SETTINGS
@given(data=st.data(), dtype=DTYPE)
def test_tile_repeat_broadcast_pad(data, dtype):
    x = data.draw(arrays(dtype, shapes(max_side=3)))
    reps = tuple(data.draw(st.lists(st.integers(0, 3), min_size=0, max_size=3)))
    e = np.tile(x, reps)
    assert_same(run_like("tile", {"reps": reps}, [x], e), e)
    axis = data.draw(st.one_of(st.none(), st.integers(-x.ndim, x.ndim - 1))) if x.ndim else None
    repeats = data.draw(st.integers(0, 3))
    e = np.repeat(x, repeats, axis=axis)
    assert_same(run_like("repeat", {"repeats": repeats, "axis": axis}, [x], e), e)
    target = (2, *x.shape)
    e = np.broadcast_to(x, target)
    assert_same(run_like("broadcast_to", {"shape": target}, [x], e), e.copy())
    pad = tuple((data.draw(st.integers(0, 2)), data.draw(st.integers(0, 2))) for _ in x.shape)
    value = 1.0 if dtype == "bool" else 3.0
    e = np.pad(x, pad, constant_values=np.array(value).astype(dtype)) if x.ndim else x.copy()
    assert_same(run_like("nn.pad", {"pad_width": pad, "pad_value": value}, [x], e), e)


def test_bad_pad_width_is_a_value_error():
    x = np.zeros((2, 2), np.float32)
    with pytest.raises(ValueError, match="pad_width"):
        run_kernel("nn.pad", {"pad_width": ((1, 1),), "pad_value": 0.0}, [x], [((4, 2), "float32")])


# ---- scatter_nd, scatter_elements ----------------------------------------------------------

REDUCTIONS = ("none", "add", "mul", "max", "min")
#: The reduction as ONNX's reference loop applies it, one update after the other.
COMBINE: dict[str, Any] = {
    "none": lambda old, new: new,
    "add": lambda old, new: old + new,
    "mul": lambda old, new: old * new,
    "max": np.maximum,
    "min": np.minimum,
}


def _ref_scatter(data, targets, updates, reduction):
    """``data`` with ``updates[j]`` combined into element ``targets[j]`` for each j in order."""
    out = data.copy()
    with np.errstate(all="ignore"):
        for where, value in zip(targets, updates, strict=True):
            out[where] = COMBINE[reduction](out[where], value)
    return out


def _index_arrays(data, itype, shape, dims):
    """Index arrays of ``shape``, one per dim of ``dims``, with values in ``[-d, d)``."""
    return [
        data.draw(hnp.arrays(itype, shape, elements=st.integers(-d, d - 1))) if d else None
        for d in dims
    ]


def _scatter_dtype(data, reduction):
    dtype = data.draw(DTYPE)
    return "int32" if dtype == "bool" and reduction in ("add", "mul") else dtype


@pytest.mark.parametrize("reduction", REDUCTIONS)
@KERNEL_SETTINGS
@given(data=st.data())
def test_scatter_nd(reduction, data):
    dtype = _scatter_dtype(data, reduction)
    x = data.draw(arrays(dtype, shapes(), small=True))
    q = data.draw(st.integers(0, x.ndim))
    batch = data.draw(shapes(max_dims=2))
    if 0 in x.shape[:q]:
        batch = (0,)  # no index fits an empty axis
    itype = data.draw(st.sampled_from(["int32", "int64"]))
    coords = _index_arrays(data, itype, batch, x.shape[:q])
    indices = np.stack(coords, axis=-1) if q and 0 not in x.shape[:q] else np.zeros((*batch, q))
    indices = indices.astype(itype)
    updates = data.draw(arrays(dtype, (*batch, *x.shape[q:]), small=True))
    targets = [
        tuple(int(i) % d for i, d in zip(indices[p], x.shape, strict=False))
        for p in np.ndindex(*batch)
    ]
    rows = updates.reshape(len(targets), *x.shape[q:])
    expected = _ref_scatter(x, targets, list(rows), reduction)
    got = run_like("scatter_nd", {"reduction": reduction}, [x, indices, updates], expected)
    assert_same(got, expected, tol(dtype) if dtype in FLOATS else None)
    _assert_same_in_place("scatter_nd", {"reduction": reduction}, x, [indices, updates], got)


@pytest.mark.parametrize("reduction", REDUCTIONS)
@KERNEL_SETTINGS
@given(data=st.data())
def test_scatter_elements(reduction, data):
    dtype = _scatter_dtype(data, reduction)
    x = data.draw(arrays(dtype, shapes(min_dims=1), small=True))
    axis = data.draw(st.integers(-x.ndim, x.ndim - 1))
    a = axis % x.ndim
    n = x.shape[a]
    shape = tuple(
        (data.draw(st.integers(0, 4)) if n else 0) if i == a else data.draw(st.integers(0, d))
        for i, d in enumerate(x.shape)
    )
    itype = data.draw(st.sampled_from(["int32", "int64"]))
    (index,) = _index_arrays(data, itype, shape, [n]) if n else [np.zeros(shape, itype)]
    updates = data.draw(arrays(dtype, shape, small=True))
    targets = [(*p[:a], int(index[p]) % n, *p[a + 1 :]) for p in np.ndindex(*shape)]
    expected = _ref_scatter(x, targets, [updates[p] for p in np.ndindex(*shape)], reduction)
    attrs = {"axis": axis, "reduction": reduction}
    got = run_like("scatter_elements", attrs, [x, index, updates], expected)
    assert_same(got, expected, tol(dtype) if dtype in FLOATS else None)
    _assert_same_in_place("scatter_elements", attrs, x, [index, updates], got)


def _assert_same_in_place(op: str, attrs: dict[str, Any], x: Any, rest: list[Any], got: Any):
    """The kernel written over its operand (declared in_place: the planner may do it) gives
    the very result it writes into a fresh output."""
    shared = x.copy()
    get_kernel_factory(op)(attrs)(shared, *rest, shared)
    assert shared.tobytes() == got.tobytes()


def test_scatter_none_lets_the_last_of_repeated_indices_win():
    x = np.zeros((3, 2), np.float32)
    updates = np.array([[1, 1], [2, 2], [3, 3], [4, 4]], np.float32)
    got = run_like(
        "scatter_nd", {"reduction": "none"}, [x, np.array([[1], [0], [1], [-2]]), updates], x
    )
    assert_same(got, np.array([[2, 2], [4, 4], [0, 0]], np.float32))
    got = run_like(
        "scatter_nd", {"reduction": "add"}, [x, np.array([[1], [0], [1], [-2]]), updates], x
    )
    assert_same(got, np.array([[2, 2], [8, 8], [0, 0]], np.float32))
    attrs = {"axis": 1, "reduction": "none"}
    got = run_like(
        "scatter_elements", attrs, [x, np.array([[0, 0, -2]]), np.array([[5, 6, 7]], np.float32)], x
    )
    assert_same(got, np.array([[7, 0], [0, 0], [0, 0]], np.float32))


def test_scatter_into_a_non_contiguous_output():
    x = np.arange(6, dtype=np.int64).reshape(2, 3)
    out = np.full((3, 2), -1, np.int64).T  # a transposed view: reshaping it would copy
    kernel = get_kernel_factory("scatter_nd")({"reduction": "none"})
    kernel(x, np.array([[1, 2]]), np.array([9]), out)
    assert_same(out, np.array([[0, 1, 2], [3, 4, 9]]))


@pytest.mark.parametrize(
    ("op", "attrs", "inputs", "message"),
    [
        (
            "scatter_nd",
            {},
            [np.zeros((2, 3)), np.array([[0, 3]]), np.zeros(1)],
            r"index \[0, 3\] at indices\[0, :\] is out of range for the leading dims \(2, 3\)",
        ),
        (
            "scatter_nd",
            {},
            [np.zeros((2, 3)), np.array([[[-3]]]), np.zeros((1, 1, 3))],
            r"index \[-3\] at indices\[0, 0, :\]",
        ),
        (
            "scatter_nd",
            {},
            [np.zeros((2, 3)), np.array([[0, 0, 0]]), np.zeros(1)],
            "the last dim, the index tuple's length, must be at most the data's rank",
        ),
        (
            "scatter_nd",
            {},
            [np.zeros((2, 3)), np.array([[0]]), np.zeros((1, 2))],
            r"updates of shape \(1, 2\) .* \(expected \(1, 3\)\)",
        ),
        (
            "scatter_nd",
            {},
            [np.zeros((2, 3)), np.array([[0.0]]), np.zeros((1, 3))],
            "indices must be integers, got float64",
        ),
        (
            "scatter_nd",
            {},
            [np.zeros((2, 3)), np.array([[0]]), np.zeros((1, 3), np.float32)],
            "must have one dtype",
        ),
        (
            "scatter_nd",
            {},
            [np.zeros(2), np.array([[2**64 - 1]], np.uint64), np.zeros(1)],
            "index 18446744073709551615 is out of range",
        ),
        ("scatter_nd", {"reduction": "sub"}, None, "unknown reduction 'sub'"),
        (
            "scatter_elements",
            {},
            [np.zeros((2, 3)), np.array([[0, 2]]), np.zeros((1, 2))],
            r"index 2 at indices\[0, 1\] is out of range for axis 0 of size 2",
        ),
        (
            "scatter_elements",
            {"axis": 1},
            [np.zeros((2, 3)), np.array([[0], [1], [2]]), np.zeros((3, 1))],
            "exceed the data",
        ),
        (
            "scatter_elements",
            {"axis": 2},
            [np.zeros((2, 3)), np.array([[0]]), np.zeros((1, 1))],
            "axis 2 is out of range for rank 2",
        ),
        (
            "scatter_elements",
            {},
            [np.zeros((2, 3)), np.array([[0]]), np.zeros((1, 2))],
            "must have one shape, of the data's rank 2",
        ),
    ],
)
def test_scatter_rejects_bad_inputs(op, attrs, inputs, message):
    attrs = {"reduction": "none", **({"axis": 0} if op == "scatter_elements" else {}), **attrs}
    with pytest.raises(ValueError, match=message):
        if inputs is None:
            get_kernel_factory(op)(attrs)
        else:
            run_like(op, attrs, inputs, inputs[0])


def test_take_into_a_large_output_checks_the_indices_and_gathers_as_numpy():
    # few indices but a large output (an embedding lookup): checked with min/max and gathered
    # without numpy's buffered copy of ``out``; out of range still raises numpy's error
    from vm.kernels.transform import CHECKED_TAKE_OUT_BYTES

    rng = np.random.default_rng(3)
    table = rng.standard_normal((50, 256)).astype(np.float32)
    idx = rng.integers(-50, 50, (4, 32))
    e = np.take(table, idx, axis=0)
    assert e.nbytes >= CHECKED_TAKE_OUT_BYTES and idx.size < 4096
    assert_same(run_like("take", {"axis": 0}, [table, idx], e), e)
    wrong = idx.copy()
    wrong[1, 3] = 50
    with pytest.raises(IndexError, match="out of bounds"):
        run_like("take", {"axis": 0}, [table, wrong], e)


@pytest.mark.parametrize("out_strided", [False, True])
def test_reshape_of_a_strided_input_copies_in_c_order(out_strided):
    # a contiguous output is viewed in the input's shape (one copy, no temporary); a strided
    # output takes the input reshaped, as numpy's reshape orders it
    rng = np.random.default_rng(4)
    x = rng.standard_normal((6, 8, 10)).astype(np.float32).transpose(2, 0, 1)[:, ::2]
    want = x.reshape(5, 48)
    whole = np.full((5, 96), np.nan, np.float32)
    out = whole[:, ::2] if out_strided else np.full((5, 48), np.nan, np.float32)
    for name in ("reshape", "squeeze", "expand_dims"):
        get_kernel_factory(name)({"newshape": (5, 48), "axis": (0,), "num_newaxis": 0})(x, out)
        np.testing.assert_array_equal(out, want, strict=True)
