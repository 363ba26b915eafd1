"""Which storages of a straight-line function become slots of its arena, and their lines.

``memory/arena.py`` says why and how the arena works; this module decides, from the bytecode,
which ``alloc_storage`` instructions it may serve, and writes their lines for ``straight.py``.
A storage qualifies when nothing but its own views and one ``kill`` can see it, so that its
life is the interval of pcs from its ``alloc_storage`` to that ``kill``:

- its ``alloc_storage`` is the closure ``decode.py`` made (a backend's own keeps its step), with
  an alignment the arena's 64 bytes satisfy;
- its register appears in no other instruction than that one, ``alloc_tensor`` (as the storage
  viewed) and exactly one ``kill``, which is ``decode.py``'s (it frees only a ``Storage``, so a
  slot is just dropped), comes after the allocation and sits in the same branch of every
  ``if`` (``arm``): in code that only goes forward, whatever runs between the two is then
  inside the interval, and two storages alive at once have overlapping intervals.

A register written twice, returned, moved, passed to a kernel or a call, or killed on two paths
is left to the allocator.

A slot viewed once, by the ``alloc_tensor`` right after its ``alloc_storage`` (what the compiler
emits for every planned tensor of its own storage), is one line: ``r[d] = x7(size, offset,
shape)`` takes the slot and makes (or finds kept) the view in one call, the storage register is
never written, and its ``kill`` writes nothing. A decode step has ~80 such slots; the pair of
calls was a fifth of the VM's own time in it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .codegen import int_literal
from .decode import DecodeContext, Step, is_stock
from .isa import Instruction, Op, Reg
from .memory.arena import Arena, Slot
from .memory.storage import MIN_ALIGNMENT, Storage, view_error

#: Where an instruction sits in the nesting of ``if``/``else``: (branch pc, 0 then / 1 else)
#: from the outermost in.
Arm = tuple[tuple[int, int], ...]


def _registers(operand: Any) -> list[int]:
    if isinstance(operand, Reg):
        return [operand.index]
    if isinstance(operand, tuple):
        return [a.index for a in operand if isinstance(a, Reg)]
    return []


def arena_lifetimes(
    code: Sequence[Instruction], steps: Sequence[Step], arms: dict[int, Arm]
) -> dict[int, tuple[int, int]]:
    """The ``alloc_storage`` pcs whose storage may be a slot (see the module doc), each with
    its interval: the pc of the allocation and the pc of its ``kill``."""
    uses: dict[int, list[tuple[int, int]]] = {}  # register -> (pc, operand position)
    for pc, ins in enumerate(code):
        for position, operand in enumerate(ins.operands):
            for reg in _registers(operand):
                uses.setdefault(reg, []).append((pc, position))
    found: dict[int, tuple[int, int]] = {}
    for pc, ins in enumerate(code):
        if ins.op is not Op.ALLOC_STORAGE or not is_stock(steps[pc]):
            continue
        if not isinstance(ins.operands[2], int) or ins.operands[2] > MIN_ALIGNMENT:
            continue
        kills = []
        for use_pc, position in uses[ins.operands[0].index]:
            op = code[use_pc].op
            if use_pc == pc or (op is Op.ALLOC_TENSOR and position == 1):
                continue
            if op is Op.KILL and is_stock(steps[use_pc]):
                kills.append(use_pc)
            else:
                kills = []  # seen elsewhere: not a slot
                break
        if len(kills) == 1 and kills[0] > pc and arms.get(kills[0]) == arms.get(pc):
            found[pc] = (pc, kills[0])
    return found


def single_views(
    code: Sequence[Instruction],
    steps: Sequence[Step],
    slots: Sequence[int],
    arms: dict[int, Arm],
) -> dict[int, int]:
    """Of the slots' ``alloc_storage`` pcs, those whose storage is viewed by exactly one
    ``alloc_tensor`` (``decode.py``'s), the next instruction, in the same branch (``arms``: a
    branch may end between them): that pc -> the allocation's."""
    viewers: dict[int, list[int]] = {}  # storage register -> pcs of its alloc_tensors
    for pc, ins in enumerate(code):
        if ins.op is Op.ALLOC_TENSOR and isinstance(ins.operands[1], Reg):
            viewers.setdefault(ins.operands[1].index, []).append(pc)
    found: dict[int, int] = {}
    for pc in slots:
        pcs = viewers.get(code[pc].operands[0].index, [])
        if pcs == [pc + 1] and is_stock(steps[pc + 1]) and arms.get(pc + 1) == arms.get(pc):
            found[pc + 1] = pc
    return found


def make_arena(ctx: DecodeContext, lifetimes: dict[int, tuple[int, int]]) -> Arena:
    """The arena of one decoded function, its slots in the order of their pcs."""
    return Arena(ctx.allocator, ctx.live, [lifetimes[pc] for pc in sorted(lifetimes)])


def slot_lines(slot: int, ins: Instruction, arena: Arena, ns: dict[str, Any]) -> tuple[str, ...]:
    """The line of an ``alloc_storage`` served by slot ``slot`` of ``arena``: ``r[d] = a3(n)``,
    the slot's taker (``Arena.taker``) a name of the namespace."""
    dst, size, alignment = ins.operands[0], ins.operands[1], ins.operands[2]
    name = f"a{int_literal(slot)}"
    ns[name] = arena.taker(slot, alignment)
    n = f"r[{int_literal(size.index)}]" if isinstance(size, Reg) else int_literal(size)
    return (f"r[{int_literal(dst.index)}] = {name}({n})",)


