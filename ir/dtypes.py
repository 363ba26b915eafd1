"""The element types a tensor may have."""

from __future__ import annotations

import numpy as np

from .errors import IRError

#: Every dtype the IR accepts, with its size in bytes.
ITEMSIZE: dict[str, int] = {
    "bool": 1,
    "int8": 1,
    "int16": 2,
    "int32": 4,
    "int64": 8,
    "uint8": 1,
    "uint16": 2,
    "uint32": 4,
    "uint64": 8,
    "float16": 2,
    "float32": 4,
    "float64": 8,
}

DTYPES: frozenset[str] = frozenset(ITEMSIZE)
FLOAT_DTYPES: frozenset[str] = frozenset({"float16", "float32", "float64"})
INT_DTYPES: frozenset[str] = frozenset(
    {"int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"}
)


def dtype_name(value: object, what: str = "dtype") -> str:
    """The IR's name of a dtype given in any spelling numpy accepts (``"float32"``, ``"f4"``,
    ``np.float32``, ``np.dtype("float32")``, ``float`` is float64 as in numpy), or IRError
    naming ``what`` when numpy does not know it or the IR does not support it."""
    if isinstance(value, str) and value in DTYPES:
        return value  # the common case
    supported = ", ".join(sorted(DTYPES))
    if value is None:
        raise IRError(f"bad {what} None: expected one of {supported} (or a numpy dtype)")
    try:
        dt = np.dtype(value)  # type: ignore[call-overload]  # numpy's check, any object
    except (TypeError, ValueError):
        raise IRError(
            f"bad {what} {value!r}: expected one of {supported} (or a numpy dtype)"
        ) from None
    if dt.byteorder == ">" or dt.name not in DTYPES:
        kind = f"big-endian {dt.name}" if dt.byteorder == ">" else dt.name
        said = "" if str(value) == kind else f" ({kind})"
        raise IRError(f"{what} {value!r}{said} is not supported: use one of {supported}")
    return str(dt.name)


def check_dtype(dtype: object, what: str = "dtype") -> str:
    """Return ``dtype`` if it names a supported element type, else raise an IRError."""
    if not isinstance(dtype, str) or dtype not in DTYPES:
        raise IRError(f"bad {what} {dtype!r}: expected one of {', '.join(sorted(DTYPES))}")
    return dtype


def is_float(dtype: str) -> bool:
    """True for floating-point dtypes."""
    return dtype in FLOAT_DTYPES


def is_int(dtype: str) -> bool:
    """True for signed and unsigned integer dtypes (not bool)."""
    return dtype in INT_DTYPES
