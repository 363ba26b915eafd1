"""The reference interpreter's op definitions: each op of the catalogue written as plain numpy.

Written from the op catalogue (``ir/ops``) and ``design/shapes.md``, independently of
``vm.kernels``: no ``out=`` buffers, no in-place tricks, float64 accumulation where that is the
plain definition (convolution, pooling), float32 accumulation for float16 ``sum``/``mean``/
``prod`` (ONNX's rule; ``numpy_nn`` computes its float16 ops in float64 or, for the matmuls, as
numpy does: float32 dot products). The interpreter casts each result to the dtype that type
inference gave the call, so these functions may return any numeric dtype.

``OPS[name](inputs, attrs)`` takes the evaluated operands (arrays; a tuple of arrays for a
``*data`` operand) and the call's attributes, and returns an array or a tuple of arrays.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from .numpy_nn import NN_OPS

Impl = Callable[[Sequence[Any], Mapping[str, Any]], Any]
OPS: dict[str, Impl] = {}


def _unary(fn: Callable[[np.ndarray], Any]) -> Impl:
    return lambda ins, attrs: fn(ins[0])


def _binary(fn: Callable[[np.ndarray, np.ndarray], Any]) -> Impl:
    return lambda ins, attrs: fn(ins[0], ins[1])


def _erf(x: np.ndarray) -> np.ndarray:
    return np.array([math.erf(v) for v in x.ravel().tolist()], np.float64).reshape(x.shape)


def _divide(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    out: np.ndarray = (
        np.true_divide(a, b) if np.result_type(a, b).kind == "f" else np.floor_divide(a, b)
    )
    return out


_UNARY: dict[str, Callable[..., Any]] = {
    "exp": np.exp,
    "log": np.log,
    "sqrt": np.sqrt,
    "rsqrt": lambda x: 1 / np.sqrt(x),
    "sin": np.sin,
    "cos": np.cos,
    "tan": np.tan,
    "asin": np.arcsin,
    "acos": np.arccos,
    "atan": np.arctan,
    "sinh": np.sinh,
    "cosh": np.cosh,
    "tanh": np.tanh,
    "asinh": np.arcsinh,
    "acosh": np.arccosh,
    "atanh": np.arctanh,
    "sigmoid": lambda x: 1 / (1 + np.exp(-x.astype(np.float64))),
    "silu": lambda x: x / (1 + np.exp(-x.astype(np.float64))),
    "erf": _erf,
    "floor": np.floor,
    "ceil": np.ceil,
    "round": np.round,  # half to even
    "negative": np.negative,
    "abs": np.abs,
    "copy": np.copy,
    "zeros_like": np.zeros_like,
    "ones_like": np.ones_like,
    "logical_not": np.logical_not,
    "bitwise_not": np.invert,
    "nn.relu": lambda x: np.maximum(x, np.zeros_like(x)),  # max(x, 0): NaN propagates
}
OPS.update({name: _unary(fn) for name, fn in _UNARY.items()})
_BINARY: dict[str, Callable[..., Any]] = {
    "add": np.add,
    "subtract": np.subtract,
    "multiply": np.multiply,
    "divide": _divide,
    "floor_divide": np.floor_divide,
    "mod": np.mod,
    "power": np.power,
    "maximum": np.maximum,
    "minimum": np.minimum,
    "equal": np.equal,
    "not_equal": np.not_equal,
    "less": np.less,
    "less_equal": np.less_equal,
    "greater": np.greater,
    "greater_equal": np.greater_equal,
    "logical_and": np.logical_and,
    "logical_or": np.logical_or,
    "bitwise_and": np.bitwise_and,
    "bitwise_or": np.bitwise_or,
    "bitwise_xor": np.bitwise_xor,
}
OPS.update({name: _binary(fn) for name, fn in _BINARY.items()})


def _shift(ins: Sequence[Any], left: bool) -> np.ndarray:
    """``a << b`` or ``a >> b`` (arithmetic for signed ``a``) where ``0 <= b < bits``; outside,
    what the sign fill alone gives: -1 for a negative ``a`` shifted right, else 0."""
    a, b = np.broadcast_arrays(*ins)
    bits = a.dtype.itemsize * 8
    fits = (b >= 0) & (b < bits)
    count = np.where(fits, b, 0).astype(a.dtype)
    shifted = np.left_shift(a, count) if left else np.right_shift(a, count)
    fill = np.zeros_like(a) if left else np.where(a < 0, -1, 0).astype(a.dtype)
    out: np.ndarray = np.where(fits, shifted, fill)
    return out


OPS["left_shift"] = lambda ins, attrs: _shift(ins, True)
OPS["right_shift"] = lambda ins, attrs: _shift(ins, False)


def _bitcast(ins: Sequence[Any], attrs: Mapping[str, Any]) -> np.ndarray:
    """The input's bytes read as ``dtype`` (a bool from a byte: ``byte != 0``)."""
    x = np.ascontiguousarray(ins[0])
    raw = np.frombuffer(x.tobytes(), np.uint8)
    if attrs["dtype"] == "bool":
        out: np.ndarray = (raw != 0).reshape(x.shape)
    else:
        out = raw.view(attrs["dtype"]).reshape(x.shape)
    return out


