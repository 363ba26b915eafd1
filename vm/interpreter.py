"""The virtual machine: decode an executable once, then run its functions on numpy arrays.

The loop (``_execute``) calls the current instruction's closure, which returns the next pc;
``call`` and ``ret`` return negative codes and the loop pushes or pops a frame; ``tail_call``
replaces the current frame (and sweeps the storages nothing reaches any more, ``_sweep``). Frames
live on an explicit stack (a list), not on Python's, so recursion in bytecode is bounded by
``max_call_depth`` rather than by Python's recursion limit, and tail recursion by nothing.

Memory: storages allocated during a call are tracked until killed. When the top-level call
returns, storages still live are either handed to the caller with the arrays that view them or
given back to the allocator. Handing over is *lending* by default: the caller owns the array,
and a pooled allocator takes the storage back once no view of it is left (see
``memory/allocator.py``), so results cost neither a copy nor, in steady state, a fresh buffer.
``output_policy`` can force a copy instead, or a transfer that the pool never takes back. A
small result of a function without loops or calls skips all this: it is an array numpy
allocates, which the caller simply owns (``fresh_results.py``; cheaper than lending below 1 MiB).

Backends: what the loop runs comes from a backend (``backend.py``): it binds the kernels and
decodes each function into its steps (the default, ``"closures"``, into ``decode.py``'s
closures); the memory sanitizer and the profiler are wrappers of a backend, chosen by
``check_memory`` and ``profile``.

Threads: a VM may be called from many threads at once. What one call changes (the storages it
has allocated, the payload of a ``call``, the bound kernels' scratch) lives in a *decoded
instance* (``_Instance``: the closures and the context they are bound to), and each call takes
an idle instance for itself, decoding a new one when every instance is busy; so concurrent
calls share only the executable (read-only), the allocator and the profiler, which lock
what they change.

Bounds: loops in bytecode are backward jumps, calls and tail calls; each is a *step*, counted
by the loop only there (straight-line code costs nothing extra), and a run stops with
``StepLimitError`` past ``max_steps`` or past its ``timeout``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from time import perf_counter, perf_counter_ns
from typing import Any

import numpy as np
from numpy import ndarray

from . import kernels as _kernels  # noqa: F401  (registers the built-in kernels)
from .backend import BACKENDS, Backend, backend_named, decode_function, find_layer
from .calling import arguments_checker, positional
from .decode import BACK, CALL, RET, TAIL, DecodeContext, Step
from .donation import DonationRecord, donated_positions
from .errors import KernelError, StepLimitError, VMError
from .executable import Executable, KernelEntry, Param, TypeSpec
from .isa import SIGNATURES, Kind, format_instruction
from .kernels.blas_threads import call_begins, call_ends
from .memory.allocator import Allocator, NaiveAllocator, PooledAllocator
from .memory.refcounts import alone_in_table, unreachable
from .memory.storage import Storage
from .profiler import Profiler, ProfilingBackend
from .sanitizer import MemorySanitizer, SanitizingBackend

#: How results leave the VM: lent (the pool takes the storage back when the caller lets go of
#: it), copied out, or transferred (the caller's for good).
OUTPUT_POLICIES = ("auto", "copy", "transfer")
#: The default bound on steps (backward jumps, calls and tail calls) of one run: minutes of work.
DEFAULT_MAX_STEPS = 100_000_000
#: The most registers all frames of one run may hold together (32 MB of references): a file may
#: give a function up to ``MAX_REGISTERS`` registers, so the call depth alone does not bound the
#: stack's memory.
MAX_STACK_REGISTERS = 1 << 22


class _Instance:
    """One decoded copy of the executable: closures and the per-call state they are bound to.
    A call owns its instance from start to end (see the module doc)."""

    __slots__ = ("code", "ctx")

    def __init__(self, ctx: DecodeContext, code: list[list[Step]]) -> None:
        self.ctx = ctx
        """What the closures are bound to: allocator, kernels, live storages, call payload."""
        self.code = code
        """The closures of each function, by pc."""


class VirtualMachine:
    """Runs the functions of an ``Executable``.

    ``allocator`` is ``"pooled"`` (default), ``"naive"`` or an ``Allocator``;
    ``memory_limit`` (bytes) applies to a named allocator; ``profile`` turns on timing (see
    ``profile_report``; ``profile="trace"`` also records the events ``write_chrome_trace``
    writes); ``output_policy`` is ``"auto"`` (lend a result's storage to the caller),
    ``"copy"`` or ``"transfer"`` (see the module doc); ``max_call_depth`` bounds bytecode recursion;
    ``check_memory`` turns on the memory sanitizer (``vm/sanitizer.py``): freed storage is
    poisoned, and using a view of freed memory raises ``DeadTensorError``; ``max_steps`` and
    ``timeout`` (seconds) bound one run (``StepLimitError``; see the module doc); ``backend``
    (``vm/backend.py``) makes the steps the loop runs: a name (``"closures"``, the default) or a
    ``Backend`` instance (one per VM), which ``check_memory`` and ``profile`` wrap.

    Thread-safe: one VM may be called from many threads at once, with the answers each call
    would get alone (see the module doc and design/vm.md, "Threads").
    """

    def __init__(
        self,
        exe: Executable,
        allocator: str | Allocator = "pooled",
        memory_limit: int | None = None,
        profile: bool | str = False,
        output_policy: str = "auto",
        max_call_depth: int = 10_000,
        check_memory: bool = False,
        max_steps: int | None = DEFAULT_MAX_STEPS,
        timeout: float | None = None,
        backend: str | Backend = "closures",
    ) -> None:
        if not isinstance(exe, Executable):
            raise VMError(_not_an_executable(exe))
        exe.validate()
        self.exe = exe
        """The executable being run."""
        if isinstance(allocator, Allocator):
            self.allocator: Allocator = allocator
        elif allocator == "pooled":
            self.allocator = PooledAllocator(memory_limit)
        elif allocator == "naive":
            self.allocator = NaiveAllocator(memory_limit)
        else:
            raise VMError(
                f"unknown allocator {allocator!r} (use 'pooled', 'naive' or an Allocator)"
            )
        if output_policy not in OUTPUT_POLICIES:
            raise VMError(
                f"unknown output_policy {output_policy!r} (use one of {', '.join(OUTPUT_POLICIES)})"
            )
        self.output_policy = output_policy
        """How results leave the VM: copied, or with their storage (see the module doc)."""
        self.max_call_depth = max_call_depth
        """Most frames on the call stack."""
        for name, value in (("max_steps", max_steps), ("timeout", timeout)):
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0
            ):
                raise VMError(f"{name} must be a positive number or None, got {value!r}")
        self.max_steps = max_steps
        """Most steps (backward jumps, calls, tail calls) of one run; None: no bound."""
        self.timeout = timeout
        """Most seconds one run may take, checked at each step; None: no bound."""
        self.backend: Backend = _choose_backend(backend, check_memory, profile)
        """What decodes the executable: the chosen backend, wrapped by the sanitizer and the
        profiler when asked for."""
        # Where bytecode and fused kernels get storages: the VM's allocator, or a backend's
        # wrapper of it (the sanitizer's).
        self._alloc = self.backend.attach(self.allocator)
        self._free_leftover = self._alloc.free_leftover
        sanitizing = find_layer(self.backend, SanitizingBackend)
        self.sanitizer: MemorySanitizer | None = sanitizing.sanitizer if sanitizing else None
        """The memory sanitizer when built with ``check_memory=True`` (or its backend)."""
        profiling = find_layer(self.backend, ProfilingBackend)
        self.profiler: Profiler | None = profiling.profiler if profiling else None
        """Timings when built with ``profile=True`` (or a ``ProfilingBackend``)."""
        self._donations = DonationRecord()  # what sanitized calls were donated
        self._names: dict[Kind, Any] = {
            Kind.KERNEL: [k.name for k in exe.kernels],
            Kind.FUNC: [f.name for f in exe.functions],
        }
        self._pads = [[None] * (f.num_registers - len(f.params)) for f in exe.functions]
        self._frame_sizes = [f.num_registers for f in exe.functions]
        self._checkers = [arguments_checker(f) for f in exe.functions]
        self._index = {f.name: i for i, f in enumerate(exe.functions)}
        self._main = self._index.get("main")
        # What a storage only ``live`` holds counts (measured, not assumed: refcounts.py).
        self._storage_alone = alone_in_table(lambda: Storage(0))
        # Idle decoded instances; a call pops one (list.pop/append are atomic) and puts it back.
        first = self._decode()
        self._idle: list[_Instance] = [first]
        self._ctx = first.ctx  # the first instance's, for inspection (tests, debugging)
        self._code = first.code

    def _decode(self) -> _Instance:
        """A fresh decoded instance: kernels bound and steps made by the backend, bound to a
        context of their own (see the module doc)."""
        exe, backend = self.exe, self.backend
        ctx = DecodeContext(
            allocator=self._alloc,
            constants=exe.constants,
            kernels=[],
            shape_programs=exe.shape_programs,
            shape_funcs=[(s.op, dict(s.attrs)) for s in exe.shape_funcs],
            names=self._names,
        )
        ctx.kernels = [self._bind_kernel(i, k, ctx) for i, k in enumerate(exe.kernels)]
        code = [decode_function(backend, f, ctx, run=True) for f in exe.functions]
        return _Instance(ctx, code)

    def _bind_kernel(self, i: int, entry: KernelEntry, ctx: DecodeContext) -> Callable[..., Any]:
        try:
            return self.backend.bind_kernel(i, entry, ctx)
        except Exception as e:  # a factory refusing its attributes, whatever it raises
            raise VMError(
                f"kernel {i} ({entry.name}): cannot bind its attributes: {type(e).__name__}: {e}"
            ) from e

    # Calling ----------------------------------------------------------------------------

    def run(self, *args: Any, donate: Iterable[str | int] = (), **named: Any) -> Any:
        """Run ``main``: ``run(x, y)``, ``run(x=x, y=y)`` (positional first, then names, as in
        Python) or ``run({"x": x, "y": y})``; arguments are numpy arrays or Python scalars.
        Returns an array, an int or a tuple of them (see ``outputs``).

        ``donate``: parameters (names or positions) whose arrays the caller gives up: the call
        may reuse their memory, so the caller must not use them afterwards (``vm/donation.py``;
        the memory sanitizer catches a donated array passed again). A parameter that is itself
        named ``donate`` is passed by position or in a mapping."""
        fidx = self._main
        if fidx is None:
            raise self._no_function("main")
        if named or (len(args) == 1 and isinstance(args[0], Mapping)):
            args = positional(self.exe.functions[fidx], args, named)
        return self._call(fidx, args, donate)

    __call__ = run

    def invoke(self, name: str, *args: Any, donate: Iterable[str | int] = (), **named: Any) -> Any:
        """Run function ``name`` on ``args`` (and ``named``, as ``run`` takes them, ``donate``
        too); returns arrays, ints or tuples of them."""
        fidx = self._index.get(name)
        if fidx is None:
            raise self._no_function(name)
        if named or (len(args) == 1 and isinstance(args[0], Mapping)):
            args = positional(self.exe.functions[fidx], args, named)
        return self._call(fidx, args, donate)

    @property
    def inputs(self) -> tuple[Param, ...]:
        """``main``'s parameters: name and type (dtype and symbolic shape) of each."""
        return self.exe.inputs

    @property
    def outputs(self) -> tuple[TypeSpec, ...]:
        """The types of ``main``'s results: one, or the fields of a tuple result."""
        return self.exe.outputs

    @property
    def named_outputs(self) -> tuple[Param, ...]:
        """``main``'s results, each with a name (``Executable.named_outputs``) and type."""
        return self.exe.named_outputs

    def _no_function(self, name: str) -> VMError:
        return VMError(
            f"the executable has no function {name!r} (it has: {', '.join(self._index)})"
        )

    def _call(self, fidx: int, args: tuple[Any, ...], donate: Iterable[str | int] = ()) -> Any:
        profiler = self.profiler
        t0 = perf_counter_ns() if profiler is not None else 0
        regs = self._checkers[fidx](args)
        donated = donated_positions(self.exe.functions[fidx], donate) if donate else ()
        if self.sanitizer is not None:
            self._donations.check(self.exe.functions[fidx], regs)
        idle = self._idle
        try:
            inst = idle.pop()
        except IndexError:  # every instance is busy in another thread (or this one, re-entered)
            inst = self._decode()
        ctx = inst.ctx
        live = ctx.live
        if donated:
            ctx.donated.update(id(regs[i]) for i in donated)
        call_begins()  # BLAS switched to one thread at most once a call (blas_threads)
        try:
            result = self._execute(inst, fidx, regs)
            if result.__class__ is not ndarray or result.base is not None:
                result = self._take_outputs(ctx, result)  # a fresh array needs nothing
        finally:
            call_ends()  # first: nothing below may leave BLAS lowered after the call
            # Whatever the call did not kill or hand over goes back (also after an error).
            if live:
                free = self._free_leftover
                for st in live.values():
                    free(st)
                live.clear()
            ctx.state[0] = None
            if donated:
                ctx.donated.clear()
                if self.sanitizer is not None:
                    self._donations.remember(self.exe.functions[fidx], regs, donated)
            self.allocator.end_call()
            idle.append(inst)
        if profiler is not None:
            profiler.count_run(perf_counter_ns() - t0, t0, self.exe.functions[fidx].name)
        return result

    run_function = invoke

    def _execute(self, inst: _Instance, fidx: int, regs: list[Any]) -> Any:
        codes, state, live = inst.code, inst.ctx.state, inst.ctx.live
        code, pc = codes[fidx], 0
        stack: list[tuple[list[Step], list[Any], int, int, int]] = []
        # The clock is read only if a timeout is set.
        deadline = perf_counter() + self.timeout if self.timeout is not None else None
        try:
            pc = code[0](regs)
            if pc == RET:  # a function without loops or calls, run whole by one step
                value, state[0] = state[0], None
                return value
            # Steps left before the run is stopped (max_steps is a positive int or None).
            budget = self.max_steps or 1 << 62
            sizes = self._frame_sizes
            held = sizes[fidx]  # registers of all frames on the stack (see MAX_STACK_REGISTERS)
            while True:
                if pc < 0:
                    if pc == CALL:
                        callee, argv, dst, ret_pc = state[0]
                        state[0] = None
                        pc = ret_pc - 1  # an error below names the call instruction
                        if len(stack) >= self.max_call_depth:
                            raise VMError(f"call depth exceeds {self.max_call_depth} frames")
                        held += sizes[callee]
                        if held > MAX_STACK_REGISTERS:
                            raise VMError(self._stack_full(callee, len(stack)))
                        stack.append((code, regs, dst, ret_pc, fidx))
                        fidx, code, pc = callee, codes[callee], 0
                        regs = argv + self._pads[callee]
                    elif pc == TAIL:
                        callee, argv = state[0]
                        state[0] = None
                        held += sizes[callee] - sizes[fidx]
                        if held > MAX_STACK_REGISTERS:
                            raise VMError(self._stack_full(callee, len(stack)))
                        fidx, code, pc = callee, codes[callee], 0
                        regs = argv + self._pads[callee]  # the replaced frame's registers go
                        self._sweep(live)
                    elif pc == BACK:
                        pc, state[0] = state[0], None
                    elif stack:
                        value = state[0]
                        held -= sizes[fidx]
                        code, regs, dst, pc, fidx = stack.pop()
                        regs[dst] = value
                    else:
                        # Not left in the state: a result the VM still referenced could not
                        # be taken back by the pool once the caller drops it.
                        value, state[0] = state[0], None
                        return value
                    # A step: the error names the instruction it would run next.
                    budget -= 1
                    if budget < 0 or (deadline is not None and perf_counter() > deadline):
                        raise self._stopped(budget < 0)
                pc = code[pc](regs)
        except VMError as e:
            if e.where is None:
                e.where = self._where(fidx, self._failing_pc(code, pc, e), stack)
            raise
        except Exception as e:
            raise self._failure(e, fidx, self._failing_pc(code, pc, e), stack) from e

    def _failing_pc(self, code: list[Step], pc: int, error: BaseException) -> int:
        """The instruction that raised ``error``: ``pc``, or for a step that runs several
        instructions (a straight-line function) the one its backend locates."""
        if 0 <= pc < len(code):
            found = self.backend.locate(code[pc], error)
            if found is not None:
                return found
        return pc

    def _failure(self, e: Exception, fidx: int, pc: int, stack: Sequence[Any]) -> VMError:
        """The project's error for whatever else failed inside instruction ``pc``, naming it: a
        kernel's failure (numpy's, MemoryError included) is a KernelError; anything else a
        VMError (a value the loader could not rule out)."""
        where = self._where(fidx, pc, stack)
        ins = self.exe.functions[fidx].code[pc] if pc >= 0 else None
        kinds = SIGNATURES[ins.op] if ins is not None else ()
        if Kind.KERNEL in kinds:
            assert ins is not None
            kernel = self._names[Kind.KERNEL][ins.operands[kinds.index(Kind.KERNEL)]]
            return KernelError(f"kernel {kernel} failed: {type(e).__name__}: {e}", where)
        return VMError(f"{type(e).__name__}: {e}", where)

    def _stopped(self, out_of_steps: bool) -> StepLimitError:
        if out_of_steps:
            return StepLimitError(
                f"the run exceeded max_steps={self.max_steps} steps (backward jumps, calls, "
                "tail calls and returns to a caller): a loop that does not end? Raise "
                "max_steps, or pass None"
            )
        return StepLimitError(f"the run exceeded its timeout of {self.timeout} s")

    def _stack_full(self, callee: int, depth: int) -> str:
        return (
            f"calling {self.exe.functions[callee].name!r} at call depth {depth} would make the "
            f"frames hold more than {MAX_STACK_REGISTERS} registers: a recursion that does not end?"
        )

    def _sweep(self, live: dict[int, Storage]) -> None:
        """Free this call's storages that nothing can reach any more: no register of any frame
        holds the storage and no array views its memory. Run at a tail call, where the replaced
        frame's registers are dropped: a loop written as tail recursion then keeps one
        iteration's buffers, not all of them (the compiler cannot kill what a callee made)."""
        if not live:
            return
        for key in unreachable(live, self._storage_alone):
            self._free_leftover(live.pop(key))

    def _where(self, fidx: int, pc: int, stack: Sequence[Any]) -> str:
        f = self.exe.functions[fidx]
        if not 0 <= pc < len(f.code):
            return f"function {f.name} (frame setup)"
        text = f"{f.name}@{pc}: {format_instruction(f.code[pc], self._names)}"
        if stack:
            text += f" (call depth {len(stack)})"
        return text

    def _take_outputs(self, ctx: DecodeContext, value: Any) -> Any:
        """Make ``value`` safe to hand to the caller (see the module doc)."""
        if isinstance(value, tuple):
            return tuple(self._take_outputs(ctx, v) for v in value)
        if not isinstance(value, np.ndarray):
            return value
        base = value.base
        if base is None:
            return value
        st = ctx.live.get(id(base))
        if st is not None:
            policy = self.output_policy
            if policy == "copy":
                return value.copy()
            del ctx.live[id(base)]
            if policy == "auto":
                ctx.allocator.lend(st)
            else:
                ctx.allocator.detach(st)
            return value
        if self.allocator.is_cached(base):
            # The bytecode killed a storage it returns a view of; copy rather than alias it.
            return value.copy()
        return value

    # Reports ----------------------------------------------------------------------------

    def profile_report(self) -> str:
        """The profiler's table with the allocation statistics (needs ``profile=True``)."""
        if self.profiler is None:
            raise VMError("this VM was built without profile=True (nor a ProfilingBackend)")
        return self.profiler.report(self.allocator.stats)

    def write_chrome_trace(self, path: str | os.PathLike[str]) -> int:
        """Write the events recorded since the VM was built (or the profiler reset) to ``path``
        as a Chrome trace (JSON; open it in Perfetto or ``chrome://tracing``): one event per
        run, instruction and kernel call, kernels with their operands' shapes and dtypes.
        Needs ``profile="trace"``. Returns the number of events written."""
        if self.profiler is None or not self.profiler.trace:
            raise VMError(
                'this VM records no trace: build it with profile="trace" '
                "(or a ProfilingBackend(trace=True))"
            )
        return self.profiler.write_chrome_trace(path)


def _choose_backend(backend: object, check_memory: bool, profile: bool | str) -> Backend:
    """The backend named or given, wrapped by the sanitizer and then the profiler (so the
    sanitizer's checks are timed with their instructions) when asked for."""
    if profile not in (False, True, "trace"):  # 1 == True: an int flag is fine too
        raise VMError(f"profile must be False, True or 'trace', got {profile!r}")
    if isinstance(backend, str):
        chosen = backend_named(backend)
    elif isinstance(backend, Backend):
        chosen = backend
    else:
        raise VMError(
            f"backend must be a name ({', '.join(map(repr, BACKENDS))}) or a vm.Backend "
            f"instance, got {type(backend).__name__}"
        )
    # A second sanitizer or profiler around the first would check or time everything twice.
    for flag, wanted, kind in (
        ("check_memory", check_memory, SanitizingBackend),
        ("profile", profile, ProfilingBackend),
    ):
        if wanted and find_layer(chosen, kind) is not None:
            raise VMError(
                f"{flag}=True, but the backend already has a {kind.__name__}: "
                "ask for it one way, not both"
            )
    if check_memory:
        chosen = SanitizingBackend(chosen)
    if profile:
        chosen = ProfilingBackend(chosen, trace=profile == "trace")
    return chosen


def _not_an_executable(value: Any) -> str:
    """What to say to a caller who passed something else than an Executable."""
    kind = type(value).__name__
    if kind in ("Program", "Module", "Function") or isinstance(value, str):
        what = "program text" if isinstance(value, str) else f"a {kind}"
        return (
            f"VirtualMachine expects an Executable, got {what}: compile it first, "
            "vm = VirtualMachine(dynshape.compile(program))"
        )
    if isinstance(value, (bytes, bytearray, memoryview)):
        return "VirtualMachine expects an Executable, got bytes: use Executable.from_bytes(data)"
    return f"VirtualMachine expects an Executable, got {kind}"
