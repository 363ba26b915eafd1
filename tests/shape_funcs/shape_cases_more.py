"""Property cases of the creation, data-dependent and neural-network ops, with numpy references."""

from __future__ import annotations

from typing import Any, Literal

import numpy as np
from hypothesis import assume
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from numpy.lib.stride_tricks import sliding_window_view
from shape_cases_basic import newshape_for, slice_spec
from shape_cases_kit import Case, cases, ints, numpy_shape, shapes

from dynshape.testing.numpy_ops import OPS
from ir.ops.image import COORDINATE_MODES


# ---- creation ---------------------------------------------------------------------------------
@cases("zeros", "ones")
def _zeros(op: str) -> st.SearchStrategy[Case]:
    fn = np.zeros if op == "zeros" else np.ones
    return shapes().map(
        lambda s: Case([], {"shape": list(s), "dtype": "float32"}, numpy_shape(lambda: fn(s)))
    )


@cases("full")
def _full(op: str) -> st.SearchStrategy[Case]:
    return shapes().map(
        lambda s: Case(
            [()],
            {"shape": list(s), "dtype": "float32"},
            numpy_shape(lambda: np.full(s, np.float32(2))),
        )
    )


@cases("arange")
def _arange(op: str) -> st.SearchStrategy[Case]:
    @st.composite
    def make(draw: st.DrawFn) -> Case:
        dtype = draw(st.sampled_from(["float32", "float64", "int32", "int64"]))
        num: st.SearchStrategy[Any]
        step: st.SearchStrategy[Any]
        if dtype.startswith("float"):
            width: Literal[32, 64] = 32 if dtype == "float32" else 64
            num = st.floats(-50, 50, width=width)
            step = st.floats(-5, 5, width=width).filter(lambda v: abs(v) > 0.05)
        else:
            num, step = st.integers(-50, 50), st.integers(-5, 5).filter(lambda v: v != 0)
        start, stop, delta = (np.array(draw(s), dtype=dtype) for s in (num, num, step))
        arange: Any = np.arange
        out = draw(st.sampled_from(["float32", "float64", "int64"]))
        expected = numpy_shape(lambda: arange(start[()], stop[()], delta[()], dtype=out))
        return Case([start, stop, delta], {"dtype": out}, expected)

    return make()


# ---- shape and data-dependent ops --------------------------------------------------------------
@cases("shape_of")
def _shape_of(op: str) -> st.SearchStrategy[Case]:
    return shapes().map(
        lambda s: Case([s], {"dtype": "int64"}, numpy_shape(lambda: np.array(np.zeros(s).shape)))
    )


@cases("dyn.reshape")
def _dyn_reshape(op: str) -> st.SearchStrategy[Case]:
    @st.composite
    def make(draw: st.DrawFn) -> Case:
        s = draw(shapes())
        newshape, expected = draw(newshape_for(s))
        return Case([s, ints(newshape)], {}, expected)

    return make()


@cases("dyn.zeros", "dyn.ones")
def _dyn_zeros(op: str) -> st.SearchStrategy[Case]:
    return shapes().map(
        lambda s: Case([ints(list(s))], {"dtype": "float32"}, numpy_shape(lambda: np.zeros(s)))
    )


@cases("dyn.full")
def _dyn_full(op: str) -> st.SearchStrategy[Case]:
    return shapes().map(
        lambda s: Case(
            [(), ints(list(s))], {"dtype": "float32"}, numpy_shape(lambda: np.full(s, 1.5))
        )
    )


@cases("dyn.strided_slice")
def _dyn_strided_slice(op: str) -> st.SearchStrategy[Case]:
    @st.composite
    def make(draw: st.DrawFn) -> Case:
        s = draw(shapes(min_rank=1, max_side=6))
        begin, end, strides, index = draw(slice_spec(len(s), full_strides=True))
        return Case(
            [s, ints(begin), ints(end), ints(strides)], {}, numpy_shape(lambda: np.zeros(s)[index])
        )

    return make()


@cases("argwhere")
def _argwhere(op: str) -> st.SearchStrategy[Case]:
    @st.composite
    def make(draw: st.DrawFn) -> Case:
        x = draw(hnp.arrays(np.int32, shapes(max_side=4), elements=st.integers(0, 2)))
        return Case([x], {}, numpy_shape(lambda: np.argwhere(x)), value_shapes=True)

    return make()


