"""Which inputs and results a function computes row by row: the proof behind a split batch.

A function *computes row by row* along a symbol ``b`` (the batch) when every input whose type
mentions ``b`` has it as one plain dim (its row axis), and every result's rows along its row axis
are computed from the inputs' same rows only: ``f(x)[i] == f(x[i])`` with ``b`` bound to the
number of rows taken. Then a batch can be cut into pieces, each piece run on its own (in another
process: ``vm/batch_split.py``) and the results joined along their row axes, with the answer
the whole batch gives (to the kernels' rounding: a piece may take other kernel paths).

``prove_row_split(module)`` walks ``@main``'s dataflow once per candidate symbol and gives every
value a *row state*:

- ``FIXED``: computed from no input row and with no ``b`` in its type (weights, constants,
  values of other inputs): every piece computes the same value;
- ``Rows(axis, group)``: the dim at ``axis`` is ``b * group``, and the ``group`` consecutive
  entries ``[i * group, (i + 1) * group)`` along it are computed from input row ``i`` only
  (``group`` 1 is the usual case; a reshape of ``(b, s, h)`` to ``(b * s, h)`` gives ``s``);
- ``StridedRows(axis, outer, group)``: an axis of ``outer * b * group`` entries that a
  reshape merged from ``outer`` blocks of rows (PyTorch's multi-head attention flattens its
  ``(tokens, batch)``), each row's entries ``group`` at a time in every block; taken only by
  reshapes, elementwise ops, ``nn.dense`` and transposes;
- ``ShapeOf(dims)``: ``shape_of`` of a value with rows, of which a ``take`` at a constant
  index may read a dim without ``b`` (a model reading its sequence length);
- ``RowIndex(axis, scale, lo, hi)``: integers numbering the rows (``scale * i + r``, ``r`` in
  ``[lo, hi]``), which each piece numbers from 0: fit only to gather a row's own entries
  from a value whose rows are groups of ``scale`` (transformers' exports gather their
  attention masks so);
- ``Unproven(reason)``: a value not proven, of an op that cannot fail, kept in case a
  ``where`` whose condition is decided drops it (dynamo's negative-index clamps read the
  batch as a value in the branch never taken); reaching a result, it refuses;
- a tuple of states for a tuple.

Integer values also have bounds (``row_values.ValueBounds``: dims bounding every entry,
read from fills, running sums, dims read from shapes, their sums and products), which
decide comparisons for every binding of the dims (a decided comparison is the same fill in
every piece) and check that a gather at row numbers stays in its row.

(``row_states.py``.) Each op kind has a rule (``row_rules.RULES``; ops declared elementwise
or broadcast share one) that gives its result's state from its operands' or refuses.
Anything without a rule that touches a row (or whose type mentions ``b`` at all, such as
``shape_of`` of a batch, a range over ``b``, a cumulative sum along the rows, a reduction
over them, control flow, calls of functions) refuses with the reason and the op:
``NotRowWise``. The proof is conservative: a
refusal means "not proven", and nothing is split.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import sympy

import ir
from ir import Call, Constant, Expr, Function, Let, OpPattern, TensorType, Tuple, TupleGetItem, Var

from .dataflow import use_graph
from .row_rules import RULES, SEE_UNPROVEN, never_fails
from .row_states import (
    FIXED,
    NotRowWise,
    RowIndex,
    Rows,
    State,
    StridedRows,
    Unproven,
    kind,
    leaf_types,
    leaves,
    leaves_of,
    same_dim,
    tensor_type,
    what,
)
from .row_values import ValueBounds

__all__ = ["FIXED", "NotRowWise", "RowProof", "RowSplit", "Rows", "prove_row_split"]


@dataclass(frozen=True)
class RowSplit:
    """How a proven function's batch is cut: the symbol, each input's row axis (None: the
    input has no rows and goes whole to every piece) and each result tensor's (None: the same
    value in every piece, taken from the first)."""

    symbol: str
    inputs: tuple[int | None, ...]
    outputs: tuple[int | None, ...]
    min_rows: int = 1
    """The symbol's declared lower bound: no piece may have fewer rows."""
    equal_dims: tuple[tuple[Any, Any], ...] = ()
    """Dims of the program's types found equal to a formula of the inputs' dims, ``(dim,
    formula)``: the length of an ``arange`` up to the batch read from a shape is the batch."""


def prove_row_split(module: ir.Module) -> RowSplit:
    """The row split of ``module``'s ``@main`` (typed), or ``NotRowWise`` with the reason of
    the last candidate symbol tried. Candidates are the plain symbols of the parameters' dims,
    those at axis 0 first."""
    fn = module["main"]
    candidates = _candidates(fn)
    if not candidates:
        raise NotRowWise("no input has a symbolic dim to cut")
    reasons = []
    for symbol in candidates:
        try:
            return RowProof(fn, symbol).split()
        except NotRowWise as e:
            reasons.append(f"along {symbol}: {e.reason}")
    raise NotRowWise("; ".join(reasons))


