"""The profiler: time and count per instruction kind and per kernel, and shape-computation time.

A VM built with ``profile=True`` wraps its backend in a ``ProfilingBackend``, which turns every
step the inner backend decodes into a timing wrapper around it; a VM without it pays nothing
(the wrappers do not exist). Times are wall-clock
``perf_counter_ns``. A ``call`` is timed for its own work only (the callee's instructions are
counted on their own), so the rows add up to the time spent in instructions.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from time import perf_counter_ns
from typing import Any

from .backend import Backend, BackendWrapper, decode_function
from .decode import DecodeContext, Step
from .executable import Function
from .isa import Kind, Op
from .memory.stats import MemoryStats

#: Instruction kinds whose time counts as "computing shapes".
SHAPE_KINDS = frozenset({"shape_of", "dim", "shape_program", "shape_func", "check", "check_dim"})


@dataclass
class Counter:
    """Calls and total nanoseconds of one row."""

    count: int = 0
    """How many times it ran."""
    ns: int = 0
    """Total wall time, nanoseconds."""


@dataclass
class Profiler:
    """Accumulates timings over every run of one VM until ``reset``."""

    instructions: dict[str, Counter] = field(default_factory=dict)
    """Per instruction kind (opcode name)."""
    kernels: dict[str, Counter] = field(default_factory=dict)
    """Per kernel-table entry name (op name, or the fused kernel's name)."""
    runs: Counter = field(default_factory=Counter)
    """Whole calls of ``run``/``invoke`` (argument checks and output hand-over included)."""
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)
    """Held while a row is updated: a VM's threads share its profiler."""

    def count_run(self, ns: int) -> None:
        """Count one whole call of ``ns`` nanoseconds."""
        with self.lock:
            self.runs.count += 1
            self.runs.ns += ns

    def reset(self) -> None:
        """Forget every timing."""
        self.instructions.clear()
        self.kernels.clear()
        self.runs = Counter()

    @property
    def shape_ns(self) -> int:
        """Total time of the shape-computation instructions."""
        return sum(c.ns for k, c in self.instructions.items() if k in SHAPE_KINDS)

    def wrap(
        self, fn: Callable[[list[Any]], int], kind: str, kernel: str | None
    ) -> Callable[[list[Any]], int]:
        """``fn`` timed under the instruction ``kind`` (and under ``kernel`` for invokes)."""
        row = self.instructions.setdefault(kind, Counter())
        krow = self.kernels.setdefault(kernel, Counter()) if kernel is not None else None
        clock, lock = perf_counter_ns, self.lock

        def timed(regs: list[Any]) -> int:
            t0 = clock()
            try:
                return fn(regs)
            finally:
                dt = clock() - t0
                with lock:
                    row.count += 1
                    row.ns += dt
                    if krow is not None:
                        krow.count += 1
                        krow.ns += dt

        return timed

    def report(self, memory: MemoryStats | None = None) -> str:
        """The timings (and allocation statistics) as a readable table."""
        lines = [f"runs: {self.runs.count}, total {self.runs.ns / 1e6:.3f} ms"]
        total = sum(c.ns for c in self.instructions.values()) or 1
        for title, rows in (("instruction", self.instructions), ("kernel", self.kernels)):
            lines.append("")
            lines.append(f"{title:<28} {'count':>10} {'total ms':>10} {'mean us':>10} {'share':>7}")
            for name, c in sorted(rows.items(), key=lambda kv: -kv[1].ns):
                if not c.count:
                    continue
                lines.append(
                    f"{name:<28} {c.count:>10} {c.ns / 1e6:>10.3f} "
                    f"{c.ns / c.count / 1e3:>10.2f} {100 * c.ns / total:>6.1f}%"
                )
        lines.append("")
        lines.append(
            f"shape computation: {self.shape_ns / 1e6:.3f} ms "
            f"({100 * self.shape_ns / total:.1f}% of instruction time)"
        )
        if memory is not None:
            lines.append("")
            lines.append("memory")
            lines.append(memory.format())
        return "\n".join(lines)


class ProfilingBackend(BackendWrapper):
    """The profiler as a backend wrapper: ``VirtualMachine(exe, profile=True)`` wraps the chosen
    backend (the sanitizer's too, so its checks are timed with their instructions) in one.

    Each step of the inner backend is timed under its opcode's name, an ``invoke`` also under
    its kernel-table entry's name; the rows live in ``profiler``, shared by every instance the
    VM decodes (a lock guards them).
    """

    def __init__(self, inner: Backend | None = None, profiler: Profiler | None = None) -> None:
        super().__init__(inner)
        self.profiler = profiler if profiler is not None else Profiler()
        """Where the timings accumulate."""

    def decode(self, function: Function, ctx: DecodeContext) -> list[Step]:
        steps = decode_function(self.inner, function, ctx)
        kernels = ctx.names.get(Kind.KERNEL, ())
        wrap = self.profiler.wrap
        return [
            wrap(s, ins.op.name.lower(), kernels[ins.operands[0]] if ins.op == Op.INVOKE else None)
            for s, ins in zip(steps, function.code, strict=True)
        ]
