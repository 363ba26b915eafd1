"""The row rules of ``batch_rows``: each op kind's result state from its operands' states.

A rule returns the result's state (``Rows``, ``FIXED``, a ``ShapeOf``, a ``RowIndex``, an
``Unproven`` or a tuple of them) or raises ``NotRowWise`` saying why the rows are not proven
to stay apart. Ops declared elementwise or broadcast without a rule here take
``Proof.broadcast``. Only the ops of ``SEE_UNPROVEN`` see an ``Unproven`` operand (they may
drop it); any other op with one refuses with its reason.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import sympy

from ir import Call, Constant, Expr

from .row_states import (
    FIXED,
    NotRowWise,
    Proof,
    RowIndex,
    Rows,
    ShapeOf,
    State,
    StridedRows,
    Unproven,
    axis_index,
    kind,
    leaf_types,
    leaves_of,
    op_name,
    product,
    same_dim,
    tensor_type,
    what,
)
from .row_values import COMPARISONS, LOGICAL

Rule = Callable[[Proof, Call, list[State]], State]
Term = tuple[Any, Any, Any]
"""A term of index arithmetic: (row-number scale, least, greatest other part)."""
RULES: dict[str, Rule] = {}


#: Ops that cannot fail at run time when their type has no run-time check (``take`` only
#: reading a dim of a shape; not a division, a gather, an ``arange`` of a computed step):
#: their refusals wait for a use (``Unproven``), ``fold_decided`` may drop them.
NEVER_FAIL = frozenset(
    [
        *("add", "subtract", "multiply", "minimum", "maximum", "negative", "abs", "where"),
        *("cast", "full", "zeros", "ones", "cumsum", "shape_of", "take", "strided_slice"),
        *("expand_dims", "squeeze", "reshape", "transpose", "broadcast_to", "stack"),
        *("concatenate", *COMPARISONS, *LOGICAL),
    ]
)


def never_fails(call: Call, definition: Callable[[Expr], Expr]) -> bool:
    """Whether ``call`` cannot fail at run time: no run-time check in its type and an op of
    ``NEVER_FAIL`` (a ``take`` only at a constant index within the static length it reads:
    a dim of a shape, an entry along an axis of a known size); ``definition`` sees through
    let-bound vars."""
    if call.facts or call.op is None or call.op.name not in NEVER_FAIL:
        return False
    if call.op.name != "take":
        return True
    data, index = (definition(a) for a in call.args)
    if not isinstance(index, Constant) or index.value.ndim:
        return False
    if op_name(data) == "shape_of":
        assert isinstance(data, Call)
        length: Any = len(tensor_type(data.args[0]).shape)
    else:
        shape = tensor_type(call.args[0]).shape
        axis = call.attrs.axis
        length = product(shape) if axis is None else (shape[axis % len(shape)] if shape else 0)
    # (past the rank, or the axis, the gather fails)
    return isinstance(length, int) and -length <= int(index.value) < length


#: Ops whose rule sees ``Unproven`` operands, and may drop them.
SEE_UNPROVEN = frozenset(["where", "arange", "take", *COMPARISONS, *LOGICAL])


def _rule(*names: str) -> Callable[[Rule], Rule]:
    def register(rule: Rule) -> Rule:
        for name in names:
            RULES[name] = rule
        return rule

    return register


def _only_first(proof: Proof, call: Call, args: list[State], others: str) -> Rows | None:
    """The first operand's rows (None when FIXED); every other operand must be FIXED."""
    for state in args[1:]:
        if state is not FIXED:
            raise NotRowWise(f"{what(call)}: its {others} must not depend on the rows")
    first = args[0]
    if first is FIXED:
        return None
    if not isinstance(first, Rows):
        raise NotRowWise(f"{what(call)}: an operand is {kind(first)}")
    return first


def _rows_unless_attr(
    proof: Proof, call: Call, args: list[State], others: str, attribute: str
) -> Rows | None:
    """``_only_first``, refusing a call without rows whose attribute (``attribute``: what
    the message names) mentions the batch: its value would differ between pieces."""
    rows = _only_first(proof, call, args, others)
    if rows is None and proof.attr_mentions(call):
        raise NotRowWise(f"{what(call)}: {attribute} mentions {proof.b}")
    return rows


