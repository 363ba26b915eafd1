"""Truncating integer ``Div`` of dims whose sign is not proved, as torch.export-based exports
compute output sizes (``(h - 1) // 8 + 1`` as ``Shape -> Squeeze -> Add(-1) -> Div(8) ->
Add(1)``): the importer folds it to ``floor`` after narrowing the symbol's range to where the
numerator is non-negative (``h >= 1``), so the sizes stay symbolic; below the range the program
refuses the input at entry, naming the symbol, where onnxruntime truncates. Compared with
onnxruntime at several sizes, the edge of the range included."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from model_builder import compare  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import dynshape  # noqa: E402
import dynshape.onnx  # noqa: E402

RNG = np.random.default_rng(20261202)


def _const(name: str, value: Any) -> Any:
    return numpy_helper.from_array(np.array(value, dtype=np.int64), name)


def _size_nodes(prefix: str, data: str, axis: int, sub: int, div: int) -> list[Any]:
    """``(Shape(data)[axis] - sub) / div + 1`` as a 1-element int64 tensor ``{prefix}_out``,
    the way the torch.export-based exporter writes it (Shape with start/end, Squeeze)."""
    return [
        helper.make_node(
            "Shape", [data], [f"{prefix}_shape"], start=axis, end=axis + 1, name=f"{prefix}_s"
        ),
        helper.make_node("Squeeze", [f"{prefix}_shape"], [f"{prefix}_dim"]),
        helper.make_node("Add", [f"{prefix}_dim", f"minus_{sub}"], [f"{prefix}_num"]),
        helper.make_node("Div", [f"{prefix}_num", f"by_{div}"], [f"{prefix}_q"]),
        helper.make_node("Add", [f"{prefix}_q", "one"], [f"{prefix}_size"]),
        helper.make_node("Reshape", [f"{prefix}_size", "shape_1"], [f"{prefix}_out"]),
    ]


def _inits(subs: set[int], divs: set[int]) -> list[Any]:
    out = [_const("one", 1), _const("shape_1", [1])]
    out += [_const(f"minus_{k}", -k) for k in subs]
    out += [_const(f"by_{m}", m) for m in divs]
    return out


def resize_model() -> Any:
    """``Resize`` (linear) of ``x: (N, C, H, W)`` to ``((H - 1) / 8 + 1, (W - 1) / 8 + 1)``."""
    nodes = [
        *_size_nodes("h", "x", 2, 1, 8),
        *_size_nodes("w", "x", 3, 1, 8),
        helper.make_node("Shape", ["x"], ["nc"], start=0, end=2),
        helper.make_node("Concat", ["nc", "h_out", "w_out"], ["sizes"], axis=0),
        helper.make_node("Resize", ["x", "", "", "sizes"], ["y"], mode="linear", name="the_resize"),
    ]
    graph = helper.make_graph(
        nodes,
        "resize",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", "C", "H", "W"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        _inits({1}, {8}),
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def expand_model() -> Any:
    """``Expand`` of ``sum(x, axis=1)`` (``(batch, 1)``) to ``(batch, ((s - 3) / 2 - 1) / 2
    + 1)``, ``s`` the samples: two truncating divisions, as wav2vec2's feature lengths."""
    nodes = [
        helper.make_node("Shape", ["x"], ["s_shape"], start=1, end=2),
        helper.make_node("Squeeze", ["s_shape"], ["s"]),
        helper.make_node("Add", ["s", "minus_3"], ["a"]),
        helper.make_node("Div", ["a", "by_2"], ["b"]),
        helper.make_node("Add", ["b", "minus_1"], ["c"]),
        helper.make_node("Div", ["c", "by_2"], ["d"]),
        helper.make_node("Add", ["d", "one"], ["n"]),
        helper.make_node("Reshape", ["n", "shape_1"], ["n1"]),
        helper.make_node("Shape", ["x"], ["batch"], start=0, end=1),
        helper.make_node("Concat", ["batch", "n1"], ["target"], axis=0),
        helper.make_node("ReduceSum", ["x", "shape_1"], ["total"], keepdims=1),
        helper.make_node("Expand", ["total", "target"], ["y"], name="the_expand"),
    ]
    graph = helper.make_graph(
        nodes,
        "expand",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "samples"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        _inits({1, 3}, {2}),
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def _images(*sizes: tuple[int, int]) -> list[list[np.ndarray]]:
    return [[RNG.standard_normal((2, 3, h, w)).astype(np.float32)] for h, w in sizes]


def test_resize_sizes_from_a_truncating_division() -> None:
    program = compare(resize_model(), *_images((1, 1), (1, 9), (8, 8), (9, 16), (17, 30)))
    assert program.ranges == {"H": (1, None), "W": (1, None)}
    text = str(program)
    assert "(H - 1) // 8 + 1" in text and "(W - 1) // 8 + 1" in text, text


def test_expand_shape_from_truncating_divisions() -> None:
    feeds = [[RNG.standard_normal((2, s)).astype(np.float32)] for s in (5, 6, 7, 8, 9, 40)]
    program = compare(expand_model(), *feeds)
    # (s - 3) // 2 - 1 >= 0 from s = 5 on; s - 3 >= 0 follows.
    assert program.ranges == {"samples": (5, None)}


def _refusal(m: Any, x: np.ndarray) -> str:
    machine = dynshape.VirtualMachine(dynshape.compile(dynshape.onnx.load(m)))
    with pytest.raises(dynshape.DynShapeError) as info:
        machine.run(x)
    return str(info.value)


def _ort(m: Any, x: np.ndarray) -> np.ndarray:
    session = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    return np.asarray(session.run(None, {"x": x})[0])


@pytest.mark.parametrize("samples", [0, 1, 2, 3, 4])
def test_below_the_range_is_refused_where_truncation_and_floor_differ(samples: int) -> None:
    m = expand_model()
    x = RNG.standard_normal((2, samples)).astype(np.float32)
    # onnxruntime truncates: 0 and 1 give 0 columns, 2 to 4 give 1 (floor: -1, -1, 0, 0, 0).
    assert _ort(m, x).shape == (2, {0: 0, 1: 0}.get(samples, 1))
    message = _refusal(m, x)
    assert f"samples = {samples} is outside its declared range [5" in message, message


def test_resize_of_an_empty_axis_is_refused() -> None:
    x = RNG.standard_normal((1, 3, 0, 8)).astype(np.float32)
    message = _refusal(resize_model(), x)
    assert "H = 0 is outside its declared range [1" in message, message


def test_declared_ranges_prove_the_sign_without_narrowing() -> None:
    program = dynshape.onnx.load(expand_model(), dims={"samples": (16, 4096)})
    assert program.ranges == {"samples": (16, 4096)}
    x = RNG.standard_normal((3, 16)).astype(np.float32)
    got = dynshape.VirtualMachine(dynshape.compile(program)).run(x)
    np.testing.assert_allclose(got, _ort(expand_model(), x), rtol=1e-5, atol=1e-5)


def test_a_range_where_the_numerator_is_never_non_negative_is_not_narrowed() -> None:
    # samples in [0, 4]: (samples - 3) // 2 - 1 < 0 throughout; nothing to narrow the second
    # division to, so it stays a run-time computation: the Expand's shape is known at run time
    # only (the importer's last try, which keeps the first division's narrowing, samples >= 3)
    # and truncates as ONNX does.
    program = dynshape.onnx.load(expand_model(), dims={"samples": (0, 4)})
    assert program.ranges == {"samples": (3, 4)}
    assert "dyn.ones" in str(program)
    machine = dynshape.VirtualMachine(dynshape.compile(program))
    with pytest.raises(dynshape.DynShapeError, match="samples"):
        machine.run(np.zeros((2, 2), np.float32))
    for samples in (3, 4):
        x = RNG.standard_normal((2, samples)).astype(np.float32)
        want = _ort(expand_model(), x)
        got = machine.run(x)
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_mod_fmod_of_a_dim_of_unknown_sign() -> None:
    # C's fmod of (s - 2) by 3 (the dividend's sign): folded for s >= 2, as Python's % there.
    nodes = [
        helper.make_node("Shape", ["x"], ["s_shape"], start=1, end=2),
        helper.make_node("Add", ["s_shape", "minus_2"], ["a"]),
        helper.make_node("Mod", ["a", "by_3"], ["r"], fmod=1),
        helper.make_node("Add", ["r", "one"], ["n"]),
        helper.make_node("Shape", ["x"], ["batch"], start=0, end=1),
        helper.make_node("Concat", ["batch", "n"], ["target"], axis=0),
        helper.make_node("ReduceSum", ["x", "shape_1"], ["total"], keepdims=1),
        helper.make_node("Expand", ["total", "target"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "mod",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "samples"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        _inits({2}, {3}),
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    feeds = [[RNG.standard_normal((2, s)).astype(np.float32)] for s in (2, 3, 4, 5, 9)]
    program = compare(m, *feeds)
    assert program.ranges == {"samples": (2, None)}
