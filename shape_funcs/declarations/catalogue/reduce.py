"""Reductions over axes: ``axis`` is an int, a list or None (all axes); ``exclude`` inverts it.

dtypes follow numpy: ``max``/``min``/``argmax``/``argmin`` take any dtype, bool included;
``sum``/``prod``/``mean`` refuse bool (cast first); ``mean`` of an integer tensor is float64.
"""

from __future__ import annotations

from ..decl import OpDecl, attr, declare

_REDUCE_ATTRS = [
    attr("axis", "int or list[int] or None", None),
    attr("keepdims", "bool", False),
    attr("exclude", "bool", False),
]
_REDUCTIONS = [
    ("sum", "numeric", "sum over axes"),
    ("mean", "mean", "mean over axes (float64 for integer inputs, as numpy)"),
    # bool is ordered (False < True): max is any, min is all, as numpy and TVM give.
    ("max", "first", "maximum over axes"),
    ("min", "first", "minimum over axes"),
    ("prod", "numeric", "product over axes"),
    ("argmax", "int64", "index of the maximum"),
    ("argmin", "int64", "index of the minimum"),
]
_ARG = " (int64); several axes are flattened in order, as one axis"

DECLARATIONS: tuple[OpDecl, ...] = (
    *(
        declare(
            name,
            ["x"],
            "reduction",
            dtype,
            _REDUCE_ATTRS,
            doc + (_ARG if name.startswith("arg") else ""),
        )
        for name, dtype, doc in _REDUCTIONS
    ),
    declare(
        "cumsum",
        ["x"],
        "opaque",
        "numeric",
        [attr("axis", "int", 0), attr("exclusive", "bool", False), attr("reverse", "bool", False)],
        "running sums along axis (x's shape); exclusive leaves out each element itself, "
        "reverse sums from the end",
    ),
    declare(
        "cumprod",
        ["x"],
        "opaque",
        "numeric",
        [attr("axis", "int", 0), attr("exclusive", "bool", False), attr("reverse", "bool", False)],
        "running products along axis (x's shape); exclusive leaves out each element itself, "
        "reverse multiplies from the end",
    ),
)