def _strided_or_rows(
    proof: Proof, call: Call, args: list[State], others: str
) -> Rows | StridedRows | None:
    """``_only_first`` for the ops that keep every entry on its axis: strided rows pass."""
    if isinstance(args[0], StridedRows):
        _only_first(proof, call, [FIXED, *args[1:]], others)
        return args[0]
    return _only_first(proof, call, args, others)


def _carries_index(rule: Rule) -> Rule:
    """A layout rule that also moves a ``RowIndex`` operand: its entries are kept, its row
    axis is where the rule puts the rows."""

    def carry(proof: Proof, call: Call, args: list[State]) -> State:
        first = args[0] if args else None
        if not isinstance(first, RowIndex):
            return rule(proof, call, args)
        moved = rule(proof, call, [Rows(first.axis), *args[1:]])
        if not isinstance(moved, Rows) or moved.group != 1:
            raise NotRowWise(f"{what(call)}: a row number whose rows do not stay one axis")
        return RowIndex(moved.axis, first.scale, first.lo, first.hi, varies=first.varies)

    return carry


@_rule("broadcast_to")
@_carries_index
def _broadcast_to(proof: Proof, call: Call, args: list[State]) -> State:
    if args[0] is FIXED:
        return proof.rows_from_shape(call, tensor_type(call).shape)
    return proof.broadcast(call, args)


@_rule("full", "zeros", "ones")
def _full(proof: Proof, call: Call, args: list[State]) -> State:
    _only_first(proof, call, [FIXED, *args], "fill value")
    return proof.rows_from_shape(call, tensor_type(call).shape)


@_rule("nn.dense")
def _dense(proof: Proof, call: Call, args: list[State]) -> State:
    rows = _strided_or_rows(proof, call, args, "weight")
    if rows is None:
        return FIXED
    if rows.axis == len(tensor_type(call.args[0]).shape) - 1:
        raise NotRowWise(f"{what(call)}: the rows are the contracted axis")
    return rows


@_rule("nn.matmul")
def _matmul(proof: Proof, call: Call, args: list[State]) -> State:
    ra, rb = len(tensor_type(call.args[0]).shape), len(tensor_type(call.args[1]).shape)
    out = len(tensor_type(call).shape)
    if ra < 2 or rb < 2:
        if any(isinstance(s, Rows) for s in args):
            raise NotRowWise(f"{what(call)}: a product of a vector with rows")
        return FIXED
    found: Rows | None = None
    for state, rank, side in ((args[0], ra, "a"), (args[1], rb, "b")):
        if state is FIXED:
            continue
        if not isinstance(state, Rows):
            raise NotRowWise(f"{what(call)}: an operand is {kind(state)}")
        if state.axis == rank - 1 - (side == "b"):  # a's last axis, b's second last: contracted
            raise NotRowWise(f"{what(call)}: the rows are the contracted axis")
        if state.axis == rank - 2:  # a's rows (M)
            here = Rows(out - 2, state.group)
        elif state.axis == rank - 1:  # b's columns (N)
            here = Rows(out - 1, state.group)
        else:
            here = Rows(state.axis + out - rank, state.group)
        if found is not None and (found != here or here.axis >= out - 2):
            raise NotRowWise(f"{what(call)}: both operands have rows, not on a batch axis")
        found = here
    if found is None:
        return FIXED
    for state, arg in zip(args, call.args, strict=True):
        shape = tensor_type(arg).shape
        at = found.axis - (out - len(shape))
        if state is FIXED and found.axis < out - 2 and at >= 0 and shape[at] != 1:
            raise NotRowWise(f"{what(call)}: an operand without rows is not broadcast")
    return found


@_rule("nn.conv2d", "nn.conv2d_transpose", "nn.conv3d")
def _conv(proof: Proof, call: Call, args: list[State]) -> State:
    rows = _only_first(proof, call, args, "weight")
    if rows is None:
        return FIXED
    if rows.axis != 0 or rows.group != 1:
        raise NotRowWise(f"{what(call)}: the rows are not the images (axis 0)")
    return rows


