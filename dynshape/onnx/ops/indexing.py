"""Indexing and miscellaneous ops: ``NonZero``, ``TopK``, ``GatherElements``, ``GatherND``,
``Pad``, ``CumSum``, ``CumProd``, ``Trilu``, ``OneHot``, ``Einsum``, ``ScatterND``,
``ScatterElements``.

Most are composed of catalogue ops. A gather by computed positions is one ``take`` from the
flattened data: ``GatherElements`` and ``GatherND`` add up each index times the stride of its
axis (index grids are ``arange``s of the dims, broadcast), negative indices wrapped first. The
dims stay symbolic (strides are products of dims); only ``NonZero``'s count and a ``TopK`` of a
``k`` computed from data are ``?`` dims. ``Pad`` is ``nn.pad`` for a constant, and slices and
``concatenate`` for ``reflect``, ``edge`` and ``wrap``. ``Trilu`` and ``OneHot`` compare index
grids. ``CumSum`` and ``CumProd`` are the catalogue's ``cumsum`` and ``cumprod``. ``Einsum`` is
transposes, ``sum`` and one batched ``nn.matmul`` per pair of operands. ``ScatterND`` and
``ScatterElements`` are the catalogue's ``scatter_nd`` and ``scatter_elements`` (folded at
import on known shapes).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import sympy

import ir
from dynshape.builder import trace

from ..known import Known
from ..registry import Node, NodeError, Unsupported, converter
from .layout import slice_axis
from .operands import data_dependent, known_ints, normalize_axis, value_dtype, value_shape

# ---- helpers ------------------------------------------------------------------------------


def _prod(dims: Sequence[Any]) -> Any:
    """The product of dims, an int when it is one."""
    total: Any = sympy.Integer(1)
    for d in dims:
        total = total * d
    total = sympy.sympify(ir.simplify(total))
    return int(total) if total.is_Integer else ir.check_dim(total)


def _int64(x: Any) -> Any:
    return x if x.type.dtype == "int64" else trace.apply("cast", x, dtype="int64")


def _dim_scalar(node: Node, d: Any) -> Any:
    """A 0-d int64 tensor holding the dim ``d`` (a constant, or computed from shapes)."""
    return node.materialize(Known.of(d, "int64"))


def _iota(node: Node, n: Any, rank: int, axis: int) -> Any:
    """``0, 1, ..., n-1`` (int64) along ``axis`` of a tensor of ``rank`` with 1s elsewhere."""
    if isinstance(n, int):
        shape = [1] * rank
        shape[axis] = n
        return trace.constant(np.arange(n, dtype=np.int64).reshape(shape), "int64")
    zero = trace.constant(np.array(0, dtype=np.int64), "int64")
    one = trace.constant(np.array(1, dtype=np.int64), "int64")
    out = trace.apply("arange", zero, _dim_scalar(node, n), one, dtype="int64")
    return trace.apply("reshape", out, newshape=[n if a == axis else 1 for a in range(rank)])


def _wrap(node: Node, index: Any, n: Any) -> Any:
    """Negative indices counted from the end of a dim ``n``: ``where(i < 0, i + n, i)``."""
    zero = trace.constant(np.array(0, dtype=np.int64), "int64")
    shifted = trace.apply("add", index, _dim_scalar(node, n))
    return trace.apply("where", trace.apply("less", index, zero), shifted, index)


def _checked(node: Node, index: Any, n: Any, total: Any) -> Any:
    """``_wrap``, with an index outside ``[-n, n)`` replaced by ``total`` (the data's element
    count): the flat index built from it is then past the data, so the ``take`` raises
    instead of reading another element (onnxruntime raises too)."""
    wrapped = _wrap(node, index, n)
    zero = trace.constant(np.array(0, dtype=np.int64), "int64")
    outside = trace.apply(
        "logical_or",
        trace.apply("less", wrapped, zero),
        trace.apply("greater_equal", wrapped, _dim_scalar(node, n)),
    )
    return trace.apply("where", outside, _dim_scalar(node, total), wrapped)


# ---- NonZero, TopK --------------------------------------------------------------------------


@converter("NonZero")
def non_zero(node: Node) -> Any:
    """``(rank, count)`` int64 indices: ``argwhere`` (``(count, rank)``) transposed."""
    value = node.input(0)
    if isinstance(value, Known) and not value.symbolic:
        return Known(np.array(np.nonzero(value.array), dtype=np.int64), "int64")
    found = trace.apply("argwhere", node.tensor(0))
    return trace.apply("transpose", found, axes=[1, 0])


@converter("TopK")
def top_k(node: Node) -> Any:
    """``topk`` for a k known at import (an int, or a dim: then the result is reshaped to it),
    ``dyn.topk`` for a k from data (a ``?`` dim). Ties go to the smaller index, as ONNX says;
    the outputs are always sorted (``sorted=0`` leaves the order to the implementation)."""
    x_shape = value_shape(node.input(0))
    axis = normalize_axis(int(node.attr("axis", -1)), len(x_shape))
    attrs = {
        "axis": axis,
        "is_ascend": not node.attr("largest", 1),
        "ret_type": "both",
        "dtype": "int64",
    }
    x = node.tensor(0)
    if value_dtype(node.input(0)) == "bool":
        raise NodeError("TopK of a bool tensor")
    if node.opset < 10:
        k_known: Any = node.attr("k")
        if k_known is None:
            raise NodeError("TopK needs the k attribute")
        return tuple(trace.apply("topk", x, k=int(k_known), **attrs))
    k = node.known(1)
    if k is not None:
        if k.array.size != 1:
            raise NodeError(f"k must hold one value, got shape {list(k.shape)}")
        (dim,) = k.dims()
        if isinstance(dim, int):
            return tuple(trace.apply("topk", x, k=dim, **attrs))
        values, indices = trace.apply("dyn.topk", x, _dim_scalar(node, dim), **attrs)
        shape = list(x_shape)
        shape[axis] = dim
        if data_dependent(shape):  # k from a data-dependent size: dyn.topk's own dim stays
            return values, indices
        return (
            trace.apply("reshape", values, newshape=shape),
            trace.apply("reshape", indices, newshape=shape),
        )
    k_data = _int64(node.tensor(1))
    if len(value_shape(k_data)) != 0:
        k_data = trace.apply("reshape", k_data, newshape=[])
    return tuple(trace.apply("dyn.topk", x, k_data, **attrs))


# ---- GatherElements, GatherND -----------------------------------------------------------------


def flat_index(
    node: Node, index: Any, axis: int, shape: Sequence[Any], data_shape: Sequence[Any]
) -> Any:
    """The flat (row-major) position in ``data_shape`` of each element of ``shape``, with
    ``index`` standing for its coordinate along ``axis`` and the element's own coordinate along
    every other axis: each coordinate times its axis's stride, added up."""
    rank = len(data_shape)
    flat: Any = None
    for j in range(rank):
        term = index if j == axis else _iota(node, shape[j], rank, j)
        stride = _prod(data_shape[j + 1 :])
        if stride != 1:
            term = trace.apply("multiply", term, _dim_scalar(node, stride))
        flat = term if flat is None else trace.apply("add", flat, term)
    return flat


