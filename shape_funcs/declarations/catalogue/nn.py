"""Neural-network ops: dense and matmul, normalisation, convolution and pooling (NCHW/OIHW),
recurrent layers (ONNX's LSTM, GRU and RNN)."""

from __future__ import annotations

from collections.abc import Sequence

from ..decl import AttrDecl, OpDecl, attr, declare
from ..kinds import choice, optional

_FUSABLE = "out_elementwise_fusable"
_AXES = optional("list[int]")
_CONV_ATTRS = [
    attr("strides", "list[int]", [1, 1]),
    attr("padding", "list[int]", [0, 0, 0, 0]),
    attr("dilation", "list[int]", [1, 1]),
    attr("groups", "int", 1),
]
_CONV3D_ATTRS = [
    attr("strides", "list[int]", [1, 1, 1]),
    attr("padding", "list[int]", [0, 0, 0, 0, 0, 0]),
    attr("dilation", "list[int]", [1, 1, 1]),
    attr("groups", "int", 1),
]
_POOL_ATTRS = [
    attr("pool_size", "list[int]"),
    attr("strides", "list[int]", [1, 1]),
    attr("padding", "list[int]", [0, 0, 0, 0]),
    attr("dilation", "list[int]", [1, 1]),
]
_ACTIVATION = choice("sigmoid", "tanh", "relu")


def _recurrent(
    name: str,
    more: list[str],
    outputs: list[str],
    acts: dict[str, str],
    extra: Sequence[AttrDecl],
) -> OpDecl:
    return declare(
        name,
        ["x", "w", "r", "b", "sequence_lens", "initial_h", *more],
        "opaque",
        "own",
        [
            attr("direction", choice("forward", "reverse", "bidirectional"), "forward"),
            attr("layout", "int", 0),
            attr("clip", optional("float"), None),
            *(attr(f"act_{k}", _ACTIVATION, v) for k, v in acts.items()),
            *extra,
        ],
        f"ONNX's {name[3:].upper()} over the whole sequence in one kernel: the inputs, "
        "gate orders, direction, layout and clip of ONNX, its activations as "
        f"{', '.join('act_' + k for k in acts)}; results ({', '.join(outputs)}) of ONNX's "
        "shapes. An optional input (b, sequence_lens, the initial states, p) given as a 0-d "
        "tensor is absent (design/onnx.md, 'Recurrent ops')",
    )


