"""Property cases of the elementwise, reduction and layout ops, with their numpy references."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from hypothesis import assume
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from shape_cases_kit import Case, cases, numpy_shape, shapes

# ---- elementwise ------------------------------------------------------------------------------
_erf = np.vectorize(math.erf, otypes=[np.float64])
UNARY: dict[str, tuple[Any, dict[str, Any]]] = {
    "exp": (np.exp, {}), "log": (np.log, {}), "sqrt": (np.sqrt, {}),
    "rsqrt": (lambda x: 1 / np.sqrt(x), {}), "sin": (np.sin, {}), "cos": (np.cos, {}),
    "tanh": (np.tanh, {}), "sigmoid": (lambda x: 1 / (1 + np.exp(-x)), {}),
    "silu": (lambda x: x / (1 + np.exp(-x)), {}), "erf": (_erf, {}),
    "floor": (np.floor, {}), "ceil": (np.ceil, {}), "round": (np.round, {}),
    "negative": (np.negative, {}), "abs": (np.abs, {}), "copy": (np.copy, {}),
    "zeros_like": (np.zeros_like, {}), "ones_like": (np.ones_like, {}),
    "logical_not": (np.logical_not, {}), "cast": (lambda x: x.astype(np.int32), {"dtype": "int32"}),
    "clip": (lambda x: np.clip(x, 0.0, 1.0), {"a_min": 0.0, "a_max": 1.0}),
    "nn.relu": (lambda x: np.maximum(x, 0), {}),
    "nn.leaky_relu": (lambda x: np.where(x > 0, x, 0.1 * x), {"alpha": 0.1}),
    "tan": (np.tan, {}), "asin": (np.arcsin, {}), "acos": (np.arccos, {}),
    "atan": (np.arctan, {}), "sinh": (np.sinh, {}), "cosh": (np.cosh, {}),
    "asinh": (np.arcsinh, {}), "acosh": (np.arccosh, {}), "atanh": (np.arctanh, {}),
    "bitwise_not": (lambda x: np.invert(x.astype(np.int64)), {}),
    "bitcast": (lambda x: x.view(np.int64), {"dtype": "int64"}),
}  # fmt: skip
BINARY = {
    "add": np.add, "subtract": np.subtract, "multiply": np.multiply, "divide": np.divide,
    "floor_divide": np.floor_divide, "mod": np.mod, "power": np.power, "maximum": np.maximum,
    "minimum": np.minimum, "equal": np.equal, "not_equal": np.not_equal, "less": np.less,
    "less_equal": np.less_equal, "greater": np.greater, "greater_equal": np.greater_equal,
    "logical_and": np.logical_and, "logical_or": np.logical_or,
}  # fmt: skip


#: Binary ops of integers (numpy refuses floats): run on int64 ones.
INTEGER_BINARY = {
    "bitwise_and": np.bitwise_and, "bitwise_or": np.bitwise_or, "bitwise_xor": np.bitwise_xor,
    "left_shift": np.left_shift, "right_shift": np.right_shift,
}  # fmt: skip


@cases(*UNARY)
def _unary(op: str) -> st.SearchStrategy[Case]:
    fn, attrs = UNARY[op]
    return shapes().map(lambda s: Case([s], attrs, numpy_shape(lambda: fn(np.ones(s)))))


@cases(*BINARY)
def _binary(op: str) -> st.SearchStrategy[Case]:
    fn = BINARY[op]
    return hnp.mutually_broadcastable_shapes(num_shapes=2, max_dims=4, max_side=4).map(
        lambda bs: Case(
            list(bs.input_shapes),
            {},
            numpy_shape(lambda: fn(*(np.ones(s) for s in bs.input_shapes))),
        )
    )


@cases(*INTEGER_BINARY)
def _integer_binary(op: str) -> st.SearchStrategy[Case]:
    fn = INTEGER_BINARY[op]
    return hnp.mutually_broadcastable_shapes(num_shapes=2, max_dims=4, max_side=4).map(
        lambda bs: Case(
            list(bs.input_shapes),
            {},
            numpy_shape(lambda: fn(*(np.ones(s, np.int64) for s in bs.input_shapes))),
        )
    )


@cases("where")
def _where(op: str) -> st.SearchStrategy[Case]:
    def make(bs: Any) -> Case:
        c, x, y = bs.input_shapes
        return Case(
            [c, x, y], {}, numpy_shape(lambda: np.where(np.ones(c, bool), np.ones(x), np.zeros(y)))
        )

    return hnp.mutually_broadcastable_shapes(num_shapes=3, max_dims=4, max_side=4).map(make)


# ---- reductions -------------------------------------------------------------------------------
def _flat_arg(fn: Any, x: np.ndarray, axes: list[int], keepdims: bool) -> np.ndarray:
    """numpy argmax/argmin over several axes, flattened in order into one."""
    rest = [i for i in range(x.ndim) if i not in axes]
    moved = np.transpose(x, rest + axes)
    outer = tuple(x.shape[i] for i in rest)
    flat = moved.reshape((*outer, math.prod(x.shape[i] for i in axes)))
    out = fn(flat, axis=-1)
    if keepdims:
        out = out.reshape(tuple(1 if i in axes else d for i, d in enumerate(x.shape)))
    return out


REDUCE: dict[str, Any] = {
    "sum": np.sum,
    "mean": np.mean,
    "prod": np.prod,
    "max": np.max,
    "min": np.min,
    "argmax": np.argmax,
    "argmin": np.argmin,
}


@cases(*REDUCE)
def _reduce(op: str) -> st.SearchStrategy[Case]:
    @st.composite
    def make(draw: st.DrawFn) -> Case:
        s = draw(shapes())
        rank = len(s)
        kind = draw(st.sampled_from(["none", "int", "list"] if rank else ["none", "list"]))
        exclude = kind != "none" and draw(st.booleans())
        if kind == "none":
            axis: Any = None
            axes = list(range(rank))
        elif kind == "int":
            axis = draw(st.integers(-rank, rank - 1))
            axes = [axis % rank]
        else:
            picked = draw(
                st.lists(st.integers(0, rank - 1), unique=True, max_size=rank)
                if rank
                else st.just([])
            )
            axis = [a - rank if draw(st.booleans()) else a for a in picked]
            axes = sorted(picked)
        if exclude:
            axes = [i for i in range(rank) if i not in axes]
        keepdims = draw(st.booleans())
        x = np.ones(s)
        if op in ("max", "min", "argmax", "argmin"):
            assume(all(s[i] > 0 for i in axes))
        if op in ("argmax", "argmin"):
            expected = numpy_shape(lambda: _flat_arg(REDUCE[op], x, axes, keepdims))
        else:
            expected = numpy_shape(lambda: REDUCE[op](x, axis=tuple(axes), keepdims=keepdims))
        return Case([s], {"axis": axis, "keepdims": keepdims, "exclude": exclude}, expected)

    return make()


# ---- layout -----------------------------------------------------------------------------------
@st.composite
def _same_size_shape(draw: st.DrawFn, s: tuple[int, ...]) -> list[int]:
    """A shape with as many elements as ``s``: its dims shuffled, merged and padded with 1s."""
    dims: list[int] = draw(st.permutations(list(s)))
    out: list[int] = []
    for d in dims:
        merge: bool = draw(st.booleans())
        if out and merge:
            out[-1] *= d
        else:
            out.append(d)
    for _ in range(draw(st.integers(0, 2))):
        out.insert(draw(st.integers(0, len(out))), 1)
    return out


@st.composite
def newshape_for(draw: st.DrawFn, s: tuple[int, ...]) -> tuple[list[int], tuple[int, ...]]:
    """A reshape target for ``s`` using 0 (copy) and -1 (infer), and numpy's result shape."""
    target = draw(_same_size_shape(s))
    newshape = list(target)
    for i, d in enumerate(target):
        if d == 0:  # a 0 in newshape copies the input dim: a literal 0 cannot be written
            assume(i < len(s) and s[i] == 0)
            newshape[i] = 0
        elif i < len(s) and s[i] == d and draw(st.booleans()):
            newshape[i] = 0
    infer: bool = draw(st.booleans())
    if target and infer:
        i = draw(st.integers(0, len(target) - 1))
        if math.prod(d for j, d in enumerate(target) if j != i) != 0:
            newshape[i] = -1
    numpy_target = [s[i] if d == 0 else d for i, d in enumerate(newshape)]
    return newshape, numpy_shape(lambda: np.zeros(s).reshape(numpy_target))