OPS["bitcast"] = _bitcast
OPS["where"] = lambda ins, attrs: np.where(ins[0], ins[1], ins[2])
OPS["cast"] = lambda ins, attrs: ins[0].astype(attrs["dtype"])
OPS["nn.leaky_relu"] = lambda ins, attrs: np.where(ins[0] > 0, ins[0], ins[0] * attrs["alpha"])


def _clip(ins: Sequence[Any], attrs: Mapping[str, Any]) -> np.ndarray:
    x: np.ndarray = ins[0]
    lo: float = attrs["a_min"]
    hi: float = attrs["a_max"]
    if x.dtype.kind == "f":
        clipped: np.ndarray = np.clip(x, lo, hi)
        return clipped
    # Clip the exact values: the bounds round inward to integers within the dtype's range.
    info = np.iinfo(x.dtype)
    ilo = info.min if lo < info.min else info.max if lo > info.max else math.ceil(lo)
    ihi = info.max if hi > info.max else info.min if hi < info.min else math.floor(hi)
    exact: np.ndarray = np.clip(x, ilo, ihi)
    return exact


OPS["clip"] = _clip


# ---- reductions ------------------------------------------------------------------------------
def _axes(x: np.ndarray, attrs: Mapping[str, Any]) -> tuple[int, ...]:
    axis = attrs["axis"]
    listed = range(x.ndim) if axis is None else (axis,) if isinstance(axis, int) else axis
    axes = sorted({a % x.ndim if x.ndim else a for a in listed})
    if attrs["exclude"]:
        axes = [a for a in range(x.ndim) if a not in axes]
    return tuple(axes)


def _reduce(fn: Callable[..., Any], accumulates: bool) -> Impl:
    def impl(ins: Sequence[Any], attrs: Mapping[str, Any]) -> Any:
        x = ins[0]
        if accumulates and x.dtype == np.float16:
            # ONNX's rule: float16 accumulates in float32; the interpreter's cast to the call's
            # float16 is the one rounding. (numpy alone keeps partial sums in float16 when the
            # reduced axis is not the innermost one.)
            x = x.astype(np.float32)
        return fn(x, axis=_axes(ins[0], attrs), keepdims=attrs["keepdims"])

    return impl


_REDUCTIONS: dict[str, tuple[Callable[..., Any], bool]] = {
    "sum": (np.sum, True),
    "mean": (np.mean, True),
    "max": (np.max, False),
    "min": (np.min, False),
    "prod": (np.prod, True),
}
for _name, (_fn, _accumulates) in _REDUCTIONS.items():
    OPS[_name] = _reduce(_fn, _accumulates)


def _arg_reduce(fn: Callable[..., Any]) -> Impl:
    def impl(ins: Sequence[Any], attrs: Mapping[str, Any]) -> Any:
        x = ins[0]
        axes = _axes(x, attrs)
        kept = [a for a in range(x.ndim) if a not in axes]
        moved = np.transpose(x, kept + list(axes))
        flat = moved.reshape([x.shape[a] for a in kept] + [math.prod(x.shape[a] for a in axes)])
        out = fn(flat, axis=-1)
        if attrs["keepdims"]:
            out = out.reshape([1 if a in axes else x.shape[a] for a in range(x.ndim)])
        return out.astype(np.int64)

    return impl


