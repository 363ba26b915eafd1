"""``copy_into``: a strided view copied into a contiguous array with a short last axis, one
index of that axis at a time, gives ``np.copyto``'s result; and the layout kernels that use it
(``transpose``, ``reshape`` of a strided view: a pixel shuffle) give numpy's."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import vm.kernels  # noqa: F401  (registers the kernels)
from vm.kernels import layout_copy
from vm.kernels.registry import get_kernel_factory


@settings(max_examples=80, deadline=None)
@given(
    st.lists(st.integers(1, 40), min_size=1, max_size=3),
    st.integers(1, 6),
    st.sampled_from(["float32", "float64", "int8", "float16", "bool", "complex64"]),
    st.randoms(use_true_random=False),
)
def test_permuted_copies_equal_copyto(lead, last, dtype, rnd):
    shape = (*lead, last)
    if np.prod(shape) < layout_copy.SPLIT_MIN_ELEMENTS // 4:
        shape = (64, *shape)  # often past the threshold, sometimes not
    perm = list(range(len(shape)))
    rnd.shuffle(perm)
    src_shape = tuple(shape[p] for p in perm)
    x = (np.arange(int(np.prod(src_shape))) % 251).astype(dtype).reshape(src_shape)
    view = x.transpose(np.argsort(perm))  # the shape of ``shape``, strided
    assert view.shape == shape
    got = np.empty(shape, dtype)
    layout_copy.copy_into(got, view)
    assert got.tobytes() == np.ascontiguousarray(view).tobytes()


def test_a_broadcast_source_and_an_overlapping_one():
    out = np.empty((2048, 3), np.float32)
    row = np.arange(2048, dtype=np.float32)[:, None]
    layout_copy.copy_into(out, np.broadcast_to(row, (2048, 3)))  # a stride-0 last axis
    assert np.array_equal(out, np.repeat(row, 3, axis=1))
    buf = np.arange(3 * 4096, dtype=np.float32)
    src = buf.reshape(4096, 3)[:, ::-1]  # reversed last axis: strided, overlapping ``out``
    want = np.ascontiguousarray(src).copy()
    layout_copy.copy_into(buf.reshape(4096, 3), src)
    assert np.array_equal(buf.reshape(4096, 3), want)


def test_pixel_shuffle_and_channels_last_through_the_kernels():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 16, 24, 24)).astype(np.float32)
    six = x.reshape(2, 4, 2, 2, 24, 24).transpose(0, 1, 4, 2, 5, 3)  # DepthToSpace, CRD
    out = np.empty((2, 4, 48, 48), np.float32)
    get_kernel_factory("reshape")({})(six, out)
    assert np.array_equal(out, np.ascontiguousarray(six).reshape(2, 4, 48, 48))
    nhwc = np.empty((2, 24, 24, 16), np.float32)
    y = rng.standard_normal((2, 3, 40, 40)).astype(np.float32)
    last3 = np.empty((2, 40, 40, 3), np.float32)
    transpose = get_kernel_factory("transpose")({"axes": (0, 2, 3, 1)})
    transpose(x, nhwc)
    transpose(y, last3)
    assert np.array_equal(nhwc, x.transpose(0, 2, 3, 1))
    assert np.array_equal(last3, y.transpose(0, 2, 3, 1))