@cases("reshape")
def _reshape(op: str) -> st.SearchStrategy[Case]:
    @st.composite
    def make(draw: st.DrawFn) -> Case:
        s = draw(shapes())
        newshape, expected = draw(newshape_for(s))
        return Case([s], {"newshape": newshape}, expected)

    return make()


@cases("transpose")
def _transpose(op: str) -> st.SearchStrategy[Case]:
    @st.composite
    def make(draw: st.DrawFn) -> Case:
        s = draw(shapes())
        axes: Any = None
        if draw(st.booleans()):
            axes = [
                a - len(s) if draw(st.booleans()) else a
                for a in draw(st.permutations(range(len(s))))
            ]
        return Case([s], {"axes": axes}, numpy_shape(lambda: np.transpose(np.zeros(s), axes)))

    return make()


@cases("expand_dims")
def _expand_dims(op: str) -> st.SearchStrategy[Case]:
    @st.composite
    def make(draw: st.DrawFn) -> Case:
        s = draw(shapes(max_rank=3))
        axis = draw(st.integers(-len(s) - 1, len(s)))
        k = draw(st.integers(0, 3))
        at = axis + len(s) + 1 if axis < 0 else axis
        new_axes = tuple(range(at, at + k))
        expected = numpy_shape(lambda: np.expand_dims(np.zeros(s), new_axes))
        return Case([s], {"axis": axis, "num_newaxis": k}, expected)

    return make()


