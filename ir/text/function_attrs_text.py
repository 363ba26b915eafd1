"""Function attributes as text: ``Primitive=1, Reshape=1, Steps="0 exp -> t0; 1 add -> o0"``.

They are the typed fields of ``ir.FunctionAttrs``, written after the parameters: ``Primitive``
and ``Reshape`` as ``1`` when set (``0`` and ``True``/``False`` also read), ``Steps`` as a string
of steps ``<call> <op> -> <dest>[,<dest>...]`` joined by ``"; "``, each ``<dest>`` ``o<j>``
(output ``j``) or ``t<k>`` (scratch slot ``k``), then any other scalar attributes as written.
The parser reads ``Steps`` here once and checks it against the body (``ir.step_calls``), so an
error names the step, with the caret on it inside the string.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from ..errors import IRError
from ..expr import Expr
from ..function_attrs import Dest, FunctionAttrs, Scalar, Step, flag
from ..span import Span
from ..steps import StepsError, step_calls
from .constants_text import attr_text
from .lexer import Token, TokenStream

Written = tuple[Token, Token, Scalar]
"""An attribute as the parser met it: its name's token, its value's first token, the value."""

_CALL = re.compile(r"\d+")
_OP = re.compile(r" ([A-Za-z_][A-Za-z0-9_.]*)")
_ARROW = re.compile(r" -> ")
_DEST = re.compile(r"([ot])(\d+)")
_FORM = "'<call> <op> -> <dest>,...', each <dest> o<j> (output j) or t<k> (scratch slot k)"


class _StepsTextError(Exception):
    """A ``Steps`` string that does not read; ``offset`` is where, in the string."""

    def __init__(self, message: str, offset: int) -> None:
        super().__init__(message)
        self.message = message
        self.offset = offset


def steps_text(steps: Sequence[Step]) -> str:
    """The ``Steps`` string of ``steps``: ``"0 exp -> t0; 1 add -> o0"``."""
    return "; ".join(str(s) for s in steps)


def function_attrs_text(attrs: FunctionAttrs) -> list[str]:
    """The ``Name=value`` items of ``attrs``, in the order they print."""
    items = ["Primitive=1"] if attrs.primitive else []
    if attrs.reshape:
        items.append("Reshape=1")
    if attrs.steps is not None:
        items.append(f"Steps={attr_text(steps_text(attrs.steps))}")
    items += [f"{k}={attr_text(v)}" for k, v in attrs.others]
    return items


def parse_steps(text: str) -> tuple[list[Step], list[int]]:
    """The steps of a ``Steps`` string and the offset of each in it (``""`` has none).
    Raises ``_StepsTextError`` naming what is wrong."""
    steps: list[Step] = []
    offsets: list[int] = []
    if not text.strip():
        return steps, offsets
    start = 0
    for piece in text.split(";"):
        at = start + len(piece) - len(piece.lstrip())
        steps.append(_step(piece.strip(), at))
        offsets.append(at)
        start += len(piece) + 1
    return steps, offsets


def _step(s: str, at: int) -> Step:
    """One step ``s``, which starts at offset ``at`` of the string."""

    def fail(expected: str) -> _StepsTextError:
        return _StepsTextError(f"has a malformed step {s!r}: expected {expected} ({_FORM})", at)

    call = _CALL.match(s)
    if call is None:
        raise fail("the number of an op call of the body first")
    op = _OP.match(s, call.end())
    if op is None:
        raise fail("' ' and the op's name after the call number")
    arrow = _ARROW.match(s, op.end())
    if arrow is None:
        raise fail("' -> ' after the op's name")
    dests = []
    for d in s[arrow.end() :].split(","):
        m = _DEST.fullmatch(d)
        if m is None:
            raise fail(f"a destination, found {d!r}")
        dests.append(Dest("out" if m.group(1) == "o" else "tmp", int(m.group(2))))
    return Step(int(call.group()), op.group(1), tuple(dests))


def read_function_attrs(ts: TokenStream, written: Sequence[Written], body: Expr) -> FunctionAttrs:
    """The ``FunctionAttrs`` the attributes ``written`` give the function of ``body``; a
    ``ParseError`` at the attribute (or the step) at fault."""
    flags = {"Primitive": False, "Reshape": False}
    steps: tuple[Step, ...] | None = None
    steps_at: tuple[Token, list[int]] | None = None
    others: list[tuple[str, Scalar]] = []
    for key, value_tok, value in written:
        if key.text in flags:
            try:
                flags[key.text] = flag(key.text, value)
            except IRError as e:
                raise ts.error(e.message, value_tok) from None
        elif key.text == "Steps":
            if not isinstance(value, str):
                raise ts.error(f"function attribute Steps={value!r} must be a string", value_tok)
            try:
                parsed, offsets = parse_steps(value)
            except _StepsTextError as e:
                where = _inside(ts, value_tok, e.offset)
                raise ts.error(f"the Steps attribute {e.message}", where) from None
            steps, steps_at = tuple(parsed), (value_tok, offsets)
        else:
            others.append((key.text, value))
    try:
        attrs = FunctionAttrs(flags["Primitive"], flags["Reshape"], steps, tuple(others))
    except IRError as e:
        at = next(k for k, _, _ in written if k.text == "Steps")
        raise ts.error(e.message, at) from None
    if steps is not None and steps_at is not None:
        try:
            step_calls(body, steps)
        except StepsError as e:
            value_tok, offsets = steps_at
            where = _inside(ts, value_tok, offsets[e.step]) if e.step is not None else value_tok
            raise ts.error(f"the Steps attribute {e.message}", where) from None
    return attrs


def _inside(ts: TokenStream, tok: Token, offset: int) -> Token | Span:
    """Where offset ``offset`` of string token ``tok``'s value is in the text: exact when the
    literal has no escapes (a ``Steps`` string never needs one), else the token."""
    if "\\" in tok.text:
        return tok
    return Span(tok.line, tok.column + 1 + offset, ts.source)