@converter("GatherElements")
def gather_elements(node: Node) -> Any:
    """``out[i0, .., ik] = data[i0, .., indices[i0, .., ik], .., ik]``: one ``take`` of the
    flattened data at ``sum_j i_j * stride_j`` (``i_axis`` the wrapped index)."""
    data, indices = node.input(0), node.input(1)
    d_shape, i_shape = value_shape(data), value_shape(indices)
    rank = len(d_shape)
    if len(i_shape) != rank:
        raise NodeError(f"indices have rank {len(i_shape)}, the data rank {rank}")
    axis = normalize_axis(int(node.attr("axis", 0)), rank)
    if isinstance(data, Known) and not data.symbolic and node.numeric(1) is not None:
        idx = np.asarray(node.numeric(1), dtype=np.int64)
        n = d_shape[axis]
        if np.any((idx < -n) | (idx >= n)):
            raise NodeError(f"GatherElements indices {idx.tolist()} are out of range for {n}")
        return Known(np.take_along_axis(data.array, idx % n, axis=axis), data.dtype)
    index = _checked(node, _int64(node.tensor(1)), d_shape[axis], _prod(d_shape))
    flat = flat_index(node, index, axis, i_shape, d_shape)
    if rank == 0:
        raise NodeError("GatherElements of a scalar")
    if value_shape(flat) != i_shape:
        flat = trace.apply("broadcast_to", flat, shape=list(i_shape))
    return trace.apply("take", node.tensor(0), flat, axis=None)


