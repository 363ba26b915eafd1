"""The profiler: time and count per instruction kind and per kernel, and shape-computation time.

A VM built with ``profile=True`` wraps its backend in a ``ProfilingBackend``, which turns every
step the inner backend decodes into a timing wrapper around it; a VM without it pays nothing
(the wrappers do not exist). Times are wall-clock
``perf_counter_ns``. A ``call`` is timed for its own work only (the callee's instructions are
counted on their own), so the rows add up to the time spent in instructions.

With ``trace=True`` (``VirtualMachine(exe, profile="trace")``) the profiler also records one
event per executed instruction, per kernel call (with its operands' shapes and dtypes) and per
run, and ``chrome_trace()`` / ``write_chrome_trace(path)`` give them in the Chrome trace event
format (the JSON of onnxruntime's and torch.profiler's traces; open it in Perfetto or
``chrome://tracing``). At most ``max_events`` are kept (a million by default); later ones are
counted as dropped, and the trace says so.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from time import perf_counter_ns
from typing import Any

from .backend import Backend, BackendWrapper, decode_function
from .decode import DecodeContext, Step
from .executable import Function, KernelEntry
from .isa import SIGNATURES, Instruction, Kind
from .kernels.registry import Kernel
from .memory.stats import MemoryStats
from .opcodes import OPCODES

#: Instruction kinds whose time counts as "computing shapes" (the table's ``shape_work``).
SHAPE_KINDS = frozenset(spec.mnemonic for spec in OPCODES.values() if spec.shape_work)

#: Events a tracing profiler keeps by default (~0.3 KB each: ~300 MB at most); later events are
#: counted, not kept.
DEFAULT_MAX_EVENTS = 1_000_000

#: One recorded event: name, category, start and duration (perf_counter_ns), thread id, args.
Event = tuple[str, str, int, int, int, Any]


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
    trace: bool = False
    """Also record one event per instruction, kernel call and run (``chrome_trace``)."""
    max_events: int = DEFAULT_MAX_EVENTS
    """Most events kept; later ones only add to ``dropped``."""
    events: list[Event] = field(default_factory=list, repr=False, compare=False)
    """The recorded events, in the order they ended."""
    dropped: int = 0
    """Events not kept because ``max_events`` were."""
    threads: dict[int, str] = field(default_factory=dict, repr=False, compare=False)
    """Thread id -> thread name, for every thread with an event."""
    origin_ns: int = field(default_factory=perf_counter_ns, repr=False, compare=False)
    """The trace's time zero (when the profiler was made, or last reset)."""

    def count_run(self, ns: int, start_ns: int | None = None, name: str = "run") -> None:
        """Count one whole call of ``ns`` nanoseconds (started at ``start_ns``; traced as an
        event named ``name``, the function called)."""
        with self.lock:
            self.runs.count += 1
            self.runs.ns += ns
            if self.trace and start_ns is not None:
                self._record((name, "run", start_ns, ns, threading.get_native_id(), None))

    def _record(self, event: Event) -> None:
        """Keep ``event`` (the caller holds ``lock``), or count it as dropped past the cap."""
        if len(self.events) < self.max_events:
            self.events.append(event)
            tid = event[4]
            if tid not in self.threads:
                self.threads[tid] = threading.current_thread().name
        else:
            self.dropped += 1

    def reset(self) -> None:
        """Forget every timing (and every recorded event). The rows are zeroed, not dropped:
        the decoded steps hold them and go on counting into them."""
        with self.lock:
            for row in (*self.instructions.values(), *self.kernels.values(), self.runs):
                row.count = row.ns = 0
            self.events.clear()
            self.dropped = 0
            self.threads.clear()
            self.origin_ns = perf_counter_ns()

    @property
    def shape_ns(self) -> int:
        """Total time of the shape-computation instructions."""
        return sum(c.ns for k, c in self.instructions.items() if k in SHAPE_KINDS)

    def wrap(
        self,
        fn: Callable[[list[Any]], int],
        kind: str,
        kernel: str | None,
        where: tuple[str, int] = ("", -1),
    ) -> Callable[[list[Any]], int]:
        """``fn`` timed under the instruction ``kind`` (and under ``kernel`` for invokes);
        ``where`` is its function and pc, for the trace."""
        row = self.instructions.setdefault(kind, Counter())
        krow = self.kernels.setdefault(kernel, Counter()) if kernel is not None else None
        clock, lock = perf_counter_ns, self.lock
        if self.trace:
            return self._traced_step(fn, kind, kernel, where, row, krow)

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

    def _traced_step(
        self,
        fn: Callable[[list[Any]], int],
        kind: str,
        kernel: str | None,
        where: tuple[str, int],
        row: Counter,
        krow: Counter | None,
    ) -> Callable[[list[Any]], int]:
        """``wrap``'s timing wrapper that also records the instruction's event (a separate
        function, so that a profiler without ``trace`` pays nothing for it)."""
        clock, lock, record, tid_of = (
            perf_counter_ns,
            self.lock,
            self._record,
            threading.get_native_id,
        )
        args: dict[str, Any] = {"function": where[0], "pc": where[1]}
        if kernel is not None:
            args["kernel"] = kernel

        def traced(regs: list[Any]) -> int:
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
                    record((kind, "instruction", t0, dt, tid_of(), args))

        return traced

    def traced_kernel(self, kernel: Kernel, name: str, num_inputs: int) -> Kernel:
        """``kernel`` recording one event per call: its name, and the shapes and dtypes of its
        first ``num_inputs`` operands (inputs) and of the rest (outputs)."""
        clock, lock, record, tid_of = (
            perf_counter_ns,
            self.lock,
            self._record,
            threading.get_native_id,
        )

        def traced(*operands: Any) -> Any:
            t0 = clock()
            try:
                return kernel(*operands)
            finally:
                dt = clock() - t0
                described = [_describe(a) for a in operands]
                args = {"inputs": described[:num_inputs], "outputs": described[num_inputs:]}
                with lock:
                    record((name, "kernel", t0, dt, tid_of(), args))

        traced.__dict__.update(getattr(kernel, "__dict__", {}))  # what it says of itself
        return traced

    def chrome_trace(self) -> dict[str, Any]:
        """The recorded events in the Chrome trace event format: ``{"traceEvents": [...],
        "otherData": {...}}`` with one complete (``"ph": "X"``) event per instruction, kernel
        call and run, ``ts``/``dur`` in microseconds since ``origin_ns``, ``pid`` this process,
        ``tid`` the thread's id; per thread, events are in start order, an enclosing event
        (the ``invoke`` around its kernel, the run around its instructions) first. Needs
        ``trace=True``."""
        with self.lock:
            events = list(self.events)
            threads = dict(self.threads)
            dropped, origin = self.dropped, self.origin_ns
        pid = os.getpid()
        out: list[dict[str, Any]] = [
            {
                "name": "process_name",
                "ph": "M",
                "pid": pid,
                "tid": 0,
                "args": {"name": "dynshape VM"},
            }
        ]
        for tid, tname in sorted(threads.items()):
            out.append(
                {"name": "thread_name", "ph": "M", "pid": pid, "tid": tid, "args": {"name": tname}}
            )
        # Sorted by thread, start, then longest first: a parent starting in the same
        # nanosecond as its child comes before it, as the viewers expect.
        for name, cat, t0, dt, tid, args in sorted(events, key=lambda e: (e[4], e[2], -e[3])):
            event: dict[str, Any] = {
                "name": name,
                "cat": cat,
                "ph": "X",
                "ts": (t0 - origin) / 1000,
                "dur": dt / 1000,
                "pid": pid,
                "tid": tid,
            }
            if args is not None:
                event["args"] = args
            out.append(event)
        return {
            "traceEvents": out,
            "displayTimeUnit": "ns",
            "otherData": {
                "producer": "dynshape vm.profiler",
                "clock": "perf_counter_ns; ts and dur in microseconds since the profiler started",
                "events": len(events),
                "max_events": self.max_events,
                "dropped_events": dropped,
                "note": (
                    f"only the first {self.max_events} events were kept; {dropped} later ones "
                    "were dropped"
                    if dropped
                    else "every event was kept"
                ),
            },
        }

    def write_chrome_trace(self, path: str | os.PathLike[str]) -> int:
        """Write ``chrome_trace()`` as JSON to ``path``; returns the number of events written."""
        trace = self.chrome_trace()
        with Path(path).open("w", encoding="utf-8") as f:
            json.dump(trace, f, separators=(",", ":"))
        return int(trace["otherData"]["events"])

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
    VM decodes (a lock guards them). With a tracing profiler (``trace=True``) every bound kernel
    is wrapped too, so that each call is an event of its own, inside its ``invoke``'s.
    """

    def __init__(
        self, inner: Backend | None = None, profiler: Profiler | None = None, trace: bool = False
    ) -> None:
        super().__init__(inner)
        self.profiler = profiler if profiler is not None else Profiler(trace=trace)
        """Where the timings accumulate."""

    def bind_kernel(self, index: int, entry: KernelEntry, ctx: DecodeContext) -> Kernel:
        kernel = self.inner.bind_kernel(index, entry, ctx)
        if not self.profiler.trace:
            return kernel
        return self.profiler.traced_kernel(kernel, entry.name, entry.num_inputs)

    def decode(self, function: Function, ctx: DecodeContext) -> list[Step]:
        steps = decode_function(self.inner, function, ctx)
        kernels = ctx.names.get(Kind.KERNEL, ())
        wrap = self.profiler.wrap
        return [
            wrap(s, OPCODES[ins.op].mnemonic, _kernel(ins, kernels), (function.name, pc))
            for pc, (s, ins) in enumerate(zip(steps, function.code, strict=True))
        ]


def _kernel(ins: Instruction, names: Sequence[Any]) -> Any:
    """The kernel-table entry an instruction calls (its ``kernel`` operand), or None."""
    kinds = SIGNATURES[ins.op]
    return names[ins.operands[kinds.index(Kind.KERNEL)]] if Kind.KERNEL in kinds else None


def _describe(value: Any) -> Any:
    """A kernel operand for the trace: ``{"shape", "dtype"}`` for an array, a list of those for
    a tuple operand, the type's name otherwise."""
    if isinstance(value, tuple):
        return [_describe(v) for v in value]
    shape = getattr(value, "shape", None)
    dtype = getattr(value, "dtype", None)
    if shape is None or dtype is None:
        return type(value).__name__
    return {"shape": list(shape), "dtype": str(dtype)}
