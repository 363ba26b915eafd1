"""Small models of eight families, written node by node the way PyTorch's TorchScript exporter
writes them at opset 17, for ``benchmarks/onnx_models.py`` (issue 27, "Targets").

No torch is needed (CI builds these with ``onnx`` alone), so each builder repeats what the
exporter does with the PyTorch module it names in its docstring:

- weights are initializers named after the module (``layer1.0.conv1.weight``); a Linear on a
  3-d input is ``MatMul`` by a pre-transposed initializer (``onnx::MatMul_N``) then ``Add`` of
  the bias, on a 2-d input a ``Gemm`` with ``transB=1``; eval-mode BatchNorm is folded into the
  convolution before it (a ``Conv`` with a bias, no ``BatchNormalization``);
- scalars and shape constants are ``Constant`` nodes, not initializers;
- every ``x.size(i)`` is its own ``Shape -> Gather``, so a head split is
  ``Shape -> Gather -> Unsqueeze -> Concat(with constants) -> Reshape``;
- equal initializers are stored once and the later users read them through ``Identity``
  (the exporter's deduplication: LayerNorm weights of freshly initialised layers);
- node and value names follow the module scopes (``/encoder/layer.0/attention/MatMul`` with
  output ``/encoder/layer.0/attention/MatMul_output_0``);
- the varying axes are ``dim_param`` names, as ``dynamic_axes`` writes them.

``FAMILIES`` maps each name to its builder and to a function giving random valid inputs for a
named size (``small``, ``mid``, ``large``).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
SIZES = ("small", "mid", "large")
FLOAT_MIN = float(np.finfo(np.float32).min)  # torch.finfo(torch.float32).min, as HF masks use
INT64_MAX = 2**63 - 1  # the end PyTorch writes for an open slice (``x[..., d:]``)


class _Graph:
    """Collects nodes and initializers and names them as the TorchScript exporter does."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self._names: Counter[str] = Counter()
        self._anon = 0
        self._dedup: dict[bytes, str] = {}

    def _node_name(self, scope: str, op: str) -> str:
        key = f"{scope}/{op}"
        count = self._names[key]
        self._names[key] += 1
        return key if count == 0 else f"{key}_{count}"

    def ops(
        self, op: str, inputs: Sequence[str], scope: str = "", n: int = 1, **attrs: object
    ) -> list[str]:
        name = self._node_name(scope, op)
        outputs = [f"{name}_output_{i}" for i in range(n)]
        node = helper.make_node(op, list(inputs), outputs, name=name)
        node.attribute.extend(helper.make_attribute(k, v) for k, v in sorted(attrs.items()))
        self.nodes.append(node)
        return outputs

    def op(self, op: str, inputs: Sequence[str], scope: str = "", **attrs: object) -> str:
        return self.ops(op, inputs, scope, 1, **attrs)[0]

    def const(self, value: object, dtype: type = np.int64, scope: str = "") -> str:
        """A ``Constant`` node (how the exporter writes scalars and shape pieces)."""
        name = self._node_name(scope, "Constant")
        out = f"{name}_output_0"
        tensor = numpy_helper.from_array(np.array(value, dtype=dtype), "")
        self.nodes.append(helper.make_node("Constant", [], [out], name=name, value=tensor))
        return out

    def init(self, name: str, array: np.ndarray) -> str:
        """An initializer; one equal to an earlier one is read through ``Identity``."""
        key = array.dtype.str.encode() + str(array.shape).encode() + array.tobytes()
        if key in self._dedup:
            return self.op("Identity", [self._dedup[key]])
        self._dedup[key] = name
        self.inits.append(numpy_helper.from_array(array, name))
        return name

    def anon(self, op: str) -> str:
        """A constant-folded weight's name (``onnx::MatMul_123``)."""
        self._anon += 1
        return f"onnx::{op}_{100 + self._anon}"

    def randn(self, *shape: int, scale: float) -> np.ndarray:
        return (self.rng.standard_normal(shape) * scale).astype(np.float32)

    def model(
        self,
        name: str,
        inputs: Sequence[onnx.ValueInfoProto],
        outputs: Sequence[onnx.ValueInfoProto],
    ) -> onnx.ModelProto:
        graph = helper.make_graph(self.nodes, name, list(inputs), list(outputs), self.inits)
        model = helper.make_model(
            graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="pytorch"
        )
        model.producer_version = "2.1.0"  # the last TorchScript-exporter default of this style
        model.ir_version = 8
        return model

    # --- layers, as the exporter spells them --------------------------------------------

    def linear(self, x: str, fan_in: int, fan_out: int, scope: str, bias: bool = True) -> str:
        """``nn.Linear`` on an input of rank 3 or more: MatMul by the transposed weight, Add."""
        w = self.init(self.anon("MatMul"), self.randn(fan_in, fan_out, scale=fan_in**-0.5))
        y = self.op("MatMul", [x, w], scope)
        if not bias:
            return y
        b = self.init(f"{scope.strip('/').replace('/', '.')}.bias", self.randn(fan_out, scale=0.02))
        return self.op("Add", [b, y], scope)

    def gemm(self, x: str, fan_in: int, fan_out: int, scope: str) -> str:
        """``nn.Linear`` on a 2-d input: one Gemm with the weight as stored (out, in)."""
        prefix = scope.strip("/").replace("/", ".")
        w = self.init(f"{prefix}.weight", self.randn(fan_out, fan_in, scale=fan_in**-0.5))
        b = self.init(f"{prefix}.bias", self.randn(fan_out, scale=0.02))
        return self.op("Gemm", [x, w, b], scope, alpha=1.0, beta=1.0, transB=1)

    def conv(
        self,
        x: str,
        cin: int,
        cout: int,
        kernel: int | tuple[int, ...],
        scope: str,
        stride: int = 1,
        pad: int = 0,
        groups: int = 1,
        bias: bool = True,
        folded: bool = True,
        dims: int = 2,
    ) -> str:
        """``nn.Conv{1,2}d``; ``folded``: an eval-mode BatchNorm after it, folded into the
        weight and bias (the exporter names the folded tensors ``onnx::Conv_N``)."""
        ks = (kernel,) * dims if isinstance(kernel, int) else kernel
        fan_in = cin // groups * math.prod(ks)
        weight = self.randn(cout, cin // groups, *ks, scale=math.sqrt(2.0 / fan_in))
        prefix = scope.strip("/").replace("/", ".")
        inputs = [self.init(self.anon("Conv") if folded else f"{prefix}.weight", weight)]
        if bias or folded:
            b = self.randn(cout, scale=0.05)
            inputs.append(self.init(self.anon("Conv") if folded else f"{prefix}.bias", b))
        return self.op(
            "Conv",
            [x, *inputs],
            scope,
            dilations=[1] * dims,
            group=groups,
            kernel_shape=list(ks),
            pads=[pad] * (2 * dims),
            strides=[stride] * dims,
        )

    def layer_norm(self, x: str, dim: int, scope: str, eps: float = 1e-5) -> str:
        prefix = scope.strip("/").replace("/", ".")
        gamma = self.init(f"{prefix}.weight", np.ones(dim, np.float32))
        beta = self.init(f"{prefix}.bias", np.zeros(dim, np.float32))
        return self.op("LayerNormalization", [x, gamma, beta], scope, axis=-1, epsilon=eps)

    def gelu(self, x: str, scope: str) -> str:
        """``nn.GELU()`` (exact): ``x * 0.5 * (1 + erf(x / sqrt(2)))`` as opset 17 spells it."""
        d = self.op("Div", [x, self.const(1.4142135381698608, np.float32, scope)], scope)
        e = self.op("Erf", [d], scope)
        a = self.op("Add", [e, self.const(1.0, np.float32, scope)], scope)
        m = self.op("Mul", [x, a], scope)
        return self.op("Mul", [m, self.const(0.5, np.float32, scope)], scope)

    def gelu_new(self, x: str, scope: str) -> str:
        """transformers' ``NewGELUActivation`` (GPT-2's tanh approximation)."""
        half = self.op("Mul", [self.const(0.5, np.float32, scope), x], scope)
        cube = self.op("Pow", [x, self.const(3.0, np.float32, scope)], scope)
        c = self.op("Mul", [self.const(0.044715, np.float32, scope), cube], scope)
        inner = self.op("Add", [x, c], scope)
        scaled = self.op(
            "Mul", [self.const(math.sqrt(2.0 / math.pi), np.float32, scope), inner], scope
        )
        t = self.op("Tanh", [scaled], scope)
        one = self.op("Add", [self.const(1.0, np.float32, scope), t], scope)
        return self.op("Mul", [half, one], scope)

    def size(self, x: str, axis: int, scope: str) -> str:
        """``x.size(axis)`` as a 1-element tensor ready for a Concat (Shape, Gather, Unsqueeze)."""
        shape = self.op("Shape", [x], scope)
        dim = self.op("Gather", [shape, self.const(axis, np.int64, scope)], scope, axis=0)
        return self.op("Unsqueeze", [dim, self.const([0], np.int64, scope)], scope)

    def size_scalar(self, x: str, axis: int, scope: str) -> str:
        shape = self.op("Shape", [x], scope)
        return self.op("Gather", [shape, self.const(axis, np.int64, scope)], scope, axis=0)

    def split_heads(self, x: str, heads: int, dh: int, scope: str) -> str:
        """``x.view(b, s, heads, dh).transpose(1, 2)`` with b and s read from ``x``."""
        shape = self.op(
            "Concat",
            [
                self.size(x, 0, scope),
                self.size(x, 1, scope),
                self.const([heads], np.int64, scope),
                self.const([dh], np.int64, scope),
            ],
            scope,
            axis=0,
        )
        r = self.op("Reshape", [x, shape], scope)
        return self.op("Transpose", [r], scope, perm=[0, 2, 1, 3])

    def merge_heads(self, x: str, hidden: int, scope: str) -> str:
        """``x.transpose(1, 2).reshape(b, s, hidden)`` with b and s read from the result."""
        t = self.op("Transpose", [x], scope, perm=[0, 2, 1, 3])
        shape = self.op(
            "Concat",
            [self.size(t, 0, scope), self.size(t, 1, scope), self.const([hidden], np.int64, scope)],
            scope,
            axis=0,
        )
        return self.op("Reshape", [t, shape], scope)


def _io(name: str, elem: int, dims: Sequence[int | str]) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, list(dims))