def kill_lines(
    pc: int,
    ins: Instruction,
    step: Step,
    slot_registers: frozenset[int],
    unwritten: frozenset[int],
    ns: dict[str, Any],
) -> tuple[str, ...]:
    """A ``kill`` in a function with an arena: a slot's register is dropped inline (the
    arena's buffer goes back whole at the return), one never written (``unwritten``: a slot
    taken with its view) not at all; the closure runs only for other registers (storages of
    the allocator's, which it frees)."""
    regs = [a.index for a in ins.operands[0]]
    lines = [
        f"r[{int_literal(i)}] = None" for i in regs if i in slot_registers and i not in unwritten
    ]
    if any(i not in slot_registers for i in regs):
        ns[f"s{pc}"] = step
        lines.append(f"s{pc}(r)")
    return tuple(lines)


def view_lines(pc: int, ins: Instruction, ns: dict[str, Any]) -> tuple[str, ...]:
    """An ``alloc_tensor`` of a slot: ``r[d] = w7(r[s], offset, shape)``, the view maker
    (``slot_view``) a name of the namespace."""
    dst, storage, offset, shape, dtype = ins.operands
    name = f"w{int_literal(pc)}"
    ns[name] = slot_view(np.dtype(dtype))
    return (
        f"r[{int_literal(dst.index)}] = {name}({_reg(storage)}, {_value(offset)}, {_value(shape)})",
    )


def taken_view_lines(
    slot: int, storage: Instruction, view: Instruction, arena: Arena, ns: dict[str, Any]
) -> tuple[str, ...]:
    """The one line of a slot's ``alloc_storage`` and its only view, the next instruction:
    ``r[d] = x3(size, offset, shape)`` (``taken_view`` a name of the namespace)."""
    size, alignment = storage.operands[1], storage.operands[2]
    dst, _, offset, shape, dtype = view.operands
    name = f"x{int_literal(slot)}"
    ns[name] = taken_view(arena, slot, alignment, np.dtype(dtype))
    args = f"{_value(size)}, {_value(offset)}, {_value(shape)}"
    return (f"r[{int_literal(dst.index)}] = {name}({args})",)


def taken_view(
    arena: Arena, index: int, alignment: int, dtype: np.dtype
) -> Callable[[Any, int, tuple[int, ...]], np.ndarray]:
    """``alloc_storage`` of slot ``index`` (``Arena.taker``) and ``alloc_tensor`` of it
    (``slot_view``) as one call; the view the last call made is the answer when the slot, the
    offset and the shape are the same and the bytes asked still cover it."""
    take, view = arena.taker(index, alignment), slot_view(dtype)
    capacities, slots = arena.capacities, arena.slots
    kept: list[Any] = [None, None, None, 0, None]  # slot, offset, shape, end, view

    def taken(nbytes: Any, offset: int, shape: tuple[int, ...]) -> np.ndarray:
        if nbytes.__class__ is int and 0 <= nbytes <= capacities[index]:
            # a slot with room is made by ``begin``: never None here (see ``Arena.taker``)
            slot: Slot = slots[index]  # type: ignore[assignment]
            slot.nbytes = nbytes
            if slot is kept[0] and offset == kept[1] and shape == kept[2] and kept[3] <= nbytes:
                v: np.ndarray = kept[4]
                return v
            v = view(slot, offset, shape)  # bounds-checked
            kept[:] = slot, offset, shape, offset + v.nbytes, v
            return v
        return view(take(nbytes), offset, shape)  # a miss: the allocator's storage

    return taken


def slot_view(dtype: np.dtype) -> Callable[[Storage, int, tuple[int, ...]], np.ndarray]:
    """The view an ``alloc_tensor`` makes of a slot, bounds-checked as ``decode.alloc_tensor``
    checks it, and kept: a slot is the same object from call to call (until a new layout), so
    when the next call asks for the same offset and shape of it, and the bytes asked of the
    slot still cover them, the kept view is the answer (a view of a slot never leaves the call:
    its storage is killed in it)."""
    itemsize, ndarray, prod = dtype.itemsize, np.ndarray, math.prod
    kept: list[Any] = [None, None, None, 0, None]  # slot, offset, shape, end, view

    def view(st: Storage, offset: int, shape: tuple[int, ...]) -> np.ndarray:
        if st is kept[0] and offset == kept[1] and shape == kept[2] and kept[3] <= st.nbytes:
            v: np.ndarray = kept[4]
            return v
        end = offset + prod(shape) * itemsize
        if offset < 0 or end > st.nbytes:
            raise view_error(st.nbytes, offset, shape, dtype)
        try:
            v = ndarray(shape, dtype, st.buf, offset)
        except ValueError:  # a negative dim (numpy refuses it): say which view
            raise view_error(st.nbytes, offset, shape, dtype) from None
        if st.__class__ is Slot:  # a storage of the allocator's (a miss) is not kept
            kept[:] = st, offset, shape, end, v
        return v

    return view


def _reg(operand: Reg) -> str:
    return f"r[{int_literal(operand.index)}]"


def _value(operand: Any) -> str:
    """An int or a shape operand as source: its register, or the immediate written out."""
    if isinstance(operand, Reg):
        return _reg(operand)
    if isinstance(operand, tuple):
        return "(" + "".join(f"{int_literal(d)}, " for d in operand) + ")"
    return int_literal(operand)
