"""Primitive functions to kernel-table entries: one op kernel, or a fused sequence of steps.

A primitive whose body is one op applied to its parameters in order becomes an ``OpKernel``.
Anything else becomes a ``FusedKernel``: one step per op call, in dependency order. Where each
step writes is decided here, with the symbolic types in hand:

- the root writes the output(s);
- an intermediate also writes the output, in place, when it has the output's type, its only
  consumer is an elementwise or broadcast op that itself writes the output, and no other
  argument of that consumer already lives there (so every step of an elementwise chain runs in
  the final buffer and allocates nothing);
- any other intermediate gets a scratch buffer, shaped like an input when its type proves it,
  statically when its shape is static, and otherwise by that step's shape function at run time.
"""

from __future__ import annotations

from typing import Any

import numpy as np

import ir
from ir import Call, Constant, Expr, Function, OpPattern, TensorType, Tuple, TupleGetItem, Var
from ir.graph import post_order_uses
from vm import Assembler, FusedKernel, FusedStep, Ref, Scratch

from ..errors import CompileError

_IN_PLACE_CONSUMERS = (OpPattern.ELEMWISE, OpPattern.BROADCAST)


def kernel_for(asm: Assembler, fn: Function, name: str) -> int:
    """Add the kernel-table entry of primitive ``fn``; return its index."""
    body = fn.body
    leaves = ir.tensor_leaves(_ty(body))
    if (
        isinstance(body, Call)
        and body.op is not None
        and len(body.args) == len(fn.params)
        and all(a is p for a, p in zip(body.args, fn.params, strict=True))
    ):
        return asm.kernel(body.op.name, dict(body.attrs), len(fn.params), len(leaves))
    return asm.fused(_FusedBuilder(asm, fn, name).build())


def _ty(e: Expr) -> ir.Type:
    if e.ty is None:
        raise CompileError("the lowering needs typed primitive functions (run infer_types)")
    return e.ty


class _FusedBuilder:
    def __init__(self, asm: Assembler, fn: Function, name: str) -> None:
        self.asm = asm
        self.fn = fn
        self.name = name
        self.steps: list[FusedStep] = []
        self.scratch: list[Scratch] = []
        self.refs: dict[Expr, Any] = {p: Ref("in", i) for i, p in enumerate(fn.params)}
        self.in_out: set[Expr] = set()

    def build(self) -> FusedKernel:
        body = self.fn.body
        out_leaves = ir.tensor_leaves(_ty(body))
        self.place_in_output(body)
        order = _post_order(body)
        for node in order:
            if isinstance(node, Call):
                self.step(node, body)
        label = "_".join(
            n.op.name.split(".")[-1] for n in order if isinstance(n, Call) and n.op is not None
        )
        return FusedKernel(
            f"fused_{label}"[:80] or self.name,
            len(self.fn.params),
            len(out_leaves),
            tuple(self.steps),
            tuple(self.scratch),
        )

    def place_in_output(self, root: Expr) -> None:
        """Mark the chain of intermediates that can live in the (single) output buffer."""
        out_ty = _ty(root)
        if not isinstance(out_ty, TensorType):
            return
        uses = _use_counts(root)
        node: Expr = root
        while isinstance(node, Call) and node.op is not None:
            if node.op.pattern not in _IN_PLACE_CONSUMERS:
                return
            nxt = None
            for a in node.args:
                if (
                    isinstance(a, Call)
                    and a.op is not None
                    and uses.get(a, 0) == 1
                    and _same_type(_ty(a), out_ty)
                ):
                    nxt = a
                    break
            if nxt is None:
                return
            self.in_out.add(nxt)
            node = nxt

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

    def step(self, call: Call, root: Expr) -> None:
        assert call.op is not None
        inputs = tuple(self.ref(a) for a in call.args)
        leaves = ir.tensor_leaves(_ty(call))
        if call is root:
            outs = tuple(Ref("out", j) for j in range(len(leaves)))
        elif call in self.in_out:
            outs = (Ref("out", 0),)
        else:
            outs = tuple(
                self.new_scratch(leaf, len(self.steps), k) for k, leaf in enumerate(leaves)
            )
        self.steps.append(FusedStep(call.op.name, dict(call.attrs), inputs, outs))
        self.refs[call] = outs if isinstance(_ty(call), ir.TupleType) else outs[0]

    def new_scratch(self, ty: TensorType, step: int, k: int) -> Ref:
        if ty.is_static:
            spec: tuple[Any, ...] = ("static", tuple(int(d) for d in ty.shape))
        else:
            like = next(
                (Ref("in", i) for i, p in enumerate(self.fn.params) if _same_shape(p.ty, ty)),
                None,
            )
            spec = ("like", like) if like is not None else ("shape_func", step, k)
        self.scratch.append(Scratch(ty.dtype, spec))
        return Ref("tmp", len(self.scratch) - 1)


def _same_shape(a: ir.Type | None, b: TensorType) -> bool:
    return (
        isinstance(a, TensorType)
        and a.rank == b.rank
        and all(ir.known_equal(x, y) for x, y in zip(a.shape, b.shape, strict=True))
    )


def _same_type(a: ir.Type, b: TensorType) -> bool:
    return _same_shape(a, b) and isinstance(a, TensorType) and a.dtype == b.dtype


def _children(node: Expr) -> list[tuple[Expr, None]]:
    if isinstance(node, Call):
        return [(a, None) for a in node.args]
    if isinstance(node, Tuple):
        return [(f, None) for f in node.fields]
    if isinstance(node, TupleGetItem):
        return [(node.tuple_value, None)]
    return []


def _post_order(root: Expr) -> list[Expr]:
    return post_order_uses(root, _children, None)[0]


def _use_counts(root: Expr) -> dict[Expr, int]:
    return {node: len(uses) for node, uses in post_order_uses(root, _children, None)[1].items()}
