"""Sequence and optional ops, as list operations at import (``dynshape/onnx/sequence.py``).

A sequence is a tuple of tensors whose length is known at import; a position (``SequenceAt``,
``SequenceInsert``, ``SequenceErase``) must be a number known at import too, as the sizes of
``SplitToSequence``. Only the element tensors become ops: a slice per part, a concatenation.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from dynshape.builder import trace

from ..known import Known
from ..model import DTYPES
from ..registry import Node, NodeError, Unsupported, converter
from ..sequence import Optional, Sequence
from .operands import normalize_axis, value_dtype, value_shape


def _sequence(node: Node, i: int) -> Sequence:
    value = node.input(i)
    if isinstance(value, Optional):  # an optional read as its value (onnxruntime does too)
        value = value.value
    if not isinstance(value, Sequence):
        raise NodeError(f"input {i} must be a sequence")
    return value


def _position(node: Node, i: int, length: int, insert: bool = False) -> int | None:
    """Input ``i`` as a position in a sequence of ``length`` (negative counts from the end;
    ``insert`` allows ``length`` itself), None when omitted."""
    value = node.input(i)
    if value is None:
        return None
    array = node.numeric(i)
    if array is None:
        raise Unsupported("a sequence position computed from data (it must be known at import)")
    if array.size != 1:
        raise NodeError(f"the position must hold one value, got shape {list(array.shape)}")
    p = int(np.asarray(array).reshape(-1)[0])
    top = length + 1 if insert else length
    if not -length <= p < top:
        raise NodeError(f"position {p} is out of range for a sequence of {length}")
    return p % top if p >= 0 else p + length


def _check_dtype(seq: Sequence, value: Any) -> None:
    if value_dtype(value) != seq.dtype:
        raise NodeError(f"a {value_dtype(value)} tensor in a sequence of {seq.dtype}")


@converter("SequenceEmpty")
def sequence_empty(node: Node) -> Sequence:
    elem = int(node.attr("dtype", 1))
    if elem not in DTYPES:
        raise Unsupported(f"a sequence of element type {elem}")
    return Sequence((), DTYPES[elem])


@converter("SequenceConstruct")
def sequence_construct(node: Node) -> Sequence:
    items = tuple(node.inputs)
    if not items or any(v is None or isinstance(v, (Sequence, Optional)) for v in items):
        raise NodeError("SequenceConstruct takes one or more tensors")
    seq = Sequence(items, value_dtype(items[0]))
    for v in items[1:]:
        _check_dtype(seq, v)
    return seq


@converter("SequenceLength")
def sequence_length(node: Node) -> Known:
    return Known(np.array(len(_sequence(node, 0).items), dtype=np.int64), "int64")


@converter("SequenceAt")
def sequence_at(node: Node) -> Any:
    seq = _sequence(node, 0)
    p = _position(node, 1, len(seq.items))
    if p is None:
        raise NodeError("SequenceAt needs a position")
    return seq.items[p]


@converter("SequenceInsert")
def sequence_insert(node: Node) -> Sequence:
    seq = _sequence(node, 0)
    value = node.input(1)
    if value is None or isinstance(value, (Sequence, Optional)):
        raise NodeError("SequenceInsert inserts a tensor")
    if seq.items:
        _check_dtype(seq, value)
    p = _position(node, 2, len(seq.items), insert=True)
    p = len(seq.items) if p is None else p
    dtype = seq.dtype if seq.items else value_dtype(value)
    return Sequence((*seq.items[:p], value, *seq.items[p:]), dtype)


@converter("SequenceErase")
def sequence_erase(node: Node) -> Sequence:
    seq = _sequence(node, 0)
    if not seq.items:
        raise NodeError("SequenceErase of an empty sequence")
    p = _position(node, 1, len(seq.items))
    p = len(seq.items) - 1 if p is None else p
    return Sequence((*seq.items[:p], *seq.items[p + 1 :]), seq.dtype)


@converter("SplitToSequence")
def split_to_sequence(node: Node) -> Sequence:
    """Parts of ``split`` sizes (a 1-d input), of ``split`` each but a smaller last one (a
    scalar), or of 1 each without it (``keepdims=0`` then drops the axis)."""
    data = node.input(0)
    shape = value_shape(data)
    axis = normalize_axis(int(node.attr("axis", 0)), len(shape))
    n = shape[axis]
    split = node.input(1)
    if split is not None and node.numeric(1) is None:
        raise Unsupported("split sizes computed from data (they decide the number of parts)")
    if not isinstance(n, int):
        raise Unsupported(f"a split of a symbolic dim {n} (the number of parts is not known)")
    if split is None:
        sizes = [1] * n
    else:
        array = np.asarray(node.numeric(1))
        if array.ndim == 0:
            each = int(array)
            if each <= 0:
                raise NodeError(f"split size {each} must be positive")
            sizes = [min(each, n - start) for start in range(0, n, each)]
        else:
            sizes = [int(v) for v in array.reshape(-1)]
            if sum(sizes) != n or any(s < 0 for s in sizes):
                raise NodeError(f"split sizes {sizes} for a dim of {n}")
    if not sizes:  # a dim of 0: no part
        return Sequence((), value_dtype(data))
    squeeze = split is None and not int(node.attr("keepdims", 1))
    points = [int(p) for p in np.cumsum(sizes[:-1])]
    if isinstance(data, Known):
        parts: list[Any] = [Known(a, data.dtype) for a in np.split(data.array, points, axis=axis)]
        if squeeze:
            parts = [Known(p.array.squeeze(axis), data.dtype) for p in parts]
    elif len(sizes) == 1:
        parts = [data]
    else:
        parts = list(trace.apply("split", data, indices_or_sections=points, axis=axis))
    if squeeze and not isinstance(data, Known):
        parts = [trace.apply("squeeze", p, axis=[axis]) for p in parts]
    return Sequence(tuple(parts), value_dtype(data))


@converter("ConcatFromSequence")
def concat_from_sequence(node: Node) -> Any:
    seq = _sequence(node, 0)
    if not seq.items:
        raise NodeError("ConcatFromSequence of an empty sequence")
    rank = len(value_shape(seq.items[0]))
    new_axis = int(node.attr("new_axis", 0))
    if "axis" not in node.attrs:
        raise NodeError("ConcatFromSequence needs an axis")
    axis = normalize_axis(int(node.attr("axis")), rank + 1 if new_axis else rank)
    tensors = [node.materialize(v) if isinstance(v, Known) else v for v in seq.items]
    if new_axis:
        tensors = [trace.apply("expand_dims", v, axis=axis) for v in tensors]
    if len(tensors) == 1:
        return tensors[0]
    return trace.apply("concatenate", tensors, axis=axis)


@converter("SequenceMap")
def sequence_map(node: Node) -> Any:
    """The body once per position, at import: each sequence input gives its element there,
    each tensor input itself; each output is a sequence of the body's results."""
    body, run = node.attr("body"), node.subgraph
    if body is None or run is None:
        raise NodeError("SequenceMap needs a body")
    first = _sequence(node, 0)
    lengths = {len(v.items) for v in node.inputs if isinstance(v, Sequence)}
    if len(lengths) != 1:
        raise NodeError(f"sequences of different lengths {sorted(lengths)}")
    columns: list[list[Any]] = [[] for _ in body.output]
    for k in range(len(first.items)):
        args = [v.items[k] if isinstance(v, Sequence) else v for v in node.inputs]
        for column, out in zip(columns, run(body, args), strict=True):
            column.append(out)
    dtypes = [_output_dtype(node, j, column) for j, column in enumerate(columns)]
    return [Sequence(tuple(c), d) for c, d in zip(columns, dtypes, strict=True)]


def _output_dtype(node: Node, j: int, column: list[Any]) -> str:
    """The element type of the ``j``-th sequence ``SequenceMap`` makes (from its body's
    declared output when the sequence is empty)."""
    if column:
        return value_dtype(column[0])
    elem = node.attr("body").output[j].type.tensor_type.elem_type
    return DTYPES.get(elem, "float32")


@converter("Optional")
def optional(node: Node) -> Optional:
    return Optional(node.input(0))


@converter("OptionalHasElement")
def optional_has_element(node: Node) -> Known:
    value = node.input(0)
    present = value.value is not None if isinstance(value, Optional) else value is not None
    return Known(np.array(present), "bool")


@converter("OptionalGetElement")
def optional_get_element(node: Node) -> Any:
    value = node.input(0)
    if isinstance(value, Optional):
        if value.value is None:
            raise NodeError("OptionalGetElement of an empty optional")
        return value.value
    if value is None:
        raise NodeError("OptionalGetElement needs an input")
    return value
