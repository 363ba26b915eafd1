"""The dtype rules of the layout ops that have their own (declared in
``shape_funcs/declarations/catalogue/transform.py``; the others use shared rules)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..attrs import Attrs
from ..dtypes import is_int
from ..errors import IRError
from ._declare import input_dtype, integer_input, own_rule


@own_rule("split")
def _split(dtypes: Sequence[Any], attrs: Attrs) -> tuple[str, ...]:
    spec = attrs["indices_or_sections"]
    count = len(spec) + 1 if isinstance(spec, tuple) else spec
    if count < 1:
        raise IRError(f"split needs at least one section, got {spec}")
    return (dtypes[0],) * count


@own_rule("take")
def _take(dtypes: Sequence[Any], attrs: Attrs) -> str:
    integer_input(dtypes, 1, "take's indices")
    return input_dtype(dtypes, 0, "the data")


@own_rule("scatter_nd", "scatter_elements")
def _scatter(dtypes: Sequence[Any], attrs: Attrs) -> str:
    integer_input(dtypes, 1, "the scatter's indices")
    data = input_dtype(dtypes, 0, "the data")
    updates = input_dtype(dtypes, 2, "the updates")
    if updates != data:
        raise IRError(f"the updates must have the data's dtype {data}, got {updates}")
    if data == "bool" and attrs["reduction"] in ("add", "mul"):
        # numpy would compute logical or/and; ONNX defines no sum of bools: say so instead.
        raise IRError(f"reduction={attrs['reduction']!r} of bool data (cast it first)")
    return data


@own_rule("dynamic_update_slice")
def _dynamic_update_slice(dtypes: Sequence[Any], attrs: Attrs) -> str:
    operand = input_dtype(dtypes, 0, "the operand")
    update = input_dtype(dtypes, 1, "the update")
    if update != operand:
        raise IRError(f"the update must have the operand's dtype {operand}, got {update}")
    for i, dt in enumerate(dtypes[2]):  # a tuple operand: one dtype per start
        if not is_int(dt):
            raise IRError(f"start_indices[{i}] must be an integer tensor, got {dt}")
    return operand
