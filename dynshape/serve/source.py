"""Where a served executable comes from: a path, the bytes of a saved file, or an
``Executable`` (numpy only). The deployment sends the bytes to its replicas, so a file named
by path is read once, in the caller's process: a replica on another node needs no copy of it."""

from __future__ import annotations

from pathlib import Path

from vm import Executable

from ..errors import ServeConfigError

ExecutableSource = str | Path | bytes | bytearray | Executable


def executable_bytes(executable: ExecutableSource) -> bytes:
    """The saved bytes of ``executable``; ServeConfigError if a path cannot be read (a
    malformed file is found when it is loaded: ``FormatError``)."""
    if isinstance(executable, Executable):
        return executable.to_bytes()
    if isinstance(executable, (bytes, bytearray)):
        return bytes(executable)
    try:
        return Path(executable).read_bytes()
    except OSError as e:
        raise ServeConfigError(f"cannot read the executable {executable}: {e.strerror}") from None


def default_model_name(executable: ExecutableSource) -> str:
    """The name a model is served under unless told otherwise: a file's stem (``mlp`` for
    ``models/mlp.dsx``), else ``model``."""
    if isinstance(executable, (str, Path)):
        return Path(executable).stem
    return "model"