def _running(fn: Callable[..., Any], identity: int) -> Impl:
    """``cumsum`` or ``cumprod`` (``fn``): from the end with ``reverse``, shifted one place
    along the axis with ``identity`` first with ``exclusive``."""

    def impl(ins: Sequence[Any], attrs: Mapping[str, Any]) -> Any:
        x, axis = ins[0], attrs["axis"]
        if x.dtype == np.float16:
            x = x.astype(np.float32)  # as sum: float32 accumulation, one rounding by the caller
        if attrs["reverse"]:
            x = np.flip(x, axis)
        runs = fn(x, axis=axis)
        if attrs["exclusive"] and x.shape[axis]:
            first = np.full_like(np.take(runs, [0], axis=axis), identity)
            runs = np.concatenate(
                [first, np.take(runs, np.arange(x.shape[axis] - 1), axis=axis)], axis
            )
        return np.flip(runs, axis) if attrs["reverse"] else runs

    return impl


def _resize_source(mode: str, y: int, n_in: int, n_out: int, scale: float) -> float:
    """ONNX's ``coordinate_transformation_mode`` for one output index (the spec's formulas;
    ``length`` is ``scale * n_in`` as in the ONNX reference)."""
    length = scale * n_in
    if mode == "half_pixel":
        return (y + 0.5) / scale - 0.5
    if mode == "half_pixel_symmetric":
        return n_in / 2 * (1 - n_out / length) + (y + 0.5) / scale - 0.5
    if mode == "pytorch_half_pixel":
        return -0.5 if length == 1 else (y + 0.5) / scale - 0.5
    if mode == "align_corners":
        return 0.0 if length == 1 else y * (n_in - 1) / (length - 1)
    if mode == "asymmetric":
        return y / scale
    return (y + 0.5) / scale  # tf_half_pixel_for_nn


def _resize_weights(x: float, attrs: Mapping[str, Any], n_in: int) -> list[tuple[int, float]]:
    """(input index, weight) pairs that make one output element along an axis."""
    lo = math.floor(x)
    frac = x - lo
    if attrs["mode"] == "nearest":
        up = {
            "round_prefer_floor": frac > 0.5,
            "round_prefer_ceil": frac >= 0.5,
            "floor": False,
            "ceil": frac > 0,
        }[attrs["nearest_mode"]]
        return [(min(max(lo + up, 0), n_in - 1), 1.0)]
    r = 1.0 if frac == 0 else frac  # an integer x: its own element is the upper tap
    if attrs["mode"] == "linear":
        first = lo - 1 if frac == 0 else lo
        pairs = [(first, 1 - r), (first + 1, r)]
    else:
        a, s = attrs["cubic_coeff_a"], 1 - r
        w = [
            ((a * (r + 1) - 5 * a) * (r + 1) + 8 * a) * (r + 1) - 4 * a,
            ((a + 2) * r - (a + 3)) * r * r + 1,
            ((a + 2) * s - (a + 3)) * s * s + 1,
            ((a * (s + 1) - 5 * a) * (s + 1) + 8 * a) * (s + 1) - 4 * a,
        ]
        first = lo - 2 if frac == 0 else lo - 1
        pairs = [(first + k, w[k]) for k in range(4)]
    if attrs["exclude_outside"]:
        pairs = [(i, w if 0 <= i < n_in else 0.0) for i, w in pairs]
        total = sum(w for _, w in pairs) or 1.0
        pairs = [(i, w / total) for i, w in pairs]
    return [(min(max(i, 0), n_in - 1), w) for i, w in pairs]


