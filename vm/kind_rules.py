"""What each opcode reads and writes, in register kinds: the rules of ``register_kinds.py``.

One rule per opcode (named by its entry in ``opcodes.py``): it checks each register operand the
instruction reads against the kinds its opcode needs (through the analysis' ``read``/``need``,
which name the operand in the error) and writes the kind of each register it sets into ``regs``.
Control flow (jump targets, what ends a block) is the table's, not the rules'.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from .executable import OpKernel, TensorSpec
from .fused import FusedKernel
from .isa import Reg
from .kind_lattice import (
    INT,
    INTS,
    MAX_TUPLE_DEPTH,
    MAX_TUPLE_NODES,
    SHAPE,
    SHAPE_LIKE,
    SHAPES,
    TENSOR,
    RegKind,
    matches,
    spec_kind,
    tuple_of,
)

if TYPE_CHECKING:
    from .register_kinds import KindChecker

Regs = list[RegKind | None]
#: ``rule(checker, pc, operands, regs)``: check the reads, apply the writes.
KindRule = Callable[["KindChecker", int, tuple[Any, ...], Regs], None]


def move(c: KindChecker, pc: int, ops: tuple[Any, ...], regs: Regs) -> None:
    regs[ops[0].index] = c.read(pc, regs, ops[1], "source")


def load_const(c: KindChecker, pc: int, ops: tuple[Any, ...], regs: Regs) -> None:
    regs[ops[0].index] = TENSOR


def load_int(c: KindChecker, pc: int, ops: tuple[Any, ...], regs: Regs) -> None:
    regs[ops[0].index] = INT


def _arguments(c: KindChecker, pc: int, func: int, args: Sequence[Reg], regs: Regs) -> None:
    """Each argument's kind against the callee's parameter (an int passes as a 0-d tensor)."""
    callee = c.exe.functions[func]
    for i, (a, p) in enumerate(zip(args, callee.params, strict=True)):
        k = c.read(pc, regs, a, f"argument {i}")
        want = spec_kind(p.type)
        c.budget.charge(k.nodes + want.nodes)
        scalar = k is INT and isinstance(p.type, TensorSpec) and p.type.shape == ()
        if not scalar and not matches(k, want):
            raise c.fail(
                pc,
                f"argument {i} {a!r} holds {k}, but parameter {p.name!r} of "
                f"{callee.name!r} is {p.type}",
            )


def call(c: KindChecker, pc: int, ops: tuple[Any, ...], regs: Regs) -> None:
    _arguments(c, pc, ops[1], ops[2], regs)
    # None: the callee's result is not known yet (a later round revisits), or it never returns
    # (then the destination stays unset).
    regs[ops[0].index] = c.results[ops[1]]


def tail_call(c: KindChecker, pc: int, ops: tuple[Any, ...], regs: Regs) -> None:
    _arguments(c, pc, ops[0], ops[1], regs)
    c.record_result(c.results[ops[0]])


def invoke(c: KindChecker, pc: int, ops: tuple[Any, ...], regs: Regs) -> None:
    entry = c.exe.kernels[ops[0]]
    shaped = _shape_inputs(entry)
    for i, a in enumerate(ops[1]):
        if i in shaped:  # a fused kernel's scratch shape, computed by the caller
            c.need(pc, regs, a, f"input {i}", SHAPE_LIKE)
            continue
        if i in _value_inputs(entry, len(ops[1])):
            # attribute values computed by the caller (attr_values.py): a shape program's tuple
            c.need(pc, regs, a, f"input {i} (attribute values)", ("shape",))
            continue
        k = c.need(pc, regs, a, f"input {i}", ("tensor", "tuple"))
        if k.name == "tuple" and not _all_tensors(k):
            raise c.fail(pc, f"input {i} {a!r} holds {k}, expected tensors")
    for i, a in enumerate(ops[2]):
        c.need(pc, regs, a, f"output {i}", ("tensor",))


def alloc_storage(c: KindChecker, pc: int, ops: tuple[Any, ...], regs: Regs) -> None:
    c.val(pc, regs, ops[1], "size")
    size = ops[1] if not isinstance(ops[1], Reg) else None
    if size is not None and size < 0:
        raise c.fail(pc, f"negative storage size {size}")
    regs[ops[0].index] = RegKind("storage", size=size)


def alloc_tensor(c: KindChecker, pc: int, ops: tuple[Any, ...], regs: Regs) -> None:
    st = c.need(pc, regs, ops[1], "storage", ("storage",))
    offset, shape = ops[2], ops[3]
    c.val(pc, regs, offset, "offset")
    if isinstance(shape, Reg):
        c.need(pc, regs, shape, "shape", SHAPE_LIKE)
    if not isinstance(offset, Reg) and offset < 0:
        raise c.fail(pc, f"negative offset {offset}")
    if st.size is not None and not isinstance(offset, Reg) and not isinstance(shape, Reg):
        need = offset + _prod(shape) * np.dtype(ops[4]).itemsize
        if need > st.size:
            raise c.fail(
                pc,
                f"a view of shape {shape} {ops[4]} at offset {offset} needs "
                f"{need} bytes, but the storage holds {st.size}",
            )
    regs[ops[0].index] = TENSOR


def shape_of(c: KindChecker, pc: int, ops: tuple[Any, ...], regs: Regs) -> None:
    c.need(pc, regs, ops[1], "source", ("tensor",))
    regs[ops[0].index] = SHAPE


def append(c: KindChecker, pc: int, ops: tuple[Any, ...], regs: Regs) -> None:
    c.need(pc, regs, ops[1], "first operand", ("tensor",))
    c.need(pc, regs, ops[2], "second operand", ("tensor",))
    regs[ops[0].index] = TENSOR


def dim(c: KindChecker, pc: int, ops: tuple[Any, ...], regs: Regs) -> None:
    c.need(pc, regs, ops[1], "source", ("tensor",))
    regs[ops[0].index] = INT


def reshape(c: KindChecker, pc: int, ops: tuple[Any, ...], regs: Regs) -> None:
    c.need(pc, regs, ops[1], "source", ("tensor",))
    if isinstance(ops[2], Reg):
        c.need(pc, regs, ops[2], "shape", SHAPE_LIKE)
    regs[ops[0].index] = TENSOR


def make_tuple(c: KindChecker, pc: int, ops: tuple[Any, ...], regs: Regs) -> None:
    fields = [c.read(pc, regs, a, f"field {i}") for i, a in enumerate(ops[1])]
    k = tuple_of(fields)
    # Bigger tuples would make hand-over and the sanitizer walk them per value (and a loop could
    # grow them per iteration; see register_kinds.py).
    if k.depth > MAX_TUPLE_DEPTH:
        raise c.fail(pc, f"tuples nest deeper than {MAX_TUPLE_DEPTH} levels")
    if k.nodes > MAX_TUPLE_NODES:
        raise c.fail(pc, f"a tuple could hold {k.nodes} values (the limit is {MAX_TUPLE_NODES})")
    regs[ops[0].index] = k


def get_item(c: KindChecker, pc: int, ops: tuple[Any, ...], regs: Regs) -> None:
    k = c.need(pc, regs, ops[1], "source", ("tuple", "shape", "shapes"))
    regs[ops[0].index] = c.item_kind(pc, k, ops[2])


def jump(c: KindChecker, pc: int, ops: tuple[Any, ...], regs: Regs) -> None:
    """Reads and writes nothing (its target is the table's ``target`` operand)."""


def jump_if_not(c: KindChecker, pc: int, ops: tuple[Any, ...], regs: Regs) -> None:
    c.need(pc, regs, ops[0], "condition", ("int", "shapes", "tensor"))


def ret(c: KindChecker, pc: int, ops: tuple[Any, ...], regs: Regs) -> None:
    c.record_result(c.read(pc, regs, ops[0], "result"))


def kill(c: KindChecker, pc: int, ops: tuple[Any, ...], regs: Regs) -> None:
    killed = RegKind("killed", size=pc)  # the kill's pc, to name it in a later read's message
    for a in ops[0]:
        regs[a.index] = killed


def shape_program(c: KindChecker, pc: int, ops: tuple[Any, ...], regs: Regs) -> None:
    prog = c.exe.shape_programs[ops[0]]
    for i, a in enumerate(ops[1]):
        c.need(pc, regs, a, f"input {i}", INTS)
    for d, out in zip(ops[2], prog.outputs, strict=True):
        regs[d.index] = SHAPE if isinstance(out, tuple) else INT


def shape_func(c: KindChecker, pc: int, ops: tuple[Any, ...], regs: Regs) -> None:
    for i, a in enumerate(ops[2]):
        c.need(pc, regs, a, f"input {i}", ("shape", "shapes", "tensor", "tuple"))
    regs[ops[0].index] = SHAPES


def check(c: KindChecker, pc: int, ops: tuple[Any, ...], regs: Regs) -> None:
    c.val(pc, regs, ops[0], "left operand")
    c.val(pc, regs, ops[2], "right operand")


def check_values(c: KindChecker, pc: int, ops: tuple[Any, ...], regs: Regs) -> None:
    check(c, pc, ops, regs)
    for i, a in enumerate(ops[4]):
        c.need(pc, regs, a, f"value {i}", INTS)


def check_dim(c: KindChecker, pc: int, ops: tuple[Any, ...], regs: Regs) -> None:
    c.need(pc, regs, ops[0], "source", ("tensor",))
    c.need(pc, regs, ops[2], "symbol", INTS)


def _shape_inputs(entry: object) -> frozenset[int]:
    """The inputs of a kernel entry that are shapes: a fused kernel's ``("input", i)`` scratch."""
    if not isinstance(entry, FusedKernel):
        return frozenset()
    return frozenset(
        s.shape[1]
        for s in entry.scratch
        if isinstance(s.shape, tuple) and s.shape[:1] == ("input",)
    )


def _value_inputs(entry: object, num_inputs: int) -> frozenset[int]:
    """The inputs of a kernel entry holding attribute values (``attr_values.py``)."""
    if isinstance(entry, OpKernel):
        return frozenset((num_inputs - 1,)) if entry.runtime_attrs else frozenset()
    return entry.value_inputs if isinstance(entry, FusedKernel) else frozenset()


def _all_tensors(k: RegKind) -> bool:
    return k.fields is not None and all(f.name == "tensor" for f in k.fields)


def _prod(shape: Sequence[int]) -> int:
    p = 1
    for d in shape:
        p *= d
    return p