@cases("squeeze")
def _squeeze(op: str) -> st.SearchStrategy[Case]:
    @st.composite
    def make(draw: st.DrawFn) -> Case:
        s = draw(shapes(max_side=2))
        ones = [i for i, d in enumerate(s) if d == 1]
        if draw(st.booleans()):
            return Case(
                [s], {"axis": None}, numpy_shape(lambda: np.squeeze(np.zeros(s))), static_ones=True
            )
        picked = draw(st.lists(st.sampled_from(ones), unique=True) if ones else st.just([]))
        axis = [a - len(s) if draw(st.booleans()) else a for a in picked]
        expected = numpy_shape(lambda: np.squeeze(np.zeros(s), axis=tuple(picked)))
        return Case([s], {"axis": axis}, expected)

    return make()


@cases("concatenate")
def _concatenate(op: str) -> st.SearchStrategy[Case]:
    @st.composite
    def make(draw: st.DrawFn) -> Case:
        s = draw(shapes(min_rank=1))
        axis = draw(st.integers(-len(s), len(s) - 1))
        parts = []
        for _ in range(draw(st.integers(1, 4))):
            p = list(s)
            p[axis] = draw(st.integers(0, 4))
            parts.append(tuple(p))
        expected = numpy_shape(lambda: np.concatenate([np.zeros(p) for p in parts], axis))
        return Case([parts], {"axis": axis}, expected)

    return make()


@cases("append")
def _append(op: str) -> st.SearchStrategy[Case]:
    @st.composite
    def make(draw: st.DrawFn) -> Case:
        s = draw(shapes(min_rank=1))
        axis = draw(st.integers(-len(s), len(s) - 1))
        other = list(s)
        other[axis] = draw(st.integers(0, 4))
        expected = numpy_shape(lambda: np.concatenate([np.zeros(s), np.zeros(other)], axis))
        return Case([s, tuple(other)], {"axis": axis}, expected)

    return make()


@cases("stack")
def _stack(op: str) -> st.SearchStrategy[Case]:
    @st.composite
    def make(draw: st.DrawFn) -> Case:
        s = draw(shapes(max_rank=3))
        count = draw(st.integers(1, 4))
        axis = draw(st.integers(-len(s) - 1, len(s)))
        expected = numpy_shape(lambda: np.stack([np.zeros(s)] * count, axis))
        return Case([[s] * count], {"axis": axis}, expected)

    return make()


@cases("split")
def _split(op: str) -> st.SearchStrategy[Case]:
    @st.composite
    def make(draw: st.DrawFn) -> Case:
        s = list(draw(shapes(min_rank=1, max_rank=3)))
        axis = draw(st.integers(-len(s), len(s) - 1))
        spec: Any
        if draw(st.booleans()):
            spec = draw(st.integers(1, 4))
            s[axis] = spec * draw(st.integers(0, 3))
        else:
            spec = draw(st.lists(st.integers(-8, 8), max_size=4))
        expected = numpy_shape(lambda: np.split(np.zeros(s), spec, axis))
        return Case([tuple(s)], {"indices_or_sections": spec, "axis": axis}, expected)

    return make()