@converter("GatherND")
def gather_nd(node: Node) -> Any:
    """``indices[..., :q]`` pick slices of ``data`` after ``batch_dims`` shared leading axes:
    the data reshaped to ``(batches * prod(dims[b:b+q]), *dims[b+q:])`` and one ``take`` along
    axis 0 at the flat position of each index tuple (its batch included)."""
    data, indices = node.input(0), node.input(1)
    d_shape, i_shape = value_shape(data), value_shape(indices)
    b = int(node.attr("batch_dims", 0))
    if not i_shape:
        raise NodeError("indices must have rank 1 or more")
    q = i_shape[-1]
    if not isinstance(q, int):
        raise NodeError(f"the last dim of indices ({q}) must be static")
    if b < 0 or b >= min(len(d_shape), len(i_shape)):
        raise NodeError(f"batch_dims={b} must be less than both ranks")
    if not 1 <= q <= len(d_shape) - b:
        raise Unsupported(f"indices tuples of length {q} for data of rank {len(d_shape)}")
    for i in range(b):
        if ir.compare(d_shape[i], "==", i_shape[i], {}) is False:
            raise NodeError(f"batch dim {i}: data has {d_shape[i]}, indices {i_shape[i]}")
    out_rank = len(i_shape) - 1
    idx = _int64(node.tensor(1))
    flat: Any = None
    for j in range(q):
        part = trace.apply("take", idx, trace.constant(np.array(j, np.int64), "int64"), axis=-1)
        part = _checked(node, part, d_shape[b + j], _prod(d_shape))
        stride = _prod(d_shape[b + j + 1 : b + q])
        if stride != 1:
            part = trace.apply("multiply", part, _dim_scalar(node, stride))
        flat = part if flat is None else trace.apply("add", flat, part)
    inner = _prod(d_shape[b : b + q])
    for i in range(b):
        stride = _prod([*d_shape[i + 1 : b], inner])
        term = _iota(node, i_shape[i], out_rank, i)
        if stride != 1:
            term = trace.apply("multiply", term, _dim_scalar(node, stride))
        flat = trace.apply("add", flat, term)
    if value_shape(flat) != tuple(i_shape[:-1]):
        flat = trace.apply("broadcast_to", flat, shape=list(i_shape[:-1]))
    rows = _prod([*d_shape[:b], inner])
    table = trace.apply("reshape", node.tensor(0), newshape=[rows, *d_shape[b + q :]])
    return trace.apply("take", table, flat, axis=0)


# ---- Pad ------------------------------------------------------------------------------------


@converter("Pad")
def pad(node: Node) -> Any:
    """Modes ``constant`` (``nn.pad``; a constant value known at import), ``reflect``,
    ``edge`` and ``wrap`` (slices of the input joined by ``concatenate``, axis by axis).
    Negative pads crop first. Pads must be numbers known at import."""
    x_shape = value_shape(node.input(0))
    rank = len(x_shape)
    mode = node.attr("mode", "constant")
    pads, value, axes = _pad_operands(node, rank)
    if len(pads) != 2 * len(axes):
        raise NodeError(f"{len(pads)} pads for {len(axes)} axes (2 per axis)")
    if len(set(axes)) != len(axes):
        raise NodeError(f"axes {axes} repeat an axis")
    before, after = [0] * rank, [0] * rank
    for i, a in enumerate(axes):
        before[a], after[a] = pads[i], pads[i + len(axes)]
    if mode not in ("constant", "reflect", "edge", "wrap"):
        raise Unsupported(f"mode {mode!r} (constant, reflect, edge and wrap are supported)")
    x = node.tensor(0)
    for a in range(rank):  # negative pads crop
        if before[a] < 0 or after[a] < 0:
            end = after[a] if after[a] < 0 else None
            x = slice_axis(x, a, max(-before[a], 0), end)
            before[a], after[a] = max(before[a], 0), max(after[a], 0)
    if not any(before) and not any(after):
        return x
    if mode == "constant":
        if value_dtype(node.input(0)) == "bool":
            raise Unsupported("constant padding of a bool tensor")
        width = [[b, e] for b, e in zip(before, after, strict=True)]
        return trace.apply("nn.pad", x, pad_width=width, pad_value=float(value))
    for a in range(rank):
        if before[a] or after[a]:
            x = _pad_axis(x, a, before[a], after[a], mode)
    return x