DECLARATIONS: tuple[OpDecl, ...] = (
    declare("nn.dense", ["data", "weight"], _FUSABLE, "same_numeric", doc="data @ weight.T"),
    declare(
        "nn.matmul",
        ["a", "b"],
        _FUSABLE,
        "same_numeric",
        doc="a @ b (numpy matmul: batched, broadcasting)",
    ),
    declare(
        "nn.batch_matmul",
        ["x", "y"],
        _FUSABLE,
        "same_numeric",
        [attr("transpose_a", "bool", False), attr("transpose_b", "bool", True)],
        "batched (b, m, k) @ (b, k, n), with optional transposes of the last two axes",
    ),
    declare(
        "nn.bias_add",
        ["data", "bias"],
        "broadcast",
        "same_numeric",
        [attr("axis", "int", 1)],
        "data + bias along axis",
    ),
    *(
        declare(
            name,
            ["x"],
            _FUSABLE,
            "float",
            [attr("axis", "int", -1)],
            doc,
            in_place=True,  # max/sum are taken before the first write; each later step is in place
        )
        for name, doc in (
            ("nn.softmax", "softmax along axis"),
            ("nn.log_softmax", "log of softmax along axis"),
        )
    ),
    declare(
        "nn.attention",
        ["q", "k", "v", "mask"],
        _FUSABLE,
        "same_float",
        [
            attr("scale", "float", 1.0),
            attr("q_axes", _AXES, None),
            attr("k_axes", _AXES, None),
            attr("v_axes", _AXES, None),
            attr("out_axes", _AXES, None),
            attr("nan_to_zero", "bool", False),
        ],
        "softmax(q @ k^T * scale + mask, axis=-1) @ v on (..., S_q, D) x (..., S_k, D) x "
        "(..., S_k, Dv) -> (..., S_q, Dv), the leading axes broadcasting; each operand is first "
        "permuted by its *_axes (None: as given) and the result is permuted by out_axes; the "
        "additive mask broadcasts to the scores (..., S_q, S_k) without widening them; "
        "nan_to_zero: the probabilities' NaNs (a row whose scores are all -inf) become 0 "
        "before the second matmul, as exporters' where(p != p, 0, p) does (design/"
        "compiler_fusion.md, 'Attention as one kernel')",
    ),
    declare(
        "nn.layer_norm",
        ["data", "gamma", "beta"],
        _FUSABLE,
        "same_float",
        [attr("axis", "int", -1), attr("epsilon", "float", 1e-5)],
        "normalise along axis, then scale by gamma and shift by beta",
        in_place=True,  # the mean is taken before the first write; each later step is in place
    ),
    declare(
        "nn.rms_norm",
        ["data", "gamma"],
        _FUSABLE,
        "same_float",
        [attr("axis", "int", -1), attr("epsilon", "float", 1e-5)],
        "divide by the root mean square along axis (plus epsilon under the root), then scale "
        "by gamma (RMSNorm: Llama's, T5's layer norm, ONNX's RMSNormalization over one axis)",
        in_place=True,  # the mean square is taken before the first write; each later step in place
    ),
    declare(
        "nn.conv2d",
        ["data", "weight"],
        _FUSABLE,
        "same_float",
        _CONV_ATTRS,
        "2-d convolution, NCHW data, OIHW weight; padding [top, left, bottom, right]",
    ),
    declare(
        "nn.conv3d",
        ["data", "weight"],
        "opaque",
        "same_float",
        _CONV3D_ATTRS,
        "3-d convolution, NCDHW data, OIDHW weight; padding [front, top, left, back, bottom, "
        "right] (video and volumetric models: ONNX's Conv over a rank-5 input)",
    ),
    declare(
        "nn.conv2d_transpose",
        ["data", "weight"],
        _FUSABLE,
        "same_float",
        [*_CONV_ATTRS[:2], attr("output_padding", "list[int]", [0, 0]), *_CONV_ATTRS[2:]],
        "2-d transposed convolution (the gradient of nn.conv2d by its input), NCHW data, "
        "weight (C_in, C_out / groups, KH, KW); OH = (H - 1) * stride - top - bottom + "
        "dilation * (KH - 1) + output_padding + 1, likewise OW; padding [top, left, bottom, "
        "right] crops the full result, output_padding adds rows/columns at the end",
    ),
    declare(
        "nn.max_pool2d",
        ["data"],
        _FUSABLE,
        "float",
        _POOL_ATTRS,
        "max pooling, NCHW, windows dilated by dilation (padding never wins the max)",
    ),
    declare(
        "nn.avg_pool2d",
        ["data"],
        _FUSABLE,
        "float",
        _POOL_ATTRS,
        "average pooling, NCHW, windows dilated by dilation (padding excluded from the count)",
    ),
    declare(
        "nn.global_avg_pool2d",
        ["data"],
        _FUSABLE,
        "float",
        doc="mean over H and W, keeping them as 1-dims",
    ),
    declare(
        "nn.global_max_pool2d",
        ["data"],
        _FUSABLE,
        "float",
        doc="max over H and W, keeping them as 1-dims",
    ),
    _recurrent(
        "nn.lstm",
        ["initial_c", "p"],
        ["Y", "Y_h", "Y_c"],
        {"f": "sigmoid", "g": "tanh", "h": "tanh"},
        [attr("input_forget", "bool", False)],
    ),
    _recurrent(
        "nn.gru",
        [],
        ["Y", "Y_h"],
        {"f": "sigmoid", "g": "tanh"},
        [attr("linear_before_reset", "bool", False)],
    ),
    _recurrent("nn.rnn", [], ["Y", "Y_h"], {"f": "tanh"}, []),
    declare(
        "dft",
        ["x"],
        "opaque",
        "float",
        [
            attr("axis", "int", -2),
            attr("length", optional("int"), None),
            attr("inverse", "bool", False),
            attr("onesided", "bool", False),
        ],
        "ONNX's DFT by numpy's FFT along axis (not the last): x is real ([..., 1]) or complex "
        "([..., 2], real and imaginary parts), cut or zero-padded to length (default: the axis "
        "dim, 2 (dim - 1) for an inverse one-sided one); the result [..., 2] (length // 2 + 1 "
        "bins if onesided), or the real [..., length, ..., 1] of an inverse one-sided DFT "
        "(irfft). Computed in complex64 (complex128 for float64), as numpy's FFT of the input",
    ),
)
