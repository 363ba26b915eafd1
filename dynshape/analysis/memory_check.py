"""A checker of planned memory: no two tensors live at the same time overlap in one storage.

``check_no_overlap(module, bindings)`` evaluates, for concrete symbol values, every tensor's byte
range ``[offset, offset + nbytes)`` in its storage and its live interval (``liveness.timeline``:
from its ``alloc_tensor`` to the last use of anything that may alias it), and raises
``MemoryPlanError`` when

- two tensors of one storage are live at the same time and their byte ranges intersect (but
  for an output written over the very bytes of an input that dies at its kernel, where the
  kernel allows it: ``in_place.py``);
- a tensor does not fit in its storage (offset + nbytes > size);
- a storage is killed before the last use of one of its tensors (a use after free), or a tensor
  that is returned lives in a storage that is killed.

Symbols not in ``bindings`` (the ``?`` unknowns that shape functions, calls and ``if``s bind at
run time) take the value ``default``: the plan must be safe for every value, so any is a test.
The check is per function; both branches of an ``if`` are laid out one after the other on the
time axis (they never run together, so that only separates them).
"""

from __future__ import annotations

from collections.abc import Mapping

import sympy

import ir
from ir import Module

from ..errors import CompileError
from .dim_bounds import evaluate
from .in_place import in_place_pairs
from .liveness import END, TensorLife, timeline


class MemoryPlanError(CompileError):
    """The memory plan of a program is wrong (a compiler bug, found by ``check_no_overlap``)."""


def symbol_values(
    module: Module, bindings: Mapping[str | sympy.Basic, int], default: int = 3
) -> dict[sympy.Basic, int]:
    """Values for every symbol of ``module``'s parameters and memory ops: ``bindings`` (by
    name or symbol), ``default`` for the rest."""
    by_name = {str(k) if isinstance(k, str) else k.name: v for k, v in bindings.items()}
    values: dict[sympy.Basic, int] = {}

    def add(d: ir.Dim) -> None:
        for s in ir.free_symbols(d):
            if s not in values:
                named = not ir.is_anonymous(s) and s.name in by_name
                values[s] = by_name[s.name] if named else default

    for fn in module.values():
        for p in fn.params:  # the sizes of what an append grows are the parameters' dims
            for leaf in ir.tensor_leaves(p.ty) if p.ty is not None else ():
                for d in leaf.shape:
                    add(d)
        for tl in timeline(fn).tensors.values():
            for d in (tl.offset, *tl.shape):
                add(d)
        for sl in timeline(fn).storages.values():
            add(sl.size)
    return values


def check_no_overlap(
    module: Module, bindings: Mapping[str | sympy.Basic, int], default: int = 3
) -> int:
    """Raise ``MemoryPlanError`` if the plan is wrong at ``bindings``; return the number of
    pairs of simultaneously live tensors that share a storage (checked disjoint)."""
    values = symbol_values(module, bindings, default)
    pairs = 0
    for name, fn in module.items():
        if fn.is_primitive:
            continue
        tl = timeline(fn)
        in_place = in_place_pairs(fn)
        for storage in tl.storages.values():
            size = evaluate(storage.size, values)
            spans: list[tuple[TensorLife, int, int]] = []
            for t in storage.tensors:
                lo = evaluate(t.offset, values)
                hi = lo + evaluate(t.nbytes, values)
                what = f"@{name}: tensor %{t.var.name_hint} in %{storage.var.name_hint}"
                if hi > size:
                    raise MemoryPlanError(f"{what}: bytes [{lo}, {hi}) but the storage has {size}")
                if storage.kill is not None and t.end > storage.kill:
                    used = "returned" if t.end == END else f"used at step {t.end}"
                    raise MemoryPlanError(
                        f"{what}: {used}, after the storage is killed at step {storage.kill}"
                    )
                spans.append((t, lo, hi))
            for i, (a, alo, ahi) in enumerate(spans):
                for b, blo, bhi in spans[i + 1 :]:
                    if a.start > b.end or b.start > a.end:
                        continue  # never live together
                    pairs += 1
                    same_bytes = (alo, ahi) == (blo, bhi)
                    written_over = in_place.get(b.var) is a.var or in_place.get(a.var) is b.var
                    if same_bytes and written_over:
                        continue  # an output written over the input that dies at its kernel
                    if alo < bhi and blo < ahi and min(ahi - alo, bhi - blo) > 0:
                        raise MemoryPlanError(
                            f"@{name}: %{a.var.name_hint} (bytes [{alo}, {ahi}), steps "
                            f"{a.start}-{a.end}) and %{b.var.name_hint} (bytes [{blo}, {bhi}), "
                            f"steps {b.start}-{b.end}) overlap in %{storage.var.name_hint}"
                        )
    return pairs
