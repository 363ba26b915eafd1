"""The HTTP bodies of a served executable: JSON and ``.npz``, in and out (numpy only).

JSON request::

    {"inputs": {"x": {"dtype": "float32", "shape": [2, 4], "data": [0.5, ...]}}}

``data`` is the flat list of elements in C order (nested lists are accepted too); ``dtype``
(one of ``vm.executable.CORE_DTYPES``) and ``shape`` are required, so a float array is never guessed
from its numbers. Elements are typed strictly, so that no value is ever rounded or wrapped into
the array: an integer dtype takes JSON integers only (not ``1.5``, not ``2.0``, not ``true``),
``bool`` takes ``true``/``false`` only, and a float dtype takes JSON numbers and the strings
``"nan"``, ``"inf"``, ``"-inf"`` (not ``true``). A value outside the dtype's range (``300``
for ``uint8``, ``1e39`` for ``float32``, ``1e400`` for any dtype: ``json`` would make it an
infinity) is refused, not wrapped or made infinite; ``NaN`` and ``Infinity``, Python's own
JSON spellings, are floats, which integer dtypes refuse.

The JSON response is ``{"outputs": [{"dtype": ..., "shape": ..., "data": [...]}, ...]}``, one
entry per result (a tuple result gives several), floats as JSON numbers (NaN and the infinities
as the strings above). An ``.npz`` request (``Content-Type: application/x-npz``) holds one
``name.npy`` member per parameter, of a dtype in ``DTYPES``; its response holds ``out`` or
``out.0``, ``out.1``... as ``dynshape run -o`` writes them. Loading never unpickles.

Limits, checked before any element is converted or decompressed: a JSON body nests at most
``MAX_DEPTH`` levels, a shape has at most ``MAX_RANK`` dims, one input at most ``MAX_ELEMENTS``
elements, and all the inputs of a request together at most ``MAX_ELEMENTS`` (an ``.npz``
member's size is read from its ``.npy`` header, so a small compressed body cannot unpack into
gigabytes). Every malformed body is a
``RequestError`` naming the input and what is wrong (an HTTP 400), never another exception.
"""

from __future__ import annotations

import io
import json
import lzma
import math
import re
import tokenize
import zipfile
import zlib
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from vm.executable import CORE_DTYPES as DTYPES  # numpy's own: what .npy and JSON carry

from ..errors import RequestError

#: Most elements one request may send, over all its inputs (guards the server's memory).
MAX_ELEMENTS = 1 << 26
#: Most dims of an input: numpy 1's limit (numpy 2 allows 64); no model here needs more.
MAX_RANK = 32
#: Deepest nesting of arrays and objects in a JSON body: data nested by rank, in the three
#: objects of ``{"inputs": {name: {..., "data": ...}}}``.
MAX_DEPTH = MAX_RANK + 3
NPZ = "application/x-npz"

# What reading an untrusted .npz can raise, beside our own RequestError. From zipfile:
# BadZipFile, RuntimeError (an encrypted member), NotImplementedError (an unknown compression
# method), KeyError (a member listed but absent), and from a corrupt or truncated compressed
# stream zlib.error, lzma.LZMAError, OSError (bz2) or EOFError: a member may use any of the
# three. From numpy's .npy header parser: ValueError (its own checks), and from the
# ``ast.literal_eval`` it runs on the header SyntaxError, TypeError (``{[]: 1}``) and
# RecursionError (a RuntimeError), from its Python 2 fallback tokenize.TokenError. A member
# name that is not UTF-8 is a UnicodeDecodeError, a ValueError. Found by the fuzz tests.
_NPZ_ERRORS = (
    ValueError,
    TypeError,
    SyntaxError,
    tokenize.TokenError,
    OSError,
    EOFError,
    KeyError,
    RuntimeError,
    NotImplementedError,
    zipfile.BadZipFile,
    zlib.error,
    lzma.LZMAError,
)
# A JSON string (brackets in it do not nest), and the bytes that step the nesting level.
_JSON_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
_STEPS = bytes.maketrans(b"[{]}", b"\x01\x01\xff\xff")  # +1, +1, -1, -1 as int8
# np.load reads a body as .npz only when it starts like a zip (else as .npy or a pickle).
_ZIP_MAGIC = (b"PK\x03\x04", b"PK\x05\x06")


def inputs_from_json(body: bytes, params: Sequence[str]) -> tuple[np.ndarray, ...]:
    """The arrays of a JSON request, in parameter order."""
    doc = parse_json(body)
    if not isinstance(doc, dict) or not isinstance(doc.get("inputs"), dict):
        raise RequestError('expected a JSON object {"inputs": {name: {dtype, shape, data}}}')
    given: Mapping[str, Any] = doc["inputs"]
    # Every header, the names and the request's total size are checked before any data is
    # converted (a malformed input is named before a missing one).
    headers = {name: _json_header(name, spec) for name, spec in given.items()}
    check_names(headers, params)
    _check_total(headers)
    return tuple(json_array(name, *headers[name], given[name]["data"]) for name in params)