def _pad_operands(node: Node, rank: int) -> tuple[list[int], Any, list[int]]:
    """Pad's ``pads``, constant value and axes: attributes before opset 11, inputs known at
    import from it on."""
    if node.opset < 11:
        pads = [int(p) for p in node.attr("pads", [])]
        return pads, float(node.attr("value", 0.0)), list(range(rank))
    if node.input(1) is not None and node.numeric(1) is None:
        raise Unsupported(
            "pads computed from data or from symbolic dims (they decide the output shape, "
            "and no catalogue op pads by a run-time amount)"
        )
    pads = known_ints(node, 1, "pads") or []
    value: Any = 0.0
    if node.input(2) is not None:
        fill = node.numeric(2)
        if fill is None:
            raise Unsupported("a constant_value computed from data")
        value = np.asarray(fill).reshape(-1)[0].item() if fill.size else 0.0
    given = known_ints(node, 3, "axes")
    axes = [
        normalize_axis(a, rank, "axes entry") for a in (given if given is not None else range(rank))
    ]
    return pads, value, axes


def _pad_axis(x: Any, axis: int, before: int, after: int, mode: str) -> Any:
    n = value_shape(x)[axis]
    limit = n - 1 if mode == "reflect" else n
    for p in (before, after):
        if isinstance(limit, int) and p > limit:
            raise NodeError(f"{mode} padding of {p} along an axis of {n} (at most {limit})")
    parts = []
    if before:
        if mode == "reflect":
            parts.append(slice_axis(x, axis, before, 0, -1))
        elif mode == "edge":
            edge = slice_axis(x, axis, 0, 1)
            parts.append(trace.apply("repeat", edge, repeats=before, axis=axis))
        else:
            parts.append(slice_axis(x, axis, -before, None))
    parts.append(x)
    if after:
        if mode == "reflect":
            parts.append(slice_axis(x, axis, -2, -2 - after, -1))
        elif mode == "edge":
            edge = slice_axis(x, axis, -1, None)
            parts.append(trace.apply("repeat", edge, repeats=after, axis=axis))
        else:
            parts.append(slice_axis(x, axis, 0, after))
    return trace.apply("concatenate", parts, axis=axis)


# ---- CumSum --------------------------------------------------------------------------------


@converter("CumSum", "CumProd")
def cum_sum(node: Node) -> Any:
    """``cumsum`` (``cumprod``) along the axis input (a number known at import),
    ``exclusive``/``reverse`` as ONNX's attributes."""
    axis_known = node.numeric(1)
    if axis_known is None:
        raise Unsupported("an axis computed from data")
    if axis_known.size != 1:
        raise NodeError(f"axis must hold one value, got shape {list(axis_known.shape)}")
    rank = len(value_shape(node.input(0)))
    if rank == 0:
        raise NodeError(f"{node.op_type} of a scalar")
    axis = normalize_axis(int(np.asarray(axis_known).reshape(-1)[0]), rank)
    if value_dtype(node.input(0)) == "bool":
        raise NodeError(f"{node.op_type} of a bool tensor")
    return trace.apply(
        "cumprod" if node.op_type == "CumProd" else "cumsum",
        node.tensor(0),
        axis=axis,
        exclusive=bool(node.attr("exclusive", 0)),
        reverse=bool(node.attr("reverse", 0)),
    )


# ---- Trilu, OneHot --------------------------------------------------------------------------


@converter("Trilu")
def trilu(node: Node) -> Any:
    """Zero outside the upper (``upper=1``: ``j - i >= k``) or lower (``j - i <= k``)
    triangle of the last two axes; ``k`` may come from data."""
    shape = value_shape(node.input(0))
    if len(shape) < 2:
        raise NodeError(f"Trilu needs rank 2 or more, got {len(shape)}")
    rows = _iota(node, shape[-2], 2, 0)
    cols = _iota(node, shape[-1], 2, 1)
    diagonal = trace.apply("subtract", cols, rows)  # (n, m): j - i
    if node.input(1) is None:
        k: Any = trace.constant(np.array(0, np.int64), "int64")
    elif node.numeric(1) is not None:
        k = trace.constant(np.asarray(node.numeric(1), np.int64).reshape(()), "int64")
    else:
        k = _int64(node.tensor(1))
        if value_shape(k):
            k = trace.apply("reshape", k, newshape=[])
    keep = trace.apply("greater_equal" if node.attr("upper", 1) else "less_equal", diagonal, k)
    x = node.tensor(0)
    dtype = value_dtype(node.input(0))
    zero = trace.constant(np.zeros((), dtype=dtype), dtype)
    return trace.apply("where", keep, x, zero)


