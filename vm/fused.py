"""Fused primitive functions: one kernel-table entry that runs a sequence of kernel steps.

The lowering decides, with the symbolic types in hand, where each step's result goes:

- into an **output** of the fused function (``Ref("out", j)``): legal when the step's result has
  the output's shape and dtype and no later step still needs what it overwrites; a chain of
  elementwise steps on the output's shape then runs entirely in place in the final buffer;
- into a **scratch** buffer (``Ref("tmp", t)``) otherwise (a reduction or matmul in the middle,
  a change of shape or dtype). Scratch comes from the VM's allocator and goes back to it when the
  fused call returns.

A scratch shape is one of ``("arg", j)`` (the caller passes the buffer, as its destination
``num_outputs + j``: the compiler allocated it in the IR, so memory planning placed it),
``("static", dims)``, ``("like", ref)`` (the shape of an input, an output or an earlier
scratch), ``("input", i)`` (a shape passed by the caller as fused input ``i``, computed by the
calling bytecode's shape program), or ``("shape_func", step, k)`` (result ``k`` of
``shape_funcs.concrete_shapes`` for that step, on the shapes of its inputs). All but ``arg``
are allocated by the VM for the call.

Everything is resolved when the VM decodes the executable: ``build_fused`` generates one Python
function per fused kernel (``vm/codegen.py``), one parameter per input and output and one line
per step, with kernels, constants and scratch makers bound as names of its namespace::

    def run(i0, i1, o0, o1):
        try:
            k0(i0, i1, o0)
            k1(o0, c0, o0)
            k2((o0, i1), o1)
        except KERNEL_FAILURES as e:
            raise fail(e) from e

With scratch, ``held = []`` comes first, then one ``t0 = n0(held, ...)`` line per buffer inside
the ``try``, and a ``finally: free(held)``. ``fail`` finds the failing step from the line number
of ``run``'s frame in the traceback, so the fast path pays nothing for naming it. The source
holds only generated names; op names, attributes and constants are values in the namespace.

Faster runners come first when a kernel has them (design/vm.md, "Fast paths of fused
kernels"): ``if g0(o0) <= N: if e0(...): return None`` for one ``numexpr`` expression
(``fused_expr.py``: long float chains on small outputs) and ``if g0(o0) >= M: if b0(...):
return None`` for the blocked, threaded runner (``fused_blocked.py``: elementwise chains on
large outputs). A runner returns False when a call does not fit it, and the steps run.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Any

import numpy as np

from shape_funcs import concrete_shapes
from shape_funcs.workspace import WORKSPACE_DTYPE, passes_workspace

from . import fused_blocked, fused_expr
from .attr_values import bind_runtime_attrs, check_runtime_attrs
from .codegen import UnsafeSourceError, int_literal, make_function
from .errors import FormatError, KernelError
from .fused_views import SCRATCH_VIEWS, view_steps
from .kernels.constant_layouts import with_constants
from .kernels.registry import Kernel, get_kernel_factory, has_kernel
from .memory.allocator import Allocator
from .memory.storage import Storage, tensor_view

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
    runtime_attrs: tuple[tuple[str, int], ...] = ()
    """Attribute entries filled at run time, as ``OpKernel.runtime_attrs``: their values are
    the step's last input, an ``in`` ref the caller passes a tuple of ints in."""


