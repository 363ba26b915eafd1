"""Liveness over the memory dialect: which allocations a value may point into, and when each
allocation is used last. Shared by ``kill``, ``plan_memory``, ``memory_check`` and the report.

The input is a manifested function (``manifest_alloc``): let chains whose values are memory ops,
calls of globals, ``if``s, tuples, projections and atoms.

**Roots.** Every value is mapped to the set of *roots* it may alias: the variables bound by
``memory.alloc_storage`` and ``memory.alloc_tensor`` in the function. A tensor's roots are itself
and its storage; a ``memory.reshape_tensor`` view, a ``memory.append`` (which may grow its first
operand's storage in place), a tuple, a projection of a tuple, the result of
an ``if`` (either branch's result) and the result of a call of a global (conservatively: any of
its arguments, since a callee may return a parameter) have the roots of what they are made of.
So *using a value uses every root it may alias*: a storage stays live while any tensor, view or
tuple that may point into it is still used.

**Time.** ``timeline`` numbers the lets of a function in execution order, branches included (the
``if`` let gets a time before its branches and its result flows out at the time after them), and
gives each root its interval ``[defined, last used]``; a root reachable from the function's
result is live until ``END``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import ir
from ir import Call, Expr, Function, GlobalVar, If, Let, Tuple, TupleGetItem, Var

from ..dialect.memory import AllocStorage, AllocTensor, Append, Kill, ReshapeTensor, memory_op

#: The time of "after the function returns" (values reachable from the result live until then).
END = 1 << 60


#: The lets of a let chain, in order, and the chain's result (``ir.let_chain``).
chain = ir.let_chain


def direct_vars(value: Expr) -> Iterator[Var]:
    """The variables a let value reads itself (not inside ``if`` branches or primitives)."""
    if isinstance(value, Var):
        yield value
    elif isinstance(value, Call):
        if isinstance(value.callee, Expr):
            yield from direct_vars(value.callee)
        for a in value.args:
            yield from direct_vars(a)
    elif isinstance(value, Tuple):
        for f in value.fields:
            yield from direct_vars(f)
    elif isinstance(value, TupleGetItem):
        yield from direct_vars(value.tuple_value)
    elif isinstance(value, If):
        yield from direct_vars(value.cond)


def all_vars(value: Expr) -> Iterator[Var]:
    """The variables a let value reads, branches of ``if``s included (primitives excluded)."""
    yield from direct_vars(value)
    if isinstance(value, If):
        for branch in (value.then_branch, value.else_branch):
            lets, result = chain(branch)
            for let in lets:
                yield from all_vars(let.value)
            yield from direct_vars(result)


class Aliases:
    """The roots of every variable of one function (see the module docstring)."""

    def __init__(self, fn: Function) -> None:
        self.roots: dict[Var, frozenset[Var]] = {}
        """Variable -> the allocations it may point into."""
        self.storage_of: dict[Var, Var] = {}
        """Tensor variable (``alloc_tensor``) -> its storage variable."""
        self.storages: set[Var] = set()
        """The variables bound by ``alloc_storage``."""
        self._chain(fn.body)

    def of(self, e: Expr) -> frozenset[Var]:
        """The roots of an operand (an atom or a tuple of atoms)."""
        out: frozenset[Var] = frozenset()
        for v in direct_vars(e):
            out |= self.roots.get(v, frozenset())
        return out

    def _chain(self, body: Expr) -> frozenset[Var]:
        lets, result = chain(body)
        for let in lets:
            self.roots[let.var] = self._value(let.var, let.value)
        return self.of(result)

    def _value(self, var: Var, value: Expr) -> frozenset[Var]:
        op = memory_op(value)
        if isinstance(op, AllocStorage):
            self.storages.add(var)
            return frozenset({var})
        if isinstance(op, AllocTensor):
            storage = op.storage
            assert isinstance(storage, Var)
            self.storage_of[var] = storage
            return frozenset({var}) | self.of(storage)
        if isinstance(op, (ReshapeTensor, Append)):
            # An append's result may be its first operand's storage, grown in place.
            return self.of(op.tensor)
        if op is not None:
            return frozenset()  # invoke, kill, check, shape_of, shape_func: no alias
        if isinstance(value, If):
            return self._chain(value.then_branch) | self._chain(value.else_branch)
        if isinstance(value, Call) and isinstance(value.callee, GlobalVar):
            return frozenset().union(*(self.of(a) for a in value.args))
        if isinstance(value, (Var, Tuple, TupleGetItem)):
            return self.of(value)
        return frozenset()  # constants, primitive functions


def touched(aliases: Aliases, value: Expr) -> frozenset[Var]:
    """The roots a let value uses (branches included)."""
    out: frozenset[Var] = frozenset()
    for v in all_vars(value):
        out |= aliases.roots.get(v, frozenset())
    return out


@dataclass
class TensorLife:
    """One ``memory.alloc_tensor`` and when it is live."""

    var: Var
    storage: Var
    offset: ir.Dim
    shape: tuple[ir.Dim, ...]
    dtype: str
    start: int
    """Time of the ``alloc_tensor``."""
    end: int = -1
    """Time of the last use of anything that may alias it (``END`` if returned)."""

    @property
    def nbytes(self) -> ir.Dim:
        """Bytes of the tensor, as a dim."""
        size: ir.Dim = ir.ITEMSIZE[self.dtype]
        for d in self.shape:
            size = size * d
        return ir.simplify(size)


@dataclass
class StorageLife:
    """One ``memory.alloc_storage`` and when it is live."""

    var: Var
    size: ir.Dim
    start: int
    kill: int | None = None
    """Time of its ``memory.kill`` (None: never killed, freed when the top-level call ends)."""
    tensors: list[TensorLife] = field(default_factory=list)


@dataclass
class Timeline:
    """Program points of one function and the live interval of each allocation."""

    steps: list[Let]
    """Lets by time (index = time), branches included."""
    storages: dict[Var, StorageLife]
    tensors: dict[Var, TensorLife]


def timeline(fn: Function) -> Timeline:
    """Number the lets of ``fn`` and compute each allocation's live interval."""
    walk = _Walk(Aliases(fn))
    result = walk.chain(fn.body)
    walk.use(walk.aliases.of(result), END)
    tensors = walk.tensors
    for root, t in walk.last.items():
        if root in tensors:
            tensors[root].end = t
    for tl in tensors.values():
        tl.end = max(tl.end, tl.start)
    return Timeline(walk.steps, walk.storages, tensors)


