"""The compiler's errors. ``DynShapeError`` is the root of every error the project raises."""

from __future__ import annotations

from dynshape_errors import DynShapeError
from ir import Span

__all__ = ["CompileError", "DynShapeError"]


class CompileError(DynShapeError):
    """A program cannot be compiled: it is ill-typed or provably violates a shape fact.

    ``span`` is where in the source the problem is; ``listing`` is the function printed with
    the failing expression marked (``// <-- ...``). Both are part of the message when given.
    """

    def __init__(self, message: str, span: Span | None = None, listing: str | None = None):
        self.message = message
        self.span = span
        self.listing = listing
        text = message if span is None else f"{span}: {message}"
        if listing:
            text = f"{text}\n{listing}"
        super().__init__(text)

    @property
    def is_located(self) -> bool:
        """True once the error names where it happened."""
        return self.span is not None or self.listing is not None