@st.composite
def slice_spec(draw: st.DrawFn, rank: int, full_strides: bool = False) -> tuple[Any, ...]:
    """begin/end/strides lists of random lengths (up to ``rank``), and the numpy index."""
    count = draw(st.integers(0, rank))
    # Bounds past either end of a dim (up to 6 here) exercise numpy's clamping.
    bound = st.integers(-8, 8) | st.sampled_from([-100, 100])
    nb = count if full_strides else draw(st.integers(0, count))
    ne = count if full_strides else draw(st.integers(0, count))
    begin = draw(st.lists(bound, min_size=nb, max_size=nb))
    end = draw(st.lists(bound, min_size=ne, max_size=ne))
    step = st.integers(-3, 3).filter(lambda v: v != 0)
    strides: Any = draw(st.lists(step, min_size=count, max_size=count))
    if not full_strides and draw(st.booleans()):
        strides = strides[: draw(st.integers(0, count))] or None
    covered = max(len(begin), len(end), len(strides or ()))
    index = tuple(
        slice(
            begin[i] if i < len(begin) else None,
            end[i] if i < len(end) else None,
            strides[i] if strides and i < len(strides) else None,
        )
        for i in range(covered)
    )
    return begin, end, strides, index


@cases("strided_slice")
def _strided_slice(op: str) -> st.SearchStrategy[Case]:
    @st.composite
    def make(draw: st.DrawFn) -> Case:
        s = draw(shapes(min_rank=1, max_side=6))
        begin, end, strides, index = draw(slice_spec(len(s)))
        return Case(
            [s],
            {"begin": begin, "end": end, "strides": strides},
            numpy_shape(lambda: np.zeros(s)[index]),
        )

    return make()


@cases("take")
def _take(op: str) -> st.SearchStrategy[Case]:
    @st.composite
    def make(draw: st.DrawFn) -> Case:
        s = draw(shapes(max_rank=3))
        axis = draw(st.none() | st.integers(-len(s), len(s) - 1)) if s else None
        size = math.prod(s) if axis is None else s[axis]
        ishape = draw(shapes(max_rank=2, max_side=3))
        assume(size > 0 or math.prod(ishape) == 0)
        indices = np.asarray(
            draw(hnp.arrays(np.int64, ishape, elements=st.integers(0, max(size - 1, 0))))
        )
        return Case(
            [s, ishape], {"axis": axis}, numpy_shape(lambda: np.take(np.zeros(s), indices, axis))
        )

    return make()


@cases("tile")
def _tile(op: str) -> st.SearchStrategy[Case]:
    @st.composite
    def make(draw: st.DrawFn) -> Case:
        s = draw(shapes(max_rank=3, max_side=4))
        reps = draw(st.lists(st.integers(0, 3), max_size=4))
        return Case([s], {"reps": reps}, numpy_shape(lambda: np.tile(np.zeros(s), reps)))

    return make()


@cases("repeat")
def _repeat(op: str) -> st.SearchStrategy[Case]:
    @st.composite
    def make(draw: st.DrawFn) -> Case:
        s = draw(shapes(max_rank=3))
        axis = draw(st.none() | st.integers(-len(s), len(s) - 1)) if s else None
        r = draw(st.integers(0, 3))
        return Case(
            [s], {"repeats": r, "axis": axis}, numpy_shape(lambda: np.repeat(np.zeros(s), r, axis))
        )

    return make()


@cases("broadcast_to")
def _broadcast_to(op: str) -> st.SearchStrategy[Case]:
    @st.composite
    def make(draw: st.DrawFn) -> Case:
        target = list(draw(shapes()))
        rank = draw(st.integers(0, len(target)))
        x = tuple(1 if draw(st.booleans()) else d for d in target[len(target) - rank :])
        return Case(
            [x], {"shape": target}, numpy_shape(lambda: np.broadcast_to(np.zeros(x), target))
        )

    return make()


@cases("nn.batch_flatten")
def _batch_flatten(op: str) -> st.SearchStrategy[Case]:
    def make(s: tuple[int, ...]) -> Case:
        flat = (s[0], math.prod(s[1:]))
        return Case([s], {}, numpy_shape(lambda: np.zeros(s).reshape(flat)))

    return shapes(min_rank=1).map(make)


@cases("nn.pad")
def _pad(op: str) -> st.SearchStrategy[Case]:
    @st.composite
    def make(draw: st.DrawFn) -> Case:
        s = draw(shapes(min_rank=1))  # numpy cannot pad a scalar, nor can we
        widths = [draw(st.lists(st.integers(0, 2), min_size=2, max_size=2)) for _ in s]
        return Case(
            [s],
            {"pad_width": widths, "pad_value": 0.0},
            numpy_shape(lambda: np.pad(np.zeros(s), np.array(widths, int).reshape(-1, 2))),
        )

    return make()
