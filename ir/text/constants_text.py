"""Literal values in text: scalar constants, tensor constants and attribute values.

Scalar constants carry their dtype in a suffix: ``1f`` / ``1.5f`` (float32), ``1f16``,
``1f64``, ``2`` (int32), ``2i8``, ``2i16``, ``2i64``, ``2u8``, ``2u16``, ``2u32``, ``2u64``,
``True`` / ``False`` (bool).
Non-finite floats are ``nanf``, ``inff``, ``-inff`` (with the same suffixes). Floats print in
the shortest form that reads back to the same value of their dtype.

A constant of rank >= 1 is ``const(<nested list>, <dtype>)``, e.g.
``const([[1.0, 2.0], [3.0, 4.0]], float32)``; an empty one states its shape:
``const([], float32, shape=(0, 3))``. A constant of more than ``INLINE_ELEMENTS`` elements
(a model's weights) is its raw little-endian bytes in base64, with its shape:
``const("AACAPwAAAEA=", float32, shape=(2,))``: exact (NaN payloads and ``-0.0`` kept), and
4/3 of the bytes instead of 10 to 25 characters per number. A constant of an extended dtype
(``bfloat16``, ``float8_e4m3fn``, ``int4``, ...), a scalar too, is always written as its bytes:
``const("gD8=", bfloat16, shape=())``; ``const([1.5, 2.0], bfloat16)`` reads as well (numpy
with ml_dtypes rounding the numbers).

Attribute values are plain Python-like literals: ints, floats (``1e-05``, ``nan``, ``inf``),
``True`` / ``False``, ``None``, double-quoted strings and nested lists ``[1, [2, 3]]``.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import re
from typing import Any

import numpy as np
import sympy

from shape_funcs.declarations.dtypes import EXTENDED_KINDS, DTypeUnavailable, require
from shape_funcs.declarations.dtypes import kind as dtype_kind

from ..dtypes import check_dtype
from ..errors import IRError
from ..expr import Constant
from ..span import Span
from .dims_text import AnonNamer, DimParser, dim_text
from .lexer import Kind, Token, TokenStream

#: dtype -> suffix of its scalar literals.
SUFFIX = {
    "float32": "f",
    "float16": "f16",
    "float64": "f64",
    "int32": "",
    "int8": "i8",
    "int16": "i16",
    "int64": "i64",
    "uint8": "u8",
    "uint16": "u16",
    "uint32": "u32",
    "uint64": "u64",
}
_DTYPE_OF_SUFFIX = {s: d for d, s in SUFFIX.items()}
_DTYPE_OF_SUFFIX["f32"] = "float32"
_DTYPE_OF_SUFFIX["i32"] = "int32"
_NON_FINITE = re.compile(r"(nan|inf)(f16|f32|f64|f)")

INLINE_ELEMENTS = 64
"""Constants up to this many elements print as nested lists; larger ones as base64 bytes."""


# ---- printing --------------------------------------------------------------------------------


def float_text(value: float, dtype: str) -> str:
    """The shortest decimal text that reads back (via ``float``) to ``value`` as ``dtype``."""
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    if dtype == "float64":
        return repr(float(value))
    np_type = np.dtype(dtype).type
    short = str(np_type(value))  # numpy prints the shortest text unique for the dtype
    if np_type(float(short)) == np_type(value):
        return short
    return repr(float(value))  # exact: the float64 value of a narrower float


def scalar_text(value: Any) -> str:
    """The literal of a 0-d constant value (a numpy scalar or 0-d array)."""
    arr = np.asarray(value)
    dtype = arr.dtype.name
    item = arr.item()
    if dtype == "bool":
        return "True" if item else "False"
    suffix = SUFFIX[dtype]
    if dtype.startswith("float"):
        text = float_text(item, dtype)
        if text.endswith(".0"):
            text = text[:-2]  # "1f" rather than "1.0f": the suffix already says float
        return f"{text}{suffix}"
    return f"{item}{suffix}"


def _element_text(item: Any, dtype: str) -> str:
    if dtype == "bool":
        return "True" if item else "False"
    if dtype.startswith("float"):
        return float_text(item, dtype)
    return str(item)


def constant_text(const: Constant) -> str:
    """The text of a constant: a scalar literal, or ``const(...)`` for rank >= 1."""
    value = const.value
    dtype = value.dtype.name
    extended = dtype in EXTENDED_KINDS  # bfloat16, float8_*, int4...: their bytes, exactly
    if value.ndim == 0 and not extended:
        return scalar_text(value)
    if value.size == 0:
        shape = ", ".join(str(d) for d in value.shape) + ("," if value.ndim == 1 else "")
        return f"const([], {dtype}, shape=({shape}))"
    if value.size > INLINE_ELEMENTS or extended:
        raw = np.ascontiguousarray(value, dtype=value.dtype.newbyteorder("<")).tobytes()
        shape = ", ".join(str(d) for d in value.shape) + ("," if value.ndim == 1 else "")
        return f'const("{base64.b64encode(raw).decode("ascii")}", {dtype}, shape=({shape}))'

    def nested(a: np.ndarray) -> str:
        if a.ndim == 1:
            return "[" + ", ".join(_element_text(x, dtype) for x in a.tolist()) + "]"
        return "[" + ", ".join(nested(sub) for sub in a) + "]"

    return f"const({nested(value)}, {dtype})"


def attr_text(value: Any, namer: AnonNamer | None = None) -> str:
    """The text of an attribute value (ints, floats, bools, strings, None, nested lists, dims).

    ``namer`` labels the anonymous symbols of dim values consistently with the rest of the unit.
    """
    if isinstance(value, sympy.Expr):
        text = namer.dim(value) if namer is not None else dim_text(value)
        # Outside brackets '//' would start a comment and '%' a name (see lexer.py); a leading
        # '-' (sympy writes ``-k + max(k, n)``) would read as a negative number.
        return f"({text})" if "//" in text or "%" in text or text.startswith("-") else text
    if value is None:
        return "None"
    if isinstance(value, bool):
        return "True" if value else "False"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value)  # repr reads back exactly; nan, inf and -inf included
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(attr_text(v, namer) for v in value) + "]"
    raise TypeError(f"cannot print attribute value {value!r}")


# ---- parsing ---------------------------------------------------------------------------------


def is_literal_start(ts: TokenStream) -> bool:
    """True if a scalar literal starts here."""
    tok = ts.peek()
    if tok.kind is Kind.NUMBER:
        return True
    if tok.kind is Kind.IDENT and (
        tok.text in ("True", "False") or _NON_FINITE.fullmatch(tok.text)
    ):
        return True
    if ts.at("-"):
        nxt = ts.peek(1)
        return nxt.kind is Kind.NUMBER or (
            nxt.kind is Kind.IDENT and bool(_NON_FINITE.fullmatch(nxt.text))
        )
    return False


def parse_scalar(ts: TokenStream) -> Constant:
    """Parse a scalar literal (``-1.5f``, ``2i64``, ``True``, ``nanf``) into a 0-d Constant."""
    first = ts.peek()
    span = ts.span(first)
    negative = bool(ts.accept("-"))
    tok = ts.next()
    if tok.kind is Kind.IDENT and tok.text in ("True", "False") and not negative:
        return Constant(np.array(tok.text == "True"), span=span)
    if tok.kind is Kind.IDENT:
        m = _NON_FINITE.fullmatch(tok.text)
        if m is None:
            raise ts.unexpected("a number", tok)
        value = float(m.group(1))
        return _make_float(
            ts, -value if negative else value, _DTYPE_OF_SUFFIX[m.group(2)], tok, span
        )
    if tok.kind is not Kind.NUMBER:
        raise ts.unexpected("a number", tok)
    is_int_text = tok.text.isdigit()
    dtype = _DTYPE_OF_SUFFIX[tok.suffix]
    if dtype.startswith("float"):
        value = float(tok.text)
        return _make_float(ts, -value if negative else value, dtype, tok, span)
    if not is_int_text:
        raise ts.error(
            f"a float literal needs a dtype suffix: write {tok.text}f (float32) or {tok.text}f64",
            tok,
        )
    ivalue = -int(tok.text) if negative else int(tok.text)
    info = np.iinfo(dtype)
    if not info.min <= ivalue <= info.max:
        raise ts.error(f"integer literal {ivalue} is out of range for {dtype}", tok)
    return Constant(np.array(ivalue, dtype=dtype), span=span)


def _make_float(ts: TokenStream, value: float, dtype: str, tok: Token, span: Span) -> Constant:
    with np.errstate(over="ignore"):
        array = np.array(value, dtype=dtype)
    if math.isfinite(value) and not np.isfinite(array):
        raise ts.error(f"float literal {value!r} is out of range for {dtype}", tok)
    return Constant(array, span=span)


_DIM_OPERATORS = frozenset({"*", "+", "-", "//", "%"})


def _starts_dim(ts: TokenStream) -> bool:
    """True if a dim expression (``n``, ``?0``, ``4*n``, ``(n + 1)``) starts here."""
    tok = ts.peek()
    if tok.kind is Kind.ANON or (tok.kind is Kind.PUNCT and tok.text == "("):
        return True
    if tok.kind is Kind.IDENT:
        keywords = ("True", "False", "None", "nan", "inf")
        return tok.text not in keywords and not _NON_FINITE.fullmatch(tok.text)
    if tok.kind is Kind.NUMBER and not tok.suffix and tok.text.isdigit():
        nxt = ts.peek(1)
        return nxt.kind is Kind.PUNCT and nxt.text in _DIM_OPERATORS
    return False


def parse_attr_value(ts: TokenStream, dims: DimParser | None = None) -> Any:
    """Parse an attribute value: a number, bool, None, string, nan/inf or a nested list.

    With ``dims``, a dim expression (``4*n``, ``?0``) is a value too: the memory dialect's sizes
    and shapes are dims over the function's symbols.
    """
    if dims is not None and _starts_dim(ts):
        return dims.dim()
    tok = ts.peek()
    if ts.accept("["):
        items = []
        while not ts.at("]"):
            items.append(parse_attr_value(ts, dims))
            if not ts.accept(","):
                break
        ts.expect("]", "',' or ']' in the list")
        return items
    if tok.kind is Kind.STRING:
        ts.next()
        return tok.value
    if tok.kind is Kind.IDENT and tok.text in ("True", "False", "None"):
        ts.next()
        return {"True": True, "False": False, "None": None}[tok.text]
    negative = bool(ts.accept("-"))
    tok = ts.next()
    if tok.kind is Kind.IDENT and tok.text in ("nan", "inf"):
        value = float(tok.text)
        return -value if negative else value
    if tok.kind is Kind.NUMBER:
        if tok.suffix:
            raise ts.error(
                f"attribute values are plain numbers: write {tok.text}, not {tok.text}{tok.suffix}",
                tok,
            )
        number: int | float = int(tok.text) if tok.text.isdigit() else float(tok.text)
        return -number if negative else number
    raise ts.unexpected("an attribute value (a number, True, False, None, a string or a list)", tok)


def parse_tensor_const(ts: TokenStream, const_tok: Token) -> Constant:
    """Parse ``const(<nested list>, <dtype>[, shape=(d, ...)])`` or ``const("<base64>", <dtype>,
    shape=(d, ...))`` after the ``const`` keyword."""
    ts.expect("(", "'(' after const")
    data_tok = ts.peek()
    raw = data_tok.value if data_tok.kind is Kind.STRING else None
    if raw is not None:
        ts.next()
    data = None if raw is not None else _parse_data(ts)
    ts.expect(",", "',' and a dtype after the data of const")
    dtype = _parse_dtype(ts)
    shape: tuple[int, ...] | None = None
    if ts.accept(","):
        ts.expect("shape", "'shape=(...)'")
        ts.expect("=")
        ts.expect("(", "a shape '(d0, d1, ...)'")
        dims = []
        while not ts.at(")"):
            dim_tok = ts.expect_kind(Kind.NUMBER, "an integer dim")
            if dim_tok.suffix or not dim_tok.text.isdigit():
                raise ts.unexpected("an integer dim", dim_tok)
            dims.append(int(dim_tok.text))
            if not ts.accept(","):
                break
        ts.expect(")", "',' or ')' in the shape")
        shape = tuple(dims)
    ts.expect(")", "')' closing const(")
    if raw is not None:
        if shape is None:
            raise ts.error("const data given as base64 bytes needs its shape=(...)", data_tok)
        return Constant(_from_bytes(ts, data_tok, raw, dtype, shape), span=ts.span(const_tok))
    wanted = _ELEMENT_KINDS[dtype_kind(dtype)]
    for item in _flatten(data):
        if type(item) not in wanted[0]:
            raise ts.error(f"const data for {dtype} holds {wanted[1]}, not {item!r}", data_tok)
    try:
        with np.errstate(over="raise", invalid="raise"):
            array = np.array(data, dtype=dtype)
    except (ValueError, OverflowError, TypeError, FloatingPointError) as e:
        raise ts.error(f"bad const data for {dtype}: {e}", data_tok) from None
    if _wrapped(array, data):
        raise ts.error(f"const data is out of range for {dtype}", data_tok)
    if shape is not None:
        if array.size == 0 and math.prod(shape) == 0:
            array = np.zeros(shape, dtype=dtype)
        elif array.shape != shape:
            raise ts.error(
                f"const data has shape {array.shape}, not the stated shape {shape}", data_tok
            )
    return Constant(array, span=ts.span(const_tok))


def _parse_dtype(ts: TokenStream) -> str:
    """A const's dtype name; an extended one needs ml_dtypes, imported here."""
    dtype_tok = ts.expect_kind(Kind.IDENT, "a dtype")
    try:
        dtype = check_dtype(dtype_tok.text)
    except IRError as e:
        raise ts.error(e.message, dtype_tok) from None
    try:
        require(dtype)
    except DTypeUnavailable as e:
        raise ts.error(str(e), dtype_tok) from None
    return dtype


