"""The Open Inference Protocol (KServe v2), REST: routes, metadata and the infer bodies (numpy
only; the deployment answers with what this module makes).

Routes (``route``)::

    GET  /v2                          server metadata
    GET  /v2/health/live              200 while the server answers
    GET  /v2/health/ready             200 once the model is loaded
    GET  /v2/models/{name}            model metadata (also .../versions/1)
    GET  /v2/models/{name}/ready      200 once the model is loaded
    POST /v2/models/{name}/infer      inference
    GET  /v2/models/{name}/stats      request, error and latency counts (answered by the front)
    POST /v2/models/{name}/generate   a generation, whole (a server started with --generate;
    POST /v2/models/{name}/generate_stream    as server-sent events; generation_wire.py)

An infer request is ``{"id"?, "parameters"?, "inputs": [{"name", "shape", "datatype", "data"
| "parameters": {"binary_data_size"}}], "outputs"?: [{"name", "parameters"?: {"binary_data"}}]}``;
its ``data`` is flat in row-major order or nested, typed as strictly as the JSON bodies of
``wire.py`` (an ``INT64`` takes JSON integers only; a value beyond the dtype's range is refused).
With the *binary tensor data* extension, the JSON is followed by the raw little-endian bytes
of the inputs that say ``binary_data_size``, and the ``Inference-Header-Content-Length``
header gives the JSON's length; outputs come back the same way when the request asks for it
(``"binary_data_output": true`` for all, ``"binary_data": true`` for one). The response is
``{"model_name", "model_version", "id"?, "outputs": [{"name", "shape", "datatype", "data"}]}``.

Model metadata shows a symbolic dim as ``-1``, as the protocol does; the extension fields
``dynshape_shape`` (each tensor's dims as the executable states them: ``["batch", 8]``) and
``dynshape_dims`` (each symbol's range, ``{"batch": {"min": 1, "max": 4096}}``, ``max`` null
when unbounded) say which ``-1`` is which. Every error is a ``ProtocolError`` carrying its
HTTP status (400, 404 for an unknown model or route, 405 for a wrong method), answered as
``{"error": message}``.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from vm.executable import Executable, Param, TensorSpec

from ..errors import RequestError
from .wire import (
    MAX_ELEMENTS,
    check_names,
    check_shape,
    json_array,
    json_data,
    leaves,
    parse_json,
)

#: The protocol's datatypes of the dtypes the VM takes (``BYTES`` and ``BF16`` have none here).
DATATYPES: dict[str, str] = {
    "BOOL": "bool",
    "UINT8": "uint8",
    "UINT16": "uint16",
    "UINT32": "uint32",
    "UINT64": "uint64",
    "INT8": "int8",
    "INT16": "int16",
    "INT32": "int32",
    "INT64": "int64",
    "FP16": "float16",
    "FP32": "float32",
    "FP64": "float64",
}
#: The datatype of each dtype a result may have: the inputs' and ``BF16`` (the protocol's
#: name for ``bfloat16``, which requests cannot send: it is not on the wire of ``wire.py``).
DATATYPE_OF = {**{dtype: datatype for datatype, dtype in DATATYPES.items()}, "bfloat16": "BF16"}
#: The request and response header of the binary tensor data extension.
HEADER_LENGTH = "Inference-Header-Content-Length"
#: The model version every model here has: one file is one version.
VERSION = "1"
EXTENSIONS = ("binary_tensor_data", "statistics", "dynshape_dims")
_SYMBOL = re.compile(r"[A-Za-z_][A-Za-z_0-9]*")
#: The routes that take POST (the others take GET).
POSTED = ("infer", "generate", "generate_stream")
_MODEL_ROUTE = re.compile(
    r"/v2/models/([^/]+)(?:/versions/([^/]+))?(/ready|/infer|/stats|/generate_stream|/generate)?"
)


class ProtocolError(RequestError):
    """A request the protocol answers with an error: ``status`` is its HTTP status."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class Route:
    """What a request asks for: ``kind`` is ``server``, ``live``, ``ready``, ``model``,
    ``model_ready``, ``infer``, ``stats``, ``generate`` or ``generate_stream``."""

    kind: str


