"""Primitive functions to kernel-table entries: one op kernel, or a fused sequence of steps.

A primitive whose body is one op applied to its parameters in order becomes an ``OpKernel``.
Anything else becomes a ``FusedKernel``: one step per op call, in dependency order, each writing
where the step plan says (the primitive's ``fn.attrs.steps``, printed ``Steps="..."``, recorded
by ``manifest_alloc`` and verified by ``analysis/recorded_plan.py``): an output, or a scratch
slot. A scratch slot is the caller's when the invoke passes it (``manifest_alloc`` allocated it
in the IR, after the outputs); otherwise the VM allocates it for the call, shaped like an input
when its type proves it, statically when its shape is static, and else by the shape function of
the step that writes it first. A step whose op takes a workspace (``analysis/workspace.py``,
``nn.conv2d``) writes one more scratch slot, passed to its kernel last; a lone such op is a
one-step fused kernel, so that its workspace is the caller's planned memory too.

Attributes reach the VM through ``vm_attrs``: a list of ints or dims (``reshape``'s
``newshape=[n, m]``, ``split``'s ``indices_or_sections=[n // 2]``) has its dim entries replaced
by ``None``, since the VM never sees sympy. The kernels need no value there: they take the
result's extents from their outputs (reshape copies into ``out.shape``; split recovers its cut
points from the parts' sizes, ``vm/kernels/transform.py``). A shape function cannot run on
such attributes at run time, so a step that would need one is a compile error.

A kernel that needs the values (``strided_slice``'s ``begin=[k]``: the op's declaration names
such attributes, ``dim_values``) gets them from its caller: the entry (an ``OpKernel``, or a
``FusedStep``) lists the entries filled at run time, and the invoke passes, as one more input
per such op, a tuple of ints computed by the function's shape program (``vm/attr_values.py``).
``kernel_for`` returns those dims; the lowering of the invoke computes them.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import sympy

import ir
from ir import Call, Constant, Dest, Expr, Function, Tuple, TupleGetItem, Var
from ir.attrs import has_symbolic_entries
from vm import Assembler, FusedKernel, FusedStep, Ref, Scratch

from ..analysis.recorded_plan import recorded_plan
from ..analysis.step_plan import StepPlan, plan_steps, same_shape, single_op
from ..errors import CompileError

#: The dims of each input of attribute values an invoke passes after the primitive's own
#: inputs, in order (empty for the usual kernel, whose attributes are all known).
ValueDims = list[list[ir.Dim]]


def kernel_for(
    asm: Assembler, fn: Function, name: str, num_scratch: int = 0
) -> tuple[int, ValueDims]:
    """Add the kernel-table entry of primitive ``fn``; return its index and the dims of the
    attribute values its invoke passes last (see the module doc). ``num_scratch``: how many
    scratch buffers the invoke passes after the outputs (all of the step plan's, or 0)."""
    body = fn.body
    leaves = ir.tensor_leaves(_ty(body))
    if single_op(fn):
        assert isinstance(body, Call) and body.op is not None
        if num_scratch:
            raise CompileError(f"primitive function {name}: one op takes no scratch buffers")
        entries = runtime_entries(body)
        k = asm.kernel(
            body.op.name,
            vm_attrs(body, name),
            len(fn.params) + (1 if entries else 0),
            len(leaves),
            [(a, i) for a, i, _ in entries],
        )
        return k, [[d for _, _, d in entries]] if entries else []
    builder = _FusedBuilder(asm, fn, name, num_scratch)
    return asm.fused(builder.build()), builder.value_dims


def single_op_value_dims(fn: Function) -> ValueDims:
    """``kernel_for``'s value dims of ``fn`` when it is one op (an ``OpKernel``), else []: what
    the lowering computes ahead, with the chain's other shapes, without making the entry."""
    if not single_op(fn):
        return []
    assert isinstance(fn.body, Call)
    entries = runtime_entries(fn.body)
    return [[d for _, _, d in entries]] if entries else []


def runtime_entries(call: Call) -> list[tuple[str, int, ir.Dim]]:
    """``(attribute, index, dim)`` of each dim entry of ``call``'s attributes whose value its
    kernel needs (the op's ``dim_values``), in attribute order."""
    assert call.op is not None
    out = []
    for key in call.op.dim_values:
        value = call.attrs.get(key)
        if value is not None and has_symbolic_entries(value):
            out += [(key, i, d) for i, d in enumerate(value) if isinstance(d, sympy.Expr)]
    return out


def vm_attrs(call: Call, where: str, *, shape_func: bool = False) -> dict[str, Any]:
    """The attributes of op call ``call`` as the VM takes them: dim entries of a list of ints
    or dims become ``None`` (see the module doc). ``shape_func``: for a run-time shape function,
    which needs every value, so a dim entry is a CompileError naming ``where``."""
    assert call.op is not None
    out: dict[str, Any] = {}
    for key, value in call.attrs.items():
        if has_symbolic_entries(value):
            if shape_func:
                raise CompileError(
                    f"{where}: {call.op.name}'s attribute {key}={list(value)} has dims, but "
                    "its shape must be computed at run time by the shape function, which the "
                    "VM runs on ints only",
                    call.span,
                )
            value = tuple(None if isinstance(v, sympy.Expr) else v for v in value)
        out[key] = value
    return out


def _ty(e: Expr) -> ir.Type:
    if e.ty is None:
        raise CompileError("the lowering needs typed primitive functions (run infer_types)")
    return e.ty


class _FusedBuilder:
    def __init__(self, asm: Assembler, fn: Function, name: str, num_scratch: int) -> None:
        self.asm = asm
        self.fn = fn
        self.name = name
        self.num_scratch = num_scratch
        self.steps: list[FusedStep] = []
        self.refs: dict[Expr, Any] = {p: Ref("in", i) for i, p in enumerate(fn.params)}
        self.value_dims: ValueDims = []
        """The dims of each input of attribute values, after the parameters (``kernel_for``)."""

    def build(self) -> FusedKernel:
        # The plan manifest_alloc recorded (verified as it is read); planned here only for a
        # module that reached the memory stage without one (written by hand, say).
        fn = self.fn
        plan = recorded_plan(fn, self.name) if fn.attrs.steps is not None else plan_steps(fn)
        if self.num_scratch and self.num_scratch != len(plan.slots):
            raise CompileError(
                f"primitive function {self.name}: the invoke passes {self.num_scratch} "
                f"scratch buffers, but its step plan has {len(plan.slots)}"
            )
        for call in plan.calls:
            self.step(call, plan.dests[call])
        label = "_".join(c.op.name.split(".")[-1] for c in plan.calls if c.op is not None)
        return FusedKernel(
            f"fused_{label}"[:80] or self.name,
            len(self.fn.params) + len(self.value_dims),
            len(ir.tensor_leaves(_ty(self.fn.body))),
            tuple(self.steps),
            tuple(self.scratch(plan, j) for j in range(len(plan.slots))),
        )

    def scratch(self, plan: StepPlan, slot: int) -> Scratch:
        ty = plan.slots[slot]
        spec: tuple[Any, ...]
        if self.num_scratch:
            spec = ("arg", slot)
        elif ty.is_static:
            spec = ("static", tuple(int(d) for d in ty.shape))
        elif plan.is_workspace(slot):
            # A workspace the caller could not size: an empty one, so the kernel allocates
            # its buffers per call (as a kernel called without one does).
            spec = ("static", (0,))
        else:
            like = next(
                (Ref("in", i) for i, p in enumerate(self.fn.params) if same_shape(p.ty, ty)),
                None,
            )
            if like is not None:
                spec = ("like", like)
            else:
                step = plan.first_writer[slot][0]
                vm_attrs(plan.calls[step], f"primitive function {self.name}", shape_func=True)
                spec = ("shape_func", *plan.first_writer[slot])
        return Scratch(ty.dtype, spec)

    def ref(self, e: Expr) -> Any:
        if e in self.refs:
            return self.refs[e]
        ref: Any
        if isinstance(e, Constant):
            ref = Ref("const", self.asm.const(np.asarray(e.value)))
        elif isinstance(e, Tuple):
            ref = tuple(self.ref(f) for f in e.fields)
        elif isinstance(e, TupleGetItem):
            ref = self.ref(e.tuple_value)[e.index]
        elif isinstance(e, Var):
            raise CompileError(f"primitive function {self.name} uses a free variable")
        else:
            raise CompileError(f"primitive function {self.name}: cannot use a {type(e).__name__}")
        self.refs[e] = ref
        return ref

    def step(self, call: Call, dests: tuple[Dest, ...]) -> None:
        assert call.op is not None
        inputs = tuple(self.ref(a) for a in call.args)
        outs = tuple(Ref(d.kind, d.index) for d in dests)
        attrs = vm_attrs(call, f"primitive function {self.name}")
        entries = runtime_entries(call)
        if entries:  # one more input of the kernel, after the parameters and earlier values
            inputs += (Ref("in", len(self.fn.params) + len(self.value_dims)),)
            self.value_dims.append([d for _, _, d in entries])
        filled = tuple((a, i) for a, i, _ in entries)
        self.steps.append(FusedStep(call.op.name, attrs, inputs, outs, filled))
        self.refs[call] = outs if isinstance(_ty(call), ir.TupleType) else outs[0]