@_rule("nn.max_pool2d", "nn.avg_pool2d", "nn.global_avg_pool2d", "nn.global_max_pool2d", "resize")
def _images(proof: Proof, call: Call, args: list[State]) -> State:
    return _conv(proof, call, args)


@_rule("nn.bias_add")
def _bias_add(proof: Proof, call: Call, args: list[State]) -> State:
    rows = _only_first(proof, call, args, "bias")
    if rows is None:
        return FIXED
    if axis_index(call.attrs.axis, len(tensor_type(call).shape)) == rows.axis:
        raise NotRowWise(f"{what(call)}: the bias is added along the rows")
    return rows


@_rule("nn.softmax", "nn.log_softmax", "cumsum", "cumprod", "nn.layer_norm", "nn.rms_norm")
def _along_axis(proof: Proof, call: Call, args: list[State]) -> State:
    rows = _rows_unless_attr(proof, call, args, "scale and shift", "an attribute")
    if rows is None:
        return FIXED
    rank = len(tensor_type(call.args[0]).shape)
    axis = call.attrs.axis
    if axis is None:
        raise NotRowWise(f"{what(call)}: along every axis, the rows too")
    reach = (
        range(axis_index(axis, rank), rank) if op_name(call) in _NORMS else [axis_index(axis, rank)]
    )
    if rows.axis in reach:
        numbered = _row_numbers(proof, call, rows)
        if numbered is None:
            raise NotRowWise(f"{what(call)}: computed along the rows")
        return numbered
    return rows


def _row_numbers(proof: Proof, call: Call, rows: Rows) -> RowIndex | None:
    """A running sum along the rows of one integer value ``c`` everywhere (a fill): row ``i``
    holds ``c * i`` (exclusive) or ``c * (i + 1)``, whatever rows the run has."""
    if op_name(call) != "cumsum" or rows.group != 1 or call.attrs.reverse:
        return None
    step = proof.values.exact(call.args[0])
    if step is None or proof.mentions(step):
        return None
    start = 0 if call.attrs.exclusive else step
    return RowIndex(rows.axis, step, start, start)


_NORMS = ("nn.layer_norm", "nn.rms_norm")


@_rule("topk", "dyn.topk", "sort", "argsort")
def _ordered_along_axis(proof: Proof, call: Call, args: list[State]) -> State:
    """Sorting and top-k order each lane along ``axis`` on its own: rows kept unless ``axis``
    is theirs (``dyn.topk``'s ``k`` must be the same in every piece)."""
    rows = _rows_unless_attr(proof, call, args, "k", "an attribute")
    count = len(leaf_types(call.ty))
    if rows is None:
        return FIXED if count == 1 else tuple(FIXED for _ in range(count))
    if axis_index(call.attrs.axis, len(tensor_type(call.args[0]).shape)) == rows.axis:
        raise NotRowWise(f"{what(call)}: orders along the rows")
    return rows if count == 1 else tuple(rows for _ in range(count))


@_rule("nn.pad")
def _pad(proof: Proof, call: Call, args: list[State]) -> State:
    rows = _only_first(proof, call, args, "operand")
    if rows is None:
        return FIXED
    width = call.attrs.pad_width
    if rows.axis < len(width) and any(w != 0 for w in width[rows.axis]):
        raise NotRowWise(f"{what(call)}: pads the rows")
    return rows


@_rule("tile")
def _tile(proof: Proof, call: Call, args: list[State]) -> State:
    """numpy's ``tile``: ``reps`` longer than the rank puts new axes in front."""
    rows = _rows_unless_attr(proof, call, args, "operand", "a repeat count")
    if rows is None:
        return FIXED
    reps = list(call.attrs.reps)
    rank = len(tensor_type(call.args[0]).shape)
    reps = [1] * (rank - len(reps)) + reps
    axis = rows.axis + len(reps) - rank
    if any(proof.mentions_any(r) for r in reps) or reps[axis] != 1:
        raise NotRowWise(f"{what(call)}: repeats the rows")
    return Rows(axis, rows.group)