def _resize(ins: Sequence[Any], attrs: Mapping[str, Any]) -> Any:
    """ONNX Resize, one axis after the other, one output index at a time (float64 for the
    blending modes; the interpreter's cast to an integer dtype truncates, as onnxruntime
    does)."""
    x = ins[0]
    if 0 in attrs["sizes"]:
        return np.zeros(attrs["sizes"], x.dtype)  # nothing to compute (and no out/in scale)
    if attrs["mode"] != "nearest":
        x = x.astype(np.float64)
    for axis, n_out in enumerate(attrs["sizes"]):
        n_in = x.shape[axis]
        scale = attrs["scales"][axis] if attrs["scales"] is not None else n_out / n_in
        if n_out == n_in and math.isclose(scale, 1.0):
            continue
        moved = np.moveaxis(x, axis, 0)
        rows = []
        for y in range(n_out):
            x_src = _resize_source(attrs["coordinate_transformation_mode"], y, n_in, n_out, scale)
            terms = [
                moved[i] if attrs["mode"] == "nearest" else moved[i] * w
                for i, w in _resize_weights(x_src, attrs, n_in)
            ]
            row = terms[0]
            for term in terms[1:]:
                row = row + term
            rows.append(row)
        stacked = np.stack(rows) if rows else np.zeros((0, *moved.shape[1:]), x.dtype)
        x = np.moveaxis(stacked, 0, axis)
    if ins[0].dtype.kind in "iu" and x.dtype != ins[0].dtype:
        info = np.iinfo(ins[0].dtype)  # saturated (cubic overshoots), truncated by the cast
        x = np.clip(x, info.min, info.max)
    return x


OPS["resize"] = _resize


OPS["cumsum"] = _running(np.cumsum, 0)
OPS["cumprod"] = _running(np.cumprod, 1)
OPS["argmax"] = _arg_reduce(np.argmax)
OPS["argmin"] = _arg_reduce(np.argmin)


# ---- layout ----------------------------------------------------------------------------------
def reshape_to(x: np.ndarray, newshape: Sequence[int]) -> np.ndarray:
    """``reshape`` with 0 copying the input dim at that position and -1 inferred."""
    dims = [x.shape[i] if d == 0 else int(d) for i, d in enumerate(newshape)]
    if -1 in dims:
        rest = math.prod(d for d in dims if d != -1)
        dims[dims.index(-1)] = x.size // rest if rest else -1
    return x.reshape(dims)


def slice_of(x: np.ndarray, begin: Sequence[int], end: Sequence[int], strides: Any) -> Any:
    """``x[begin:end:strides]`` per axis; shorter lists leave bounds omitted, strides 1."""
    strides = list(strides or [])
    covered = max(len(begin), len(end), len(strides))
    index = []
    for a in range(covered):
        b = int(begin[a]) if a < len(begin) else None
        e = int(end[a]) if a < len(end) else None
        s = int(strides[a]) if a < len(strides) else 1
        index.append(slice(b, e, s))
    return x[tuple(index)]


def _expand_dims(ins: Sequence[Any], attrs: Mapping[str, Any]) -> np.ndarray:
    x: np.ndarray = ins[0]
    axis: int = attrs["axis"]
    axis = axis + x.ndim + 1 if axis < 0 else axis
    expanded: np.ndarray = x.reshape(x.shape[:axis] + (1,) * attrs["num_newaxis"] + x.shape[axis:])
    return expanded


def _squeeze(ins: Sequence[Any], attrs: Mapping[str, Any]) -> np.ndarray:
    x: np.ndarray = ins[0]
    axis = attrs["axis"]
    if axis is None:
        return x.reshape([d for d in x.shape if d != 1])
    return np.squeeze(x, axis=tuple(axis))


def _split(ins: Sequence[Any], attrs: Mapping[str, Any]) -> tuple[np.ndarray, ...]:
    spec = attrs["indices_or_sections"]
    return tuple(np.split(ins[0], list(spec) if isinstance(spec, tuple) else spec, attrs["axis"]))


def _batch_flatten(ins: Sequence[Any], attrs: Mapping[str, Any]) -> np.ndarray:
    x: np.ndarray = ins[0]
    return x.reshape(x.shape[0], math.prod(x.shape[1:]))


#: ONNX's scatter reductions, as the binary functions its reference loops apply.
_COMBINE: dict[str, Callable[[Any, Any], Any]] = {
    "none": lambda old, new: new,
    "add": np.add,
    "mul": np.multiply,
    "max": np.maximum,
    "min": np.minimum,
}


def _scatter_nd(ins: Sequence[Any], attrs: Mapping[str, Any]) -> np.ndarray:
    """ONNX's definition: one index tuple after the other, in order (so the last of repeated
    tuples wins for ``none``, and the others accumulate)."""
    data, indices, updates = ins
    out, combine = np.array(data, copy=True), _COMBINE[attrs["reduction"]]
    for pos in np.ndindex(*indices.shape[:-1]):
        where = []
        for d, i in zip(data.shape, indices[pos].tolist(), strict=False):  # the first q dims
            if not -d <= i < d:
                raise IndexError(f"scatter_nd index {i} is out of range for a dim of {d}")
            where.append(i % d)
        out[tuple(where)] = combine(out[tuple(where)], updates[pos])
    return out


