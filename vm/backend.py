"""Backends: how a ``VirtualMachine`` turns an executable into the steps its loop runs.

The loop (``interpreter.py``) runs ``pc = code[pc](regs)``: one *step* per instruction, a
callable that does the instruction's work on the frame's registers and returns the next pc, or
one of the negative codes ``CALL``/``TAIL``/``BACK``/``RET`` with its payload in ``ctx.state``
(``decode.py``). A backend makes those steps. It answers two questions, given the
``DecodeContext`` of one decoded instance:

- ``bind_kernel(index, entry, ctx)``: the callable for kernel-table entry ``index``;
- ``decode(function, ctx)``: the steps of one function, by pc;

and it may wrap the VM's allocator once, when the VM is built (``attach``), let one step run
several instructions (``decode_run``), and then say which instruction such a step failed in
(``locate``). ``ClosureBackend`` (``"closures"``, the default) binds kernels from the registry,
decodes into ``decode.py``'s specialised closures (each opcode's decoder named by its entry in
``opcodes.py``) and owns the two fast paths, small results as numpy's arrays
(``fresh_results.py``) and functions without loops or calls as one step (``straight.py``): the
interpreter knows them only through this protocol. A ``BackendWrapper`` delegates to an inner
backend and changes what it wants: the memory sanitizer (``sanitizer.SanitizingBackend``) and
the profiler (``profiler.ProfilingBackend``) are wrappers, so they compose
(``check_memory=True, profile=True`` is the profiler around the sanitizer around the closures).

What every backend must guarantee (design/vm.md, "Backends"): the step protocol above, one step
per instruction; fresh steps and kernels bound to the given context at every call of ``decode``
and ``bind_kernel`` (the VM decodes one instance per concurrent call); and the run-time checks
the closures make (a view's bounds, a shape program's overflow), since validation alone does
not make a loaded file safe. The loop's own bounds (call depth, stack registers, steps, timeout)
hold for every backend that returns the control codes instead of looping or calling itself.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from typing import TypeVar

from .attr_values import bind_runtime_attrs
from .decode import DecodeContext, Step
from .errors import VMError
from .executable import Function, KernelEntry, OpKernel
from .fresh_results import with_fresh_results
from .fused import build_fused
from .isa import Instruction
from .kernels.registry import Kernel, get_kernel_factory
from .memory.allocator import Allocator
from .opcodes import OPCODES
from .straight import failing_pc, straight_line


class Backend(ABC):
    """Makes the steps a VM runs and the kernels they call (see the module doc).

    A VM calls ``attach`` once, when it is built, then ``bind_kernel`` for every kernel-table
    entry and ``decode`` for every function, once per decoded instance: each call must return
    new callables bound to the ``ctx`` it is given, never ones made for another context.
    """

    def attach(self, allocator: Allocator) -> Allocator:
        """Called once by the VM being built, with its allocator; returns the allocator its
        bytecode and fused kernels get storages from (``allocator`` itself, or a wrapper that
        delegates to it). The default keeps the VM's allocator."""
        return allocator

    @abstractmethod
    def bind_kernel(self, index: int, entry: KernelEntry, ctx: DecodeContext) -> Kernel:
        """The callable of kernel-table entry ``index`` (``kernel(*inputs, *outputs)``)."""

    @abstractmethod
    def decode(self, function: Function, ctx: DecodeContext) -> list[Step]:
        """The steps of ``function``'s instructions, by pc: exactly one per instruction."""

    def decode_run(self, function: Function, ctx: DecodeContext) -> list[Step]:
        """The steps the VM runs, by pc: ``decode``'s by default. A backend may let one step
        run several instructions here (a function without loops or calls as one function,
        ``vm/straight.py``); a wrapper, which acts per instruction (the profiler times each,
        the sanitizer checks each), always gets ``decode``'s steps of its inner backend."""
        return self.decode(function, ctx)

    def locate(self, step: Step, error: BaseException) -> int | None:
        """The pc of the instruction that raised ``error`` inside ``step``, when ``step`` (one of
        ``decode_run``'s) runs several instructions; None when it is one instruction's. The VM
        asks only on the error path, to name the failing instruction."""
        return None

    def layers(self) -> Iterator[Backend]:
        """This backend, then the ones it wraps, outermost first."""
        yield self


