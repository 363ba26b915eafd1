"""The spellings users bring from numpy (issue 17, item 1), tried as a user would: attributes
positionally, numpy's argument names, any numpy dtype spelling, numpy integers as dims and
attributes, numpy scalars that keep their dtype, and the messages when a call is wrong."""

from __future__ import annotations

import inspect

import numpy as np
import pytest

import dynshape
import dynshape.builder as ds
from dynshape.errors import BuildError


def _run(outputs, inputs, *args):
    return dynshape.VirtualMachine(dynshape.compile(ds.build(outputs, inputs))).run(*args)


def test_attributes_positionally_in_numpys_order():
    x = ds.tensor("x", ("n", 6), "float32")
    xv = np.arange(12, dtype=np.float32).reshape(2, 6)
    cases = [
        (ds.reshape(x, (-1,)), xv.reshape(-1)),
        (ds.reshape(x, (3, -1)), xv.reshape(3, -1)),
        (ds.transpose(x, (1, 0)), xv.T),
        (ds.cast(x, "int32"), xv.astype(np.int32)),
        (ds.expand_dims(x, 0), xv[None]),
        (ds.softmax(x, 0), np.exp(xv) / np.exp(xv).sum(axis=0)),
        (ds.topk(x, 2)[0], -np.sort(-xv, axis=-1)[:, :2]),
        (ds.cumsum(x, 1), np.cumsum(xv, axis=1)),
    ]
    outs = _run(tuple(c[0] for c in cases), [x], xv)
    for got, (_, want) in zip(outs, cases, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-6)


def test_numpys_argument_names_and_the_catalogues_both_work():
    x = ds.tensor("x", (2, 3), "float32")
    assert ds.reshape(x, shape=(3, 2)).shape == (3, 2)
    assert ds.reshape(x, newshape=(3, 2)).shape == (3, 2)
    assert ds.transpose(x, axes=(1, 0)).shape == (3, 2)
    with pytest.raises(BuildError, match=r"reshape\(\) got both shape= and newshape="):
        ds.reshape(x, shape=(6,), newshape=(6,))


def test_help_shows_the_signature_and_the_attributes():
    assert str(inspect.signature(ds.reshape)) == "(x, newshape)"
    assert str(inspect.signature(ds.transpose)) == "(x, axes=None)"
    assert str(inspect.signature(ds.topk)).startswith("(x, k, axis=-1,")
    doc = ds.softmax.__doc__ or ""
    assert "axis: int (default -1)" in doc and "The op nn.softmax." in doc
    assert "shape= for newshape=" in (ds.reshape.__doc__ or "")


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda x: ds.reshape(x), "op reshape: missing required attribute 'newshape'"),
        (lambda x: ds.add(x), "op add takes 2 arguments (a, b), got 1"),
        (lambda x: ds.exp(x, x), "op exp takes 1 argument (x), got 2"),
        (lambda x: ds.softmax(x, 0, axis=1), "softmax(x, axis=-1): multiple values for argument"),
        (lambda x: ds.softmax(x, 0, 1), "softmax(x, axis=-1): too many positional arguments"),
        (
            lambda x: ds.softmax(x, axs=0),
            "op nn.softmax has no attribute 'axs' (did you mean 'axis'? its attributes: axis)",
        ),
        (lambda x: ds.cast(x, "float"), None),  # numpy's "float" is float64: accepted
    ],
)
def test_wrong_calls_say_what_is_wrong(call, message):
    x = ds.tensor("x", (2, 3), "float32")
    if message is None:
        assert call(x).dtype == "float64"
        return
    with pytest.raises(BuildError) as info:
        call(x)
    assert message in str(info.value)
    assert "test_numpy_conventions.py" in str(info.value)  # at the user's line


@pytest.mark.parametrize(
    "spelling", ["float32", "f4", np.float32, np.dtype("float32"), np.dtype("<f4")]
)
def test_any_numpy_dtype_spelling(spelling):
    x = ds.tensor("x", (2,), spelling)
    assert x.dtype == "float32"
    assert ds.cast(x, spelling).dtype == "float32"
    assert x.astype(np.int32).dtype == "int32"
    assert ds.zeros((2,), np.int64).dtype == "int64"


@pytest.mark.parametrize(
    ("spelling", "message"),
    [
        ("datetime64[s]", "dtype 'datetime64[s]' is not supported: use one of bool, float16"),
        (np.complex64, "(complex64) is not supported"),
        (">f4", "dtype '>f4' (big-endian float32) is not supported"),
        ("nonsense", "bad dtype 'nonsense': expected one of bool"),
        (None, "bad dtype None"),
    ],
)
def test_unsupported_dtypes_are_named(spelling, message):
    with pytest.raises(BuildError) as info:
        ds.tensor("x", (2,), spelling)
    assert message in str(info.value)


def test_numpy_integers_as_dims_and_attributes():
    shape = np.zeros((3, 4)).shape  # numpy ints, as numpy hands them out
    x = ds.tensor("x", (np.int64(3), np.int32(4)), "float32")
    assert x.shape == (3, 4)
    assert ds.tensor("y", tuple(np.array(shape)), "float32").shape == (3, 4)
    assert ds.reshape(x, (np.int64(2), -1)).shape == (2, 6)
    assert ds.reshape(x, np.array([4, 3])).shape == (4, 3)
    assert ds.softmax(x, axis=np.int64(0)).shape == (3, 4)
    assert ds.sum(x, axis=np.int64(1)).shape == (3,)
    with pytest.raises(BuildError, match=r"bad dim np\.True_: an int, a name"):
        ds.tensor("z", (np.bool_(True),), "float32")  # a bool is no dim, numpy's neither


def test_numpy_scalars_keep_their_dtype_python_numbers_take_the_default():
    assert ds.constant_of(np.int64(0)).dtype == "int64"
    assert ds.constant_of(np.float64(0.5)).dtype == "float64"
    assert ds.constant_of(np.float16(1)).dtype == "float16"
    assert ds.constant_of(0).dtype == "int32" and ds.constant_of(0.5).dtype == "float32"
    # beside a tensor, a number (Python's or numpy's) takes the tensor's dtype
    x = ds.tensor("x", (2,), "float32")
    assert (x * np.float64(2)).dtype == "float32"


def test_a_loop_counter_that_starts_as_a_numpy_int64():
    x = ds.tensor("x", (3,), "float32")
    limit = np.int64(4)
    i, y = ds.while_loop(lambda i, y: i < limit, lambda i, y: (i + 1, y * 2), (np.int64(0), x))
    assert i.dtype == "int64"
    got_i, got_y = _run((i, y), [x], np.ones(3, np.float32))
    assert int(got_i) == 4 and np.array_equal(got_y, np.full(3, 16, np.float32))
