"""``PlanMemory``: reuse freed storage and coalesce a function's allocations into arenas.

Assumes: the output of ``kill`` (``KillAfterLastUse``): every storage that dies in its chain has
one ``memory.kill`` right after its last use.

Guarantees (output is new IR, no side tables): in every let chain (a function body, an ``if``
branch), the *tenants* - storages allocated and killed in that chain and referenced only by
their ``alloc_tensor``s and their kill - are replaced by one or a few *arenas*:

    let %arena = memory.alloc_storage(size=<sum of blocks>, dtype_hint="uint8");
    let %t = memory.alloc_tensor(%arena, offset=<block offset>, shape=[...], dtype=...);
    ...
    let %_ = memory.kill(%arena);        // after the last tenant's kill

1. **Blocks** (reuse). Tenants are taken in allocation order; each goes into a *free* block (every
   earlier tenant of it killed before this one is allocated): preferably the smallest whose size
   is provably not smaller (``dims_le``: sympy, max/min structure, symbol ranges) - e.g. a freed
   ``8*n`` block hosts a ``4*n`` tensor; else the free block that grows least (relative growth
   summed over a few sample sizes within the ranges: a freed ``max(256*s, 16*s**2)`` block takes
   a ``1024*s`` tensor at no cost for ``s >= 64``, where a ``256*s`` one would grow fourfold),
   sized as the symbolic ``max`` of its tenants. Only if no block is free does a new one open.
   Tenants of a block never live at the same time.
2. **Arenas** (coalescing). The blocks of a group lie one after another in one arena, each at
   an offset aligned to its widest element (not to 64 bytes: kills alone allocate exact sizes,
   and padding every small tensor to a cache line made plans lose to them), the blocks of the
   coarsest elements first so that offsets need no padding; blocks never overlap. The arena is
   allocated just before its first tenant and killed after its last; the ``memory.check``s
   among its tenants whose symbols are bound there move before it (a tenant's size is a valid
   dim only where the checks before it hold: an output of ``h - 2`` rows).
3. **Groups** (data-dependent sizes). An arena's size is computed where it is allocated, so a
   tenant joins the first group whose allocation point has already bound every symbol of its
   size; a tenant sized by a symbol bound later (by ``memory.shape_func``, or the result of a call
   or an ``if``) opens a new group there: a second arena after the shape function, not an
   unplanned allocation. Nor does a tenant join a group opened before a storage outside it was
   freed: the arena would hold the tenant's bytes from before that free, where kills alone
   allocate them after it (an ``argwhere`` mask freed before the gathers it sized).
4. With ``static_arena=True``, an arena whose size has an upper bound under the ranges gets that
   constant size (one allocation of a fixed size, which a pooled allocator serves from its cache
   on every call).
5. **Never worse than kills alone** (``plan_choice.py``): the plan is kept where its peak is
   provably at most that of the input (kills alone); else a plan with some groups left out that
   is; else, where the two peaks are formulas of the entry symbols, both bodies behind
   ``if (memory.holds(planned peak <= kills peak))``; else kills alone.

**Returned values.** In a function that no other function calls (an entry point such as
``@main``), a storage reachable from a chain's result (no kill) is a tenant too, of a block that
is never freed, in an arena that is never killed: the result may reuse the block of a temporary
that died before it, which is what lets the peak meet the liveness bound (the MLP's 512*n bytes;
544*n with the result apart), and a call performs one allocation. The VM lends the arena to the
caller with the result and takes it back once the caller lets go of it. The price: a caller
*keeping* a result keeps the whole arena (an MLP at batch 2048: 8 MiB for an 80 KiB result).
``PlanMemory(returned_in_arena=False)`` (``dynshape.compile(..., plan_memory=...)``) gives every
result a storage of its own, for callers that keep many results. In a called function, returned
tensors always keep their own storage: the VM frees a callee's storages only at the end of the
top-level call, so a callee's arena would keep its temporaries alive for as long as its result.

Not planned (kept as they are): storages used in a nested scope (an ``if`` branch that uses an
outer storage), and a group of one tenant (an arena would only rename it).
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import sympy

import ir
from ir import Call, Expr, If, Let, Module, StorageType, Var, dim_proofs
from ir.dim_proofs import divisible_by, fold_roundings

from ..analysis.dim_bounds import RangeMap, add_dims, dims_le, evaluate, samples, upper
from ..analysis.entry_binding import entry_plan
from ..analysis.in_place import in_place_pairs
from ..analysis.liveness import Aliases, all_vars, chain, direct_vars
from ..analysis.plan_choice import choose
from ..dialect.memory import (
    ALIGNMENT,
    UNIT,
    AllocStorage,
    AllocTensor,
    Check,
    Kill,
    ShapeFunc,
    memory_op,
)
from .base import ModulePass

#: The kill index of a tenant that is never killed (returned): its block is never free again.
NEVER = 1 << 60


class PlanMemory(ModulePass):
    """Plan storages into arenas (see the module docstring).

    ``ranges``: symbol ranges used in proofs, added to each function's declared ranges;
    ``static_arena``: give an arena its constant upper bound when the ranges provide one;
    ``returned_in_arena``: let entry points keep returned tensors in an arena (module doc);
    ``never_worse``: keep a plan only where its peak is at most that of kills alone
    (``plan_choice.py``; off: always the plan, for studying plans).
    """

    name = "plan_memory"

    def __init__(
        self,
        ranges: RangeMap | None = None,
        static_arena: bool = False,
        returned_in_arena: bool = True,
        never_worse: bool = True,
    ) -> None:
        self.ranges = dict(ranges or {})
        self.static_arena = static_arena
        self.returned_in_arena = returned_in_arena
        self.never_worse = never_worse
        self.notes: list[str] = []
        """Choices the last ``run`` made for want of proof budget, one line per function
        (``plan_choice``): the compile report shows them."""

    def run(self, module: Module) -> Module:
        self.notes = []
        out = {}
        called = _called(module)
        for name, fn in module.items():
            if fn.is_primitive:
                out[name] = fn
                continue
            dim_proofs.checkpoint()  # the compile's deadline, if any
            plan = _FunctionPlan(self, name, fn, self.returned_in_arena and name not in called)
            if self.never_worse:
                body = choose(plan, fn.body, plan.ranges, plan.bound, self.notes, name)
            else:
                body = plan(frozenset())[0]
            out[name] = dataclasses.replace(fn, body=body)
        return Module(out)


class _FunctionPlan:
    """The planner of one function, as ``plan_choice.choose`` calls it: the planned body with
    some groups left unplanned, and the number of groups."""

    def __init__(self, options: PlanMemory, name: str, fn: ir.Function, returned: bool) -> None:
        self.options, self.fn, self.returned = options, fn, returned
        # Keyed by symbol: the pass's option may name symbols by string (``{"n": ...}``).
        self.ranges: dict[Any, Any] = dict(fn.ranges)
        self.ranges.update(
            {ir.sym(k) if isinstance(k, str) else k: v for k, v in options.ranges.items()}
        )
        storage_of = Aliases(fn).storage_of
        self.over = {
            storage_of[t]: storage_of[u]
            for t, u in in_place_pairs(fn).items()
            if t in storage_of and u in storage_of
        }
        self.placed: dict[int, list[_Group]] = {}
        """The planners' placements by chain, computed by the first (``_Planner.placed``)."""
        params = [(p.name_hint, p.ty or p.type_annotation) for p in fn.params]
        self.bound = frozenset(entry_plan(params, f"@{name}", fn.span).bound)  # and 2*n + 1

    def __call__(self, disabled: frozenset[int]) -> tuple[Expr, int]:
        planner = _Planner(
            self.ranges, self.options.static_arena, self.returned, self.over, disabled, self.placed
        )
        return planner.chain(self.fn.body, self.bound), planner.planned_groups