def route(method: str, path: str, model: str) -> Route:
    """The route of a ``/v2`` path (ProtocolError 404 for another model or path, 405 for a
    wrong method)."""
    path = path.rstrip("/")
    fixed = {"/v2": "server", "/v2/health/live": "live", "/v2/health/ready": "ready"}
    found = _MODEL_ROUTE.fullmatch(path)
    if path in fixed:
        kind = fixed[path]
    elif found is not None:
        name, version, tail = found.groups()
        if name != model:
            raise ProtocolError(f"unknown model {name!r} (this server serves {model!r})", 404)
        if version is not None and version != VERSION:
            raise ProtocolError(
                f"model {name!r} has no version {version!r} (it has {VERSION})", 404
            )
        kinds = {None: "model", "/ready": "model_ready", "/infer": "infer", "/stats": "stats"}
        kind = kinds.get(tail) or tail[1:]  # generate, generate_stream
    else:
        raise ProtocolError(f"no route {path!r} (the protocol's routes start /v2)", 404)
    wanted = "POST" if kind in POSTED else "GET"
    if method != wanted:
        raise ProtocolError(f"{path} takes {wanted}, not {method}", 405)
    return Route(kind)


def server_metadata(version: str) -> dict[str, Any]:
    """The ``GET /v2`` answer."""
    return {"name": "dynshape", "version": version, "extensions": list(EXTENSIONS)}


@dataclass(frozen=True)
class Model:
    """A served executable as the protocol describes it: its name and ``main``'s tensors."""

    name: str
    inputs: tuple[Param, ...]
    outputs: tuple[Param, ...]
    ranges: Mapping[str, tuple[int, int | None]]

    @classmethod
    def of(cls, exe: Executable, name: str) -> Model:
        """The model ``exe`` served as ``name``."""
        return cls(name, exe.inputs, exe.named_outputs, exe.ranges)

    def metadata(self) -> dict[str, Any]:
        """The ``GET /v2/models/{name}`` answer."""
        tensors = [*self.inputs, *self.outputs]
        symbols = dict.fromkeys(
            s for p in tensors for d in _dims(p) if isinstance(d, str) for s in _SYMBOL.findall(d)
        )
        dims = {}
        for s in symbols:
            low, high = self.ranges.get(s, (0, None))
            dims[s] = {"min": low, "max": high}
        return {
            "name": self.name,
            "versions": [VERSION],
            "platform": "dynshape",
            "inputs": [_tensor_metadata(p) for p in self.inputs],
            "outputs": [_tensor_metadata(p) for p in self.outputs],
            "dynshape_dims": dims,
        }


def _dims(p: Param) -> tuple[int | str, ...]:
    return p.type.shape if isinstance(p.type, TensorSpec) else ()


def _tensor_metadata(p: Param) -> dict[str, Any]:
    if not isinstance(p.type, TensorSpec):  # a tuple parameter: no protocol datatype says it
        return {"name": p.name, "datatype": "", "shape": [], "dynshape_shape": str(p.type)}
    dims = p.type.shape
    return {
        "name": p.name,
        "datatype": DATATYPE_OF.get(p.type.dtype, p.type.dtype.upper()),
        "shape": [d if isinstance(d, int) else -1 for d in dims],
        "dynshape_shape": list(dims),
    }


@dataclass(frozen=True)
class Requested:
    """One output a request asks for, and whether it wants it as binary data."""

    name: str
    binary: bool


@dataclass(frozen=True)
class InferRequest:
    """A parsed infer request: the arrays in parameter order, the request's ``id`` and the
    outputs it asks for (None: all of them, each binary when ``binary`` says so)."""

    arrays: tuple[np.ndarray, ...]
    id: str | None
    outputs: tuple[Requested, ...] | None
    binary: bool


def parse_infer(body: bytes, header_length: str | None, model: Model) -> InferRequest:
    """The infer request of ``body`` (``header_length``: the binary extension's header, or
    None when the whole body is JSON); ProtocolError naming what is wrong."""
    head, tail = _split(body, header_length)
    doc = parse_json(head)
    if not isinstance(doc, dict) or not isinstance(doc.get("inputs"), list):
        raise ProtocolError('expected a JSON object {"inputs": [{name, shape, datatype, data}]}')
    request_id = doc.get("id")
    if request_id is not None and not isinstance(request_id, str):
        raise ProtocolError(f"id must be a string, not {type(request_id).__name__}")
    binary = _flag(doc.get("parameters"), "binary_data_output", "the request")
    specs = [_input_header(spec) for spec in doc["inputs"]]
    names = [s.name for s in specs]
    duplicated = sorted({n for n in names if names.count(n) > 1})
    if duplicated:
        raise ProtocolError(f"input(s) {', '.join(map(repr, duplicated))} given more than once")
    params = [p.name for p in model.inputs]
    check_names(names, params)
    for spec in specs:
        _check_type(spec, _param(model, spec.name))
    total = sum(math.prod(s.shape) for s in specs)
    if total > MAX_ELEMENTS:
        raise ProtocolError(
            f"the inputs have {total:,} elements in all, more than {MAX_ELEMENTS:,}"
        )
    arrays = dict(_read_binary(specs, tail))
    for s in specs:
        if s.name not in arrays:
            arrays[s.name] = json_array(s.name, s.dtype, s.shape, s.data)
    return InferRequest(
        tuple(arrays[n] for n in params), request_id, _requested(doc, model, binary), binary
    )


