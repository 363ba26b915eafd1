"""The HTTP bodies of a served executable (dynshape/serve/wire.py, numpy only): JSON and .npz
round trips, the special floats, and a message naming what is wrong with a malformed body."""

from __future__ import annotations

import contextlib
import io
import json
import struct
import sys
import warnings
import zipfile

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from dynshape.errors import RequestError
from dynshape.serve.wire import (
    MAX_ELEMENTS,
    MAX_RANK,
    inputs_from_json,
    inputs_from_npz,
    outputs_to_json,
    outputs_to_npz,
    request_to_json,
)
from vm.executable import CORE_DTYPES as DTYPES  # numpy's own: what .npy and JSON carry

PARAMS = ("x", "w")


def _body(**inputs: object) -> bytes:
    return json.dumps({"inputs": inputs}).encode()


def _spec(a: np.ndarray) -> dict[str, object]:
    return {"dtype": a.dtype.name, "shape": list(a.shape), "data": a.ravel().tolist()}


def _x(dtype: str, data: object, shape: list[object] | None = None) -> bytes:
    """A body whose input x has this dtype and data (shape: the data's length by default)."""
    if shape is None:
        shape = [len(data)] if isinstance(data, list) else []
    return _body(x={"dtype": dtype, "shape": shape, "data": data})


def _nested(depth: int, leaf: object = 1.0) -> object:
    for _ in range(depth):
        leaf = [leaf]
    return leaf


def _npy(header: dict[str, object] | str, data: bytes = b"", version: int = 1) -> bytes:
    """An .npy file whose header is written as given, unchecked (numpy's writer would refuse
    most of what these tests send)."""
    text = (header if isinstance(header, str) else repr(header)).encode("latin1") + b"\n"
    length = struct.pack("<H" if version == 1 else "<I", len(text))
    return b"\x93NUMPY" + bytes([version, 0]) + length + text + data


def _header(descr: str, shape: tuple[object, ...]) -> dict[str, object]:
    return {"descr": descr, "fortran_order": False, "shape": shape}


def _zip(members: list[tuple[str, bytes]], compression: int = zipfile.ZIP_STORED) -> bytes:
    buf = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zipfile warns of a duplicate member name
        with zipfile.ZipFile(buf, "w", compression) as archive:
            for name, data in members:
                archive.writestr(name, data)
    return buf.getvalue()


def _savez(compressed: bool = False, **arrays: np.ndarray) -> bytes:
    buf = io.BytesIO()
    (np.savez_compressed if compressed else np.savez)(buf, **arrays)
    return buf.getvalue()


W_NPY = ("w.npy", _npy(_header("<f4", (1,)), np.ones(1, np.float32).tobytes()))


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
        # Strict element types: nothing is truncated, wrapped or made infinite.
        (_x("int32", [1, 1.5]), "data do not fit int32: element 1 is 1.5, expected integers"),
        (_x("int64", [2.0]), "element 0 is 2.0, expected integers"),
        (_x("uint8", [True]), "element 0 is true, expected integers"),
        (_x("int16", ["nan"]), "element 0 is 'nan', expected integers"),
        (_x("int8", [None]), "element 0 is null, expected integers"),
        (_x("int8", [[1, 2], [3]], [2]), "element 0 is a list, expected integers"),  # ragged
        (_x("bool", [True, 1]), "data do not fit bool: element 1 is 1, expected true or false"),
        (_x("bool", ["true"]), "element 0 is 'true', expected true or false"),
        (_x("float32", [False]), 'element 0 is false, expected numbers or "nan", "inf", "-inf"'),
        (_x("float64", ["Infinity"]), "element 0 is 'Infinity', expected numbers"),
        (_x("float32", ["x" * 100]), "element 0 is '" + "x" * 36 + "..., expected numbers"),
        (_x("uint8", [0, 300]), "data do not fit uint8: element 1 is 300, not in 0..255"),
        (_x("uint8", [-1]), "element 0 is -1, not in 0..255"),
        (_x("int8", [1000]), "data do not fit int8: element 0 is 1000, not in -128..127"),
        (
            _x("int64", [2**70]),
            "element 0 is 1180591620717411303424, not in -9223372036854775808..9223372036854775807",
        ),
        (_x("float16", [1.0, 70000]), "data do not fit float16: element 1 is 70000, too large"),
        (_x("float32", [-1e39]), "data do not fit float32: element 0 is -1e+39, too large"),
        (_x("float64", [10**400]), "data do not fit float64: element 0 is 10000000000000000"),
        # Shapes numpy cannot allocate.
        (_x("float32", [1], [1] * (MAX_RANK + 1)), f"rank {MAX_RANK + 1} is more than {MAX_RANK}"),
        (_x("float32", [], [0, 2**70]), "a dim of 1,180,591,620,717,411,303,424 is more than"),
        (_x("float32", [1], [1.0]), "shape must be a list of non-negative ints"),
        (_x("float32", [1], 1), "shape must be a list of non-negative ints"),
        (_x(["float32"], [1]), "dtype a list is not one of"),
        # Nesting: data nested deeper than a shape can be, and a body too deep for the parser.
        (_x("float32", _nested(MAX_RANK + 1), [1]), "nested too deeply (more than 35 levels)"),
        (b"[" * 100_000 + b"]" * 100_000, "the body is not JSON: nested too deeply"),
        (b'["]]]]", ' * 40 + b"[" * 40, "the body is not JSON: nested too deeply"),
        (b"[" + b"1" * 5000 + b"]", "the body is not JSON: Exceeds the limit (4300 digits)"),
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


