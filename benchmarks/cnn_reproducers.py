"""The CNN reproducers of issue 27, built with ``onnx.helper`` the way PyTorch exports them: a
ResNet-18 structure, a MobileNetV3-like stack with depthwise convolutions and squeeze-excite,
and a conv1d speech front end, each also with a strange input dim (2^31, a dim_param ``n//0``).
``compile_time.py --models`` imports and compiles each (this module needs ``onnx``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from onnx import TensorProto, helper, numpy_helper


class Graph:
    """A graph being built: nodes, initializers (random weights from a seeded generator)."""

    def __init__(self, seed: int) -> None:
        self.nodes: list[Any] = []
        self.inits: list[Any] = []
        self.count = 0
        self.rng = np.random.default_rng(seed)

    def const(self, value: Any) -> str:
        self.count += 1
        name = f"c{self.count}"
        self.inits.append(numpy_helper.from_array(np.asarray(value, np.float32), name))
        return name

    def weight(self, *shape: int, scale: float = 0.1) -> str:
        return self.const(self.rng.standard_normal(shape) * scale)

    def op(self, op_type: str, inputs: list[str], **attrs: Any) -> str:
        self.count += 1
        out = f"{op_type.lower()}{self.count}"
        self.nodes.append(helper.make_node(op_type, inputs, [out], **attrs))
        return out

    def conv(self, x: str, cin: int, cout: int, k: int, s: int = 1, group: int = 1) -> str:
        nd = 1 if self.conv1d else 2
        return self.op(
            "Conv",
            [x, self.weight(cout, cin // group, *[k] * nd)],
            kernel_shape=[k] * nd,
            strides=[s] * nd,
            pads=[0 if self.conv1d else k // 2] * (2 * nd),
            group=group,
        )

    def bn(self, x: str, c: int) -> str:
        ins = [self.weight(c), self.weight(c), self.weight(c), self.const(np.ones(c))]
        return self.op("BatchNormalization", [x, *ins])

    def model(self, dims: list[int | str], out: str) -> Any:
        graph = helper.make_graph(
            self.nodes,
            "g",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, dims)],
            [helper.make_tensor_value_info(out, TensorProto.FLOAT, None)],
            self.inits,
        )
        m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        m.ir_version = 8
        return m

    conv1d = False


def resnet18(dims: list[int | str]) -> Any:
    g = Graph(0)
    stem = g.op("Conv", ["x", g.weight(16, 3, 7, 7)], kernel_shape=[7, 7], strides=[2, 2])
    g.nodes[-1].attribute.append(helper.make_attribute("pads", [3] * 4))
    x = g.op("Relu", [g.bn(stem, 16)])
    x = g.op("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1] * 4)
    cin = 16
    for stage, width in enumerate((16, 32, 64, 128)):
        for block in range(2):
            s = 2 if stage and not block else 1
            y = g.op("Relu", [g.bn(g.conv(x, cin, width, 3, s), width)])
            y = g.bn(g.conv(y, width, width, 3), width)
            short = x if s == 1 and cin == width else g.bn(g.conv(x, cin, width, 1, s), width)
            x, cin = g.op("Relu", [g.op("Add", [y, short])]), width
    x = g.op("Flatten", [g.op("GlobalAveragePool", [x])], axis=1)
    return g.model(dims, g.op("Gemm", [x, g.weight(10, cin), g.weight(10)], transB=1))


def mobilenet(dims: list[int | str]) -> Any:
    g = Graph(1)
    x = g.op("HardSwish", [g.bn(g.conv("x", 3, 16, 3, 2), 16)])
    cin = 16
    blocks = [  # expansion, out channels, kernel, stride, squeeze-excite
        (16, 16, 3, 2, True),
        (72, 24, 3, 2, False),
        (88, 24, 3, 1, False),
        (96, 40, 5, 2, True),
        (240, 40, 5, 1, True),
        (120, 48, 5, 1, True),
        (288, 96, 5, 2, True),
        (576, 96, 5, 1, True),
    ]
    for exp, out, k, s, se in blocks:
        y = x if exp == cin else g.op("HardSwish", [g.bn(g.conv(x, cin, exp, 1), exp)])
        y = g.op("HardSwish", [g.bn(g.conv(y, exp, exp, k, s, group=exp), exp)])
        if se:
            z = g.op("Relu", [g.conv(g.op("GlobalAveragePool", [y]), exp, exp // 4, 1)])
            z = g.op("HardSigmoid", [g.conv(z, exp // 4, exp, 1)], alpha=1 / 6, beta=0.5)
            y = g.op("Mul", [y, z])
        y = g.bn(g.conv(y, exp, out, 1), out)
        x, cin = (g.op("Add", [y, x]) if s == 1 and cin == out else y), out
    x = g.op("Flatten", [g.op("GlobalAveragePool", [x])], axis=1)
    return g.model(dims, g.op("Gemm", [x, g.weight(10, cin), g.weight(10)], transB=1))


def speech(dims: list[int | str]) -> Any:
    g = Graph(2)
    g.conv1d = True

    def gelu(t: str) -> str:
        e = g.op("Erf", [g.op("Div", [t, g.const([2**0.5])])])
        return g.op("Mul", [g.op("Mul", [t, g.const([0.5])]), g.op("Add", [e, g.const([1])])])

    x = gelu(g.conv("x", 1, 32, 10, 5))
    for _ in range(4):
        x = gelu(g.conv(x, 32, 32, 3, 2))
    x = g.op("Transpose", [gelu(g.conv(x, 32, 32, 2, 2))], perm=[0, 2, 1])
    return g.model(dims, g.op("Add", [g.op("MatMul", [x, g.weight(32, 48)]), g.weight(48)]))


#: Each reproducer by name: a function making its model.
MODELS: dict[str, Callable[[], Any]] = {
    "resnet18": lambda: resnet18(["N", 3, "H", "W"]),
    "resnet18 N=2^31": lambda: resnet18([2**31, 3, "H", "W"]),
    "mobilenet": lambda: mobilenet(["N", 3, "H", "W"]),
    "mobilenet H='n//0'": lambda: mobilenet(["N", 3, "n//0", "W"]),
    "speech": lambda: speech(["batch", 1, "samples"]),
    "speech samples=2^31": lambda: speech(["batch", 1, 2**31]),
}
