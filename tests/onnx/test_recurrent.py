"""The recurrent converters (``LSTM``, ``GRU``, ``RNN``) of ``dynshape.onnx`` against onnxruntime:
one-node models with weights as initializers and ``X`` of symbolic ``(seq, batch, input)``,
each compiled once (one ``nn.lstm``/``nn.gru``/``nn.rnn`` op over the symbolic steps) and run
at several sizes, seq=1 among them."""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import dynshape  # noqa: E402
import dynshape.onnx  # noqa: E402
import ir  # noqa: E402
from dynshape.passes.infer_types import infer_types  # noqa: E402

RNG = np.random.default_rng(20240616)
FLOAT = TensorProto.FLOAT
INPUT = 3
HIDDEN = 4
GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}
SIZES = [(1, 2), (5, 3), (3, 1)]  # (seq, batch)
OUT_NAMES = {"LSTM": ["Y", "Y_h", "Y_c"], "GRU": ["Y", "Y_h"], "RNN": ["Y", "Y_h"]}


def rand(*shape: int, scale: float = 1.0) -> np.ndarray:
    return (scale * RNG.standard_normal(shape)).astype(np.float32)


class Case(NamedTuple):
    model: Any
    weights: dict[str, np.ndarray]
    """W, R, B, P (the feeds when they are graph inputs)."""


