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
            shown, column = _window(source_line, span.column)
            caret = " " * (column - 1) + "^"
            text = f"{text}\n  {shown}\n  {caret}"
        DynShapeError.__init__(self, text)


_WIDTH = 100


def _window(line: str, column: int) -> tuple[str, int]:
    """At most about ``_WIDTH`` characters of ``line`` around ``column`` (a deeply nested
    program can be one line of megabytes), and the column within them."""
    if len(line) <= _WIDTH:
        return line, column
    start = max(0, column - 1 - _WIDTH // 2)
    end = min(len(line), start + _WIDTH)
    prefix = "..." if start else ""
    shown = prefix + line[start:end] + ("..." if end < len(line) else "")
    return shown, column - start + len(prefix)