# --- CNNs -----------------------------------------------------------------------------------


def resnet18(seed: int = 0) -> onnx.ModelProto:
    """torchvision's ``resnet18`` at a quarter of its width (16/32/64/128 channels), exported in
    eval mode: every BatchNorm folded into the Conv before it; stem 7x7/2 pad 3 and MaxPool
    3x3/2 pad 1; two BasicBlocks a stage (3x3 convs, a 1x1/2 downsample where the stage
    strides), the residual ``Add`` then ``Relu``; ``AdaptiveAvgPool2d(1)`` as
    GlobalAveragePool, ``torch.flatten`` as Flatten, the classifier as Gemm."""
    g = _Graph(seed)
    x = g.conv("input", 3, 16, 7, "/conv1", stride=2, pad=3)
    x = g.op("Relu", [x], "/relu")
    x = g.op(
        "MaxPool", [x], "/maxpool", ceil_mode=0, kernel_shape=[3, 3], pads=[1] * 4, strides=[2, 2]
    )
    cin = 16
    for stage, cout in enumerate((16, 32, 64, 128), start=1):
        for block in range(2):
            stride = 2 if stage > 1 and block == 0 else 1
            s = f"/layer{stage}/layer{stage}.{block}"
            y = g.conv(x, cin, cout, 3, f"{s}/conv1", stride=stride, pad=1)
            y = g.op("Relu", [y], f"{s}/relu")
            y = g.conv(y, cout, cout, 3, f"{s}/conv2", pad=1)
            identity = x
            if stride != 1 or cin != cout:
                identity = g.conv(x, cin, cout, 1, f"{s}/downsample/downsample.0", stride=stride)
            y = g.op("Add", [y, identity], s)
            x = g.op("Relu", [y], f"{s}/relu_1")
            cin = cout
    x = g.op("GlobalAveragePool", [x], "/avgpool")
    x = g.op("Flatten", [x], "", axis=1)
    g.nodes.append(
        helper.make_node(
            "Gemm",
            [
                x,
                g.init("fc.weight", g.randn(1000, 128, scale=128**-0.5)),
                g.init("fc.bias", g.randn(1000, scale=0.02)),
            ],
            ["output"],
            name="/fc/Gemm",
            alpha=1.0,
            beta=1.0,
            transB=1,
        )
    )
    return g.model(
        "main_graph",
        [_io("input", TensorProto.FLOAT, ["batch", 3, "height", "width"])],
        [_io("output", TensorProto.FLOAT, ["batch", 1000])],
    )


