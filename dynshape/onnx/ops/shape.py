"""Constants, shapes and the ops of shape subgraphs: evaluated at import when their inputs are
``Known`` (so shapes stay symbolic), built as ops otherwise.

``Shape(x)`` of ``x: (batch, seq, 64)`` is the known ``[batch, seq, 64]``; ``Gather``,
``Slice``, ``Concat``, ``Unsqueeze``, ``Squeeze``, ``Cast`` and ``Reshape`` of known values are
numpy on their arrays (whose elements may be sympy dims). ``Reshape``, ``Expand`` and
``ConstantOfShape`` of a data tensor take a known shape as dims (``newshape=[batch, seq, 4,
16]``), with ONNX's 0 (copy the input's dim) and -1 (inferred).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import sympy

import ir
from dynshape.builder import trace

from .. import float_dims
from ..known import Known
from ..model import DTYPES
from ..registry import Node, NodeError, Unsupported, converter
from .operands import data_dependent, normalize_axis, value_dtype, value_shape


@converter("Constant")
def constant(node: Node) -> Known:
    """``value`` (a tensor), or one of ``value_float(s)``/``value_int(s)``."""
    value: Known | None = node.attr("value")  # a tensor attribute is read as a Known
    if value is not None:
        return value
    for key, dtype in (
        ("value_float", "float32"),
        ("value_floats", "float32"),
        ("value_int", "int64"),
        ("value_ints", "int64"),
    ):
        if node.attr(key) is not None:
            return Known(np.array(node.attr(key), dtype=dtype), dtype)
    raise NodeError("a Constant needs value, value_float(s) or value_int(s)")


@converter("Identity")
def identity(node: Node) -> Any:
    return node.input(0)


@converter("Shape")
def shape(node: Node) -> Known:
    """The input's dims (``start``/``end`` slice them, opset 15)."""
    dims = list(value_shape(node.input(0)))
    rank = len(dims)
    start = node.attr("start", 0)
    end = node.attr("end", rank)
    start = min(max(start + rank if start < 0 else start, 0), rank)
    end = min(max(end + rank if end < 0 else end, 0), rank)
    return Known.of(dims[start:end], "int64")


@converter("Size")
def size(node: Node) -> Known:
    total: Any = sympy.Integer(1)
    for d in value_shape(node.input(0)):
        total = total * d
    return Known.of(ir.simplify(total) if isinstance(total, sympy.Basic) else total, "int64")


@converter("Cast")
def cast(node: Node) -> Any:
    to = node.attr("to")
    if to not in DTYPES:
        raise Unsupported(f"Cast to element type {to} is not supported")
    return _cast(node, DTYPES[to])


@converter("CastLike")
def cast_like(node: Node) -> Any:
    """A ``Cast`` to the element type of input 1 (whose values are not read)."""
    target = node.input(1)
    if target is None:
        raise NodeError("CastLike needs input 1 (target_type)")
    return _cast(node, value_dtype(target))


#: The float8 types ``saturate`` applies to, with their largest finite values.
SATURATING = {
    "float8_e4m3fn": 448.0,
    "float8_e4m3fnuz": 240.0,
    "float8_e5m2": 57344.0,
    "float8_e5m2fnuz": 57344.0,
}


#: The saturating float8 types that have infinities (which a saturating cast makes finite).
WITH_INFINITIES = frozenset({"float8_e5m2"})


def _cast(node: Node, dtype: str) -> Any:
    """``astype`` (numpy's, ml_dtypes' for the extended dtypes, as the reference's Cast). To a
    float8 type with ``saturate=1`` (the default), values beyond the largest finite one, the
    infinities too, become it first (a ``clip``, NaN kept: the reference's
    ``saturate_cast``); with ``saturate=0`` they become NaN or inf, as ml_dtypes converts."""
    value = node.input(0)
    bound = SATURATING.get(dtype) if node.attr("saturate", 1) else None
    if value_dtype(value) == dtype and (bound is None or dtype not in WITH_INFINITIES):
        # A cast to the type the value has (T5's ``scores.float()`` before its softmax) is the
        # value itself, as ``Identity``: a kernel less, and the attention pattern's softmax
        # then reads the scores directly. Saturating changes only the infinities of a float8
        # type that has them.
        return value
    if dtype == "float8_e8m0fnu":
        return _to_e8m0(node, value)
    if isinstance(value, Known):
        if not value.symbolic:
            array = value.array
            if bound is not None:
                wide = "float64" if array.dtype.name in (*WIDE, "float64") else "float32"
                array = np.clip(array.astype(wide), -bound, bound)
            return Known(array.astype(dtype), dtype)
        folded = _cast_symbolic(node, value, dtype)
        if folded is not None:
            return folded
    x = node.tensor(0)
    if bound is not None:
        source = value_dtype(value)
        if source not in ("float16", "float32", "float64"):  # clip needs a float: exact ones
            x = trace.apply("cast", x, dtype="float64" if source in WIDE else "float32")
        x = trace.apply("clip", x, a_min=-bound, a_max=bound)
    return trace.apply("cast", x, dtype=dtype)


