"""Errors raised while building, parsing or checking IR."""

from __future__ import annotations

from dynshape_errors import DynShapeError

from .span import Span


class IRError(DynShapeError):
    """An IR construct is malformed: a bad type, dim, dtype, attribute or arity.

    ``span`` points at the source text the error is about, when it is known.
    """

    def __init__(self, message: str, span: Span | None = None) -> None:
        self.message = message
        self.span = span
        super().__init__(message if span is None else f"{span}: {message}")


class ParseError(IRError):
    """The text format could not be read. The message shows the line with a caret."""

    def __init__(self, message: str, span: Span, source_line: str | None = None) -> None:
        self.line = span.line
        self.column = span.column
        self.source_line = source_line
        self.message = message
        self.span = span
        text = f"{span}: {message}"
        if source_line is not None:
            caret = " " * (span.column - 1) + "^"
            text = f"{text}\n  {source_line}\n  {caret}"
        DynShapeError.__init__(self, text)
