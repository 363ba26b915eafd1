"""Import ONNX models: ``dynshape.onnx.load(path_or_model, dims=None) -> Program``.

Needs the optional ``onnx`` package (``pip install -e '.[onnx]'``); the rest of dynshape never
imports this package. Shape subgraphs are evaluated at import, so imported programs keep their
symbolic shapes (``design/onnx.md``).

    program = dynshape.onnx.load("model.onnx", dims={"batch": (1, 64)})
    exe = dynshape.compile(program)
"""

from __future__ import annotations

from . import ops as _ops  # noqa: F401  (registers the converters)
from .graph import Imported, ShapeStats, import_model, load
from .registry import CONVERTERS

__all__ = ["CONVERTERS", "Imported", "ShapeStats", "import_model", "load"]
