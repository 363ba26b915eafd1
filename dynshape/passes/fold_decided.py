"""Values the analyses decide, folded: the ``fold_decided`` pass.

Assumes: a typed module (``InferTypes`` output), in graph form.
Guarantees: a typed module in which a comparison or logical op whose answer is the same at
every entry for every binding of the dims within the function's ranges
(``analysis.row_values.ValueBounds.decided``) is ``full(answer)`` of its shape, a ``where``
whose condition is decided is the branch it takes (``broadcast_to`` the where's shape where
the branch's differs), and a ``take`` whose index holds ``0, 1, ..., n - 1`` in order over
the ``n`` entries of the gathered axis (``analysis.affine_values``) is a ``reshape`` of its
data. What those nodes no longer read, and nothing else reads, is gone from the program; a
fold that would drop a node that may fail at run time (a run-time check in its type, an op
that can raise: a gather at an index not known in range, a division) is not made, so the
program fails where it failed before and answers what it answered.

Why: exporters write index arithmetic from shapes, and clamp every index the way negative
indices are (``where(i < 0, i + n, i)``, then ``where(i < 0 or i >= n, n * m, i)``): torch's
dynamo exporter does it for each component of an index, RoBERTa for its position ids. The
bounds (a running sum of ones is in ``[0, n - 1]``) decide most of those conditions at
compile time, so every call computed them for nothing: a BERT export at batch 1 spent ~55 us
of its ~650 us on two fused kernels of such arithmetic (design/compiler_fusion.md, "Decided
comparisons"). What the clamps leave is the gather of a flattened ``(batch * seq)`` mask at
``row * seq + column``: every entry once, in order, a reshape (a view).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

import ir
from ir import Call, Constant, Expr, Function, Module, TensorType

from ..analysis.affine_values import AffineValues
from ..analysis.dataflow import UseGraph, children
from ..analysis.row_rules import never_fails
from ..analysis.row_values import COMPARISONS, LOGICAL, ValueBounds
from .base import ModulePass
from .infer_types import CompleteTypes
from .patterns import ChainRewriter, rewrite_chains

_FULL = ir.get_op("full")
_BROADCAST_TO = ir.get_op("broadcast_to")
_RESHAPE = ir.get_op("reshape")
_DECIDABLE = frozenset([*COMPARISONS, *LOGICAL])


@dataclass(frozen=True)
class Fold:
    """What a folded call becomes: its ``answer`` everywhere (a comparison), its operand
    ``branch`` (a ``where``), or its data reshaped to ``shape`` (a ``take`` whose index
    enumerates the gathered axis)."""

    answer: bool | None = None
    branch: int | None = None
    shape: tuple[ir.Dim, ...] | None = None

    def kept(self) -> tuple[int, ...]:
        """The positions of the operands the folded node still reads."""
        if self.shape is not None:
            return (0,)
        return () if self.branch is None else (self.branch,)


class FoldDecided(ModulePass):
    """Fold comparisons and ``where``s their operands' bounds decide, and gathers whose
    index enumerates their axis (see the module docstring)."""

    name = "fold_decided"

    def __init__(self) -> None:
        self.folded = 0
        """How many calls the last ``run`` folded."""

    def run(self, module: Module) -> Module:
        folds: dict[Function, dict[Call, Fold]] = {}

        def find(node: Expr, graph: UseGraph, fn: Function) -> tuple[Call, Fold] | None:
            if fn not in folds:
                folds[fn] = _safe_folds(fn, graph)
            fold = folds[fn].get(node) if isinstance(node, Call) else None
            return None if fold is None else (node, fold)  # type: ignore[return-value]

        out, self.folded = rewrite_chains(module, find, _build)
        return CompleteTypes().run(out) if self.folded else module


def _build(rewriter: ChainRewriter, call: Call, fold: Fold) -> Expr:
    ty = call.ty
    assert isinstance(ty, TensorType)
    if fold.shape is not None:
        data = rewriter.visit(call.args[0])
        return Call(_RESHAPE, (data,), ir.Attrs({"newshape": list(fold.shape)}), span=call.span)
    if fold.branch is None:
        answer = Constant(np.array(bool(fold.answer), dtype=np.bool_))
        attrs = ir.Attrs({"shape": list(ty.shape), "dtype": "bool"})
        return Call(_FULL, (answer,), attrs, span=call.span)
    chosen = rewriter.visit(call.args[fold.branch])
    chosen_ty = call.args[fold.branch].ty
    if isinstance(chosen_ty, TensorType) and _same_shape(chosen_ty.shape, ty.shape):
        return chosen
    return Call(_BROADCAST_TO, (chosen,), ir.Attrs({"shape": list(ty.shape)}), span=call.span)


def _same_shape(a: tuple[ir.Dim, ...], b: tuple[ir.Dim, ...]) -> bool:
    return len(a) == len(b) and all(ir.known_equal(x, y) for x, y in zip(a, b, strict=True))


def _safe_folds(fn: Function, graph: UseGraph) -> dict[Call, Fold]:
    """The folds of ``fn`` that drop no node that may fail: every decided one, then, while a
    node that may fail would be dropped, without the folds through which it is dropped."""
    values = ValueBounds({}, fn.ranges)
    indices = AffineValues(values)
    folds: dict[Call, Fold] = {}
    for node in graph.order:
        if not isinstance(node, Call) or node.op is None or not isinstance(node.ty, TensorType):
            continue
        name = node.op.name
        if name in _DECIDABLE and node.ty.dtype == "bool":
            answer = values.decided(node)
            if answer is not None:
                folds[node] = Fold(answer=answer)
        elif name == "where":
            answer = values.decided(node.args[0])
            if answer is not None:
                folds[node] = Fold(branch=1 if answer else 2)
        elif name == "take":
            shape = indices.enumerated_shape(node)
            if shape is not None:
                folds[node] = Fold(shape=shape)
    while folds:
        failing: list[Expr] = [
            n
            for n in _dropped(fn, graph, folds)
            if isinstance(n, Call) and not never_fails(n, values.definition)
        ]
        through = [c for c, fold in folds.items() if _reaches(c, fold, failing)]
        if not failing or not through:  # (a node no fold drops is not dropped: defensive)
            break
        for call in through:
            del folds[call]
    return folds


def _dropped(fn: Function, graph: UseGraph, folds: dict[Call, Fold]) -> list[Expr]:
    """The nodes no longer read once ``folds`` are made."""
    live: set[int] = set()
    stack: list[Expr] = [fn.body]
    while stack:
        node = stack.pop()
        if id(node) in live:
            continue
        live.add(id(node))
        fold = folds.get(node) if isinstance(node, Call) else None
        if fold is None:
            stack.extend(_operands(node))
        else:
            assert isinstance(node, Call)
            stack.extend(node.args[i] for i in fold.kept())
    return [n for n in graph.order if id(n) not in live]


def _operands(node: Expr) -> list[Expr]:
    return [child for child, _ in children(node)]


def _reaches(call: Call, fold: Fold, targets: list[Expr]) -> bool:
    """Whether a node of ``targets`` is among what ``call``'s fold stops reading."""
    wanted = {id(t) for t in targets}
    seen: set[int] = set()
    stack = [a for i, a in enumerate(call.args) if i not in fold.kept()]
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if id(node) in wanted:
            return True
        stack.extend(_operands(node))
    return False
