"""The element types' names, and the numpy dtype of each.

The core dtypes are numpy's own. The *extended* ones are the narrow types of current model
exports (ONNX's BFLOAT16, FLOAT8*, FLOAT4E2M1, INT4, UINT4, INT2, UINT2), which numpy knows
through the ``ml_dtypes`` package (JAX's dtypes; ``onnx`` depends on it). Their IR names are
ml_dtypes' names (``bfloat16``, ``float8_e4m3fn``, ``int4``), so an array's ``dtype.name`` is
its IR dtype, as for the core ones. Each takes one byte per element (``int4`` too: ml_dtypes
stores sub-byte types unpacked), two for ``bfloat16``.

``ml_dtypes`` is optional: nothing imports it until a program uses an extended dtype
(``require``: the VM's loader and validator, the IR's text parser), and then its absence is a
``DTypeUnavailable`` naming the package. Once it is imported, numpy resolves the names itself
(``np.dtype("bfloat16")``), so the kernels and the VM's allocations need nothing more. Plain
data, like the rest of the declarations (no numpy here).
"""

from __future__ import annotations

import importlib

from dynshape_errors import DynShapeError

#: numpy's own dtypes, with their kinds (numpy's letters: ``b`` bool, ``i``/``u`` (un)signed
#: integers, ``f`` floats) and sizes in bytes.
CORE_KINDS = {
    "bool": ("b", 1),
    "int8": ("i", 1),
    "int16": ("i", 2),
    "int32": ("i", 4),
    "int64": ("i", 8),
    "uint8": ("u", 1),
    "uint16": ("u", 2),
    "uint32": ("u", 4),
    "uint64": ("u", 8),
    "float16": ("f", 2),
    "float32": ("f", 4),
    "float64": ("f", 8),
}
CORE_DTYPES = tuple(CORE_KINDS)
#: ml_dtypes' dtypes, each with the kind of number it holds (ml_dtypes reports most as ``V``).
#: Storage types: only ops that move or convert elements take them.
EXTENDED_KINDS = {
    "bfloat16": "f",
    "float8_e4m3fn": "f",
    "float8_e4m3fnuz": "f",
    "float8_e5m2": "f",
    "float8_e5m2fnuz": "f",
    "float8_e8m0fnu": "f",
    "float4_e2m1fn": "f",
    "int4": "i",
    "uint4": "u",
    "int2": "i",
    "uint2": "u",
}
EXTENDED_DTYPES = tuple(EXTENDED_KINDS)
#: Every dtype the IR and the VM accept.
DTYPE_NAMES = CORE_DTYPES + EXTENDED_DTYPES
#: Bytes per element.
ITEMSIZE: dict[str, int] = {
    **{name: size for name, (_, size) in CORE_KINDS.items()},
    **{name: 2 if name == "bfloat16" else 1 for name in EXTENDED_DTYPES},
}


class DTypeUnavailable(DynShapeError):
    """A program uses an extended dtype and the ``ml_dtypes`` package is not installed."""


def require(name: str) -> str:
    """``name``, once numpy can resolve it: for an extended dtype ``ml_dtypes`` is imported
    (which registers its names with numpy), or DTypeUnavailable raised naming the package."""
    if name in EXTENDED_KINDS:
        try:
            importlib.import_module("ml_dtypes")
        except ImportError:
            raise DTypeUnavailable(
                f"dtype {name} needs the ml_dtypes package (pip install ml_dtypes, or "
                "dynshape's onnx extra: pip install 'dynshape[onnx]')"
            ) from None
    return name


def kind(name: str) -> str:
    """numpy's kind letter of a dtype's numbers (``f``, ``i``, ``u``, ``b``), extended ones
    included."""
    return EXTENDED_KINDS[name] if name in EXTENDED_KINDS else CORE_KINDS[name][0]