@dataclass(frozen=True)
class Scratch:
    """A temporary buffer of a fused function."""

    dtype: str
    """Its dtype."""
    shape: tuple[Any, ...]
    """``("arg", j)``, ``("static", dims)``, ``("like", Ref)``, ``("input", i)`` or
    ``("shape_func", step, k)`` (see the module doc)."""


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
    """Temporary buffers: passed by the caller (``arg``), or allocated before the first step
    and freed after the last."""

    @property
    def num_scratch_args(self) -> int:
        """Scratch buffers the caller passes after the outputs."""
        return sum(
            1 for s in self.scratch if isinstance(s.shape, tuple) and s.shape[:1] == ("arg",)
        )

    @property
    def num_destinations(self) -> int:
        """Arrays an ``invoke`` passes after the inputs: the outputs, then the scratch args."""
        return self.num_outputs + self.num_scratch_args

    @property
    def value_inputs(self) -> frozenset[int]:
        """The inputs holding a step's attribute values (tuples of ints, not tensors)."""
        return frozenset(
            s.inputs[-1].index
            for s in self.steps
            if s.runtime_attrs and s.inputs and isinstance(s.inputs[-1], Ref)
        )

    def validate(self, num_constants: int, where: str) -> None:
        """Raise FormatError naming the step or scratch that is malformed."""
        refs = _Refs(
            {
                "in": self.num_inputs,
                "out": self.num_outputs,
                "tmp": len(self.scratch),
                "const": num_constants,
            }
        )
        written: set[Ref] = set()
        for i, step in enumerate(self.steps):
            _check_step(step, f"{where}: step {i} ({step.op})", refs, written)
        for j in range(self.num_outputs):
            if Ref("out", j) not in written:
                raise FormatError(f"{where}: no step writes output {j}")
        args_seen: set[int] = set()
        for t, s in enumerate(self.scratch):
            spec = s.shape
            kind = spec[0] if isinstance(spec, tuple) and spec else None
            check = _SCRATCH_CHECKS.get(kind) if isinstance(kind, str) else None
            if check is None:
                raise FormatError(f"{where}: scratch {t}: unknown shape kind {spec!r}")
            check(self, t, spec, f"{where}: scratch {t}", refs, args_seen)
        if args_seen != set(range(len(args_seen))):
            raise FormatError(f"{where}: scratch args must be numbered 0..{len(args_seen) - 1}")
        carved = workspaces(self)
        for t in carved:
            if self.scratch[t].dtype != WORKSPACE_DTYPE:
                raise FormatError(
                    f"{where}: scratch {t} is a workspace of {self.scratch[t].dtype}, "
                    f"not {WORKSPACE_DTYPE}"
                )
        for i, step in enumerate(self.steps):  # a workspace holds no value anyone may read
            for arg in step.inputs:
                for ref in _refs_of(arg):
                    if ref.kind == "tmp" and ref.index in carved:
                        raise FormatError(
                            f"{where}: step {i} ({step.op}) reads scratch {ref.index}, a workspace"
                        )
        _check_value_inputs(self, where)


class _Refs:
    """Checks refs against the number of values of each kind in one fused kernel."""

    def __init__(self, counts: dict[str, int]) -> None:
        self.counts = counts

    def check(self, ref: Any, what: str, kinds: Sequence[str]) -> None:
        """Raise FormatError unless ``ref`` is a ``Ref`` of one of ``kinds``, in range."""
        if not isinstance(ref, Ref) or ref.kind not in kinds:
            raise FormatError(f"{what}: expected a ref of kind {'/'.join(kinds)}, got {ref!r}")
        n = self.counts[ref.kind]
        if isinstance(ref.index, bool) or not isinstance(ref.index, int) or not 0 <= ref.index < n:
            raise FormatError(f"{what}: {ref!r} is out of range ({n} {ref.kind} values)")


def _refs_of(arg: Any) -> tuple[Any, ...]:
    """The refs of a step's operand: one, or the fields of a tuple operand."""
    return arg if isinstance(arg, tuple) else (arg,)


def _check_step(step: FusedStep, what: str, refs: _Refs, written: set[Ref]) -> None:
    """A registered op reading only values already written, writing outputs or scratch."""
    if not isinstance(step.op, str) or not has_kernel(step.op):
        raise FormatError(f"{what}: op {step.op!r} has no registered kernel")
    for arg in step.inputs:
        for ref in _refs_of(arg):
            refs.check(ref, f"{what} input", REF_KINDS)
            if ref.kind in ("out", "tmp") and ref not in written:
                raise FormatError(f"{what} reads {ref!r} before any step writes it")
    results = step.outputs
    if passes_workspace(step.op, len(step.outputs)):  # the last output: scratch, no value
        refs.check(step.outputs[-1], f"{what} workspace", ("tmp",))
        results = step.outputs[:-1]
    for ref in results:
        refs.check(ref, f"{what} output", ("out", "tmp"))
        written.add(ref)


def workspaces(k: FusedKernel) -> set[int]:
    """The scratch buffers of ``k`` that are a step's workspace (its op's kernel carves them,
    ``shape_funcs/workspace.py``): written in part or not at all."""
    return {
        s.outputs[-1].index
        for s in k.steps
        if passes_workspace(s.op, len(s.outputs)) and isinstance(s.outputs[-1], Ref)
    }


