"""An ``ExportedProgram`` from what ``load`` is given: the program itself or a ``.pt2`` path.

torch is imported here, when a program is read, never when ``dynshape.torch`` is merely
named by the CLI or the frontend.
"""

from __future__ import annotations

import logging
import os
import zipfile
from typing import Any

from ..errors import ModelImportError


def torch_module() -> Any:
    """The ``torch`` package, or a ``ModelImportError`` saying how to install it."""
    try:
        import torch
    except ImportError:
        raise ModelImportError(
            "importing a torch.export program needs torch: pip install -e '.[torch]'"
        ) from None
    return torch


def read(program: Any) -> Any:
    """The ``ExportedProgram`` of ``program``: one already, or a path to a ``.pt2`` file saved
    by ``torch.export.save`` (a malformed file is a ``ModelImportError`` naming it)."""
    torch = torch_module()
    if isinstance(program, torch.export.ExportedProgram):
        return program
    if not isinstance(program, (str, os.PathLike)):
        raise ModelImportError(
            f"expected a torch.export.ExportedProgram or a .pt2 path, got {type(program).__name__}"
        )
    path = os.fspath(program)
    if not os.path.isfile(path):
        raise ModelImportError(f"cannot read {path}: no such file")
    if not zipfile.is_zipfile(path):
        raise ModelImportError(f"{path} is not a .pt2 archive (torch.export.save writes a zip)")
    logger = logging.getLogger("torch.export")
    caught = _Caught()
    handlers, propagate = logger.handlers, logger.propagate
    logger.handlers = [caught]  # torch logs the deserializer's traceback: the error says it once
    logger.propagate = False
    try:
        ep = torch.export.load(path)
    except Exception as e:  # torch's deserializer raises many kinds on a damaged archive
        cause = _root_cause(caught.error or e)
        lines = str(cause).strip().splitlines()
        raise ModelImportError(
            f"{path} cannot be read by torch.export.load "
            f"({type(cause).__name__}: {lines[0] if lines else ''})"
        ) from None
    finally:
        logger.handlers, logger.propagate = handlers, propagate
    if not isinstance(ep, torch.export.ExportedProgram):
        raise ModelImportError(f"{path} does not hold an ExportedProgram")
    return ep


def _root_cause(e: BaseException) -> BaseException:
    """The innermost exception of ``e``'s chain: torch wraps the deserializer's own message
    ("Invalid ranges [7:3]") in one that points at its log, which ``read`` silences."""
    seen = {id(e)}
    while True:
        nxt = e.__cause__ or e.__context__
        if nxt is None or id(nxt) in seen:
            return e
        seen.add(id(nxt))
        e = nxt


class _Caught(logging.Handler):
    """Keeps the exception torch logs (and then replaces by one pointing at its log)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.error: BaseException | None = None

    def emit(self, record: logging.LogRecord) -> None:
        if record.exc_info and record.exc_info[1] is not None and self.error is None:
            self.error = record.exc_info[1]