@dataclass
class _Walk:
    """The walk ``timeline`` makes: lets numbered in execution order, allocations recorded,
    and the last time each root is used."""

    aliases: Aliases
    steps: list[Let] = field(default_factory=list)
    storages: dict[Var, StorageLife] = field(default_factory=dict)
    tensors: dict[Var, TensorLife] = field(default_factory=dict)
    last: dict[Var, int] = field(default_factory=dict)

    def use(self, roots: frozenset[Var], t: int) -> None:
        """``roots`` are used at time ``t``."""
        last = self.last
        for r in roots:
            last[r] = max(last.get(r, -1), t)

    def chain(self, body: Expr) -> Expr:
        """Number the lets of the chain ``body`` (branches included); its result."""
        lets, result = chain(body)
        for let in lets:
            t = len(self.steps)
            self.steps.append(let)
            value = let.value
            for v in direct_vars(value):
                self.use(self.aliases.roots.get(v, frozenset()), t)
            self.record(let, t)
        return result

    def record(self, let: Let, t: int) -> None:
        """What let ``let`` at time ``t`` allocates or kills; an ``if``'s branches, walked."""
        value = let.value
        op = memory_op(value)
        if isinstance(op, AllocStorage):
            self.storages[let.var] = StorageLife(let.var, op.size, t)
        elif isinstance(op, AllocTensor):
            storage = self.aliases.storage_of[let.var]
            tl = TensorLife(let.var, storage, op.offset, op.shape, op.dtype, t)
            self.tensors[let.var] = tl
            if storage in self.storages:
                self.storages[storage].tensors.append(tl)
        elif isinstance(op, Kill):
            target = op.target
            if isinstance(target, Var) and target in self.storages:
                self.storages[target].kill = t
        elif isinstance(value, If):
            for branch in (value.then_branch, value.else_branch):
                res = self.chain(branch)
                # The branch's result flows into the if's variable after both branches.
                self.use(self.aliases.of(res), len(self.steps))
