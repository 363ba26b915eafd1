"""Layout ATen ops: views and reshapes (sizes may be dims: ``view(x, [s0, s1, 2, 8])``),
permutations, ``unsqueeze``/``squeeze``/``flatten``, ``cat``, ``expand``, ``slice``/``select``,
``chunk``/``split`` (at the sizes torch recorded), ``getitem`` of a multi-result op, and the
reductions ``mean``/``sum`` over dims."""

from __future__ import annotations

from typing import Any

import numpy as np
import sympy

from dynshape.builder import trace

from .registry import Call, NodeError, Unsupported, converter

#: torch's "to the end" (``INT64_MAX``) in ``slice``.
_END = 2**63 - 1


def _axis(d: int, rank: int) -> int:
    if not -rank <= d < max(rank, 1):
        raise NodeError(f"axis {d} out of range for rank {rank}")
    return d % rank if rank else 0


@converter("aten.view.default", "aten.reshape.default", "aten._unsafe_view.default")
def view(call: Call) -> Any:
    """``reshape`` to the sizes given (ints, dims and one ``-1``)."""
    size = call["size"] if "size" in call.args else call["shape"]
    return trace.apply("reshape", call["self"], newshape=list(size))


@converter("aten.permute.default")
def permute(call: Call) -> Any:
    """``transpose`` by ``dims``."""
    x = call["self"]
    return trace.apply("transpose", x, axes=[_axis(d, x.ndim) for d in call["dims"]])


@converter("aten.transpose.int")
def transpose(call: Call) -> Any:
    """The swap of two axes."""
    x = call["self"]
    axes = list(range(x.ndim))
    a, b = _axis(call["dim0"], x.ndim), _axis(call["dim1"], x.ndim)
    axes[a], axes[b] = axes[b], axes[a]
    return x if a == b else trace.apply("transpose", x, axes=axes)


@converter("aten.t.default", "aten.numpy_T.default")
def t(call: Call) -> Any:
    """The transpose of a matrix (a 0-d or 1-d tensor unchanged)."""
    x = call["self"]
    return x if x.ndim < 2 else trace.apply("transpose", x, axes=list(range(x.ndim))[::-1])


@converter("aten.unsqueeze.default")
def unsqueeze(call: Call) -> Any:
    """``expand_dims`` at ``dim`` (counted in the result's rank)."""
    x = call["self"]
    return trace.apply("expand_dims", x, axis=_axis(call["dim"], x.ndim + 1))


@converter("aten.squeeze.dim", "aten.squeeze.dims", "aten.squeeze.default")
def squeeze(call: Call) -> Any:
    """torch drops only the given axes that are 1 (others are kept, silently): the axes are
    those torch's recorded result drops."""
    x = call["self"]
    dims = call.get("dim", call.get("dims"))
    axes = list(range(x.ndim)) if dims is None else dims if isinstance(dims, list) else [dims]
    drop = [a for a in (_axis(d, x.ndim) for d in axes) if x.shape[a] == 1]
    recorded = call.recorded()
    if len(recorded) != x.ndim - len(drop):
        raise Unsupported("squeeze of an axis whose size 1 is not known at import")
    return trace.apply("squeeze", x, axis=drop) if drop else x


@converter("aten.flatten.using_ints")
def flatten(call: Call) -> Any:
    """``reshape`` with the axes ``start_dim..end_dim`` multiplied."""
    x = call["self"]
    if x.ndim == 0:
        return trace.apply("reshape", x, newshape=[1])
    a, b = _axis(call["start_dim"], x.ndim), _axis(call["end_dim"], x.ndim)
    shape = list(x.shape)
    product = sympy.Mul(*shape[a : b + 1]) if b >= a else 1
    size = int(product) if isinstance(product, (int, sympy.Integer)) else product
    return trace.apply("reshape", x, newshape=[*shape[:a], size, *shape[b + 1 :]])


@converter("aten.cat.default", "aten.concat.default")
def cat(call: Call) -> Any:
    """``concatenate`` along ``dim`` (torch's legacy empty 1-d operands are skipped)."""
    tensors = [v for v in call["tensors"] if not (v.ndim == 1 and v.shape[0] == 0)]
    if not tensors:
        return call["tensors"][0]
    if len(tensors) == 1:
        return tensors[0]
    return trace.apply("concatenate", tensors, axis=_axis(call["dim"], tensors[0].ndim))


@converter("aten.expand.default", "aten.broadcast_to.default")
def expand(call: Call) -> Any:
    """``broadcast_to`` the sizes given (``-1`` keeps the input's dim)."""
    x = call["self"]
    size = list(call["size"])
    lead = len(size) - x.ndim
    shape = [x.shape[i - lead] if (d == -1 and i >= lead) else d for i, d in enumerate(size)]
    if list(x.shape) == shape:
        return x
    return trace.apply("broadcast_to", x, shape=shape)


