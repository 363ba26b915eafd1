"""Register kinds: what each register holds at each instruction, derived by a pass over the code.

The loader's structural checks (``validate.py``) prove that every operand names an existing
register, table entry or target. They cannot see what a register *holds* when it is read: a
crafted file could pass a storage where a kernel expects a tensor, an int where ``alloc_tensor``
expects a storage, or read a register no instruction wrote. This pass closes that gap. It runs a
forward data-flow analysis over each function's control-flow graph (jumps, branches, and the
fall-through between instructions) and assigns every register one of the kinds below at every
instruction; then it checks each operand against what its opcode needs.

Kinds: ``int`` (a Python int: symbol values, sizes, conditions), ``shape`` (a tuple of ints),
``shapes`` (what a shape function returns: a shape, or a tuple of shapes for a tuple result; its
items are checked when used), ``tensor`` (a numpy array), ``storage`` (with its size when it is
static), ``tuple`` (with the kind of each field), and ``mixed`` (different kinds on different
paths into an instruction). A register that some path reaches without writing it (or after
``kill`` cleared it) is *unset*. Reading an unset register, or one whose kind is not what the
operand needs, is a ``FormatError`` naming the function, the instruction, the operand and the
kinds. Function results are derived the same way, to a fixed point over the call graph, so a
``call``'s destination has its callee's result kind.

Tuple kinds carry bounds, kept through every merge (also into ``mixed``): the most levels a value
of the kind can nest (``depth``) and the most values it holds, counting repeats (``nodes``). A
``tuple`` instruction that could build a value beyond ``MAX_TUPLE_DEPTH`` levels or
``MAX_TUPLE_NODES`` values is refused: otherwise a loop ``%r = tuple(%r)`` nests a value once per
iteration, or ``%r = tuple(%r, %r)`` doubles it, and handing it back to the caller would walk
2**steps values; it also keeps the analysis itself from walking such kinds.

The analysis is linear in the code for the straight-line and forward-branching code the compiler
emits (one visit per instruction, one copy of the register kinds per branch) and analyses each
function once when callees come first; loops iterate to a fixed point, which the small lattice
reaches in a few rounds. Its work is bounded for the whole executable (``MAX_WORK`` units: an
instruction visited, a register kind copied, merged or compared), so no file can make the loader
slow: an executable beyond the bound is refused.
"""

from __future__ import annotations

import contextlib
import heapq
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .errors import FormatError
from .executable import Executable, TensorSpec, TupleSpec, TypeSpec
from .fused import FusedKernel
from .isa import Instruction, Op, Reg, format_instruction

#: Most work units (instructions visited, register kinds copied, merged or compared) the
#: analysis may spend on one executable: about a second or two of loading at worst.
MAX_WORK = 1 << 27
#: Work units charged for visiting one instruction, and per register for a merge that differs
#: (a unit is about one kind copied or compared in C; measured, see design/vm.md).
STEP_WORK = 32
SLOW_MERGE = 8
#: Deepest nesting of tuples a ``tuple`` instruction may build.
MAX_TUPLE_DEPTH = 8
#: Most values (a tuple and everything in it, counting repeats) a ``tuple`` instruction may build.
MAX_TUPLE_NODES = 1 << 14


@dataclass(frozen=True, slots=True)
class RegKind:
    """What a register holds: a kind name, plus the fields of a tuple or a static storage size."""

    name: str
    """``int``, ``shape``, ``shapes``, ``tensor``, ``storage``, ``tuple``, ``mixed``, or
    ``killed`` (unset by a ``kill``, on some path)."""
    fields: tuple[RegKind, ...] | None = None
    """The kind of each field of a tuple (None: a tuple of unknown fields)."""
    size: int | None = None
    """The bytes of a storage allocated with an immediate size; the pc of a ``kill``."""
    depth: int = 0
    """The most tuple levels a value of this kind can nest (a bound, also for ``mixed``)."""
    nodes: int = 1
    """The most values a value of this kind holds, itself included, counting repeats."""

    def __str__(self) -> str:
        if self.name == "tuple" and self.fields is not None and self.nodes <= 32:
            return "tuple(" + ", ".join(str(f) for f in self.fields) + ")"
        if self.name == "storage" and self.size is not None:
            return f"storage of {self.size} bytes"
        return self.name


INT = RegKind("int")
SHAPE = RegKind("shape")
SHAPES = RegKind("shapes")
TENSOR = RegKind("tensor")
STORAGE = RegKind("storage")
MIXED = RegKind("mixed")
#: Kinds a ``val`` operand may read: an int, a shape function's item (an int or a shape,
#: checked when used), or a tensor (a 0-d integer array computes like an int; anything else
#: fails when used, with a located error).
INTS = ("int", "shapes", "tensor")
SHAPE_LIKE = ("shape", "shapes")


