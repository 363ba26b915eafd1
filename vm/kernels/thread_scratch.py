"""Chunk-sized scratch arrays kept per thread, for kernels that work in cache-sized chunks.

A kernel without a planned workspace that needs a temporary per chunk (``silu``'s ``h`` and
``tanh``, ``nn.leaky_relu``'s product in place, ``erf``'s polynomial steps) takes it from
here: made on a thread's first call and reused by every later chunk and call of that thread.
Allocated per call, such arrays were fresh pages on every call once other work had reused the
heap (the page faults cost more than the chunk's passes: design/vm.md, "SiLU as one kernel");
per thread, so two threads running one kernel never share them. A kernel must not call
another kernel that takes the same ``name`` while it holds them.
"""

from __future__ import annotations

import threading

import numpy as np

_local = threading.local()


def scratch(name: str, dtype: np.dtype, count: int, size: int) -> tuple[np.ndarray, ...]:
    """This thread's ``count`` arrays of ``size`` elements of ``dtype`` kept under ``name``."""
    kept: dict[tuple[str, np.dtype], tuple[np.ndarray, ...]] | None = getattr(_local, "kept", None)
    if kept is None:
        kept = _local.kept = {}
    found = kept.get((name, dtype))
    if found is None or len(found) < count or found[0].size < size:
        found = kept[name, dtype] = tuple(np.empty(size, dtype) for _ in range(count))
    return found
