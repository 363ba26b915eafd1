"""The attribute schema of each op's kernel: what a loaded file may pass to a kernel factory.

A kernel factory reads its attributes as it finds them (``attrs["axis"]``); given a value of the
wrong type (``axis="garbage"``), a list where an int belongs, or a name it does not know, it might
ignore it, misread it, or fail with anything. So the loader checks every kernel-table entry (and
every step of a fused kernel) against its op's schema before a VM binds it: exactly the declared
names (the compiler writes every default), each value of its kind.

The schema is read from the op's declaration (``shape_funcs/declarations``), the one the IR
builds its op from, so there is no copy to keep in step: a built-in op's from the catalogue, a
custom op's from the declaration ``dynshape.register_op`` builds (``register_declaration``).
Kinds are the declarations' text (``shape_funcs/declarations/kinds.py``): ``int``, ``float``,
``bool``, ``str``, ``dtype``, ``list[int]``, ``list[float]``, ``list[[int, int]]``, a choice
``'a' | 'b'``, and unions ``X or Y`` (``None`` among them). ``list[int | dim]`` (reshape's
``newshape``, split's indices, resize's ``sizes``) holds ints and ``None``: the compiler writes
``None`` for a dim entry (the VM never sees sympy), and the kernel takes that extent from its
outputs' shapes. A kernel registered with ``vm.register_kernel`` alone may be given a schema with
``register_attr_schema``; without one, its attributes are only checked to be JSON-like.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from shape_funcs.declarations import BUILTIN_OPS, DeclarationError, OpDecl, value_check
from shape_funcs.declarations.kinds import MAX_INT, MAX_LIST, MAX_STR, Check

from ..errors import FormatError, KernelRegistryError

__all__ = [
    "MAX_INT",
    "MAX_LIST",
    "MAX_STR",
    "Check",
    "check_kernel_attrs",
    "has_schema",
    "kind_check",
    "register_attr_schema",
    "register_declaration",
    "unregister_attr_schema",
]


def _builtin_schemas() -> dict[str, dict[str, str]]:
    """The schema of every built-in op with a kernel (the memory dialect has none)."""
    return {name: op.schema for name, op in BUILTIN_OPS.items() if op.computes_tensors}


_SCHEMAS: dict[str, dict[str, str]] = _builtin_schemas()


def kind_check(kind: str) -> Check:
    """The predicate of a kind's text (see the module doc; made once per text); raises
    KernelRegistryError for a kind the declarations do not know."""
    try:
        return value_check(kind)
    except DeclarationError as e:
        raise KernelRegistryError(str(e)) from None


def register_attr_schema(op_name: str, schema: Mapping[str, str]) -> None:
    """Declare the attributes of ``op_name``'s kernel (name -> kind text); checked at load."""
    for kind in schema.values():
        kind_check(kind)  # refuse an unknown kind now, not when a file is loaded
    _SCHEMAS[op_name] = dict(schema)


def register_declaration(op: OpDecl) -> None:
    """Check the kernel of the op ``op`` declares against its declaration's attributes (a
    custom op's: ``dynshape.register_op`` calls it)."""
    register_attr_schema(op.name, op.schema)


def unregister_attr_schema(op_name: str) -> None:
    """Forget a registered schema (a built-in op's stays: its declaration's)."""
    builtin = BUILTIN_OPS.get(op_name)
    if builtin is not None and builtin.computes_tensors:
        _SCHEMAS[op_name] = builtin.schema
    else:
        _SCHEMAS.pop(op_name, None)


def has_schema(op_name: str) -> bool:
    """True if ``op_name``'s attributes are declared (every built-in op's are)."""
    return op_name in _SCHEMAS


def check_kernel_attrs(op_name: str, attrs: Mapping[str, Any], what: str) -> None:
    """Raise FormatError unless ``attrs`` has exactly ``op_name``'s attributes, each of its
    kind. An op with no schema passes (its attributes were checked to be JSON-like)."""
    schema = _SCHEMAS.get(op_name)
    if schema is None:
        return
    unknown = sorted(set(attrs) - set(schema))
    if unknown:
        raise FormatError(
            f"{what}: unknown attribute(s) {', '.join(map(repr, unknown))} for {op_name} "
            f"(it takes: {', '.join(schema) or 'none'})"
        )
    missing = [name for name in schema if name not in attrs]
    if missing:
        raise FormatError(f"{what}: attribute(s) {', '.join(map(repr, missing))} missing")
    for name, kind in schema.items():
        if not kind_check(kind)(attrs[name]):
            raise FormatError(f"{what}: attribute {name!r} = {attrs[name]!r} is not {kind}")