def _candidates(fn: Function) -> list[sympy.Symbol]:
    first: list[sympy.Symbol] = []
    rest: list[sympy.Symbol] = []
    for p in fn.params:
        ty = p.type_annotation or p.ty
        if not isinstance(ty, TensorType):
            continue
        for axis, d in enumerate(ty.shape):
            if isinstance(d, sympy.Symbol):
                (first if axis == 0 else rest).append(d)
    out: list[sympy.Symbol] = []
    for s in first + rest:
        if s not in out:
            out.append(s)
    return out


class RowProof:
    """One walk of ``fn``'s dataflow with ``symbol`` as the batch."""

    def __init__(self, fn: Function, symbol: sympy.Symbol) -> None:
        self.fn = fn
        self.b = symbol
        self.states: dict[Expr, State] = {}
        self.lets: dict[Var, Expr] = {}
        self.aliases: dict[sympy.Basic, sympy.Expr] = {}
        self.lowest = 1
        if fn.ranges and symbol in fn.ranges:
            self.lowest = max(1, int(fn.ranges[symbol][0]))
        ranges = {s: fn.ranges[s] for s in fn.ranges} if fn.ranges else {}
        if not isinstance(symbol, sympy.Dummy):  # a '?' dim cannot have a range
            ranges[symbol] = (self.lowest, ranges.get(symbol, (0, None))[1])
        self._values = ValueBounds(self.lets, ir.Ranges(ranges))

    # -- the walk ------------------------------------------------------------------------

    def split(self) -> RowSplit:
        inputs = tuple(self._param(p) for p in self.fn.params)
        for p, axis in zip(self.fn.params, inputs, strict=True):
            self.states[p] = FIXED if axis is None else Rows(axis)
        graph = use_graph(self.fn.body)
        for node in graph.order:
            if isinstance(node, Let):
                self.lets[node.var] = node.value
        for node in graph.order:
            if node in self.states:
                continue
            if isinstance(node, Var):
                if node not in self.lets:
                    raise NotRowWise(f"%{node.name_hint} is not bound in @main")
                self.states[node] = self.states[self.lets[node]]
            else:
                self.states[node] = self._state(node)
        outputs = tuple(self._output_axis(s) for s in leaves(self.states[self.fn.body]))
        return RowSplit(str(self.b), inputs, outputs, self.lowest, tuple(self.aliases.items()))

    def _param(self, p: Var) -> int | None:
        ty = p.type_annotation or p.ty
        if not isinstance(ty, TensorType):
            raise NotRowWise(f"input %{p.name_hint} is not a tensor")
        hits = [a for a, d in enumerate(ty.shape) if self.mentions(d)]
        if not hits:
            return None
        if len(hits) > 1 or ty.shape[hits[0]] != self.b:
            raise NotRowWise(f"input %{p.name_hint} ({ty}) has {self.b} other than as one dim")
        return hits[0]

    def _output_axis(self, state: State) -> int | None:
        if isinstance(state, Unproven):
            raise NotRowWise(state.reason)
        if isinstance(state, Rows):
            if state.group != 1:
                raise NotRowWise(f"a result's row axis is {self.b} * {state.group}, not {self.b}")
            return state.axis
        if state is not FIXED:  # a shape with the batch in it: each piece's differs
            raise NotRowWise(f"a result is {kind(state)}")
        return None

    def _state(self, node: Expr) -> State:
        if isinstance(node, Constant):
            return FIXED
        if isinstance(node, Tuple):
            return tuple(self.states[f] for f in node.fields)
        if isinstance(node, TupleGetItem):
            whole = self.states[node.tuple_value]
            if not isinstance(whole, tuple):
                raise NotRowWise("a projection of a value that is not a tuple")
            return whole[node.index]
        if isinstance(node, Let):
            return self.states[node.body]
        if isinstance(node, Call) and node.op is not None:
            try:
                state = self._call(node)
                self._check_result(node, state)
            except NotRowWise as e:
                if not self._never_fails(node):
                    raise
                return Unproven(e.reason)  # refused only if it reaches a result
            return state
        raise NotRowWise(f"{what(node)}: control flow and function values are not proven")

    def _call(self, call: Call) -> State:
        op = call.op
        assert op is not None
        args = [self.states[a] for a in call.args]
        if op.name not in SEE_UNPROVEN:
            for state in leaves_of(args):
                if isinstance(state, Unproven):
                    raise NotRowWise(state.reason)
        rule = RULES.get(op.name)
        if rule is not None:
            return rule(self, call, args)
        if op.pattern in (OpPattern.ELEMWISE, OpPattern.BROADCAST) and not self.attr_mentions(call):
            return self.broadcast(call, args)
        if all(s is FIXED for s in leaves_of(args)) and not self.attr_mentions(call):
            return FIXED  # no row in, no b anywhere: every piece computes the same
        raise NotRowWise(f"{what(call)}: no row rule for {op.name}")

    def _never_fails(self, call: Call) -> bool:
        """Only a value that cannot fail may be refused lazily and dropped unused: a run
        that fails must fail split too."""
        return never_fails(call, self._values.definition)

    def _check_result(self, call: Call, state: State) -> None:
        types = leaf_types(call.ty)
        states = list(leaves(state))
        if len(types) != len(states):
            raise NotRowWise(f"{what(call)}: its result does not match its row state")
        for ty, s in zip(types, states, strict=True):
            if isinstance(s, Unproven):
                continue
            if isinstance(s, RowIndex):
                s = Rows(s.axis)
            if isinstance(s, (Rows, StridedRows)):
                outer = s.outer if isinstance(s, StridedRows) else 1
                if not (0 <= s.axis < len(ty.shape)) or not same_dim(
                    self._dim(ty.shape[s.axis]), outer * self.b * s.group
                ):
                    raise NotRowWise(
                        f"{what(call)}: its row axis is not {outer * self.b * s.group}"
                    )
                others = [d for a, d in enumerate(ty.shape) if a != s.axis]
                if any(self.mentions(d) for d in others):
                    raise NotRowWise(f"{what(call)}: {self.b} in more than its row axis")
            elif any(self.mentions(d) for d in ty.shape):
                raise NotRowWise(f"{what(call)}: {self.b} in the type of a value without rows")

    # -- helpers the rules use ---------------------------------------------------------------

    @property
    def values(self) -> ValueBounds:
        return self._values

    def state(self, expr: Expr) -> State:
        return self.states[expr]

    def alias(self, dim: Any, value: Any) -> None:
        self.aliases[dim] = value

    def _dim(self, d: Any) -> Any:
        return d.xreplace(self.aliases) if self.aliases and isinstance(d, sympy.Basic) else d

    def mentions(self, d: Any) -> bool:
        d = self._dim(d)
        return isinstance(d, sympy.Basic) and self.b in d.free_symbols

    def mentions_any(self, value: Any) -> bool:
        if isinstance(value, sympy.Basic):
            return self.b in value.free_symbols
        if isinstance(value, (list, tuple)):
            return any(self.mentions_any(v) for v in value)
        if isinstance(value, dict):
            return any(self.mentions_any(v) for v in value.values())
        inner = getattr(value, "__dict__", None)
        return isinstance(inner, dict) and any(self.mentions_any(v) for v in inner.values())

    def attr_mentions(self, call: Call) -> bool:
        return any(self.mentions_any(v) for v in call.attrs.values())

    def group_of(self, d: Any) -> ir.Dim | None:
        """``g`` when ``d`` is ``b * g`` with ``g`` free of ``b``, else None."""
        if not self.mentions(d):
            return None
        g = sympy.simplify(self._dim(d) / self.b)
        if self.mentions(g) or not (g.is_Integer or g.is_polynomial()):
            return None
        return int(g) if g.is_Integer else g

    def rows_from_shape(self, call: Expr, shape: Sequence[Any]) -> State:
        """A value built from no row with the given shape: FIXED without ``b``; ``Rows`` with
        one plain ``b`` (every row the same value); anything else refused."""
        hits = [a for a, d in enumerate(shape) if self.mentions(d)]
        if not hits:
            return FIXED
        if len(hits) == 1:
            g = self.group_of(shape[hits[0]])
            if g is not None:
                return Rows(hits[0], g)
        raise NotRowWise(f"{what(call)}: its shape has {self.b} other than as one dim")

    def broadcast(self, call: Call, args: Sequence[State]) -> State:
        """Elementwise after numpy broadcasting: rows of every operand on one output axis."""
        out_rank = len(tensor_type(call).shape)
        found: Rows | StridedRows | None = None
        for arg, state in zip(call.args, args, strict=True):
            rank = len(tensor_type(arg).shape)
            if isinstance(state, (Rows, StridedRows)):
                here = dataclasses.replace(state, axis=state.axis + out_rank - rank)
                if found is not None and found != here:
                    raise NotRowWise(f"{what(call)}: its operands' rows are on different axes")
                found = here
            elif state is not FIXED:
                raise NotRowWise(f"{what(call)}: an operand is {kind(state)}")
        if found is None:
            return FIXED
        for arg, state in zip(call.args, args, strict=True):
            if state is FIXED:
                shape = tensor_type(arg).shape
                at = found.axis - (out_rank - len(shape))
                if at >= 0 and shape[at] != 1:
                    raise NotRowWise(
                        f"{what(call)}: an operand without rows is not broadcast along the rows"
                    )
        return found
