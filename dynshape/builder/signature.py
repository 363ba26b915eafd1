"""The Python signature of an op function, read off the op's declaration.

``ds.reshape`` is ``reshape(x, newshape)``: the op's operands come first, then its attributes in
the order the catalogue declares them, so that numpy's positional spelling works
(``ds.reshape(x, (-1,))``, ``ds.transpose(m, (1, 0))``, ``ds.cast(a, "int32")``,
``ds.topk(x, 2)``) beside the keywords. An attribute with a default is optional; a required one
declared after an optional one (none is today) would be keyword-only, as Python requires.
Where numpy names an argument differently, its name is accepted too (``ds.reshape(x,
shape=...)``: ``NUMPY_NAMES``); the signature shows the catalogue's name.

Binding is Python's own (``inspect.Signature.bind``). A call it refuses gets the op's own
message where the op declaration has one (a missing operand or attribute, an unknown attribute
with the closest name), else Python's with the signature, as a ``BuildError`` at the user's
line.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any

import ir

from .location import fail
from .trace import apply

#: numpy's name of an argument, by op, where it differs from the catalogue's.
NUMPY_NAMES: Mapping[str, Mapping[str, str]] = {
    "reshape": {"shape": "newshape"},
}

_REQUIRED = inspect.Parameter.empty


def op_signature(op: ir.OpDef) -> inspect.Signature | None:
    """``(operands..., attributes...)`` of ``op`` as a Python signature; None when its names
    cannot be one (a custom op whose operand and attribute share a name, or a keyword)."""
    params: list[inspect.Parameter] = []
    kind: inspect._ParameterKind = inspect.Parameter.POSITIONAL_OR_KEYWORD
    try:
        for operand in op.operands:
            params.append(inspect.Parameter(operand.name, kind))
        for a in op.attrs:
            default = _REQUIRED if a.required else a.default
            if a.required and kind is not inspect.Parameter.KEYWORD_ONLY and _has_default(params):
                kind = inspect.Parameter.KEYWORD_ONLY
            params.append(inspect.Parameter(a.name, kind, default=default))
        return inspect.Signature(params)
    except ValueError:
        return None


def _has_default(params: list[inspect.Parameter]) -> bool:
    return any(p.default is not _REQUIRED for p in params)


def bind(
    op: ir.OpDef,
    name: str,
    signature: inspect.Signature,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> tuple[list[Any], dict[str, Any]]:
    """The operands and the given attributes of a call ``name(*args, **kwargs)`` of ``op``'s
    function; a BuildError saying what is wrong with the call otherwise."""
    aliases = NUMPY_NAMES.get(op.name, {})
    for numpy_name, own in aliases.items():
        if numpy_name in kwargs:
            if own in kwargs:
                raise fail(
                    f"{name}() got both {numpy_name}= and {own}= (numpy's name and "
                    f"dynshape's for the same argument): give one"
                )
            kwargs = dict(kwargs)
            kwargs[own] = kwargs.pop(numpy_name)
    try:
        bound = signature.bind(*args, **kwargs)
    except TypeError as e:
        # The op's own check says what is wrong in the catalogue's words ("op add takes 2
        # arguments (a, b), got 1", "missing required attribute 'k'", an unknown attribute
        # with the closest name); Python's words, with the signature, if it finds nothing.
        given, attrs = args[: op.arity], dict(kwargs)
        positional = dict(zip([a.name for a in op.attrs], args[op.arity :], strict=False))
        clash = attrs.keys() & positional.keys() or attrs.keys() & {o.name for o in op.operands}
        if not op.attrs and not kwargs:
            apply(op.name, *args)  # "op exp takes 1 argument (x), got 2"
        if not clash and len(args) <= op.arity + len(op.attrs):
            apply(op.name, *given, **attrs, **positional)
        raise fail(f"{name}{signature}: {e}") from None
    values = bound.arguments
    operands = [values[o.name] for o in op.operands]
    attrs = {a.name: values[a.name] for a in op.attrs if a.name in values}
    return operands, attrs


def describe(op: ir.OpDef) -> str:
    """The op function's docstring: the op's line, then its arguments."""
    lines = [op.doc or op.name, "", f"The op {op.name}."]
    if op.operands:
        lines += ["", "Operands: " + ", ".join(_operand(o) for o in op.operands) + "."]
    if op.attrs:
        lines += ["", "Attributes:"]
        for a in op.attrs:
            default = "required" if a.required else f"default {a.default!r}"
            lines.append(f"    {a.name}: {a.kind.name} ({default})")
    aliases = NUMPY_NAMES.get(op.name)
    if aliases:
        said = ", ".join(f"{k}= for {v}=" for k, v in aliases.items())
        lines += ["", f"numpy's names are accepted too: {said}."]
    return "\n".join(lines)


def _operand(o: Any) -> str:
    return f"{o.name} (a tuple of tensors)" if o.is_tuple else o.name