def _to_e8m0(node: Node, value: Any) -> Any:
    """ONNX's cast to FLOAT8E8M0 (the reference's ``to_float8e8m0``): the float32 value's
    exponent bits, the sign ignored, rounded by ``round_mode`` (``up``: any fraction adds one;
    ``nearest``: the guard bit with round, sticky or the exponent's low bit; ``down``: none);
    ``saturate`` stops 2**127 from rounding to NaN; NaN and inf are NaN. ml_dtypes' own
    conversion rounds to nearest and makes negatives NaN, so it is composed of bit ops."""
    mode = node.attr("round_mode", "up")
    if isinstance(mode, bytes):
        mode = mode.decode()
    if mode not in ("up", "nearest", "down"):
        raise NodeError(f"Cast: round_mode {mode!r} is not up, nearest or down")
    saturate = bool(node.attr("saturate", 1))
    if isinstance(value, Known) and not value.symbolic:
        from onnx.numpy_helper import to_float8e8m0

        array = to_float8e8m0(value.array.astype(np.float32), saturate, mode)
        return Known(np.asarray(array), "float8_e8m0fnu")
    x = node.tensor(0)
    if value_dtype(value) != "float32":
        x = trace.apply("cast", x, dtype="float32")
    bits = trace.apply("bitcast", x, dtype="uint32")

    def u32(v: int) -> Any:
        return trace.constant(np.uint32(v), "uint32")

    def masked(mask: int) -> Any:  # bits & mask != 0
        return trace.apply("greater", trace.apply("bitwise_and", bits, u32(mask)), u32(0))

    exponent = trace.apply("bitwise_and", trace.apply("right_shift", bits, u32(23)), u32(255))
    if mode == "down":
        return _e8m0_of(exponent)
    if mode == "up":
        up = masked(0x7FFFFF)
    else:  # nearest
        low = trace.apply("greater", exponent, u32(0))
        tail = trace.apply("logical_or", masked(0x200000), masked(0x1FFFFF))
        up = trace.apply("logical_and", masked(0x400000), trace.apply("logical_or", tail, low))
    keep = trace.apply("not_equal", exponent, u32(255))  # NaN and inf stay 255
    if saturate:
        keep = trace.apply("logical_and", keep, trace.apply("not_equal", exponent, u32(254)))
    up = trace.apply("logical_and", up, keep)
    return _e8m0_of(trace.apply("add", exponent, trace.apply("cast", up, dtype="uint32")))


def _e8m0_of(exponent: Any) -> Any:
    """The uint32 exponent (at most 255) as FLOAT8E8M0, whose byte it is."""
    byte = trace.apply("cast", exponent, dtype="uint8")
    return trace.apply("bitcast", byte, dtype="float8_e8m0fnu")


#: Integer types whose values float32 does not hold exactly (float64 holds those of 32 bits).
WIDE = ("int32", "uint32", "int64", "uint64")