def join(a: RegKind | None, b: RegKind | None) -> RegKind | None:
    """The kind of a register reached by two paths (None or ``killed``: unset on one of them)."""
    if a is b or a == b:
        return a
    unset = [k for k in (a, b) if k is None or k.name == "killed"]
    if unset:  # unset on some path; a kill is kept, to name it in the message
        return next((k for k in unset if k is not None), None)
    assert a is not None and b is not None
    if a.name == b.name:
        if a.name == "storage":
            return STORAGE
        if a.name == "tuple":
            if a.fields is not None and b.fields is not None and len(a.fields) == len(b.fields):
                fields = [join(x, y) for x, y in zip(a.fields, b.fields, strict=True)]
                if all(f is not None for f in fields):
                    return _tuple_of(fields)  # type: ignore[arg-type]
            return _bounded("tuple", a, b)
        if a.name == "mixed":
            return _bounded("mixed", a, b)
        return a
    return _bounded("mixed", a, b)


def _bounded(name: str, a: RegKind, b: RegKind) -> RegKind:
    """A tuple of unknown fields, or a mixed kind, keeping the bounds of both ``a`` and ``b``."""
    depth, nodes = max(a.depth, b.depth), max(a.nodes, b.nodes)
    if depth == 0 and name == "mixed":
        return MIXED
    return RegKind(name, depth=depth, nodes=nodes)


def spec_kind(spec: TypeSpec) -> RegKind:
    """The kind of a value of a parameter or result type (a spec is a tree the file spells out,
    so this is linear in the file)."""
    if isinstance(spec, TensorSpec):
        return TENSOR
    assert isinstance(spec, TupleSpec)
    return _tuple_of([spec_kind(f) for f in spec.fields])


def _tuple_of(fields: Sequence[RegKind]) -> RegKind:
    """The kind of a tuple of values of kinds ``fields``, with its bounds."""
    depth = 1 + max((f.depth for f in fields), default=0)
    return RegKind("tuple", tuple(fields), depth=depth, nodes=1 + sum(f.nodes for f in fields))


def _matches(value: RegKind, spec: RegKind) -> bool:
    """True if a value of kind ``value`` may be passed where ``spec`` (a parameter) is expected."""
    if spec.name != "tuple":
        return value.name == spec.name
    if value.name != "tuple":
        return False
    if spec.fields is None or value.fields is None:
        return spec.fields is None  # a parameter of unknown fields takes any tuple
    return len(spec.fields) == len(value.fields) and all(
        _matches(v, s) for v, s in zip(value.fields, spec.fields, strict=True)
    )


class _Budget:
    """The work the analysis may still spend on one executable (see ``MAX_WORK``)."""

    __slots__ = ("left",)

    def __init__(self) -> None:
        self.left = MAX_WORK

    def charge(self, units: int) -> None:
        self.left -= units
        if self.left < 0:
            raise FormatError(
                f"the executable is too large to validate (more than {MAX_WORK} units of "
                "register-kind analysis: instructions visited, register kinds merged)"
            )


