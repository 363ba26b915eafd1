"""A session's batch split across two processes: the proof, the work rule and the runner.

``batch_split(module, machine)`` gives a ``vm.batch_split.BatchSplit`` for a compiled program
whose rows the compiler proves independent (``dynshape.analysis.batch_rows``), or the reason
there is none. A call is split when its work (``dynshape.analysis.call_work``: operations, a
formula of the input dims, evaluated once per distinct set of input shapes) is at least
``SPLIT_MIN_WORK``: the hand-off costs two copies of the worker's piece and a message each
way (~0.1-0.3 ms), and below that the second core does not pay for it (measured on this
project's 2-core host: design/vm.md, "Session 32").
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import sympy

import ir
from vm import VirtualMachine
from vm.batch_split import BatchSplit, RowAxes

from .analysis.batch_rows import NotRowWise, prove_row_split
from .analysis.call_work import call_work

#: Fewest operations (``call_work``) a call must do to be split.
SPLIT_MIN_WORK = 30_000_000

#: Distinct input shapes whose decision is kept (a dict per session; cleared when full).
WORTH_CACHE = 256


def batch_split(module: ir.Module, machine: VirtualMachine) -> tuple[BatchSplit | None, str]:
    """The runner of ``machine`` (compiled from ``module``, typed) with its batch split, and a
    sentence saying along what; or None and why not."""
    try:
        split = prove_row_split(module)
    except NotRowWise as e:
        return None, f"not split: {e.reason}"
    axes = RowAxes(split.inputs, split.outputs, split.min_rows)
    runner = BatchSplit(machine, axes, _worth_rule(module["main"]))
    return runner, f"split along {split.symbol} (input axes {list(split.inputs)})"


def _worth_rule(fn: ir.Function) -> Any:
    work = ir.dim_eval.evaluator(call_work(fn))
    where: list[tuple[sympy.Symbol, int, int]] = []  # symbol, input, axis
    for i, p in enumerate(fn.params):
        ty = p.type_annotation or p.ty
        for axis, d in enumerate(getattr(ty, "shape", ())):
            if isinstance(d, sympy.Symbol) and all(d != s for s, _, _ in where):
                where.append((d, i, axis))
    cache: dict[tuple[Any, ...], bool] = {}

    def worth(args: Sequence[Any]) -> bool:
        key = tuple(a.shape if isinstance(a, np.ndarray) else None for a in args)
        known = cache.get(key)
        if known is None:
            binding = {s: args[i].shape[axis] for s, i, axis in where}
            try:
                known = work(binding) >= SPLIT_MIN_WORK
            except (ArithmeticError, KeyError, IndexError, AttributeError):
                known = False  # the VM's own checks will name what is wrong
            if len(cache) >= WORTH_CACHE:
                cache.clear()
            cache[key] = known
        return known

    return worth