def _cast_symbolic(node: Node, value: Known, dtype: str) -> Known | None:
    """A cast of a shape value kept as one where it is exact (``float_dims.py``): dims to an
    integer type, dims to a float (``AsFloat``), and float dims back to integers when every
    element is integer-valued, the input dims' ranges then narrowed to where the float math
    was exact. None: the cast runs (a float to another float, a bool, a value not integral)."""
    source = np.dtype(value.dtype).kind
    target = np.dtype(dtype).kind
    if source in "iu" and target in "iu":
        return Known(value.array, dtype)  # dims are integers already
    if source in "iu" and dtype in float_dims.SIGNIFICAND_BITS:
        cast = [float_dims.as_float(d, dtype) for d in value.array.flat]
        return Known.of(np.array(cast, dtype=object).reshape(value.shape), dtype)
    if source != "f" or target not in "iu":
        return None
    dims = [float_dims.as_dim(v) for v in value.array.flat]
    if any(d is None for d in dims):
        return None
    for e, bits in float_dims.requirements(value.array.flat):
        if node.domain is None or not node.domain.at_most(e, 2**bits):
            return None
    return Known.of(np.array(dims, dtype=object).reshape(value.shape), dtype)


def _last_resort(node: Node, what: str) -> None:
    """Sizes known at run time only are the importer's last try (``graph.RUN_TIME_SIZES``):
    the tries before it may find them as dims (a truncating division of dims, narrowed)."""
    if node.domain is not None and not node.domain.run_time_sizes:
        raise Unsupported(what)


@converter("Gather")
def gather(node: Node) -> Any:
    data, indices = node.input(0), node.input(1)
    rank = len(value_shape(data))
    axis = normalize_axis(node.attr("axis", 0), rank)
    if isinstance(data, Known) and isinstance(indices, Known) and indices.numeric() is not None:
        n = data.shape[axis]
        idx = np.asarray(indices.array, dtype=np.int64)
        if np.any((idx < -n) | (idx >= n)):
            raise NodeError(f"Gather indices {idx.tolist()} are out of range for {n}")
        return Known(np.take(data.array, idx, axis=axis), data.dtype)
    return trace.apply("take", node.tensor(0), node.tensor(1), axis=axis)


@converter("Unsqueeze")
def unsqueeze(node: Node) -> Any:
    axes = node.attr("axes") if node.opset < 13 else node.ints(1, "axes")
    if axes is None:
        raise NodeError("Unsqueeze needs axes")
    rank = len(value_shape(node.input(0))) + len(axes)
    axes = sorted(normalize_axis(int(a), rank, "axes entry") for a in axes)
    value = node.input(0)
    if isinstance(value, Known):
        array = value.array
        for a in axes:
            array = np.expand_dims(array, a)
        return Known(array, value.dtype)
    out = value
    for a in axes:
        out = trace.apply("expand_dims", out, axis=a)
    return out


@converter("Squeeze")
def squeeze(node: Node) -> Any:
    value = node.input(0)
    shape_in = value_shape(value)
    given = node.ints(1, "axes") if len(node.inputs) > 1 else None
    if given is None:
        axes = [i for i, d in enumerate(shape_in) if d == 1]
    else:
        axes = sorted(normalize_axis(int(a), len(shape_in), "axes entry") for a in given)
    if isinstance(value, Known):
        return Known(np.squeeze(value.array, axis=tuple(axes)), value.dtype)
    return trace.apply("squeeze", value, axis=axes)


@converter("Concat")
def concat(node: Node) -> Any:
    parts = [v for v in node.inputs if v is not None]
    rank = len(value_shape(parts[0]))
    axis = normalize_axis(node.attr("axis"), rank)
    if all(isinstance(p, Known) for p in parts):
        dtype = parts[0].dtype
        arrays = [
            p.array.astype(object) if any(q.symbolic for q in parts) else p.array for p in parts
        ]
        return Known(np.concatenate(arrays, axis=axis), dtype)
    return trace.apply(
        "concatenate",
        [node.materialize(p) if isinstance(p, Known) else p for p in parts],
        axis=axis,
    )


