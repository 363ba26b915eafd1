"""The blocked runner of an elementwise fused kernel: every step over one block of rows at a time.

A fused kernel whose steps are all elementwise ops (``ELEMENTWISE``) can run block by block: the
outputs' leading axis is cut into blocks of about ``BLOCK_ELEMENTS`` elements, and each block
runs every step before the next block starts, so the intermediate values of a block stay in
cache instead of making one pass over memory per step. Above ``THREAD_MIN_ELEMENTS`` the blocks
are shared by the calling thread and a persistent worker thread, each taking the next block
when it is done with one (numpy releases the GIL inside its ufunc loops, so both cores work).

Operands are cut the way broadcasting reads them: an operand with the outputs' rank and their
leading dim is sliced to the block's rows; any other operand (leading dim 1, a lower rank, a
0-d constant) is read whole by every block, which is what broadcasting does with it. Scratch
buffers (``tmp`` refs) are per-block arrays of the block's shape, one set per thread, reused
from block to block.

The runner is a plan made at decode time (``plan_blocked``) and a call-time check: when the
call does not fit (outputs of different shapes, fewer than two blocks, a scratch argument of
another shape) it says so and the caller runs the plain step-by-step kernel. A failure inside a
block also runs the plain kernel, which reports the failing step as usual.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from shape_funcs.declarations import BUILTIN_OPS

from .kernels.registry import Kernel, get_kernel_factory
from .worker_thread import shared

#: Ops whose result element ``i`` depends only on element ``i`` of each (broadcast) operand, so
#: a block of rows computes the same values it would as part of the whole array: those their
#: declaration says so of (``OpDecl.blockwise``).
ELEMENTWISE = frozenset(name for name, op in BUILTIN_OPS.items() if op.blockwise)

#: Elements per block (all steps of one block run before the next). Measured on the benchmark
#: machine (2 cores, 1 MiB L2 each, 32 MiB shared L3): 256 Ki elements (1 MiB of float32 per
#: operand) kept a block's values in cache and made the per-block Python calls negligible;
#: 64 Ki was 1.17x numpy ``out=`` at 1e7 elements, 256 Ki 0.96x (design/vm.md). Since a block
#: picks its operands by position (no dict per block and step), the seed at 1e7 / 4.2e6
#: elements ran at 0.82 / 0.88x numpy ``out=`` with 32 Ki, 0.77 / 0.77x with 64 Ki, 0.80 / 0.69x
#: with 128 Ki and 0.80 / 0.75x with 256 Ki (medians of 15, interleaved).
BLOCK_ELEMENTS = 1 << 17
#: Output elements from which the blocked runner is used: below, the whole arrays of a chain
#: stay in the L3 cache anyway and one numpy call per step is cheaper (at 1e6 elements blocks
#: of 16 Ki were 2.4x slower than the plain kernel).
BLOCKED_MIN_ELEMENTS = 1 << 22
#: Output elements from which the blocks are shared with the worker thread.
THREAD_MIN_ELEMENTS = 1 << 22


class BlockedPlan:
    """How to run one fused kernel block by block; ``__call__(*inputs, *destinations)`` returns
    False (and does nothing) when this call does not fit the plan."""

    def __init__(self, spec: Any, constants: Sequence[np.ndarray]) -> None:
        self.num_inputs = spec.num_inputs
        self.num_outputs = spec.num_outputs
        self.arg_tmps = {s.shape[1]: t for t, s in enumerate(spec.scratch) if s.shape[0] == "arg"}
        self.scratch_dtypes = [np.dtype(s.dtype) for s in spec.scratch]
        self.constants = constants
        # One (kernel, input refs, output refs) triple per step, refs as (kind, index).
        self.steps: list[tuple[Kernel, list[tuple[str, int]], list[tuple[str, int]]]] = [
            (
                get_kernel_factory(s.op)(dict(s.attrs)),
                [(r.kind, r.index) for r in s.inputs],
                [(r.kind, r.index) for r in s.outputs],
            )
            for s in spec.steps
        ]

    def __call__(self, *args: np.ndarray) -> bool:
        ni, no = self.num_inputs, self.num_outputs
        inputs, outputs = args[:ni], args[ni : ni + no]
        shape = outputs[0].shape
        if any(o.shape != shape for o in outputs) or not shape:
            return False
        rows = shape[0]
        row_elems = outputs[0].size // rows if rows else 0
        if row_elems == 0:
            return False
        block = max(1, BLOCK_ELEMENTS // row_elems)
        nblocks = -(-rows // block)
        if nblocks < 2:
            return False
        passed = {t: args[ni + no + j] for j, t in self.arg_tmps.items()}
        if any(a.shape != shape for a in passed.values()):
            return False
        ndim = len(shape)

        def cut(a: Any) -> bool:
            # Sliced by rows: an operand with the outputs' rank and leading dim.
            return isinstance(a, np.ndarray) and a.ndim == ndim and a.shape[0] == rows != 1

        ins = [(a, cut(a)) for a in inputs]
        consts = [(c, cut(c)) for c in self.constants]
        # The two threads take the next block from one shared iterator (``next`` on it is
        # atomic under the GIL): on a loaded machine the thread that gets more CPU does more
        # blocks, where fixed halves would wait for the slower one.
        starts = iter(range(0, rows, block))

        def blocks() -> None:
            self._run_blocks(starts, block, rows, ins, consts, outputs, passed)

        try:
            if outputs[0].size >= THREAD_MIN_ELEMENTS:
                shared(blocks, "blocked", outputs[0].size)
            else:
                blocks()
        except (ValueError, TypeError, IndexError, ArithmeticError):
            return False  # the plain kernel runs again and names the failing step
        return True

    def _run_blocks(
        self,
        starts: Iterator[int],
        block: int,
        rows: int,
        ins: list[tuple[Any, bool]],
        consts: list[tuple[Any, bool]],
        outputs: Sequence[np.ndarray],
        passed: dict[int, np.ndarray],
    ) -> None:
        """Every step on each block starting at a row taken from ``starts``."""
        tail = outputs[0].shape[1:]
        # Every operand once, with how a block reads it: rows ``lo:hi`` (CUT), a leading
        # ``hi - lo`` rows of this thread's scratch (HEAD: one buffer per tmp, of a full
        # block's shape) or whole (WHOLE, broadcast); each step picks its operands from that
        # list by position (an itemgetter: no dict or list built per step and block).
        operands: list[tuple[Any, int]] = []
        where: dict[tuple[str, int], int] = {}
        for kind, values in (("in", ins), ("const", consts)):
            for i, (a, sliced) in enumerate(values):
                where[kind, i] = len(operands)
                operands.append((a, CUT if sliced else WHOLE))
        for j, o in enumerate(outputs):
            where["out", j] = len(operands)
            operands.append((o, CUT))
        for t, dt in enumerate(self.scratch_dtypes):
            where["tmp", t] = len(operands)
            if t in passed:
                operands.append((passed[t], CUT))
            else:
                operands.append((np.empty((block, *tail), dt), HEAD))
        steps = [
            (kernel, operator.itemgetter(*[where[r] for r in (*src, *dst)], -1))
            for kernel, src, dst in self.steps
        ]
        for lo in starts:
            hi = min(lo + block, rows)
            n = hi - lo
            vals = [a[lo:hi] if how == CUT else a[:n] if how == HEAD else a for a, how in operands]
            vals.append(None)  # the itemgetter's last index: it always returns a tuple
            for kernel, pick in steps:
                kernel(*pick(vals)[:-1])


#: How a block reads an operand (``BlockedPlan._run_blocks``).
CUT, HEAD, WHOLE = 0, 1, 2


def plan_blocked(spec: Any, constants: Sequence[np.ndarray]) -> Callable[..., bool] | None:
    """The blocked runner of ``spec`` (a valid ``FusedKernel``), or None when it cannot run
    blocked: a step that is not elementwise or takes a tuple operand, or scratch whose shape is
    not the outputs' (only ``("like", out)`` and ``("arg", j)`` scratch can be, the latter
    checked at call time)."""
    for step in spec.steps:
        if step.op not in ELEMENTWISE or any(type(a) is tuple for a in step.inputs):
            return None
    for s in spec.scratch:
        kind = s.shape[0]
        if kind == "arg":
            continue
        if kind != "like" or getattr(s.shape[1], "kind", None) != "out":
            return None
    return BlockedPlan(spec, constants)