@_rule("repeat")
def _repeat(proof: Proof, call: Call, args: list[State]) -> State:
    """Each entry ``repeats`` times in a row: along the rows' axis (or the flattened value,
    when the rows lead it) a row's entries stay one run, ``repeats`` times longer."""
    rows = _only_first(proof, call, args, "operand")
    if rows is None:
        return FIXED
    repeats, axis = call.attrs.repeats, call.attrs.axis
    shape = tensor_type(call.args[0]).shape
    if axis is not None and axis_index(axis, len(shape)) != rows.axis:
        return rows
    if repeats == 0:  # empty: no row's entries, the same in every piece
        return proof.rows_from_shape(call, tensor_type(call).shape)
    if axis is not None:
        return Rows(rows.axis, rows.group * repeats)
    if not same_dim(product(shape[: rows.axis]), 1):
        raise NotRowWise(f"{what(call)}: flattens axes in front of the rows")
    return Rows(0, rows.group * product(shape[rows.axis + 1 :]) * repeats)


@_rule("sum", "mean", "max", "min", "prod", "argmax", "argmin")
def _reduce(proof: Proof, call: Call, args: list[State]) -> State:
    rows = _only_first(proof, call, args, "operand")
    if rows is None:
        return FIXED
    rank = len(tensor_type(call.args[0]).shape)
    axes = call.attrs.axis
    reduced = set(range(rank)) if axes is None else {axis_index(a, rank) for a in axes}
    if call.attrs.exclude:
        reduced = set(range(rank)) - reduced
    if rows.axis in reduced:
        raise NotRowWise(f"{what(call)}: reduces the rows")
    if call.attrs.keepdims:
        return rows
    return Rows(rows.axis - sum(1 for a in reduced if a < rows.axis), rows.group)


@_rule("transpose")
@_carries_index
def _transpose(proof: Proof, call: Call, args: list[State]) -> State:
    rows = _strided_or_rows(proof, call, args, "operand")
    if rows is None:
        return FIXED
    rank = len(tensor_type(call.args[0]).shape)
    axes = call.attrs.axes
    perm = list(reversed(range(rank))) if axes is None else [axis_index(a, rank) for a in axes]
    return dataclasses.replace(rows, axis=perm.index(rows.axis))


@_rule("expand_dims")
@_carries_index
def _expand_dims(proof: Proof, call: Call, args: list[State]) -> State:
    rows = _only_first(proof, call, args, "operand")
    if rows is None:
        return FIXED
    rank = len(tensor_type(call.args[0]).shape)
    axis = call.attrs.axis
    axis = axis + rank + 1 if axis < 0 else axis
    return Rows(rows.axis + call.attrs.num_newaxis * (axis <= rows.axis), rows.group)


@_rule("squeeze", "reshape", "nn.batch_flatten")
@_carries_index
def _reshape(proof: Proof, call: Call, args: list[State]) -> State:
    """A C-order reshape moves no entry in the flattened value, where each row's entries are
    runs of ``inner`` entries, one run in each of ``outer`` blocks: the result keeps rows
    when one axis holds ``b`` and its axes before and after split ``outer`` and ``inner``
    exactly (``StridedRows`` when blocks remain on the row axis)."""
    state = args[0]
    _only_first(proof, call, [FIXED, *args[1:]], "new shape")
    if state is FIXED:
        return FIXED
    if not isinstance(state, (Rows, StridedRows)):
        raise NotRowWise(f"{what(call)}: an operand is {kind(state)}")
    src, dst = tensor_type(call.args[0]).shape, tensor_type(call).shape
    blocks = state.outer if isinstance(state, StridedRows) else 1
    outer = product(src[: state.axis]) * blocks
    inner = state.group * product(src[state.axis + 1 :])
    hits = [a for a, d in enumerate(dst) if proof.mentions(d)]
    if len(hits) != 1:
        raise NotRowWise(f"{what(call)}: the rows do not stay one axis")
    (axis,) = hits
    both = proof.group_of(dst[axis])  # the row axis is blocks * b * group
    group = _quotient(inner, product(dst[axis + 1 :]))
    if both is None or group is None:
        raise NotRowWise(f"{what(call)}: the reshape mixes rows")
    blocks_here = _quotient(both, group)
    if blocks_here is None or not same_dim(blocks_here * product(dst[:axis]), outer):
        raise NotRowWise(f"{what(call)}: the axes before the rows change")
    if same_dim(blocks_here, 1):
        return Rows(axis, group)
    return StridedRows(axis, blocks_here, group)


