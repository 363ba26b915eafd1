"""Reductions over axes: ``axis`` is an int, a list or None (all axes); ``exclude`` inverts it."""

from __future__ import annotations

from ..attrs import AXES, BOOL, attr
from ..op import OpPattern
from ._declare import declare, fixed, float_like, numeric_like

_REDUCE_ATTRS = [
    attr("axis", AXES, None),
    attr("keepdims", BOOL, False),
    attr("exclude", BOOL, False),
]

for _name, _rule, _doc in [
    ("sum", numeric_like, "sum over axes"),
    ("mean", float_like, "mean over axes"),
    ("max", numeric_like, "maximum over axes"),
    ("min", numeric_like, "minimum over axes"),
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
