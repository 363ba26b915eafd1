"""Control flow: ``If`` and ``Loop``, whose branches and bodies are subgraphs reading the
enclosing graph's values.

A condition known at import (exported models test shapes: ``If(Equal(Shape(x)[0], 1))``)
picks its branch there, and only that branch is converted. Otherwise both branches are
converted, each in its scope, and become an ``if`` (``ds.cond``): the condition is a one-element
bool tensor, the branches' results must have the same structure and dtypes.
"""

from __future__ import annotations

from typing import Any

import numpy as np

import ir
from dynshape.builder import control, trace

from ..known import Known
from ..registry import Node, NodeError, Unsupported, converter
from ..sequence import structured
from .operands import data_dependent, normalize_axis, value_shape


@converter("If")
def if_(node: Node) -> Any:
    then_graph, else_graph = node.attr("then_branch"), node.attr("else_branch")
    if then_graph is None or else_graph is None or node.subgraph is None:
        raise NodeError("If needs then_branch and else_branch")
    cond = node.input(0)
    if isinstance(cond, Known) and cond.numeric() is not None:
        if cond.array.size != 1:
            raise NodeError(f"the condition must hold one value, got shape {list(cond.shape)}")
        chosen = then_graph if bool(np.asarray(cond.array).reshape(-1)[0]) else else_graph
        return node.subgraph(chosen)
    pred = node.tensor(0)
    if value_shape(pred) != ():
        pred = trace.apply("reshape", pred, newshape=[])
    if pred.type.dtype != "bool":
        raise NodeError(f"the condition must be bool, got {pred.type.dtype}")
    run = node.subgraph
    ranks: list[list[int]] = []  # the then branch's output ranks

    def branch(graph: Any) -> Any:
        outs = [node.materialize(o) if isinstance(o, Known) else o for o in run(graph)]
        if any(structured(o) for o in outs):
            raise Unsupported(
                "an If on a condition computed from data whose branches return sequences or "
                "optionals (their structure must be known at import)"
            )
        # ONNX lets the branches differ in rank; a tensor's rank is decided at import here
        got = [len(value_shape(o)) for o in outs]
        if ranks and ranks[0] != got:
            raise Unsupported(
                f"an If on a condition computed from data whose branches return tensors of "
                f"different ranks (then {ranks[0]}, else {got})"
            )
        ranks.append(got)
        return outs[0] if len(outs) == 1 else tuple(outs)

    result = control.cond(pred, lambda: branch(then_graph), lambda: branch(else_graph))
    return list(result) if isinstance(result, tuple) else [result]


def _append(acc: Any, one: Any, first: Any) -> Any:
    """``acc`` with ``one`` stacked after it; when ``first`` (a scalar bool) is given and
    true, ``one`` alone (``acc`` is the empty start, whose other dims may differ)."""
    row = trace.apply("expand_dims", one, axis=0)
    if first is None:
        return trace.apply("concatenate", [acc, row], axis=0)
    return control.cond(first, lambda: row, lambda: trace.apply("concatenate", [acc, row], axis=0))


def _scalar(node: Node, value: Any, dtype: str, what: str) -> Any:
    """``value`` (a one-element tensor or Known) as a 0-d run-time tensor of ``dtype``."""
    if isinstance(value, Known):
        if value.shape and int(np.prod([int(d) for d in value.shape])) != 1:
            raise NodeError(f"{what} must hold one value, got shape {list(value.shape)}")
        value = node.materialize(value)
    if value_shape(value) != ():
        if value_shape(value) != (1,):
            raise NodeError(f"{what} must hold one value, got shape {list(value_shape(value))}")
        value = trace.apply("reshape", value, newshape=[])
    if value.type.dtype != dtype:
        raise NodeError(f"{what} must be {dtype}, got {value.type.dtype}")
    return value


def _tensor_types(types: list[Any]) -> list[ir.TensorType]:
    """The types of a body's scan outputs, each a tensor's."""
    for k, ty in enumerate(types):
        if not isinstance(ty, ir.TensorType):
            raise NodeError(f"scan output {k} is not a tensor")
    return types


