"""Weights in external files (ONNX's external data): read from the model file's directory, or,
for a model given as bytes or a proto, only from the directory the caller names; never from
the current directory, and never outside the named one."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import dynshape  # noqa: E402
import dynshape.onnx  # noqa: E402
from dynshape import ModelImportError  # noqa: E402

W = np.arange(12, dtype=np.float32).reshape(4, 3)


def _model() -> onnx.ModelProto:
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 3])],
        [numpy_helper.from_array(W, "w")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.fixture
def saved(tmp_path: Path) -> Path:
    """The model saved with its weight in ``weights.bin`` beside it."""
    path = tmp_path / "model" / "m.onnx"
    path.parent.mkdir()
    onnx.save(
        _model(),
        str(path),
        save_as_external_data=True,
        location="weights.bin",
        size_threshold=0,
    )
    assert (path.parent / "weights.bin").exists()
    return path


def _run(program: dynshape.builder.Program) -> np.ndarray:
    x = np.ones((2, 4), np.float32)
    return dynshape.VirtualMachine(dynshape.compile(program)).run(x)


def test_a_path_reads_its_own_directory(saved: Path) -> None:
    np.testing.assert_array_equal(_run(dynshape.onnx.load(saved)), np.ones((2, 4)) @ W)


def test_bytes_read_only_the_named_directory(saved: Path, monkeypatch, tmp_path: Path) -> None:
    data = saved.read_bytes()
    monkeypatch.chdir(saved.parent)  # the weights are right here, and must not be read
    with pytest.raises(ModelImportError, match="external_data_dir=DIR"):
        dynshape.onnx.load(data)
    program = dynshape.onnx.load(data, external_data_dir=saved.parent)
    np.testing.assert_array_equal(_run(program), np.ones((2, 4)) @ W)


def test_a_proto_is_left_as_it_was(saved: Path) -> None:
    proto = onnx.load(str(saved), load_external_data=False)
    dynshape.onnx.load(proto, external_data_dir=saved.parent)
    assert onnx.external_data_helper.uses_external_data(proto.graph.initializer[0])


def test_a_session_takes_the_directory(saved: Path) -> None:
    sess = dynshape.InferenceSession(saved.read_bytes(), external_data_dir=saved.parent)
    (y,) = sess.run(None, {"x": np.ones((1, 4), np.float32)})
    np.testing.assert_array_equal(y, np.ones((1, 4)) @ W)


def test_a_location_outside_the_directory_is_refused(saved: Path, tmp_path: Path) -> None:
    proto = onnx.load(str(saved), load_external_data=False)
    for entry in proto.graph.initializer[0].external_data:
        if entry.key == "location":
            entry.value = "../model/weights.bin"
    other = tmp_path / "other"
    other.mkdir()
    with pytest.raises(ModelImportError, match="external data cannot be read"):
        dynshape.onnx.load(proto, external_data_dir=other)


def test_a_missing_directory_is_named(saved: Path, tmp_path: Path) -> None:
    with pytest.raises(ModelImportError, match="is not a directory"):
        dynshape.onnx.load(saved.read_bytes(), external_data_dir=tmp_path / "absent")