@converter("aten.slice.Tensor")
def slice_(call: Call) -> Any:
    """``x[..., start:end:step]`` along ``dim`` (``INT64_MAX`` is "to the end")."""
    x = call["self"]
    axis = _axis(call["dim"], x.ndim)
    start, end, step = call["start"], call["end"], call["step"]
    if isinstance(end, int) and end >= _END // 2:
        end = None
    if start == 0:
        start = None
    if start is None and end is None and step == 1:
        return x
    key = (slice(None),) * axis + (slice(start, end, step),)
    return x[key]


@converter("aten.select.int")
def select(call: Call) -> Any:
    """``x[..., index]`` along ``dim`` (an int index)."""
    x = call["self"]
    index = call["index"]
    if not isinstance(index, int):
        raise Unsupported(f"select at a symbolic index {index}")
    return x[(slice(None),) * _axis(call["dim"], x.ndim) + (index,)]


@converter("aten.index.Tensor")
def index(call: Call) -> Any:
    """``x[..., idx]`` with one integer index tensor (the other entries None): ``take`` along
    its axis. Bool masks (data-dependent sizes) and several index tensors are unsupported."""
    x = call["self"]
    indices = list(call["indices"])
    given = [i for i, t in enumerate(indices) if t is not None]
    if len(given) != 1:
        raise Unsupported(f"index with {len(given)} index tensors (one only)")
    idx = indices[given[0]]
    if idx.dtype == "bool":
        raise Unsupported("index by a bool mask (a data-dependent size)")
    return trace.apply("take", x, idx, axis=given[0])


@converter(
    "aten.chunk.default",
    "aten.split.Tensor",
    "aten.split_with_sizes.default",
    "aten.unsafe_split.Tensor",
    "aten.split_with_sizes_copy.default",
)
def split(call: Call) -> Any:
    """``split`` at the sizes torch recorded for the pieces (dims, so a symbolic axis keeps
    its expressions)."""
    x = call["self"]
    axis = _axis(call["dim"], x.ndim)
    sizes = [call.recorded(i)[axis] for i in range(len(call.out))]
    if len(sizes) == 1:
        return (x,)
    cuts, total = [], 0
    for size in sizes[:-1]:
        total = total + size
        cuts.append(total)
    pieces = trace.apply("split", x, indices_or_sections=cuts, axis=axis)
    return tuple(pieces)


@converter("operator.getitem")
def getitem(call: Call) -> Any:
    """One result of a multi-result op."""
    results, index = call["a0"], call["a1"]
    if not isinstance(results, (list, tuple)):
        raise Unsupported("getitem of a tensor (indexing is aten.select/slice/index)")
    value = results[index]
    if value is None:
        raise Unsupported(f"result {index} of its op (a training-only statistic)")
    return value


def _reduce(op: str) -> Any:
    def convert(call: Call) -> Any:
        x = call["self"]
        dims = call.get("dim")
        if call.get("dtype") is not None and call["dtype"] != x.dtype:
            x = trace.apply("cast", x, dtype=call["dtype"])
        axis = None if dims is None or dims == [] else [_axis(d, x.ndim) for d in dims]
        return getattr_reduce(op)(x, axis=axis, keepdims=bool(call.get("keepdim", False)))

    return convert


def getattr_reduce(op: str) -> Any:
    """The builder's written-out reduction ``op`` (``mean``, ``sum``)."""
    from dynshape.builder import ops

    return getattr(ops, op)


@converter("aten.any.dim", "aten.any.dims", "aten.any.default")
def any_(call: Call) -> Any:
    """``any``: the maximum of the operand as ``uint8``, compared with 0."""
    x = call["self"]
    dims = call.get("dim")
    dims = [dims] if isinstance(dims, int) else dims
    as_int = trace.apply("cast", trace.apply("not_equal", x, _zero(x.dtype)), dtype="uint8")
    axis = None if not dims else [_axis(d, x.ndim) for d in dims]
    most = getattr_reduce("max")(as_int, axis=axis, keepdims=bool(call.get("keepdim", False)))
    return trace.apply("greater", most, trace.constant(np.asarray(0, np.uint8), None))


def _zero(dtype: str) -> Any:
    return trace.constant(np.asarray(0).astype(dtype), None)


converter("aten.mean.dim", "aten.mean.default")(_reduce("mean"))
converter("aten.sum.dim_IntList", "aten.sum.default")(_reduce("sum"))
converter("aten.amax.default")(_reduce("max"))