def _empty_scans(probe: list[ir.TensorType]) -> tuple[list[Any], list[bool]]:
    """Per scan output of one step's type in ``probe``: the empty tensor it starts as, and
    whether a dim of it is known only inside the loop (0 in the empty start, which the first
    iteration replaces instead of appending to it)."""
    starts, unsettled = [], []
    for ty in probe:
        inside = [any(ir.is_anonymous(s) for s in ir.free_symbols(d)) for d in ty.shape]
        shape = [0, *(0 if unknown else d for d, unknown in zip(ty.shape, inside, strict=True))]
        starts.append(trace.apply("zeros", shape=shape, dtype=ty.dtype))
        unsettled.append(any(inside))
    return starts, unsettled


@converter("Loop")
def loop(node: Node) -> Any:
    body, run = node.attr("body"), node.subgraph
    if body is None or run is None:
        raise NodeError("Loop needs a body")
    if any(structured(v) for v in node.inputs[2:]):
        return _unrolled(node)
    initial = [node.materialize(v) if isinstance(v, Known) else v for v in node.inputs[2:]]
    if any(v is None for v in initial):
        raise NodeError("a loop-carried initial value is missing (an empty input name)")
    n = len(initial)
    if len(body.input) != n + 2:
        raise NodeError(
            f"the body takes {len(body.input)} inputs; with {n} loop-carried value(s) it must "
            f"take {n + 2} (iteration number, condition, the carried values)"
        )
    scans = len(body.output) - 1 - n
    if scans < 0:
        raise NodeError(
            f"the body returns {len(body.output)} outputs; with {n} loop-carried value(s) it "
            f"must return at least {n + 1} (condition, the carried values, scan outputs)"
        )
    trip = node.input(0)
    limit = None if trip is None else _scalar(node, trip, "int64", "the trip count M")
    cond = node.input(1)
    going = (
        trace.constant(np.array(True), "bool")
        if cond is None
        else _scalar(node, cond, "bool", "the condition")
    )
    zero = trace.constant(np.array(0, dtype=np.int64), "int64")
    holds: list[bool] = []  # per trace of the body: whether its condition is surely true

    def step(i: Any, keep: Any, *values: Any) -> list[Any]:
        raw = run(body, [i, keep, *values])
        holds.append(bool(raw) and (raw[0] is keep or _true(raw[0])))
        outs = [node.materialize(o) if isinstance(o, Known) else o for o in raw]
        if any(o is None for o in outs):
            raise NodeError("the body leaves an output undefined")
        return [_scalar(node, outs[0], "bool", "the body's condition output"), *outs[1:]]

    types = [zero.type, going.type, *(v.type for v in initial)]
    probe = _tensor_types(control.loop_body_types(step, types)[1 + n :])
    starts, unsettled = _empty_scans(probe)

    def cond_fn(i: Any, keep: Any, *rest: Any) -> Any:
        if limit is None:
            return keep
        return trace.apply("logical_and", trace.apply("less", i, limit), keep)

    def body_fn(i: Any, keep: Any, *rest: Any) -> tuple[Any, ...]:
        outs = step(i, keep, *rest[:n])
        first = trace.apply("equal", i, zero)
        grown = [
            _append(acc, one, first if replace else None)
            for acc, one, replace in zip(rest[n:], outs[1 + n :], unsettled, strict=True)
        ]
        one_more = trace.apply("add", i, trace.constant(np.array(1, dtype=np.int64), "int64"))
        return (one_more, outs[0], *outs[1 : 1 + n], *grown)

    final = control.while_loop(cond_fn, body_fn, (zero, going, *initial, *starts))
    results = list(final[2:])
    count = _trip_dim(trip)
    if count is not None and (cond is None or _true(cond)) and all(holds):
        # exactly M iterations: each scan output has M rows, a dim known before the loop
        for k, (ty, replace) in enumerate(zip(probe, unsettled, strict=True)):
            if not replace:
                results[n + k] = trace.apply("reshape", results[n + k], newshape=[count, *ty.shape])
    return results


def _true(value: Any) -> bool:
    """Whether ``value`` is a condition known at import to be true."""
    array = value.numeric() if isinstance(value, Known) else None
    return array is not None and array.size == 1 and bool(np.asarray(array).reshape(-1)[0])


def _trip_dim(trip: Any) -> Any:
    """A ``Loop``'s trip count as a dim when it is known at import (a number or an
    expression of the input dims), else None."""
    if not isinstance(trip, Known) or trip.array.size != 1:
        return None
    (dim,) = trip.dims()
    # a count computed from data (the length of a Range over dims) is a ``?``, which an
    # attribute may not name: the scan outputs keep the loop's own row count
    return None if data_dependent([dim]) else dim