@cases("compress")
def _compress(op: str) -> st.SearchStrategy[Case]:
    @st.composite
    def make(draw: st.DrawFn) -> Case:
        s, axis = _axis_case(draw)
        mask = draw(hnp.arrays(np.int8, (s[axis],), elements=st.integers(0, 2)))
        expected = numpy_shape(lambda: np.compress(mask, np.zeros(s), axis=axis))
        return Case([s, mask], {"axis": axis}, expected)

    return make()


@cases("sort", "argsort")
def _sort(op: str) -> st.SearchStrategy[Case]:
    @st.composite
    def make(draw: st.DrawFn) -> Case:
        s, axis = _axis_case(draw)
        attrs = {"axis": axis, "descending": draw(st.booleans())}
        return Case([s], attrs, numpy_shape(lambda: np.argsort(np.zeros(s), axis=axis)))

    return make()


@cases("unique")
def _unique(op: str) -> st.SearchStrategy[Case]:
    @st.composite
    def make(draw: st.DrawFn) -> Case:
        x = draw(hnp.arrays(np.int32, shapes(min_rank=1, max_side=4), elements=st.integers(0, 2)))
        axis = draw(st.one_of(st.none(), st.integers(-x.ndim, x.ndim - 1)))
        attrs = {"axis": axis, "sorted": draw(st.booleans())}
        expected = numpy_shape(lambda: list(OPS["unique"]([x], attrs)))
        return Case([x], attrs, expected, value_shapes=True)

    return make()


@cases("dft")
def _dft(op: str) -> st.SearchStrategy[Case]:
    @st.composite
    def make(draw: st.DrawFn) -> Case:
        s = (*draw(shapes(min_rank=1, max_rank=3)), draw(st.sampled_from([1, 2])))
        axis = draw(st.integers(0, len(s) - 2)) - draw(st.sampled_from([0, len(s)]))
        inverse, onesided = draw(st.booleans()), draw(st.booleans())
        length = draw(st.one_of(st.none(), st.integers(1, 9)))
        if length is None:  # the default length, from the axis dim, must be >= 1
            assume(s[axis] >= (2 if inverse and onesided else 1))
        attrs = {"axis": axis, "length": length, "inverse": inverse, "onesided": onesided}
        return Case([s], attrs, numpy_shape(lambda: OPS["dft"]([np.zeros(s)], attrs)))

    return make()


def _topk_reference(x: np.ndarray, k: int, axis: int, ret_type: str) -> Any:
    order = np.argsort(-x, axis=axis, kind="stable")
    indices = np.take(order, np.arange(k), axis=axis)
    values = np.take_along_axis(x, indices, axis=axis)
    return {"both": [values, indices], "values": values, "indices": indices}[ret_type]


@cases("topk", "dyn.topk")
def _topk(op: str) -> st.SearchStrategy[Case]:
    @st.composite
    def make(draw: st.DrawFn) -> Case:
        x = draw(
            hnp.arrays(
                np.float32, shapes(min_rank=1, max_side=4), elements=st.floats(-9, 9, width=32)
            )
        )
        axis = draw(st.integers(-x.ndim, x.ndim - 1))
        k = draw(st.integers(0, x.shape[axis]))
        ret = draw(st.sampled_from(["both", "values", "indices"]))
        attrs = {"axis": axis, "ret_type": ret, "is_ascend": False, "dtype": "int64"}
        expected = numpy_shape(lambda: _topk_reference(x, k, axis, ret))
        if op == "topk":
            return Case([x.shape], {"k": k, **attrs}, expected)
        return Case([x.shape, np.array(k, dtype=np.int64)], attrs, expected)

    return make()


@cases("non_max_suppression")
def _non_max_suppression(op: str) -> st.SearchStrategy[Case]:
    @st.composite
    def make(draw: st.DrawFn) -> Case:
        from dynshape.testing.numpy_ops import OPS

        batch, classes, n = (
            draw(st.integers(0, 2)),
            draw(st.integers(0, 3)),
            draw(st.integers(0, 5)),
        )
        grid = st.integers(0, 4).map(float)
        boxes = draw(hnp.arrays(np.float32, (batch, n, 4), elements=grid))
        scores = draw(hnp.arrays(np.float32, (batch, classes, n), elements=grid))
        scalar = draw(st.sampled_from([(), (1,)]))
        values = [
            np.full(scalar, draw(st.integers(-1, 4)), np.int64),
            np.full(scalar, draw(st.sampled_from([0.0, 0.3, 0.5, 1.0])), np.float32),
            np.full(scalar, draw(st.sampled_from([-np.inf, 0.0, 1.5])), np.float32),
        ]
        attrs = {"center_point_box": draw(st.integers(0, 1))}
        inputs = [boxes, scores, *values]
        expected = numpy_shape(lambda: OPS[op](inputs, attrs))
        return Case(inputs, attrs, expected)

    return make()


