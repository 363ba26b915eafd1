"""The element types a tensor may have."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from shape_funcs.declarations.dtypes import EXTENDED_DTYPES
from shape_funcs.declarations.dtypes import ITEMSIZE as _ITEMSIZE

from .errors import IRError

#: Every dtype the IR accepts, with its size in bytes: numpy's, then the extended ones of
#: ml_dtypes (``bfloat16``, ``float8_e4m3fn``, ..., ``int4``; ``shape_funcs.declarations.dtypes``).
ITEMSIZE: dict[str, int] = dict(_ITEMSIZE)

DTYPES: frozenset[str] = frozenset(ITEMSIZE)
FLOAT_DTYPES: frozenset[str] = frozenset({"float16", "float32", "float64"})
INT_DTYPES: frozenset[str] = frozenset(
    {"int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"}
)
#: Storage types: neither ``FLOAT_DTYPES`` nor ``INT_DTYPES``, so arithmetic refuses them; only
#: the ops of ``MOVES_ELEMENTS`` take them (numpy with ml_dtypes computes nothing else exactly).
EXTENDED: frozenset[str] = frozenset(EXTENDED_DTYPES)
#: The ops that only move, select, fill or convert elements: the ones defined on every dtype.
MOVES_ELEMENTS: frozenset[str] = frozenset(
    {
        "cast",
        "bitcast",
        "copy",
        "reshape",
        "transpose",
        "expand_dims",
        "squeeze",
        "broadcast_to",
        "strided_slice",
        "concatenate",
        "stack",
        "split",
        "take",
        "tile",
        "repeat",
        "where",
        "compress",
        "nn.batch_flatten",
        "zeros",
        "ones",
        "full",
        "zeros_like",
        "ones_like",
        "dyn.reshape",
        "dyn.strided_slice",
        "dyn.zeros",
        "dyn.ones",
        "dyn.full",
    }
)


def storage_checked(op: str, rule: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
    """``rule``, the dtype rule of the built-in op ``op``, refusing extended dtypes where the
    op computes (``check_extended``, on the inputs before the rule, on the result after)."""
    if op in MOVES_ELEMENTS:
        return rule

    def checked(dtypes: Any, attrs: Any) -> Any:
        check_extended(op, dtypes, None)
        result = rule(dtypes, attrs)
        check_extended(op, (), result)
        return result

    return checked


def check_extended(op: str, dtypes: object, result: object) -> None:
    """Raise an IRError when ``op`` computes with an extended dtype (an input's or the
    result's) and is not one of ``MOVES_ELEMENTS``."""
    if op in MOVES_ELEMENTS:
        return
    flat: list[object] = []
    todo = [*dtypes, result] if isinstance(dtypes, (list, tuple)) else [result]
    while todo:
        d = todo.pop()
        if isinstance(d, tuple):
            todo.extend(d)
        else:
            flat.append(d)
    found = sorted({d for d in flat if isinstance(d, str) and d in EXTENDED})
    if found:
        raise StorageDTypeError(
            f"{' and '.join(found)}: a storage dtype, taken only by ops that move or convert "
            "elements (cast to float32 or an integer type first)"
        )


class StorageDTypeError(IRError):
    """An op that computes was given an extended dtype (``check_extended``)."""


#: The dtypes as error messages list them: numpy's, then ml_dtypes' (``bool, float16, ...,
#: uint8, or ml_dtypes' bfloat16, float8_e4m3fn, ...``).
SUPPORTED = ", ".join(sorted(DTYPES - EXTENDED)) + ", or ml_dtypes' " + ", ".join(EXTENDED_DTYPES)


def dtype_name(value: object, what: str = "dtype") -> str:
    """The IR's name of a dtype given in any spelling numpy accepts (``"float32"``, ``"f4"``,
    ``np.float32``, ``np.dtype("float32")``, ``float`` is float64 as in numpy), or IRError
    naming ``what`` when numpy does not know it or the IR does not support it."""
    if isinstance(value, str) and value in DTYPES:
        return value  # the common case
    supported = SUPPORTED
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
        raise IRError(f"bad {what} {dtype!r}: expected one of {SUPPORTED}")
    return dtype


def is_float(dtype: str) -> bool:
    """True for floating-point dtypes."""
    return dtype in FLOAT_DTYPES


def is_int(dtype: str) -> bool:
    """True for signed and unsigned integer dtypes (not bool)."""
    return dtype in INT_DTYPES


def is_extended(dtype: str) -> bool:
    """True for the storage types of ml_dtypes (``bfloat16``, ``float8_*``, ``int4``, ...)."""
    return dtype in EXTENDED