@converter("OneHot")
def one_hot(node: Node) -> Any:
    """A new axis of ``depth`` (known at import) holding ``on`` at the index (negative ones
    wrapped, out of range: none) and ``off`` elsewhere; ``values = [off, on]``."""
    depth_known = node.known(1)
    if depth_known is None:
        raise Unsupported("a depth computed from data (it is the size of the new axis)")
    if depth_known.array.size != 1:
        raise NodeError(f"depth must hold one value, got shape {list(depth_known.shape)}")
    depth: Any = depth_known.dims()[0] if depth_known.symbolic else None
    if depth is None:
        depth = int(np.asarray(depth_known.array).reshape(-1)[0])
    i_shape = value_shape(node.input(0))
    rank = len(i_shape) + 1
    axis = normalize_axis(int(node.attr("axis", -1)), rank)
    index = node.tensor(0)
    if value_dtype(node.input(0)) == "bool":
        raise NodeError("OneHot indices must be numbers")
    index = _wrap(node, _int64(index), depth)
    index = trace.apply("expand_dims", index, axis=axis)
    hot = trace.apply("equal", index, _iota(node, depth, rank, axis))
    values = node.tensor(2)
    zero = trace.constant(np.array(0, np.int64), "int64")
    one = trace.constant(np.array(1, np.int64), "int64")
    off = trace.apply("take", values, zero, axis=0)
    on = trace.apply("take", values, one, axis=0)
    out_shape = [*i_shape[:axis], depth, *i_shape[axis:]]
    out = trace.apply("where", hot, on, off)
    if value_shape(out) != tuple(out_shape):
        out = trace.apply("broadcast_to", out, shape=out_shape)
    return out


# ---- Einsum ---------------------------------------------------------------------------------


@converter("Einsum")
def einsum(node: Node) -> Any:
    """Subscripts with ``...`` and implicit outputs; each operand's letters that no other
    operand or the output uses are summed away, then operands contract pairwise, left to
    right, as one batched ``nn.matmul`` (batch, kept and contracted letters grouped by
    transposes and reshapes). A letter repeated in one operand is its diagonal first (a
    ``take`` from the two axes merged)."""
    equation = str(node.attr("equation", "")).replace(" ", "")
    operands = [v for v in node.inputs if v is not None]
    shapes = [value_shape(v) for v in operands]
    terms, output = _parse_einsum(equation, shapes)
    dtype = value_dtype(operands[0])
    if any(value_dtype(v) != dtype for v in operands):
        raise NodeError("Einsum operands of different dtypes")
    sizes: dict[str, Any] = {}
    for term, shape in zip(terms, shapes, strict=True):
        for letter, d in zip(term, shape, strict=True):
            if letter in sizes and ir.compare(sizes[letter], "==", d, {}) is not True:
                if d == 1 or sizes[letter] == 1:
                    raise Unsupported(f"broadcasting a dim of 1 for subscript {letter!r}")
                raise NodeError(f"subscript {letter!r} has dims {sizes[letter]} and {d}")
            sizes.setdefault(letter, d)
    values = [node.tensor(i) for i in range(len(node.inputs)) if node.inputs[i] is not None]
    storage = dtype == "bfloat16"  # a storage type: summed in float32, rounded once at the end
    if storage:
        values = [trace.apply("cast", v, dtype="float32") for v in values]
    for i, term in enumerate(terms):  # a letter repeated in an operand: its diagonal
        values[i], terms[i] = _diagonals(node, values[i], term, sizes)
    current, letters = values[0], terms[0]
    current, letters = _sum_unused(current, letters, [*terms[1:], output])
    for i in range(1, len(values)):
        later = [*terms[i + 1 :], output]
        other, other_letters = _sum_unused(values[i], terms[i], [letters, *later])
        current, letters = _contract(current, letters, other, other_letters, later, sizes)
    if letters != output:
        current = trace.apply("transpose", current, axes=[letters.index(c) for c in output])
    return trace.apply("cast", current, dtype=dtype) if storage else current


