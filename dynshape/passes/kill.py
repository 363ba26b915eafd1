"""``KillAfterLastUse``: free every storage right after its last use (a compile-time fact).

Assumes: a manifested module (``manifest_alloc``): let chains of memory ops, calls of globals,
``if``s, tuples and projections.

Guarantees: for every ``memory.alloc_storage`` of a function, ``let %_ = memory.kill(%s);`` is
inserted right after the last let of the *same* chain (function body or ``if`` branch) that uses
anything that may alias the storage (see ``liveness``: its tensors, ``reshape_tensor`` views of
them, tuples holding them, projections of those tuples, results of ``if``s and calls that may
return them). A use inside a branch counts as a use by the ``if`` let that holds the branch, so a
value live out of an ``if`` is never killed inside a branch. A storage reachable from its chain's
result (returned by the function, or flowing out of a branch) is not killed: the VM releases it
when the top-level call ends, or hands it over with the returned array.

**Kills target storages only.** The VM frees memory only when a *storage* register is killed;
killing a tensor register merely drops a reference (``vm/decode.py``, ``_kill``). A tensor view
never owns memory, so killing it would add instructions that free nothing. The storage is killed
after the last use of every tensor (and view) in it.

A storage that already has a kill is left as it is, so the pass is idempotent.
"""

from __future__ import annotations

import dataclasses

import ir
from ir import Expr, If, Module, Var

from ..analysis.liveness import Aliases, chain, touched
from ..dialect.memory import UNIT, Kill
from .base import ModulePass


class KillAfterLastUse(ModulePass):
    """Insert ``memory.kill`` after the last use of each storage (see the module docstring)."""

    name = "kill"

    def run(self, module: Module) -> Module:
        out = {}
        for name, fn in module.items():
            if fn.is_primitive:
                out[name] = fn
                continue
            aliases = Aliases(fn)
            out[name] = dataclasses.replace(fn, body=_chain(fn.body, aliases))
        return Module(out)


def kill_after_last_use(module: Module) -> Module:
    """Insert kills (see ``KillAfterLastUse``)."""
    return KillAfterLastUse().run(module)


def _chain(body: Expr, aliases: Aliases) -> Expr:
    lets, result = chain(body)
    escaping = aliases.of(result)
    already = {k.target for k in map(Kill.of, (let.value for let in lets)) if k is not None}
    # The index of the last let that uses each storage allocated here.
    last: dict[Var, int] = {}
    for i, let in enumerate(lets):
        if let.var in aliases.storages:
            last[let.var] = i
        for root in touched(aliases, let.value):
            if root in last:
                last[root] = i
    kills: dict[int, list[Var]] = {}
    for storage, i in last.items():
        if storage not in escaping and storage not in already:
            kills.setdefault(i, []).append(storage)
    out: list[ir.Binding] = []
    for i, let in enumerate(lets):
        value = let.value
        if isinstance(value, If):
            value = dataclasses.replace(
                value,
                then_branch=_chain(value.then_branch, aliases),
                else_branch=_chain(value.else_branch, aliases),
            )
        out.append((let.var, value, let.span, let.facts))
        for storage in kills.get(i, []):
            out.append((Var("_", ty=UNIT), Kill.make(storage), None, ()))
    return ir.nest_lets(out, result)