# ---- neural networks --------------------------------------------------------------------------
@cases("nn.dense")
def _dense(op: str) -> st.SearchStrategy[Case]:
    @st.composite
    def make(draw: st.DrawFn) -> Case:
        data = draw(shapes(min_rank=1, max_rank=3))
        weight = (draw(st.integers(0, 4)), data[-1])
        return Case([data, weight], {}, numpy_shape(lambda: np.zeros(data) @ np.zeros(weight).T))

    return make()


@cases("nn.matmul")
def _matmul(op: str) -> st.SearchStrategy[Case]:
    sig = "(m?,n),(n,p?)->(m?,p?)"
    return hnp.mutually_broadcastable_shapes(signature=sig, max_dims=3, max_side=4).map(
        lambda bs: Case(
            list(bs.input_shapes),
            {},
            numpy_shape(lambda: np.matmul(*(np.zeros(s) for s in bs.input_shapes))),
        )
    )


@cases("nn.batch_matmul")
def _batch_matmul(op: str) -> st.SearchStrategy[Case]:
    @st.composite
    def make(draw: st.DrawFn) -> Case:
        b, m, k, n = (draw(st.integers(0, 4)) for _ in range(4))
        bx, by = draw(st.sampled_from([(b, b), (1, b), (b, 1)]))
        ta, tb = draw(st.booleans()), draw(st.booleans())
        x = (bx, k, m) if ta else (bx, m, k)
        y = (by, n, k) if tb else (by, k, n)

        def run() -> np.ndarray:
            xa, ya = np.zeros(x), np.zeros(y)
            return np.matmul(xa.swapaxes(1, 2) if ta else xa, ya.swapaxes(1, 2) if tb else ya)

        return Case([x, y], {"transpose_a": ta, "transpose_b": tb}, numpy_shape(run))

    return make()


def _axis_case(draw: st.DrawFn) -> tuple[tuple[int, ...], int]:
    s = draw(shapes(min_rank=1))
    return s, draw(st.integers(-len(s), len(s) - 1))


@cases("nn.bias_add")
def _bias_add(op: str) -> st.SearchStrategy[Case]:
    @st.composite
    def make(draw: st.DrawFn) -> Case:
        s, axis = _axis_case(draw)
        bias = (s[axis],)
        view = [1] * len(s)
        view[axis] = s[axis]
        return Case(
            [s, bias],
            {"axis": axis},
            numpy_shape(lambda: np.zeros(s) + np.zeros(bias).reshape(view)),
        )

    return make()


def _softmax(x: np.ndarray, axis: int) -> np.ndarray:
    e = np.exp(x)
    return e / e.sum(axis=axis, keepdims=True)


@cases("nn.softmax", "nn.log_softmax")
def _softmax_cases(op: str) -> st.SearchStrategy[Case]:
    @st.composite
    def make(draw: st.DrawFn) -> Case:
        s, axis = _axis_case(draw)
        fn = _softmax if op == "nn.softmax" else (lambda x, a: np.log(_softmax(x, a)))
        return Case([s], {"axis": axis}, numpy_shape(lambda: fn(np.zeros(s), axis)))

    return make()


@cases("cumsum", "cumprod")
def _cumsum_cases(op: str) -> st.SearchStrategy[Case]:
    @st.composite
    def make(draw: st.DrawFn) -> Case:
        s, axis = _axis_case(draw)
        attrs = {"axis": axis, "exclusive": draw(st.booleans()), "reverse": draw(st.booleans())}
        return Case([s], attrs, numpy_shape(lambda: np.cumsum(np.zeros(s), axis=axis)))

    return make()


@cases("scatter_nd")
def _scatter_nd_cases(op: str) -> st.SearchStrategy[Case]:
    @st.composite
    def make(draw: st.DrawFn) -> Case:
        s = draw(shapes())
        q = draw(st.integers(0, len(s)))
        batch = draw(shapes(max_rank=2))
        attrs = {"reduction": draw(st.sampled_from(["none", "add", "mul", "max", "min"]))}
        # the result is a copy of the data, scattered into
        return Case([s, (*batch, q), (*batch, *s[q:])], attrs, numpy_shape(lambda: np.zeros(s)))

    return make()