def _scatter_elements(ins: Sequence[Any], attrs: Mapping[str, Any]) -> np.ndarray:
    """ONNX's definition: each element of ``updates`` in row-major order, sent along axis."""
    data, indices, updates = ins
    out, combine = np.array(data, copy=True), _COMBINE[attrs["reduction"]]
    axis = attrs["axis"] % data.ndim
    n = data.shape[axis]
    for pos in np.ndindex(*indices.shape):
        i = int(indices[pos])
        if not -n <= i < n:
            raise IndexError(f"scatter_elements index {i} is out of range for a dim of {n}")
        where = list(pos)
        where[axis] = i % n
        out[tuple(where)] = combine(out[tuple(where)], updates[pos])
    return out


def _dynamic_update_slice(ins: Sequence[Any], attrs: Mapping[str, Any]) -> np.ndarray:
    """XLA's definition, element by element: ``update[j]`` lands at ``out[start + j]`` with
    each start clamped to ``[0, operand.shape[i] - update.shape[i]]`` (the update always fits;
    a negative start is 0). The starts: a scalar per axis, or one 1-d tensor."""
    operand, update, starts = ins
    if update.ndim != operand.ndim or any(
        u > d for u, d in zip(update.shape, operand.shape, strict=True)
    ):
        raise ValueError(f"dynamic_update_slice: update {update.shape} for operand {operand.shape}")
    flat = [int(v) for s in starts for v in np.reshape(s, -1).tolist()]
    if len(flat) != operand.ndim:
        raise ValueError(f"dynamic_update_slice: {len(flat)} starts for rank {operand.ndim}")
    begin = [
        min(max(s, 0), d - u) for s, d, u in zip(flat, operand.shape, update.shape, strict=True)
    ]
    out = np.array(operand, copy=True)
    for pos in np.ndindex(*update.shape):
        out[tuple(b + j for b, j in zip(begin, pos, strict=True))] = update[pos]
    return out


OPS.update(
    {
        "reshape": lambda ins, attrs: reshape_to(ins[0], attrs["newshape"]),
        "transpose": lambda ins, attrs: np.transpose(ins[0], attrs["axes"]),
        "expand_dims": _expand_dims,
        "squeeze": _squeeze,
        "concatenate": lambda ins, attrs: np.concatenate(ins[0], attrs["axis"]),
        "append": lambda ins, attrs: np.concatenate(ins, attrs["axis"]),
        "stack": lambda ins, attrs: np.stack(ins[0], attrs["axis"]),
        "split": _split,
        "strided_slice": lambda ins, attrs: slice_of(
            ins[0], attrs["begin"], attrs["end"], attrs["strides"]
        ),
        "take": lambda ins, attrs: np.take(ins[0], ins[1], axis=attrs["axis"]),
        "scatter_nd": _scatter_nd,
        "scatter_elements": _scatter_elements,
        "dynamic_update_slice": _dynamic_update_slice,
        "tile": lambda ins, attrs: np.tile(ins[0], attrs["reps"]),
        "repeat": lambda ins, attrs: np.repeat(ins[0], attrs["repeats"], attrs["axis"]),
        "broadcast_to": lambda ins, attrs: np.broadcast_to(ins[0], attrs["shape"]),
        "nn.batch_flatten": _batch_flatten,
        "nn.pad": lambda ins, attrs: np.pad(
            ins[0], [tuple(p) for p in attrs["pad_width"]], constant_values=attrs["pad_value"]
        ),
    }
)


# ---- creation and data-dependent ops ---------------------------------------------------------
def _compress(ins: Sequence[Any], attrs: Mapping[str, Any]) -> np.ndarray:
    """numpy's own ``compress`` (non-zero selects), after the op's checks: numpy would accept
    a shorter mask (and pad a longer one with False only if the extra entries are zero)."""
    x, mask = ins
    axis = attrs["axis"]
    if mask.ndim != 1 or mask.shape[0] != x.shape[axis]:
        raise ValueError(f"compress: mask {mask.shape} is not as long as axis {axis} of {x.shape}")
    return np.compress(mask, x, axis=axis)


