"""An ``ExportedProgram`` from what ``load`` is given: the program itself or a ``.pt2`` path.

torch is imported here, when a program is read, never when ``dynshape.torch`` is merely
named by the CLI or the frontend.
"""

from __future__ import annotations

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
    try:
        ep = torch.export.load(path)
    except Exception as e:  # torch's deserializer raises many kinds on a damaged archive
        message = str(e).strip().splitlines()[0] if str(e).strip() else ""
        raise ModelImportError(
            f"{path} cannot be read by torch.export.load ({type(e).__name__}: {message})"
        ) from None
    if not isinstance(ep, torch.export.ExportedProgram):
        raise ModelImportError(f"{path} does not hold an ExportedProgram")
    return ep