def _parse_einsum(equation: str, shapes: Sequence[Sequence[Any]]) -> tuple[list[str], str]:
    """The operands' subscripts and the output's, ``...`` spelled out in upper-case letters
    (right-aligned over the operands' extra axes)."""
    if "->" in equation:
        inputs, output = equation.split("->")
    else:
        inputs, output = equation, None
    specs = inputs.split(",")
    if len(specs) != len(shapes):
        raise NodeError(f"equation {equation!r} has {len(specs)} operands, the node {len(shapes)}")
    spare = [c for c in "ABCDEFGHIJKLMNOPQRSTUVWXYZ"]
    ellipsis_rank = 0
    for spec, shape in zip(specs, shapes, strict=True):
        if "..." in spec:
            ellipsis_rank = max(ellipsis_rank, len(shape) - len(spec.replace("...", "")))
    dots = "".join(spare[:ellipsis_rank])
    terms = []
    for spec, shape in zip(specs, shapes, strict=True):
        if any(c.isupper() for c in spec.replace("...", "")):
            raise Unsupported("upper-case subscripts")
        if "..." in spec:
            extra = len(shape) - len(spec.replace("...", ""))
            spec = spec.replace("...", dots[ellipsis_rank - extra :] if extra else "")
        if not spec.isalpha() and spec:
            raise NodeError(f"subscripts {spec!r} are not letters")
        if len(spec) != len(shape):
            raise NodeError(f"subscripts {spec!r} for an operand of rank {len(shape)}")
        terms.append(spec)
    if output is None:
        counts: dict[str, int] = {}
        for t in terms:
            for c in t:
                counts[c] = counts.get(c, 0) + 1
        output = dots + "".join(sorted(c for c, n in counts.items() if n == 1 and c.islower()))
    else:
        output = output.replace("...", dots)
    used = set("".join(terms))
    if any(c not in used for c in output) or len(set(output)) != len(output):
        raise NodeError(f"output subscripts {output!r} do not fit the operands")
    return terms, output


def _diagonals(node: Node, x: Any, letters: str, sizes: dict[str, Any]) -> tuple[Any, str]:
    """``x`` with each letter that it repeats taken once, along the diagonal: the two axes
    moved last, merged (``n * n``), and ``take`` at ``0, n + 1, 2 (n + 1), ...``."""
    while len(set(letters)) != len(letters):
        c = next(c for c in letters if letters.count(c) > 1)
        i = letters.index(c)
        j = letters.index(c, i + 1)
        rest = [a for a in range(len(letters)) if a not in (i, j)]
        if [*rest, i, j] != list(range(len(letters))):
            x = trace.apply("transpose", x, axes=[*rest, i, j])
        n = sizes[c]
        x = trace.apply("reshape", x, newshape=[*(sizes[letters[a]] for a in rest), n * n])
        one = trace.constant(np.array(1, np.int64), "int64")
        step = trace.apply("add", _dim_scalar(node, n), one)
        x = trace.apply("take", x, trace.apply("multiply", _iota(node, n, 1, 0), step), axis=-1)
        letters = "".join(letters[a] for a in rest) + c
    return x, letters


def _sum_unused(x: Any, letters: str, others: Sequence[str]) -> tuple[Any, str]:
    """Sum away the axes whose letters appear in none of ``others``."""
    rest = set("".join(others))
    gone = [i for i, c in enumerate(letters) if c not in rest]
    if not gone:
        return x, letters
    x = trace.apply("sum", x, axis=gone, keepdims=False, exclude=False)
    return x, "".join(c for c in letters if c in rest)


def _contract(
    a: Any, la: str, b: Any, lb: str, later: Sequence[str], sizes: dict[str, Any]
) -> tuple[Any, str]:
    """``a`` and ``b`` multiplied and summed over the letters they share that ``later``
    (the remaining operands and the output) does not need: ``nn.matmul`` of
    ``(batch, left, summed) @ (batch, summed, right)``."""
    need = set("".join(later))
    shared = [c for c in la if c in lb]
    batch = [c for c in shared if c in need]
    summed = [c for c in shared if c not in need]
    left = [c for c in la if c not in lb]
    right = [c for c in lb if c not in la]

    def grouped(x: Any, letters: str, order: list[str], groups: list[list[str]]) -> Any:
        if list(letters) != order:
            x = trace.apply("transpose", x, axes=[letters.index(c) for c in order])
        newshape = [_prod([sizes[c] for c in g]) for g in groups]
        if [sizes[c] for c in order] != newshape:
            x = trace.apply("reshape", x, newshape=newshape)
        return x

    lhs = grouped(a, la, batch + left + summed, [batch, left, summed])
    rhs = grouped(b, lb, batch + summed + right, [batch, summed, right])
    out = trace.apply("nn.matmul", lhs, rhs)
    letters = batch + left + right
    out = trace.apply("reshape", out, newshape=[sizes[c] for c in letters])
    return out, "".join(letters)


