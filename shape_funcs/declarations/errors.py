"""The error a bad op declaration raises."""

from __future__ import annotations

from dynshape_errors import DynShapeError


class DeclarationError(DynShapeError):
    """An op declaration is malformed: a bad name, an unknown attribute kind or pattern, a
    default that is not of its kind, two operands or attributes of one name. Raised when the
    declaration is made, so no layer ever reads a bad one."""
