"""Fused primitive functions: one kernel-table entry that runs a sequence of kernel steps.

The lowering decides, with the symbolic types in hand, where each step's result goes:

- into an **output** of the fused function (``Ref("out", j)``): legal when the step's result has
  the output's shape and dtype and no later step still needs what it overwrites; a chain of
  elementwise steps on the output's shape then runs entirely in place in the final buffer;
- into a **scratch** buffer (``Ref("tmp", t)``) otherwise (a reduction or matmul in the middle,
  a change of shape or dtype). Scratch comes from the VM's allocator and goes back to it when the
  fused call returns.

A scratch shape is one of ``("static", dims)``, ``("like", ref)`` (the shape of an input, an
output or an earlier scratch), ``("input", i)`` (a shape passed by the caller as fused input
``i``, computed by the calling bytecode's shape program), or ``("shape_func", step, k)`` (result
``k`` of ``shape_funcs.concrete_shapes`` for that step, on the shapes of its inputs).

Everything is resolved when the VM decodes the executable: each step becomes a closure over its
bound kernel and the slots of its arguments, so the fast path (no scratch) is a loop of closure
calls over one tuple: ``(*inputs, *outputs, *constants)``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from shape_funcs import concrete_shapes

from .errors import FormatError, KernelError
from .kernels.registry import Kernel, get_kernel_factory, has_kernel
from .memory.allocator import Allocator
from .memory.storage import tensor_view

REF_KINDS = ("in", "out", "tmp", "const")


@dataclass(frozen=True)
class Ref:
    """Where a step's argument lives: ``in``/``out`` of the fused function, ``tmp`` (scratch)
    or ``const`` (the executable's constant pool)."""

    kind: str
    """One of ``in``, ``out``, ``tmp``, ``const``."""
    index: int
    """Index among the inputs, outputs, scratch buffers, or constants."""

    def __repr__(self) -> str:
        return f"{self.kind}{self.index}"


#: A step input: one ref, or a tuple of refs for a tuple operand (``concatenate``'s).
StepInput = Ref | tuple[Ref, ...]


@dataclass(frozen=True)
class FusedStep:
    """One kernel call inside a fused function."""

    op: str
    """The op whose kernel runs."""
    attrs: Mapping[str, Any]
    """Its attributes, normalised as in the catalogue."""
    inputs: tuple[StepInput, ...]
    """Where each input comes from."""
    outputs: tuple[Ref, ...]
    """Where each result goes (``out`` or ``tmp`` refs)."""


@dataclass(frozen=True)
class Scratch:
    """A temporary buffer of a fused function."""

    dtype: str
    """Its dtype."""
    shape: tuple[Any, ...]
    """``("static", dims)``, ``("like", Ref)``, ``("input", i)`` or ``("shape_func", step, k)``."""


@dataclass(frozen=True)
class FusedKernel:
    """A kernel-table entry running ``steps`` in order; called like any kernel, with the
    fused function's inputs then its outputs."""

    name: str
    """A name for listings and the profiler (``fused_add_relu``)."""
    num_inputs: int
    """Inputs of the fused function."""
    num_outputs: int
    """Outputs of the fused function."""
    steps: tuple[FusedStep, ...]
    """The kernel calls, in order."""
    scratch: tuple[Scratch, ...] = field(default=())
    """Temporary buffers, allocated before the first step and freed after the last."""

    def validate(self, num_constants: int, where: str) -> None:
        """Raise FormatError naming the step or scratch that is malformed."""
        counts = {
            "in": self.num_inputs,
            "out": self.num_outputs,
            "tmp": len(self.scratch),
            "const": num_constants,
        }

        def check_ref(ref: Any, what: str, kinds: Sequence[str]) -> None:
            if not isinstance(ref, Ref) or ref.kind not in kinds:
                raise FormatError(f"{what}: expected a ref of kind {'/'.join(kinds)}, got {ref!r}")
            if not 0 <= ref.index < counts[ref.kind]:
                raise FormatError(
                    f"{what}: {ref!r} is out of range ({counts[ref.kind]} {ref.kind} values)"
                )

        written: set[Ref] = set()
        for i, step in enumerate(self.steps):
            what = f"{where}: step {i} ({step.op})"
            if not isinstance(step.op, str) or not has_kernel(step.op):
                raise FormatError(f"{what}: op {step.op!r} has no registered kernel")
            for arg in step.inputs:
                for ref in arg if isinstance(arg, tuple) else (arg,):
                    check_ref(ref, f"{what} input", REF_KINDS)
                    if ref.kind in ("out", "tmp") and ref not in written:
                        raise FormatError(f"{what} reads {ref!r} before any step writes it")
            for ref in step.outputs:
                check_ref(ref, f"{what} output", ("out", "tmp"))
                written.add(ref)
        for j in range(self.num_outputs):
            if Ref("out", j) not in written:
                raise FormatError(f"{where}: no step writes output {j}")
        for t, s in enumerate(self.scratch):
            what = f"{where}: scratch {t}"
            spec = s.shape
            kind = spec[0] if isinstance(spec, tuple) and spec else None
            if kind == "static":
                if (
                    len(spec) != 2
                    or not isinstance(spec[1], tuple)
                    or len(spec[1]) > 64
                    or not all(isinstance(d, int) and 0 <= d < 1 << 62 for d in spec[1])
                ):
                    raise FormatError(f"{what}: a static shape must be non-negative ints")
            elif kind == "like":
                if len(spec) != 2:
                    raise FormatError(f"{what}: 'like' takes one ref")
                check_ref(spec[1], what, REF_KINDS)
                if spec[1].kind == "tmp" and spec[1].index >= t:
                    raise FormatError(f"{what}: may only be shaped like an earlier scratch")
            elif kind == "input":
                if (
                    len(spec) != 2
                    or not isinstance(spec[1], int)
                    or not 0 <= spec[1] < self.num_inputs
                ):
                    raise FormatError(f"{what}: bad input index {spec[1:]}")
            elif kind == "shape_func":
                if (
                    len(spec) != 3
                    or not all(isinstance(x, int) for x in spec[1:])
                    or not 0 <= spec[1] < len(self.steps)
                ):
                    raise FormatError(f"{what}: bad shape_func step {spec[1:]}")
                for arg in self.steps[spec[1]].inputs:
                    for ref in arg if isinstance(arg, tuple) else (arg,):
                        if ref.kind == "tmp" and ref.index >= t:
                            raise FormatError(f"{what}: its step reads a later scratch")
            else:
                raise FormatError(f"{what}: unknown shape kind {spec!r}")


#: The numpy exceptions that mean "bad input for this kernel" (not a bug in the VM).
KERNEL_FAILURES = (ValueError, TypeError, IndexError, ArithmeticError)


def _bind(fn: Kernel, getters: list[Any]) -> Callable[[Sequence[Any]], Any]:
    """A closure calling ``fn`` on values picked from the slot list ``v``."""
    if all(isinstance(g, int) for g in getters):
        idx = tuple(getters)
        if len(idx) == 1:
            (a,) = idx
            return lambda v: fn(v[a])
        if len(idx) == 2:
            a, b = idx
            return lambda v: fn(v[a], v[b])
        if len(idx) == 3:
            a, b, c = idx
            return lambda v: fn(v[a], v[b], v[c])
        return lambda v: fn(*[v[i] for i in idx])

    def pick(v: Sequence[Any], g: Any) -> Any:
        return tuple(v[i] for i in g) if isinstance(g, tuple) else v[g]

    return lambda v: fn(*[pick(v, g) for g in getters])


def build_fused(
    spec: FusedKernel,
    constants: Sequence[np.ndarray],
    allocator: Allocator,
) -> Kernel:
    """The callable ``run(*inputs, *outputs)`` of a fused kernel, bound to ``allocator``."""
    n_in, n_out = spec.num_inputs, spec.num_outputs
    used_consts = sorted(
        {
            r.index
            for s in spec.steps
            for a in s.inputs
            for r in (a if isinstance(a, tuple) else (a,))
            if r.kind == "const"
        }
    )
    const_slot = {c: n_in + n_out + k for k, c in enumerate(used_consts)}
    const_vals = tuple(constants[c] for c in used_consts)
    tmp_base = n_in + n_out + len(used_consts)

    def slot(ref: Ref) -> int:
        return {
            "in": ref.index,
            "out": n_in + ref.index,
            "tmp": tmp_base + ref.index,
            "const": const_slot.get(ref.index, -1),
        }[ref.kind]

    steps = []
    for step in spec.steps:
        fn = get_kernel_factory(step.op)(dict(step.attrs))
        getters = [
            tuple(slot(r) for r in a) if isinstance(a, tuple) else slot(a)
            for a in (*step.inputs, *step.outputs)
        ]
        steps.append(_bind(fn, getters))
    names = [s.op for s in spec.steps]
    name = spec.name

    def failed(i: int, e: Exception) -> KernelError:
        return KernelError(
            f"fused kernel {name}: step {i} ({names[i]}) failed: {type(e).__name__}: {e}"
        )

    if not spec.scratch:
        # The fast path: every step writes into an output (or reads inputs and constants).
        def run(*args: Any) -> None:
            v = args + const_vals if const_vals else args
            i = 0
            try:
                for s in steps:
                    s(v)
                    i += 1
            except KERNEL_FAILURES as e:
                raise failed(i, e) from e

        return run

    scratch = [(np.dtype(s.dtype), s.shape) for s in spec.scratch]

    def shape_of_ref(v: Sequence[Any], ref: Ref) -> tuple[int, ...]:
        return tuple(v[slot(ref)].shape)

    def scratch_shape(v: Sequence[Any], how: tuple[Any, ...]) -> tuple[int, ...]:
        kind = how[0]
        if kind == "static":
            return tuple(how[1])
        if kind == "like":
            return shape_of_ref(v, how[1])
        if kind == "input":
            return tuple(int(d) for d in v[how[1]])
        step = spec.steps[how[1]]
        shapes = [
            tuple(shape_of_ref(v, r) for r in a) if isinstance(a, tuple) else shape_of_ref(v, a)
            for a in step.inputs
        ]
        res = concrete_shapes(step.op, shapes, dict(step.attrs))
        return tuple(res if not isinstance(res, list) else res[how[2]])

    def run_with_scratch(*args: Any) -> None:
        v: list[Any] = [*args, *const_vals]
        held = []
        i = 0
        try:
            for dt, how in scratch:
                shape = scratch_shape(v, how)
                st = allocator.alloc(math.prod(shape) * dt.itemsize)
                held.append(st)
                v.append(tensor_view(st, 0, shape, dt))
            for s in steps:
                s(v)
                i += 1
        except KERNEL_FAILURES as e:
            raise failed(i, e) from e
        finally:
            for st in held:
                allocator.free(st)

    return run_with_scratch