def encode_infer(model: Model, request: InferRequest, result: Any) -> tuple[bytes, int | None]:
    """The infer response of ``result`` and, when an output is sent as binary data, the length
    of its JSON part (the ``Inference-Header-Content-Length`` header)."""
    arrays = [np.asarray(a) for a in leaves(result)]
    names = [p.name for p in model.outputs]
    if len(names) != len(arrays):  # a nested tuple result: one name a leaf
        names = [f"output{i}" for i in range(len(arrays))]
    by_name = dict(zip(names, arrays, strict=True))
    wanted = request.outputs or tuple(Requested(n, request.binary) for n in names)
    outputs, blobs = [], []
    for want in wanted:
        a = by_name[want.name]
        if a.dtype.name not in DATATYPE_OF:  # float8, int4...: no datatype says them
            raise ProtocolError(
                f"output {want.name!r} is {a.dtype.name}, for which the protocol has no "
                "datatype; POST / answers it (.npz)",
                500,
            )
        entry: dict[str, Any] = {
            "name": want.name,
            "datatype": DATATYPE_OF[a.dtype.name],
            "shape": list(a.shape),
        }
        if want.binary:
            blob = np.ascontiguousarray(a, a.dtype.newbyteorder("<")).tobytes()
            entry["parameters"] = {"binary_data_size": len(blob)}
            blobs.append(blob)
        else:
            entry["data"] = json_data(a)
        outputs.append(entry)
    doc: dict[str, Any] = {"model_name": model.name, "model_version": VERSION}
    if request.id is not None:
        doc["id"] = request.id
    doc["outputs"] = outputs
    head = json.dumps(doc).encode()
    if not blobs:
        return head, None
    return head + b"".join(blobs), len(head)


def error_body(message: str) -> bytes:
    """The protocol's error answer."""
    return json.dumps({"error": message}).encode()


@dataclass(frozen=True)
class _Input:
    """One input's header: its name, dtype, shape, and its JSON data or binary size."""

    name: str
    datatype: str
    dtype: np.dtype
    shape: tuple[int, ...]
    data: Any
    binary_size: int | None


def _split(body: bytes, header_length: str | None) -> tuple[bytes, bytes]:
    if header_length is None:
        return body, b""
    length = header_length.strip()
    if not length.isdigit() or int(length) > len(body):
        raise ProtocolError(
            f"{HEADER_LENGTH} is {header_length!r}: expected the length of the JSON part, at most "
            f"the body's {len(body)} bytes"
        )
    return body[: int(length)], body[int(length) :]


def _flag(parameters: Any, key: str, where: str) -> bool:
    """A boolean parameter (False when absent)."""
    if parameters is None:
        return False
    if not isinstance(parameters, dict):
        raise ProtocolError(f"{where}: parameters must be a JSON object")
    value = parameters.get(key, False)
    if type(value) is not bool:
        raise ProtocolError(f"{where}: parameter {key!r} must be true or false")
    return value


