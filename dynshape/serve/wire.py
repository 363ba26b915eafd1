"""The HTTP bodies of a served executable: JSON and ``.npz``, in and out (numpy only).

JSON request::

    {"inputs": {"x": {"dtype": "float32", "shape": [2, 4], "data": [0.5, ...]}}}

``data`` is the flat list of elements in C order (nested lists are accepted too); ``dtype``
and ``shape`` are required, so a float array is never guessed from its numbers. The JSON
response is ``{"outputs": [{"dtype": ..., "shape": ..., "data": [...]}, ...]}``, one entry per
result (a tuple result gives several), floats as JSON numbers (NaN and the infinities as the
strings ``"nan"``, ``"inf"``, ``"-inf"``). An ``.npz`` request (``Content-Type:
application/x-npz``) holds one array per parameter, by name; its response holds ``out`` or
``out.0``, ``out.1``... as ``dynshape run -o`` writes them. Loading never unpickles.

Every malformed body is a ``RequestError`` naming what is wrong (an HTTP 400).
"""

from __future__ import annotations

import io
import json
import math
import zipfile
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from vm.executable import DTYPES

from ..errors import RequestError

#: Most elements one request may send (guards the JSON parser's memory).
MAX_ELEMENTS = 1 << 26
NPZ = "application/x-npz"


def inputs_from_json(body: bytes, params: Sequence[str]) -> tuple[np.ndarray, ...]:
    """The arrays of a JSON request, in parameter order."""
    try:
        doc = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise RequestError(f"the body is not JSON: {e}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("inputs"), dict):
        raise RequestError('expected a JSON object {"inputs": {name: {dtype, shape, data}}}')
    given: Mapping[str, Any] = doc["inputs"]
    return _in_order({name: _array(name, value) for name, value in given.items()}, params)


def inputs_from_npz(body: bytes, params: Sequence[str]) -> tuple[np.ndarray, ...]:
    """The arrays of an ``.npz`` request, in parameter order."""
    try:
        with np.load(io.BytesIO(body), allow_pickle=False) as data:
            arrays = {name: data[name] for name in data.files}
    except (ValueError, OSError, zipfile.BadZipFile, EOFError) as e:
        raise RequestError(f"the body is not a readable .npz file: {e}") from None
    return _in_order(arrays, params)


def outputs_to_json(result: Any) -> bytes:
    """The JSON response of a result (an array, an int, or a tuple of them)."""
    return json.dumps({"outputs": [_encode(a) for a in _leaves(result)]}).encode()


def outputs_to_npz(result: Any) -> bytes:
    """The ``.npz`` response of a result: ``out``, or ``out.0``, ``out.1``... for a tuple."""
    leaves = _leaves(result)
    names = ["out"] if not isinstance(result, tuple) else [f"out.{i}" for i in range(len(leaves))]
    buf = io.BytesIO()
    np.savez(buf, **dict(zip(names, leaves, strict=True)))  # type: ignore[arg-type]
    return buf.getvalue()


def _in_order(arrays: Mapping[str, np.ndarray], params: Sequence[str]) -> tuple[np.ndarray, ...]:
    unknown = [n for n in arrays if n not in params]
    missing = [n for n in params if n not in arrays]
    if unknown or missing:
        said = []
        if unknown:
            said.append(f"unknown input(s) {', '.join(map(repr, unknown))}")
        if missing:
            said.append(f"missing input(s) {', '.join(map(repr, missing))}")
        raise RequestError(f"{'; '.join(said)} (the model takes: {', '.join(params)})")
    return tuple(arrays[n] for n in params)


def _array(name: str, value: Any) -> np.ndarray:
    if not isinstance(value, dict) or not {"dtype", "shape", "data"} <= value.keys():
        raise RequestError(f"input {name!r}: expected {{dtype, shape, data}}")
    dtype, shape = value["dtype"], value["shape"]
    if dtype not in DTYPES:
        raise RequestError(f"input {name!r}: dtype {dtype!r} is not one of {', '.join(DTYPES)}")
    if not isinstance(shape, list) or not all(
        isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape
    ):
        raise RequestError(f"input {name!r}: shape must be a list of non-negative ints")
    count = math.prod(shape)
    if count > MAX_ELEMENTS:
        raise RequestError(f"input {name!r}: {count:,} elements is more than {MAX_ELEMENTS:,}")
    try:
        flat = np.asarray(value["data"], dtype=object).reshape(-1)
        if flat.size != count:
            raise RequestError(
                f"input {name!r}: {flat.size} elements of data for shape {tuple(shape)} "
                f"({count} elements)"
            )
        array = np.array([_number(v) for v in flat], dtype=dtype).reshape(shape)
    except (TypeError, ValueError, OverflowError) as e:
        raise RequestError(f"input {name!r}: data do not fit {dtype}: {e}") from None
    return array


_SPECIAL = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}


def _number(v: Any) -> Any:
    if isinstance(v, str):
        if v in _SPECIAL:
            return _SPECIAL[v]
        raise ValueError(f"{v!r} is not a number")
    if not isinstance(v, (int, float, bool)):
        raise TypeError(f"{type(v).__name__} is not a number")
    return v


def _leaves(result: Any) -> list[np.ndarray]:
    if isinstance(result, tuple):
        return [leaf for item in result for leaf in _leaves(item)]
    return [np.asarray(result)]


def _json_float(v: float) -> float | str:
    if math.isfinite(v):
        return v
    return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf")


def _encode(a: np.ndarray) -> dict[str, Any]:
    flat = a.reshape(-1).tolist()
    data: list[Any] = [_json_float(v) for v in flat] if a.dtype.kind == "f" else flat
    return {"dtype": a.dtype.name, "shape": list(a.shape), "data": data}
