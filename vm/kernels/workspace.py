"""Carving a kernel's temporary arrays out of the workspace its caller passes.

An op with a workspace rule (``shape_funcs/workspace.py``) gets, as its kernel's last argument,
a 1-d ``uint8`` buffer the compiler planned for the call. ``Workspace(buffer)`` hands out
views of it in order, each at a multiple of ``PIECE_ALIGNMENT`` bytes: ``empty`` and ``zeros``
take the place of ``np.empty`` and ``np.zeros``. A piece that does not fit (a path the rule
does not cover, or no buffer: the kernel called on its own) is a new array, as before; the
module counts those (``Spills.count``), so tests can check that the rule covers the kernel's paths.

A buffer that is not ``uint8``, or that overlaps an operand, is not used (a malformed
executable can pass anything): the kernel allocates instead, and its answer stays right.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from shape_funcs.workspace import PIECE_ALIGNMENT

_BYTES = np.dtype(np.uint8)
may_share_memory = np.may_share_memory  # a bounds check: no slower for large arrays


class Spills:
    """How many pieces did not fit the workspace passed with them (a statistic for tests; two
    threads may lose a count between them)."""

    count = 0


class Workspace:
    """The pieces of one kernel call's workspace, handed out in order (not thread-safe: one
    per call)."""

    __slots__ = ("_buffer", "_operands", "offset", "size")

    def __init__(self, buffer: np.ndarray | None = None, *operands: np.ndarray) -> None:
        # The buffer is checked when it is first used (``_check``): a call whose path carves
        # nothing (a depthwise convolution of one image by its matrices, a product into ``out``)
        # pays nothing for it, where three overlap tests cost 0.6 us of a 5 us call.
        self._buffer = buffer
        self._operands = operands
        self.offset = 0
        self.size = 0 if buffer is None else -1  # -1: not checked yet

    @property
    def buffer(self) -> np.ndarray | None:
        """The workspace buffer, or None when there is none or it cannot be used."""
        if self.size < 0:
            self._check()
        return self._buffer

    def _check(self) -> None:
        # numpy's constructor (``empty``) refuses a buffer that is not contiguous and makes a
        # read-only view of a read-only one (a write then fails): neither is a wrong answer.
        buffer = self._buffer
        assert buffer is not None  # (size -1 only with a buffer)
        if buffer.dtype != _BYTES or any(may_share_memory(buffer, a) for a in self._operands):
            self._buffer = None
            self.size = 0
        else:
            self.size = buffer.size
        self._operands = ()

    def empty(self, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
        """An uninitialised array of ``shape`` and ``dtype``: a view of the workspace when it
        has room left, else a new array."""
        dt = np.dtype(dtype)
        nbytes = math.prod(shape) * dt.itemsize
        if self.size < 0:
            self._check()
        start = self.offset
        if start + nbytes <= self.size:
            self.offset = start + -(-nbytes // PIECE_ALIGNMENT) * PIECE_ALIGNMENT
            piece: np.ndarray = np.ndarray(shape, dt, self._buffer, start)
            return piece
        if self._buffer is not None:
            Spills.count += 1
        return np.empty(shape, dt)

    def zeros(self, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
        """``empty``, filled with zeros."""
        out = self.empty(shape, dtype)
        out.fill(0)
        return out