# ---- ScatterND, ScatterElements -------------------------------------------------------------

#: The reductions of ScatterND and ScatterElements by the opset that introduced them: the
#: attribute came at 16 with add and mul, max and min at 18.
_SCATTER_REDUCTIONS = {16: ("none", "add", "mul"), 18: ("none", "add", "mul", "max", "min")}

#: A scatter into a known tensor of at most this many elements is folded at import (a shape
#: being edited, its dims kept symbolic); a bigger one (a weight) is left to the kernel.
_FOLD_LIMIT = 4096


def _scatter_reduction(node: Node) -> str:
    """The node's ``reduction``, refused (NodeError) where its opset does not define it."""
    value = node.attr("reduction", "none")
    reduction = value.decode() if isinstance(value, bytes) else str(value)
    allowed: tuple[str, ...] = ("none",)
    for since, names in _SCATTER_REDUCTIONS.items():
        if node.opset >= since:
            allowed = names
    if reduction not in allowed:
        if node.opset < 16:
            raise NodeError(
                f"reduction {reduction!r}: {node.op_type} has no reduction attribute before "
                f"opset 16 (the model's is {node.opset})"
            )
        raise NodeError(
            f"reduction {reduction!r} is not defined at opset {node.opset} "
            f"(one of {', '.join(allowed)})"
        )
    return reduction


def _scatter_operands(node: Node) -> tuple[Any, Any, Any]:
    """The three inputs, present and typed as the catalogue's scatters take them."""
    data, indices, updates = (node.input(i) for i in range(3))
    if data is None or indices is None or updates is None:
        raise NodeError(f"{node.op_type} takes data, indices and updates")
    if value_dtype(indices) not in ("int32", "int64"):
        raise NodeError(f"indices must be int32 or int64, got {value_dtype(indices)}")
    if value_dtype(updates) != value_dtype(data):
        raise NodeError(f"updates are {value_dtype(updates)} but the data {value_dtype(data)}")
    return data, indices, updates


def _require_shape(what: str, got: Sequence[Any], want: Sequence[Any], rule: str) -> None:
    """NodeError when ``got`` cannot be ``want`` (another rank, or a dim proved different);
    dims that may agree are left to the shape function (a run-time check)."""
    if len(got) != len(want) or any(
        ir.compare(g, "==", w, {}) is False for g, w in zip(got, want, strict=True)
    ):
        raise NodeError(f"{what} have shape {list(got)}, but {rule} is {list(want)}")


def _combine(reduction: str) -> Any:
    """ONNX's reduction on two known elements (numbers or sympy dims)."""

    def combine(old: Any, new: Any) -> Any:
        if reduction == "none":
            return new
        if reduction == "add":
            return old + new
        if reduction == "mul":
            return old * new
        symbolic = isinstance(old, sympy.Basic) or isinstance(new, sympy.Basic)
        if reduction == "max":
            return sympy.Max(old, new) if symbolic else max(old, new)
        return sympy.Min(old, new) if symbolic else min(old, new)

    return combine


def _fold_scatter(
    node: Node, data: Any, updates: Any, targets: Any, reduction: str
) -> Known | None:
    """The scatter evaluated at import when the data and updates are known and the indices
    numbers (``targets(index)`` gives, per element of ``updates``, the element of ``data`` it
    goes to, or raises NodeError); None when it must run (or the data is too big to fold)."""
    index = node.numeric(1)
    if not isinstance(data, Known) or not isinstance(updates, Known) or index is None:
        return None
    if data.array.size > _FOLD_LIMIT or updates.array.size > _FOLD_LIMIT:
        return None
    out = np.array(data.array, dtype=object)
    new = np.array(updates.array, dtype=object)
    combine = _combine(reduction)
    for pos, where in zip(np.ndindex(*new.shape), targets(np.asarray(index)), strict=True):
        out[where] = combine(out[where], new[pos])
    return Known.of(out, data.dtype)


