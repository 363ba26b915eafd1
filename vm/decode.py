"""Decoding: each instruction becomes one specialised closure ``step(regs) -> next_pc``.

This happens once, when a ``VirtualMachine`` is built. Operands are read here, not at run time:
an immediate shape is baked into the closure, a kernel is bound with its attributes, a shape
program is compiled. The interpreter loop then only calls closures. ``call``, ``ret`` and
``tail_call`` return the negative codes ``CALL``/``RET``/``TAIL`` and leave their payload in
``ctx.state`` for the loop, which owns the frame stack; a backward jump returns ``BACK`` with its
target there, so that the loop counts every step of a loop (forward jumps return their target).

Each opcode's decoder is named by its entry in ``opcodes.py``; ``backend.closure_steps`` decodes
a function with them.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from types import CodeType, FunctionType
from typing import Any

import numpy as np

from shape_funcs import concrete_shapes
from shape_funcs.context import COMPARE
from shape_funcs.errors import ShapeError

from .errors import RunTimeShapeError
from .isa import Kind, Reg
from .memory.allocator import Allocator
from .memory.capacity import append as grow
from .memory.storage import Storage, view_error
from .shape_program import ShapeProgram

Step = Callable[[list[Any]], int]
CALL = -1
RET = -2
TAIL = -3
#: A backward jump (the target is in ``ctx.state``): the loop counts it as a step.
BACK = -4

#: ``check``'s comparisons, by name (shape_funcs' table).
CMP = COMPARE


@dataclass
class DecodeContext:
    """What the decoders bind into closures: one per decoded instance of a VM (a call owns its
    instance, so ``live`` and ``state`` are that call's)."""

    allocator: Allocator
    """Where storages come from."""
    constants: Sequence[np.ndarray]
    """The constant pool."""
    kernels: Sequence[Callable[..., Any]]
    """Bound kernel callables, by kernel-table index."""
    shape_programs: Sequence[ShapeProgram]
    """The shape programs (each ``shape_program`` instruction compiles its own step)."""
    shape_funcs: Sequence[tuple[str, dict[str, Any]]]
    """(op, attrs) of each shape-function entry."""
    live: dict[int, Storage] = field(default_factory=dict)
    """Storages allocated by the current run and not freed yet, by ``id(storage.raw)``."""
    state: list[Any] = field(default_factory=lambda: [None])
    """Payload of the last ``call``/``ret`` for the loop."""
    donated: set[int] = field(default_factory=set)
    """``id`` of each argument array the current call's caller donated (``run(donate=)``)."""
    names: dict[Kind, Any] = field(default_factory=dict)
    """Display names of the kernel-table entries and functions (``Kind.KERNEL``/``Kind.FUNC``
    -> list), for listings in messages and reports (``isa.format_instruction``)."""


def operand_getter(v: Any) -> Callable[[list[Any]], Any]:
    """Reads a VAL/SHAPE operand: from a register, or the immediate itself."""
    if isinstance(v, Reg):
        i = v.index
        return lambda r: r[i]
    return lambda r: v


def move(ops: tuple[Any, ...], nxt: int, ctx: DecodeContext) -> Step:
    """``dst = src``."""
    d, s = ops[0].index, ops[1].index

    def step(r: list[Any]) -> int:
        r[d] = r[s]
        return nxt

    return step


def load_step(value: Any, d: int, nxt: int) -> Step:
    """The step writing ``value`` into register ``d``."""

    def step(r: list[Any]) -> int:
        r[d] = value
        return nxt

    return step


def load_const(ops: tuple[Any, ...], nxt: int, ctx: DecodeContext) -> Step:
    """``dst = constants[c]``."""
    return load_step(ctx.constants[ops[1]], ops[0].index, nxt)


def load_int(ops: tuple[Any, ...], nxt: int, ctx: DecodeContext) -> Step:
    """``dst = an immediate int``."""
    return load_step(ops[1], ops[0].index, nxt)


def call(ops: tuple[Any, ...], nxt: int, ctx: DecodeContext) -> Step:
    """A new frame: callee, arguments, destination and return pc go to the loop (``CALL``)."""
    d, callee, args = ops[0].index, ops[1], tuple(a.index for a in ops[2])
    state = ctx.state

    def step(r: list[Any]) -> int:
        state[0] = (callee, [r[a] for a in args], d, nxt)
        return CALL

    return step


def tail_call(ops: tuple[Any, ...], nxt: int, ctx: DecodeContext) -> Step:
    """The callee replaces this frame: callee and arguments go to the loop (``TAIL``)."""
    callee, args = ops[0], tuple(a.index for a in ops[1])
    state = ctx.state

    def step(r: list[Any]) -> int:
        state[0] = (callee, [r[a] for a in args])
        return TAIL

    return step


def invoke(ops: tuple[Any, ...], nxt: int, ctx: DecodeContext) -> Step:
    """``kernel(*inputs, *outputs)``, specialised by arity."""
    fn = ctx.kernels[ops[0]]
    idx = tuple(a.index for a in (*ops[1], *ops[2]))
    # Specialised by arity: no argument list is built for the common kernels.
    if len(idx) == 2:
        a, b = idx

        def step2(r: list[Any]) -> int:
            fn(r[a], r[b])
            return nxt

        return step2
    if len(idx) == 3:
        a, b, c = idx

        def step3(r: list[Any]) -> int:
            fn(r[a], r[b], r[c])
            return nxt

        return step3

    def step(r: list[Any]) -> int:
        fn(*[r[i] for i in idx])
        return nxt

    return step


def alloc_storage(ops: tuple[Any, ...], nxt: int, ctx: DecodeContext) -> Step:
    """A storage from the allocator, recorded in ``ctx.live``."""
    d, size, align = ops[0].index, ops[1], ops[2]
    alloc, live = ctx.allocator.alloc, ctx.live
    if isinstance(size, Reg):
        s = size.index
        index = operator.index

        def dyn(r: list[Any]) -> int:
            st = alloc(index(r[s]), align)
            live[id(st.raw)] = st
            r[d] = st
            return nxt

        return dyn

    def step(r: list[Any]) -> int:
        st = alloc(size, align)
        live[id(st.raw)] = st
        r[d] = st
        return nxt

    return step


def alloc_tensor(ops: tuple[Any, ...], nxt: int, ctx: DecodeContext) -> Step:
    """A bounds-checked typed view of a storage."""
    d, s, offset, shape, dtype = ops[0].index, ops[1].index, ops[2], ops[3], np.dtype(ops[4])
    ndarray = np.ndarray
    if not isinstance(offset, Reg) and not isinstance(shape, Reg):
        # The common case, all static: the bounds check is one comparison.
        end = offset + math.prod(shape) * dtype.itemsize

        def static(r: list[Any]) -> int:
            st = r[s]
            if end > st.nbytes:
                raise view_error(st.nbytes, offset, shape, dtype)
            r[d] = ndarray(shape, dtype, st.buf, offset)  # positional: half the call's cost
            return nxt

        return static
    itemsize, prod = dtype.itemsize, math.prod
    if not isinstance(offset, Reg):
        # A static offset and a shape from a register (a shape program's tuple of ints, or a
        # shape function's): the common symbolic case, kept to a bounds check and one call.
        sh = shape.index

        def dyn_shape(r: list[Any]) -> int:
            st, shp = r[s], r[sh]
            if offset + prod(shp) * itemsize > st.nbytes:
                raise view_error(st.nbytes, offset, shp, dtype)
            try:
                r[d] = ndarray(shp, dtype, st.buf, offset)
            except ValueError:  # a negative dim (numpy refuses it): say which view
                raise view_error(st.nbytes, offset, shp, dtype) from None
            return nxt

        return dyn_shape
    get_off, get_shape = operand_getter(offset), operand_getter(shape)

    def dyn(r: list[Any]) -> int:
        # Offsets and shapes in registers come from shape programs (ints); numpy refuses a
        # negative dim itself, which becomes the same named error.
        st, off, shp = r[s], get_off(r), get_shape(r)
        if off < 0 or off + prod(shp) * itemsize > st.nbytes:
            raise view_error(st.nbytes, off, shp, dtype)
        try:
            r[d] = ndarray(shp, dtype, st.buf, off)
        except ValueError:
            raise view_error(st.nbytes, off, shp, dtype) from None
        return nxt

    return dyn


def shape_of(ops: tuple[Any, ...], nxt: int, ctx: DecodeContext) -> Step:
    """``dst = src.shape``."""
    d, s = ops[0].index, ops[1].index

    def step(r: list[Any]) -> int:
        r[d] = r[s].shape
        return nxt

    return step


def dim(ops: tuple[Any, ...], nxt: int, ctx: DecodeContext) -> Step:
    """``dst = src.shape[axis]``."""
    d, s, axis = ops[0].index, ops[1].index, ops[2]

    def step(r: list[Any]) -> int:
        r[d] = r[s].shape[axis]
        return nxt

    return step


def append(ops: tuple[Any, ...], nxt: int, ctx: DecodeContext) -> Step:
    """``dst = concatenate((x, y), axis)``, grown in place where ``x``'s storage has room
    (``memory/capacity.py``); ``x`` counts as donated when the caller donated that very
    array (``ctx.donated``)."""
    d, x, y, axis, capacity = ops[0].index, ops[1].index, ops[2].index, ops[3], ops[4]
    allocator, donated = ctx.allocator, ctx.donated

    def step(r: list[Any]) -> int:
        a = r[x]
        r[d] = grow(a, r[y], axis, capacity, allocator, id(a) in donated)
        return nxt

    return step


def reshape(ops: tuple[Any, ...], nxt: int, ctx: DecodeContext) -> Step:
    """``dst = src.reshape(shape)`` (a view)."""
    d, s, get_shape = ops[0].index, ops[1].index, operand_getter(ops[2])

    def step(r: list[Any]) -> int:
        r[d] = r[s].reshape(get_shape(r))
        return nxt

    return step


def make_tuple(ops: tuple[Any, ...], nxt: int, ctx: DecodeContext) -> Step:
    """``dst = (items...)``."""
    d, items = ops[0].index, tuple(a.index for a in ops[1])

    def step(r: list[Any]) -> int:
        r[d] = tuple([r[i] for i in items])
        return nxt

    return step


def get_item(ops: tuple[Any, ...], nxt: int, ctx: DecodeContext) -> Step:
    """``dst = src[index]``."""
    d, s, i = ops[0].index, ops[1].index, ops[2]

    def step(r: list[Any]) -> int:
        r[d] = r[s][i]
        return nxt

    return step


def jump(ops: tuple[Any, ...], nxt: int, ctx: DecodeContext) -> Step:
    """The target; a backward jump returns ``BACK`` so that the loop counts it."""
    target, state = ops[0], ctx.state
    if target >= nxt:
        return lambda r: target

    def back(r: list[Any]) -> int:
        state[0] = target
        return BACK

    return back


def jump_if_not(ops: tuple[Any, ...], nxt: int, ctx: DecodeContext) -> Step:
    """The next pc or the target, by the condition (``BACK`` backwards)."""
    c, target, state = ops[0].index, ops[1], ctx.state
    if target >= nxt:
        return lambda r: nxt if r[c] else target

    def back(r: list[Any]) -> int:
        if r[c]:
            return nxt
        state[0] = target
        return BACK

    return back


def ret(ops: tuple[Any, ...], nxt: int, ctx: DecodeContext) -> Step:
    """The result goes to the loop (``RET``)."""
    s, state = ops[0].index, ctx.state

    def step(r: list[Any]) -> int:
        state[0] = r[s]
        return RET

    return step


def kill(ops: tuple[Any, ...], nxt: int, ctx: DecodeContext) -> Step:
    """Drop the registers; a storage goes back to the allocator."""
    regs, free, live = tuple(a.index for a in ops[0]), ctx.allocator.free, ctx.live

    def step(r: list[Any]) -> int:
        for i in regs:
            v = r[i]
            r[i] = None
            # Only storages return memory; dropping a tensor view just drops a reference.
            if type(v) is Storage and live.pop(id(v.raw), None) is not None:
                free(v)
        return nxt

    return step


def shape_program(ops: tuple[Any, ...], nxt: int, ctx: DecodeContext) -> Step:
    """The shape program's generated step."""
    # One generated function per instruction: reads its input registers, computes, writes its
    # output registers (vm/shape_program.py ``compile_step``).
    ins, outs = tuple(a.index for a in ops[1]), tuple(a.index for a in ops[2])
    program: ShapeProgram = ctx.shape_programs[ops[0]]  # typed: ``ops`` are untyped operands
    return program.compile_step(ins, outs, nxt)


def _as_shapes(res: Any) -> Any:
    if isinstance(res, list):
        return tuple(tuple(int(x) for x in s) for s in res)
    return tuple(int(x) for x in res)


def shape_func(ops: tuple[Any, ...], nxt: int, ctx: DecodeContext) -> Step:
    """``dst = concrete_shapes(op, inputs, attrs)``; a ShapeError becomes RunTimeShapeError."""
    d, (op, attrs), ins = ops[0].index, ctx.shape_funcs[ops[1]], tuple(a.index for a in ops[2])

    def step(r: list[Any]) -> int:
        try:
            r[d] = _as_shapes(concrete_shapes(op, [r[i] for i in ins], attrs))
        except RunTimeShapeError:
            raise
        except ShapeError as e:
            raise RunTimeShapeError(str(e)) from e
        return nxt

    return step


def check(ops: tuple[Any, ...], nxt: int, ctx: DecodeContext) -> Step:
    """Require ``a cmp b``, else RunTimeShapeError with the message."""
    get_a, cmp, get_b, message = operand_getter(ops[0]), ops[1], operand_getter(ops[2]), ops[3]
    f = CMP[cmp]

    templated = "{a}" in message or "{b}" in message

    def step(r: list[Any]) -> int:
        a, b = get_a(r), get_b(r)
        if not f(a, b):
            if templated:  # the compiler worded it: fill in the values (plain text, no format)
                raise RunTimeShapeError(message.replace("{a}", str(a)).replace("{b}", str(b)))
            raise RunTimeShapeError(f"run-time check failed: {message} (got {a} {cmp} {b} false)")
        return nxt

    return step


def check_values(ops: tuple[Any, ...], nxt: int, ctx: DecodeContext) -> Step:
    """``check`` whose message also shows the values of registers (``{0}``, ``{1}``...)."""
    get_a, cmp, get_b, message = operand_getter(ops[0]), ops[1], operand_getter(ops[2]), ops[3]
    f = CMP[cmp]
    shown = [r.index for r in ops[4]]

    def step(r: list[Any]) -> int:
        a, b = get_a(r), get_b(r)
        if not f(a, b):
            # Plain replacement, no str.format: the message is data. Values are ints, so no
            # replacement can create a placeholder.
            text = message.replace("{a}", str(a)).replace("{b}", str(b))
            for i, k in enumerate(shown):
                text = text.replace(f"{{{i}}}", str(r[k]))
            raise RunTimeShapeError(text)
        return nxt

    return step


def check_dim(ops: tuple[Any, ...], nxt: int, ctx: DecodeContext) -> Step:
    """Require ``src.shape[axis] == sym``, else a RunTimeShapeError naming who bound it."""
    s, axis, sym, what, name, bound_by = ops[0].index, ops[1], ops[2].index, *ops[3:]

    def step(r: list[Any]) -> int:
        actual, bound = r[s].shape[axis], r[sym]
        if actual != bound:
            raise RunTimeShapeError(
                f"{what} = {actual} but {name} = {bound} was bound by {bound_by}"
            )
        return nxt

    return step


#: Makes the closure of one instruction: ``decoder(operands, next_pc, ctx)``.
Decoder = Callable[[tuple[Any, ...], int, DecodeContext], Step]


def _nested_codes(code: CodeType) -> Iterator[CodeType]:
    for const in code.co_consts:
        if isinstance(const, CodeType):
            yield const
            yield from _nested_codes(const)


#: The code of every closure this module makes: a step whose ``__code__`` is one of them does
#: exactly what its instruction says (``straight.py`` writes such an instruction out inline).
STOCK_CODES = frozenset(
    code
    for value in list(globals().values())
    if isinstance(value, FunctionType) and value.__module__ == __name__
    for code in _nested_codes(value.__code__)
)


def is_stock(step: Step) -> bool:
    """True if ``step`` is a closure this module made (its code is in ``STOCK_CODES``), not a
    backend's own."""
    return getattr(step, "__code__", None) in STOCK_CODES
