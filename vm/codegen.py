"""Straight-line Python generated at decode time, and the rule that keeps it safe.

Shape programs and fused kernels are small step lists that run on every call. Interpreting them
(a loop over closures or ``(function, a, b)`` triples) costs about as much as the work itself, so
the VM turns each one into Python source, once per VM, and compiles it with ``compile``.

The safety rule: **no string from the executable ever enters the source text.** Generated source
holds only identifiers the generator makes up (``v0``, ``i1``, ``k2`` ...), int literals written
as ``repr(int(value))``, and fixed operator text from the generator's own tables. Op names,
attributes, constants and kernels reach the code as *values* in the namespace it runs in, never
as text. ``make_function`` checks this again before compiling (the generators are the first
line; this is the second): the text may contain no quote, backslash, ``#``, ``.`` or ``;``, and
every identifier must be a generated name, a name bound in the namespace, or one of a few
keywords. The code runs with empty builtins, so it can reach nothing it was not given.
"""

from __future__ import annotations

import functools
import itertools
import re
from collections.abc import Callable, Collection, Mapping
from types import CodeType
from typing import Any

from .errors import FormatError

#: Keywords the generators use; any other word must be a generated or a namespace name.
_KEYWORD_TEXT = "def return pass try except finally raise from as if else or None"
KEYWORDS = frozenset(_KEYWORD_TEXT.split())
#: A generated name: one lower-case letter and a decimal index (``v12``, ``k0``, ``t3``).
GENERATED_NAME = re.compile(r"[a-z][0-9]+")
#: Every character generated code may contain: no quotes (no string literals), no backslash,
#: no ``#``, no ``.`` (no attribute access, no float literals), no ``;``.
_SAFE_TEXT = re.compile(r"[A-Za-z0-9_ \n,()\[\]=+\-*/%<>!:]*")
#: A run of word characters: an identifier, a keyword or an int literal (a literal like ``1e5``
#: or ``0x1`` is one run, so it is refused rather than read as a number and a name).
_WORD = re.compile(r"[A-Za-z0-9_]+")
_serial = itertools.count()


class UnsafeSourceError(FormatError):
    """A generator refused its input, or generated source broke the safety rule.

    Validation rejects malformed programs first; this is what a program that skipped it (built
    by hand, or corrupted after loading) gets instead of code."""


def make_function(
    source: str, namespace: Mapping[str, Any], entry: str, local_names: Collection[str] = ()
) -> Callable[..., Any]:
    """Compile ``source`` (which defines the function ``entry``) in a copy of ``namespace``.

    ``local_names`` are the fixed-text parameter and local names the source uses besides
    generated ones (``inputs``, ``e``). Raises UnsafeSourceError if the source breaks the
    safety rule. The code runs with empty ``__builtins__``: it sees only ``namespace``.
    """
    check_source(source, {*namespace, entry, *local_names})
    code = _compile(source) if len(source) <= CACHED_SOURCE_CHARS else _compile.__wrapped__(source)
    # ``__name__`` makes the functions' ``__module__`` say where they come from.
    scope: dict[str, Any] = {**namespace, "__builtins__": {}, "__name__": __name__}
    exec(code, scope)
    fn: Callable[..., Any] = scope[entry]
    assert callable(fn)
    return fn


#: Sources up to this size keep their code object, so that equal programs (a VM built again for
#: the same executable, or the same shape program in several functions) compile once: Python's
#: compiler is most of the ~70 us it takes to make a function from a small step list.
CACHED_SOURCE_CHARS = 1 << 16


@functools.lru_cache(maxsize=256)
def _compile(source: str) -> CodeType:
    # A distinct file name per code object: tracebacks name it.
    return compile(source, f"<dynshape-generated-{next(_serial)}>", "exec")


def check_source(source: str, names: Collection[str]) -> None:
    """Raise UnsafeSourceError unless ``source`` obeys the safety rule (see the module doc):
    every word is an int literal, a keyword, a generated name or one of ``names``."""
    if _SAFE_TEXT.fullmatch(source) is None:
        bad = sorted({ch for ch in source if _SAFE_TEXT.fullmatch(ch) is None})
        raise UnsafeSourceError(f"generated source contains forbidden characters {bad!r}")
    for word in set(_WORD.findall(source)):
        if word.isdigit() or word in KEYWORDS or word in names:
            continue
        if GENERATED_NAME.fullmatch(word):
            continue
        raise UnsafeSourceError(f"generated source uses the unknown word {word!r}")


def int_literal(value: Any) -> str:
    """``value`` as Python source: ``repr`` of an exact int, so that an int subclass with its own
    ``__repr__`` cannot choose the text. Anything that is not an int (a bool, a float) is refused.
    """
    if isinstance(value, bool) or not isinstance(value, int):
        raise UnsafeSourceError(f"not an int: {type(value).__name__}")
    return repr(int(value))