def _check_value_inputs(k: FusedKernel, where: str) -> None:
    """Each step filling attributes at run time takes their values as its last input, an
    ``in`` ref that holds values only (no step nor scratch reads it as a tensor)."""
    values: set[int] = set()
    for i, step in enumerate(k.steps):
        if not step.runtime_attrs:
            continue
        what = f"{where}: step {i} ({step.op})"
        check_runtime_attrs(step.runtime_attrs, step.attrs, len(step.inputs), what)
        last = step.inputs[-1]
        if not isinstance(last, Ref) or last.kind != "in":
            raise FormatError(f"{what}: its attribute values must be an input (an 'in' ref)")
        values.add(last.index)
    if not values:
        return
    for i, step in enumerate(k.steps):
        tensors = step.inputs[:-1] if step.runtime_attrs else step.inputs
        for arg in tensors:
            for ref in _refs_of(arg):
                if ref.kind == "in" and ref.index in values:
                    raise FormatError(
                        f"{where}: step {i} ({step.op}) reads input {ref.index}, which holds "
                        "attribute values, as a tensor"
                    )
    for t, sc in enumerate(k.scratch):
        kind = sc.shape[0]
        spec_arg: Any = sc.shape[1] if len(sc.shape) > 1 else None
        shaped_by_values = (kind == "input" and spec_arg in values) or (
            kind == "like"
            and isinstance(spec_arg, Ref)
            and spec_arg.kind == "in"
            and spec_arg.index in values
        )
        if shaped_by_values:
            raise FormatError(f"{where}: scratch {t} is shaped by an input of attribute values")
        on_step = (
            kind == "shape_func" and isinstance(spec_arg, int) and 0 <= spec_arg < len(k.steps)
        )
        if on_step and k.steps[spec_arg].runtime_attrs:
            raise FormatError(
                f"{where}: scratch {t} is shaped by the shape function of a step whose "
                "attributes are known at run time only"
            )


def _scratch_arg(
    k: FusedKernel, t: int, spec: Any, what: str, refs: _Refs, args_seen: set[int]
) -> None:
    if len(spec) != 2 or not isinstance(spec[1], int) or spec[1] in args_seen:
        raise FormatError(f"{what}: 'arg' takes an index not used before")
    args_seen.add(spec[1])


def _scratch_static(
    k: FusedKernel, t: int, spec: Any, what: str, refs: _Refs, args_seen: set[int]
) -> None:
    if (
        len(spec) != 2
        or not isinstance(spec[1], tuple)
        or len(spec[1]) > 64
        or not all(isinstance(d, int) and 0 <= d < 1 << 62 for d in spec[1])
    ):
        raise FormatError(f"{what}: a static shape must be non-negative ints")


def _scratch_like(
    k: FusedKernel, t: int, spec: Any, what: str, refs: _Refs, args_seen: set[int]
) -> None:
    if len(spec) != 2:
        raise FormatError(f"{what}: 'like' takes one ref")
    refs.check(spec[1], what, REF_KINDS)
    if spec[1].kind == "tmp" and spec[1].index >= t:
        raise FormatError(f"{what}: may only be shaped like an earlier scratch")


def _scratch_input(
    k: FusedKernel, t: int, spec: Any, what: str, refs: _Refs, args_seen: set[int]
) -> None:
    if len(spec) != 2 or not isinstance(spec[1], int) or not 0 <= spec[1] < k.num_inputs:
        raise FormatError(f"{what}: bad input index {spec[1:]}")


def _scratch_shape_func(
    k: FusedKernel, t: int, spec: Any, what: str, refs: _Refs, args_seen: set[int]
) -> None:
    if (
        len(spec) != 3
        or not all(isinstance(x, int) for x in spec[1:])
        or not 0 <= spec[1] < len(k.steps)
    ):
        raise FormatError(f"{what}: bad shape_func step {spec[1:]}")
    for arg in k.steps[spec[1]].inputs:
        for ref in _refs_of(arg):
            if ref.kind == "tmp" and ref.index >= t:
                raise FormatError(f"{what}: its step reads a later scratch")