def parse_json(body: bytes) -> Any:
    """A JSON body, parsed strictly: bounded in depth before parsing, and a number literal
    beyond float64's range (``1e400``, ``-1e400``) kept as an ``Overflowing`` value, which
    every dtype refuses, instead of the infinity ``json`` makes of it. ``NaN`` and
    ``Infinity`` (Python's own JSON spellings) stay floats, which integer dtypes refuse."""
    too_deep = f"the body is not JSON: nested too deeply (more than {MAX_DEPTH} levels)"
    try:
        text = body.decode(json.detect_encoding(body), "surrogatepass")  # as json.loads does
        if _too_deep(text):
            raise RequestError(too_deep)
        return json.loads(text, parse_float=_parse_float)
    except RecursionError:  # not expected below MAX_DEPTH, unless the caller is deep already
        raise RequestError(too_deep) from None
    except ValueError as e:  # JSONDecodeError, UnicodeDecodeError, an int of 4300+ digits
        raise RequestError(f"the body is not JSON: {e}") from None


class Overflowing(str):
    """A JSON number literal beyond float64's range, as it was spelled: no dtype holds it."""


def _parse_float(text: str) -> float | Overflowing:
    value = float(text)
    return value if math.isfinite(value) else Overflowing(text)


def inputs_from_npz(body: bytes, params: Sequence[str]) -> tuple[np.ndarray, ...]:
    """The arrays of an ``.npz`` request, in parameter order.

    Every member's ``.npy`` header is read first (the zip decompresses only those few bytes),
    so sizes and dtypes are refused before any data is unpacked."""
    if not body.startswith(_ZIP_MAGIC):
        raise RequestError("the body is not a readable .npz file: it is not a zip archive")
    try:
        with zipfile.ZipFile(io.BytesIO(body)) as archive:
            headers = dict(_npy_header(archive, m) for m in archive.infolist())
    except _NPZ_ERRORS as e:
        raise RequestError(f"the body is not a readable .npz file: {e}") from None
    check_names(headers, params)
    _check_total(headers)
    try:
        data = np.load(io.BytesIO(body), allow_pickle=False)
    except _NPZ_ERRORS as e:
        raise RequestError(f"the body is not a readable .npz file: {e}") from None
    with data:
        return tuple(_npy_data(data, name) for name in params)


def request_to_json(inputs: Mapping[str, np.ndarray]) -> bytes:
    """The JSON request body of named input arrays: what a Python client sends."""
    return json.dumps({"inputs": {n: _encode(np.asarray(a)) for n, a in inputs.items()}}).encode()


def outputs_to_json(result: Any) -> bytes:
    """The JSON response of a result (an array, an int, or a tuple of them)."""
    return json.dumps({"outputs": [_encode(a) for a in leaves(result)]}).encode()


def outputs_to_npz(result: Any) -> bytes:
    """The ``.npz`` response of a result: ``out``, or ``out.0``, ``out.1``... for a tuple."""
    arrays = leaves(result)
    names = ["out"] if not isinstance(result, tuple) else [f"out.{i}" for i in range(len(arrays))]
    buf = io.BytesIO()
    np.savez(buf, **dict(zip(names, arrays, strict=True)))  # type: ignore[arg-type]
    return buf.getvalue()


def _too_deep(text: str) -> bool:
    """Whether a JSON text nests arrays and objects more than ``MAX_DEPTH`` deep, found without
    recursion.

    json's C parser recurses once a level, bounded by the recursion limit only: where that
    limit is raised (``ir.nesting`` raises it to 100,000 for deep IR), a deep body overflows
    the C stack and kills the process instead of raising RecursionError. So the depth is
    counted first: strings dropped, each bracket a step of +1 or -1, the deepest running sum."""
    if text.count("[") + text.count("{") <= MAX_DEPTH:  # the common case: few brackets at all
        return False
    bare = _JSON_STRING.sub("", text).encode("utf-8", "surrogatepass")
    steps = np.frombuffer(bare.translate(_STEPS, delete=_NOT_BRACKETS), np.int8)
    level = 0
    for start in range(0, len(steps), 1 << 20):  # in chunks: the sums take 8 bytes a bracket
        levels = level + np.cumsum(steps[start : start + (1 << 20)], dtype=np.int64)
        if levels.max() > MAX_DEPTH:
            return True
        level = int(levels[-1])
    return False