def _full(shape: Sequence[int], fill: Any, dtype: str) -> np.ndarray:
    return np.full([int(d) for d in shape], np.asarray(fill).astype(dtype), dtype)


def _arange(ins: Sequence[Any], attrs: Mapping[str, Any]) -> np.ndarray:
    start, stop, step = (np.asarray(v)[()] for v in ins)
    arange: Callable[..., np.ndarray] = np.arange  # numpy scalars of the inputs' dtypes
    return arange(start, stop, step, dtype=attrs["dtype"])


def _topk(x: np.ndarray, k: int, attrs: Mapping[str, Any]) -> Any:
    axis = attrs["axis"] % x.ndim
    moved = np.moveaxis(x, axis, -1)
    if attrs["is_ascend"]:
        order = np.argsort(moved, axis=-1, kind="stable")
    else:  # descending, ties by the lower index: a stable sort of the reversed axis, reversed
        n = moved.shape[-1]
        order = (n - 1 - np.argsort(moved[..., ::-1], axis=-1, kind="stable"))[..., ::-1]
    order = order[..., :k]
    values = np.moveaxis(np.take_along_axis(moved, order, -1), -1, axis)
    indices = np.moveaxis(order, -1, axis).astype(attrs["dtype"])
    ret = attrs["ret_type"]
    return (values, indices) if ret == "both" else values if ret == "values" else indices


def _sort_order(x: np.ndarray, axis: int, descending: bool) -> np.ndarray:
    """Stable sorting indices; descending ties by the lower index (the reversed axis sorted)."""
    if not descending:
        return np.argsort(x, axis=axis, kind="stable")
    n = x.shape[axis]
    flipped = np.argsort(np.flip(x, axis=axis), axis=axis, kind="stable")
    return np.flip(n - 1 - flipped, axis=axis)


def _unique(x: np.ndarray, attrs: Mapping[str, Any]) -> tuple[np.ndarray, ...]:
    axis = attrs["axis"]
    y, first, inverse, counts = np.unique(
        x, return_index=True, return_inverse=True, return_counts=True, axis=axis
    )
    inverse = inverse.reshape(-1)
    if not attrs["sorted"]:  # by first occurrence
        order = np.argsort(first, kind="stable")
        y = np.take(y, order, axis=0 if axis is None else axis)
        inverse = np.argsort(order)[inverse]
        first, counts = first[order], counts[order]
    return y, first.astype(np.int64), inverse.astype(np.int64), counts.astype(np.int64)


def _box_iou(box: np.ndarray, other: np.ndarray, center: int) -> Any:
    """IoU of two boxes (0 for empty ones) in the boxes' dtype, as ONNX defines it: corners
    ``[y1, x1, y2, x2]`` in either order, or ``[x_center, y_center, width, height]``."""

    def edges(b: np.ndarray) -> tuple[Any, Any, Any, Any]:
        if center:
            two = b.dtype.type(2)
            return b[0] - b[2] / two, b[1] - b[3] / two, b[0] + b[2] / two, b[1] + b[3] / two
        return min(b[1], b[3]), min(b[0], b[2]), max(b[1], b[3]), max(b[0], b[2])

    ax0, ay0, ax1, ay1 = edges(box)
    bx0, by0, bx1, by1 = edges(other)
    w, h = min(ax1, bx1) - max(ax0, bx0), min(ay1, by1) - max(ay0, by0)
    area_a, area_b = (ax1 - ax0) * (ay1 - ay0), (bx1 - bx0) * (by1 - by0)
    if not (w > 0 and h > 0 and area_a > 0 and area_b > 0):
        return box.dtype.type(0)
    inter = w * h
    union = (area_a + area_b) - inter
    return inter / union if union > 0 else box.dtype.type(0)