def test_integral_floats_special_floats_and_extremes_that_fit_are_kept_exactly():
    body = _body(
        x={"dtype": "float16", "shape": [5], "data": [65504, -65504.0, "nan", "-inf", 1e-8]},
        w={"dtype": "int64", "shape": [2], "data": [-(2**63), 2**63 - 1]},
    )
    x, w = inputs_from_json(body, PARAMS)
    assert x.dtype == np.float16 and x[0] == 65504 and x[1] == -65504 and np.isnan(x[2])
    assert x[3] == -np.inf and x[4] == 0  # an underflow rounds; only an overflow is refused
    assert w.dtype == np.int64 and w.tolist() == [-(2**63), 2**63 - 1]


def test_data_nested_as_deeply_as_a_shape_can_be_is_read():
    body = _body(
        x={"dtype": "float32", "shape": [1], "data": _nested(MAX_RANK)}, w=_spec(np.ones(1))
    )
    assert inputs_from_json(body, PARAMS)[0].tolist() == [1.0]


def test_a_body_too_deep_for_the_parser_is_refused_even_under_a_raised_recursion_limit():
    # ir.nesting raises the limit to 100,000 for deep IR; json's C parser then recurses until
    # the C stack overflows (a segfault, no RecursionError) unless the depth is checked first.
    x = b'{"dtype": "float32", "shape": [1], "data": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    saved = sys.getrecursionlimit()
    sys.setrecursionlimit(max(saved, 100_000))
    try:
        with pytest.raises(RequestError, match="the body is not JSON: nested too deeply"):
            inputs_from_json(b'{"inputs": {"x": ' + x + b"}}", PARAMS)
        with pytest.raises(RequestError, match="the body is not JSON: nested too deeply"):
            inputs_from_json(b"\xff\xfe" + "[".encode("utf-16-le") * 100_000, PARAMS)
    finally:
        sys.setrecursionlimit(saved)


def test_the_inputs_together_are_bounded_too():
    names = [f"x{i}" for i in range(1000)]
    body = _body(**{n: {"dtype": "uint8", "shape": [MAX_ELEMENTS], "data": []} for n in names})
    with pytest.raises(RequestError) as info:
        inputs_from_json(body, names)
    assert str(info.value) == (
        "the inputs have 67,108,864,000 elements in all, more than 67,108,864"
    )
    members = [(f"{n}.npy", _npy(_header("|u1", (MAX_ELEMENTS,)))) for n in names]
    with pytest.raises(RequestError) as info:
        inputs_from_npz(_zip(members), names)
    assert str(info.value) == (
        "the inputs have 67,108,864,000 elements in all, more than 67,108,864"
    )


def test_unknown_and_missing_inputs_are_named_together():
    with pytest.raises(RequestError) as info:
        inputs_from_json(_body(y=_spec(np.ones(1, np.float32)), x=_spec(np.ones(1))), PARAMS)
    assert str(info.value) == ("unknown input(s) 'y'; missing input(s) 'w' (the model takes: x, w)")


@pytest.mark.parametrize("body", [b"", b"PK\x03\x04junk", b"\x93NUMPY"])
def test_a_broken_npz_body_is_a_request_error(body):
    with pytest.raises(RequestError, match=r"not a readable \.npz file"):
        inputs_from_npz(body, PARAMS)


