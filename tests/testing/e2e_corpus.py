"""The end-to-end corpus (``tests/e2e/harness.py``), imported by file path: ``tests/`` has no
packages. Shared with ``test_e2e.py`` when that has already imported it as ``harness``."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

HARNESS = Path(__file__).resolve().parent.parent / "e2e" / "harness.py"


def load_harness() -> ModuleType:
    """The ``harness`` module of the end-to-end tests."""
    if "harness" in sys.modules:
        return sys.modules["harness"]
    spec = importlib.util.spec_from_file_location("harness", HARNESS)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["harness"] = module
    spec.loader.exec_module(module)
    return module
