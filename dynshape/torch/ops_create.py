"""Creation ATen ops: ``arange`` (numbers: a constant; a dim bound: ``cumsum`` of ones, so the
length stays the symbolic ``end - start``), ``full``/``zeros``/``ones`` and their ``_like``
forms (sizes may be dims)."""

from __future__ import annotations

from typing import Any

import numpy as np

from dynshape.builder import trace

from .ops_elementwise import operand, out_dtype
from .registry import Call, Unsupported, converter


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float, np.number)) and not isinstance(v, bool)


@converter("aten.arange.default", "aten.arange.start", "aten.arange.start_step")
def arange(call: Call) -> Any:
    """``arange(start, end, step)`` in the recorded dtype."""
    dtype = out_dtype(call)
    start, end, step = call.get("start", 0), call["end"], call.get("step", 1)
    if all(_is_number(v) for v in (start, end, step)):
        return trace.constant(np.arange(start, end, step).astype(dtype), None)
    if step != 1:
        raise Unsupported(f"arange with a symbolic bound and step {step}")
    count = call.recorded()[0]  # torch's length, end - start where it proved it >= 0
    ones = trace.apply("ones", shape=[count], dtype=dtype)
    counted = trace.apply("cumsum", ones, axis=0, exclusive=True)  # 0, 1, ..., n - 1
    if start == 0:
        return counted
    return trace.apply("add", counted, operand(call, start, dtype))


@converter("aten.full.default", "aten.zeros.default", "aten.ones.default")
def full(call: Call) -> Any:
    """A tensor of the sizes given (ints or dims), in the recorded dtype."""
    dtype = out_dtype(call)
    fill = {"aten.zeros.default": 0, "aten.ones.default": 1}.get(call.target)
    if fill is None:
        fill = call["fill_value"]
    if not _is_number(fill) and not isinstance(fill, bool):
        raise Unsupported(f"fill value {fill!r}")
    value = trace.constant(np.asarray(fill).astype(dtype), None)
    return trace.apply("full", value, shape=list(call["size"]), dtype=dtype)


@converter("aten.zeros_like.default", "aten.ones_like.default", "aten.full_like.default")
def full_like(call: Call) -> Any:
    """A tensor of ``self``'s shape, in the recorded dtype."""
    dtype = out_dtype(call)
    fill = {"aten.zeros_like.default": 0, "aten.ones_like.default": 1}.get(call.target)
    if fill is None:
        fill = call["fill_value"]
    value = trace.constant(np.asarray(fill).astype(dtype), None)
    return trace.apply("full", value, shape=list(call["self"].shape), dtype=dtype)