def _prepend(acc: Any, one: Any, first: Any) -> Any:
    """``acc`` with ``one`` stacked before it (a reversed scan output), as ``_append``."""
    row = trace.apply("expand_dims", one, axis=0)
    if first is None:
        return trace.apply("concatenate", [row, acc], axis=0)
    return control.cond(first, lambda: row, lambda: trace.apply("concatenate", [row, acc], axis=0))


def _axes(node: Node, name: str, count: int) -> list[int]:
    """The ints attribute ``name`` (one per scan input or output; zeros when absent)."""
    values = [int(v) for v in node.attr(name, [0] * count)]
    if len(values) != count:
        raise NodeError(f"{name} has {len(values)} entries, expected {count}")
    return values


def _scan_attributes(
    node: Node, xs: list[Any], k: int
) -> tuple[list[int], list[int], list[int], list[int]]:
    """A ``Scan``'s input axes (normalised against the scan inputs ``xs``) and directions,
    and its ``k`` output axes and directions."""
    m = len(xs)
    in_axes = [
        normalize_axis(a, len(value_shape(x)), "a scan input axis")
        for a, x in zip(_axes(node, "scan_input_axes", m), xs, strict=True)
    ]
    in_dirs = _axes(node, "scan_input_directions", m)
    out_axes = _axes(node, "scan_output_axes", k)
    out_dirs = _axes(node, "scan_output_directions", k)
    if any(d not in (0, 1) for d in [*in_dirs, *out_dirs]):
        raise NodeError("a scan direction must be 0 (forward) or 1 (reverse)")
    return in_axes, in_dirs, out_axes, out_dirs


@converter("Scan")
def scan(node: Node) -> Any:
    """``Scan`` (opset 9 on): a ``ds.while_loop`` over the scan position ``i < L`` (``L`` the
    scanned dim, known at import as a dim) carrying the state variables and one accumulator
    per scan output; each scan input gives the body its slice ``take(x, i, axis)`` (``L - 1 -
    i`` in reverse), each scan output grows by one ``concatenate`` per step (before, for a
    reversed one) and is reshaped to ``(L, *one step's shape)`` after the loop, which gives
    its dims back."""
    body, run = node.attr("body"), node.subgraph
    if body is None or run is None:
        raise NodeError("Scan needs a body")
    m = int(node.attr("num_scan_inputs", 0))
    inputs = [node.materialize(v) if isinstance(v, Known) else v for v in node.inputs]
    if any(v is None for v in inputs):
        raise NodeError("an input is missing (an empty input name)")
    n = len(inputs) - m
    if m < 1 or n < 0:
        raise NodeError(f"num_scan_inputs={m} for {len(inputs)} inputs")
    k = len(body.output) - n
    if len(body.input) != n + m or k < 0:
        raise NodeError(
            f"the body takes {len(body.input)} inputs and returns {len(body.output)}; with {n} "
            f"state variable(s) and {m} scan input(s) it must take {n + m} and return at "
            f"least {n}"
        )
    states, xs = inputs[:n], inputs[n:]
    in_axes, in_dirs, out_axes, out_dirs = _scan_attributes(node, xs, k)
    lengths = [value_shape(x)[a] for x, a in zip(xs, in_axes, strict=True)]
    length = lengths[0]
    for other in lengths[1:]:
        if ir.compare(other, "==", length) is not True:
            raise Unsupported(
                f"scan inputs of lengths {lengths}: they must be provably equal at import"
            )
    limit = node.materialize(Known.of(length, "int64"))
    last = trace.apply("subtract", limit, trace.constant(np.array(1, dtype=np.int64), "int64"))
    zero = trace.constant(np.array(0, dtype=np.int64), "int64")

    def step(i: Any, *values: Any) -> list[Any]:
        back = trace.apply("subtract", last, i)
        slices = [
            trace.apply("take", x, back if rev else i, axis=a)
            for x, a, rev in zip(xs, in_axes, in_dirs, strict=True)
        ]
        outs = [
            node.materialize(o) if isinstance(o, Known) else o
            for o in run(body, [*values, *slices])
        ]
        if any(o is None for o in outs):
            raise NodeError("the body leaves an output undefined")
        return outs

    probe = _tensor_types(control.loop_body_types(step, [zero.type, *(v.type for v in states)])[n:])
    starts, unsettled = _empty_scans(probe)
    axes = [
        normalize_axis(a, ty.rank + 1, "a scan output axis")
        for a, ty in zip(out_axes, probe, strict=True)
    ]

    def cond_fn(i: Any, *rest: Any) -> Any:
        return trace.apply("less", i, limit)

    def body_fn(i: Any, *rest: Any) -> tuple[Any, ...]:
        outs = step(i, *rest[:n])
        first = trace.apply("equal", i, zero)
        grown = [
            (_prepend if rev else _append)(acc, one, first if replace else None)
            for acc, one, replace, rev in zip(rest[n:], outs[n:], unsettled, out_dirs, strict=True)
        ]
        one_more = trace.apply("add", i, trace.constant(np.array(1, dtype=np.int64), "int64"))
        return (one_more, *outs[:n], *grown)

    final = control.while_loop(cond_fn, body_fn, (zero, *states, *starts))
    results = list(final[1 : 1 + n])
    for acc, ty, replace, axis in zip(final[1 + n :], probe, unsettled, axes, strict=True):
        if not replace:  # the dims one step has are known: the scan's dims come back
            acc = trace.apply("reshape", acc, newshape=[length, *ty.shape])
        if axis:
            perm = [*range(1, axis + 1), 0, *range(axis + 1, len(ty.shape) + 1)]
            acc = trace.apply("transpose", acc, axes=perm)
        results.append(acc)
    return results


