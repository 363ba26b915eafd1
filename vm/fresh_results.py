"""Small results made by numpy: no pool round trip for a returned tensor.

A result leaves the VM with its storage (``interpreter.py``, lending): the pool allocates the
storage, views it, lends it to the caller and, on a later miss, takes it back once the caller
has let go of it. That cycle costs about 2 us of bookkeeping per result (two lock round trips,
the lent list, reference counts), more than numpy's own ``np.empty`` plus the system
allocator's reuse of a freed block (0.15 us for 10 floats, measured; +0.4 us for 400 KB; only
from tens of MB, where blocks go back to the system and every call pays page faults, does the
pool win: +2.4 ms for 40 MB). So a result of at most ``Allocator.fresh_result_bytes`` bytes is
an array numpy allocates, exactly as numpy makes its own results: the caller owns it and the
VM's allocator never sees it (its counters do not count it; a memory limit turns this off, so
that the limit bounds every byte).

Which storages: one that the function writes once (an ``alloc_storage`` asking for at most the
64-byte alignment every storage has) and reads once, by an ``alloc_tensor`` at offset 0.
Nothing else can reach its memory then (no kill, no second view, no other tensor in it), so the
memory plan puts nothing else there: it is a result, or a value nobody frees. Only functions
without loops or calls are rewritten (``straight.forward_only``: each instruction runs at most
once a call); in a loop a register may hold the previous iteration's storage, and a second view
of it would alias.
The storage register then holds the byte count (an int) instead of a ``Storage``; the view step
allocates ``shape`` with the same bounds check the view would have made, so a malformed file
gets the same ``OutOfBoundsError`` as before. Larger requests take the pool path unchanged.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from .decode import DecodeContext, Step, load_step, operand_getter
from .isa import SIGNATURES, Instruction, Kind, Op, Reg
from .memory.allocator import MAX_STORAGE_BYTES
from .memory.storage import MIN_ALIGNMENT, view_error
from .straight import forward_only


def result_sites(code: Sequence[Instruction]) -> dict[int, int]:
    """The ``alloc_storage`` pcs whose storage only one ``alloc_tensor`` at offset 0 reads, each
    mapped to that instruction's pc (empty for a function with loops or calls)."""
    if not forward_only(code):
        return {}
    writes: dict[int, list[int]] = {}
    reads: dict[int, list[int]] = {}
    for pc, ins in enumerate(code):
        for kind, operand in zip(SIGNATURES[ins.op], ins.operands, strict=True):
            regs = operand if kind in (Kind.SRCS, Kind.DSTS) else (operand,)
            into = writes if kind in (Kind.DST, Kind.DSTS) else reads
            for reg in regs:
                if isinstance(reg, Reg):
                    into.setdefault(reg.index, []).append(pc)
    sites: dict[int, int] = {}
    for pc, ins in enumerate(code):
        # A storage that asks for more than the cache-line alignment keeps it (numpy's own
        # arrays are 16-byte aligned).
        if ins.op is not Op.ALLOC_STORAGE or ins.operands[2] > MIN_ALIGNMENT:
            continue
        reg = ins.operands[0].index
        readers = reads.get(reg, [])
        if writes.get(reg) != [pc] or len(readers) != 1:
            continue
        view = code[readers[0]]
        if view.op is Op.ALLOC_TENSOR and view.operands[1].index == reg and view.operands[2] == 0:
            sites[pc] = readers[0]
    return sites


def with_fresh_results(code: Sequence[Instruction], steps: list[Step], ctx: DecodeContext) -> None:
    """Replace, in ``steps``, the allocation and view steps of every result site of ``code``
    (``result_sites``) by ones that let numpy allocate results of at most the allocator's
    ``fresh_result_bytes``."""
    limit = getattr(ctx.allocator, "fresh_result_bytes", 0)
    if limit <= 0:
        return
    for alloc_pc, view_pc in result_sites(code).items():
        steps[alloc_pc] = _sized(code[alloc_pc], steps[alloc_pc], alloc_pc + 1, limit)
        steps[view_pc] = _fresh_view(code[view_pc], steps[view_pc], view_pc + 1)


def _sized(ins: Instruction, pooled: Step, nxt: int, limit: int) -> Step:
    """``alloc_storage``: the byte count in the register if at most ``limit``, else the pool."""
    d, size = ins.operands[0].index, ins.operands[1]
    if not isinstance(size, Reg):
        if isinstance(size, int) and 0 <= size <= limit:
            return load_step(size, d, nxt)  # the byte count itself
        return pooled
    s, limit = size.index, min(limit, MAX_STORAGE_BYTES)

    def step(r: list[Any]) -> int:
        n = r[s]
        if n.__class__ is int and 0 <= n <= limit:
            r[d] = n
            return nxt
        return pooled(r)  # anything else: the pool's own checks and messages

    return step


def _fresh_view(ins: Instruction, pooled: Step, nxt: int) -> Step:
    """``alloc_tensor`` at offset 0: a new array if the storage register holds a byte count,
    else the view of the pooled storage."""
    d, s, shape, dtype = ins.operands[0].index, ins.operands[1].index, *ins.operands[3:]
    dt, empty, prod = np.dtype(dtype), np.empty, math.prod
    itemsize = dt.itemsize
    get_shape = operand_getter(shape)

    def step(r: list[Any]) -> int:
        n = r[s]
        if n.__class__ is not int:
            return pooled(r)
        shp = get_shape(r)
        if prod(shp) * itemsize > n:
            raise view_error(n, 0, shp, dt)
        try:
            r[d] = empty(shp, dt)
        except ValueError:  # a negative dim (numpy refuses it): say which view
            raise view_error(n, 0, shp, dt) from None
        return nxt

    return step
