"""Neural-network ops: dense and matmul, normalisation, convolution and pooling (NCHW/OIHW),
recurrent layers (ONNX's LSTM, GRU and RNN)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..attrs import BOOL, FLOAT, INT, INT_LIST, Attrs, attr, choice, optional
from ..dtypes import is_float, is_int
from ..errors import IRError
from ..op import OpPattern
from ._declare import all_same_float, all_same_numeric, declare, float_like, input_dtype

declare(
    "nn.dense",
    ["data", "weight"],
    OpPattern.OUT_ELEMWISE_FUSABLE,
    all_same_numeric,
    doc="data @ weight.T",
)
declare(
    "nn.matmul",
    ["a", "b"],
    OpPattern.OUT_ELEMWISE_FUSABLE,
    all_same_numeric,
    doc="a @ b (numpy matmul: batched, broadcasting)",
)
declare(
    "nn.batch_matmul",
    ["x", "y"],
    OpPattern.OUT_ELEMWISE_FUSABLE,
    all_same_numeric,
    [attr("transpose_a", BOOL, False), attr("transpose_b", BOOL, True)],
    doc="batched (b, m, k) @ (b, k, n), with optional transposes of the last two axes",
)
declare(
    "nn.bias_add",
    ["data", "bias"],
    OpPattern.BROADCAST,
    all_same_numeric,
    [attr("axis", INT, 1)],
    doc="data + bias along axis",
)
declare(
    "nn.softmax",
    ["x"],
    OpPattern.OUT_ELEMWISE_FUSABLE,
    float_like,
    [attr("axis", INT, -1)],
    doc="softmax along axis",
    in_place=True,  # max/sum are taken before the first write; each later step is in place
)
declare(
    "nn.log_softmax",
    ["x"],
    OpPattern.OUT_ELEMWISE_FUSABLE,
    float_like,
    [attr("axis", INT, -1)],
    doc="log of softmax along axis",
    in_place=True,  # max/sum are taken before the first write; each later step is in place
)
declare(
    "nn.attention",
    ["q", "k", "v", "mask"],
    OpPattern.OUT_ELEMWISE_FUSABLE,
    all_same_float,
    [
        attr("scale", FLOAT, 1.0),
        attr("q_axes", optional(INT_LIST), None),
        attr("k_axes", optional(INT_LIST), None),
        attr("v_axes", optional(INT_LIST), None),
        attr("out_axes", optional(INT_LIST), None),
    ],
    doc="softmax(q @ k^T * scale + mask, axis=-1) @ v on (..., S_q, D) x (..., S_k, D) x "
    "(..., S_k, Dv) -> (..., S_q, Dv), the leading axes broadcasting; each operand is first "
    "permuted by its *_axes (None: as given) and the result is permuted by out_axes; the "
    "additive mask broadcasts to the scores (..., S_q, S_k) without widening them (design/"
    "compiler_fusion.md, 'Attention as one kernel')",
)
declare(
    "nn.layer_norm",
    ["data", "gamma", "beta"],
    OpPattern.OUT_ELEMWISE_FUSABLE,
    all_same_float,
    [attr("axis", INT, -1), attr("epsilon", FLOAT, 1e-5)],
    doc="normalise along axis, then scale by gamma and shift by beta",
    in_place=True,  # the mean is taken before the first write; each later step is in place
)

_CONV_ATTRS = [
    attr("strides", INT_LIST, [1, 1]),
    attr("padding", INT_LIST, [0, 0, 0, 0]),
    attr("dilation", INT_LIST, [1, 1]),
    attr("groups", INT, 1),
]
declare(
    "nn.conv2d",
    ["data", "weight"],
    OpPattern.OUT_ELEMWISE_FUSABLE,
    all_same_float,
    _CONV_ATTRS,
    doc="2-d convolution, NCHW data, OIHW weight; padding [top, left, bottom, right]",
)
declare(
    "nn.conv2d_transpose",
    ["data", "weight"],
    OpPattern.OUT_ELEMWISE_FUSABLE,
    all_same_float,
    [
        attr("strides", INT_LIST, [1, 1]),
        attr("padding", INT_LIST, [0, 0, 0, 0]),
        attr("output_padding", INT_LIST, [0, 0]),
        attr("dilation", INT_LIST, [1, 1]),
        attr("groups", INT, 1),
    ],
    doc="2-d transposed convolution (the gradient of nn.conv2d by its input), NCHW data, "
    "weight (C_in, C_out / groups, KH, KW); OH = (H - 1) * stride - top - bottom + "
    "dilation * (KH - 1) + output_padding + 1, likewise OW; padding [top, left, bottom, right] "
    "crops the full result, output_padding adds rows/columns at the end",
)

_POOL_ATTRS = [
    attr("pool_size", INT_LIST),
    attr("strides", INT_LIST, [1, 1]),
    attr("padding", INT_LIST, [0, 0, 0, 0]),
    attr("dilation", INT_LIST, [1, 1]),
]
declare(
    "nn.max_pool2d",
    ["data"],
    OpPattern.OUT_ELEMWISE_FUSABLE,
    float_like,
    _POOL_ATTRS,
    doc="max pooling, NCHW, windows dilated by dilation (padding never wins the max)",
)
declare(
    "nn.avg_pool2d",
    ["data"],
    OpPattern.OUT_ELEMWISE_FUSABLE,
    float_like,
    _POOL_ATTRS,
    doc="average pooling, NCHW, windows dilated by dilation (padding excluded from the count)",
)
declare(
    "nn.global_avg_pool2d",
    ["data"],
    OpPattern.OUT_ELEMWISE_FUSABLE,
    float_like,
    doc="mean over H and W, keeping them as 1-dims",
)
declare(
    "nn.global_max_pool2d",
    ["data"],
    OpPattern.OUT_ELEMWISE_FUSABLE,
    float_like,
    doc="max over H and W, keeping them as 1-dims",
)


# ---- recurrent layers ----------------------------------------------------------------------

_ACTIVATION = choice("sigmoid", "tanh", "relu")


def _recurrent_dtype(outputs: int) -> Any:
    """x is floating point, every other input but sequence_lens (an integer tensor) has its
    dtype, and so has each of the ``outputs`` results."""

    def rule(dtypes: Sequence[Any], attrs: Attrs) -> tuple[str, ...]:
        x = input_dtype(dtypes, 0, "x")
        if not is_float(x):
            raise IRError(f"expects a floating-point x, got {x}")
        for i in range(1, len(dtypes)):
            dt = input_dtype(dtypes, i, f"input {i}")
            if i == 4:
                if not is_int(dt):
                    raise IRError(f"sequence_lens must be an integer tensor, got {dt}")
            elif dt != x:
                raise IRError(f"input {i} has dtype {dt}, expected x's {x} (cast explicitly)")
        return (x,) * outputs

    return rule


def _recurrent(
    name: str, more: list[str], outputs: list[str], acts: dict[str, str], extra: list[Any]
) -> None:
    declare(
        name,
        ["x", "w", "r", "b", "sequence_lens", "initial_h", *more],
        OpPattern.OPAQUE,
        _recurrent_dtype(len(outputs)),
        [
            attr("direction", choice("forward", "reverse", "bidirectional"), "forward"),
            attr("layout", INT, 0),
            attr("clip", optional(FLOAT), None),
            *(attr(f"act_{k}", _ACTIVATION, v) for k, v in acts.items()),
            *extra,
        ],
        doc=f"ONNX's {name[3:].upper()} over the whole sequence in one kernel: the inputs, "
        "gate orders, direction, layout and clip of ONNX, its activations as "
        f"{', '.join('act_' + k for k in acts)}; results ({', '.join(outputs)}) of ONNX's "
        "shapes. An optional input (b, sequence_lens, the initial states, p) given as a 0-d "
        "tensor is absent (design/onnx.md, 'Recurrent ops')",
    )


_recurrent(
    "nn.lstm",
    ["initial_c", "p"],
    ["Y", "Y_h", "Y_c"],
    {"f": "sigmoid", "g": "tanh", "h": "tanh"},
    [attr("input_forget", BOOL, False)],
)
_recurrent(
    "nn.gru",
    [],
    ["Y", "Y_h"],
    {"f": "sigmoid", "g": "tanh"},
    [attr("linear_before_reset", BOOL, False)],
)
_recurrent("nn.rnn", [], ["Y", "Y_h"], {"f": "tanh"}, [])