#: The most iterations of a ``Loop`` unrolled at import (one carrying a sequence).
UNROLL_LIMIT = 4096


def _known_scalar(node: Node, i: int, what: str) -> Any:
    """Input ``i`` as a Python number known at import (None when omitted); Unsupported when
    it is computed from data."""
    if node.input(i) is None:
        return None
    array = node.numeric(i)
    if array is None or array.size != 1:
        raise Unsupported(
            f"a Loop carrying a sequence or optional with {what} computed from data (the "
            "sequence's length would depend on data)"
        )
    return np.asarray(array).reshape(-1)[0].item()


def _unrolled(node: Node) -> list[Any]:
    """A ``Loop`` carrying a sequence or an optional, unrolled at import: its trip count and
    condition must be known there (as the body's condition after each iteration), so the
    lengths of the sequences are; the body is converted once per iteration, with the
    iteration number known, and each scan output is the iterations' results stacked."""
    body, run = node.attr("body"), node.subgraph
    assert body is not None and run is not None
    trips = _known_scalar(node, 0, "a trip count")
    keep = _known_scalar(node, 1, "a condition")
    keep = True if keep is None else bool(keep)
    if trips is None:
        trips = UNROLL_LIMIT + 1
    values = list(node.inputs[2:])
    n = len(values)
    if len(body.input) != n + 2 or len(body.output) < n + 1:
        raise NodeError(f"the body's inputs and outputs do not match {n} loop-carried value(s)")
    scans: list[list[Any]] = [[] for _ in range(len(body.output) - 1 - n)]
    i = 0
    while i < trips and keep:
        if i == UNROLL_LIMIT:
            raise Unsupported(f"a Loop carrying a sequence runs more than {UNROLL_LIMIT} times")
        args = [Known(np.array(i, np.int64), "int64"), Known(np.array(keep), "bool"), *values]
        outs = run(body, args)
        cond = outs[0]
        if not isinstance(cond, Known) or cond.numeric() is None:
            raise Unsupported(
                "a Loop carrying a sequence or optional whose body's condition is computed "
                "from data (the sequence's length would depend on data)"
            )
        keep = bool(np.asarray(cond.numeric()).reshape(-1)[0])
        values = list(outs[1 : 1 + n])
        for column, one in zip(scans, outs[1 + n :], strict=True):
            column.append(one)
        i += 1
    stacked = []
    for column in scans:
        if not column:
            raise Unsupported("a scan output of a Loop carrying a sequence that runs no iteration")
        rows = [
            trace.apply("expand_dims", node.materialize(v) if isinstance(v, Known) else v, axis=0)
            for v in column
        ]
        stacked.append(rows[0] if len(rows) == 1 else trace.apply("concatenate", rows, axis=0))
    return [*values, *stacked]
