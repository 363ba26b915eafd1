"""Source locations carried by IR nodes, so that errors can point at the user's text."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Span:
    """A position in a source: 1-based ``line`` and ``column`` in the file called ``source``."""

    line: int
    column: int
    source: str = "<string>"

    def __str__(self) -> str:
        return f"{self.source}:{self.line}:{self.column}"
