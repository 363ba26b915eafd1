"""Shape values through float math (issue 29, item 1), as exporters write them: the attention
scale ``1 / sqrt(head_dim)`` read off a shape, sizes halved in float and floored back to
integers, a ratio of two dims. Each is checked against onnxruntime at several sizes, and the
program keeps its dims symbolic where the float math is exact."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from model_builder import compare, typed_model  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import dynshape  # noqa: E402
import dynshape.onnx  # noqa: E402

MAX = np.iinfo(np.int64).max


def _scaletyped_model(head_dim: int | str) -> onnx.ModelProto:
    """``scores = (q @ k^T) * (1 / sqrt(q.shape[-1]))``, the scale computed from the shape as
    ViT and TransformerEncoder exports compute it."""
    q = ("q", TensorProto.FLOAT, ["batch", 2, "seq", head_dim])
    k = ("k", TensorProto.FLOAT, ["batch", 2, "seq", head_dim])
    nodes = [
        helper.make_node("Shape", ["q"], ["shape"]),
        helper.make_node("Slice", ["shape", "minus_one", "max"], ["last"]),
        helper.make_node("Cast", ["last"], ["last_f"], to=TensorProto.FLOAT),
        helper.make_node("Sqrt", ["last_f"], ["root"]),
        helper.make_node("Div", ["one", "root"], ["scale"]),
        helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]),
        helper.make_node("MatMul", ["q", "kt"], ["raw"]),
        helper.make_node("Mul", ["raw", "scale"], ["scores"]),
    ]
    inits = {
        "minus_one": np.array([-1], np.int64),
        "max": np.array([MAX], np.int64),
        "one": np.array(1.0, np.float32),
    }
    return typed_model(nodes, [q, k], [("scores", TensorProto.FLOAT, None)], inits)


def _result_type(program: object) -> str:
    """The compiled program's result type, as the executable states it."""
    (out,) = dynshape.VirtualMachine(dynshape.compile(program)).outputs
    return str(out)


def _qk(batch: int, seq: int, head_dim: int, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal((batch, 2, seq, head_dim)).astype(np.float32) for _ in range(2)]


def test_attention_scale_from_a_static_head_dim_imports() -> None:
    program = compare(_scaletyped_model(16), _qk(1, 3, 16, 0), _qk(2, 7, 16, 1))
    assert "?" not in _result_type(program), _result_type(program)


def test_attention_scale_from_a_symbolic_head_dim_runs() -> None:
    compare(_scaletyped_model("d"), _qk(1, 3, 16, 0), _qk(2, 5, 9, 1), _qk(1, 1, 1, 2))


def _halved_resize() -> onnx.ModelProto:
    """``Resize(x, sizes=[n, c, floor(h * 0.5), floor(w * 0.5)])``, the halving done in float:
    the output's dims stay ``h // 2`` and ``w // 2``."""
    x = ("x", TensorProto.FLOAT, ["n", 3, "h", "w"])
    nodes = [
        helper.make_node("Shape", ["x"], ["shape"]),
        helper.make_node("Slice", ["shape", "zero", "two"], ["nc"]),
        helper.make_node("Slice", ["shape", "two", "four"], ["hw"]),
        helper.make_node("Cast", ["hw"], ["hw_f"], to=TensorProto.FLOAT),
        helper.make_node("Mul", ["hw_f", "half"], ["scaled"]),
        helper.make_node("Floor", ["scaled"], ["floored"]),
        helper.make_node("Cast", ["floored"], ["hw2"], to=TensorProto.INT64),
        helper.make_node("Concat", ["nc", "hw2"], ["sizes"], axis=0),
        helper.make_node("Resize", ["x", "", "", "sizes"], ["y"], mode="nearest"),
    ]
    inits = {
        "zero": np.array([0], np.int64),
        "two": np.array([2], np.int64),
        "four": np.array([4], np.int64),
        "half": np.array(0.5, np.float32),
    }
    return typed_model(nodes, [x], [("y", TensorProto.FLOAT, None)], inits)


def _image(n: int, h: int, w: int, seed: int) -> list[np.ndarray]:
    return [np.random.default_rng(seed).standard_normal((n, 3, h, w)).astype(np.float32)]


def test_exact_float_halving_keeps_the_dims_symbolic() -> None:
    program = compare(_halved_resize(), _image(1, 8, 6, 0), _image(2, 9, 13, 1), _image(1, 2, 3, 2))
    assert _result_type(program) == "Tensor[(n, 3, h // 2, w // 2), float32]"


def test_float_math_narrows_the_dims_to_where_it_is_exact() -> None:
    program = dynshape.onnx.load(_halved_resize())
    assert program.ranges == {"h": (0, 2**24), "w": (0, 2**24)}
    vm = dynshape.VirtualMachine(dynshape.compile(program))
    with pytest.raises(dynshape.VMError, match=r"h = 16777217 is outside its declared range"):
        vm.run(np.zeros((0, 3, 2**24 + 1, 1), np.float32))


def test_declared_ranges_within_the_exact_floats_stay() -> None:
    program = dynshape.onnx.load(_halved_resize(), dims={"h": (2, 4096)})
    assert program.ranges["h"] == (2, 4096)


def _with_scale(factor: float) -> onnx.ModelProto:
    m = _halved_resize()
    for init in m.graph.initializer:
        if init.name == "half":
            init.CopyFrom(numpy_helper.from_array(np.array(factor, np.float32), "half"))
    return m


def test_a_power_of_two_scale_folds_and_others_run() -> None:
    program = compare(_with_scale(0.25), _image(1, 8, 12, 0), _image(1, 9, 13, 1))
    assert _result_type(program) == "Tensor[(n, 3, h // 4, w // 4), float32]"
    # 0.75 is not exact in float: the sizes are data, the model's own float math at run time
    program = compare(_with_scale(0.75), _image(1, 8, 12, 0), _image(2, 9, 13, 1))
    assert _result_type(program) == "Tensor[(?, ?, ?, ?), float32]"


def test_a_concrete_value_cut_from_a_symbolic_shape_is_a_number() -> None:
    from dynshape.onnx.known import Known

    cut = Known(np.array([16], dtype=object), "int64")
    assert not cut.symbolic
    assert cut.numeric() is not None and cut.numeric().dtype == np.int64