# A checked header: the dtype and the shape an input declares.
_Header = tuple[np.dtype, tuple[int, ...]]


def check_names(given: Iterable[str], params: Sequence[str]) -> None:
    """Refuse unknown and missing inputs, naming all of them at once."""
    unknown = [n for n in given if n not in params]
    missing = [n for n in params if n not in given]
    if unknown or missing:
        said = []
        if unknown:
            said.append(f"unknown input(s) {', '.join(map(repr, unknown))}")
        if missing:
            said.append(f"missing input(s) {', '.join(map(repr, missing))}")
        raise RequestError(f"{'; '.join(said)} (the model takes: {', '.join(params)})")


def check_shape(name: str, shape: Sequence[Any]) -> tuple[int, ...]:
    """A declared shape, once it is known to be allocatable within the limits."""
    # type() is exact: a JSON true is not a dim (bool is a subclass of int).
    if not all(type(d) is int and d >= 0 for d in shape):
        raise RequestError(f"input {name!r}: shape must be a list of non-negative ints")
    if len(shape) > MAX_RANK:
        raise RequestError(f"input {name!r}: rank {len(shape)} is more than {MAX_RANK}")
    count = math.prod(shape)
    if count > MAX_ELEMENTS:
        raise RequestError(f"input {name!r}: {count:,} elements is more than {MAX_ELEMENTS:,}")
    if any(d > MAX_ELEMENTS for d in shape):  # an empty array, but numpy cannot index it
        raise RequestError(f"input {name!r}: a dim of {max(shape):,} is more than {MAX_ELEMENTS:,}")
    return tuple(shape)


def _check_dtype(name: str, dtype: np.dtype) -> None:
    """Refuse an .npz member's dtype unless the VM takes it."""
    # Only the VM's dtypes: an "S1000000000" or "V..." element would defeat the element limit.
    if dtype.hasobject:
        raise RequestError(f"input {name!r}: object arrays are refused (reading them unpickles)")
    if dtype.name not in DTYPES:
        raise RequestError(f"input {name!r}: dtype {dtype} is not one of {', '.join(DTYPES)}")


def _check_total(headers: Mapping[str, _Header]) -> None:
    """Refuse a request whose inputs together are too large, each one being small enough."""
    total = sum(math.prod(shape) for _, shape in headers.values())
    if total > MAX_ELEMENTS:
        raise RequestError(f"the inputs have {total:,} elements in all, more than {MAX_ELEMENTS:,}")


def _json_header(name: str, spec: Any) -> _Header:
    """The dtype and shape a JSON input declares, checked; its data is read later."""
    if not isinstance(spec, dict) or not {"dtype", "shape", "data"} <= spec.keys():
        raise RequestError(f"input {name!r}: expected {{dtype, shape, data}}")
    dtype, shape = spec["dtype"], spec["shape"]
    if not isinstance(dtype, str) or dtype not in DTYPES:
        raise RequestError(
            f"input {name!r}: dtype {_describe(dtype)} is not one of {', '.join(DTYPES)}"
        )
    if not isinstance(shape, list):
        raise RequestError(f"input {name!r}: shape must be a list of non-negative ints")
    return np.dtype(dtype), check_shape(name, shape)


#: The JSON element types each dtype kind accepts. Exact types: a bool is no number here.
_ACCEPTS: dict[str, tuple[type, ...]] = {
    "b": (bool,),
    "i": (int,),
    "u": (int,),
    "f": (int, float),
}
_EXPECTED = {
    "b": "true or false",
    "i": "integers",
    "u": "integers",
    "f": 'numbers or "nan", "inf", "-inf"',
}
_SPECIAL = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}


