"""Where the user is: the Python call site that build errors and IR spans point at.

A builder call is several frames deep inside the project (the operator method, the op wrapper,
the tracer). The user's line is the first frame outward whose file is not in one of the
project's packages; its file, line and column become an ``ir.Span`` on the node built there,
and the location of any ``BuildError`` raised while building it.
"""

from __future__ import annotations

import contextlib
import itertools
import linecache
import os
import sys
from collections.abc import Iterator
from types import FrameType

import ir
from dynshape_errors import DynShapeError

from ..errors import BuildError

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
#: Frames in these folders belong to the project, not to the user.
_INTERNAL = tuple(
    os.path.join(_ROOT, package) + os.sep for package in ("dynshape", "ir", "shape_funcs", "vm")
)


def _is_internal(filename: str) -> bool:
    return os.path.abspath(filename).startswith(_INTERNAL)


def user_frame() -> FrameType | None:
    """The innermost frame of the caller's stack that is not in the project's packages."""
    frame: FrameType | None = sys._getframe(1)
    while frame is not None and _is_internal(frame.f_code.co_filename):
        frame = frame.f_back
    return frame


def user_span() -> ir.Span | None:
    """The user's call site as a span (1-based line and column), or None if there is none."""
    frame = user_frame()
    if frame is None:
        return None
    # What inspect.getframeinfo(frame, context=0) gives, without its getsourcefile: that scans
    # sys.modules on every call (2.5 ms with onnx and sympy loaded; half of an ONNX import).
    line, column = frame.f_lineno, 1
    code_positions = getattr(frame.f_code, "co_positions", None)  # Python 3.11+
    if code_positions is not None and frame.f_lasti >= 0:
        start, _, col, _ = next(itertools.islice(code_positions(), frame.f_lasti // 2, None))
        line = start if start is not None else line
        column = col + 1 if col is not None else 1
    return ir.Span(line, column, source=frame.f_code.co_filename)


def build_error(message: str, span: ir.Span | None) -> BuildError:
    """A BuildError at ``span``, quoting the user's source line when it can be read."""
    line = linecache.getline(span.source, span.line) if span is not None else ""
    return BuildError(message, span, line or None)


@contextlib.contextmanager
def errors_at(span: ir.Span | None) -> Iterator[None]:
    """Turn any project error raised inside the block into a BuildError located at ``span``.

    A BuildError already raised (by a nested builder call, located at its own line) passes
    through unchanged. Errors of other kinds carry their message: for a ``CompileError`` or an
    ``IRError`` that is the text without a location of their own (it would be a project file).
    """
    try:
        yield
    except BuildError:
        raise
    except DynShapeError as e:
        message = getattr(e, "message", None) or str(e)
        raise build_error(message, span) from None


def fail(message: str) -> BuildError:
    """A BuildError at the user's current line (``raise fail("...")``)."""
    return build_error(message, user_span())