def _quotient(a: Any, b: Any) -> Any:
    """``a / b`` when it is a polynomial of the dims with integer coefficients (entries split
    evenly), else None."""
    q = sympy.cancel(sympy.sympify(a) / sympy.sympify(b))
    if q.is_Integer:
        return int(q) if q > 0 else None
    if q.as_numer_denom()[1] != 1 or not q.free_symbols:
        return None
    try:  # (a floor division in a dim is one more generator, an integer)
        coefficients = sympy.Poly(q).coeffs()
    except sympy.PolynomialError:
        return None
    return q if all(c.is_Integer for c in coefficients) else None


@_rule("shape_of")
def _shape_of(proof: Proof, call: Call, args: list[State]) -> State:
    rows = _only_first(proof, call, args, "operand")
    return FIXED if rows is None else ShapeOf(tuple(tensor_type(call.args[0]).shape))


@_rule("take")
def _take(proof: Proof, call: Call, args: list[State]) -> State:
    data, indices = args
    picked = proof.values.picked_field(call)
    if picked is not None:
        data = proof.state(picked)
    for state in (data, indices):
        if isinstance(state, Unproven):
            raise NotRowWise(state.reason)
    if isinstance(indices, RowIndex):
        return _gather_own_rows(proof, call, data, indices)
    if isinstance(data, RowIndex):
        if indices is not FIXED or call.attrs.axis is None:
            raise NotRowWise(f"{what(call)}: gathers row numbers across the rows")
        moved = _gather(proof, call, Rows(data.axis), FIXED)
        assert isinstance(moved, Rows)
        return RowIndex(moved.axis, data.scale, data.lo, data.hi, varies=data.varies)
    return _gather(proof, call, data, indices)


def _gather(proof: Proof, call: Call, data: State, indices: State) -> State:
    axis = call.attrs.axis
    if isinstance(data, ShapeOf):
        index = call.args[1]
        if not (isinstance(index, Constant) and index.value.ndim == 0 and indices is FIXED):
            raise NotRowWise(f"{what(call)}: reads a shape with {proof.b} at a computed index")
        at = int(index.value)
        if not -len(data.dims) <= at < len(data.dims):
            raise NotRowWise(f"{what(call)}: reads a shape of rank {len(data.dims)} at {at}")
        dim = data.dims[at]
        if proof.mentions(dim):
            raise NotRowWise(f"{what(call)}: reads {proof.b} from a shape as a value")
        return FIXED
    if data is FIXED:
        if indices is FIXED:
            return FIXED
        if not isinstance(indices, Rows):
            raise NotRowWise(f"{what(call)}: its indices are {kind(indices)}")
        # each output row gathers with that row's indices
        before = 0 if axis is None else axis_index(axis, len(tensor_type(call.args[0]).shape))
        return Rows(indices.axis + before, indices.group)
    if not isinstance(data, Rows) or indices is not FIXED or axis is None:
        raise NotRowWise(f"{what(call)}: gathers across the rows")
    axis = axis_index(axis, len(tensor_type(call.args[0]).shape))
    if axis == data.axis:
        raise NotRowWise(f"{what(call)}: gathers along the rows")
    index_rank = len(tensor_type(call.args[1]).shape)
    return data if data.axis < axis else Rows(data.axis + index_rank - 1, data.group)


