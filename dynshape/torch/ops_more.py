"""More ATen ops met in transformer exports: ``cumsum`` (position ids from a mask),
``stack``, ``baddbmm`` (GPT-2's attention scores), ``new_ones/new_zeros/new_full``,
``tril/triu`` (causal masks, from row and column counters), ``index_select``, ``repeat``,
``argmax/argmin``, ``amin``, ``max.dim/min.dim``, ``where`` with a scalar branch,
``clamp_min/clamp_max``, ``bitwise_not``, ``reciprocal``, ``exp2``, ``sign``."""

from __future__ import annotations

from typing import Any

import numpy as np
import sympy

from dynshape.builder import ops as builder_ops
from dynshape.builder import trace

from .ops_elementwise import operand, out_dtype
from .ops_layout import _axis
from .registry import Call, Unsupported, converter


@converter("aten.cumsum.default")
def cumsum(call: Call) -> Any:
    """Running sums along ``dim`` in the recorded dtype (torch sums ints and bools as int64)."""
    x = operand(call, call["self"], out_dtype(call))
    return trace.apply("cumsum", x, axis=_axis(call["dim"], x.ndim))


@converter("aten.stack.default")
def stack(call: Call) -> Any:
    """``stack`` along a new axis ``dim``."""
    tensors = list(call["tensors"])
    return builder_ops.stack(tensors, axis=_axis(call["dim"], tensors[0].ndim + 1))


@converter("aten.baddbmm.default")
def baddbmm(call: Call) -> Any:
    """``beta * self + alpha * batch1 @ batch2``."""
    y = trace.apply("nn.matmul", call["batch1"], call["batch2"])
    if call["alpha"] != 1:
        y = trace.apply("multiply", y, operand(call, call["alpha"], y.dtype))
    if call["beta"] == 0:
        return y
    bias = call["self"]
    if call["beta"] != 1:
        bias = trace.apply("multiply", bias, operand(call, call["beta"], y.dtype))
    return trace.apply("add", y, bias)


@converter("aten.new_ones.default", "aten.new_zeros.default", "aten.new_full.default")
def new_full(call: Call) -> Any:
    """A tensor of the sizes given, in the recorded dtype."""
    dtype = out_dtype(call)
    fill = {"aten.new_ones.default": 1, "aten.new_zeros.default": 0}.get(call.target)
    value = call["fill_value"] if fill is None else fill
    scalar = trace.constant(np.asarray(value).astype(dtype), None)
    return trace.apply("full", scalar, shape=list(call["size"]), dtype=dtype)


@converter("aten.tril.default", "aten.triu.default")
def triangle(call: Call) -> Any:
    """Keep ``j - i <= k`` (``tril``) or ``j - i >= k`` (``triu``) of the last two axes; row
    and column counters are ``cumsum`` of ones of their shape, so symbolic sizes stay."""
    x = call["self"]
    k = call["diagonal"]
    if not isinstance(k, int):
        raise Unsupported(f"a symbolic diagonal {k}")
    if x.ndim < 2:
        raise Unsupported(f"tril/triu of a rank {x.ndim} tensor")
    ones = trace.apply("ones", shape=list(x.shape[-2:]), dtype="int64")
    rows = trace.apply("cumsum", ones, axis=0)
    cols = trace.apply("cumsum", ones, axis=1)
    offset = trace.apply("subtract", cols, rows)
    bound = trace.constant(np.asarray(k, np.int64), None)
    op = "less_equal" if call.target == "aten.tril.default" else "greater_equal"
    keep = trace.apply(op, offset, bound)
    zero = trace.constant(np.asarray(0).astype(x.dtype), None)
    return trace.apply("where", keep, x, zero)


@converter("aten.index_select.default")
def index_select(call: Call) -> Any:
    """``take`` of a 1-d index tensor along ``dim``."""
    x = call["self"]
    return trace.apply("take", x, call["index"], axis=_axis(call["dim"], x.ndim))


@converter("aten.repeat.default")
def repeat(call: Call) -> Any:
    """``tile`` by ``repeats`` (more repeats than axes add leading axes, as torch)."""
    x = call["self"]
    reps = list(call["repeats"])
    if len(reps) > x.ndim:
        x = trace.apply("reshape", x, newshape=[1] * (len(reps) - x.ndim) + list(x.shape))
    return trace.apply("tile", x, reps=reps)