@converter("Reshape")
def reshape(node: Node) -> Any:
    value = node.input(0)
    allowzero = node.attr("allowzero", 0)
    if node.known(1) is None:  # a shape computed from data: known at run time only
        if allowzero:
            raise Unsupported("allowzero=1 with a shape computed from data is not supported")
        return trace.apply("dyn.reshape", node.tensor(0), node.tensor(1))  # 0 copies, as ONNX
    target = node.ints(1, "shape")
    assert target is not None
    if data_dependent(target) and not allowzero:
        # sizes known at run time only: the shape as a tensor (ONNX's 0 and -1 as ONNX's)
        return trace.apply("dyn.reshape", node.tensor(0), node.tensor(1))
    shape_in = value_shape(value)
    newshape = []
    for i, d in enumerate(target):
        if d == 0 and not allowzero:
            if i >= len(shape_in):
                raise NodeError(
                    f"shape[{i}] = 0 copies input dim {i}, but the input has rank {len(shape_in)}"
                )
            newshape.append(shape_in[i])
        else:
            newshape.append(d)
    if data_dependent(newshape):  # a 0 copied a ? of the input (a slice to a computed end)
        return trace.apply("dyn.reshape", node.tensor(0), node.tensor(1))
    if isinstance(value, Known):
        total = int(np.prod(value.shape))
        known_dims = [d for d in newshape if d != -1]
        if any(not isinstance(d, int) for d in known_dims):
            raise NodeError("a reshape of a known value to symbolic dims")
        if -1 in newshape:
            rest = int(np.prod(known_dims)) if known_dims else 1
            newshape = [total // rest if d == -1 else d for d in newshape]
        return Known(value.array.reshape(newshape), value.dtype)
    # 0 is taken care of above: the IR's 0 would copy too, but allowzero=1 means a real 0.
    return trace.apply("reshape", value, newshape=newshape)


@converter("Flatten")
def flatten(node: Node) -> Any:
    shape_in = value_shape(node.input(0))
    axis = node.attr("axis", 1)
    axis = axis + len(shape_in) if axis < 0 else axis
    if not 0 <= axis <= len(shape_in):
        raise NodeError(f"axis {node.attr('axis')} is out of range for rank {len(shape_in)}")
    head: Any = 1
    for d in shape_in[:axis]:
        head = head * d
    head = ir.check_dim(ir.simplify(head)) if isinstance(head, sympy.Basic) else head
    return trace.apply("reshape", node.tensor(0), newshape=[head, -1])


@converter("Transpose")
def transpose(node: Node) -> Any:
    perm = node.attr("perm")
    value = node.input(0)
    if isinstance(value, Known):
        return Known(np.transpose(value.array, perm), value.dtype)
    return trace.apply("transpose", value, axes=list(perm) if perm is not None else None)


@converter("ConstantOfShape")
def constant_of_shape(node: Node) -> Any:
    """A tensor of ``shape`` filled with ``value``; a shape computed from data (a model input,
    say) makes the sizes known at run time only (``dyn.full``)."""
    fill = node.attr("value")
    fill = fill if fill is not None else Known(np.zeros(1, np.float32), "float32")
    value = fill.array.reshape(-1)[0].item()
    scalar = trace.constant(np.array(value, dtype=fill.dtype), fill.dtype)
    if node.input(0) is not None and node.known(0) is None:
        _last_resort(node, "a shape computed from data")
        return trace.apply("dyn.full", scalar, node.tensor(0), dtype=fill.dtype)
    dims = node.ints(0, "shape")
    assert dims is not None
    if all(isinstance(d, int) for d in dims):
        return Known(np.full(dims, value, dtype=fill.dtype), fill.dtype)
    if data_dependent(dims):
        return trace.apply("dyn.full", scalar, node.tensor(0), dtype=fill.dtype)
    return trace.apply(
        "full",
        scalar,
        shape=dims,
        dtype=fill.dtype,
    )


@converter("Expand")
def expand(node: Node) -> Any:
    """Broadcast both ways (ONNX Expand): the result is the broadcast of the input's shape and
    ``shape``. Where neither dim is 1 and they are not the same dim, the requested one is the
    target and ``broadcast_to`` checks at run time that the input's dim matches. A shape
    computed from data broadcasts against a tensor of that shape, built at run time."""
    value = node.input(0)
    from_data = node.input(1) is not None and node.known(1) is None
    out: list[Any] = []
    if not from_data:
        dims = node.ints(1, "shape")
        assert dims is not None
        shape_in = value_shape(value)
        rank = max(len(dims), len(shape_in))
        a = [1] * (rank - len(shape_in)) + list(shape_in)
        b = [1] * (rank - len(dims)) + list(dims)
        out = [x if (y == 1 or x == y) else y for x, y in zip(a, b, strict=True)]
        known_value = isinstance(value, Known) and not value.symbolic
        if known_value and all(isinstance(d, int) for d in out):
            return Known(np.broadcast_to(value.array, out).copy(), value.dtype)
    if from_data:
        _last_resort(node, "a shape computed from data")
    if from_data or data_dependent(out):
        # a size known at run time only: broadcast against a tensor of that shape (x * 1 and
        # x | False are x, broadcast both ways as Expand is)
        dtype = value_dtype(value)
        if dtype == "bool":
            none = trace.apply("dyn.zeros", node.tensor(1), dtype=dtype)
            return trace.apply("logical_or", node.tensor(0), none)
        ones = trace.apply("dyn.ones", node.tensor(1), dtype=dtype)
        return trace.apply("multiply", node.tensor(0), ones)
    return trace.apply("broadcast_to", node.tensor(0), shape=out)


#: The opset from which ``Range`` has ``stash_type``: a float16 range counted in another float
#: type (an ONNX element type: 1 float32, the default, or 11 float64) and rounded once.
RANGE_STASH_OPSET = 27
_STASH_TYPES = {1: "float32", 11: "float64"}


def _stash_type(node: Node, dtype: str) -> str:
    """The type ``Range`` counts in (``RANGE_STASH_OPSET``); ``dtype`` itself before it."""
    if dtype != "float16" or node.opset < RANGE_STASH_OPSET:
        return dtype
    stash = node.attr("stash_type", 1)
    if stash not in _STASH_TYPES:
        raise Unsupported(f"stash_type={stash}: expected 1 (float) or 11 (double)")
    return _STASH_TYPES[stash]


def _as_scalar(value: Any) -> Any:
    shape = value_shape(value)
    if shape and all(d == 1 for d in shape):
        return trace.apply("reshape", value, newshape=[])
    return value


@converter("Range")
def range_(node: Node) -> Any:
    """Folded when its scalars are numbers. With dims (``Range(0, seq, 1)``, position ids) and
    an integer step the length is ``max(ceil((limit - start) / delta), 0)`` (without the ``max``
    where the input dims' ranges prove the count non-negative): integer ranges are
    counted from a tensor of that length (no data-dependent size); float ones run ``arange`` and
    are reshaped to it (a run-time check that the two agree)."""
    a, b, c = (node.known(i) for i in range(3))
    dtype = value_dtype(node.input(0))
    stash = _stash_type(node, dtype)

    def run_time() -> Any:
        # ONNX's bounds are scalars; a one-element tensor (the AffineGrid function's) is read
        # as one, as the reference does
        bounds = [_as_scalar(node.tensor(i)) for i in range(3)]
        if stash != dtype:
            bounds = [trace.apply("cast", v, dtype=stash) for v in bounds]
        out = trace.apply("arange", *bounds, dtype=stash)
        return out if stash == dtype else trace.apply("cast", out, dtype=dtype)

    if a is None or b is None or c is None:
        return run_time()  # from data: the length is known at run time only
    start, limit, delta = (k.array.reshape(-1)[0] for k in (a, b, c))
    if not (a.symbolic or b.symbolic or c.symbolic):
        if stash != dtype:
            start, limit, delta = (np.dtype(stash).type(v) for v in (start, limit, delta))
        values = np.arange(start, limit, delta, dtype=stash).astype(a.dtype)
        return Known(values, a.dtype)
    if not isinstance(delta, (int, np.integer)) or not delta:
        return run_time()
    span = (sympy.sympify(limit) - sympy.sympify(start)) / int(delta)
    count = ir.simplify(sympy.ceiling(span))
    if not node.nonnegative(count, narrow=False):  # an empty range when negative
        count = sympy.Max(count, 0)
    length = ir.check_dim(count)
    if np.dtype(dtype).kind not in "iu":
        return trace.apply("reshape", run_time(), newshape=[length])
    # Integers: start + i * delta for i = 0, 1, ..., length - 1, counted from a tensor of the
    # symbolic length. An arange would be sized at run time by a fresh symbol, and one
    # data-dependent size makes every size comparison of the memory planner unknown.
    ones = trace.apply(
        "full", trace.constant(np.array(1, dtype=dtype), dtype), shape=[length], dtype=dtype
    )
    out = trace.apply("cumsum", ones, axis=0, exclusive=True)
    if int(delta) != 1:
        out = trace.apply("multiply", out, node.tensor(2))
    if not (isinstance(start, (int, np.integer)) and start == 0):
        out = trace.apply("add", out, node.tensor(0))
    return out
