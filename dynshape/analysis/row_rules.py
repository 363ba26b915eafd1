"""The row rules of ``batch_rows``: each op kind's result state from its operands' states.

A rule returns the result's state (``Rows``, ``FIXED``, a ``ShapeOf`` or a tuple of them) or
raises ``NotRowWise`` saying why the rows are not proven to stay apart. Ops declared
elementwise or broadcast without a rule here take ``Proof.broadcast``.
"""

from __future__ import annotations

from collections.abc import Callable

from ir import Call, Constant

from .row_states import (
    FIXED,
    NotRowWise,
    Proof,
    Rows,
    ShapeOf,
    State,
    axis_index,
    kind,
    leaf_types,
    op_name,
    product,
    same_dim,
    tensor_type,
    what,
)

Rule = Callable[[Proof, Call, list[State]], State]
RULES: dict[str, Rule] = {}


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


@_rule("broadcast_to")
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
    rows = _only_first(proof, call, args, "weight")
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


@_rule("nn.conv2d", "nn.conv2d_transpose")
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
    rows = _only_first(proof, call, args, "scale and shift")
    if rows is None:
        if proof.attr_mentions(call):
            raise NotRowWise(f"{what(call)}: an attribute mentions {proof.b}")
        return FIXED
    rank = len(tensor_type(call.args[0]).shape)
    axis = call.attrs.axis
    if axis is None:
        raise NotRowWise(f"{what(call)}: along every axis, the rows too")
    reach = (
        range(axis_index(axis, rank), rank) if op_name(call) in _NORMS else [axis_index(axis, rank)]
    )
    if rows.axis in reach:
        raise NotRowWise(f"{what(call)}: computed along the rows")
    return rows


_NORMS = ("nn.layer_norm", "nn.rms_norm")


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
def _transpose(proof: Proof, call: Call, args: list[State]) -> State:
    rows = _only_first(proof, call, args, "operand")
    if rows is None:
        return FIXED
    rank = len(tensor_type(call.args[0]).shape)
    axes = call.attrs.axes
    perm = list(reversed(range(rank))) if axes is None else [axis_index(a, rank) for a in axes]
    return Rows(perm.index(rows.axis), rows.group)


@_rule("expand_dims")
def _expand_dims(proof: Proof, call: Call, args: list[State]) -> State:
    rows = _only_first(proof, call, args, "operand")
    if rows is None:
        return FIXED
    rank = len(tensor_type(call.args[0]).shape)
    axis = call.attrs.axis
    axis = axis + rank + 1 if axis < 0 else axis
    return Rows(rows.axis + call.attrs.num_newaxis * (axis <= rows.axis), rows.group)


@_rule("squeeze", "reshape", "nn.batch_flatten")
def _reshape(proof: Proof, call: Call, args: list[State]) -> State:
    """A C-order reshape keeps rows when the axes before the row axis hold one element (each
    row is then one contiguous run of the flattened value) on both sides."""
    rows = _only_first(proof, call, args, "operand")
    if rows is None:
        return FIXED
    src, dst = tensor_type(call.args[0]).shape, tensor_type(call).shape
    per_row = rows.group * product(src[rows.axis + 1 :])
    hits = [a for a, d in enumerate(dst) if proof.mentions(d)]
    if len(hits) != 1:
        raise NotRowWise(f"{what(call)}: the rows do not stay one axis")
    before, after = src[: rows.axis], dst[: hits[0]]
    kept = len(before) == len(after) and all(
        same_dim(a, b) for a, b in zip(before, after, strict=True)
    )
    if not kept and not (same_dim(product(before), 1) and same_dim(product(after), 1)):
        raise NotRowWise(f"{what(call)}: the axes before the rows change")
    group = proof.group_of(dst[hits[0]])
    if group is None or not same_dim(group * product(dst[hits[0] + 1 :]), per_row):
        raise NotRowWise(f"{what(call)}: the reshape mixes rows")
    return Rows(hits[0], group)


@_rule("shape_of")
def _shape_of(proof: Proof, call: Call, args: list[State]) -> State:
    rows = _only_first(proof, call, args, "operand")
    return FIXED if rows is None else ShapeOf(tuple(tensor_type(call.args[0]).shape))


@_rule("take")
def _take(proof: Proof, call: Call, args: list[State]) -> State:
    data, indices = args
    axis = call.attrs.axis
    if isinstance(data, ShapeOf):
        index = call.args[1]
        if not (isinstance(index, Constant) and index.value.ndim == 0 and indices is FIXED):
            raise NotRowWise(f"{what(call)}: reads a shape with {proof.b} at a computed index")
        dim = data.dims[int(index.value)]
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


@_rule("strided_slice")
def _strided_slice(proof: Proof, call: Call, args: list[State]) -> State:
    rows = _only_first(proof, call, args, "operand")
    if rows is None:
        if proof.attr_mentions(call):
            raise NotRowWise(f"{what(call)}: a slice bound mentions {proof.b}")
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
    rows = _only_first(proof, call, args, "operand")
    count = len(leaf_types(call.ty))
    if rows is None:
        if proof.attr_mentions(call):
            raise NotRowWise(f"{what(call)}: a split point mentions {proof.b}")
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