class ClosureBackend(Backend):
    """The default backend (``"closures"``): kernels from the registry (fused entries compiled
    by ``fused.build_fused``), instructions decoded into ``decode.py``'s closures, and its two
    fast paths: small results are numpy's own arrays where the allocator allows it
    (``vm/fresh_results.py``; the sanitizer's does not), in the steps every layer sees; and the
    VM runs a function without loops or calls as one generated function (``vm/straight.py``,
    ``decode_run``), which writes out an instruction only where its step is ``decode.py``'s, so
    a subclass's own steps still run. Wrappers get ``decode``'s steps, one per instruction."""

    def bind_kernel(self, index: int, entry: KernelEntry, ctx: DecodeContext) -> Kernel:
        if isinstance(entry, OpKernel):
            factory = get_kernel_factory(entry.op)
            if entry.runtime_attrs:
                return bind_runtime_attrs(
                    factory, entry.op, entry.attrs, entry.runtime_attrs, entry.num_inputs
                )
            return factory(dict(entry.attrs))
        return build_fused(entry, ctx.constants, ctx.allocator)

    def decode(self, function: Function, ctx: DecodeContext) -> list[Step]:
        steps = closure_steps(function.code, ctx)
        with_fresh_results(function.code, steps, ctx)  # small results: numpy's own arrays
        return steps

    def decode_run(self, function: Function, ctx: DecodeContext) -> list[Step]:
        steps = decode_function(self, function, ctx)  # one checked step per instruction first
        whole = straight_line(function.code, steps, ctx)
        return steps if whole is None else [whole, *steps[1:]]

    def locate(self, step: Step, error: BaseException) -> int | None:
        return failing_pc(step, error.__traceback__)


def closure_steps(code: Sequence[Instruction], ctx: DecodeContext) -> list[Step]:
    """The closures of a function's instructions, by pc: each made by its opcode's decoder
    (``opcodes.py`` names it, ``decode.py`` holds it)."""
    return [OPCODES[ins.op].decode(ins.operands, pc + 1, ctx) for pc, ins in enumerate(code)]


class BackendWrapper(Backend):
    """A backend that delegates to ``inner`` (the default backend if None); a subclass
    overrides what it changes and calls the inner backend for the rest."""

    def __init__(self, inner: Backend | None = None) -> None:
        if inner is not None and not isinstance(inner, Backend):
            raise VMError(f"{type(self).__name__} wraps a vm.Backend, got {type(inner).__name__}")
        self.inner: Backend = inner if inner is not None else ClosureBackend()
        """The wrapped backend."""

    def attach(self, allocator: Allocator) -> Allocator:
        return self.inner.attach(allocator)

    def bind_kernel(self, index: int, entry: KernelEntry, ctx: DecodeContext) -> Kernel:
        return self.inner.bind_kernel(index, entry, ctx)

    def decode(self, function: Function, ctx: DecodeContext) -> list[Step]:
        return self.inner.decode(function, ctx)

    def layers(self) -> Iterator[Backend]:
        yield self
        yield from self.inner.layers()


#: Backends chosen by name (``VirtualMachine(exe, backend="closures")``): name -> factory. A
#: name makes a new backend for each VM; wrappers are chosen with ``check_memory``/``profile``
#: or passed as instances.
BACKENDS: dict[str, Callable[[], Backend]] = {"closures": ClosureBackend}

B = TypeVar("B", bound=Backend)


def backend_named(name: str) -> Backend:
    """A new backend of the kind ``name`` (a key of ``BACKENDS``); VMError if there is none."""
    try:
        factory = BACKENDS[name]
    except KeyError:
        raise VMError(
            f"unknown backend {name!r} (use {', '.join(map(repr, BACKENDS))} "
            "or a vm.Backend instance)"
        ) from None
    return factory()


def decode_function(
    backend: Backend, function: Function, ctx: DecodeContext, run: bool = False
) -> list[Step]:
    """``backend.decode(function, ctx)`` (``decode_run`` if ``run``: the VM's), checked to be
    one callable step per instruction (the loop indexes the steps by pc and calls them): a
    VMError naming the backend otherwise. The VM decodes through this, and so do the wrappers
    for their inner backend."""
    steps = backend.decode_run(function, ctx) if run else backend.decode(function, ctx)
    what = f"backend {type(backend).__name__} decoded function {function.name!r}"
    n = len(function.code)
    if not isinstance(steps, list):
        raise VMError(
            f"{what} into a {type(steps).__name__}, expected a list of {n} steps "
            "(one per instruction)"
        )
    if len(steps) != n:
        raise VMError(f"{what} into {len(steps)} step(s), expected {n} (one per instruction)")
    for pc, step in enumerate(steps):
        if not callable(step):
            raise VMError(f"{what}: step {pc} is not callable (got {type(step).__name__})")
    return steps


def find_layer(backend: Backend, kind: type[B]) -> B | None:
    """The outermost layer of ``backend`` that is a ``kind``, or None."""
    for layer in backend.layers():
        if isinstance(layer, kind):
            return layer
    return None