#: The check of each kind of scratch shape (``Scratch.shape[0]``).
_SCRATCH_CHECKS: dict[str, Callable[[FusedKernel, int, Any, str, _Refs, set[int]], None]] = {
    "arg": _scratch_arg,
    "static": _scratch_static,
    "like": _scratch_like,
    "input": _scratch_input,
    "shape_func": _scratch_shape_func,
}


#: The numpy exceptions that mean "bad input for this kernel" (not a bug in the VM).
KERNEL_FAILURES = (ValueError, TypeError, IndexError, ArithmeticError)


def build_fused(
    spec: FusedKernel,
    constants: Sequence[np.ndarray],
    allocator: Allocator,
) -> Kernel:
    """The callable ``run(*inputs, *outputs)`` of a fused kernel, bound to ``allocator``.

    ``run`` is generated Python with one parameter per input and output and one line per step
    (see the module doc). The spec must be valid (``FusedKernel.validate``); the generator
    refuses a ref that names nothing it generated with an ``UnsafeSourceError``.
    """
    gen = _Generator(spec, constants)
    views = view_steps(spec.steps, constants)
    for i, step in enumerate(spec.steps):
        if i in views:  # a name of its own for a view of the input (fused_views.py)
            view = gen.bind(f"v{i}", views[i])
            # the scratch's buffer is passed for its shape and dtype, which the view must have
            x, y = gen.operand(step.inputs[0]), gen.buffer(step.outputs[0])
            gen.step(i, f"{gen.view_of(step.outputs[0], i)} = {view}({x}, {y})")
            continue
        factory = get_kernel_factory(step.op)
        bound = (
            bind_runtime_attrs(factory, step.op, step.attrs, step.runtime_attrs, len(step.inputs))
            if step.runtime_attrs
            else factory(dict(step.attrs))
        )
        constant_operands = {
            p: constants[a.index]
            for p, a in enumerate(step.inputs)
            if isinstance(a, Ref) and a.kind == "const"
        }
        bound = with_constants(bound, constant_operands)
        kernel = gen.bind(f"k{i}", bound)
        args = [
            *(gen.operand(a) for a in step.inputs),
            *(gen.written(r) for r in step.outputs),
        ]
        gen.step(i, f"{kernel}({', '.join(args)})")
    gen.buffers_again()  # the scratch makers (run before the steps) shape like the buffers
    for t, s in enumerate(spec.scratch):
        if s.shape[0] == "arg":
            continue  # a parameter of run (see _Generator)
        maker, refs = _scratch_maker(spec, np.dtype(s.dtype), s.shape, allocator)
        args = ["held", *(gen.operand(a) for a in refs)]
        # Scratch is made before step 0, and its failures are reported as step 0's.
        gen.setup(f"t{t} = {gen.bind(f'n{t}', maker)}({', '.join(args)})")

    _fast_paths(gen, spec, constants)

    def free(held: list[Storage]) -> None:
        for st in held:
            allocator.free(st)

    run = gen.finish(free)
    # The caller's scratch that a view replaces stays unwritten, and a workspace is written in
    # part: say which (the sanitizer asks).
    viewed = {r.index for i in views for r in spec.steps[i].outputs} | workspaces(spec)
    setattr(
        run,
        SCRATCH_VIEWS,
        frozenset(
            spec.num_outputs + s.shape[1]
            for t, s in enumerate(spec.scratch)
            if t in viewed and s.shape[0] == "arg"
        ),
    )
    return run


def _fast_paths(gen: _Generator, spec: FusedKernel, constants: Sequence[np.ndarray]) -> None:
    """Put the size tests of the kernel's faster runners before its steps: one expression
    (``fused_expr``, small outputs of long chains) and blocks (``fused_blocked``, large outputs
    of elementwise chains). A runner returns False when a call does not fit it; the steps run.
    """
    if spec.num_outputs == 0:
        return
    expr = fused_expr.plan_expr(spec, constants)
    blocked = fused_blocked.plan_blocked(spec, constants)
    if expr is None and blocked is None:
        return
    args = ", ".join(gen.params)
    size = gen.bind("g0", attrgetter("size"))
    if expr is not None:
        e = gen.bind("e0", expr)
        gen.prelude(f"if {size}(o0) <= {int_literal(expr.max_elements)}:")
        gen.prelude(f"    if {e}({args}):")
        gen.prelude("        return None")
    if blocked is not None:
        b = gen.bind("b0", blocked)
        gen.prelude(f"if {size}(o0) >= {int_literal(fused_blocked.BLOCKED_MIN_ELEMENTS)}:")
        gen.prelude(f"    if {b}({args}):")
        gen.prelude("        return None")