class _Checker:
    """The analysis of one function, given the result kinds of every function."""

    def __init__(
        self,
        exe: Executable,
        fidx: int,
        results: list[RegKind | None],
        budget: _Budget,
        strict: bool,
    ) -> None:
        self.exe, self.f, self.results = exe, exe.functions[fidx], results
        self.budget = budget
        self.strict = strict
        """False while function results are still being derived: a failure stops the analysis
        quietly and sets ``failed``."""
        self.failed = False
        self.result: RegKind | None = None
        self.returns = False

    def fail(self, pc: int, message: str) -> Exception:
        """The error for instruction ``pc``; while not strict, a marker the caller ignores."""
        if not self.strict:
            self.failed = True
            return _Lenient()
        ins = self.f.code[pc]
        return FormatError(
            f"function {self.f.name!r}, instruction {pc} ({format_instruction(ins)}): {message}"
        )

    def run(self) -> None:
        """Analyse the function; while not strict, stop quietly at the first failure."""
        with contextlib.suppress(_Lenient):
            self._run()

    def _run(self) -> None:
        f, charge = self.f, self.budget.charge
        n = f.num_registers
        entry: list[RegKind | None] = [None] * n
        for i, p in enumerate(f.params):
            entry[i] = spec_kind(p.type)
        # The state at the entry of each jump target (where paths merge), and a worklist of
        # blocks to (re)visit, lowest pc first: forward code is one pass.
        merges = {ins.operands[-1] for ins in f.code if ins.op in (Op.JUMP, Op.JUMP_IF_NOT)}
        charge(len(f.code))
        states: dict[int, list[RegKind | None]] = {0: entry}
        pending = [0]
        queued = {0}
        while pending:
            start = heapq.heappop(pending)
            queued.discard(start)
            regs = list(states[start])
            charge(n)
            pc = start
            while True:
                ins = f.code[pc]
                charge(STEP_WORK)
                for t in self.step(pc, ins, regs):
                    self._flow(t, regs, states, pending, queued)
                if ins.op in (Op.JUMP, Op.RET, Op.TAIL_CALL):
                    break
                pc += 1
                if pc in merges:  # other paths arrive here too: continue through the worklist
                    self._flow(pc, regs, states, pending, queued)
                    break

    def _flow(
        self,
        target: int,
        regs: list[RegKind | None],
        states: dict[int, list[RegKind | None]],
        pending: list[int],
        queued: set[int],
    ) -> None:
        self.budget.charge(len(regs))
        old = states.get(target)
        if old is None:
            states[target] = list(regs)
            changed = True
        elif old == regs:  # the common case, compared in C
            changed = False
        else:
            self.budget.charge(SLOW_MERGE * len(regs))
            changed = False
            for i, (a, b) in enumerate(zip(old, regs, strict=True)):
                if a is not b:
                    if a is not None and b is not None:  # merging tuples walks them
                        self.budget.charge(a.nodes + b.nodes)
                    j = join(a, b)
                    if j != a:
                        old[i] = j
                        changed = True
        if changed and target not in queued:
            queued.add(target)
            heapq.heappush(pending, target)

    # One instruction ------------------------------------------------------------------

    def read(self, pc: int, regs: list[RegKind | None], r: Reg, role: str) -> RegKind:
        k = regs[r.index]
        if k is None or k.name == "killed":
            if not self.strict:  # go on deriving results; the strict pass names the failure
                self.failed = True
                return MIXED
            if k is None:
                raise self.fail(
                    pc, f"{role} {r!r} is read before any instruction writes it on some path"
                )
            at = k.size if k.size is not None else 0
            raise self.fail(
                pc,
                f"{role} {r!r} is read after instruction {at} "
                f"({format_instruction(self.f.code[at])}) killed it, on some path",
            )
        return k

    def need(
        self, pc: int, regs: list[RegKind | None], r: Reg, role: str, names: Sequence[str]
    ) -> RegKind:
        k = self.read(pc, regs, r, role)
        if k.name not in names:
            if not self.strict:
                self.failed = True
                return k
            raise self.fail(pc, f"{role} {r!r} holds {k}, expected {' or '.join(names)}")
        return k

    def val(self, pc: int, regs: list[RegKind | None], v: object, role: str) -> None:
        if isinstance(v, Reg):
            self.need(pc, regs, v, role, INTS)

    def step(self, pc: int, ins: Instruction, regs: list[RegKind | None]) -> tuple[int, ...]:
        """Check the operands of ``ins`` against ``regs`` and apply its writes; the jump targets."""
        ops, op = ins.operands, ins.op
        if op == Op.MOVE:
            regs[ops[0].index] = self.read(pc, regs, ops[1], "source")
        elif op == Op.LOAD_CONST:
            regs[ops[0].index] = TENSOR
        elif op == Op.LOAD_INT:
            regs[ops[0].index] = INT
        elif op in (Op.CALL, Op.TAIL_CALL):
            func, args = (ops[1], ops[2]) if op == Op.CALL else (ops[0], ops[1])
            callee = self.exe.functions[func]
            for i, (a, p) in enumerate(zip(args, callee.params, strict=True)):
                k = self.read(pc, regs, a, f"argument {i}")
                want = spec_kind(p.type)
                self.budget.charge(k.nodes + want.nodes)
                scalar = k is INT and isinstance(p.type, TensorSpec) and p.type.shape == ()
                if not scalar and not _matches(k, want):
                    raise self.fail(
                        pc,
                        f"argument {i} {a!r} holds {k}, but parameter {p.name!r} of "
                        f"{callee.name!r} is {p.type}",
                    )
            res = self.results[func]
            if op == Op.CALL:
                # None: the callee's result is not known yet (a later round revisits), or it
                # never returns (then the destination stays unset).
                regs[ops[0].index] = res
            else:
                self._returns(res)
        elif op == Op.INVOKE:
            shaped = _shape_inputs(self.exe.kernels[ops[0]])
            for i, a in enumerate(ops[1]):
                if i in shaped:  # a fused kernel's scratch shape, computed by the caller
                    self.need(pc, regs, a, f"input {i}", SHAPE_LIKE)
                    continue
                k = self.need(pc, regs, a, f"input {i}", ("tensor", "tuple"))
                if k.name == "tuple" and not _all_tensors(k):
                    raise self.fail(pc, f"input {i} {a!r} holds {k}, expected tensors")
            for i, a in enumerate(ops[2]):
                self.need(pc, regs, a, f"output {i}", ("tensor",))
        elif op == Op.ALLOC_STORAGE:
            self.val(pc, regs, ops[1], "size")
            size = ops[1] if not isinstance(ops[1], Reg) else None
            if size is not None and size < 0:
                raise self.fail(pc, f"negative storage size {size}")
            regs[ops[0].index] = RegKind("storage", size=size)
        elif op == Op.ALLOC_TENSOR:
            st = self.need(pc, regs, ops[1], "storage", ("storage",))
            offset, shape = ops[2], ops[3]
            self.val(pc, regs, offset, "offset")
            if isinstance(shape, Reg):
                self.need(pc, regs, shape, "shape", SHAPE_LIKE)
            if not isinstance(offset, Reg) and offset < 0:
                raise self.fail(pc, f"negative offset {offset}")
            if st.size is not None and not isinstance(offset, Reg) and not isinstance(shape, Reg):
                need = offset + _prod(shape) * np.dtype(ops[4]).itemsize
                if need > st.size:
                    raise self.fail(
                        pc,
                        f"a view of shape {shape} {ops[4]} at offset {offset} needs "
                        f"{need} bytes, but the storage holds {st.size}",
                    )
            regs[ops[0].index] = TENSOR
        elif op in (Op.SHAPE_OF, Op.DIM):
            self.need(pc, regs, ops[1], "source", ("tensor",))
            regs[ops[0].index] = SHAPE if op == Op.SHAPE_OF else INT
        elif op == Op.RESHAPE:
            self.need(pc, regs, ops[1], "source", ("tensor",))
            if isinstance(ops[2], Reg):
                self.need(pc, regs, ops[2], "shape", SHAPE_LIKE)
            regs[ops[0].index] = TENSOR
        elif op == Op.TUPLE:
            fields = [self.read(pc, regs, a, f"field {i}") for i, a in enumerate(ops[1])]
            k = _tuple_of(fields)
            # Bigger tuples would make hand-over and the sanitizer walk them per value (and a
            # loop could grow them per iteration; see the module doc).
            if k.depth > MAX_TUPLE_DEPTH:
                raise self.fail(pc, f"tuples nest deeper than {MAX_TUPLE_DEPTH} levels")
            if k.nodes > MAX_TUPLE_NODES:
                raise self.fail(
                    pc, f"a tuple could hold {k.nodes} values (the limit is {MAX_TUPLE_NODES})"
                )
            regs[ops[0].index] = k
        elif op == Op.GET_ITEM:
            k = self.need(pc, regs, ops[1], "source", ("tuple", "shape", "shapes"))
            regs[ops[0].index] = self._item(pc, k, ops[2])
        elif op == Op.JUMP:
            return (ops[0],)
        elif op == Op.JUMP_IF_NOT:
            self.need(pc, regs, ops[0], "condition", ("int", "shapes", "tensor"))
            return (ops[1],)
        elif op == Op.RET:
            self._returns(self.read(pc, regs, ops[0], "result"))
        elif op == Op.KILL:
            killed = RegKind("killed", size=pc)
            for a in ops[0]:
                regs[a.index] = killed
        elif op == Op.SHAPE_PROGRAM:
            prog = self.exe.shape_programs[ops[0]]
            for i, a in enumerate(ops[1]):
                self.need(pc, regs, a, f"input {i}", INTS)
            for d, out in zip(ops[2], prog.outputs, strict=True):
                regs[d.index] = SHAPE if isinstance(out, tuple) else INT
        elif op == Op.SHAPE_FUNC:
            for i, a in enumerate(ops[2]):
                self.need(pc, regs, a, f"input {i}", ("shape", "shapes", "tensor", "tuple"))
            regs[ops[0].index] = SHAPES
        elif op in (Op.CHECK, Op.CHECK_VALUES):
            self.val(pc, regs, ops[0], "left operand")
            self.val(pc, regs, ops[2], "right operand")
            for i, a in enumerate(ops[4] if op == Op.CHECK_VALUES else ()):
                self.need(pc, regs, a, f"value {i}", INTS)
        elif op == Op.CHECK_DIM:
            self.need(pc, regs, ops[0], "source", ("tensor",))
            self.need(pc, regs, ops[2], "symbol", INTS)
        else:  # pragma: no cover - validate.py refuses unknown opcodes first
            raise self.fail(pc, "unknown opcode")
        return ()

    def _item(self, pc: int, k: RegKind, i: int) -> RegKind:
        if k.name == "shape":
            return INT
        if k.name == "shapes":
            return SHAPES
        if k.fields is None:  # any field: within the tuple's bounds
            return RegKind("mixed", depth=max(k.depth - 1, 0), nodes=max(k.nodes - 1, 1))
        if not -len(k.fields) <= i < len(k.fields):
            raise self.fail(pc, f"field {i} of a tuple of {len(k.fields)} fields")
        return k.fields[i]

    def _returns(self, k: RegKind | None) -> None:
        if k is None:
            return  # a callee whose result is not known yet: the fixed point revisits
        self.result = k if not self.returns else join(self.result, k)
        self.returns = True


