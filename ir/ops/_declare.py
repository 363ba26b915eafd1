"""The catalogue's dtype rules, and registering a built-in op from its declaration.

An op's declaration (``shape_funcs/declarations``) names its dtype rule (``OpDecl.dtype``); the
rules' code is here, in the IR, because a rule raises the IR's errors and reads its dtypes, and
the declarations stay plain data that the VM reads too. ``NAMED_RULES`` maps the shared names;
an op declared with ``dtype="own"`` has a rule of its own, registered under its name by its
family's module (``@own_rule("where")``); a dtype name (``"int64"``) is that fixed dtype.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from shape_funcs.declarations import OpDecl

from ..attrs import Attrs
from ..dtypes import DTYPES, is_float, is_int, storage_checked
from ..errors import IRError
from ..op import DTypeRule, OpDef, _register

#: The rules of ops declared with ``dtype="own"``, by op name (filled by ``own_rule``).
_OWN: dict[str, DTypeRule] = {}


def own_rule(*op_names: str) -> Callable[[DTypeRule], DTypeRule]:
    """Decorator: the dtype rule of the ops ``op_names`` (declared with ``dtype="own"``)."""

    def register(rule: DTypeRule) -> DTypeRule:
        for name in op_names:
            _OWN[name] = rule
        return rule

    return register


def rule_of(decl: OpDecl) -> DTypeRule:
    """The dtype rule ``decl.dtype`` names; raises IRError for an op whose own rule is not
    registered."""
    if decl.dtype == "own":
        if decl.name not in _OWN:
            raise IRError(f"op {decl.name} is declared with its own dtype rule, but has none")
        return _OWN[decl.name]
    if decl.dtype in NAMED_RULES:  # first: "bool" names the comparisons' rule, not a dtype
        return NAMED_RULES[decl.dtype]
    if decl.dtype in DTYPES:
        return fixed(decl.dtype)
    raise IRError(f"op {decl.name}: unknown dtype rule {decl.dtype!r}")


def declare(decl: OpDecl) -> OpDef:
    """Register the built-in op ``decl`` declares, with the dtype rule it names."""
    rule = storage_checked(decl.name, rule_of(decl))  # extended dtypes only where ops move data
    return _register(OpDef.from_declaration(decl, rule), builtin=True)


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


def integer_like(dtypes: Sequence[Any], attrs: Attrs) -> str:
    """Input 0 must be a signed or unsigned integer (not bool); the result has its dtype."""
    dt = input_dtype(dtypes, 0, "input")
    if not is_int(dt):
        raise IRError(f"expects an integer input, got {dt}")
    return dt


def all_same_integer(dtypes: Sequence[Any], attrs: Attrs) -> str:
    """Like ``all_same``, and the dtype is a signed or unsigned integer (not bool)."""
    dt = all_same(dtypes, attrs)
    if not is_int(dt):
        raise IRError(f"expects integer inputs, got {dt}")
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


def dialect_typed(dtypes: Sequence[Any], attrs: Attrs) -> str:
    """The memory dialect's ops have no dtype rule (``dynshape/dialect/memory.py`` types them)."""
    raise IRError("memory ops are typed by the memory dialect's rules, not by a dtype rule")


#: The shared rules, by the names declarations use (``shape_funcs.declarations.DTYPE_RULES``).
NAMED_RULES: dict[str, DTypeRule] = {
    "first": same_as(0),
    "same": all_same,
    "same_numeric": all_same_numeric,
    "same_float": all_same_float,
    "same_integer": all_same_integer,
    "float": float_like,
    "numeric": numeric_like,
    "integer": integer_like,
    "bool": compare,
    "logical": all_bool,
    "mean": mean_dtype,
    "attr": from_attr("dtype"),
    "dialect": dialect_typed,
}
