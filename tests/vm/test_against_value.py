"""``against_value``: an extremum against one value, read from a block of copies, gives the
plain call's bits: every dtype, sizes on both sides of the block, strided and in-place operands,
NaN payloads, signed zeros and infinities."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import vm.kernels  # noqa: F401  (registers the kernels)
from vm.kernels import against_value as av
from vm.kernels.registry import get_kernel_factory

UFUNCS = (np.maximum, np.minimum)
DTYPES = ("float16", "float32", "float64", "int8", "int32", "int64", "uint8")


def _values(dtype: np.dtype, n: int, rng: np.random.Generator) -> np.ndarray:
    if dtype.kind == "f":
        x = rng.standard_normal(n).astype(dtype)
        special = np.array([np.nan, -np.nan, -0.0, 0.0, np.inf, -np.inf], dtype)
        special[0] = np.frombuffer(np.array(0x7FC00123, np.uint32).tobytes(), np.float32)[0]
        picks = rng.integers(0, n, size=min(n, 12))
        x[picks] = rng.choice(special, size=picks.size)
        return x
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, size=n, endpoint=True, dtype=dtype)


def _bits(a: np.ndarray) -> bytes:
    return np.ascontiguousarray(a).tobytes()


@settings(max_examples=60, deadline=None)
@given(
    st.sampled_from(UFUNCS),
    st.sampled_from(DTYPES),
    st.sampled_from(
        (
            0,
            7,
            av.SMALL - 1,
            av.SMALL,
            4095,
            av.VALUE_BLOCK,
            av.VALUE_BLOCK + 1,
            3 * av.VALUE_BLOCK + 5,
        )
    ),
    st.sampled_from((0, 1, -1, 2.5, -0.0, "nan")),
    st.booleans(),
    st.integers(0, 2**32 - 1),
)
def test_the_plain_calls_bits(ufunc, dtype, n, value, value_first, seed):
    dtype = np.dtype(dtype)
    if value == "nan":
        value = np.nan
    with np.errstate(all="ignore"):
        v = np.asarray(value).astype(dtype)
    x = _values(dtype, n, np.random.default_rng(seed))
    want = ufunc(v, x) if value_first else ufunc(x, v)
    got = np.empty_like(x)
    av.against_value(ufunc, x, v, got, value_first=value_first)
    assert _bits(got) == _bits(want)
    av.against_value(ufunc, x, v, x, value_first=value_first)  # in place
    assert _bits(x) == _bits(want)


@pytest.mark.parametrize("n", [3000, 3 * av.VALUE_BLOCK + 5])
def test_strided_and_aliased_operands(n):
    rng = np.random.default_rng(n)
    base = _values(np.dtype(np.float32), 2 * n + 1, rng)
    strided = base[::2]
    out = np.empty(n + 1, np.float32)
    av.against_value(np.maximum, strided, 0, out)
    assert _bits(out) == _bits(np.maximum(strided, 0))
    # the same elements through another view object: in place
    x = base.copy()
    av.against_value(np.maximum, x[: n + 1], 0, x.reshape(-1)[: n + 1])
    assert _bits(x[: n + 1]) == _bits(np.maximum(base[: n + 1], 0))
    # an output shifted one element along its input: the plain call's buffering decides
    x = base.copy()
    want = np.maximum(base[1 : n + 1], 0)
    av.against_value(np.maximum, x[1 : n + 1], 0, x[:n])
    assert _bits(x[:n]) == _bits(want)


@pytest.mark.parametrize("ufunc", [np.fmax, np.fmin])
def test_fmax_and_fmin_keep_their_scalar_loops_ties(ufunc):
    # their array loop picks the other signed zero on a tie: the block is not used for them
    x = np.full(8, -0.0, np.float32)
    out = np.empty_like(x)
    av.against_value(ufunc, x, np.float32(0.0), out)
    assert _bits(out) == _bits(ufunc(x, np.float32(0.0)))


def test_mismatched_operands_run_as_the_plain_call():
    x = np.arange(6, dtype=np.int32).reshape(2, 3) - 3
    out = np.empty((2, 3), np.float64)
    av.against_value(np.maximum, x, 0, out)
    np.testing.assert_array_equal(out, np.maximum(x, 0))
    row = np.arange(3, dtype=np.float32)
    out = np.empty((2, 3), np.float32)
    av.against_value(np.minimum, row, 1, out)  # broadcast, not out-shaped
    np.testing.assert_array_equal(out, np.minimum(row, 1) * np.ones((2, 1), np.float32))


def test_the_blocks_are_read_only_and_bounded():
    for k in range(av.BLOCKS_MAX + 3):
        x = np.zeros(av.SMALL)
        av.against_value(np.maximum, x, k, x)
        assert (x == k).all()
    assert len(av._blocks) <= av.BLOCKS_MAX
    block = av._block(0, np.dtype(np.float32))
    assert not block.flags.writeable and block.size == av.VALUE_BLOCK and not block.any()


@pytest.mark.parametrize("op", ["maximum", "minimum"])
def test_the_kernels_take_a_single_value_either_side(op):
    rng = np.random.default_rng(1)
    x = _values(np.dtype(np.float32), 2000, rng).reshape(20, 100)
    c = np.array([np.nan], np.float32)
    kernel = get_kernel_factory(op)({})
    ufunc = getattr(np, op)
    for a, b in ((x, c), (c, x), (x, c.reshape(())), (x, x[::-1])):
        out = np.empty((20, 100), np.float32)
        kernel(a, b, out)
        assert _bits(out) == _bits(ufunc(a, b))