def _input_header(spec: Any) -> _Input:
    """An input's name, datatype and shape, checked; its data is read later."""
    if not isinstance(spec, dict) or not isinstance(spec.get("name"), str):
        raise ProtocolError("each input must be a JSON object with a name (a string)")
    name = spec["name"]
    if not {"shape", "datatype"} <= spec.keys():
        raise ProtocolError(f"input {name!r}: expected {{name, shape, datatype, data}}")
    datatype, shape = spec["datatype"], spec["shape"]
    if not isinstance(datatype, str) or datatype not in DATATYPES:
        raise ProtocolError(
            f"input {name!r}: datatype {json.dumps(datatype)[:40]} is not one of "
            f"{', '.join(DATATYPES)}"
        )
    if not isinstance(shape, list):
        raise ProtocolError(f"input {name!r}: shape must be a list of non-negative ints")
    parameters = spec.get("parameters")
    size = None
    if isinstance(parameters, dict) and "binary_data_size" in parameters:
        size = parameters["binary_data_size"]
        if type(size) is not int or size < 0:
            raise ProtocolError(f"input {name!r}: binary_data_size must be a non-negative int")
    elif parameters is not None and not isinstance(parameters, dict):
        raise ProtocolError(f"input {name!r}: parameters must be a JSON object")
    if (size is None) == ("data" not in spec):
        raise ProtocolError(
            f"input {name!r}: expected either data or parameters.binary_data_size, not "
            + ("both" if size is not None else "neither")
        )
    dtype = np.dtype(DATATYPES[datatype])
    return _Input(name, datatype, dtype, check_shape(name, shape), spec.get("data"), size)


def _param(model: Model, name: str) -> Param:
    return next(p for p in model.inputs if p.name == name)


def _check_type(spec: _Input, param: Param) -> None:
    """Refuse an input whose datatype or rank is not the parameter's, naming both (the VM
    would refuse it too, but in its own words and after the data were read)."""
    declared = param.type
    if not isinstance(declared, TensorSpec):
        return  # the VM names what it wanted
    if declared.dtype != spec.dtype.name:
        wanted = DATATYPE_OF.get(declared.dtype, declared.dtype)
        raise ProtocolError(
            f"input {spec.name!r}: datatype {spec.datatype}, the model takes {wanted}"
        )
    if len(declared.shape) != len(spec.shape):
        raise ProtocolError(
            f"input {spec.name!r}: shape {list(spec.shape)} has rank {len(spec.shape)}, the model "
            f"takes rank {len(declared.shape)} ({declared})"
        )
    for axis, (dim, size) in enumerate(zip(declared.shape, spec.shape, strict=True)):
        if isinstance(dim, int) and dim != size:
            raise ProtocolError(
                f"input {spec.name!r}: shape {list(spec.shape)} has {size} on axis {axis}, the "
                f"model takes {dim} ({declared})"
            )


def _read_binary(specs: Sequence[_Input], tail: bytes) -> dict[str, np.ndarray]:
    """The inputs sent as binary data, cut from ``tail`` in the order of their headers."""
    out: dict[str, np.ndarray] = {}
    offset = 0
    for s in specs:
        if s.binary_size is None:
            continue
        expected = math.prod(s.shape) * s.dtype.itemsize
        if s.binary_size != expected:
            raise ProtocolError(
                f"input {s.name!r}: binary_data_size {s.binary_size} is not the {expected} bytes "
                f"of {s.datatype} {list(s.shape)}"
            )
        chunk = tail[offset : offset + expected]
        if len(chunk) != expected:
            raise ProtocolError(
                f"input {s.name!r}: the body ends {expected - len(chunk)} bytes before its data"
            )
        offset += expected
        array = np.frombuffer(chunk, s.dtype.newbyteorder("<")).reshape(s.shape)
        if s.dtype.kind == "b" and not set(np.frombuffer(chunk, np.uint8).tolist()) <= {0, 1}:
            raise ProtocolError(f"input {s.name!r}: BOOL bytes must be 0 or 1")
        out[s.name] = array.astype(s.dtype)  # native order, and a writable copy
    if offset != len(tail):
        raise ProtocolError(
            f"the body has {len(tail) - offset} bytes after the inputs' binary data"
        )
    return out


def _requested(doc: Mapping[str, Any], model: Model, binary: bool) -> tuple[Requested, ...] | None:
    """The outputs a request names (None: all), each unknown name refused."""
    asked = doc.get("outputs")
    if asked is None:
        return None
    if not isinstance(asked, list):
        raise ProtocolError("outputs must be a list of {name}")
    names = [p.name for p in model.outputs]
    out = []
    for spec in asked:
        if not isinstance(spec, dict) or not isinstance(spec.get("name"), str):
            raise ProtocolError("each requested output must be a JSON object with a name")
        if spec["name"] not in names:
            raise ProtocolError(
                f"unknown output {spec['name']!r} (the model has: {', '.join(names)})"
            )
        parameters = spec.get("parameters")
        wants = _flag(parameters, "binary_data", f"output {spec['name']!r}")
        given = isinstance(parameters, dict) and "binary_data" in parameters
        out.append(Requested(spec["name"], wants if given else binary))
    return tuple(out)