#: Ref kinds a step may write.
WRITABLE = ("out", "tmp")


class _Generator:
    """Builds the source and namespace of one fused kernel's ``run``.

    Source text comes only from here: parameter and local names made from ``range`` over the
    spec's counts, namespace names made from the generator's own counters. A ref is looked up in
    the table of names it generated, so whatever a ref holds, only those names can come out.
    """

    def __init__(self, spec: FusedKernel, constants: Sequence[np.ndarray]) -> None:
        self.spec = spec
        self.constants = constants
        self.params = [f"i{i}" for i in range(spec.num_inputs)]
        self.params += [f"o{j}" for j in range(spec.num_outputs)]
        # Scratch the caller passes comes last, in the order of its arg numbers.
        by_arg = {s.shape[1]: t for t, s in enumerate(spec.scratch) if s.shape[0] == "arg"}
        self.params += [f"t{by_arg[j]}" for j in range(len(by_arg))]
        self.names: dict[tuple[str, int], str] = {
            ("in", i): f"i{i}" for i in range(spec.num_inputs)
        }
        self.names.update({("out", j): f"o{j}" for j in range(spec.num_outputs)})
        #: Each scratch slot's buffer (a view a step makes gets a name of its own: ``view_of``).
        self.buffers = {("tmp", t): f"t{t}" for t in range(len(spec.scratch))}
        self.names.update(self.buffers)
        self.namespace: dict[str, Any] = {"KERNEL_FAILURES": KERNEL_FAILURES}
        self.const_names: dict[int, str] = {}
        self.setup_lines: list[str] = []
        self.prelude_lines: list[str] = []
        self.step_lines: list[tuple[int, str]] = []

    def bind(self, name: str, value: Any) -> str:
        """Put ``value`` in the namespace as ``name`` (a generated name); returns ``name``."""
        self.namespace[name] = value
        return name

    def ref(self, ref: Any, kinds: Sequence[str] = REF_KINDS) -> str:
        """The generated name holding ``ref``'s value."""
        if not isinstance(ref, Ref) or ref.kind not in kinds:
            raise UnsafeSourceError(f"fused kernel {self.spec.name}: not a valid ref: {ref!r}")
        if ref.kind == "const":
            if not (isinstance(ref.index, int) and 0 <= ref.index < len(self.constants)):
                raise UnsafeSourceError(f"fused kernel {self.spec.name}: no constant {ref!r}")
            if ref.index not in self.const_names:
                c = f"c{len(self.const_names)}"
                self.const_names[ref.index] = self.bind(c, self.constants[ref.index])
            return self.const_names[ref.index]
        name = self.names.get((ref.kind, ref.index))
        if name is None:
            raise UnsafeSourceError(f"fused kernel {self.spec.name}: no value {ref!r}")
        return name

    def buffer(self, ref: Any) -> str:
        """The name of scratch ``ref``'s own buffer (whatever view the steps read for it now)."""
        self.ref(ref, ("tmp",))  # (a scratch ref this generator named)
        return self.buffers[(ref.kind, ref.index)]

    def view_of(self, ref: Ref, step: int) -> str:
        """The name of step ``step``'s view, which the steps after it read for scratch ``ref``
        until a step writes that scratch again (``written``)."""
        self.ref(ref, ("tmp",))  # (a scratch ref this generator named)
        name = f"w{int_literal(step)}"
        self.names[(ref.kind, ref.index)] = name
        return name

    def written(self, ref: Any) -> str:
        """The name a step writes ``ref`` through: for scratch, its buffer (never a view an
        earlier step left under it), which the steps after it then read."""
        name = self.ref(ref, WRITABLE)
        buffer = self.buffers.get((ref.kind, ref.index))
        if buffer is None:
            return name
        self.names[(ref.kind, ref.index)] = buffer
        return buffer

    def buffers_again(self) -> None:
        """Every scratch ref names its buffer again (for lines outside the steps)."""
        self.names.update(self.buffers)

    def operand(self, arg: Any) -> str:
        """A step input: one name, or a tuple display ``(a, b)`` for a tuple operand."""
        if type(arg) is not tuple:
            return self.ref(arg)
        names = [self.ref(r) for r in arg]
        return "(" + ", ".join(names) + ("," if len(names) == 1 else "") + ")"

    def step(self, index: int, line: str) -> None:
        """Step ``index`` is the call ``line``."""
        self.step_lines.append((index, line))

    def prelude(self, line: str) -> None:
        """A ``line`` of ``run`` before everything else (a dispatch to a faster runner)."""
        self.prelude_lines.append(line)

    def setup(self, line: str) -> None:
        """A scratch allocation ``line``, run before the steps."""
        self.setup_lines.append(line)

    def finish(self, free: Callable[[list[Storage]], None]) -> Kernel:
        """Compile ``run``: a step failure becomes a KernelError naming the step."""
        spec = self.spec
        body: list[tuple[int, str]] = [(0, line) for line in self.setup_lines]
        body += self.step_lines
        lines = [f"def run({', '.join(self.params)}):"]
        lines += [f"    {line}" for line in self.prelude_lines]
        if self.setup_lines:
            lines.append("    held = []")
            self.bind("free", free)
        lines.append("    try:")
        # line number (1-based) -> step index, read back from the traceback on failure
        step_at: dict[int, int] = {}
        for index, text in body or [(0, "pass")]:
            lines.append(f"        {text}")
            step_at[len(lines)] = index
        lines += ["    except KERNEL_FAILURES as e:", "        raise fail(e) from e"]
        if self.setup_lines:
            lines += ["    finally:", "        free(held)"]
        ops = [s.op for s in spec.steps]
        code: Any = None

        def fail(e: Exception) -> KernelError:
            # The failing line of run's own frame says which step it was: the fast path pays
            # nothing for this (no counter), only the error path walks the traceback.
            # (Kernels with equal source share one code object, but never one traceback.)
            tb = e.__traceback__
            while tb is not None and tb.tb_frame.f_code is not code:
                tb = tb.tb_next
            i = step_at.get(tb.tb_lineno, 0) if tb is not None else 0
            op = ops[i] if ops else "no step"
            return KernelError(
                f"fused kernel {spec.name}: step {i} ({op}) failed: {type(e).__name__}: {e}"
            )

        self.bind("fail", fail)
        run = make_function("\n".join(lines) + "\n", self.namespace, "run", ("e", "held"))
        code = run.__code__
        return run


