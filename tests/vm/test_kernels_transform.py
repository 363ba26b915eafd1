"""Layout kernels against plain numpy."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from vm_testlib import ALL, KERNEL_SETTINGS, arrays, assert_same, run_kernel, run_like, shapes

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
