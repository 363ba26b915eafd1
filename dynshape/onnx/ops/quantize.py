"""Quantization: ``QuantizeLinear``, ``DequantizeLinear``, ``DynamicQuantizeLinear``,
``MatMulInteger``, ``ConvInteger``, ``QLinearMatMul`` and ``QLinearConv``, composed of catalogue
ops (``cast``, ``round``, ``clip``, ``divide``, ``multiply``, ``nn.matmul``, ``nn.conv2d``).

Semantics are the onnx package's reference implementation (``onnx/reference/ops``), which the
backend cases are generated from:

- quantizing divides in the type numpy promotes ``x`` and the scale to (or ``precision``),
  rounds half to even there, then adds the zero point and saturates in float32 (float64 for a
  float64 division): exact, since the rounded quotient is an integer and any value past 2**24
  saturates anyway;
- dequantizing subtracts the zero point and multiplies in float32 (float64 for int32 data, so
  the difference of two int32s is exact) and casts to ``output_dtype`` or the scale's type;
- integer products (``MatMulInteger``, ``ConvInteger`` and the accumulators of the ``QLinear*``
  ops) run in float64 on BLAS: operands at most 255 in magnitude make each product below 2**16,
  so sums of fewer than 2**37 of them are exact. An int32 result is cast through int64, which
  wraps as an int32 accumulator does; the ``QLinear*`` ops rescale the exact sum (the spec
  lets a 32-bit accumulation overflow, it does not ask for it).

Scales and zero points are per tensor (a scalar or one element), per axis (1-d, along
``axis``) or blocked (``block_size``: each repeated along ``axis``, the last block cut to the
input's extent). A ``DequantizeLinear`` whose inputs are all constants (a QDQ model's weights)
is evaluated at import. The extended types (bfloat16, float8, float4, int4, int2: storage in
the VM) are cast to and from float32 around the arithmetic (``design/onnx.md``, Quantization).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from dynshape.builder import trace

from ..known import Known
from ..model import DTYPES
from ..registry import Node, NodeError, Unsupported, converter
from . import nn
from .operands import normalize_axis, value_dtype, value_shape

#: The integer types a value quantizes to, with the range it saturates to.
INT_RANGES: dict[str, tuple[int, int]] = {
    "uint8": (0, 255),
    "int8": (-128, 127),
    "uint16": (0, 65535),
    "int16": (-32768, 32767),
    "uint4": (0, 15),
    "int4": (-8, 7),
    "uint2": (0, 3),
    "int2": (-2, 1),
}
#: float8 targets, with the largest finite value ``saturate`` clips to (ml_dtypes' finfo.max);
#: no zero point is added.
FLOAT8 = {
    "float8_e4m3fn": 448.0,
    "float8_e4m3fnuz": 240.0,
    "float8_e5m2": 57344.0,
    "float8_e5m2fnuz": 57344.0,
}
#: float4: the zero point added; the cast itself saturates (no inf or nan to overflow to).
FLOAT4 = "float4_e2m1fn"

_FLOATS = ("float16", "float32", "float64")
#: Float types the VM stores but does not compute on (``ir.dtypes.EXTENDED``): the arithmetic
#: runs in float32 and the result is rounded to them, as numpy with ml_dtypes does.
_STORED_FLOATS = ("bfloat16", "float8_e8m0fnu")


def _const(value: Any, dtype: str) -> Any:
    return trace.constant(np.asarray(value, dtype=dtype), dtype)


def _cast(x: Any, dtype: str) -> Any:
    return x if value_dtype(x) == dtype else trace.apply("cast", x, dtype=dtype)


def _elem(node: Node, name: str) -> str | None:
    """The IR dtype an element-type attribute names (None when unset or 0)."""
    code = int(node.attr(name, 0) or 0)
    if not code:
        return None
    if code not in DTYPES:
        raise Unsupported(f"{name}={code} names an element type the importer does not support")
    return DTYPES[code]


@dataclasses.dataclass(frozen=True)
class _Layout:
    """How a scale or zero point lines up with the tensor it describes (``x_shape``): per
    tensor, along ``axis`` (1-d), or in blocks of ``block`` along ``axis``."""

    x_shape: tuple[Any, ...]
    axis: int
    block: int

    def shape_of(self, param_shape: tuple[Any, ...], what: str) -> str:
        """'tensor', 'axis' or 'block', after checking ``param_shape`` against the input."""
        rank = len(self.x_shape)
        if len(param_shape) == 0 or tuple(param_shape) == (1,):
            return "tensor"
        if self.block <= 0:
            if len(param_shape) != 1:
                raise NodeError(
                    f"{what} of shape {list(param_shape)} must be a scalar or 1-d (per axis) "
                    "without block_size"
                )
            axis = normalize_axis(self.axis, rank)
            d, s = self.x_shape[axis], param_shape[0]
            if isinstance(d, int) and isinstance(s, int) and d != s:
                raise NodeError(
                    f"{what} has {s} elements but the input has {d} along axis {self.axis}"
                )
            return "axis"
        if len(param_shape) != rank:
            raise NodeError(
                f"{what} of shape {list(param_shape)} must have the input's rank {rank} "
                f"for blocked quantization"
            )
        axis = normalize_axis(self.axis, rank)
        for i, (d, s) in enumerate(zip(self.x_shape, param_shape, strict=True)):
            if not (isinstance(d, int) and isinstance(s, int)):
                if i == axis:
                    raise Unsupported(
                        f"blocked quantization over the symbolic dim {d} (axis {axis}): the "
                        "last block's extent must be known at import"
                    )
                continue
            want = -(-d // self.block) if i == axis else d
            if s != want:
                raise NodeError(
                    f"{what} of shape {list(param_shape)} does not fit the input "
                    f"{list(self.x_shape)} with block_size={self.block} on axis {axis}"
                )
        return "block"

    def numpy(self, array: np.ndarray, kind: str) -> np.ndarray:
        """A known parameter shaped to broadcast against the input."""
        rank = len(self.x_shape)
        if kind == "tensor":
            return array.reshape(())
        axis = normalize_axis(self.axis, rank)
        if kind == "axis":
            return array.reshape([-1 if i == axis else 1 for i in range(rank)])
        return np.repeat(array, self.block, axis=axis).take(
            range(int(self.x_shape[axis])), axis=axis
        )

    def ops(self, value: Any, kind: str) -> Any:
        """A run-time parameter shaped to broadcast against the input."""
        rank = len(self.x_shape)
        if kind == "tensor":
            return value if not value_shape(value) else trace.apply("reshape", value, newshape=[])
        axis = normalize_axis(self.axis, rank)
        shape = value_shape(value)
        if kind == "axis":
            newshape = [shape[0] if i == axis else 1 for i in range(rank)]
            return trace.apply("reshape", value, newshape=newshape)
        out = trace.apply("repeat", value, repeats=self.block, axis=axis)
        d = int(self.x_shape[axis])
        if int(shape[axis]) * self.block != d:
            end = [int(s) if isinstance(s, int) else 2**62 for s in value_shape(out)]
            end[axis] = d
            out = trace.apply("strided_slice", out, begin=[0] * rank, end=end)
        return out

    def param(self, node: Node, i: int, dtype: str, what: str, via: str | None = None) -> Any:
        """Input ``i`` as a ``dtype`` tensor that broadcasts against the input (rounded to
        ``via`` on the way)."""
        value = node.input(i)
        kind = self.shape_of(value_shape(value), what)
        array = node.numeric(i)
        if array is not None:
            array = self.numpy(np.asarray(array), kind)
            return _const((array if via is None else array.astype(via)).astype(dtype), dtype)
        out = self.ops(node.tensor(i), kind)
        return _cast(out if via is None else _cast(out, via), dtype)


def _layout(node: Node) -> _Layout:
    block = int(node.attr("block_size", 0) or 0)
    if block < 0:
        raise NodeError(f"block_size={block} must be positive")
    return _Layout(tuple(value_shape(node.input(0))), int(node.attr("axis", 1)), block)


def _division_type(x_dtype: str, scale_dtype: str, precision: str | None) -> str:
    """The type ``x / scale`` is computed in: ``precision`` if given, else numpy's promotion of
    the two (the reference's ``x / y_scale``: int32 data over float32 is float64)."""
    if precision is not None:
        if precision not in (*_FLOATS, "bfloat16"):
            raise Unsupported(f"precision={precision} is not a float type the importer supports")
        return precision
    return str(np.result_type(np.dtype(x_dtype), np.dtype(scale_dtype)))


def _quotient(node: Node, layout: _Layout, compute: str) -> Any:
    """``x / y_scale`` in ``compute``; a stored type's (bfloat16) in float32, both operands
    and the quotient rounded to it, as ml_dtypes computes."""
    arith = compute if compute in _FLOATS else "float32"
    via = None if compute == arith else compute
    x = _cast(node.tensor(0), compute)
    scale = layout.param(node, 1, arith, "y_scale", via)
    q = trace.apply("divide", _cast(x, arith), scale)
    return q if via is None else _cast(_cast(q, via), arith)


def _saturated(q: Any, zero_point: Any, target: str) -> Any:
    """``round(x / scale)`` (integer-valued, float32 or float64) plus the zero point, saturated to
    ``target``'s range and cast to it."""
    if zero_point is not None:
        q = trace.apply("add", q, zero_point)
    lo, hi = INT_RANGES[target]
    return trace.apply(
        "cast", trace.apply("clip", q, a_min=float(lo), a_max=float(hi)), dtype=target
    )


@converter("QuantizeLinear")
def quantize_linear(node: Node) -> Any:
    """``saturate(round(x / y_scale) + y_zero_point)``, rounding half to even; the output type
    is the zero point's, else ``output_dtype``, else uint8."""
    x_dtype = value_dtype(node.input(0))
    scale_dtype = value_dtype(node.input(1))
    zp = node.input(2)
    target = _elem(node, "output_dtype")
    if zp is not None:
        zp_dtype = value_dtype(zp)
        if target is not None and target != zp_dtype:
            raise NodeError(f"output_dtype {target} differs from the zero point's type {zp_dtype}")
        target = zp_dtype
    target = target or "uint8"
    if target not in (*INT_RANGES, *FLOAT8, FLOAT4):
        raise Unsupported(f"quantizing to {target} is not supported")
    numbers = (*_FLOATS, "bfloat16", "int32")
    if x_dtype not in numbers or scale_dtype not in (*numbers, "float8_e8m0fnu"):
        raise Unsupported(f"QuantizeLinear of {x_dtype} by a {scale_dtype} scale is not supported")
    layout = _layout(node)
    compute = _division_type(x_dtype, scale_dtype, _elem(node, "precision"))
    q = _quotient(node, layout, compute)
    wide = "float64" if compute == "float64" else "float32"
    if target in FLOAT8:  # the reference adds no zero point for float8
        if int(node.attr("saturate", 1)):
            top = FLOAT8[target]
            q = trace.apply("clip", q, a_min=-top, a_max=top)
        return trace.apply("cast", q, dtype=target)
    if target == FLOAT4:
        if zp is not None:
            q = trace.apply("add", q, layout.param(node, 2, wide, "y_zero_point"))
        return trace.apply("cast", q, dtype=target)
    q = _cast(trace.apply("round", q), wide)
    zero_point = None if zp is None else layout.param(node, 2, wide, "y_zero_point")
    return _saturated(q, zero_point, target)


@converter("DequantizeLinear")
def dequantize_linear(node: Node) -> Any:
    """``(x - x_zero_point) * x_scale`` in float32 (float64 for int32 data), cast to
    ``output_dtype`` or the scale's type."""
    x_dtype = value_dtype(node.input(0))
    scale_dtype = value_dtype(node.input(1))
    if x_dtype not in (*INT_RANGES, "int32", *FLOAT8, FLOAT4):
        raise Unsupported(f"DequantizeLinear of {x_dtype} is not supported")
    if scale_dtype not in (*_FLOATS, *_STORED_FLOATS):
        raise Unsupported(f"DequantizeLinear with a {scale_dtype} scale is not supported")
    out = _elem(node, "output_dtype") or scale_dtype
    if out not in (*_FLOATS, "bfloat16"):
        raise Unsupported(f"DequantizeLinear to {out} is not supported")
    zp = node.input(2)
    if zp is not None and value_dtype(zp) != x_dtype:
        raise NodeError(f"x_zero_point is {value_dtype(zp)} but x is {x_dtype}")
    if x_dtype in (*FLOAT8, FLOAT4):
        # the spec's float zero point must be zero (the reference checks float8's, ignores
        # float4's); one given at run time is not read
        known = node.numeric(2)
        if x_dtype in FLOAT8 and known is not None and np.any(known.astype(np.float32) != 0):
            raise NodeError(f"x_zero_point of {x_dtype} data must be zero")
        node = dataclasses.replace(node, inputs=node.inputs[:2])
    layout = _layout(node)
    wide = "float64" if x_dtype == "int32" else "float32"
    if node.all_known() and all(
        node.numeric(i) is not None for i in range(3) if node.input(i) is not None
    ):
        return _dequantize_known(node, layout, wide, out)
    x = _cast(node.tensor(0), wide)
    if node.input(2) is not None:
        x = trace.apply("subtract", x, layout.param(node, 2, wide, "x_zero_point"))
    y = trace.apply("multiply", x, layout.param(node, 1, wide, "x_scale"))
    return _cast(y, out)


def _dequantize_known(node: Node, layout: _Layout, wide: str, out: str) -> Known:
    """DequantizeLinear of constants, evaluated with numpy as the ops would."""

    def param(i: int, what: str) -> np.ndarray:
        kind = layout.shape_of(value_shape(node.input(i)), what)
        return layout.numpy(np.asarray(node.numeric(i)), kind).astype(wide)

    x = np.asarray(node.numeric(0)).astype(wide)
    if node.input(2) is not None:
        x = x - param(2, "x_zero_point")
    return Known(np.asarray(x * param(1, "x_scale")).astype(out), out)


@converter("DynamicQuantizeLinear")
def dynamic_quantize_linear(node: Node) -> Any:
    """uint8 quantization with the scale and zero point of the data's range widened to hold
    0: ``scale = (max(x, 0) - min(x, 0)) / 255`` (1 for an all-zero range, as onnxruntime;
    the reference gives 1/255), ``zero_point = round(clip(-min / scale, 0, 255))``."""
    if value_dtype(node.input(0)) != "float32":
        raise NodeError(f"DynamicQuantizeLinear takes float32, got {value_dtype(node.input(0))}")
    x = node.tensor(0)
    f32 = "float32"
    zero = _const(0.0, f32)
    hi = trace.apply("maximum", trace.apply("max", x, axis=None, keepdims=False), zero)
    lo = trace.apply("minimum", trace.apply("min", x, axis=None, keepdims=False), zero)
    scale = trace.apply("divide", trace.apply("subtract", hi, lo), _const(255.0, f32))
    scale = trace.apply("where", trace.apply("equal", hi, lo), _const(1.0, f32), scale)
    start = trace.apply("negative", trace.apply("divide", lo, scale))
    zp = trace.apply("round", trace.apply("clip", start, a_min=0.0, a_max=255.0))
    q = trace.apply("round", trace.apply("divide", x, scale))
    y = _saturated(q, zp, "uint8")
    return [y, scale, trace.apply("cast", zp, dtype="uint8")]


# ---- integer products ---------------------------------------------------------------------


_NUMPY = {"subtract": np.subtract, "multiply": np.multiply, "divide": np.true_divide}


def _apply(op: str, a: Any, b: Any) -> Any:
    """``op`` of two operands, each a numpy array (known at import) or a run-time tensor: with
    numpy when both are known (the kernels' own ufuncs, so the same numbers), else an op."""
    if isinstance(a, np.ndarray) and isinstance(b, np.ndarray):
        return np.asarray(_NUMPY[op](a, b))
    return trace.apply(op, _tensor(a), _tensor(b))


def _tensor(a: Any) -> Any:
    return trace.constant(a, a.dtype.name) if isinstance(a, np.ndarray) else a


def _to(a: Any, dtype: str) -> Any:
    return a.astype(dtype) if isinstance(a, np.ndarray) else _cast(a, dtype)


def _operand(node: Node, i: int, zp_index: int, role: str) -> Any:
    """Input ``i`` (int8/uint8) minus its optional zero point, in float64 (computed at import
    for a constant weight). ``role`` is how a 1-d zero point of several elements lines up:
    'row' (one per row of a matrix operand, the spec's per-row ``a``), 'column' (per column of
    ``b``), 'channel' (per output channel of a convolution weight) or 'tensor' (only per
    tensor)."""
    dtype = value_dtype(node.input(i))
    if dtype not in ("int8", "uint8"):
        raise Unsupported(f"{node.op_type} of {dtype} is not supported (int8 and uint8 are)")
    known = node.numeric(i)
    x = _to(np.asarray(known) if known is not None else node.tensor(i), "float64")
    if node.input(zp_index) is None:
        return _tensor(x)
    if value_dtype(node.input(zp_index)) != dtype:
        raise NodeError(
            f"input {zp_index}'s type {value_dtype(node.input(zp_index))} differs from "
            f"input {i}'s {dtype}"
        )
    return _tensor(_apply("subtract", x, _aligned(node, zp_index, i, role, "float64")))


def _aligned(node: Node, p: int, i: int, role: str, dtype: str) -> Any:
    """Input ``p`` (a scale or zero point of input ``i``) as ``dtype``, shaped to broadcast
    against input ``i`` (or against the result, for a convolution's channels): a numpy array
    when known at import, else a tensor."""
    shape = tuple(value_shape(node.input(p)))
    rank = len(value_shape(node.input(i)))
    if len(shape) == 0 or shape == (1,):
        newshape: list[Any] | None = []
    elif len(shape) == 1 and role == "row" and rank >= 2:
        newshape = [shape[0], 1]
    elif len(shape) == 1 and role == "column":
        newshape = None
    elif len(shape) == 1 and role in ("channel", "result"):
        # a weight's channels are its axis 0, a result's its axis 1 (rank - 2 axes after it)
        newshape = [shape[0]] + [1] * (rank - 1 if role == "channel" else rank - 2)
    elif len(shape) >= 2 and role in ("row", "column"):
        newshape = None
    else:
        raise NodeError(
            f"input {p} of shape {list(shape)} must be a scalar"
            + (" or 1-d (per channel)" if role in ("channel", "result") else "")
        )
    array = node.numeric(p)
    if array is not None:
        array = np.asarray(array)
        return (array if newshape is None else array.reshape(newshape)).astype(dtype)
    value = node.tensor(p)
    if newshape is not None:
        value = trace.apply("reshape", value, newshape=newshape)
    return _cast(value, dtype)


def _int32(y: Any) -> Any:
    """An exact float64 sum as int32, wrapping as a 32-bit accumulator would."""
    return trace.apply("cast", trace.apply("cast", y, dtype="int64"), dtype="int32")


@converter("MatMulInteger")
def matmul_integer(node: Node) -> Any:
    """``(A - a_zero_point) @ (B - b_zero_point)`` as int32 (numpy's matmul, batched)."""
    a = _operand(node, 0, 2, "row")
    b = _operand(node, 1, 3, "column")
    return _int32(trace.apply("nn.matmul", a, b))


def _requantize(node: Node, acc: Any, scales: Any, y_scale: int, y_zp: int) -> Any:
    """``saturate(round(acc * scales / y_scale) + y_zero_point)``: ``scales`` the product of
    the inputs' scales in their type, the multiplier then applied in float64 (the reference
    multiplies an int32 array by a float32 one)."""
    target = value_dtype(node.input(y_zp))
    if target not in ("int8", "uint8"):
        raise Unsupported(f"{node.op_type} to {target} is not supported (int8 and uint8 are)")
    for i in (y_scale, y_zp):
        if tuple(value_shape(node.input(i))) not in ((), (1,)):
            raise Unsupported(f"{node.op_type}'s output scale and zero point must be per tensor")
    ts = value_dtype(node.input(y_scale))
    y_s = _aligned(node, y_scale, y_scale, "tensor", ts)
    multiplier = _tensor(_to(_apply("divide", scales, y_s), "float64"))
    q = trace.apply("round", trace.apply("multiply", acc, multiplier))
    return _saturated(q, _tensor(_aligned(node, y_zp, y_zp, "tensor", "float64")), target)


def _scale_type(node: Node, indices: tuple[int, ...]) -> str:
    types = {value_dtype(node.input(i)) for i in indices}
    if len(types) != 1 or not types <= set(_FLOATS):
        raise NodeError(f"{node.op_type}'s scales must share one float type, got {sorted(types)}")
    return types.pop()


@converter("QLinearMatMul")
def qlinear_matmul(node: Node) -> Any:
    """``saturate(round((a - a_zp) @ (b - b_zp) * a_scale * b_scale / y_scale) + y_zp)``: the
    product exact in float64, scales per tensor, per row of ``a`` or per column of ``b``."""
    for i in range(8):
        if node.input(i) is None:
            raise NodeError(f"QLinearMatMul needs input {i}")
    ts = _scale_type(node, (1, 4, 6))
    a = _operand(node, 0, 2, "row")
    b = _operand(node, 3, 5, "column")
    acc = trace.apply("nn.matmul", a, b)
    scales = _apply("multiply", _aligned(node, 1, 0, "row", ts), _aligned(node, 4, 3, "column", ts))
    return _requantize(node, acc, scales, 6, 7)


def _conv(node: Node, x: Any, w: Any, bias: Any = None) -> Any:
    """The Conv converter's convolution (1-d and 2-d, every attribute) of float64 operands."""
    inputs = [x, w] if bias is None else [x, w, bias]
    return nn.conv(dataclasses.replace(node, inputs=inputs))


@converter("ConvInteger")
def conv_integer(node: Node) -> Any:
    """``conv(x - x_zero_point, w - w_zero_point)`` as int32 (zero points per tensor, the
    weight's also per output channel); the padding is zeros after the shift, as the reference
    pads (onnxruntime pads the raw input with its zero point: the same)."""
    x = _operand(node, 0, 2, "tensor")
    w = _operand(node, 1, 3, "channel")
    return _int32(_conv(node, x, w))


@converter("QLinearConv")
def qlinear_conv(node: Node) -> Any:
    """``saturate(round(conv(x - x_zp, w - w_zp) + B) * x_scale * w_scale / y_scale) + y_zp)``
    with the int32 bias ``B`` optional and ``w_scale`` per tensor or per output channel."""
    for i in range(8):
        if node.input(i) is None:
            raise NodeError(f"QLinearConv needs input {i}")
    ts = _scale_type(node, (1, 4, 6))
    x = _operand(node, 0, 2, "tensor")
    w = _operand(node, 3, 5, "channel")
    bias = None
    if node.input(8) is not None:
        if value_dtype(node.input(8)) != "int32":
            raise NodeError(f"QLinearConv's bias must be int32, got {value_dtype(node.input(8))}")
        bias = _cast(node.tensor(8), "float64")
    acc = _conv(node, x, w, bias)
    # the weight scale per output channel lines up with the result's axis 1
    w_scale = _aligned(node, 4, 3, "result", ts)
    scales = _apply("multiply", _aligned(node, 1, 0, "tensor", ts), w_scale)
    return _requantize(node, acc, scales, 6, 7)