@cases("scatter_elements")
def _scatter_elements_cases(op: str) -> st.SearchStrategy[Case]:
    @st.composite
    def make(draw: st.DrawFn) -> Case:
        s, axis = _axis_case(draw)
        # along the other axes the indices reach at most the data's extent
        m = tuple(
            draw(st.integers(0, 5)) if i == axis % len(s) else draw(st.integers(0, d))
            for i, d in enumerate(s)
        )
        attrs = {"axis": axis, "reduction": draw(st.sampled_from(["none", "add", "max"]))}
        return Case([s, m, m], attrs, numpy_shape(lambda: np.zeros(s)))

    return make()


@cases("dynamic_update_slice")
def _dynamic_update_slice_cases(op: str) -> st.SearchStrategy[Case]:
    @st.composite
    def make(draw: st.DrawFn) -> Case:
        s = draw(shapes(max_rank=4))
        u = tuple(draw(st.integers(0, d)) for d in s)  # the update fits, 0-size included
        # one scalar per axis, or one 1-d tensor of rank elements: the result is the operand's
        starts = [()] * len(s) if draw(st.booleans()) else [(len(s),)]
        return Case([s, u, starts], {}, numpy_shape(lambda: np.zeros(s)))

    return make()


def _interpolation(draw: st.DrawFn) -> dict[str, Any]:
    """The interpolation attributes ``resize`` and ``dyn.resize`` share, drawn."""
    return {
        "mode": draw(st.sampled_from(["nearest", "linear", "cubic"])),
        "coordinate_transformation_mode": draw(st.sampled_from(COORDINATE_MODES)),
        "nearest_mode": "round_prefer_floor",
        "cubic_coeff_a": -0.75,
        "exclude_outside": draw(st.booleans()),
    }


@cases("resize")
def _resize_cases(op: str) -> st.SearchStrategy[Case]:
    @st.composite
    def make(draw: st.DrawFn) -> Case:
        s = draw(shapes(min_rank=1, max_rank=3))
        # an empty axis can only be resized to 0 elements (there is nothing to take)
        sizes = [draw(st.integers(0, 6)) if d else 0 for d in s]
        ratios = [max(n, 1) / max(d, 1) for n, d in zip(sizes, s, strict=True)]
        scales = draw(st.none() | st.just(ratios))
        attrs = {"sizes": sizes, "scales": scales, **_interpolation(draw)}
        return Case([s], attrs, numpy_shape(lambda: OPS["resize"]([np.zeros(s)], attrs)))

    return make()


@cases("dyn.resize")
def _dyn_resize_cases(op: str) -> st.SearchStrategy[Case]:
    @st.composite
    def make(draw: st.DrawFn) -> Case:
        s = draw(shapes(min_rank=1, max_rank=3))
        sizes = [draw(st.integers(0, 6)) if d else 0 for d in s]
        attrs = _interpolation(draw)
        ins = [np.zeros(s), np.array(sizes, np.int64)]
        return Case([s, ints(sizes)], attrs, numpy_shape(lambda: OPS["dyn.resize"](ins, attrs)))

    return make()


@cases("nn.rms_norm")
def _rms_norm(op: str) -> st.SearchStrategy[Case]:
    @st.composite
    def make(draw: st.DrawFn) -> Case:
        s, axis = _axis_case(draw)
        view = [1] * len(s)
        view[axis] = s[axis]

        def run() -> np.ndarray:
            x = np.zeros(s)
            square = (x * x).mean(axis=axis, keepdims=True)
            return x / np.sqrt(square + 1e-5) * np.ones(s[axis]).reshape(view)

        return Case([s, (s[axis],)], {"axis": axis, "epsilon": 1e-5}, numpy_shape(run))

    return make()


@cases("nn.layer_norm")
def _layer_norm(op: str) -> st.SearchStrategy[Case]:
    @st.composite
    def make(draw: st.DrawFn) -> Case:
        s, axis = _axis_case(draw)
        view = [1] * len(s)
        view[axis] = s[axis]

        def run() -> np.ndarray:
            x = np.zeros(s)
            mean = x.mean(axis=axis, keepdims=True)
            var = x.var(axis=axis, keepdims=True)
            gamma, beta = np.ones(s[axis]).reshape(view), np.zeros(s[axis]).reshape(view)
            return (x - mean) / np.sqrt(var + 1e-5) * gamma + beta

        return Case([s, (s[axis],), (s[axis],)], {"axis": axis, "epsilon": 1e-5}, numpy_shape(run))

    return make()