def _non_max_suppression(ins: Sequence[Any], attrs: Mapping[str, Any]) -> np.ndarray:
    """Greedy NMS per batch and class: candidates scoring above the threshold, best first
    (ties to the smaller index), each kept unless a kept box overlaps it with IoU above the
    threshold, at most ``max_output_boxes_per_class`` (negative: 0) per class."""
    boxes, scores = ins[0], ins[1]
    limit = max(int(np.asarray(ins[2]).reshape(-1)[0]), 0)
    iou = boxes.dtype.type(np.asarray(ins[3]).reshape(-1)[0])
    threshold = scores.dtype.type(np.asarray(ins[4]).reshape(-1)[0])
    rows = []
    for b in range(boxes.shape[0]):
        for c in range(scores.shape[1]):
            s = scores[b, c]
            order = sorted((i for i in range(len(s)) if s[i] > threshold), key=lambda i: -s[i])
            kept: list[int] = []
            for i in order:
                if len(kept) == limit:
                    break
                box = boxes[b, i]
                center = attrs["center_point_box"]
                if all(not _box_iou(box, boxes[b, j], center) > iou for j in kept):
                    kept.append(i)
            rows += [(b, c, i) for i in kept]
    return np.array(rows, np.int64).reshape(len(rows), 3)


OPS["non_max_suppression"] = _non_max_suppression


OPS.update(
    {
        "zeros": lambda ins, attrs: np.zeros(attrs["shape"], attrs["dtype"]),
        "ones": lambda ins, attrs: np.ones(attrs["shape"], attrs["dtype"]),
        "full": lambda ins, attrs: _full(attrs["shape"], ins[0], attrs["dtype"]),
        "arange": _arange,
        "shape_of": lambda ins, attrs: np.array(ins[0].shape, attrs["dtype"]),
        "dyn.reshape": lambda ins, attrs: reshape_to(ins[0], ins[1].tolist()),
        "dyn.zeros": lambda ins, attrs: _full(ins[0].tolist(), 0, attrs["dtype"]),
        "dyn.ones": lambda ins, attrs: _full(ins[0].tolist(), 1, attrs["dtype"]),
        "dyn.full": lambda ins, attrs: _full(ins[1].tolist(), ins[0], attrs["dtype"]),
        "dyn.strided_slice": lambda ins, attrs: slice_of(
            ins[0], ins[1].tolist(), ins[2].tolist(), ins[3].tolist()
        ),
        "argwhere": lambda ins, attrs: np.argwhere(ins[0]).astype(np.int64),
        "compress": _compress,
        "topk": lambda ins, attrs: _topk(ins[0], attrs["k"], attrs),
        "dyn.topk": lambda ins, attrs: _topk(ins[0], int(ins[1]), attrs),
        "sort": lambda ins, attrs: np.take_along_axis(
            ins[0], _sort_order(ins[0], attrs["axis"], attrs["descending"]), attrs["axis"]
        ),
        "argsort": lambda ins, attrs: _sort_order(
            ins[0], attrs["axis"], attrs["descending"]
        ).astype(attrs["dtype"]),
        "unique": lambda ins, attrs: _unique(ins[0], attrs),
        "dyn.resize": lambda ins, attrs: _resize(
            ins[:1], {**attrs, "sizes": ins[1].tolist(), "scales": None}
        ),
    }
)
OPS.update(NN_OPS)


def _dft(x: np.ndarray, attrs: Mapping[str, Any]) -> np.ndarray:
    """ONNX ``DFT`` as onnx's reference computes it: the complex signal ``real + 1j imag``
    (complex64 from float32), ``np.fft.fft`` then the first bins (one-sided), ``ifft`` or
    ``irfft``, in the real layout ``[..., 2]`` (``[..., 1]`` for irfft)."""
    axis = attrs["axis"] % x.ndim
    wide = x.astype(np.float64 if x.dtype == np.float64 else np.float32)
    signal = wide[..., 0] + 1j * wide[..., 1] if x.shape[-1] == 2 else wide[..., 0]
    inverse, onesided, n = attrs["inverse"], attrs["onesided"], attrs["length"]
    if inverse and onesided:
        n = 2 * (x.shape[axis] - 1) if n is None else n
        return np.fft.irfft(signal, n=n, axis=axis)[..., None].astype(x.dtype)
    n = x.shape[axis] if n is None else n
    result = (np.fft.ifft if inverse else np.fft.fft)(signal, n=n, axis=axis)
    if onesided and not inverse:
        result = np.take(result, np.arange(n // 2 + 1), axis=axis)
    return np.stack([result.real, result.imag], axis=-1).astype(x.dtype)


OPS["dft"] = lambda ins, attrs: _dft(ins[0], attrs)