def _divisible(v: float, divisor: int = 8) -> int:
    """torchvision's ``_make_divisible``: channel counts rounded to multiples of 8."""
    new = max(divisor, int(v + divisor / 2) // divisor * divisor)
    return new + divisor if new < 0.9 * v else new


def mobilenetv3_small(seed: int = 0) -> onnx.ModelProto:
    """torchvision's ``mobilenet_v3_small(width_mult=0.5)`` in eval mode: folded BatchNorms,
    ``nn.Hardswish`` as HardSwish, inverted residuals (1x1 expand, depthwise kxk with
    ``group=C``, squeeze-excite, 1x1 project, ``Add`` when the shape is kept); the
    squeeze-excite block is ``adaptive_avg_pool2d(1)`` (GlobalAveragePool) -> 1x1 Conv -> Relu
    -> 1x1 Conv -> ``hardsigmoid`` (HardSigmoid alpha 1/6) -> Mul; the head is
    GlobalAveragePool, Flatten, Gemm, HardSwish, Gemm (Dropout is gone in eval)."""
    g = _Graph(seed)
    # (input, kernel, expanded, output, squeeze-excite, hard-swish, stride) of the full model
    setting = [
        (16, 3, 16, 16, True, False, 2),
        (16, 3, 72, 24, False, False, 2),
        (24, 3, 88, 24, False, False, 1),
        (24, 5, 96, 40, True, True, 2),
        (40, 5, 240, 40, True, True, 1),
        (40, 5, 240, 40, True, True, 1),
        (40, 5, 120, 48, True, True, 1),
        (48, 5, 144, 48, True, True, 1),
        (48, 5, 288, 96, True, True, 2),
        (96, 5, 576, 96, True, True, 1),
        (96, 5, 576, 96, True, True, 1),
    ]
    width = 0.5
    stem = _divisible(16 * width)
    x = g.conv("input", 3, stem, 3, "/features/features.0/features.0.0", stride=2, pad=1)
    x = g.op("HardSwish", [x], "/features/features.0/features.0.2")
    for i, (cin, k, exp, cout, se, hs, stride) in enumerate(setting, start=1):
        cin, exp, cout = _divisible(cin * width), _divisible(exp * width), _divisible(cout * width)
        s = f"/features/features.{i}/block"

        def act(v: str, scope: str, hs: bool = hs) -> str:
            return g.op("HardSwish" if hs else "Relu", [v], scope)

        y = x
        j = 0
        if exp != cin:
            y = act(g.conv(y, cin, exp, 1, f"{s}/block.0/block.0.0"), f"{s}/block.0/block.0.2")
            j = 1
        y = g.conv(
            y, exp, exp, k, f"{s}/block.{j}/block.{j}.0", stride=stride, pad=k // 2, groups=exp
        )
        y = act(y, f"{s}/block.{j}/block.{j}.2")
        if se:
            j += 1
            sq = _divisible(exp // 4)
            se_scope = f"{s}/block.{j}"
            p = g.op("GlobalAveragePool", [y], se_scope)
            p = g.conv(p, exp, sq, 1, f"{se_scope}/fc1", folded=False)
            p = g.op("Relu", [p], f"{se_scope}/relu")
            p = g.conv(p, sq, exp, 1, f"{se_scope}/fc2", folded=False)
            p = g.op("HardSigmoid", [p], se_scope, alpha=0.1666666716337204, beta=0.5)
            y = g.op("Mul", [p, y], se_scope)
        j += 1
        y = g.conv(y, exp, cout, 1, f"{s}/block.{j}/block.{j}.0")
        x = g.op("Add", [y, x], f"/features/features.{i}") if stride == 1 and cin == cout else y
    last_in = _divisible(96 * width)
    last = 6 * last_in
    x = g.conv(x, last_in, last, 1, "/features/features.12/features.12.0")
    x = g.op("HardSwish", [x], "/features/features.12/features.12.2")
    x = g.op("GlobalAveragePool", [x], "/avgpool")
    x = g.op("Flatten", [x], "", axis=1)
    hidden = _divisible(1024 * width)
    x = g.op(
        "HardSwish",
        [g.gemm(x, last, hidden, "/classifier/classifier.0")],
        "/classifier/classifier.1",
    )
    prefix = "classifier.3"
    g.nodes.append(
        helper.make_node(
            "Gemm",
            [
                x,
                g.init(f"{prefix}.weight", g.randn(1000, hidden, scale=hidden**-0.5)),
                g.init(f"{prefix}.bias", g.randn(1000, scale=0.02)),
            ],
            ["output"],
            name="/classifier/classifier.3/Gemm",
            alpha=1.0,
            beta=1.0,
            transB=1,
        )
    )
    return g.model(
        "main_graph",
        [_io("input", TensorProto.FLOAT, ["batch", 3, "height", "width"])],
        [_io("output", TensorProto.FLOAT, ["batch", 1000])],
    )


# --- transformer pieces ---------------------------------------------------------------------

HIDDEN, HEADS, FFN = 128, 4, 512


def _bart_attention(g: _Graph, x: str, scope: str, hidden: int = HIDDEN, heads: int = HEADS) -> str:
    """transformers' BART-style attention (``Wav2Vec2Attention``): q scaled by ``dh**-0.5``,
    heads folded into the batch (``view(b * heads, -1, dh)``, the product computed from
    ``Shape``) and two ``bmm``; no mask."""
    dh = hidden // heads
    q = g.op(
        "Mul",
        [g.linear(x, hidden, hidden, f"{scope}/q_proj"), g.const(dh**-0.5, np.float32, scope)],
        scope,
    )
    k = g.linear(x, hidden, hidden, f"{scope}/k_proj")
    v = g.linear(x, hidden, hidden, f"{scope}/v_proj")
    bsz = g.size_scalar(x, 0, scope)
    bh = g.op("Mul", [bsz, g.const(heads, np.int64, scope)], scope)
    proj = g.op(
        "Concat",
        [
            g.op("Unsqueeze", [bh, g.const([0], np.int64, scope)], scope),
            g.const([-1], np.int64, scope),
            g.const([dh], np.int64, scope),
        ],
        scope,
        axis=0,
    )

    def fold(t: str) -> str:
        return g.op("Reshape", [g.split_heads(t, heads, dh, scope), proj], scope)

    qf, kf, vf = fold(q), fold(k), fold(v)
    kt = g.op("Transpose", [kf], scope, perm=[0, 2, 1])
    probs = g.op("Softmax", [g.op("MatMul", [qf, kt], scope)], scope, axis=-1)
    ctx = g.op("MatMul", [probs, vf], scope)
    unfold = g.op(
        "Concat",
        [
            g.size(x, 0, scope),
            g.const([heads], np.int64, scope),
            g.const([-1], np.int64, scope),
            g.const([dh], np.int64, scope),
        ],
        scope,
        axis=0,
    )
    ctx = g.merge_heads(g.op("Reshape", [ctx, unfold], scope), hidden, scope)
    return g.linear(ctx, hidden, hidden, f"{scope}/out_proj")


def speech_frontend(seed: int = 0) -> onnx.ModelProto:
    """transformers' ``Wav2Vec2Model`` (base layout, narrow): the feature encoder
    ``input_values[:, None]`` (Unsqueeze) -> Conv1d(1, 64, 10, stride 5, no bias) ->
    ``GroupNorm(64, 64)`` (exported as Reshape -> InstanceNormalization -> Reshape -> Mul ->
    Add) -> GELU, four Conv1d(64, 64, 3, stride 2) + GELU and one Conv1d(64, 64, 2, stride 2) +
    GELU; ``transpose(1, 2)``, the feature projection (LayerNorm, Linear 64 -> 128), the
    encoder's LayerNorm and two post-norm encoder layers (BART-style attention, GELU MLP)."""
    g = _Graph(seed)
    c = 64
    x = g.op("Unsqueeze", ["input_values", g.const([1], np.int64, "")], "")
    fe = "/feature_extractor/conv_layers.0"
    x = g.conv(x, 1, c, 10, f"{fe}/conv", stride=5, bias=False, folded=False, dims=1)
    # GroupNorm(num_groups=C): per channel over time, as the exporter writes group_norm
    r = g.op("Reshape", [x, g.const([0, c, -1], np.int64, f"{fe}/layer_norm")], f"{fe}/layer_norm")
    n = g.op(
        "InstanceNormalization",
        [
            r,
            g.const(np.ones(c), np.float32, f"{fe}/layer_norm"),
            g.const(np.zeros(c), np.float32, f"{fe}/layer_norm"),
        ],
        f"{fe}/layer_norm",
        epsilon=1e-5,
    )
    n = g.op("Reshape", [n, g.op("Shape", [x], f"{fe}/layer_norm")], f"{fe}/layer_norm")
    gamma = g.init("feature_extractor.conv_layers.0.layer_norm.weight", np.ones((c, 1), np.float32))
    beta = g.init("feature_extractor.conv_layers.0.layer_norm.bias", np.zeros((c, 1), np.float32))
    n = g.op("Add", [g.op("Mul", [n, gamma], f"{fe}/layer_norm"), beta], f"{fe}/layer_norm")
    x = g.gelu(n, f"{fe}/activation")
    for i, (k, stride) in enumerate([(3, 2)] * 4 + [(2, 2)], start=1):
        scope = f"/feature_extractor/conv_layers.{i}"
        x = g.conv(x, c, c, k, f"{scope}/conv", stride=stride, bias=False, folded=False, dims=1)
        x = g.gelu(x, f"{scope}/activation")
    x = g.op("Transpose", [x], "", perm=[0, 2, 1])
    x = g.layer_norm(x, c, "/feature_projection/layer_norm")
    x = g.linear(x, c, HIDDEN, "/feature_projection/projection")
    x = g.layer_norm(x, HIDDEN, "/encoder/layer_norm")
    for layer in range(2):
        s = f"/encoder/layers.{layer}"
        x = g.op("Add", [x, _bart_attention(g, x, f"{s}/attention")], s)
        x = g.layer_norm(x, HIDDEN, f"{s}/layer_norm")
        h = g.linear(x, HIDDEN, FFN, f"{s}/feed_forward/intermediate_dense")
        h = g.gelu(h, f"{s}/feed_forward/intermediate_act_fn")
        h = g.linear(h, FFN, HIDDEN, f"{s}/feed_forward/output_dense")
        x = g.op("Add", [x, h], s)
        x = g.layer_norm(x, HIDDEN, f"{s}/final_layer_norm")
    g.nodes.append(helper.make_node("Identity", [x], ["last_hidden_state"], name="/Identity_out"))
    return g.model(
        "main_graph",
        [_io("input_values", TensorProto.FLOAT, ["batch", "samples"])],
        [_io("last_hidden_state", TensorProto.FLOAT, ["batch", "frames", HIDDEN])],
    )


VOCAB = 1000


def bert_encoder(seed: int = 0, layers: int = 2) -> onnx.ModelProto:
    """transformers' ``BertModel`` (hidden 128, 4 heads, FFN 512): word embeddings (Gather),
    position ids ``arange(seq)`` (Shape -> Gather -> Range), token types ``zeros_like``
    (Shape -> ConstantOfShape), LayerNorm; the extended attention mask
    ``(1.0 - mask[:, None, None, :].float()) * finfo.min`` (Unsqueeze, Cast, Sub, Mul);
    ``BertSelfAttention`` (head split/merge via Shape/Gather/Concat/Reshape/Transpose,
    ``q @ k^T / sqrt(dh)`` with a Div by a constant, Add mask, Softmax, ``@ v``), exact GELU,
    post-norm residuals; the output is ``last_hidden_state``."""
    g = _Graph(seed)
    dh = HIDDEN // HEADS
    e = "/embeddings"
    words = g.op(
        "Gather",
        [
            g.init("embeddings.word_embeddings.weight", g.randn(VOCAB, HIDDEN, scale=0.5)),
            "input_ids",
        ],
        f"{e}/word_embeddings",
    )
    seq = g.size_scalar("input_ids", 1, e)
    pos = g.op("Range", [g.const(0, np.int64, e), seq, g.const(1, np.int64, e)], e)
    pos = g.op("Unsqueeze", [pos, g.const([0], np.int64, e)], e)
    pos = g.op(
        "Gather",
        [g.init("embeddings.position_embeddings.weight", g.randn(512, HIDDEN, scale=0.1)), pos],
        f"{e}/position_embeddings",
    )
    types = g.op(
        "ConstantOfShape",
        [g.op("Shape", ["input_ids"], e)],
        e,
        value=numpy_helper.from_array(np.zeros(1, np.int64), ""),
    )
    types = g.op(
        "Gather",
        [g.init("embeddings.token_type_embeddings.weight", g.randn(2, HIDDEN, scale=0.1)), types],
        f"{e}/token_type_embeddings",
    )
    x = g.op("Add", [g.op("Add", [words, types], e), pos], e)
    x = g.layer_norm(x, HIDDEN, f"{e}/LayerNorm", eps=1e-12)
    m = g.op("Unsqueeze", ["attention_mask", g.const([1], np.int64, "")], "")
    m = g.op("Unsqueeze", [m, g.const([2], np.int64, "")], "")
    m = g.op("Cast", [m], "", to=TensorProto.FLOAT)
    m = g.op("Sub", [g.const(1.0, np.float32, ""), m], "")
    mask = g.op("Mul", [m, g.const(FLOAT_MIN, np.float32, "")], "")
    for layer in range(layers):
        s = f"/encoder/layer.{layer}"
        a = f"{s}/attention/self"
        q = g.split_heads(g.linear(x, HIDDEN, HIDDEN, f"{a}/query"), HEADS, dh, a)
        k = g.split_heads(g.linear(x, HIDDEN, HIDDEN, f"{a}/key"), HEADS, dh, a)
        v = g.split_heads(g.linear(x, HIDDEN, HIDDEN, f"{a}/value"), HEADS, dh, a)
        scores = g.op("MatMul", [q, g.op("Transpose", [k], a, perm=[0, 1, 3, 2])], a)
        scores = g.op("Div", [scores, g.const(math.sqrt(dh), np.float32, a)], a)
        scores = g.op("Add", [scores, mask], a)
        probs = g.op("Softmax", [scores], a, axis=-1)
        ctx = g.merge_heads(g.op("MatMul", [probs, v], a), HIDDEN, a)
        o = g.linear(ctx, HIDDEN, HIDDEN, f"{s}/attention/output/dense")
        x = g.layer_norm(
            g.op("Add", [o, x], f"{s}/attention/output"),
            HIDDEN,
            f"{s}/attention/output/LayerNorm",
            eps=1e-12,
        )
        h = g.gelu(
            g.linear(x, HIDDEN, FFN, f"{s}/intermediate/dense"),
            f"{s}/intermediate/intermediate_act_fn",
        )
        h = g.linear(h, FFN, HIDDEN, f"{s}/output/dense")
        x = g.layer_norm(
            g.op("Add", [h, x], f"{s}/output"), HIDDEN, f"{s}/output/LayerNorm", eps=1e-12
        )
    g.nodes.append(helper.make_node("Identity", [x], ["last_hidden_state"], name="/Identity_out"))
    return g.model(
        "main_graph",
        [
            _io("input_ids", TensorProto.INT64, ["batch", "seq"]),
            _io("attention_mask", TensorProto.INT64, ["batch", "seq"]),
        ],
        [_io("last_hidden_state", TensorProto.FLOAT, ["batch", "seq", HIDDEN])],
    )


def _cache_io(
    layers: int, kv_heads: int, dh: int
) -> tuple[list[onnx.ValueInfoProto], list[onnx.ValueInfoProto]]:
    past = []
    present = []
    for i in range(layers):
        for t in ("key", "value"):
            past.append(
                _io(
                    f"past_key_values.{i}.{t}",
                    TensorProto.FLOAT,
                    ["batch", kv_heads, "past_seq", dh],
                )
            )
            present.append(
                _io(f"present.{i}.{t}", TensorProto.FLOAT, ["batch", kv_heads, "total_seq", dh])
            )
    return past, present


def _decoder_inputs() -> list[onnx.ValueInfoProto]:
    return [
        _io("input_ids", TensorProto.INT64, ["batch", "seq"]),
        _io("attention_mask", TensorProto.INT64, ["batch", "total_seq"]),
        _io("position_ids", TensorProto.INT64, ["batch", "seq"]),
    ]


def _output(g: _Graph, value: str, name: str) -> None:
    g.nodes.append(helper.make_node("Identity", [value], [name], name=f"/Identity_{name}"))


def gpt2_decoder_step(seed: int = 0, layers: int = 2) -> onnx.ModelProto:
    """transformers' ``GPT2LMHeadModel`` (hidden 128, 4 heads, vocab 1000) called with
    ``past_key_values``: token (Gather) and position (Gather of ``position_ids``)
    embeddings; ``Conv1D`` layers as ``addmm`` on ``x.view(-1, in)`` (Reshape, Gemm, Reshape
    back to ``x.size()[:-1] + (out,)``); ``c_attn`` split in three (Split); the cache grown by
    ``torch.cat((past, k), dim=-2)``; the causal mask from shapes (key positions
    ``Range(0, total)``, query positions ``Range(total - seq, total)``, ``LessOrEqual``) applied
    with ``Where(causal, scores, finfo.min)``, then the padding mask ``(1 - m) * finfo.min``
    added; ``gelu_new`` (tanh); tied LM head as MatMul."""
    g = _Graph(seed)
    dh = HIDDEN // HEADS
    wte = g.randn(VOCAB, HIDDEN, scale=0.5)
    x = g.op("Gather", [g.init("transformer.wte.weight", wte), "input_ids"], "/transformer/wte")
    pos = g.op(
        "Gather",
        [g.init("transformer.wpe.weight", g.randn(1024, HIDDEN, scale=0.1)), "position_ids"],
        "/transformer/wpe",
    )
    x = g.op("Add", [x, pos], "/transformer")
    m = g.op(
        "Unsqueeze", ["attention_mask", g.const([1, 2], np.int64, "/transformer")], "/transformer"
    )
    m = g.op("Cast", [m], "/transformer", to=TensorProto.FLOAT)
    m = g.op("Sub", [g.const(1.0, np.float32, "/transformer"), m], "/transformer")
    pad_mask = g.op("Mul", [m, g.const(FLOAT_MIN, np.float32, "/transformer")], "/transformer")

    def conv1d(t: str, fan_in: int, fan_out: int, scope: str) -> str:
        prefix = "transformer" + scope.replace("/transformer", "").replace("/", ".")
        last = g.const([fan_out], np.int64, scope)
        out_shape = g.op(
            "Concat",
            [
                g.op(
                    "Slice",
                    [
                        g.op("Shape", [t], scope),
                        g.const([0], np.int64, scope),
                        g.const([-1], np.int64, scope),
                    ],
                    scope,
                ),
                last,
            ],
            scope,
            axis=0,
        )
        flat = g.op("Reshape", [t, g.const([-1, fan_in], np.int64, scope)], scope)
        w = g.init(f"{prefix}.weight", g.randn(fan_in, fan_out, scale=fan_in**-0.5))
        b = g.init(f"{prefix}.bias", g.randn(fan_out, scale=0.02))
        y = g.op("Gemm", [flat, w, b], scope, alpha=1.0, beta=1.0)
        return g.op("Reshape", [y, out_shape], scope)

    present = []
    for layer in range(layers):
        s = f"/transformer/h.{layer}"
        a = f"{s}/attn"
        h = g.layer_norm(x, HIDDEN, f"{s}/ln_1")
        qkv = conv1d(h, HIDDEN, 3 * HIDDEN, f"{a}/c_attn")
        q, k, v = g.ops("Split", [qkv, g.const([HIDDEN] * 3, np.int64, a)], a, 3, axis=2)
        q, k, v = (g.split_heads(t, HEADS, dh, a) for t in (q, k, v))
        k = g.op("Concat", [f"past_key_values.{layer}.key", k], a, axis=-2)
        v = g.op("Concat", [f"past_key_values.{layer}.value", v], a, axis=-2)
        present += [k, v]
        scores = g.op("MatMul", [q, g.op("Transpose", [k], a, perm=[0, 1, 3, 2])], a)
        scores = g.op("Div", [scores, g.const(math.sqrt(dh), np.float32, a)], a)
        q_len = g.size_scalar(q, 2, a)
        k_len = g.size_scalar(k, 2, a)
        kpos = g.op("Range", [g.const(0, np.int64, a), k_len, g.const(1, np.int64, a)], a)
        qpos = g.op("Range", [g.op("Sub", [k_len, q_len], a), k_len, g.const(1, np.int64, a)], a)
        qpos = g.op("Unsqueeze", [qpos, g.const([1], np.int64, a)], a)
        causal = g.op("LessOrEqual", [kpos, qpos], a)
        scores = g.op("Where", [causal, scores, g.const(FLOAT_MIN, np.float32, a)], a)
        scores = g.op("Add", [scores, pad_mask], a)
        probs = g.op("Softmax", [scores], a, axis=-1)
        ctx = g.merge_heads(g.op("MatMul", [probs, v], a), HIDDEN, a)
        x = g.op("Add", [conv1d(ctx, HIDDEN, HIDDEN, f"{a}/c_proj"), x], s)
        h = g.layer_norm(x, HIDDEN, f"{s}/ln_2")
        h = g.gelu_new(conv1d(h, HIDDEN, 4 * HIDDEN, f"{s}/mlp/c_fc"), f"{s}/mlp/act")
        x = g.op("Add", [x, conv1d(h, 4 * HIDDEN, HIDDEN, f"{s}/mlp/c_proj")], s)
    x = g.layer_norm(x, HIDDEN, "/transformer/ln_f")
    logits = g.op("MatMul", [x, g.init(g.anon("MatMul"), np.ascontiguousarray(wte.T))], "/lm_head")
    _output(g, logits, "logits")
    for i, t in enumerate(present):
        _output(g, t, f"present.{i // 2}.{('key', 'value')[i % 2]}")
    past, present_io = _cache_io(layers, HEADS, dh)
    return g.model(
        "main_graph",
        _decoder_inputs() + past,
        [_io("logits", TensorProto.FLOAT, ["batch", "seq", VOCAB]), *present_io],
    )


KV_HEADS, LLAMA_FFN = 2, 344


def llama_decoder_step(seed: int = 0, layers: int = 2) -> onnx.ModelProto:
    """transformers' ``LlamaForCausalLM`` (hidden 128, 4 query heads, 2 kv heads, FFN 344)
    called with ``past_key_values``: ``LlamaRMSNorm`` (Pow 2, ReduceMean, Add eps, Sqrt, Div
    1 by it, Mul, Mul weight); ``LlamaRotaryEmbedding`` (``inv_freq[None, :, None]`` expanded
    to the batch, MatMul with ``position_ids[:, None, :].float()``, Transpose, Concat with
    itself, Cos, Sin) and ``rotate_half`` (Slice, Neg, Concat); the 4-d causal mask of
    ``_prepare_4d_causal_attention_mask`` (``full(finfo.min)`` as ConstantOfShape, ``arange``
    and ``<`` for the triangle, zeros for the past concatenated in front, Expand to the batch,
    the padding mask folded in with ``masked_fill`` = Where); ``repeat_kv`` (Unsqueeze,
    Expand, Reshape); SiLU (Sigmoid, Mul) MLP ``down(silu(gate(x)) * up(x))``."""
    g = _Graph(seed)
    dh = HIDDEN // HEADS
    eps = 1e-6
    x = g.op(
        "Gather",
        [g.init("model.embed_tokens.weight", g.randn(VOCAB, HIDDEN, scale=0.5)), "input_ids"],
        "/model/embed_tokens",
    )

    # the 4-d mask, once for all layers (as LlamaModel builds it)
    s = "/model"
    tgt = g.size("input_ids", 1, s)
    past_len = g.size("past_key_values.0.key", 2, s)
    square = g.op("Concat", [tgt, tgt], s, axis=0)
    full = g.op(
        "ConstantOfShape",
        [square],
        s,
        value=numpy_helper.from_array(np.array([FLOAT_MIN], np.float32), ""),
    )
    cond = g.op(
        "Range",
        [g.const(0, np.int64, s), g.size_scalar("input_ids", 1, s), g.const(1, np.int64, s)],
        s,
    )
    below = g.op(
        "Reshape",
        [
            g.op("Add", [cond, g.const(1, np.int64, s)], s),
            g.op("Concat", [tgt, g.const([1], np.int64, s)], s, axis=0),
        ],
        s,
    )
    tri = g.op("Where", [g.op("Less", [cond, below], s), g.const(0.0, np.float32, s), full], s)
    zeros = g.op(
        "ConstantOfShape",
        [g.op("Concat", [tgt, past_len], s, axis=0)],
        s,
        value=numpy_helper.from_array(np.zeros(1, np.float32), ""),
    )
    causal = g.op("Concat", [zeros, tri], s, axis=-1)
    causal = g.op("Unsqueeze", [causal, g.const([0, 1], np.int64, s)], s)
    batch = g.size("input_ids", 0, s)
    total = g.size("attention_mask", 1, s)
    shape4 = g.op("Concat", [batch, g.const([1], np.int64, s), tgt, total], s, axis=0)
    causal = g.op("Expand", [causal, shape4], s)
    pad = g.op("Unsqueeze", ["attention_mask", g.const([1, 2], np.int64, s)], s)
    pad = g.op("Cast", [g.op("Expand", [pad, shape4], s)], s, to=TensorProto.FLOAT)
    inverted = g.op("Sub", [g.const(1.0, np.float32, s), pad], s)
    inverted = g.op("Cast", [inverted], s, to=TensorProto.BOOL)
    mask = g.op("Where", [inverted, g.const(FLOAT_MIN, np.float32, s), causal], s)

    # rotary tables, once (LlamaRotaryEmbedding)
    r = "/model/rotary_emb"
    inv_freq = (1.0 / (10000.0 ** (np.arange(0, dh, 2, dtype=np.float32) / dh))).astype(np.float32)
    inv = g.op(
        "Unsqueeze",
        [g.init("model.rotary_emb.inv_freq", inv_freq), g.const([0, 2], np.int64, r)],
        r,
    )
    inv = g.op("Cast", [inv], r, to=TensorProto.FLOAT)
    # ``expand(b, -1, 1)``: the exporter turns the -1 ("keep") into a 1 with Equal/Where
    sizes = g.op("Concat", [g.size("position_ids", 0, r), g.const([-1, 1], np.int64, r)], r, axis=0)
    ones = g.op(
        "ConstantOfShape",
        [g.op("Shape", [sizes], r)],
        r,
        value=numpy_helper.from_array(np.ones(1, np.int64), ""),
    )
    keep = g.op("Equal", [sizes, g.const(-1, np.int64, r)], r)
    inv = g.op("Expand", [inv, g.op("Where", [keep, ones, sizes], r)], r)
    posf = g.op(
        "Cast",
        [g.op("Unsqueeze", ["position_ids", g.const([1], np.int64, r)], r)],
        r,
        to=TensorProto.FLOAT,
    )
    freqs = g.op("Transpose", [g.op("MatMul", [inv, posf], r)], r, perm=[0, 2, 1])
    emb = g.op("Concat", [freqs, freqs], r, axis=-1)
    cos = g.op("Unsqueeze", [g.op("Cos", [emb], r), g.const([1], np.int64, r)], r)
    sin = g.op("Unsqueeze", [g.op("Sin", [emb], r), g.const([1], np.int64, r)], r)

    def rms_norm(t: str, scope: str) -> str:
        var = g.op(
            "ReduceMean",
            [g.op("Pow", [t, g.const(2.0, np.float32, scope)], scope)],
            scope,
            axes=[-1],
            keepdims=1,
        )
        inv_std = g.op(
            "Div",
            [
                g.const(1.0, np.float32, scope),
                g.op("Sqrt", [g.op("Add", [var, g.const(eps, np.float32, scope)], scope)], scope),
            ],
            scope,
        )
        w = g.init(f"{scope.strip('/').replace('/', '.')}.weight", np.ones(HIDDEN, np.float32))
        return g.op("Mul", [w, g.op("Mul", [t, inv_std], scope)], scope)

    def rotate(t: str, scope: str) -> str:
        x1 = g.op(
            "Slice",
            [
                t,
                g.const([0], np.int64, scope),
                g.const([dh // 2], np.int64, scope),
                g.const([3], np.int64, scope),
                g.const([1], np.int64, scope),
            ],
            scope,
        )
        x2 = g.op(
            "Slice",
            [
                t,
                g.const([dh // 2], np.int64, scope),
                g.const([INT64_MAX], np.int64, scope),
                g.const([3], np.int64, scope),
                g.const([1], np.int64, scope),
            ],
            scope,
        )
        half = g.op("Concat", [g.op("Neg", [x2], scope), x1], scope, axis=-1)
        return g.op("Add", [g.op("Mul", [t, cos], scope), g.op("Mul", [half, sin], scope)], scope)

    def repeat_kv(t: str, scope: str) -> str:
        rep = HEADS // KV_HEADS
        u = g.op("Unsqueeze", [t, g.const([2], np.int64, scope)], scope)
        b, n, length = g.size(t, 0, scope), g.size(t, 1, scope), g.size(t, 2, scope)
        e = g.op(
            "Expand",
            [
                u,
                g.op(
                    "Concat",
                    [b, n, g.const([rep], np.int64, scope), length, g.const([dh], np.int64, scope)],
                    scope,
                    axis=0,
                ),
            ],
            scope,
        )
        heads = g.op("Mul", [n, g.const([rep], np.int64, scope)], scope)
        return g.op(
            "Reshape",
            [e, g.op("Concat", [b, heads, length, g.const([dh], np.int64, scope)], scope, axis=0)],
            scope,
        )

    present = []
    for layer in range(layers):
        s = f"/model/layers.{layer}"
        a = f"{s}/self_attn"
        h = rms_norm(x, f"{s}/input_layernorm")
        q = g.split_heads(g.linear(h, HIDDEN, HEADS * dh, f"{a}/q_proj", bias=False), HEADS, dh, a)
        k = g.split_heads(
            g.linear(h, HIDDEN, KV_HEADS * dh, f"{a}/k_proj", bias=False), KV_HEADS, dh, a
        )
        v = g.split_heads(
            g.linear(h, HIDDEN, KV_HEADS * dh, f"{a}/v_proj", bias=False), KV_HEADS, dh, a
        )
        q, k = rotate(q, a), rotate(k, a)
        k = g.op("Concat", [f"past_key_values.{layer}.key", k], a, axis=-2)
        v = g.op("Concat", [f"past_key_values.{layer}.value", v], a, axis=-2)
        present += [k, v]
        kr, vr = repeat_kv(k, a), repeat_kv(v, a)
        scores = g.op("MatMul", [q, g.op("Transpose", [kr], a, perm=[0, 1, 3, 2])], a)
        scores = g.op("Div", [scores, g.const(math.sqrt(dh), np.float32, a)], a)
        probs = g.op("Softmax", [g.op("Add", [scores, mask], a)], a, axis=-1)
        ctx = g.merge_heads(g.op("MatMul", [probs, vr], a), HIDDEN, a)
        x = g.op("Add", [x, g.linear(ctx, HIDDEN, HIDDEN, f"{a}/o_proj", bias=False)], s)
        h = rms_norm(x, f"{s}/post_attention_layernorm")
        m = f"{s}/mlp"
        gate = g.linear(h, HIDDEN, LLAMA_FFN, f"{m}/gate_proj", bias=False)
        gate = g.op("Mul", [gate, g.op("Sigmoid", [gate], f"{m}/act_fn")], f"{m}/act_fn")
        up = g.linear(h, HIDDEN, LLAMA_FFN, f"{m}/up_proj", bias=False)
        down = g.linear(g.op("Mul", [gate, up], m), LLAMA_FFN, HIDDEN, f"{m}/down_proj", bias=False)
        x = g.op("Add", [x, down], s)
    x = rms_norm(x, "/model/norm")
    logits = g.linear(x, HIDDEN, VOCAB, "/lm_head", bias=False)
    _output(g, logits, "logits")
    for i, t in enumerate(present):
        _output(g, t, f"present.{i // 2}.{('key', 'value')[i % 2]}")
    past, present_io = _cache_io(layers, KV_HEADS, dh)
    return g.model(
        "main_graph",
        _decoder_inputs() + past,
        [_io("logits", TensorProto.FLOAT, ["batch", "seq", VOCAB]), *present_io],
    )


# --- recurrent and tabular ------------------------------------------------------------------

TAGS = 17


def lstm_tagger(seed: int = 0) -> onnx.ModelProto:
    """``nn.Embedding(1000, 128)`` -> ``nn.LSTM(128, 128, bidirectional=True)`` (sequence
    first) -> ``nn.Linear(256, 17)``: the exporter reorders the gates into one ONNX LSTM, makes
    the zero initial states from the batch size (Shape -> Gather -> Unsqueeze -> Concat ->
    ConstantOfShape; they are graph values, not initializers), and merges the directions with
    Transpose and ``Reshape [0, 0, -1]``."""
    g = _Graph(seed)
    hdim = 128
    x = g.op(
        "Gather",
        [g.init("embedding.weight", g.randn(VOCAB, hdim, scale=1.0)), "input_ids"],
        "/embedding",
    )
    s = "/lstm"
    state_shape = g.op(
        "Concat",
        [g.const([2], np.int64, s), g.size(x, 1, s), g.const([hdim], np.int64, s)],
        s,
        axis=0,
    )
    zero = numpy_helper.from_array(np.zeros(1, np.float32), "")
    h0 = g.op("ConstantOfShape", [state_shape], s, value=zero)
    c0 = g.op("ConstantOfShape", [state_shape], s, value=zero)
    scale = hdim**-0.5
    w = g.init(g.anon("LSTM"), g.randn(2, 4 * hdim, hdim, scale=scale))
    r = g.init(g.anon("LSTM"), g.randn(2, 4 * hdim, hdim, scale=scale))
    b = g.init(g.anon("LSTM"), g.randn(2, 8 * hdim, scale=0.05))
    y, _, _ = g.ops(
        "LSTM", [x, w, r, b, "", h0, c0], s, 3, direction="bidirectional", hidden_size=hdim
    )
    y = g.op("Transpose", [y], s, perm=[0, 2, 1, 3])
    y = g.op("Reshape", [y, g.const([0, 0, -1], np.int64, s)], s)
    logits = g.linear(y, 2 * hdim, TAGS, "/classifier")
    _output(g, logits, "logits")
    return g.model(
        "main_graph",
        [_io("input_ids", TensorProto.INT64, ["seq", "batch"])],
        [_io("logits", TensorProto.FLOAT, ["seq", "batch", TAGS])],
    )


def mlp_gelu(seed: int = 0) -> onnx.ModelProto:
    """A tabular MLP, ``nn.Sequential`` of three ``Linear(., 256) -> LayerNorm(256) ->
    GELU()`` blocks on 64 features and a ``Linear(256, 10)`` head; a Linear on a 2-d input is
    a Gemm."""
    g = _Graph(seed)
    x, fan_in = "input", 64
    for i in range(3):
        x = g.gemm(x, fan_in, 256, f"/net/net.{3 * i}")
        x = g.layer_norm(x, 256, f"/net/net.{3 * i + 1}")
        x = g.gelu(x, f"/net/net.{3 * i + 2}")
        fan_in = 256
    _output(g, g.gemm(x, 256, 10, "/head"), "output")
    return g.model(
        "main_graph",
        [_io("input", TensorProto.FLOAT, ["batch", 64])],
        [_io("output", TensorProto.FLOAT, ["batch", 10])],
    )


# --- inputs by size -------------------------------------------------------------------------

Inputs = dict[str, np.ndarray]


def _image(sizes: Mapping[str, tuple[int, ...]]) -> Callable[[str, np.random.Generator], Inputs]:
    def make(size: str, rng: np.random.Generator) -> Inputs:
        return {"input": rng.standard_normal(sizes[size]).astype(np.float32)}

    return make


def _left_padded_mask(rng: np.random.Generator, batch: int, length: int, keep: int) -> np.ndarray:
    """Ones with some zeros at the left of all but the first row (left padding); at least
    ``keep`` ones at the right of every row."""
    mask = np.ones((batch, length), np.int64)
    for row in range(1, batch):
        mask[row, : int(rng.integers(0, max(1, length - keep) + 1))] = 0
    return mask


def _bert_inputs(size: str, rng: np.random.Generator) -> Inputs:
    batch, seq = {"small": (1, 16), "mid": (4, 64), "large": (8, 128)}[size]
    return {
        "input_ids": rng.integers(0, VOCAB, (batch, seq), dtype=np.int64),
        "attention_mask": _left_padded_mask(rng, batch, seq, keep=seq // 2),
    }


def _decoder_inputs_for(kv_heads: int) -> Callable[[str, np.random.Generator], Inputs]:
    def make(size: str, rng: np.random.Generator) -> Inputs:
        batch, seq, past = DECODER_SIZES[size]
        total = past + seq
        mask = _left_padded_mask(rng, batch, total, keep=seq + 1)
        positions = np.maximum(np.cumsum(mask, axis=-1) - 1, 0)[:, past:]
        feeds: Inputs = {
            "input_ids": rng.integers(0, VOCAB, (batch, seq), dtype=np.int64),
            "attention_mask": mask,
            "position_ids": positions.astype(np.int64),
        }
        for i in range(2):
            for t in ("key", "value"):
                cache = rng.standard_normal((batch, kv_heads, past, HIDDEN // HEADS))
                feeds[f"past_key_values.{i}.{t}"] = cache.astype(np.float32)
        return feeds

    return make


DECODER_SIZES = {"small": (1, 1, 16), "mid": (4, 1, 64), "large": (8, 1, 256), "prefill": (2, 8, 0)}


def _lstm_inputs(size: str, rng: np.random.Generator) -> Inputs:
    seq, batch = {"small": (16, 1), "mid": (64, 4), "large": (128, 8)}[size]
    return {"input_ids": rng.integers(0, VOCAB, (seq, batch), dtype=np.int64)}


def _mlp_inputs(size: str, rng: np.random.Generator) -> Inputs:
    batch = {"small": 1, "mid": 32, "large": 256}[size]
    return {"input": rng.standard_normal((batch, 64)).astype(np.float32)}


def _speech_inputs(size: str, rng: np.random.Generator) -> Inputs:
    batch, samples = {"small": (1, 4000), "mid": (2, 16000), "large": (4, 32000)}[size]
    return {"input_values": rng.standard_normal((batch, samples)).astype(np.float32)}


@dataclass(frozen=True)
class Family:
    """A model family: its builder and its inputs at a named size (``SIZES``)."""

    name: str
    build: Callable[[], onnx.ModelProto]
    inputs: Callable[[str, np.random.Generator], Inputs]

    def feeds(self, size: str, seed: int = 0) -> Inputs:
        return self.inputs(size, np.random.default_rng(seed))


_IMAGES = {"small": (1, 3, 64, 64), "mid": (4, 3, 96, 96), "large": (8, 3, 128, 128)}

FAMILIES: dict[str, Family] = {
    f.name: f
    for f in [
        Family("resnet18", resnet18, _image(_IMAGES)),
        Family("mobilenetv3_small", mobilenetv3_small, _image(_IMAGES)),
        Family("speech_frontend", speech_frontend, _speech_inputs),
        Family("bert_encoder", bert_encoder, _bert_inputs),
        Family("gpt2_decoder_step", gpt2_decoder_step, _decoder_inputs_for(HEADS)),
        Family("llama_decoder_step", llama_decoder_step, _decoder_inputs_for(KV_HEADS)),
        Family("lstm_tagger", lstm_tagger, _lstm_inputs),
        Family("mlp_gelu", mlp_gelu, _mlp_inputs),
    ]
}