@converter("aten.argmax.default", "aten.argmin.default")
def argmax(call: Call) -> Any:
    """The index of the maximum (minimum) along ``dim``, or of the flattened tensor."""
    x = call["self"]
    dim = call["dim"]
    fn = builder_ops.argmax if call.target.startswith("aten.argmax") else builder_ops.argmin
    if dim is None:
        flat = trace.apply("reshape", x, newshape=[-1])
        return fn(flat, axis=0, keepdims=False)
    return fn(x, axis=_axis(dim, x.ndim), keepdims=bool(call["keepdim"]))


@converter("aten.amin.default")
def amin(call: Call) -> Any:
    """The minimum over ``dim`` (all axes for an empty list)."""
    x = call["self"]
    dims = call["dim"]
    axis = None if not dims else [_axis(d, x.ndim) for d in dims]
    return builder_ops.min(x, axis=axis, keepdims=bool(call["keepdim"]))


@converter("aten.max.dim", "aten.min.dim")
def max_dim(call: Call) -> Any:
    """The values and indices of the maximum (minimum) along ``dim``."""
    x = call["self"]
    axis = _axis(call["dim"], x.ndim)
    keep = bool(call["keepdim"])
    if call.target.startswith("aten.max"):
        return (builder_ops.max(x, axis=axis, keepdims=keep),
                builder_ops.argmax(x, axis=axis, keepdims=keep))  # fmt: skip
    return (builder_ops.min(x, axis=axis, keepdims=keep),
            builder_ops.argmin(x, axis=axis, keepdims=keep))  # fmt: skip


@converter("aten.where.ScalarOther", "aten.where.ScalarSelf", "aten.where.Scalar")
def where_scalar(call: Call) -> Any:
    """``where`` with a number for one or both branches, in the recorded dtype."""
    dtype = out_dtype(call)
    a, b = operand(call, call["self"], dtype), operand(call, call["other"], dtype)
    return trace.apply("where", call["condition"], a, b)


@converter("aten.clamp_min.default", "aten.clamp_max.default")
def clamp_one(call: Call) -> Any:
    """``maximum`` with ``min`` / ``minimum`` with ``max``."""
    x = call["self"]
    if call.target == "aten.clamp_min.default":
        return trace.apply("maximum", x, operand(call, call["min"], x.dtype))
    return trace.apply("minimum", x, operand(call, call["max"], x.dtype))


@converter("aten.bitwise_not.default")
def bitwise_not(call: Call) -> Any:
    """``logical_not`` for bools, ``bitwise_not`` for integers."""
    x = call["self"]
    return trace.apply("logical_not" if x.dtype == "bool" else "bitwise_not", x)


@converter("aten.reciprocal.default", "aten.exp2.default", "aten.sign.default")
def unary_more(call: Call) -> Any:
    """``1 / x``, ``2 ** x``, ``sign(x)`` (-1, 0, 1) in the recorded dtype."""
    dtype = out_dtype(call)
    x = operand(call, call["self"], dtype)
    if call.target == "aten.reciprocal.default":
        return trace.apply("divide", operand(call, 1, dtype), x)
    if call.target == "aten.exp2.default":
        return trace.apply("power", operand(call, 2, dtype), x)
    zero = operand(call, 0, dtype)
    pos = trace.apply("cast", trace.apply("greater", x, zero), dtype=dtype)
    neg = trace.apply("cast", trace.apply("less", x, zero), dtype=dtype)
    return trace.apply("subtract", pos, neg)


@converter("aten.nonzero.default", "aten.argwhere.default")
def nonzero(call: Call) -> Any:
    """``argwhere``: ``(count, rank)`` int64 rows, ``count`` known at run time only (torch's
    unbacked ``u0``), with the input's numel as its upper bound for assertions."""
    x = call["self"]
    rows = trace.apply("argwhere", x)
    numel = sympy.Mul(*x.shape)
    call.importer.symbols.bounds[rows.shape[0]] = numel
    return rows
