"""The HTTP bodies of a served executable (dynshape/serve/wire.py, numpy only): JSON and .npz
round trips, the special floats, and a message naming what is wrong with a malformed body."""

from __future__ import annotations

import io
import json

import numpy as np
import pytest

from dynshape.errors import RequestError
from dynshape.serve.wire import (
    MAX_ELEMENTS,
    inputs_from_json,
    inputs_from_npz,
    outputs_to_json,
    outputs_to_npz,
)

PARAMS = ("x", "w")


def _body(**inputs: object) -> bytes:
    return json.dumps({"inputs": inputs}).encode()


def _spec(a: np.ndarray) -> dict[str, object]:
    return {"dtype": a.dtype.name, "shape": list(a.shape), "data": a.ravel().tolist()}


def test_json_in_parameter_order_and_out_with_special_floats():
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    w = np.array([[1, 2, 3]], np.int64)
    got = inputs_from_json(_body(w=_spec(w), x=_spec(x)), PARAMS)
    assert [a.dtype for a in got] == [np.float32, np.int64]
    np.testing.assert_array_equal(got[0], x)
    np.testing.assert_array_equal(got[1], w)
    nested = inputs_from_json(_body(x={"dtype": "float32", "shape": [2, 2], "data": [[1, 2], [3, 4]]},
                                    w=_spec(w)), PARAMS)  # fmt: skip
    assert nested[0].shape == (2, 2)
    out = json.loads(outputs_to_json((np.array([np.nan, np.inf, -np.inf, 1.5], np.float32), 3)))
    assert out["outputs"][0] == {
        "dtype": "float32",
        "shape": [4],
        "data": ["nan", "inf", "-inf", 1.5],
    }
    assert out["outputs"][1] == {"dtype": "int64", "shape": [], "data": [3]}
    back = inputs_from_json(_body(x=out["outputs"][0], w=_spec(w)), PARAMS)[0]
    assert np.isnan(back[0]) and back[1] == np.inf and back[2] == -np.inf


def test_npz_in_and_out():
    buf = io.BytesIO()
    x, w = np.ones((2, 3), np.float32), np.zeros((2, 3), np.float32)
    np.savez(buf, w=w, x=x)
    got = inputs_from_npz(buf.getvalue(), PARAMS)
    np.testing.assert_array_equal(got[0], x)
    with np.load(io.BytesIO(outputs_to_npz((x, w)))) as data:
        assert sorted(data.files) == ["out.0", "out.1"]
    with np.load(io.BytesIO(outputs_to_npz(x))) as data:
        assert data.files == ["out"]


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"\xff\xfe", "the body is not JSON"),
        (b"[1, 2]", 'expected a JSON object {"inputs": {name: {dtype, shape, data}}}'),
        (_body(x={"dtype": "float32"}), "input 'x': expected {dtype, shape, data}"),
        (
            _body(x={"dtype": "complex64", "shape": [1], "data": [1]}),
            "dtype 'complex64' is not one of",
        ),
        (
            _body(x={"dtype": "float32", "shape": [-1], "data": []}),
            "shape must be a list of non-negative ints",
        ),
        (
            _body(x={"dtype": "float32", "shape": [True], "data": [1]}),
            "shape must be a list of non-negative ints",
        ),
        (
            _body(x={"dtype": "float32", "shape": [3], "data": [1, 2]}),
            "2 elements of data for shape (3,)",
        ),
        (_body(x={"dtype": "float32", "shape": [1], "data": ["x"]}), "data do not fit float32"),
        (_body(x={"dtype": "int8", "shape": [1], "data": [1000]}), "data do not fit int8"),
        (
            _body(x={"dtype": "float32", "shape": [1], "data": [{"a": 1}]}),
            "data do not fit float32",
        ),
        (
            _body(x={"dtype": "float32", "shape": [MAX_ELEMENTS + 1], "data": []}),
            "elements is more than",
        ),
    ],
)
def test_a_malformed_json_body_says_what_is_wrong(body, message):
    w = _spec(np.ones(1, np.float32))
    if body.startswith(b'{"inputs"'):
        doc = json.loads(body)
        doc["inputs"]["w"] = w
        body = json.dumps(doc).encode()
    with pytest.raises(RequestError) as info:
        inputs_from_json(body, PARAMS)
    assert message in str(info.value)


def test_unknown_and_missing_inputs_are_named_together():
    with pytest.raises(RequestError) as info:
        inputs_from_json(_body(y=_spec(np.ones(1, np.float32)), x=_spec(np.ones(1))), PARAMS)
    assert str(info.value) == ("unknown input(s) 'y'; missing input(s) 'w' (the model takes: x, w)")


@pytest.mark.parametrize("body", [b"", b"PK\x03\x04junk", b"\x93NUMPY"])
def test_a_broken_npz_body_is_a_request_error(body):
    with pytest.raises(RequestError, match=r"not a readable \.npz file"):
        inputs_from_npz(body, PARAMS)


def test_an_npz_of_pickled_objects_is_refused_without_unpickling():
    buf = io.BytesIO()
    np.savez(buf, x=np.array([{"a": 1}], dtype=object), w=np.ones(1))
    with pytest.raises(RequestError, match=r"not a readable \.npz file"):
        inputs_from_npz(buf.getvalue(), PARAMS)
