"""Neural-network ops: dense and matmul, normalisation, convolution and pooling (NCHW/OIHW)."""

from __future__ import annotations

from ..attrs import BOOL, FLOAT, INT, INT_LIST, attr, optional
from ..op import OpPattern
from ._declare import all_same_float, all_same_numeric, declare, float_like

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