def test_an_npz_of_pickled_objects_is_refused_without_unpickling():
    body = _savez(x=np.array([{"a": 1}], dtype=object), w=np.ones(1))
    with pytest.raises(RequestError) as info:
        inputs_from_npz(body, PARAMS)
    assert str(info.value) == "input 'x': object arrays are refused (reading them unpickles)"


def test_an_npz_bomb_is_refused_from_its_header_before_any_data_is_unpacked():
    # 10**9 zeros compress to ~1 MB; the header alone says how many there are (the member here
    # stops after 1 MB, so reading it would fail with another message).
    bomb = _npy(_header("|u1", (10**9,)), bytes(1 << 20))
    body = _zip([("x.npy", bomb), W_NPY], zipfile.ZIP_DEFLATED)
    assert len(body) < 10_000
    with pytest.raises(RequestError) as info:
        inputs_from_npz(body, PARAMS)
    assert str(info.value) == "input 'x': 1,000,000,000 elements is more than 67,108,864"


@pytest.mark.parametrize(
    ("members", "message"),
    [
        ([("x", b"anything"), W_NPY], "the .npz member 'x' is not an .npy array"),
        (
            [("x.npy", _npy(_header("<c8", (1,)), bytes(8))), W_NPY],
            "input 'x': dtype complex64 is not one of bool, int8",
        ),
        (
            [("x.npy", _npy(_header("|S1000000000", (64,)))), W_NPY],
            "input 'x': dtype |S1000000000 is not one of",
        ),
        ([("x.npy", _npy(_header("<f4", (-1,)))), W_NPY], "shape must be a list of non-negative"),
        ([("x.npy", _npy(_header("<f4", (True,)))), W_NPY], "shape must be a list of non-"),
        ([("x.npy", _npy(_header("<f4", (0, 2**70)))), W_NPY], "a dim of 1,180,591,620,717,41"),
        ([("x.npy", _npy(_header("<f4", (1,)), version=3)), W_NPY], ".npy format (3, 0) is not"),
        ([("x.npy", b"\x93NUMPY\x01"), W_NPY], "input 'x': the .npy header is not readable"),
        ([("x.npy", _npy("{[]: 1}")), W_NPY], "input 'x': the .npy header is not readable"),
        ([("x.npy", _npy("{'descr': (")), W_NPY], "input 'x': the .npy header is not readable"),
        ([("x.npy", _npy("(" * 5000)), W_NPY], "input 'x': the .npy header is not readable"),
        ([("x.npy", _npy("-" * 5000 + "1")), W_NPY], "input 'x': the .npy header is not read"),
        ([("x.npy", _npy(_header("<f4", (2,)), bytes(7))), W_NPY], "input 'x': the .npy data is"),
        ([("x.npy", _npy(_header("<f4", (1,)), bytes(4))), ("y.npy", W_NPY[1])], "unknown input"),
    ],
)
def test_a_malformed_npz_member_says_what_is_wrong(members, message):
    for compression in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
        with pytest.raises(RequestError) as info:
            inputs_from_npz(_zip(members, compression), PARAMS)
        assert message in str(info.value)


@pytest.mark.parametrize(
    ("offset", "message"),
    [(200, "input 'x': the .npy header is not readable"), (50_000, "input 'x': the .npy data")],
)
def test_a_corrupt_compressed_npz_is_a_request_error(offset, message):
    body = bytearray(_savez(compressed=True, x=np.arange(100_000.0), w=np.ones(1, np.float32)))
    start = body.index(b"x.npy") + offset  # inside x's compressed stream
    body[start : start + 8] = b"\xff" * 8
    with pytest.raises(RequestError, match=message):
        inputs_from_npz(bytes(body), PARAMS)


def test_an_npy_body_is_not_an_npz_body():
    buf = io.BytesIO()
    np.save(buf, np.ones(3))
    with pytest.raises(RequestError, match="it is not a zip archive"):
        inputs_from_npz(buf.getvalue(), PARAMS)


# Structured-mutation fuzzing: valid bodies, then the mistakes and attacks a client may send.
# Whatever the body, the result is a RequestError or the arrays the body declares.

_ARRAYS = st.sampled_from(DTYPES).flatmap(
    lambda dtype: hnp.arrays(
        dtype, hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=4)
    )
)
_JUNK = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**80), 2**80),
    st.floats(),
    st.sampled_from(["nan", "inf", "-inf", "1", "", 10**400]),
    st.text(max_size=4),
    st.builds(lambda: []) | st.builds(lambda: [1.0]) | st.builds(lambda: {"a": 1}),  # fresh ones
)
_DIMS = st.sampled_from([0, 1, 3, -1, 2**40, 2**70, MAX_ELEMENTS + 1, True, 1.5, "2", None])
_COMPRESSIONS = [zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED, zipfile.ZIP_BZIP2, zipfile.ZIP_LZMA]