def plan_memory(
    module: Module, ranges: RangeMap | None = None, static_arena: bool = False
) -> Module:
    """Plan memory (see ``PlanMemory``)."""
    return PlanMemory(ranges, static_arena).run(module)


def align(size: ir.Dim, alignment: int = ALIGNMENT, multiple_of: int = 1) -> ir.Dim:
    """``size`` rounded up to a multiple of ``alignment``: unchanged when it is one by how it
    was built (``multiple_of``, a power of two) or by its structure (``divisible_by``). No
    proof through sympy's ``Mod``: on the offsets of a conv stack (sums of maxes of products
    of floors) one took seconds, and tens of them made most of a detector's compile."""
    if isinstance(size, int):
        return -(-size // alignment) * alignment
    if multiple_of % alignment == 0 or divisible_by(size, alignment):
        return size
    # ceil, not floor division: the text format prints it with '/', which parses in attributes.
    # Evaluated (the printed program parses back to the same dims) but not checked: the
    # rounding of a valid dim is one, and sympy's assumptions on such sums took seconds.
    return alignment * sympy.ceiling(size / alignment)


@dataclass
class _Tenant:
    storage: Var
    size: ir.Dim
    alloc: int
    """Index of its ``alloc_storage`` in the chain."""
    kill: int
    """Index of its ``kill``."""
    itemsize: int = 1
    """The widest element of its tensors: the alignment its offset needs."""
    granule: int = 1
    """The narrowest element of its tensors: its size is a multiple of it."""


@dataclass
class _Block:
    size: ir.Dim
    free_after: int
    """Index of the last tenant's kill: free for tenants allocated after it."""
    tenants: list[_Tenant] = field(default_factory=list)
    offset: ir.Dim = 0

    @property
    def alignment(self) -> int:
        """The alignment its offset needs: its widest element."""
        return max(t.itemsize for t in self.tenants)

    @property
    def granule(self) -> int:
        """Its size is a multiple of this (each tenant's size is a multiple of its elements,
        element sizes are powers of two)."""
        return min(t.granule for t in self.tenants)


@dataclass
class _Group:
    """The tenants of one arena."""

    pos: int
    """Index of the let the arena is allocated before (its first tenant's allocation)."""
    bound: frozenset[sympy.Basic]
    """Symbols bound there."""
    blocks: list[_Block] = field(default_factory=list)
    arena: Var = field(default_factory=lambda: Var("arena", ty=StorageType()))
    size: ir.Dim = 0

    @property
    def last_kill(self) -> int:
        return max((b.free_after for b in self.blocks), default=self.pos)

    @property
    def planned(self) -> bool:
        return len(self.blocks) > 1 or len(self.blocks[0].tenants) > 1


class _Planner:
    def __init__(
        self,
        ranges: Mapping[Any, Any],
        static_arena: bool,
        returned: bool,
        over: Mapping[Var, Var] | None = None,
        disabled: frozenset[int] = frozenset(),
        placed: dict[int, list[_Group]] | None = None,
    ) -> None:
        self.ranges = ranges
        self.placed = {} if placed is None else placed
        """Groups by chain (``id`` of its body, alive as long as the function): shared by the
        planners of one function."""
        self.static_arena = static_arena
        self.returned = returned
        self.over = over or {}
        """Storage of a kernel's output -> storage of the input it may be written over."""
        self.disabled = disabled
        """Numbers of the groups to leave unplanned (numbered as ``chain`` meets them)."""
        self.planned_groups = 0
        """Groups of more than one tenant met so far (planned unless disabled)."""

    def chain(self, body: Expr, bound: frozenset[sympy.Basic]) -> Expr:
        lets, result = chain(body)
        bound_before = []
        for let in lets:
            bound_before.append(bound)
            bound = bound | _binds(let)
        kills = [(i, op.target) for i, op in enumerate(map(Kill.of, (x.value for x in lets))) if op]
        groups = self.placed_groups(body, bound_before, kills)
        where: dict[Var, tuple[_Group, _Block]] = {}
        arenas_at: dict[int, list[_Group]] = {}
        kills_at: dict[int, list[_Group]] = {}
        for g in groups:
            if not g.planned:
                continue
            self.planned_groups += 1
            if self.planned_groups - 1 in self.disabled:
                continue
            self.layout(g)
            arenas_at.setdefault(g.pos, []).append(g)
            if g.last_kill != NEVER:
                kills_at.setdefault(g.last_kill, []).append(g)
            for b in g.blocks:
                for t in b.tenants:
                    where[t.storage] = (g, b)
        checks_at = _checks_before_arenas(lets, arenas_at)
        moved = {j for js in checks_at.values() for j in js}
        out: list[ir.Binding] = []
        for i, let in enumerate(lets):
            for j in checks_at.get(i, []):
                out.append((lets[j].var, lets[j].value, lets[j].span, lets[j].facts))
            for g in arenas_at.get(i, []):
                out.append((g.arena, AllocStorage.make(g.size, ALIGNMENT, "uint8"), None, ()))
            if i in moved:
                continue
            binding = self.rebuilt(let, where, bound_before[i])
            if binding is not None:
                out.append(binding)
            for g in kills_at.get(i, []):
                out.append((Var("_", ty=UNIT), Kill.make(g.arena), None, ()))
        return ir.nest_lets(out, result)

    def rebuilt(
        self, let: Let, where: Mapping[Var, tuple[_Group, _Block]], bound: frozenset[Any]
    ) -> ir.Binding | None:
        """``let`` in the planned chain: None for a tenant's allocation or kill (its arena's
        replace them), a tenant's tensor placed in its arena, an ``if``'s branches planned."""
        value, op = let.value, memory_op(let.value)
        if isinstance(op, AllocStorage) and let.var in where:
            return None
        if isinstance(op, Kill) and op.target in where:
            return None
        if isinstance(op, AllocTensor) and op.storage in where:
            assert isinstance(op.storage, Var)
            g, b = where[op.storage]
            offset = ir.check_dim(add_dims(b.offset, op.offset))
            alloc = AllocTensor.make(g.arena, offset, op.shape, op.dtype, value.span)
            return (let.var, alloc, let.span, let.facts)
        if isinstance(value, If):
            branches = (self.chain(value.then_branch, bound), self.chain(value.else_branch, bound))
            value = dataclasses.replace(value, then_branch=branches[0], else_branch=branches[1])
        return (let.var, value, let.span, let.facts)

    # ---- analysis ----------------------------------------------------------------------------
    def placed_groups(
        self, body: Expr, bound_before: list[frozenset[Any]], kills: list[tuple[int, Expr]]
    ) -> list[_Group]:
        """The groups of the chain ``body`` (``groups``). The placement does not depend on
        which groups are left unplanned, so it is computed once per chain for all the plans
        ``plan_choice`` asks for (re-placing the whole function for each partial plan was most
        of an encoder's plan choice)."""
        groups = self.placed.get(id(body))
        if groups is None:
            lets, result = chain(body)
            groups = self.groups(self.tenants(lets, result), bound_before, kills)
            self.placed[id(body)] = groups
        return groups

    def tenants(self, lets: list[Let], result: Expr) -> list[_Tenant]:
        """Storages allocated and killed in this chain, used only by alloc_tensor and kill."""
        refs: Counter[Var] = Counter(direct_vars(result))
        for let in lets:
            refs.update(all_vars(let.value))
        allocs: dict[Var, int] = {}
        kills: dict[Var, list[int]] = {}
        tensors: Counter[Var] = Counter()
        itemsizes: dict[Var, list[int]] = {}
        for i, let in enumerate(lets):
            op = memory_op(let.value)
            if isinstance(op, AllocStorage):
                allocs[let.var] = i
            elif isinstance(op, (Kill, AllocTensor)):
                target = op.target if isinstance(op, Kill) else op.storage
                if isinstance(target, Var) and target in allocs:
                    if isinstance(op, Kill):
                        kills.setdefault(target, []).append(i)
                    else:
                        tensors[target] += 1
                        itemsizes.setdefault(target, []).append(ir.ITEMSIZE[op.dtype])
        out = []
        for s, i in allocs.items():
            k = kills.get(s, [])
            if refs[s] != tensors[s] + len(k) or len(k) > 1 or (not k and not self.returned):
                continue
            alloc = AllocStorage.of(lets[i].value)
            assert alloc is not None
            sizes = itemsizes.get(s) or [1]
            # Nested floor divisions folded (an identity, ``ir.dim_proofs.fold_roundings``):
            # a conv stack's sizes are towers of ``//`` that every proof would split on.
            size = alloc.size
            if not isinstance(size, int):
                folded = fold_roundings(size)  # a valid dim still: no ir.check_dim (slow)
                size = int(folded) if folded.is_Integer else folded
            out.append(_Tenant(s, size, i, k[0] if k else NEVER, max(sizes), min(sizes)))
        return out

    def groups(
        self,
        tenants: list[_Tenant],
        bound_before: list[frozenset[Any]],
        kills: list[tuple[int, Expr]],
    ) -> list[_Group]:
        """Assign tenants to groups (arenas), then to blocks (see the module docstring, 3).

        A tenant joins a live group whose symbols are bound, one with a free block it provably
        fits in first. If it would need a new or a grown block while another arena is already
        dead, it opens a new group instead: a fresh arena allocated after that one is freed
        can reuse its bytes (the pool serves it), whereas growing a live arena adds to the peak.
        Nor does it join a group opened before a storage outside that group was freed
        (``kills``: index and storage): the arena would hold its bytes from before that free,
        where kills alone allocate them after it.
        """
        groups: list[_Group] = []
        placed: dict[Var, tuple[_Group, _Block]] = {}

        def freed_since(g: _Group, t: _Tenant) -> bool:
            return any(
                g.pos < i < t.alloc and (s not in placed or placed[s][0] is not g) for i, s in kills
            )

        for t in tenants:
            dim_proofs.checkpoint()
            need = ir.free_symbols(t.size)
            spot = self.written_over(t, placed, need)
            if spot is not None:  # the output takes the bytes of the input dying at its kernel
                spot[1].tenants.append(t)
                spot[1].free_after = t.kill
                placed[t.storage] = spot
                continue
            live = [
                g
                for g in groups
                if need <= g.bound and g.last_kill >= t.alloc and not freed_since(g, t)
            ]
            g = next((g for g in live if self.fits(g, t)), None)
            if g is None:
                with_free = (g for g in live if any(b.free_after < t.alloc for b in g.blocks))
                g = next(with_free, live[0] if live else None)
            if g is None:
                g = _Group(t.alloc, bound_before[t.alloc])
                groups.append(g)
            placed[t.storage] = (g, self.place(g, t))
        return groups

    def written_over(
        self, t: _Tenant, placed: Mapping[Var, tuple[_Group, _Block]], need: frozenset[Any]
    ) -> tuple[_Group, _Block] | None:
        """The block of the input ``t`` may be written over (``in_place.py``), if that input
        is its block's last tenant, dies at ``t``'s kernel, and the block holds ``t``."""
        source = self.over.get(t.storage)
        if source is None or source not in placed:
            return None
        g, b = placed[source]
        last = b.tenants[-1]
        if last.storage is not source or b.free_after != last.kill or not need <= g.bound:
            return None
        return (g, b) if dims_le(t.size, b.size, self.ranges) else None

    def fits(self, g: _Group, t: _Tenant) -> bool:
        """``g`` has a free block that provably holds ``t``."""
        return any(
            b.free_after < t.alloc and dims_le(t.size, b.size, self.ranges) for b in g.blocks
        )

    def place(self, g: _Group, t: _Tenant) -> _Block:
        """Put ``t`` into a free block of ``g`` (best proven fit, else grow), or a new block;
        return the block."""
        free = [b for b in g.blocks if b.free_after < t.alloc]
        fits = [b for b in free if dims_le(t.size, b.size, self.ranges)]
        chosen = None
        if fits:
            chosen = fits[0]
            for b in fits[1:]:  # the smallest proven fit wastes least
                if dims_le(b.size, chosen.size, self.ranges):
                    chosen = b
        elif free:
            chosen = self.least_growth(free, t.size)
            if dims_le(chosen.size, t.size, self.ranges):
                chosen.size = t.size
            else:
                chosen.size = _grown(chosen.size, t.size)
        if chosen is None:
            chosen = _Block(t.size, t.kill)
            g.blocks.append(chosen)
        chosen.tenants.append(t)
        chosen.free_after = t.kill
        return chosen

    def least_growth(self, free: list[_Block], size: ir.Dim) -> _Block:
        """The free block that grows least, relative to its new size, to hold ``size`` bytes:
        summed over sample bindings (``dim_bounds.samples``), so a block that is already as
        large at the sizes that matter wins over one that is small everywhere. A choice only:
        any block is safe once it is sized as the max of its tenants."""
        points = samples([size, *(b.size for b in free)], self.ranges)

        def cost(b: _Block) -> float:
            total = 0.0
            for values in points:
                old, new = evaluate(b.size, values), evaluate(size, values)
                total += max(new - old, 0) / max(old, new, 1)
            return total

        return min(free, key=cost)  # the first of the cheapest: deterministic

    def layout(self, g: _Group) -> None:
        """Offsets of the blocks, one after another; the arena's size.

        Each offset is aligned to its block's widest element only, not to 64 bytes: kills
        alone allocate exact sizes, and padding small tensors to a cache line is what made a
        plan lose to them (issue 14). Blocks are laid out from the coarsest granule down, so
        that a block of ``float32`` tensors after ``float64`` ones (sizes multiples of 8) needs
        no padding at all; padding is left only after a block whose size is not provably a
        multiple of the next one's alignment (mixed element sizes).
        """
        offset: ir.Dim = 0
        multiple_of = ALIGNMENT  # what the offset is a multiple of, by construction
        g.blocks.sort(key=lambda b: -b.granule)  # stable: allocation order within a granule
        for b in g.blocks:
            b.offset = align(offset, b.alignment, multiple_of)
            # a flat sum, not expanded (add_dims): expanding a rounded offset multiplies out
            # the products of floors inside it, seconds per block of a detector
            offset = _flat_sum(b.offset, b.size)
            # element sizes are powers of two: the sum is a multiple of the smaller one
            multiple_of = min(max(multiple_of, b.alignment), b.granule)
        size = offset
        if self.static_arena:
            bound = upper(size, self.ranges)
            if bound is not None:
                size = bound
        # A sum of valid dims and their roundings is one: not checked again (sympy's
        # ``is_negative`` on a detector's arena size took most of its compile).
        g.size = size


def _flat_sum(a: ir.Dim, b: ir.Dim) -> ir.Dim:
    """``a + b`` with like terms collected and nothing expanded."""
    total = sympy.Add(ir.dims.as_expr(a), ir.dims.as_expr(b))
    return int(total) if total.is_Integer else total


def _grown(size: ir.Dim, other: ir.Dim) -> ir.Dim:
    """``max(size, other)`` for a block neither of whose sizes is proved to hold the other:
    one flat ``Max``, unevaluated (``ir.dim_max`` would try both proofs again, and sympy's own
    evaluation compares every pair of arguments: seconds for the sizes of a conv stack)."""
    args = list(size.args) if isinstance(size, sympy.Max) else [ir.dims.as_expr(size)]
    new = ir.dims.as_expr(other)
    if any(_at_least(a, new) for a in args):
        return size
    # Terms the new one plainly holds go: the printed Max then parses back to itself (the
    # parser evaluates it, which drops 8*n beside 16*n: debug mode's round trip failed).
    args = [a for a in args if not _at_least(new, a)]
    args = list(dict.fromkeys([*args, new]))
    if len(args) == 1:
        return args[0]
    return sympy.Max(*args, evaluate=False)  # of valid dims: a valid dim (no ir.check_dim)


def _at_least(big: sympy.Expr, small: sympy.Expr) -> bool:
    """``big >= small`` when it shows without a proof: their difference a non-negative number,
    or a sum of monomials of dims (non-negative symbols) with positive coefficients."""
    d = big - small
    if d.is_Number:
        return bool(d >= 0)
    for term, c in d.as_coefficients_dict().items():
        if not (c.is_Number and c > 0):
            return False
        if term == 1:
            continue
        factors = term.args if term.is_Mul else (term,)
        if not all(_dim_power(f) for f in factors):
            return False
    return True


def _dim_power(f: sympy.Expr) -> bool:
    base, exp = f.as_base_exp()
    return bool(base.is_Symbol and base.is_nonnegative and exp.is_Integer and exp > 0)


def _called(module: Module) -> set[str]:
    """Names of the globals some function calls."""
    out: set[str] = set()
    for fn in module.values():
        if fn.is_primitive:
            continue
        stack = [fn.body]
        while stack:
            lets, _ = chain(stack.pop())
            for let in lets:
                v = let.value
                if isinstance(v, Call) and isinstance(v.callee, ir.GlobalVar):
                    out.add(v.callee.name)
                elif isinstance(v, If):
                    stack += [v.then_branch, v.else_branch]
    return out


def _checks_before_arenas(
    lets: list[Let], arenas_at: Mapping[int, list[_Group]]
) -> dict[int, list[int]]:
    """Where each ``memory.check`` among an arena's tenants moves: before the arena, when the
    symbols it reads are bound there. An arena's size sums its tenants' sizes, which are only
    valid dims where the checks before them hold (a convolution's output height ``h - 2`` is
    negative for ``h < 3``): allocated first, a bad input failed as "a storage of -36 bytes"
    instead of the check's message. A check only fails, so running it earlier changes which
    error a doubly bad input reports, never a result."""
    out: dict[int, list[int]] = {}
    moved: set[int] = set()
    for pos, groups in sorted(arenas_at.items()):
        last = max(t.alloc for g in groups for b in g.blocks for t in b.tenants)
        bound = groups[0].bound
        for j in range(pos, last):
            check = Check.of(lets[j].value)
            if check is None or j in moved:
                continue
            if ir.free_symbols(check.lhs) | ir.free_symbols(check.rhs) <= bound:
                out.setdefault(pos, []).append(j)
                moved.add(j)
    return out


def _binds(let: Let) -> frozenset[sympy.Basic]:
    """The symbols a let binds (``memory.shape_func``'s out_shapes, a value's new plain dims)."""
    value = let.value
    out: set[sympy.Basic] = set()
    shape_func = ShapeFunc.of(value)
    if shape_func is not None:
        out |= {d for shape in shape_func.out_shapes for d in shape if isinstance(d, sympy.Symbol)}
    out |= ir.plain_symbols(let.var.ty or value.ty)
    return frozenset(out)
