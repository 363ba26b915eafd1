"""``dynshape.InferenceSession`` against onnxruntime's: the same calls give the same answers
and describe the model the same way (names, element types, dims), ``dynshape.compile`` of an
``.onnx`` path, and every error a user of the session can hit."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from model_builder import model, typed_model  # noqa: E402
from onnx import TensorProto, helper  # noqa: E402

import dynshape  # noqa: E402
from dynshape import InferenceSession, ModelImportError, SessionError, VMError  # noqa: E402


def _two_outputs() -> onnx.ModelProto:
    """``y = relu(x @ w)`` and ``z = sum(y, axis=1)``: two outputs, one symbolic dim."""
    rng = np.random.default_rng(0)
    m = typed_model(
        [
            helper.make_node("MatMul", ["x", "w"], ["h"]),
            helper.make_node("Relu", ["h"], ["y"]),
            helper.make_node("ReduceSum", ["y", "axes"], ["z"], keepdims=0),
        ],
        [("x", TensorProto.FLOAT, ["batch", 8])],
        [("y", TensorProto.FLOAT, ["batch", 5]), ("z", TensorProto.FLOAT, ["batch"])],
        {
            "w": rng.standard_normal((8, 5)).astype(np.float32),
            "axes": np.array([1], np.int64),
        },
    )
    m.producer_name = "a test"
    m.model_version = 3
    m.doc_string = "two outputs"
    helper.set_model_props(m, {"author": "dynshape"})
    return m


@pytest.fixture(scope="module")
def path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    p = tmp_path_factory.mktemp("session") / "two.onnx"
    onnx.save(_two_outputs(), str(p))
    return p


@pytest.fixture(scope="module")
def session(path: Path) -> InferenceSession:
    return InferenceSession(str(path))


def _reference(path: Path) -> ort.InferenceSession:
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])


@pytest.mark.parametrize("batch", [1, 3, 17])
def test_run_gives_onnxruntimes_answers(session: InferenceSession, path: Path, batch: int) -> None:
    x = np.random.default_rng(batch).standard_normal((batch, 8)).astype(np.float32)
    got = session.run(None, {"x": x})
    want = _reference(path).run(None, {"x": x})
    assert len(got) == len(want) == 2
    for g, w in zip(got, want, strict=True):
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)


def test_output_names_choose_and_order(session: InferenceSession) -> None:
    x = np.ones((2, 8), np.float32)
    y, z = session.run(None, {"x": x})
    (z2,) = session.run(["z"], {"x": x})
    z3, y3 = session.run(("z", "y"), {"x": x})
    np.testing.assert_array_equal(z2, z)
    np.testing.assert_array_equal(z3, z)
    np.testing.assert_array_equal(y3, y)
    assert session.run([], {"x": x}) == []


def test_inputs_and_outputs_described_as_onnxruntime_does(
    session: InferenceSession, path: Path
) -> None:
    ref = _reference(path)
    for ours, theirs in [
        (session.get_inputs(), ref.get_inputs()),
        (session.get_outputs(), ref.get_outputs()),
    ]:
        assert [a.name for a in ours] == [a.name for a in theirs]
        assert [a.type for a in ours] == [a.type for a in theirs]
    assert session.get_inputs()[0].shape == ["batch", 8]
    assert ref.get_inputs()[0].shape == ["batch", 8]
    assert session.get_outputs()[0].shape == ["batch", 5]
    assert session.get_outputs()[1].shape == ["batch"]


def test_model_metadata(session: InferenceSession) -> None:
    meta = session.get_modelmeta()
    assert meta.producer_name == "a test"
    assert meta.version == 3
    assert meta.description == "two outputs"
    assert meta.graph_name == "test"
    assert meta.custom_metadata_map == {"author": "dynshape"}
    assert session.get_providers() == ["CPUExecutionProvider"]


def test_bytes_and_proto_and_path_give_one_model(path: Path) -> None:
    x = np.arange(16, dtype=np.float32).reshape(2, 8)
    proto = onnx.load(str(path))
    answers = [
        InferenceSession(source).run(None, {"x": x})
        for source in (path, str(path), proto.SerializeToString(), proto)
    ]
    for other in answers[1:]:
        for a, b in zip(answers[0], other, strict=True):
            np.testing.assert_array_equal(a, b)


def test_dims_narrow_the_inputs(path: Path) -> None:
    sess = InferenceSession(path, dims={"batch": (1, 4)})
    sess.run(None, {"x": np.ones((4, 8), np.float32)})
    with pytest.raises(VMError, match="batch"):
        sess.run(None, {"x": np.ones((5, 8), np.float32)})


def test_compile_options_reach_the_compiler(path: Path) -> None:
    report = dynshape.CompileReport()
    InferenceSession(path, report=report)
    assert report.passes, "the compile report was not filled"


def test_a_shared_session_answers_every_thread_as_alone(session: InferenceSession) -> None:
    rng = np.random.default_rng(7)
    inputs = [rng.standard_normal((b, 8)).astype(np.float32) for b in (1, 2, 5, 9) * 4]
    alone = [session.run(None, {"x": x}) for x in inputs]
    got: list[list[np.ndarray] | None] = [None] * len(inputs)

    def work(i: int) -> None:
        for _ in range(20):
            got[i] = session.run(None, {"x": inputs[i]})

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(inputs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for want, have in zip(alone, got, strict=True):
        assert have is not None
        for a, b in zip(want, have, strict=True):
            np.testing.assert_array_equal(a, b)


def test_compile_takes_an_onnx_path(path: Path) -> None:
    x = np.ones((3, 8), np.float32)
    for source in (path, str(path)):
        out = dynshape.VirtualMachine(dynshape.compile(source)).run(x)
        assert out[0].shape == (3, 5) and out[1].shape == (3,)


def test_the_executable_keeps_the_output_names(path: Path, tmp_path: Path) -> None:
    exe = dynshape.compile(path)
    assert exe.output_names == ("y", "z")
    saved = tmp_path / "two.dsx"
    exe.save(str(saved))
    loaded = dynshape.Executable.load(str(saved))
    assert [p.name for p in loaded.named_outputs] == ["y", "z"]
    assert [p.type.shape for p in loaded.named_outputs] == [("batch", 5), ("batch",)]


def test_compile_of_a_missing_onnx_file_says_so(tmp_path: Path) -> None:
    missing = tmp_path / "absent.onnx"
    for source in (missing, str(missing)):
        with pytest.raises(ModelImportError, match="no such model file"):
            dynshape.compile(source)


def test_unknown_output_name_is_named_with_a_suggestion(session: InferenceSession) -> None:
    with pytest.raises(SessionError, match=r"no output 'yy' \(its outputs: y, z; did you mean"):
        session.run(["yy"], {"x": np.ones((1, 8), np.float32)})


def test_a_string_of_output_names_is_refused(session: InferenceSession) -> None:
    with pytest.raises(SessionError, match=r"write \['y'\]"):
        session.run("y", {"x": np.ones((1, 8), np.float32)})  # type: ignore[arg-type]


def test_feeds_must_be_a_mapping(session: InferenceSession) -> None:
    with pytest.raises(SessionError, match="input_feed must map input names to arrays"):
        session.run(None, [np.ones((1, 8), np.float32)])  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("feeds", "message"),
    [
        ({}, "missing argument.*'x'"),
        ({"x": np.ones((1, 8), np.float32), "w": np.ones(1)}, "no parameter 'w'"),
        ({"xx": np.ones((1, 8), np.float32)}, "did you mean 'x'"),
        ({"x": np.ones((1, 8), np.float64)}, "float64"),
        ({"x": np.ones((1, 7), np.float32)}, "x"),
    ],
)
def test_bad_feeds_are_named(session: InferenceSession, feeds: dict, message: str) -> None:
    with pytest.raises(VMError, match=message):
        session.run(None, feeds)


def test_providers(path: Path) -> None:
    InferenceSession(path, providers=["CPUExecutionProvider"])
    InferenceSession(path, providers=[("CPUExecutionProvider", {})])
    with pytest.raises(SessionError, match="'CUDAExecutionProvider' is not available"):
        InferenceSession(path, providers=["CUDAExecutionProvider"])


def test_a_bad_model_is_an_import_error() -> None:
    with pytest.raises(ModelImportError, match="not a readable ONNX model"):
        InferenceSession(b"not a model")
    bad = model([helper.make_node("NoSuchOp", ["x"], ["y"])], [("x", "float32", [2])], ["y"])
    with pytest.raises(ModelImportError, match="NoSuchOp"):
        InferenceSession(bad)


def test_elem_types_spelled_as_onnxruntime_does(tmp_path: Path) -> None:
    cast = typed_model(
        [helper.make_node("Cast", ["x"], ["y"], to=TensorProto.DOUBLE)],
        [("x", TensorProto.INT32, ["n"])],
        [("y", TensorProto.DOUBLE, ["n"])],
        {},
    )
    p = tmp_path / "cast.onnx"
    onnx.save(cast, str(p))
    ours, theirs = InferenceSession(p), _reference(p)
    assert [a.type for a in ours.get_inputs()] == [a.type for a in theirs.get_inputs()]
    assert ours.get_outputs()[0].type == "tensor(double)"