def _json_spec(a: np.ndarray) -> dict[str, object]:
    """What a client sends for ``a``: the server's own encoding (special floats as strings)."""
    return json.loads(outputs_to_json(a))["outputs"][0]


def _mutate_json_spec(draw: st.DrawFn, spec: dict[str, object]) -> None:
    what = draw(st.sampled_from(["drop", "dtype", "dim", "rank", "nest", "element", "data"]))
    shape, data = spec.get("shape"), spec.get("data")
    if what == "drop" and spec:
        del spec[draw(st.sampled_from(sorted(spec)))]
    elif what == "dtype":
        spec["dtype"] = draw(st.sampled_from(DTYPES) | st.text(max_size=8) | _JUNK)
    elif what == "dim" and isinstance(shape, list) and shape:
        shape[draw(st.integers(0, len(shape) - 1))] = draw(_DIMS)
    elif what == "rank" and isinstance(shape, list):
        spec["shape"] = shape[:-1] if shape and draw(st.booleans()) else [*shape, draw(_DIMS)]
    elif what == "nest" and isinstance(data, list):
        if draw(st.booleans()):
            spec["data"] = _nested(draw(st.integers(1, 40)), data)  # too many levels
        elif isinstance(shape, list) and all(type(d) is int and d >= 0 for d in shape):
            with contextlib.suppress(ValueError):  # nested as the shape says ([]: a scalar)
                spec["data"] = np.asarray(data, dtype=object).reshape(shape).tolist()
    elif what == "element" and isinstance(data, list) and data:
        data[draw(st.integers(0, len(data) - 1))] = draw(_JUNK)
    elif what == "data":
        spec["data"] = draw(_JUNK)


@st.composite
def _json_bodies(draw: st.DrawFn) -> bytes:
    doc: dict[str, object] = {"inputs": {name: _json_spec(draw(_ARRAYS)) for name in PARAMS}}
    for _ in range(draw(st.integers(0, 3))):
        inputs = doc["inputs"]
        assert isinstance(inputs, dict)
        name = draw(st.sampled_from([*sorted(inputs), "y"]))
        if name not in inputs:  # an unknown input, or none at all
            inputs[name] = _json_spec(draw(_ARRAYS)) if draw(st.booleans()) else draw(_JUNK)
        elif draw(st.integers(0, 9)) == 0:
            del inputs[name]
        elif isinstance(inputs[name], dict):
            _mutate_json_spec(draw, inputs[name])
    body = json.dumps(doc).encode()
    if draw(st.integers(0, 4)) == 0:
        body = body[: draw(st.integers(0, len(body)))]
    return body


def _check_json(body: bytes) -> None:
    try:
        got = inputs_from_json(body, PARAMS)
    except RequestError:
        return
    declared = json.loads(body)["inputs"]
    for name, a in zip(PARAMS, got, strict=True):
        spec = declared[name]
        assert isinstance(a, np.ndarray)
        assert (a.dtype.name, a.shape) == (spec["dtype"], tuple(spec["shape"]))
        # The values too: every element is the number sent, none rounded to an int or wrapped.
        sent = np.asarray(spec["data"], dtype=object).ravel().tolist()
        if a.dtype.kind == "f":
            floats = np.array([float(v) for v in sent]).astype(a.dtype)
            np.testing.assert_array_equal(a.ravel(), floats)
        else:
            assert [type(v) for v in sent] == [type(v) for v in a.ravel().tolist()]
            assert a.ravel().tolist() == sent


@settings(max_examples=300, deadline=None)
@given(_json_bodies())
def test_a_mutated_json_body_gives_the_declared_arrays_or_a_request_error(body):
    _check_json(body)


@settings(max_examples=100, deadline=None)
@given(st.lists(_ARRAYS, min_size=2, max_size=2))
def test_a_valid_json_body_gives_its_arrays_exactly(arrays):
    inputs = {name: _json_spec(a) for name, a in zip(PARAMS, arrays, strict=True)}
    body = json.dumps({"inputs": inputs}).encode()
    for a, b in zip(arrays, inputs_from_json(body, PARAMS), strict=True):
        assert (a.dtype, a.shape) == (b.dtype, b.shape)
        np.testing.assert_array_equal(a, b)