def _gather_own_rows(proof: Proof, call: Call, data: State, index: RowIndex) -> State:
    """``take(data, scale * i + r)`` along ``data``'s rows, each a group of ``scale``
    entries, with ``r >= 0`` the same in either run: row ``i`` reads its own group from
    ``r``, in the whole run and in a piece alike (each numbering its rows from 0). An ``r``
    of ``scale`` or more reads a later row: the same row in a piece that holds it, else past
    the piece's end, where the gather fails and the caller runs the whole batch (a decoder's
    mask of ``total_seq`` columns read up to ``past_seq + seq - 1``: equal in every valid
    run, unrelated in the types). Never an earlier row: a negative index wraps, silently."""
    if data is FIXED:
        raise NotRowWise(f"{what(call)}: gathers from a value without rows at row numbers")
    if not isinstance(data, Rows):
        raise NotRowWise(f"{what(call)}: gathers at row numbers from {kind(data)}")
    shape = tensor_type(call.args[0]).shape
    if call.attrs.axis is None:  # the flattened data: rows on axis 0 only
        if data.axis != 0:
            raise NotRowWise(f"{what(call)}: gathers from flattened rows not on axis 0")
        axis, group = 0, data.group * product(shape[1:])
    else:
        axis, group = axis_index(call.attrs.axis, len(shape)), data.group
    if axis != data.axis or not same_dim(index.scale, group):
        raise NotRowWise(
            f"{what(call)}: row numbers scaled by {index.scale} for rows of {group} entries"
        )
    if proof.values.compare(index.lo, ">=", 0) is not True:
        raise NotRowWise(f"{what(call)}: a row number may index an earlier row's entries")
    # Past the group, a row reads the next row's entries; where ``r`` is the same in every
    # row, the last row does too and the whole run fails with the piece. Where ``r`` comes
    # from the row's data, some row may reach past while the last does not: a piece ending
    # there would fail where the whole run does not (found by the mutated idioms: ids + 2
    # clamped to ``[0, 6]`` for rows of 6), so ``r`` must be proven inside the group.
    if index.varies and proof.values.compare(index.hi, "<", group) is not True:
        raise NotRowWise(f"{what(call)}: an index from the row's data may reach the next row")
    # a bad index is out of range (the gather fails) in the whole run and in a piece
    if index.beyond is not None and not proof.values.compare(index.beyond, ">=", proof.b * group):
        raise NotRowWise(f"{what(call)}: a bad index may land in another row")
    return Rows(axis + index.axis)


@_rule(*COMPARISONS, *LOGICAL)
def _decidable(proof: Proof, call: Call, args: list[State]) -> State:
    """A comparison its operands' bounds decide is one value everywhere: a fill."""
    if proof.values.decided(call) is not None:
        return proof.rows_from_shape(call, tensor_type(call).shape)
    return proof.broadcast(call, args)


@_rule("where")
def _where(proof: Proof, call: Call, args: list[State]) -> State:
    """With a decided condition, the branch taken (the other only lends its shape)."""
    verdict = proof.values.decided(call.args[0])
    if verdict is None:
        clamped = _clamped_index(proof, call, args)
        return clamped if clamped is not None else proof.broadcast(call, args)
    kept = 1 if verdict else 2
    chosen = args[kept]
    if isinstance(chosen, Unproven):
        return chosen
    shapes: list[State] = [
        state if i == kept else proof.rows_from_shape(arg, tensor_type(arg).shape)
        for i, (arg, state) in enumerate(zip(call.args, args, strict=True))
    ]
    if not isinstance(chosen, RowIndex):
        return proof.broadcast(call, shapes)
    shapes[kept] = Rows(chosen.axis)
    moved = proof.broadcast(call, shapes)
    assert isinstance(moved, Rows)
    return RowIndex(moved.axis, chosen.scale, chosen.lo, chosen.hi, varies=chosen.varies)


def _clamped_index(proof: Proof, call: Call, args: list[State]) -> RowIndex | None:
    """``where(i < 0 or i >= n, bad, i)`` with ``bad`` at least a multiple of the batch (an
    index no row has): an index in ``[0, n - 1]`` or ``bad``, a ``RowIndex`` of scale 0."""
    for kept, other in ((2, 1), (1, 2)):
        bad = proof.values.of(call.args[other])
        state = args[kept]
        if bad is None or not proof.mentions(bad[0]):
            continue
        if not (state is FIXED or (isinstance(state, Rows) and state.group == 1)):
            continue
        bounds = proof.values.refined(call.args[kept], call.args[0], holds=kept == 1)
        if bounds is None or proof.mentions(bounds[0]) or proof.mentions(bounds[1]):
            continue
        shapes = list(args)
        shapes[other] = proof.rows_from_shape(call.args[other], tensor_type(call.args[other]).shape)
        moved = proof.broadcast(call, shapes)
        if isinstance(moved, Rows) and moved.group == 1:
            varies = state is not FIXED  # clamped from the row's own data
            return RowIndex(moved.axis, 0, bounds[0], bounds[1], beyond=bad[0], varies=varies)
    return None


