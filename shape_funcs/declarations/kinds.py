"""Attribute kinds as text, and the check of a plain value against one.

A kind is written as the IR names it (``ir/attrs.py`` builds its ``AttrKind`` from the same text):
``int``, ``float``, ``bool``, ``str``, ``dtype``, ``list[int]``, ``list[float]``,
``list[[int, int]]``, the memory dialect's ``dim``, ``list[dim]``, ``list[list[dim]]``, a choice
``'a' | 'b'``, and unions ``X or Y`` (``None`` among them). ``list[int | dim]`` (reshape's
``newshape``, split's indices, resize's ``sizes``) holds ints and dims; a plain value holds
``None`` for a dim entry (the compiler writes ``None`` there, the VM never sees sympy, and the
kernel takes that extent from its outputs' shapes).

``value_check`` is the check of a *plain* value (ints, floats, bools, strings, None, tuples):
what a declaration's default must pass and what the VM's loader checks a kernel's attributes
with. Its bounds are the loader's (a file cannot make a kernel allocate a 2**63-element list).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from .dtypes import DTYPE_NAMES
from .errors import DeclarationError

#: Bounds on attribute values (the same as the VM loader's for immediates and lists).
MAX_INT = 1 << 62
MAX_LIST = 1 << 12
MAX_STR = 1 << 16

Check = Callable[[Any], bool]
#: One alternative of a kind: a basic kind's name (``"int"``, ``"None"``), or a choice's strings.
Alternative = str | tuple[str, ...]


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and -MAX_INT <= v <= MAX_INT


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _list_of(item: Check) -> Check:
    return lambda v: isinstance(v, tuple) and len(v) <= MAX_LIST and all(item(x) for x in v)


_INTS = _list_of(_is_int)
_BASIC: dict[str, Check] = {
    "int": _is_int,
    "float": _is_number,
    "bool": lambda v: isinstance(v, bool),
    "str": lambda v: isinstance(v, str) and len(v) <= MAX_STR,
    "dtype": lambda v: v in DTYPE_NAMES,
    "None": lambda v: v is None,
    "list[int]": _INTS,
    "list[float]": _list_of(_is_number),
    "list[int | dim]": _list_of(lambda x: x is None or _is_int(x)),
    "list[[int, int]]": _list_of(lambda p: _INTS(p) and len(p) == 2),
    # The memory dialect's sizes: plain values are ints (its ops never reach the VM).
    "dim": _is_int,
    "list[dim]": _INTS,
    "list[list[dim]]": _list_of(_INTS),
}
#: The basic kinds' names.
BASIC_KINDS = tuple(_BASIC)


def parse_kind(text: str) -> tuple[Alternative, ...]:
    """The alternatives of a kind's text (``"int or None"`` -> ``("int", "None")``, a choice
    ``"'a' | 'b'"`` -> ``(("a", "b"),)``); raises DeclarationError naming an unknown part."""
    if not isinstance(text, str):
        raise DeclarationError(f"an attribute kind is text, got {text!r}")
    return _parse_kind(text)


@functools.cache  # a few dozen kind texts, each read by many attributes
def _parse_kind(text: str) -> tuple[Alternative, ...]:
    alternatives: list[Alternative] = []
    for part in (p.strip() for p in text.split(" or ")):
        if part in _BASIC:
            alternatives.append(part)
        elif part.startswith("'"):
            alternatives.append(tuple(c.strip().strip("'") for c in part.split("|")))
        else:
            raise DeclarationError(f"unknown attribute kind {part!r} in {text!r}")
    return tuple(alternatives)


def value_check(text: str) -> Check:
    """The predicate a plain value of kind ``text`` passes (see the module doc)."""
    parse_kind(text)  # refuses what is not a kind's text, in its words
    return _value_check(text)


@functools.cache
def _value_check(text: str) -> Check:
    checks = [_BASIC[a] if isinstance(a, str) else _choice(frozenset(a)) for a in parse_kind(text)]
    return checks[0] if len(checks) == 1 else (lambda v: any(c(v) for c in checks))


def _choice(choices: frozenset[str]) -> Check:
    return lambda v: isinstance(v, str) and v in choices


def choice(*choices: str) -> str:
    """The text of the kind accepting one of ``choices``: ``'a' | 'b'``."""
    return " | ".join(repr(c) for c in choices)


def optional(kind: str) -> str:
    """The text of the kind accepting None or a value of ``kind``."""
    return f"{kind} or None"