def _npy_of(a: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.lib.format.write_array(buf, a, allow_pickle=False)
    return buf.getvalue()


_DESCRS = ["<f4", ">f8", "<f2", "|b1", "|u1", "<i8", "|O", "<c8", "|S1000000000", "<U3", "V16", "?"]


# What a member declares: its dtype and shape, and its values when they are known.
_Declared = tuple[object, object, "np.ndarray | None"] | None


@st.composite
def _npz_bodies(draw: st.DrawFn) -> tuple[bytes, dict[str, _Declared]]:
    """A body, and what each member name declares (nothing once bytes were flipped or cut:
    the body then declares what it may)."""
    members: list[tuple[str, bytes, _Declared]] = []  # member name, .npy bytes, declared
    for name in PARAMS:
        a = draw(_ARRAYS)
        members.append((f"{name}.npy", _npy_of(a), (a.dtype, a.shape, a)))
    for _ in range(draw(st.integers(0, 3))):
        if not members:
            break
        i = draw(st.integers(0, len(members) - 1))
        name, npy, declared = members[i]
        what = draw(st.sampled_from(["rename", "drop", "copy", "header", "cut", "append"]))
        if what == "rename":
            new = draw(st.sampled_from(["x", "w.npy", "x.npy.npy", "y.npy", ".npy", "d/x.npy"]))
            members[i] = (new, npy, declared)
        elif what == "drop":
            del members[i]
        elif what == "copy":
            members.append(members[i])
        elif what == "header":
            descr = draw(st.sampled_from(_DESCRS))
            shape = tuple(draw(st.lists(_DIMS | st.integers(0, 4), max_size=3)))
            header: dict[str, object] | str = _header(descr, shape)
            header["fortran_order"] = draw(st.booleans())
            declared = (descr, shape, None)
            if draw(st.integers(0, 4)) == 0:
                header = draw(st.text(st.characters(max_codepoint=255), max_size=20))
                declared = None
            data = bytes(draw(st.integers(0, 64)))
            members[i] = (name, _npy(header, data, draw(st.sampled_from([1, 2, 3]))), declared)
        elif what == "cut":  # the values are gone (or, once bytes are appended, others)
            cut = npy[: draw(st.integers(0, len(npy)))]
            members[i] = (name, cut, None if declared is None else (*declared[:2], None))
        else:  # bytes after the data, which numpy does not read
            members[i] = (name, npy + draw(st.binary(max_size=16)), declared)
    body = _zip([(name, npy) for name, npy, _ in members], draw(st.sampled_from(_COMPRESSIONS)))
    last = {name: declared for name, _, declared in members}  # numpy reads the last copy
    if draw(st.booleans()):
        raw = bytearray(body)
        for _ in range(draw(st.integers(1, 4))):
            raw[draw(st.integers(0, len(raw) - 1))] = draw(st.integers(0, 255))
        body, last = bytes(raw), {}
    if draw(st.integers(0, 4)) == 0:
        body, last = body[: draw(st.integers(0, len(body)))], {}
    return body, last


def _check_npz(body: bytes, declared: dict[str, _Declared]) -> None:
    try:
        got = inputs_from_npz(body, PARAMS)
    except RequestError:
        return
    for name, a in zip(PARAMS, got, strict=True):
        assert isinstance(a, np.ndarray)
        assert a.dtype.name in DTYPES and a.size <= MAX_ELEMENTS
        said = declared.get(f"{name}.npy")
        if said is not None:
            dtype, shape, values = said
            assert (a.dtype, a.shape) == (np.dtype(dtype), shape)
            if values is not None:
                np.testing.assert_array_equal(a, values)


@settings(max_examples=300, deadline=None)
@given(_npz_bodies())
def test_a_mutated_npz_body_gives_the_declared_arrays_or_a_request_error(case):
    _check_npz(*case)


def test_a_client_body_from_request_to_json_reads_back_exactly():
    x = np.array([[0.5, np.nan], [np.inf, -np.inf]], np.float32)
    w = np.array([[1, 2]], np.int64)
    got = inputs_from_json(request_to_json({"w": w, "x": x}), PARAMS)
    assert [a.dtype for a in got] == [np.float32, np.int64]
    np.testing.assert_array_equal(got[0], x)  # NaN and the infinities as their strings
    np.testing.assert_array_equal(got[1], w)