def _wrapped(i: int, n: Any, what: str) -> int:
    """An index of a dim ``n`` known at import, negative ones counted from the end."""
    if not isinstance(n, int):
        raise NodeError(f"{what} {i} indexes a dim {n} not known at import")
    if not -n <= i < n:
        raise NodeError(f"{what} {i} is out of range for a dim of {n}")
    return i % n


@converter("ScatterND")
def scatter_nd(node: Node) -> Any:
    """The catalogue's ``scatter_nd``: ``updates`` written (or combined, by ``reduction``)
    into a copy of ``data`` at the index tuples in the last axis of ``indices``; evaluated at
    import when everything is known (a shape edited, its dims kept)."""
    reduction = _scatter_reduction(node)
    data, indices, updates = _scatter_operands(node)
    d_shape, i_shape, u_shape = value_shape(data), value_shape(indices), value_shape(updates)
    if not i_shape:
        raise NodeError("indices must have rank 1 or more (a tuple of coordinates per row)")
    q = i_shape[-1]
    if not isinstance(q, int):
        # The ranks tell the tuple's length; the shape function checks the dim against it.
        q = len(i_shape) - 1 + len(d_shape) - len(u_shape)
        if not 0 <= q <= len(d_shape):
            raise NodeError(
                f"updates of rank {len(u_shape)} do not fit indices {list(i_shape)} and data of "
                f"rank {len(d_shape)} (updates.shape == indices.shape[:-1] + data.shape[q:])"
            )
    if q > len(d_shape):
        raise NodeError(
            f"index tuples of length {q} (the last dim of indices) for data of rank {len(d_shape)}"
        )
    expected = (*i_shape[:-1], *d_shape[q:])
    _require_shape("updates", u_shape, expected, f"indices.shape[:-1] + data.shape[{q}:]")
    lead = len(i_shape) - 1

    def targets(index: np.ndarray) -> Any:
        for pos in np.ndindex(*u_shape):
            row = index[pos[:lead]].tolist()
            coords = [_wrapped(int(i), n, "index") for i, n in zip(row, d_shape, strict=False)]
            yield (*coords, *pos[lead:])

    folded = _fold_scatter(node, data, updates, targets, reduction)
    if folded is not None:
        return folded
    return trace.apply(
        "scatter_nd", node.tensor(0), node.tensor(1), node.tensor(2), reduction=reduction
    )


@converter("ScatterElements")
def scatter_elements(node: Node) -> Any:
    """The catalogue's ``scatter_elements``: ``updates[i0, .., ik]`` written (or combined, by
    ``reduction``) into a copy of ``data`` at ``indices[i0, .., ik]`` along ``axis``, the other
    coordinates its own; evaluated at import when everything is known."""
    reduction = _scatter_reduction(node)
    data, indices, updates = _scatter_operands(node)
    d_shape, i_shape, u_shape = value_shape(data), value_shape(indices), value_shape(updates)
    rank = len(d_shape)
    if rank == 0:
        raise NodeError("ScatterElements into a scalar")
    if len(i_shape) != rank:
        raise NodeError(f"indices have rank {len(i_shape)}, the data rank {rank}")
    _require_shape("updates", u_shape, i_shape, "the shape of indices")
    axis = normalize_axis(int(node.attr("axis", 0)), rank)
    for i, (m, n) in enumerate(zip(i_shape, d_shape, strict=True)):
        if i != axis and ir.compare(m, "<=", n, {}) is False:
            raise NodeError(
                f"indices {list(i_shape)} are longer than the data {list(d_shape)} along axis {i} "
                f"(only the axis {axis} is indexed)"
            )

    def targets(index: np.ndarray) -> Any:
        for pos in np.ndindex(*u_shape):
            at = _wrapped(int(index[pos]), d_shape[axis], "index")
            yield (*pos[:axis], at, *pos[axis + 1 :])

    folded = _fold_scatter(node, data, updates, targets, reduction)
    if folded is not None:
        return folded
    return trace.apply(
        "scatter_elements",
        node.tensor(0),
        node.tensor(1),
        node.tensor(2),
        axis=axis,
        reduction=reduction,
    )