@_rule("add", "subtract", "multiply")
def _arithmetic(proof: Proof, call: Call, args: list[State]) -> State:
    """Row numbers plus or minus values of known bounds, or times one known factor."""
    if not any(isinstance(s, RowIndex) for s in args):
        return proof.broadcast(call, args)
    terms: list[Term] = []
    beyond: list[Any] = []
    for arg, state in zip(call.args, args, strict=True):
        if isinstance(state, RowIndex):
            terms.append((state.scale, state.lo, state.hi))
            beyond.append(state.beyond)
            continue
        beyond.append(None)
        bounds = proof.values.of(arg)
        if (
            not (state is FIXED or (isinstance(state, Rows) and state.group == 1))
            or bounds is None
            or proof.mentions(bounds[0])
            or proof.mentions(bounds[1])
        ):
            raise NotRowWise(f"{what(call)}: a row number with a value of unknown bounds")
        terms.append((0, bounds[0], bounds[1]))
    (s0, lo0, hi0), (s1, lo1, hi1) = terms
    name = op_name(call)
    if name == "add":
        scale, lo, hi = s0 + s1, lo0 + lo1, hi0 + hi1
        # a bad index plus the other term's least value (its row number adds >= 0)
        pairs = ((beyond[0], lo1), (beyond[1], lo0))
        bad = [b + low for b, low in pairs if b is not None]
        if bad and not all(proof.values.compare(s, ">=", 0) for s in (s0, s1)):
            raise NotRowWise(f"{what(call)}: a bad index plus a row number of unknown sign")
        far = bad[0] if len(bad) == 1 else (sympy.Min(*bad) if bad else None)
    elif name == "subtract" and beyond == [None, None]:
        scale, lo, hi, far = s0 - s1, lo0 - hi1, hi0 - lo1, None
    elif name == "multiply":
        factor = _factor(proof, terms, beyond)
        if factor is None:
            raise NotRowWise(f"{what(call)}: a row number times a value not known")
        (scale, lo, hi, far), k = factor
        scale, lo, hi, far = scale * k, lo * k, hi * k, None if far is None else far * k
    else:
        raise NotRowWise(f"{what(call)}: a bad index subtracted")
    moved = proof.broadcast(call, [Rows(s.axis) if isinstance(s, RowIndex) else s for s in args])
    if not isinstance(moved, Rows) or moved.group != 1:
        raise NotRowWise(f"{what(call)}: a row number whose rows do not stay one axis")
    varies = any(isinstance(s, Rows) or (isinstance(s, RowIndex) and s.varies) for s in args)
    return RowIndex(moved.axis, scale, lo, hi, far, varies)


def _factor(
    proof: Proof, terms: list[Term], beyond: list[Any]
) -> tuple[tuple[Any, Any, Any, Any], Any] | None:
    """The row-number term (with its bad index) and the one non-negative value the other
    term has everywhere."""
    for (index, far), (other, other_far) in (
        ((terms[0], beyond[0]), (terms[1], beyond[1])),
        ((terms[1], beyond[1]), (terms[0], beyond[0])),
    ):
        scale, lo, hi = other
        known = scale == 0 and other_far is None and same_dim(lo, hi)
        if known and proof.values.compare(lo, ">=", 0) is True:
            return (*index, far), lo
    return None


@_rule("arange")
def _arange(proof: Proof, call: Call, args: list[State]) -> State:
    """``arange(0, b)``: the row numbers (the batch read from a shape as its length)."""
    values = proof.values
    stop = values.exact(call.args[1])
    if (
        stop is not None
        and values.exact(call.args[0]) == 0
        and values.exact(call.args[2]) == 1
        and same_dim(stop, proof.b)
    ):
        (length,) = tensor_type(call).shape
        if not proof.mentions(length) and isinstance(length, sympy.Symbol):
            proof.alias(length, proof.b)  # the range's length is the batch in every run
        if proof.mentions(length):
            return RowIndex(0, 1, 0, 0)
    for state in leaves_of(args):
        if isinstance(state, Unproven):
            raise NotRowWise(state.reason)
    if all(s is FIXED for s in args) and not proof.attr_mentions(call):
        return FIXED
    raise NotRowWise(f"{what(call)}: a range over {proof.b}")


