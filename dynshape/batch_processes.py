"""A session's batch split across two processes: the proof, the work rule and the runner.

``split_plan(module)`` proves that a typed program's batch rows are independent
(``dynshape.analysis.batch_rows``) and pairs the proof with the program's work formula
(``dynshape.analysis.call_work``); ``SplitPlan.runner(machine)`` gives the
``vm.batch_split.BatchSplit`` that runs the compiled program with its batch cut in two. A call
is split when its work, evaluated once per distinct set of input shapes, is at least
``SPLIT_MIN_WORK`` and at least ``SPLIT_MIN_WORK_PER_BYTE`` times the bytes of its inputs and
results: the hand-off costs a message each way (~0.1-0.3 ms) and copies of the worker's
inputs and results, and below that the second core does not pay for it (measured on this
project's 2-core host: design/vm.md, "A second process for the batch"). A plan is plain data
(it may be pickled: the benchmark compiles in a child process).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import sympy

import ir
from vm import VirtualMachine
from vm.batch_split import BatchSplit, RowAxes

from .analysis.batch_rows import NotRowWise, RowSplit, prove_row_split
from .analysis.call_work import call_work

#: Fewest operations (``call_work``) a call must do to be split.
SPLIT_MIN_WORK = 30_000_000
#: Fewest operations per byte of the call's inputs and results (a decode step with its KV
#: cache moves megabytes for little work: GPT-2's at batch 8 split took 2.55x as long).
SPLIT_MIN_WORK_PER_BYTE = 10

#: Distinct input shapes whose decision is kept (a dict per runner; cleared when full).
WORTH_CACHE = 256


@dataclass(frozen=True)
class SplitPlan:
    """A proven row split and the work formula that decides which calls are split."""

    split: RowSplit
    work: sympy.Expr
    """Operations of one call, a formula of the input dims' symbols."""
    moved: sympy.Expr
    """Bytes of one call's inputs and results, a formula of the same symbols."""
    dims: tuple[tuple[sympy.Symbol, int, int], ...]
    """Where each symbol's value is read: ``(symbol, input, axis)``."""

    def describe(self) -> str:
        """One line: along what the batch is cut."""
        return f"split along {self.split.symbol} (input axes {list(self.split.inputs)})"

    def runner(self, machine: VirtualMachine) -> BatchSplit:
        """The runner of ``machine`` (compiled from the planned program), its worker started."""
        axes = RowAxes(self.split.inputs, self.split.outputs, self.split.min_rows)
        return BatchSplit(machine, axes, _worth_rule(self.work, self.moved, self.dims))


def split_plan(module: ir.Module) -> SplitPlan | str:
    """The plan for ``module`` (typed), or a sentence saying why there is none."""
    try:
        split = prove_row_split(module)
    except NotRowWise as e:
        return f"not split: {e.reason}"
    fn = module["main"]
    dims: list[tuple[sympy.Symbol, int, int]] = []
    for i, p in enumerate(fn.params):
        ty = p.type_annotation or p.ty
        for axis, d in enumerate(getattr(ty, "shape", ())):
            if isinstance(d, sympy.Symbol) and all(d != s for s, _, _ in dims):
                dims.append((d, i, axis))
    types = [p.type_annotation or p.ty for p in fn.params] + [fn.body.ty]
    moved = sum((_bytes(t) for ty in types if ty is not None for t in ir.tensor_leaves(ty)), 0)
    # a dim the proof found equal to the inputs' (an arange's length): the work is a formula
    # of the inputs' dims (a free dim makes the rule say "not worth it": KeyError below)
    work = sympy.sympify(call_work(fn)).xreplace(dict(split.equal_dims))
    return SplitPlan(split, work, sympy.sympify(moved), tuple(dims))


def _bytes(t: ir.TensorType) -> Any:
    out: Any = ir.ITEMSIZE.get(t.dtype, 8)
    for d in t.shape:
        out *= d
    return out


def runner(plan: SplitPlan | str, machine: VirtualMachine) -> tuple[BatchSplit | None, str]:
    """``plan``'s runner of ``machine`` and the sentence describing it; None and the reason
    when there is no plan or no worker process can be made (no POSIX, no subprocess)."""
    if isinstance(plan, str):
        return None, plan
    try:
        return plan.runner(machine), plan.describe()
    except OSError as e:
        return None, f"not split: no worker process ({e})"


def _worth_rule(
    work_formula: sympy.Expr,
    moved_formula: sympy.Expr,
    dims: Sequence[tuple[sympy.Symbol, int, int]],
) -> Any:
    work = ir.dim_eval.evaluator(work_formula)  # closures over ints: no sympy per call
    moved = ir.dim_eval.evaluator(moved_formula)
    cache: dict[tuple[Any, ...], bool] = {}

    def worth(args: Sequence[Any]) -> bool:
        key = tuple(a.shape if isinstance(a, np.ndarray) else None for a in args)
        known = cache.get(key)
        if known is None:
            try:
                binding = {s: args[i].shape[axis] for s, i, axis in dims}
                ops = work(binding)
                known = ops >= SPLIT_MIN_WORK and ops >= SPLIT_MIN_WORK_PER_BYTE * moved(binding)
            except (ArithmeticError, KeyError, IndexError, AttributeError):
                known = False  # the VM's own checks will name what is wrong
            if len(cache) >= WORTH_CACHE:
                cache.clear()
            cache[key] = known
        return known

    return worth
