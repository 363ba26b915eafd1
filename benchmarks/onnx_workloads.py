"""The workloads of compare_numpy.py as ONNX graphs, for its optional ``ort`` column.

One small builder per workload, each the numpy version's math op for op in the standard ONNX
opset ``OPSET`` (no contrib ops): the dims that vary are symbolic (``n``, ``batch``, ``seq``;
the data-dependent output of ``x[x>0]*2`` has an unnamed dim), the weights are initializers
made from the arrays the builder is given (the same arrays dynshape and numpy get), and
``w.T`` is a ``Transpose`` node on the initializer, which onnxruntime folds when it creates
the session. Scalars are 0-d float32 initializers. Every model passes ``onnx.checker``.

``session`` makes the ``InferenceSession`` with the options compare_numpy.py measures with;
its docstring says why those.

onnx and onnxruntime are an optional extra (``pip install -e '.[onnx]'``), never a
requirement: without them this module still imports (``AVAILABLE`` is False) and its builders
are never called.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

try:
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper
except ImportError:  # the optional extra is not installed: compare_numpy.py has no ort column
    AVAILABLE = False
else:
    AVAILABLE = True

OPSET = 17  # the first opset with LayerNormalization
IR_VERSION = 8  # opset 17's: older onnxruntime releases reject the newest IR versions
#: A dim of a graph input or output: a size, a symbol, or None (unknown: data-dependent).
Dim = int | str | None


def _threads() -> int:
    """The threads numpy's OpenBLAS uses: its environment variables, else one per core."""
    for var in ("OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "OMP_NUM_THREADS"):
        if os.environ.get(var, "").isdigit() and int(os.environ[var]) > 0:
            return int(os.environ[var])
    return os.cpu_count() or 1


THREADS = _threads()


class _Graph:
    """A graph under construction: every ``op`` appends one node and returns its output's name."""

    def __init__(self) -> None:
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self._scalars: dict[float, str] = {}

    def op(self, op_type: str, *inputs: str, **attributes: Any) -> str:
        out = f"{op_type.lower()}_{len(self.nodes)}"
        self.nodes.append(helper.make_node(op_type, list(inputs), [out], **attributes))
        return out

    def weight(self, name: str, array: np.ndarray) -> str:
        """An initializer holding ``array`` (a float32 copy, as the protobuf stores it)."""
        self.initializers.append(numpy_helper.from_array(np.asarray(array, np.float32), name))
        return name

    def scalar(self, value: float) -> str:
        """A 0-d float32 initializer (one per value)."""
        if value not in self._scalars:
            self._scalars[value] = self.weight(f"scalar_{len(self._scalars)}", np.float32(value))
        return self._scalars[value]

    def dense(self, x: str, w: str) -> str:
        """``x @ w.T`` for a (out, in) weight ``w``."""
        return self.op("MatMul", x, self.op("Transpose", w, perm=[1, 0]))

    def layer_norm(self, x: str, gamma: str, beta: str) -> str:
        """Over the last axis, epsilon 1e-5 (numpy: ``(h - mu) / sqrt(var + 1e-5) * g + b``)."""
        return self.op("LayerNormalization", x, gamma, beta, axis=-1, epsilon=1e-5)

    def model(
        self,
        name: str,
        inputs: Sequence[tuple[str, Sequence[Dim]]],
        output: str,
        output_dims: Sequence[Dim],
    ) -> onnx.ModelProto:
        """The checked model: float32 ``inputs`` (name, dims) and the one output ``output``."""

        def value(name: str, dims: Sequence[Dim]) -> onnx.ValueInfoProto:
            return helper.make_tensor_value_info(name, TensorProto.FLOAT, list(dims))

        graph = helper.make_graph(
            self.nodes,
            name,
            [value(n, dims) for n, dims in inputs],
            [value(output, output_dims)],
            self.initializers,
        )
        model = helper.make_model(
            graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=IR_VERSION
        )
        onnx.checker.check_model(model, full_check=True)
        return model


def seed_model() -> onnx.ModelProto:
    """``(x + x) - y`` on two vectors of symbolic length ``n``."""
    g = _Graph()
    out = g.op("Sub", g.op("Add", "x", "x"), "y")
    return g.model("seed", [("x", ["n"]), ("y", ["n"])], out, ["n"])


def mlp_model(*layers: np.ndarray) -> onnx.ModelProto:
    """``relu(x @ w.T + b)`` layers, one per (weight, bias) pair of ``layers``
    (compare_numpy.py's ``w1, b1, w2, b2, w3, b3``: three layers).

    The input is ``(batch, in)`` with a symbolic ``batch``; the widths come from the weights.
    """
    if len(layers) % 2:
        raise ValueError("mlp_model takes (weight, bias) pairs")
    g = _Graph()
    h = "x"
    for i in range(0, len(layers), 2):
        w, b = g.weight(f"w{i // 2 + 1}", layers[i]), g.weight(f"b{i // 2 + 1}", layers[i + 1])
        h = g.op("Relu", g.op("Add", g.dense(h, w), b))
    width_in, width_out = layers[0].shape[1], layers[-2].shape[0]
    return g.model("mlp", [("x", ["batch", width_in])], h, ["batch", width_out])


GELU_C = 0.7978845608028654  # sqrt(2 / pi), as compare_numpy.py spells it
#: The encoder's weights in ``encoder_model``'s order (compare_numpy.py's argument order).
ENCODER_WEIGHTS = ("wq", "wk", "wv", "wo", "g1", "be1", "w1", "c1", "w2", "c2", "g2", "be2")


def encoder_model(
    wq: np.ndarray,
    wk: np.ndarray,
    wv: np.ndarray,
    wo: np.ndarray,
    g1: np.ndarray,
    be1: np.ndarray,
    w1: np.ndarray,
    c1: np.ndarray,
    w2: np.ndarray,
    c2: np.ndarray,
    g2: np.ndarray,
    be2: np.ndarray,
) -> onnx.ModelProto:
    """One post-norm transformer encoder block on ``x: (seq, d_model)``, symbolic ``seq``.

    Single-head attention ``softmax((x wq.T)(x wk.T).T * 0.125) (x wv.T) wo.T``, residual and
    layer norm, then the tanh-approximated GELU feed-forward
    ``0.5 f (1 + tanh(sqrt(2/pi) (f + 0.044715 f f f)))`` with ``f = h w1.T + c1``, residual
    and layer norm: the same ops, in the same order, as ``encoder_plain``.
    """
    g = _Graph()
    arrays = (wq, wk, wv, wo, g1, be1, w1, c1, w2, c2, g2, be2)
    for name, array in zip(ENCODER_WEIGHTS, arrays, strict=True):
        g.weight(name, array)  # the initializer's name is the parameter's
    # attention: q, k, v = x @ wq.T, ...; p = softmax((q @ k.T) * 0.125); x + (p @ v) @ wo.T
    q, k, v = (g.dense("x", w) for w in ("wq", "wk", "wv"))
    scores = g.op("Mul", g.op("MatMul", q, g.op("Transpose", k, perm=[1, 0])), g.scalar(0.125))
    attended = g.op("MatMul", g.op("Softmax", scores, axis=-1), v)
    h = g.layer_norm(g.op("Add", "x", g.dense(attended, "wo")), "g1", "be1")
    # feed-forward: f = h @ w1.T + c1; 0.5 * f * (1 + tanh(GELU_C * (f + 0.044715 * (f * f * f))))
    f = g.op("Add", g.dense(h, "w1"), "c1")
    cube = g.op("Mul", g.op("Mul", f, f), f)
    inner = g.op("Mul", g.scalar(GELU_C), g.op("Add", f, g.op("Mul", g.scalar(0.044715), cube)))
    one_plus_tanh = g.op("Add", g.scalar(1.0), g.op("Tanh", inner))
    gelu = g.op("Mul", g.op("Mul", g.scalar(0.5), f), one_plus_tanh)
    ffn = g.op("Add", g.dense(gelu, "w2"), "c2")
    out = g.layer_norm(g.op("Add", h, ffn), "g2", "be2")
    d_model = wq.shape[0]
    return g.model("encoder", [("x", ["seq", d_model])], out, ["seq", d_model])


def select_model() -> onnx.ModelProto:
    """``x[x > 0] * 2``: ``Greater`` and ``Compress``; the output's length depends on the data."""
    g = _Graph()
    positive = g.op("Compress", "x", g.op("Greater", "x", g.scalar(0.0)), axis=0)
    return g.model("select", [("x", ["n"])], g.op("Mul", positive, g.scalar(2.0)), [None])


#: The ops of ``chain_model``, named as compare_numpy.py's ``CHAIN_OPS`` names them.
CHAIN_STEPS: dict[str, Callable[[_Graph, str], str]] = {
    "add_y": lambda g, c: g.op("Add", c, "y"),
    "mul_half": lambda g, c: g.op("Mul", c, g.scalar(0.5)),
    "sub_y": lambda g, c: g.op("Sub", c, "y"),
    "tanh": lambda g, c: g.op("Tanh", c),
}


def chain_model(n_ops: int, cycle: Sequence[str], shape: Sequence[int]) -> onnx.ModelProto:
    """``n_ops`` elementwise ops on ``x`` (and ``y``) of a fixed ``shape``, cycling through
    ``cycle``: names of ``CHAIN_STEPS`` (``add_y``, ``mul_half``, ``sub_y``, ``tanh``)."""
    g = _Graph()
    c = "x"
    for i in range(n_ops):
        c = CHAIN_STEPS[cycle[i % len(cycle)]](g, c)
    return g.model("chain", [("x", shape), ("y", shape)], c, shape)


def describe() -> str:
    """The versions and settings, for the benchmark's first line."""
    return (
        f"onnxruntime {ort.__version__} (onnx {onnx.__version__}, opset {OPSET}, {THREADS} threads)"
    )


def session(model: onnx.ModelProto) -> Any:
    """An ``onnxruntime.InferenceSession`` of ``model`` on the CPU, with the options measured:

    - ``intra_op_num_threads = THREADS``: as many threads as numpy's OpenBLAS uses (its
      environment variables, else one per core; ORT's own default is one per physical core,
      the same on the 2-core benchmark machine), so neither side gets more cores;
    - worker threads do not spin (``session.intra_op.allow_spinning = 0``; ORT's default spins):
      compare_numpy.py interleaves ORT with numpy, and on 2 cores ORT's spinning worker took a
      core from OpenBLAS after every ORT sample -- plain numpy and numpy ``out=`` measured ~2x
      slower in the BLAS-bound rows (MLP batch 64, encoder seq 256) with a spinning session in
      the rotation, as fast as without ORT with a non-spinning one. The cost is ORT's: waking
      its worker adds up to ~30 us per call at some small sizes (seed n=1e5: ~60 us instead of
      ~30 us spinning; one thread: ~40 us, but then the large sizes lose the second core);
    - sequential execution (one inter-op thread), as the VM runs its kernels;
    - ``ORT_ENABLE_ALL`` graph optimizations (ORT's default: constant folding, e.g. of the
      weights' transposes, and fusions such as MatMul+Add+Relu into one ``FusedGemm``);
      ORT's memory arena and memory patterns on (its defaults).
    """
    options = ort.SessionOptions()
    options.intra_op_num_threads = THREADS
    options.inter_op_num_threads = 1
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.enable_cpu_mem_arena = True
    options.enable_mem_pattern = True
    options.log_severity_level = 3  # errors only
    return ort.InferenceSession(
        model.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )


if __name__ == "__main__":  # CI runs every benchmarks/*.py with --quick
    print("onnx_workloads.py holds the ONNX graphs of compare_numpy.py's ort column: run that")
