"""Register kinds: what each register holds at each instruction, derived by a pass over the code.

The loader's structural checks (``validate.py``) prove that every operand names an existing
register, table entry or target. They cannot see what a register *holds* when it is read: a
crafted file could pass a storage where a kernel expects a tensor, an int where ``alloc_tensor``
expects a storage, or read a register no instruction wrote. This pass closes that gap. It runs a
forward data-flow analysis over each function's control-flow graph (jumps, branches, and the
fall-through between instructions) and assigns every register one of the kinds below at every
instruction; then it checks each operand against what its opcode needs (each opcode's rule is
named by its entry in ``opcodes.py`` and lives in ``kind_rules.py``; the lattice of kinds is
``kind_lattice.py``).

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

from .errors import FormatError
from .executable import Executable
from .isa import Instruction, Reg, format_instruction
from .kind_lattice import (
    INT,
    INTS,
    MAX_TUPLE_DEPTH,
    MAX_TUPLE_NODES,
    MIXED,
    SHAPES,
    RegKind,
    join,
    spec_kind,
)
from .opcodes import OPCODES

__all__ = [
    "MAX_TUPLE_DEPTH",
    "MAX_TUPLE_NODES",
    "MAX_WORK",
    "KindChecker",
    "RegKind",
    "check_register_kinds",
    "join",
    "spec_kind",
]

#: Most work units (instructions visited, register kinds copied, merged or compared) the
#: analysis may spend on one executable: about a second or two of loading at worst.
MAX_WORK = 1 << 27
#: Work units charged for visiting one instruction, and per register for a merge that differs
#: (a unit is about one kind copied or compared in C; measured, see design/vm.md).
STEP_WORK = 32
SLOW_MERGE = 8


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


class KindChecker:
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
        merges = {
            ins.operands[target] for ins in f.code if (target := OPCODES[ins.op].target) is not None
        }
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
                if OPCODES[ins.op].ends:
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
        """Check the operands of ``ins`` against ``regs`` and apply its writes (its opcode's
        rule, ``kind_rules.py``); the jump targets."""
        spec = OPCODES[ins.op]
        spec.kinds(self, pc, ins.operands, regs)
        return () if spec.target is None else (ins.operands[spec.target],)

    def item_kind(self, pc: int, k: RegKind, i: int) -> RegKind:
        """The kind of field ``i`` of a value of kind ``k`` (a tuple, a shape, shapes)."""
        if k.name == "shape":
            return INT
        if k.name == "shapes":
            return SHAPES
        if k.fields is None:  # any field: within the tuple's bounds
            return RegKind("mixed", depth=max(k.depth - 1, 0), nodes=max(k.nodes - 1, 1))
        if not -len(k.fields) <= i < len(k.fields):
            raise self.fail(pc, f"field {i} of a tuple of {len(k.fields)} fields")
        return k.fields[i]

    def record_result(self, k: RegKind | None) -> None:
        """The function may return a value of kind ``k`` (None: not known yet)."""
        if k is None:
            return  # a callee whose result is not known yet: the fixed point revisits
        self.result = k if not self.returns else join(self.result, k)
        self.returns = True


class _Lenient(Exception):
    """Raised instead of a FormatError while function results are being derived."""


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
            callee = OPCODES[ins.op].callee
            if callee is not None:
                callers[ins.operands[callee]].add(fidx)
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
        c = KindChecker(exe, fidx, results, budget, strict=False)
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
            KindChecker(exe, fidx, results, budget, strict=True).run()
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