def _windows(
    x: np.ndarray,
    kernel: tuple[int, int],
    strides: list[int],
    padding: list[int],
    dilation: tuple[int, int] = (1, 1),
) -> np.ndarray:
    """Every (dilated, strided) window of a padded NCHW tensor: (N, C, OH, OW, KH, KW)."""
    top, left, bottom, right = padding if len(padding) == 4 else padding * 2
    xp = np.pad(x, ((0, 0), (0, 0), (top, bottom), (left, right)))
    extent = tuple(d * (k - 1) + 1 for d, k in zip(dilation, kernel, strict=True))
    win = sliding_window_view(xp, extent, axis=(2, 3))
    return win[:, :, :: strides[0], :: strides[1], :: dilation[0], :: dilation[1]]


def _conv2d(
    x: np.ndarray,
    w: np.ndarray,
    strides: list[int],
    padding: list[int],
    dilation: list[int],
    groups: int,
) -> np.ndarray:
    """A plain grouped NCHW/OIHW convolution."""
    win = _windows(x, (w.shape[2], w.shape[3]), strides, padding, (dilation[0], dilation[1]))
    n, c, oh, ow, kh, kw = win.shape
    win = win.reshape(n, groups, c // groups, oh, ow, kh, kw)
    wg = w.reshape(groups, w.shape[0] // groups, w.shape[1], kh, kw)
    out = np.einsum("ngchwij,gocij->ngohw", win, wg)
    return out.reshape(n, w.shape[0], oh, ow)


def _pad_spec(draw: st.DrawFn) -> list[int]:
    if draw(st.booleans()):
        return [draw(st.integers(0, 2)) for _ in range(4)]
    return [draw(st.integers(0, 2)) for _ in range(2)]


@cases("nn.conv2d")
def _conv(op: str) -> st.SearchStrategy[Case]:
    @st.composite
    def make(draw: st.DrawFn) -> Case:
        groups = draw(st.integers(1, 3))
        per_group_in, per_group_out = draw(st.integers(0, 2)), draw(st.integers(0, 2))
        kh, kw = draw(st.integers(1, 3)), draw(st.integers(1, 3))
        strides = [draw(st.integers(1, 3)) for _ in range(2)]
        dilation = [draw(st.integers(1, 2)) for _ in range(2)]
        padding = _pad_spec(draw)
        pads = padding if len(padding) == 4 else padding * 2
        h = draw(st.integers(max(0, dilation[0] * (kh - 1) + 1 - pads[0] - pads[2]), 7))
        w = draw(st.integers(max(0, dilation[1] * (kw - 1) + 1 - pads[1] - pads[3]), 7))
        data = (draw(st.integers(0, 2)), groups * per_group_in, h, w)
        weight = (groups * per_group_out, per_group_in, kh, kw)
        attrs = {"strides": strides, "padding": padding, "dilation": dilation, "groups": groups}
        expected = numpy_shape(
            lambda: _conv2d(np.zeros(data), np.zeros(weight), strides, padding, dilation, groups)
        )
        return Case([data, weight], attrs, expected)

    return make()


@cases("nn.conv3d")
def _conv3d(op: str) -> st.SearchStrategy[Case]:
    @st.composite
    def make(draw: st.DrawFn) -> Case:
        groups = draw(st.integers(1, 2))
        per_group_in, per_group_out = draw(st.integers(0, 2)), draw(st.integers(0, 2))
        kernel = [draw(st.integers(1, 3)) for _ in range(3)]
        strides = [draw(st.integers(1, 2)) for _ in range(3)]
        dilation = [draw(st.integers(1, 2)) for _ in range(3)]
        padding = [draw(st.integers(0, 2)) for _ in range(6)]
        sizes = [
            draw(
                st.integers(
                    max(0, dilation[a] * (kernel[a] - 1) + 1 - padding[a] - padding[3 + a]), 5
                )
            )
            for a in range(3)
        ]
        data = (draw(st.integers(0, 2)), groups * per_group_in, *sizes)
        weight = (groups * per_group_out, per_group_in, *kernel)
        attrs = {"strides": strides, "padding": padding, "dilation": dilation, "groups": groups}
        out = [
            (sizes[a] + padding[a] + padding[3 + a] - dilation[a] * (kernel[a] - 1) - 1)
            // strides[a]
            + 1
            for a in range(3)
        ]
        return Case([data, weight], attrs, (data[0], weight[0], *out))

    return make()


def _conv2d_transpose_shape(
    data: tuple[int, ...],
    weight: tuple[int, ...],
    strides: list[int],
    padding: list[int],
    output_padding: list[int],
    dilation: list[int],
    groups: int,
) -> np.ndarray:
    """A zero image of the result's shape, built the way the op is defined: each input pixel
    spreads its dilated kernel footprint into a full map (strided), which output_padding extends
    at the end and padding crops (numpy slicing decides the sizes)."""
    top, left, bottom, right = padding if len(padding) == 4 else padding * 2
    h, w = data[2], data[3]
    kh, kw = weight[2], weight[3]
    sizes = zip((h, w), strides, dilation, (kh, kw), output_padding, strict=True)
    spread = [(size - 1) * s + d * (k - 1) + 1 + op for size, s, d, k, op in sizes]
    full = np.zeros((data[0], weight[1] * groups, *spread))
    return full[:, :, top : full.shape[2] - bottom, left : full.shape[3] - right]


@cases("nn.conv2d_transpose")
def _conv_transpose(op: str) -> st.SearchStrategy[Case]:
    @st.composite
    def make(draw: st.DrawFn) -> Case:
        groups = draw(st.integers(1, 3))
        per_group_in, per_group_out = draw(st.integers(0, 2)), draw(st.integers(0, 2))
        kh, kw = draw(st.integers(1, 3)), draw(st.integers(1, 3))
        strides = [draw(st.integers(1, 3)) for _ in range(2)]
        dilation = [draw(st.integers(1, 2)) for _ in range(2)]
        output_padding = [
            draw(st.integers(0, max(s, d) - 1)) for s, d in zip(strides, dilation, strict=True)
        ]
        padding = _pad_spec(draw)
        pads = padding if len(padding) == 4 else padding * 2
        full = [
            (size - 1) * s + d * (k - 1) + 1 + op
            for size, s, d, k, op in zip(
                (1, 1), strides, dilation, (kh, kw), output_padding, strict=True
            )
        ]
        # the smallest H, W whose full result padding does not crop below zero
        least = [max(1, 1 + -(-(pads[a] + pads[a + 2] - full[a]) // strides[a])) for a in (0, 1)]
        h = draw(st.integers(least[0], least[0] + 5))
        w = draw(st.integers(least[1], least[1] + 5))
        data = (draw(st.integers(0, 2)), groups * per_group_in, h, w)
        weight = (groups * per_group_in, per_group_out, kh, kw)
        attrs = {
            "strides": strides,
            "padding": padding,
            "output_padding": output_padding,
            "dilation": dilation,
            "groups": groups,
        }
        expected = numpy_shape(
            lambda: _conv2d_transpose_shape(
                data, weight, strides, padding, output_padding, dilation, groups
            )
        )
        return Case([data, weight], attrs, expected)

    return make()


@cases("nn.max_pool2d", "nn.avg_pool2d")
def _pool(op: str) -> st.SearchStrategy[Case]:
    @st.composite
    def make(draw: st.DrawFn) -> Case:
        kh, kw = draw(st.integers(1, 3)), draw(st.integers(1, 3))
        strides = [draw(st.integers(1, 3)) for _ in range(2)]
        dilation = [draw(st.integers(1, 2)) for _ in range(2)]
        padding = _pad_spec(draw)
        pads = padding if len(padding) == 4 else padding * 2
        h = draw(st.integers(max(0, dilation[0] * (kh - 1) + 1 - pads[0] - pads[2]), 7))
        w = draw(st.integers(max(0, dilation[1] * (kw - 1) + 1 - pads[1] - pads[3]), 7))
        data = (draw(st.integers(0, 2)), draw(st.integers(0, 3)), h, w)
        reduce = np.max if op == "nn.max_pool2d" else np.mean
        win = (kh, kw)
        expected = numpy_shape(
            lambda: reduce(
                _windows(np.ones(data), win, strides, padding, (dilation[0], dilation[1])),
                axis=(4, 5),
            )
        )
        attrs = {"pool_size": [kh, kw], "strides": strides, "padding": padding}
        if dilation != [1, 1] or draw(st.booleans()):
            attrs["dilation"] = dilation
        return Case([data], attrs, expected)

    return make()


@cases("nn.global_avg_pool2d", "nn.global_max_pool2d")
def _global_pool(op: str) -> st.SearchStrategy[Case]:
    reduce = np.mean if op == "nn.global_avg_pool2d" else np.max

    def make(s: tuple[int, ...]) -> Case:
        if op == "nn.global_max_pool2d":
            assume(s[2] > 0 and s[3] > 0)
        return Case([s], {}, numpy_shape(lambda: reduce(np.zeros(s), axis=(2, 3), keepdims=True)))

    return shapes(min_rank=4, max_rank=4).map(make)


@cases("nn.attention")
def _attention(op: str) -> st.SearchStrategy[Case]:
    @st.composite
    def make(draw: st.DrawFn) -> Case:
        b, h, s_q, s_k, d, dv = (draw(st.integers(0, 4)) for _ in range(6))
        # GQA-style broadcasting of the leading axes; a mask that broadcasts to the scores.
        hq, hk, hv = draw(st.sampled_from([(h, h, h), (1, h, h), (h, 1, 1), (h, h, 1)]))
        q, k, v = (b, hq, s_q, d), (b, hk, s_k, d), (b, hv, s_k, dv)
        hs = max(hq, hk) if 0 not in (hq, hk) else 0
        mask = draw(st.sampled_from([(), (s_k,), (b, 1, 1, s_k), (1, hs, s_q, s_k), (s_q, 1)]))
        perm = draw(st.sampled_from([None, [0, 2, 1, 3]]))
        out_perm = draw(st.sampled_from([None, [0, 2, 1, 3]]))

        def given(shape: tuple[int, ...]) -> tuple[int, ...]:
            return shape if perm is None else tuple(shape[p] for p in perm)  # an involution

        def run() -> np.ndarray:
            qa, ka, va = np.zeros(q), np.zeros(k), np.zeros(v)
            out = np.matmul(np.matmul(qa, ka.swapaxes(-1, -2)) + np.zeros(mask), va)
            return out if out_perm is None else out.transpose(out_perm)

        attrs = {"scale": 0.5, "q_axes": perm, "k_axes": perm, "v_axes": perm}
        attrs["out_axes"] = out_perm
        return Case([given(q), given(k), given(v), mask], attrs, numpy_shape(run))

    return make()


@cases("nn.lstm", "nn.gru", "nn.rnn")
def _recurrent(op: str) -> st.SearchStrategy[Case]:
    gates = {"nn.lstm": 4, "nn.gru": 3, "nn.rnn": 1}[op]
    acts = {"nn.lstm": "sigmoid tanh tanh", "nn.gru": "sigmoid tanh", "nn.rnn": "tanh"}[op]

    @st.composite
    def make(draw: st.DrawFn) -> Case:
        seq, batch, hidden, size = (draw(st.integers(0, 3)) for _ in range(4))
        hidden = max(hidden, 1)
        direction = draw(st.sampled_from(["forward", "reverse", "bidirectional"]))
        layout = draw(st.sampled_from([0, 1]))
        dirs = 2 if direction == "bidirectional" else 1
        gh = gates * hidden
        x = (batch, seq, size) if layout else (seq, batch, size)
        state = (batch, dirs, hidden) if layout else (dirs, batch, hidden)
        # Each optional operand given or absent (0-d).
        optional = [(dirs, 2 * gh), (batch,), state]
        if gates == 4:
            optional += [state, (dirs, 3 * hidden)]
        given = [s if draw(st.booleans()) else () for s in optional]
        inputs = [x, (dirs, gh, size), (dirs, gh, hidden), *given]
        attrs: dict[str, Any] = {"direction": direction, "layout": layout, "clip": None}
        attrs |= {f"act_{k}": a for k, a in zip("fgh", acts.split(), strict=False)}
        attrs |= {4: {"input_forget": False}, 3: {"linear_before_reset": False}}.get(gates, {})

        def run() -> Any:
            arrays = [np.zeros(s, np.float32) for s in inputs]
            if given[1]:
                arrays[4] = np.full(batch, seq, np.int32)
            return OPS[op](arrays, attrs)

        return Case(inputs, attrs, numpy_shape(run))

    return make()