def json_array(name: str, dtype: np.dtype, shape: tuple[int, ...], data: Any) -> np.ndarray:
    """The array of one input's ``data``, each element checked against the dtype's kind."""
    count = math.prod(shape)
    # Nested lists become dims (MAX_RANK at most, by MAX_DEPTH); a ragged list stays an
    # element, which the type check below refuses.
    flat = np.asarray(data, dtype=object).reshape(-1)
    if flat.size != count:
        raise RequestError(
            f"input {name!r}: {flat.size} elements of data for shape {shape} ({count} elements)"
        )
    values: list[Any] = flat.tolist()
    kind = dtype.kind
    for i, v in enumerate(values):  # before the specials: "1e400" is no "inf"
        if type(v) is Overflowing:
            raise _unfit(name, dtype, i, v, "beyond even float64's range")
    if kind == "f":
        values = [_SPECIAL.get(v, v) if type(v) is str else v for v in values]
    accepts = _ACCEPTS[kind]
    for i, v in enumerate(values):
        if type(v) not in accepts:
            raise _unfit(name, dtype, i, v, f"expected {_EXPECTED[kind]}")
    if kind in "iu" and values:
        # Checked here, not left to numpy: numpy 1 wraps 300 to 44 in a uint8.
        info = np.iinfo(dtype)
        low, high = min(values), max(values)
        if low < info.min or high > info.max:
            bad = low if low < info.min else high
            raise _unfit(name, dtype, values.index(bad), bad, f"not in {info.min}..{info.max}")
    if kind != "f":
        return np.array(values, dtype=dtype).reshape(shape)
    try:
        with np.errstate(over="ignore"):  # an overflow shows as an infinity, found below
            array = np.array(values, dtype=dtype).reshape(shape)
    except OverflowError:  # an int beyond even float64's range
        i = next(i for i, v in enumerate(values) if type(v) is int and _beyond_float64(v))
        raise _unfit(name, dtype, i, values[i], "too large for it") from None
    # An infinity where a finite number was sent: too large for the dtype (NaN, inf were sent).
    for i in np.flatnonzero(~np.isfinite(array)).tolist():
        if type(values[i]) is int or math.isfinite(values[i]):
            raise _unfit(name, dtype, i, values[i], "too large for it")
    return array


def _beyond_float64(value: int) -> bool:
    """Whether an int is too large for even a float64 (which holds every finite JSON float)."""
    try:
        float(value)
    except OverflowError:
        return True
    return False


def _unfit(name: str, dtype: np.dtype, i: int, value: Any, why: str) -> RequestError:
    """The error for element ``i`` of an input's data."""
    return RequestError(
        f"input {name!r}: data do not fit {dtype}: element {i} is {_describe(value)}, {why}"
    )


def _describe(value: Any) -> str:
    """A JSON value as a message shows it, short: ``'x'``, ``true``, ``null``, ``1.5``."""
    if isinstance(value, (list, dict)):
        return "a list" if isinstance(value, list) else "an object"
    if type(value) is Overflowing:
        text = str(value)  # a number as it was spelled, not a string
    else:
        text = repr(value) if isinstance(value, str) else json.dumps(value)
    return text if len(text) <= 40 else text[:37] + "..."


_HEADER_READERS = {
    (1, 0): np.lib.format.read_array_header_1_0,
    (2, 0): np.lib.format.read_array_header_2_0,
}


def _npy_header(archive: zipfile.ZipFile, member: zipfile.ZipInfo) -> tuple[str, _Header]:
    """The input a member holds, and the dtype and shape its ``.npy`` header declares, read
    without its data."""
    if not member.filename.endswith(".npy"):
        # numpy would hand such a member back as bytes, decompressing all of it.
        raise RequestError(f"the .npz member {member.filename!r} is not an .npy array")
    name = member.filename.removesuffix(".npy")
    try:
        with archive.open(member) as npy:
            version = np.lib.format.read_magic(npy)
            if version not in _HEADER_READERS:  # 3.0 only adds UTF-8 field names: not DTYPES
                raise RequestError(f"input {name!r}: .npy format {version} is not supported")
            shape, _, dtype = _HEADER_READERS[version](npy)
    except _NPZ_ERRORS as e:
        raise RequestError(f"input {name!r}: the .npy header is not readable: {e}") from None
    _check_dtype(name, dtype)
    return name, (dtype, check_shape(name, shape))


def _npy_data(data: np.lib.npyio.NpzFile, name: str) -> np.ndarray:
    """One member's array, read by its full member name: numpy maps the short name ambiguously
    when both ``x.npy`` and ``x.npy.npy`` exist."""
    try:
        array: np.ndarray = data[name + ".npy"]
    except _NPZ_ERRORS as e:
        raise RequestError(f"input {name!r}: the .npy data is not readable: {e}") from None
    return array


def leaves(result: Any) -> list[np.ndarray]:
    """The arrays of a result (an array, an int, or a tuple of them, nested), in order."""
    if isinstance(result, tuple):
        return [leaf for item in result for leaf in leaves(item)]
    return [np.asarray(result)]


def json_float(v: float) -> float | str:
    """A float as JSON carries it: a number, or ``"nan"``, ``"inf"``, ``"-inf"``."""
    if math.isfinite(v):
        return v
    return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf")


def json_data(a: np.ndarray) -> list[Any]:
    """An array's elements as JSON carries them: flat, in row-major order."""
    flat: list[Any] = a.reshape(-1).tolist()
    # By the elements' type, not the dtype's kind: ml_dtypes' floats (bfloat16) are kind "V".
    return [json_float(v) if type(v) is float else v for v in flat]


def _encode(a: np.ndarray) -> dict[str, Any]:
    return {"dtype": a.dtype.name, "shape": list(a.shape), "data": json_data(a)}