class _Lenient(Exception):
    """Raised instead of a FormatError while function results are being derived."""


def _shape_inputs(entry: object) -> frozenset[int]:
    """The inputs of a kernel entry that are shapes: a fused kernel's ``("input", i)`` scratch."""
    if not isinstance(entry, FusedKernel):
        return frozenset()
    return frozenset(
        s.shape[1]
        for s in entry.scratch
        if isinstance(s.shape, tuple) and s.shape[:1] == ("input",)
    )


def _all_tensors(k: RegKind) -> bool:
    return k.fields is not None and all(f.name == "tensor" for f in k.fields)


def _prod(shape: Sequence[int]) -> int:
    p = 1
    for d in shape:
        p *= d
    return p


def check_register_kinds(exe: Executable) -> list[RegKind | None]:
    """Raise FormatError unless every operand of every instruction of ``exe`` reads a register
    that is set on every path and holds the kind its opcode needs (see the module doc); return
    the result kind of each function (None: it never returns)."""
    n = len(exe.functions)
    results: list[RegKind | None] = [None] * n
    budget = _Budget()
    callers: list[set[int]] = [set() for _ in range(n)]
    for fidx, f in enumerate(exe.functions):
        for ins in f.code:
            if ins.op in (Op.CALL, Op.TAIL_CALL):
                callers[ins.operands[1 if ins.op == Op.CALL else 0]].add(fidx)
    budget.charge(n + sum(len(c) for c in callers))
    # Function results to a fixed point first, leniently (a caller analysed before its callee
    # sees no result yet), callees first so that most functions are analysed once: a function is
    # analysed again only when a callee's result changes. Results only generalise and their
    # lattice is shallow (bounded depth), and the budget bounds the rest.
    rank = _callees_first(exe, callers)
    pending = [(rank[f], f) for f in range(n)]
    heapq.heapify(pending)
    queued = set(range(n))
    failed = [False] * n
    while pending:
        _, fidx = heapq.heappop(pending)
        queued.discard(fidx)
        c = _Checker(exe, fidx, results, budget, strict=False)
        c.run()
        failed[fidx] = c.failed
        old = results[fidx]
        new = c.result if old is None or c.result is None else join(old, c.result)
        new = old if new is None else new
        if new != old:
            results[fidx] = new
            for caller in callers[fidx] - queued:
                queued.add(caller)
                heapq.heappush(pending, (rank[caller], caller))
    # Each function's last analysis saw the final results of its callees; one that went through
    # without a failure is what a strict pass would find. The others are analysed again, strictly
    # and callees first, for the message (a lenient failure is a strict one: it is deterministic).
    for fidx in sorted(range(n), key=rank.__getitem__):
        if failed[fidx]:
            _Checker(exe, fidx, results, budget, strict=True).run()
    return results


def _callees_first(exe: Executable, callers: list[set[int]]) -> list[int]:
    """A rank for each function: callees before callers, outside cycles (a depth-first
    post-order over the call graph, without recursion)."""
    n = len(exe.functions)
    callees: list[list[int]] = [[] for _ in range(n)]
    for callee, who in enumerate(callers):
        for caller in who:
            callees[caller].append(callee)
    rank = [-1] * n
    seen = [False] * n
    order = 0
    for root in range(n):
        if seen[root]:
            continue
        seen[root] = True
        stack = [(root, iter(callees[root]))]
        while stack:
            node, it = stack[-1]
            nxt = next(it, None)
            if nxt is None:
                stack.pop()
                rank[node] = order
                order += 1
            elif not seen[nxt]:
                seen[nxt] = True
                stack.append((nxt, iter(callees[nxt])))
    return rank
