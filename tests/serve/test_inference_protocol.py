"""The Open Inference Protocol's routes, metadata and infer bodies (dynshape/serve/
inference_protocol.py), without Ray: bodies made by a real client of the protocol
(``tritonclient.http``'s own request encoder and response parser) and by hand, each parsed
request compared with the arrays sent, every refusal on its message."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

import dynshape
from dynshape.serve import inference_protocol as v2
from dynshape.serve.inference_protocol import ProtocolError
from dynshape.serve.wire import inputs_from_json
from vm import Executable

PROGRAM = """
def @main(%x: Tensor[(batch, 4), float32], %ids: Tensor[(batch, seq), int64])
    -> (Tensor[(batch, 4), float32], Tensor[(batch, seq), int64]) where batch in [1, 64] {
  (tanh(%x), multiply(%ids, %ids))
}
"""


@pytest.fixture(scope="module")
def exe() -> Executable:
    return dynshape.compile(PROGRAM)


@pytest.fixture(scope="module")
def model(exe: Executable) -> v2.Model:
    return v2.Model.of(exe, "net")


def _body(inputs: list[dict[str, Any]], **rest: Any) -> bytes:
    return json.dumps({"inputs": inputs, **rest}).encode()


X = {"name": "x", "shape": [2, 4], "datatype": "FP32", "data": list(range(8))}
IDS = {"name": "ids", "shape": [2, 3], "datatype": "INT64", "data": [[1, 2, 3], [4, 5, 6]]}


@pytest.mark.parametrize(
    ("method", "path", "kind"),
    [
        ("GET", "/v2", "server"),
        ("GET", "/v2/", "server"),
        ("GET", "/v2/health/live", "live"),
        ("GET", "/v2/health/ready", "ready"),
        ("GET", "/v2/models/net", "model"),
        ("GET", "/v2/models/net/versions/1", "model"),
        ("GET", "/v2/models/net/ready", "model_ready"),
        ("GET", "/v2/models/net/versions/1/ready", "model_ready"),
        ("POST", "/v2/models/net/infer", "infer"),
        ("POST", "/v2/models/net/versions/1/infer", "infer"),
        ("GET", "/v2/models/net/stats", "stats"),
        ("GET", "/v2/models/net/versions/1/stats", "stats"),
    ],
)
def test_routes(method: str, path: str, kind: str) -> None:
    assert v2.route(method, path, "net").kind == kind


@pytest.mark.parametrize(
    ("method", "path", "status", "message"),
    [
        ("GET", "/v2/models/other", 404, "unknown model 'other' (this server serves 'net')"),
        ("POST", "/v2/models/other/infer", 404, "unknown model 'other'"),
        ("GET", "/v2/models/net/versions/2", 404, "model 'net' has no version '2' (it has 1)"),
        ("GET", "/v2/models/net/statistics", 404, "no route '/v2/models/net/statistics'"),
        ("POST", "/v2/models/net/stats", 405, "/v2/models/net/stats takes GET, not POST"),
        ("GET", "/v2/repository/index", 404, "no route '/v2/repository/index'"),
        ("GET", "/v2/models/net/infer", 405, "/v2/models/net/infer takes POST, not GET"),
        ("POST", "/v2/health/ready", 405, "/v2/health/ready takes GET, not POST"),
    ],
)
def test_route_errors(method: str, path: str, status: int, message: str) -> None:
    with pytest.raises(ProtocolError, match=message.replace("(", r"\(").replace(")", r"\)")) as e:
        v2.route(method, path, "net")
    assert e.value.status == status


def test_model_metadata_shows_symbolic_dims_as_minus_one_with_their_names(
    model: v2.Model,
) -> None:
    meta = model.metadata()
    assert meta["name"] == "net" and meta["versions"] == ["1"]
    assert meta["inputs"] == [
        {"name": "x", "datatype": "FP32", "shape": [-1, 4], "dynshape_shape": ["batch", 4]},
        {"name": "ids", "datatype": "INT64", "shape": [-1, -1], "dynshape_shape": ["batch", "seq"]},
    ]
    assert meta["outputs"] == [
        {"name": "output0", "datatype": "FP32", "shape": [-1, 4], "dynshape_shape": ["batch", 4]},
        {
            "name": "output1",
            "datatype": "INT64",
            "shape": [-1, -1],
            "dynshape_shape": ["batch", "seq"],
        },
    ]
    # declared ranges as declared; a symbol without one: any size
    assert meta["dynshape_dims"] == {"batch": {"min": 1, "max": 64}, "seq": {"min": 0, "max": None}}
    json.dumps(meta)  # plain JSON


def test_server_metadata_names_the_extensions() -> None:
    assert v2.server_metadata("1.2") == {
        "name": "dynshape",
        "version": "1.2",
        "extensions": ["binary_tensor_data", "statistics", "dynshape_dims"],
    }


def test_a_json_request_flat_or_nested_gives_the_arrays_and_its_id(
    exe: Executable, model: v2.Model
) -> None:
    parsed = v2.parse_infer(_body([IDS, X], id="r-7"), None, model)  # any order of inputs
    x, ids = parsed.arrays
    np.testing.assert_array_equal(x, np.arange(8, dtype=np.float32).reshape(2, 4))
    assert x.dtype == np.float32 and ids.dtype == np.int64
    np.testing.assert_array_equal(ids, [[1, 2, 3], [4, 5, 6]])
    assert parsed.id == "r-7" and parsed.outputs is None and not parsed.binary
    body, length = v2.encode_infer(model, parsed, dynshape.VirtualMachine(exe).run(x, ids))
    assert length is None
    doc = json.loads(body)
    assert doc["model_name"] == "net" and doc["model_version"] == "1" and doc["id"] == "r-7"
    assert [o["name"] for o in doc["outputs"]] == ["output0", "output1"]
    out1 = doc["outputs"][1]
    assert out1 == {
        "name": "output1",
        "datatype": "INT64",
        "shape": [2, 3],
        "data": [1, 4, 9, 16, 25, 36],
    }
    np.testing.assert_allclose(doc["outputs"][0]["data"], np.tanh(x).ravel(), rtol=1e-6)


def test_requested_outputs_come_alone_in_the_order_asked(model: v2.Model) -> None:
    parsed = v2.parse_infer(_body([X, IDS], outputs=[{"name": "output1"}]), None, model)
    result = (np.zeros((2, 4), np.float32), np.ones((2, 3), np.int64))
    doc = json.loads(v2.encode_infer(model, parsed, result)[0])
    assert [o["name"] for o in doc["outputs"]] == ["output1"]
    assert "id" not in doc


def test_nan_and_infinities_go_back_as_wire_spells_them(model: v2.Model) -> None:
    parsed = v2.parse_infer(_body([X, IDS]), None, model)
    x = np.array([[np.nan, np.inf, -np.inf, 1.5]] * 2, np.float32)
    doc = json.loads(v2.encode_infer(model, parsed, (x, np.zeros((2, 3), np.int64)))[0])
    assert doc["outputs"][0]["data"][:4] == ["nan", "inf", "-inf", 1.5]


def _triton() -> Any:
    return pytest.importorskip("tritonclient.http")


@pytest.mark.parametrize("binary", [True, False])
def test_bodies_of_a_real_client_round_trip(exe: Executable, model: v2.Model, binary: bool) -> None:
    """tritonclient's own encoder makes the request (binary data by default, JSON data when
    asked), and its own parser reads the response back."""
    http = _triton()
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 4)).astype(np.float32)
    ids = rng.integers(-(2**40), 2**40, (3, 5)).astype(np.int64)
    inputs = [http.InferInput("x", [3, 4], "FP32"), http.InferInput("ids", [3, 5], "INT64")]
    inputs[0].set_data_from_numpy(x, binary_data=binary)
    inputs[1].set_data_from_numpy(ids, binary_data=binary)
    outputs = [http.InferRequestedOutput(n, binary_data=binary) for n in ("output1", "output0")]
    body, json_size = http.InferenceServerClient.generate_request_body(
        inputs, outputs=outputs, request_id="q1"
    )
    parsed = v2.parse_infer(body, None if json_size is None else str(json_size), model)
    np.testing.assert_array_equal(parsed.arrays[0], x)
    np.testing.assert_array_equal(parsed.arrays[1], ids)
    want = dynshape.VirtualMachine(exe).run(x, ids)
    response, length = v2.encode_infer(model, parsed, want)
    assert (length is not None) == binary
    result = http.InferenceServerClient.parse_response_body(response, header_length=length)
    assert result.get_response()["id"] == "q1"
    np.testing.assert_array_equal(result.as_numpy("output0"), want[0])
    np.testing.assert_array_equal(result.as_numpy("output1"), want[1])
    assert result.as_numpy("output1").dtype == np.int64


def test_binary_data_output_for_all_when_no_output_is_named(model: v2.Model) -> None:
    http = _triton()
    x = np.ones((1, 4), np.float32)
    inputs = [http.InferInput("x", [1, 4], "FP32"), http.InferInput("ids", [1, 0], "INT64")]
    inputs[0].set_data_from_numpy(x)
    inputs[1].set_data_from_numpy(np.zeros((1, 0), np.int64))
    body, json_size = http.InferenceServerClient.generate_request_body(inputs)
    parsed = v2.parse_infer(body, str(json_size), model)
    assert parsed.binary and parsed.outputs is None
    response, length = v2.encode_infer(model, parsed, (x * 2, np.zeros((1, 0), np.int64)))
    doc = json.loads(response[:length])
    assert [o["parameters"]["binary_data_size"] for o in doc["outputs"]] == [16, 0]
    result = http.InferenceServerClient.parse_response_body(response, header_length=length)
    np.testing.assert_array_equal(result.as_numpy("output0"), x * 2)


def test_bool_and_narrow_ints_as_binary_data() -> None:
    exe = dynshape.compile(
        "def @main(%m: Tensor[(n,), bool], %u: Tensor[(n,), uint8]) { (logical_not(%m), %u) }"
    )
    model = v2.Model.of(exe, "b")
    m, u = np.array([True, False, True]), np.array([0, 200, 255], np.uint8)
    head = _body(
        [
            {"name": "m", "shape": [3], "datatype": "BOOL", "parameters": {"binary_data_size": 3}},
            {"name": "u", "shape": [3], "datatype": "UINT8", "parameters": {"binary_data_size": 3}},
        ]
    )
    parsed = v2.parse_infer(head + m.tobytes() + u.tobytes(), str(len(head)), model)
    np.testing.assert_array_equal(parsed.arrays[0], m)
    np.testing.assert_array_equal(parsed.arrays[1], u)
    bad = head + b"\x00\x02\x01" + u.tobytes()
    with pytest.raises(ProtocolError, match="input 'm': BOOL bytes must be 0 or 1"):
        v2.parse_infer(bad, str(len(head)), model)


def _refused(model: v2.Model, body: bytes, message: str, header: str | None = None) -> None:
    with pytest.raises(dynshape.DynShapeError) as e:
        v2.parse_infer(body, header, model)
    assert message in str(e.value)
    assert getattr(e.value, "status", 400) == 400


def _with(spec: dict[str, Any], **changed: Any) -> dict[str, Any]:
    return {**spec, **changed}


@pytest.mark.parametrize(
    ("inputs", "message"),
    [
        ([X], "missing input(s) 'ids' (the model takes: x, ids)"),
        ([X, IDS, _with(X, name="y")], "unknown input(s) 'y'"),
        ([X, IDS, X], "input(s) 'x' given more than once"),
        ([_with(X, datatype="INT64"), IDS], "input 'x': datatype INT64, the model takes FP32"),
        ([_with(X, datatype="FLOAT"), IDS], "input 'x': datatype \"FLOAT\" is not one of BOOL"),
        ([_with(X, datatype="BYTES"), IDS], 'datatype "BYTES" is not one of'),
        ([_with(X, shape=[8]), IDS], "input 'x': shape [8] has rank 1, the model takes rank 2"),
        (
            [_with(X, shape=[4, 2]), IDS],
            "input 'x': shape [4, 2] has 2 on axis 1, the model takes 4",
        ),
        ([_with(X, shape=[2, -4]), IDS], "input 'x': shape must be a list of non-negative ints"),
        ([_with(X, shape=[3, 4]), IDS], "input 'x': 8 elements of data for shape (3, 4)"),
        ([_with(X, data=[1.5] * 7 + ["a"]), IDS], "input 'x': data do not fit float32: element 7"),
        ([X, _with(IDS, data=[1, 2, 3, 4, 5, 6.5])], "element 5 is 6.5, expected integers"),
        ([X, _with(IDS, data=[1, 2, 3, 4, 5, 2**63])], "not in -9223372036854775808.."),
        ([{"shape": [1], "datatype": "FP32", "data": [1]}], "each input must be a JSON object"),
        ([_with(X, parameters={"binary_data_size": 32}), IDS], "not both"),
        ([{"name": "x", "shape": [2, 4], "datatype": "FP32"}, IDS], "data or parameters.binary"),
    ],
)
def test_bad_inputs_are_refused_naming_them(
    model: v2.Model, inputs: list[dict[str, Any]], message: str
) -> None:
    _refused(model, _body(inputs), message)


@pytest.mark.parametrize(
    ("literal", "datatype", "message"),
    [
        ("1e400", "FP32", "element 1 is 1e400, beyond even float64's range"),
        ("-1e400", "FP32", "element 1 is -1e400, beyond even float64's range"),
        ("1e400", "INT64", "element 1 is 1e400, beyond even float64's range"),
        ("1e39", "FP32", "element 1 is 1e+39, too large for it"),
        ("NaN", "INT64", "element 1 is NaN, expected integers"),
        ("Infinity", "INT64", "element 1 is Infinity, expected integers"),
        ("-Infinity", "INT32", "element 1 is -Infinity, expected integers"),
    ],
)
def test_values_beyond_the_dtype_are_refused_whatever_their_spelling(
    literal: str, datatype: str, message: str
) -> None:
    """In the protocol's body and in wire.py's own (the same reader of elements)."""
    dtype = v2.DATATYPES[datatype]
    exe = dynshape.compile(f"def @main(%x: Tensor[(n,), {dtype}]) {{ %x }}")
    model = v2.Model.of(exe, "m")
    protocol = f'{{"inputs": [{{"name": "x", "shape": [2], "datatype": "{datatype}", '
    protocol += f'"data": [1, {literal}]}}]}}'
    _refused(model, protocol.encode(), f"input 'x': data do not fit {dtype}: {message}")
    own = f'{{"inputs": {{"x": {{"dtype": "{dtype}", "shape": [2], "data": [1, {literal}]}}}}}}'
    with pytest.raises(dynshape.DynShapeError, match=f"input 'x': data do not fit {dtype}"):
        inputs_from_json(own.encode(), ["x"])


def test_nan_and_infinity_literals_are_floats_where_the_dtype_is_a_float() -> None:
    exe = dynshape.compile("def @main(%x: Tensor[(n,), float32]) { %x }")
    body = b'{"inputs": [{"name": "x", "shape": [3], "datatype": "FP32", '
    body += b'"data": [NaN, Infinity, "-inf"]}]}'
    (x,) = v2.parse_infer(body, None, v2.Model.of(exe, "m")).arrays
    assert np.isnan(x[0]) and x[1] == np.inf and x[2] == -np.inf


@pytest.mark.parametrize(
    ("tail", "header", "message"),
    [
        (b"", "x", "Inference-Header-Content-Length is 'x': expected the length of the JSON"),
        (b"", "100000", "at most the body's"),
        (b"\0" * 31, None, "input 'x': the body ends 1 bytes before its data"),
        (b"\0" * 33, None, "the body has 1 bytes after the inputs' binary data"),
    ],
)
def test_bad_binary_bodies_are_refused(
    model: v2.Model, tail: bytes, header: str | None, message: str
) -> None:
    spec = _with(X, parameters={"binary_data_size": 32})
    del spec["data"]
    head = _body([spec, IDS])
    _refused(model, head + tail, message, header if header is not None else str(len(head)))


def test_a_binary_size_that_is_not_the_shape_s_is_refused(model: v2.Model) -> None:
    spec = _with(X, parameters={"binary_data_size": 16})
    del spec["data"]
    head = _body([spec, IDS])
    _refused(
        model,
        head + b"\0" * 16,
        "input 'x': binary_data_size 16 is not the 32 bytes of FP32 [2, 4]",
        str(len(head)),
    )


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ([X], 'expected a JSON object {"inputs": [{name, shape, datatype, data}]}'),
        ({"inputs": {"x": X}}, 'expected a JSON object {"inputs": [{name, shape'),
        ({"inputs": [X, IDS], "id": 7}, "id must be a string, not int"),
        ({"inputs": [X, IDS], "outputs": [{"name": "y"}]}, "unknown output 'y' (the model has"),
        ({"inputs": [X, IDS], "outputs": "output0"}, "outputs must be a list of {name}"),
        ({"inputs": [X, IDS], "parameters": {"binary_data_output": 1}}, "must be true or false"),
        ({"inputs": [X, IDS], "parameters": []}, "the request: parameters must be a JSON object"),
    ],
)
def test_bad_requests_are_refused(model: v2.Model, doc: Any, message: str) -> None:
    _refused(model, json.dumps(doc).encode(), message)


def test_a_body_that_is_not_json_is_refused(model: v2.Model) -> None:
    _refused(model, b"{", "the body is not JSON")
    _refused(model, b"[" * 1000 + b"]" * 1000, "nested too deeply")


def test_the_error_body_is_the_protocol_s() -> None:
    assert json.loads(v2.error_body("input 'x': no")) == {"error": "input 'x': no"}


def test_a_bfloat16_output_is_bf16_and_a_float8_one_is_refused_by_name() -> None:
    pytest.importorskip("ml_dtypes")
    exe = dynshape.compile(
        'def @main(%x: Tensor[(n,), float32]) { (cast(%x, dtype="bfloat16"), '
        'cast(%x, dtype="float8_e4m3fn")) }'
    )
    model = v2.Model.of(exe, "m")
    assert [o["datatype"] for o in model.metadata()["outputs"]] == ["BF16", "FLOAT8_E4M3FN"]
    body = _body([{"name": "x", "shape": [2], "datatype": "FP32", "data": [1.5, "nan"]}])
    parsed = v2.parse_infer(body, None, model)
    result = dynshape.VirtualMachine(exe).run(*parsed.arrays)
    only_bf16 = v2.InferRequest(parsed.arrays, None, (v2.Requested("output0", False),), False)
    doc = json.loads(v2.encode_infer(model, only_bf16, result)[0])
    assert doc["outputs"] == [
        {"name": "output0", "datatype": "BF16", "shape": [2], "data": [1.5, "nan"]}
    ]
    with pytest.raises(ProtocolError, match="output 'output1' is float8_e4m3fn, for which") as e:
        v2.encode_infer(model, parsed, result)
    assert e.value.status == 500