@_rule("strided_slice")
def _strided_slice(proof: Proof, call: Call, args: list[State]) -> State:
    rows = _rows_unless_attr(proof, call, args, "operand", "a slice bound")
    if rows is None:
        return FIXED
    begin, end, strides = call.attrs.begin, call.attrs.end, call.attrs.strides
    for bounds in (begin, end, strides or []):
        for a, v in enumerate(bounds):
            if a != rows.axis and proof.mentions_any(v):
                raise NotRowWise(f"{what(call)}: a slice bound mentions {proof.b}")
    if rows.axis < len(begin):
        start = begin[rows.axis]
        stop = end[rows.axis] if rows.axis < len(end) else None
        step = strides[rows.axis] if strides and rows.axis < len(strides) else 1
        whole = stop is None or (isinstance(stop, int) and stop >= 2**62)
        whole = whole or same_dim(stop, proof.b * rows.group)
        if start != 0 or step != 1 or not whole:
            raise NotRowWise(f"{what(call)}: slices the rows")
    return rows


@_rule("concatenate", "stack")
def _join(proof: Proof, call: Call, args: list[State]) -> State:
    (fields,) = args
    if not isinstance(fields, tuple):
        raise NotRowWise(f"{what(call)}: its operand is not a tuple")
    rows = {s for s in fields}
    if rows == {FIXED}:
        return FIXED
    (state,) = rows if len(rows) == 1 else (None,)
    if not isinstance(state, Rows):
        raise NotRowWise(f"{what(call)}: its fields' rows differ")
    rank = len(leaf_types(call.args[0].ty)[0].shape)
    if op_name(call) == "stack":
        axis = axis_index(call.attrs.axis, rank + 1)
        return Rows(state.axis + (axis <= state.axis), state.group)
    if axis_index(call.attrs.axis, rank) == state.axis:
        raise NotRowWise(f"{what(call)}: joins along the rows")
    return state


@_rule("split")
def _split(proof: Proof, call: Call, args: list[State]) -> State:
    rows = _rows_unless_attr(proof, call, args, "operand", "a split point")
    count = len(leaf_types(call.ty))
    if rows is None:
        return tuple(FIXED for _ in range(count))
    if axis_index(call.attrs.axis, len(tensor_type(call.args[0]).shape)) == rows.axis:
        raise NotRowWise(f"{what(call)}: splits the rows")
    return tuple(rows for _ in range(count))


@_rule("nn.lstm", "nn.gru", "nn.rnn")
def _recurrent(proof: Proof, call: Call, args: list[State]) -> State:
    """ONNX's layouts: ``X`` is ``(seq, batch, in)`` (``layout=0``) or ``(batch, seq, in)``;
    ``Y`` ``(seq, dirs, batch, hidden)`` or ``(batch, seq, dirs, hidden)``; the states
    ``(dirs, batch, hidden)`` or ``(batch, dirs, hidden)``."""
    batch_first = call.attrs.layout == 1
    x_axis, y_axis, h_axis = (0, 0, 0) if batch_first else (1, 2, 1)
    x, rest = args[0], args[1:]
    names = [o.name for o in call.op.operands] if call.op is not None else []
    for name, state in zip(names[1:], rest, strict=True):
        want = {"sequence_lens": 0, "initial_h": h_axis, "initial_c": h_axis}.get(name)
        if state is FIXED:
            continue
        if want is None or state != Rows(want):
            raise NotRowWise(f"{what(call)}: its {name} does not have rows on its batch axis")
    if x is FIXED:
        if any(s is not FIXED for s in rest):
            raise NotRowWise(f"{what(call)}: rows in its states but not in its input")
        return tuple(FIXED for _ in leaf_types(call.ty))
    if x != Rows(x_axis):
        raise NotRowWise(f"{what(call)}: the rows are not its input's batch axis")
    types = leaf_types(call.ty)
    return tuple(Rows(y_axis if i == 0 else h_axis) for i in range(len(types)))
