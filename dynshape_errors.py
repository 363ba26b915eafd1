"""The root of dynshape's exception hierarchy.

This module stands apart from the four packages on purpose: ``ir``, ``shape_funcs`` and ``vm``
may not import each other (see ``design/layering.md``), yet every error the project raises must
derive from one base class. A module with no imports of its own is the only place all four can
share. Users reach the class as ``dynshape.DynShapeError``.
"""

from __future__ import annotations

__all__ = ["DynShapeError"]


class DynShapeError(Exception):
    """Base class of every error raised by dynshape (compiler, IR, shape functions and VM)."""
