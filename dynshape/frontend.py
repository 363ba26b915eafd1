"""``dynshape.compile``: the pipeline's ``compile``, which also takes an ONNX model's path.

The pipeline compiles modules and program text (``pipeline.compile``); a model file of a
frontend is imported first, as the CLI does: a path whose name ends in ``.onnx`` (a
``pathlib.Path`` or a one-line string) goes through ``dynshape.onnx.load``,
which needs the ``onnx`` extra and is imported only then; one ending in ``.pt2`` through
``dynshape.torch.load`` (the ``torch`` extra). Everything else goes to the pipeline
unchanged.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Any

from vm import Executable

from . import pipeline

#: The file name suffix of ONNX models (compared without case).
ONNX_SUFFIX = ".onnx"
#: The file name suffix of torch.export programs saved by ``torch.export.save``.
PT2_SUFFIX = ".pt2"


def is_onnx_path(program: object, suffix: str = ONNX_SUFFIX) -> bool:
    """Whether ``program`` names an ONNX model (or a file of another ``suffix``): a path, or a
    one-line string, ending in ``.onnx`` (program text never does: it ends with a function's
    ``}``)."""
    if isinstance(program, os.PathLike):
        return Path(program).suffix.lower() == suffix
    if isinstance(program, str) and "\n" not in program:
        return program.strip().lower().endswith(suffix)
    return False


@functools.wraps(pipeline.compile)
def compile(program: Any, **options: Any) -> Executable:
    if is_onnx_path(program):
        from .onnx import load  # the extra, only for a model file

        program = load(Path(str(program).strip() if isinstance(program, str) else program))
    elif is_onnx_path(program, PT2_SUFFIX):
        from .torch import load as load_pt2  # the extra, only for a .pt2 file

        program = load_pt2(Path(str(program).strip() if isinstance(program, str) else program))
    return pipeline.compile(program, **options)
