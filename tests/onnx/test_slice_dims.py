"""ONNX ``Slice`` whose starts/ends come from ``Shape`` arithmetic (issue 30, item 1): the
bounds are dims, so the importer writes ``strided_slice`` with dim attributes (typed with
``min``/``max``, fusable, no ``dyn.strided_slice``), and the results equal onnxruntime's on
several shapes; bounds that may be negative keep the dynamic slice, still exact."""

from __future__ import annotations

import numpy as np
from model_builder import compare, typed_model
from onnx import TensorProto, helper

import dynshape

INT64_MAX = 2**63 - 1


def _ints(*v: int) -> np.ndarray:
    return np.array(v, np.int64)


def _rotary_rows() -> object:
    """``cache[past : past + seq]`` (a Llama export's cos/sin cache), times the new rows."""
    nodes = [
        helper.make_node("Shape", ["past"], ["sp"]),
        helper.make_node("Shape", ["new"], ["sn"]),
        helper.make_node("Slice", ["sp", "zero", "one"], ["past_len"]),
        helper.make_node("Slice", ["sn", "zero", "one"], ["seq_len"]),
        helper.make_node("Add", ["past_len", "seq_len"], ["total"]),
        helper.make_node("Slice", ["cache", "past_len", "total", "zero"], ["rows"]),
        helper.make_node("Mul", ["rows", "new"], ["out"]),
    ]
    inits = {
        "zero": _ints(0),
        "one": _ints(1),
        "cache": np.random.default_rng(0).standard_normal((32, 4)).astype(np.float32),
    }
    inputs = [
        ("past", TensorProto.FLOAT, ["past_len", 4]),
        ("new", TensorProto.FLOAT, ["seq", 4]),
    ]
    return typed_model(nodes, inputs, [("out", TensorProto.FLOAT, None)], inits)


def _f32(*shape: int) -> np.ndarray:
    return np.random.default_rng(sum(shape)).standard_normal(shape).astype(np.float32)


def test_rows_of_a_cache_from_shape_arithmetic_are_a_dim_slice() -> None:
    program = compare(
        _rotary_rows(),
        [_f32(0, 4), _f32(5, 4)],
        [_f32(5, 4), _f32(1, 4)],
        [_f32(31, 4), _f32(1, 4)],
        [_f32(3, 4), _f32(3, 4)],
    )
    text = str(program)
    assert "dyn.strided_slice" not in text
    assert "begin=[past_len], end=[past_len + seq]" in text
    exe = dynshape.compile(program)
    assert "from in" in exe.bytecode  # values computed per call, fused with the multiply


def _halves_and_reversal() -> object:
    """``x[:, n // 2 :]`` and ``x[: m : -1]`` reversed from a Shape-derived start."""
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Slice", ["s", "zero", "one"], ["rows"]),
        helper.make_node("Slice", ["s", "one", "two"], ["cols"]),
        helper.make_node("Div", ["cols", "two"], ["half"]),
        helper.make_node("Slice", ["x", "half", "big", "one"], ["right"]),
        helper.make_node("Slice", ["x", "rows", "neg_big", "zero", "minus_one"], ["reversed"]),
    ]
    inits = {
        "zero": _ints(0),
        "one": _ints(1),
        "two": _ints(2),
        "minus_one": _ints(-1),
        "big": _ints(INT64_MAX),
        "neg_big": _ints(-INT64_MAX),
    }
    outputs = [("right", TensorProto.FLOAT, None), ("reversed", TensorProto.FLOAT, None)]
    return typed_model(nodes, [("x", TensorProto.FLOAT, ["n", "m"])], outputs, inits)


def test_a_half_and_a_reversal_from_shapes_equal_onnxruntime() -> None:
    program = compare(
        _halves_and_reversal(), [_f32(4, 6)], [_f32(1, 1)], [_f32(0, 3)], [_f32(5, 0)], [_f32(3, 7)]
    )
    text = str(program)
    assert "dyn.strided_slice" not in text
    assert "begin=[0, (m // 2)]" in text
    assert "begin=[n], end=[], strides=[-1]" in text


def test_a_bound_that_may_be_negative_keeps_the_dynamic_slice() -> None:
    """``x[n - 2 :]``: ONNX counts a negative start from the end, which a dim index does
    not, so the importer keeps ``dyn.strided_slice``, exact for every n (its result is not
    reshaped to the dims' shape, which would hold only for n >= 2)."""
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Sub", ["s", "two"], ["start"]),
        helper.make_node("Slice", ["x", "start", "big"], ["tail"]),
    ]
    inits = {"two": _ints(2), "big": _ints(INT64_MAX)}
    m = typed_model(
        nodes, [("x", TensorProto.FLOAT, ["n"])], [("tail", TensorProto.FLOAT, None)], inits
    )
    program = compare(m, [_f32(5)], [_f32(1)], [_f32(0)], [_f32(2)])
    assert "dyn.strided_slice" in str(program)


def _positions_of_a_strided_conv() -> object:
    """Whisper's encoder: ``positions[: (frames - 1) // 2 + 1]``, the length of a stride-2
    convolution's output computed from ``Shape`` (Sub, Div, Add), added to that output."""
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Slice", ["s", "two", "three"], ["frames"]),
        helper.make_node("Sub", ["frames", "one"], ["less"]),
        helper.make_node("Div", ["less", "two"], ["half"]),
        helper.make_node("Add", ["half", "one"], ["length"]),
        helper.make_node("Conv", ["x", "w"], ["y"], strides=[2], pads=[1, 1], kernel_shape=[3]),
        helper.make_node("Transpose", ["y"], ["t"], perm=[0, 2, 1]),
        helper.make_node("Slice", ["positions", "zero", "length", "zero"], ["p"]),
        helper.make_node("Add", ["t", "p"], ["out"]),
    ]
    rng = np.random.default_rng(1)
    inits = {
        "zero": _ints(0),
        "one": _ints(1),
        "two": _ints(2),
        "three": _ints(3),
        "w": rng.standard_normal((6, 4, 3)).astype(np.float32),
        "positions": rng.standard_normal((40, 6)).astype(np.float32),
    }
    inputs = [("x", TensorProto.FLOAT, ["batch", 4, "frames"])]
    return typed_model(nodes, inputs, [("out", TensorProto.FLOAT, None)], inits)


def test_a_rounded_length_from_shapes_is_a_dim_slice() -> None:
    """With ``frames >= 1`` declared (as the importer's retry narrows it for Whisper's
    export), ``(frames - 1) // 2 + 1`` is a dim whose sign sympy's assumptions leave
    undecided and the planner's procedure proves: a ``strided_slice`` with a dim end, without
    the run-time shape arithmetic that ``dyn.strided_slice`` needs, and onnxruntime's values."""
    import onnxruntime as ort

    model = _positions_of_a_strided_conv()
    program = dynshape.onnx.load(model, dims={"frames": (1, None)})
    text = str(program)
    assert "dyn.strided_slice" not in text
    assert "end=[((frames - 1) // 2 + 1)]" in text
    machine = dynshape.VirtualMachine(dynshape.compile(program))
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for shape in ((2, 4, 9), (1, 4, 1), (3, 4, 20), (1, 4, 79)):
        x = _f32(*shape)
        expected = session.run(None, {"x": x})[0]
        np.testing.assert_allclose(machine.run(x), expected, rtol=1e-5, atol=1e-6)
