"""Reductions over axes: ``axis`` is an int, a list or None (all axes); ``exclude`` inverts it.

dtypes follow numpy: ``max``/``min``/``argmax``/``argmin`` take any dtype, bool included;
``sum``/``prod``/``mean`` refuse bool (cast first); ``mean`` of an integer tensor is float64.
"""

from __future__ import annotations

from ..attrs import AXES, BOOL, INT, attr
from ..op import OpPattern
from ._declare import declare, fixed, mean_dtype, numeric_like, same_as

_REDUCE_ATTRS = [
    attr("axis", AXES, None),
    attr("keepdims", BOOL, False),
    attr("exclude", BOOL, False),
]

for _name, _rule, _doc in [
    ("sum", numeric_like, "sum over axes"),
    ("mean", mean_dtype, "mean over axes (float64 for integer inputs, as numpy)"),
    # bool is ordered (False < True): max is any, min is all, as numpy and TVM give.
    ("max", same_as(0), "maximum over axes"),
    ("min", same_as(0), "minimum over axes"),
    ("prod", numeric_like, "product over axes"),
]:
    declare(_name, ["x"], OpPattern.REDUCTION, _rule, _REDUCE_ATTRS, doc=_doc)

for _name, _doc in [("argmax", "index of the maximum"), ("argmin", "index of the minimum")]:
    declare(
        _name,
        ["x"],
        OpPattern.REDUCTION,
        fixed("int64"),
        _REDUCE_ATTRS,
        doc=f"{_doc} (int64); several axes are flattened in order, as one axis",
    )

declare(
    "cumsum",
    ["x"],
    OpPattern.OPAQUE,
    numeric_like,
    [attr("axis", INT, 0), attr("exclusive", BOOL, False), attr("reverse", BOOL, False)],
    doc="running sums along axis (x's shape); exclusive leaves out each element itself, "
    "reverse sums from the end",
)