def recurrent_model(
    op: str,
    direction: str = "forward",
    bias: bool = True,
    initial: bool = False,
    lens: bool = False,
    peepholes: bool = False,
    outputs: list[str] | None = None,
    weights_as_inputs: bool = False,
    layout: int = 0,
    **attrs: Any,
) -> Case:
    """A one-node ``op`` model; ``outputs`` are the requested ones (others get empty names).
    The weights are initializers (or graph inputs with ``weights_as_inputs``); initial states
    and ``sequence_lens`` are graph inputs."""
    dirs = 2 if direction == "bidirectional" else 1
    gh = GATES[op] * HIDDEN
    weights = {
        "W": rand(dirs, gh, INPUT, scale=0.5),
        "R": rand(dirs, gh, HIDDEN, scale=0.5),
    }
    if bias:
        weights["B"] = rand(dirs, 2 * gh, scale=0.5)
    state = ["batch", dirs, HIDDEN] if layout else [dirs, "batch", HIDDEN]
    x_dims = ["batch", "seq", INPUT] if layout else ["seq", "batch", INPUT]
    graph_inputs = [("X", FLOAT, x_dims)]
    names = ["X", "W", "R", "B" if bias else ""]
    names.append("sequence_lens" if lens else "")
    if lens:
        graph_inputs.append(("sequence_lens", TensorProto.INT32, ["batch"]))
    names.append("initial_h" if initial else "")
    if initial:
        graph_inputs.append(("initial_h", FLOAT, state))
    if op == "LSTM":
        names.append("initial_c" if initial else "")
        if initial:
            graph_inputs.append(("initial_c", FLOAT, state))
        names.append("P" if peepholes else "")
        if peepholes:
            weights["P"] = rand(dirs, 3 * HIDDEN, scale=0.5)
    while names and not names[-1]:
        names.pop()
    wanted = outputs if outputs is not None else OUT_NAMES[op]
    outs = [n if n in wanted else "" for n in OUT_NAMES[op]]
    while not outs[-1]:
        outs.pop()
    node = helper.make_node(
        op,
        names,
        outs,
        name=f"the_{op.lower()}",
        hidden_size=HIDDEN,
        direction=direction,
        **({"layout": layout} if layout else {}),
        **attrs,
    )
    inits = [numpy_helper.from_array(w, n) for n, w in weights.items()]
    values = [helper.make_tensor_value_info(n, t, d) for n, t, d in graph_inputs]
    if weights_as_inputs:
        values += [
            helper.make_tensor_value_info(n, FLOAT, list(w.shape)) for n, w in weights.items()
        ]
        inits = []
    graph = helper.make_graph(
        [node], "g", values, [helper.make_empty_tensor_value_info(o) for o in outs if o], inits
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return Case(m, weights)


def feeds_for(case: Case, seq: int, batch: int, lens: list[int] | None) -> dict[str, Any]:
    """Random inputs of the case's model at (seq, batch)."""
    out: dict[str, Any] = {}
    for value in case.model.graph.input:
        name = value.name
        if name in case.weights:
            out[name] = case.weights[name]
            continue
        dims = [d.dim_param or d.dim_value for d in value.type.tensor_type.shape.dim]
        shape = [{"seq": seq, "batch": batch}.get(d, d) for d in dims]
        if name == "sequence_lens":
            out[name] = np.array(lens if lens is not None else [seq] * batch, dtype=np.int32)
        else:
            out[name] = rand(*shape)
    return out


def compare(case: Case, sizes: list[tuple[int, int]] = SIZES, lens: Any = None) -> Any:
    """Import and compile the case's model once; at each (seq, batch) the VM's results must match
    onnxruntime's. ``lens(seq, batch)`` gives the sequence lengths. Returns the program."""
    m = case.model
    program = dynshape.onnx.load(m)
    machine = dynshape.VirtualMachine(dynshape.compile(program))
    session = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    for seq, batch in sizes:
        feeds = feeds_for(case, seq, batch, lens(seq, batch) if lens else None)
        expected = session.run(None, feeds)
        got = machine.run(*(feeds[n] for n in names))
        got = list(got) if isinstance(got, (list, tuple)) else [got]
        assert len(got) == len(expected)
        for g, e in zip(got, expected, strict=True):
            g = np.asarray(g)
            assert g.shape == e.shape, (g.shape, e.shape)
            assert g.dtype == e.dtype
            np.testing.assert_allclose(g, e, rtol=1e-4, atol=1e-5)
    return program


def result_types(program: Any) -> list[str]:
    """The printed types of the program's results."""
    ret = infer_types(program).main.body.ty
    fields = ret.fields if isinstance(ret, ir.TupleType) else (ret,)
    return [str(f) for f in fields]


def import_error(case: Case) -> str:
    with pytest.raises(dynshape.ModelImportError) as info:
        dynshape.onnx.load(case.model)
    return str(info.value)


# ---- directions, biases, initial states ----------------------------------------------------


@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize(("bias", "initial"), [(True, False), (False, True), (True, True)])
def test_directions(op: str, direction: str, bias: bool, initial: bool) -> None:
    compare(recurrent_model(op, direction, bias=bias, initial=initial))


@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
def test_types_stay_symbolic(op: str) -> None:
    program = compare(recurrent_model(op, "bidirectional"))
    types = result_types(program)
    assert types[0].startswith("Tensor[(seq, 2, batch, 4)"), types
    for ty in types[1:]:
        assert ty.startswith("Tensor[(2, batch, 4)"), types


@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
def test_one_op_no_loop(op: str) -> None:
    """The node becomes one recurrent op (its kernel runs the steps): no loop, no per-step ops."""
    text = str(dynshape.onnx.load(recurrent_model(op, "bidirectional", initial=True).model))
    assert text.count(f"nn.{op.lower()}(") == 1, text
    assert "while" not in text and "concatenate" not in text, text


@pytest.mark.parametrize("lbr", [0, 1])
@pytest.mark.parametrize("direction", ["forward", "bidirectional"])
def test_gru_linear_before_reset(lbr: int, direction: str) -> None:
    compare(recurrent_model("GRU", direction, initial=True, linear_before_reset=lbr))


@pytest.mark.parametrize("lbr", [0, 1])
def test_gru_linear_before_reset_without_bias(lbr: int) -> None:
    compare(recurrent_model("GRU", bias=False, linear_before_reset=lbr))


# ---- requested outputs ---------------------------------------------------------------------


@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
def test_only_y_h(op: str) -> None:
    m = recurrent_model(op, "bidirectional", outputs=["Y_h"])
    program = compare(m)
    assert len(result_types(program)) == 1
    # One op computes Y too; it is not read, and nothing is concatenated.
    assert "concatenate" not in str(program)


@pytest.mark.parametrize("outputs", [["Y"], ["Y_c"], ["Y", "Y_c"], ["Y_h", "Y_c"]])
def test_lstm_output_subsets(outputs: list[str]) -> None:
    compare(recurrent_model("LSTM", "reverse", initial=True, outputs=outputs))


# ---- LSTM variants -------------------------------------------------------------------------


@pytest.mark.parametrize("direction", ["forward", "bidirectional"])
def test_lstm_peepholes(direction: str) -> None:
    compare(recurrent_model("LSTM", direction, initial=True, peepholes=True))


def test_lstm_input_forget() -> None:
    compare(recurrent_model("LSTM", "bidirectional", peepholes=True, input_forget=1))


# ---- attributes ----------------------------------------------------------------------------


@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
def test_clip(op: str) -> None:
    compare(recurrent_model(op, "bidirectional", initial=True, clip=0.3))


@pytest.mark.parametrize(
    ("op", "activations"),
    [
        ("RNN", ["Relu"]),
        ("RNN", ["Sigmoid", "Relu"]),
        ("GRU", ["Tanh", "Relu"]),
        ("LSTM", ["Tanh", "Sigmoid", "Relu"]),
    ],
)
def test_activations(op: str, activations: list[str]) -> None:
    direction = "bidirectional" if len(activations) == 2 and op == "RNN" else "forward"
    compare(recurrent_model(op, direction, activations=activations))


@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
def test_layout_1(op: str) -> None:
    """Batch-major X, states and outputs. onnxruntime refuses layout=1, so the reference is
    the same node with layout=0 on transposed inputs, its outputs transposed back."""
    case = recurrent_model(op, "bidirectional", initial=True, layout=1)
    reference = onnx.ModelProto()
    reference.CopyFrom(case.model)
    node = reference.graph.node[0]
    (layout,) = [a for a in node.attribute if a.name == "layout"]
    node.attribute.remove(layout)
    for value in reference.graph.input:
        dims = value.type.tensor_type.shape.dim
        a, b = (onnx.TensorShapeProto.Dimension(), onnx.TensorShapeProto.Dimension())
        a.CopyFrom(dims[0])
        b.CopyFrom(dims[1])
        dims[0].CopyFrom(b)
        dims[1].CopyFrom(a)
    program = dynshape.onnx.load(case.model)
    machine = dynshape.VirtualMachine(dynshape.compile(program))
    session = ort.InferenceSession(
        reference.SerializeToString(), providers=["CPUExecutionProvider"]
    )
    names = [i.name for i in session.get_inputs()]
    for seq, batch in SIZES:
        feeds = feeds_for(case, seq, batch, None)  # batch-major
        swapped = {n: np.ascontiguousarray(np.swapaxes(v, 0, 1)) for n, v in feeds.items()}
        expected = session.run(None, swapped)
        got = machine.run(*(feeds[n] for n in names))
        y = np.transpose(expected[0], (2, 0, 1, 3))  # (seq, dirs, batch, H) -> batch-major
        states = [np.swapaxes(e, 0, 1) for e in expected[1:]]
        for g, e in zip(got, [y, *states], strict=True):
            np.testing.assert_allclose(np.asarray(g), e, rtol=1e-4, atol=1e-5)
    types = result_types(program)
    assert types[0].startswith("Tensor[(batch, seq, 2, 4)"), types
    assert types[1].startswith("Tensor[(batch, 2, 4)"), types


@pytest.mark.parametrize(
    ("op", "attrs"),
    [
        ("LSTM", {"peepholes": True}),
        ("GRU", {"linear_before_reset": 0}),
        ("GRU", {"linear_before_reset": 1}),
        ("RNN", {}),
    ],
)
def test_weights_as_inputs(op: str, attrs: dict[str, Any]) -> None:
    """W, R, B (and P) as graph inputs: sliced per direction and gate by ops, not numpy."""
    compare(recurrent_model(op, "bidirectional", initial=True, weights_as_inputs=True, **attrs))


# ---- sequence_lens -------------------------------------------------------------------------


def _ragged(seq: int, batch: int) -> list[int]:
    return [max(1, seq - (b % seq)) for b in range(batch)]


@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
def test_sequence_lens(op: str, direction: str) -> None:
    m = recurrent_model(op, direction, initial=True, lens=True)
    compare(m, [(1, 2), (5, 4), (4, 3)], lens=_ragged)


def test_sequence_lens_all_full() -> None:
    m = recurrent_model("GRU", "bidirectional", lens=True)
    compare(m, [(3, 2), (1, 1)])


# ---- refused variants ----------------------------------------------------------------------


def test_unsupported_activation() -> None:
    text = import_error(recurrent_model("RNN", activations=["Softsign"]))
    assert "node RNN 'the_rnn': unsupported: activation 'Softsign'" in text


def test_unsupported_activation_parameters() -> None:
    m = recurrent_model("RNN", activations=["Tanh"], activation_alpha=[0.5])
    text = import_error(m)
    assert "node RNN 'the_rnn': unsupported: activation_alpha" in text


def test_wrong_number_of_activations() -> None:
    text = import_error(recurrent_model("GRU", "bidirectional", activations=["Sigmoid", "Tanh"]))
    assert "node GRU 'the_gru': activations=['Sigmoid', 'Tanh'] must name 2" in text


def test_bad_direction() -> None:
    text = import_error(recurrent_model("LSTM", "sideways"))
    assert "node LSTM 'the_lstm': direction='sideways'" in text


def test_weight_shape_mismatch() -> None:
    case = recurrent_model("LSTM", "bidirectional")
    (hidden,) = [a for a in case.model.graph.node[0].attribute if a.name == "hidden_size"]
    hidden.i = HIDDEN + 1  # disagrees with W and R
    text = import_error(case)
    assert "node LSTM 'the_lstm': W (input 1) has shape [2, 16, 3], expected [2, 20, 3]" in text