def _wrapped(array: np.ndarray, data: Any) -> bool:
    """True when integers given for an extended integer dtype (``int4``...) did not fit: numpy
    raises for its own types, ml_dtypes wraps silently."""
    dtype = array.dtype.name
    if dtype not in EXTENDED_KINDS or dtype_kind(dtype) not in "iu":
        return False
    return not np.array_equal(array.astype(np.int64), np.array(data, dtype=np.int64))


def _from_bytes(
    ts: TokenStream, tok: Token, text: str, dtype: str, shape: tuple[int, ...]
) -> np.ndarray:
    """The array held by base64 text of raw little-endian bytes, checked against its shape."""
    try:
        raw = base64.b64decode(text.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError):
        raise ts.error("const data is not valid base64", tok) from None
    element = np.dtype(dtype).newbyteorder("<")
    want = math.prod(shape) * element.itemsize
    if len(raw) != want:
        raise ts.error(
            f"const data holds {len(raw)} bytes; shape {shape} of {dtype} needs {want}", tok
        )
    array = np.frombuffer(raw, dtype=element).reshape(shape)
    if dtype == "bool" and np.any(array.view(np.uint8) > 1):
        raise ts.error("const data of bool holds bytes other than 0 and 1", tok)
    return array.astype(np.dtype(dtype), copy=True)


#: numpy dtype kind -> (Python types accepted in const data, how to name them).
_ELEMENT_KINDS: dict[str, tuple[tuple[type, ...], str]] = {
    "b": ((bool,), "True and False"),
    "i": ((int,), "integers"),
    "u": ((int,), "integers"),
    "f": ((int, float), "numbers"),
}


def _flatten(data: Any) -> list[Any]:
    if not isinstance(data, list):
        return [data]
    return [item for sub in data for item in _flatten(sub)]


def _parse_data(ts: TokenStream) -> Any:
    tok = ts.peek()
    if ts.accept("["):
        items = []
        while not ts.at("]"):
            items.append(_parse_data(ts))
            if not ts.accept(","):
                break
        ts.expect("]", "',' or ']' in the const data")
        return items
    value = parse_attr_value(ts)
    if isinstance(value, (list, str)) or value is None:
        raise ts.error("const data holds numbers and True/False only", tok)
    return value