def _scratch_maker(
    spec: FusedKernel, dt: np.dtype, how: tuple[Any, ...], allocator: Allocator
) -> tuple[Callable[..., np.ndarray], list[StepInput]]:
    """``(make, refs)``: ``make(held, *values of refs)`` allocates one scratch buffer (its
    storage appended to ``held``, which the caller frees) and returns its view."""
    kind = how[0]
    shape_of: Callable[..., tuple[int, ...]]
    refs: list[StepInput]
    if kind == "static":
        dims = tuple(how[1])
        refs, shape_of = [], lambda: dims
    elif kind == "like":
        refs, shape_of = [how[1]], lambda x: tuple(x.shape)
    elif kind == "input":
        refs, shape_of = [Ref("in", how[1])], lambda s: tuple(int(d) for d in s)
    else:
        step, k = spec.steps[how[1]], how[2]
        op, attrs = step.op, dict(step.attrs)

        def shape_of(*values: Any) -> tuple[int, ...]:
            shapes = [
                tuple(tuple(x.shape) for x in v) if isinstance(v, tuple) else tuple(v.shape)
                for v in values
            ]
            res = concrete_shapes(op, shapes, attrs)
            return tuple(res if not isinstance(res, list) else res[k])

        refs = list(step.inputs)
    alloc, itemsize = allocator.alloc, dt.itemsize

    def make(held: list[Storage], *values: Any) -> np.ndarray:
        shape = shape_of(*values)
        st = alloc(math.prod(shape) * itemsize)
        held.append(st)
        return tensor_view(st, 0, shape, dt)

    return make, refs
