"""Shared helpers for the op catalogue: declaring an op and the common dtype rules."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..attrs import AttrDef, Attrs
from ..dtypes import is_float, is_int
from ..errors import IRError
from ..op import DTypeRule, OpDef, Operand, OpPattern, _register


def declare(
    name: str,
    operands: Sequence[str],
    pattern: OpPattern,
    dtype_rule: DTypeRule,
    attrs: Sequence[AttrDef] = (),
    doc: str = "",
    in_place: bool = False,
) -> OpDef:
    """Register a built-in op. An operand written ``"*fields"`` is a tuple of tensors."""
    ops = tuple(
        Operand(o[1:], is_tuple=True) if o.startswith("*") else Operand(o) for o in operands
    )
    op = OpDef(name, ops, tuple(attrs), pattern, dtype_rule, doc, in_place)
    return _register(op, builtin=True)


def input_dtype(dtypes: Sequence[Any], i: int, what: str) -> str:
    """The dtype of input ``i``, which must be a tensor (not a tuple)."""
    dt = dtypes[i]
    if not isinstance(dt, str):
        raise IRError(f"{what} must be a tensor, not a tuple")
    return dt


def same_as(i: int = 0) -> DTypeRule:
    """The result has the dtype of input ``i``."""

    def rule(dtypes: Sequence[Any], attrs: Attrs) -> str:
        return input_dtype(dtypes, i, f"input {i}")

    return rule


def float_like(dtypes: Sequence[Any], attrs: Attrs) -> str:
    """Input 0 must be floating point; the result has its dtype."""
    dt = input_dtype(dtypes, 0, "input")
    if not is_float(dt):
        raise IRError(f"expects a floating-point input, got {dt}")
    return dt


def numeric_like(dtypes: Sequence[Any], attrs: Attrs) -> str:
    """Input 0 must be a number (not bool); the result has its dtype."""
    dt = input_dtype(dtypes, 0, "input")
    if dt == "bool":
        raise IRError("expects a numeric input, got bool")
    return dt


def mean_dtype(dtypes: Sequence[Any], attrs: Attrs) -> str:
    """numpy's ``mean``: a float input keeps its dtype, an integer one gives float64; bool is
    refused, as by ``sum`` (cast it to count)."""
    dt = input_dtype(dtypes, 0, "input")
    if dt == "bool":
        raise IRError("expects a numeric input, got bool (cast it to an integer or float dtype)")
    return dt if is_float(dt) else "float64"


def all_same(dtypes: Sequence[Any], attrs: Attrs) -> str:
    """Every input has the same dtype, which is the result's. (No implicit promotion.)"""
    flat: list[str] = [d for dt in dtypes for d in (dt if isinstance(dt, tuple) else (dt,))]
    if not flat:
        raise IRError("expects at least one input")
    if any(d != flat[0] for d in flat):
        raise IRError(f"inputs must have the same dtype, got {', '.join(flat)} (cast explicitly)")
    return flat[0]


def all_same_numeric(dtypes: Sequence[Any], attrs: Attrs) -> str:
    """Like ``all_same``, and the dtype is not bool."""
    dt = all_same(dtypes, attrs)
    if dt == "bool":
        raise IRError("expects numeric inputs, got bool")
    return dt


def all_same_float(dtypes: Sequence[Any], attrs: Attrs) -> str:
    """Like ``all_same``, and the dtype is floating point."""
    dt = all_same(dtypes, attrs)
    if not is_float(dt):
        raise IRError(f"expects floating-point inputs, got {dt}")
    return dt


def compare(dtypes: Sequence[Any], attrs: Attrs) -> str:
    """Inputs of one dtype; the result is bool."""
    all_same(dtypes, attrs)
    return "bool"


def all_bool(dtypes: Sequence[Any], attrs: Attrs) -> str:
    """Every input is bool; so is the result."""
    dt = all_same(dtypes, attrs)
    if dt != "bool":
        raise IRError(f"expects bool inputs, got {dt}")
    return "bool"


def integer_input(dtypes: Sequence[Any], i: int, what: str) -> None:
    """Raise unless input ``i`` is an integer tensor."""
    dt = input_dtype(dtypes, i, what)
    if not is_int(dt):
        raise IRError(f"{what} must be an integer tensor, got {dt}")


def from_attr(name: str = "dtype") -> DTypeRule:
    """The result dtype is the value of attribute ``name``."""

    def rule(dtypes: Sequence[Any], attrs: Attrs) -> str:
        return str(attrs[name])

    return rule


def fixed(dtype: str) -> DTypeRule:
    """The result always has ``dtype``."""

    def rule(dtypes: Sequence[Any], attrs: Attrs) -> str:
        return dtype

    return rule
