"""``InferenceSession(..., batch_processes=2)``: half of a large batch in a worker process, with
the answers of one process (and onnxruntime's), only for models whose rows are proven
independent, and every error a user can hit."""

from __future__ import annotations

import os
import threading

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from model_builder import typed_model  # noqa: E402
from onnx import TensorProto, helper  # noqa: E402

import dynshape.batch_processes  # noqa: E402
from dynshape import InferenceSession, SessionError  # noqa: E402

pytestmark = pytest.mark.skipif(os.name != "posix", reason="the worker's socket is POSIX")


def _rows_model(reduce_batch: bool = False) -> bytes:
    """``y = softmax(x @ w)`` and ``z = sum(y)`` over its features (or, with ``reduce_batch``,
    over the batch: then rows are not independent)."""
    rng = np.random.default_rng(0)
    m = typed_model(
        [
            helper.make_node("MatMul", ["x", "w"], ["h"]),
            helper.make_node("Softmax", ["h"], ["y"], axis=-1),
            helper.make_node("ReduceSum", ["y", "axes"], ["z"], keepdims=0),
        ],
        [("x", TensorProto.FLOAT, ["batch", 8])],
        [
            ("y", TensorProto.FLOAT, ["batch", 5]),
            ("z", TensorProto.FLOAT, [5 if reduce_batch else "batch"]),
        ],
        {
            "w": rng.standard_normal((8, 5)).astype(np.float32),
            "axes": np.array([0 if reduce_batch else 1], np.int64),
        },
    )
    return m.SerializeToString()


@pytest.fixture()
def always_split(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(dynshape.batch_processes, "SPLIT_MIN_WORK", 0)
    monkeypatch.setattr(dynshape.batch_processes, "SPLIT_MIN_WORK_PER_BYTE", 0)


def test_split_session_answers_as_one_process_and_onnxruntime(always_split: None) -> None:
    model = _rows_model()
    ref = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    with InferenceSession(model, batch_processes=2) as sess:
        assert sess.row_split == "split along batch (input axes [0])"
        for batch in (2, 7, 40):
            x = np.random.default_rng(batch).standard_normal((batch, 8)).astype(np.float32)
            got, want = sess.run(None, {"x": x}), ref.run(None, {"x": x})
            for g, w in zip(got, want, strict=True):
                assert g.shape == w.shape and g.dtype == w.dtype
                np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
        assert sess._split is not None and sess._split.splits == 3
    assert sess.row_split == "not split: the session was closed"
    x = np.ones((4, 8), np.float32)
    assert sess.run(["z"], {"x": x})[0].shape == (4,)  # runs on, in this process


def _masked_model() -> bytes:
    """``y = x * mask`` with the mask gathered the way transformers' exports gather it: the
    ``(batch, seq)`` mask flattened, row ``i``'s entries at ``i * seq + j``, with row numbers
    from a running sum of ones over the batch (``ConstantOfShape`` + ``CumSum``)."""
    one = helper.make_tensor("one", TensorProto.INT64, [1], [1])
    m = typed_model(
        [
            helper.make_node("Reshape", ["mask", "flat"], ["mask_flat"]),
            helper.make_node("Shape", ["x"], ["shape"]),
            helper.make_node("Gather", ["shape", "zero"], ["batch"]),
            helper.make_node("Gather", ["shape", "one_index"], ["seq"]),
            helper.make_node("ConstantOfShape", ["batch"], ["ones_b"], value=one),
            helper.make_node("CumSum", ["ones_b", "axis0"], ["rows"], exclusive=1),
            helper.make_node("Unsqueeze", ["rows", "axis1"], ["rows_col"]),
            helper.make_node("Mul", ["rows_col", "seq"], ["starts"]),
            helper.make_node("ConstantOfShape", ["seq"], ["ones_s"], value=one),
            helper.make_node("CumSum", ["ones_s", "axis0"], ["cols"], exclusive=1),
            helper.make_node("Unsqueeze", ["cols", "axis0"], ["cols_row"]),
            helper.make_node("Add", ["starts", "cols_row"], ["index"]),
            helper.make_node("Gather", ["mask_flat", "index"], ["picked"], axis=0),
            helper.make_node("Cast", ["picked"], ["weights"], to=TensorProto.FLOAT),
            helper.make_node("Mul", ["x", "weights"], ["y"]),
        ],
        [("x", TensorProto.FLOAT, ["batch", "seq"]), ("mask", TensorProto.INT64, ["batch", "seq"])],
        [("y", TensorProto.FLOAT, ["batch", "seq"])],
        {
            "flat": np.array([-1], np.int64),
            "zero": np.array([0], np.int64),
            "one_index": np.array([1], np.int64),
            "axis0": np.array(0, np.int64),
            "axis1": np.array([1], np.int64),
        },
    )
    return m.SerializeToString()


def test_a_mask_gathered_at_row_numbers_is_split(always_split: None) -> None:
    model = _masked_model()
    ref = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    with InferenceSession(model, batch_processes=2) as sess:
        assert sess.row_split == "split along batch (input axes [0, 0])"
        for batch in (2, 7, 40):
            rng = np.random.default_rng(batch)
            feeds = {
                "x": rng.standard_normal((batch, 6)).astype(np.float32),
                "mask": rng.integers(0, 2, size=(batch, 6)).astype(np.int64),
            }
            (got,), (want,) = sess.run(None, feeds), ref.run(None, feeds)
            np.testing.assert_array_equal(got, want)
        assert sess._split is not None and sess._split.splits == 3


def test_small_calls_stay_in_this_process() -> None:
    with InferenceSession(_rows_model(), batch_processes=2) as sess:
        sess.run(None, {"x": np.ones((64, 8), np.float32)})
        assert sess._split is not None and sess._split.splits == 0  # far below SPLIT_MIN_WORK


def test_calls_moving_many_bytes_for_little_work_stay_in_this_process(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(dynshape.batch_processes, "SPLIT_MIN_WORK", 0)
    with InferenceSession(_rows_model(), batch_processes=2) as sess:
        # ~100 operations a row for 56 bytes of it: under SPLIT_MIN_WORK_PER_BYTE
        sess.run(None, {"x": np.ones((4096, 8), np.float32)})
        assert sess._split is not None and sess._split.splits == 0
        monkeypatch.setattr(dynshape.batch_processes, "SPLIT_MIN_WORK_PER_BYTE", 1)
        sess.run(None, {"x": np.ones((4095, 8), np.float32)})  # (new shapes: decided anew)
        assert sess._split.splits == 1


def test_a_model_reducing_the_batch_is_not_split(always_split: None) -> None:
    with InferenceSession(_rows_model(reduce_batch=True), batch_processes=2) as sess:
        assert sess.row_split.startswith("not split: along batch: sum")
        assert "reduces the rows" in sess.row_split
        x = np.random.default_rng(3).standard_normal((6, 8)).astype(np.float32)
        (z,) = sess.run(["z"], {"x": x})
        np.testing.assert_allclose(z, sess.run(["y"], {"x": x})[0].sum(axis=0), rtol=1e-6)


def test_default_is_one_process() -> None:
    sess = InferenceSession(_rows_model())
    assert sess.row_split == "not split: batch_processes=1"
    sess.close()  # nothing to stop


@pytest.mark.parametrize("bad", [0, 3, True, "2", 2.0])
def test_batch_processes_must_be_one_or_two(bad: object) -> None:
    with pytest.raises(SessionError, match=r"batch_processes must be 1 .* or 2 .*, got"):
        InferenceSession(_rows_model(), batch_processes=bad)  # type: ignore[arg-type]


def test_wrong_inputs_name_the_whole_batch(always_split: None) -> None:
    with InferenceSession(_rows_model(), batch_processes=2) as sess:
        with pytest.raises(dynshape.VMError, match=r"got shape \(10, 7\)"):
            sess.run(None, {"x": np.ones((10, 7), np.float32)})
        with pytest.raises(dynshape.VMError, match="float64"):
            sess.run(None, {"x": np.ones((10, 8), np.float64)})
        with pytest.raises(dynshape.VMError, match="no parameter 'y'"):
            sess.run(None, {"x": np.ones((10, 8), np.float32), "y": 1})


def test_threads_sharing_a_split_session(always_split: None) -> None:
    model = _rows_model()
    plain = InferenceSession(model)
    feeds = [
        {"x": np.random.default_rng(i).standard_normal((2 + 5 * i, 8)).astype(np.float32)}
        for i in range(5)
    ]
    want = [plain.run(None, f) for f in feeds]
    errors: list[BaseException] = []
    with InferenceSession(model, batch_processes=2) as sess:

        def worker(i: int) -> None:
            try:
                for _ in range(4):
                    for g, w in zip(sess.run(None, feeds[i]), want[i], strict=True):
                        np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-7)
            except BaseException as e:
                errors.append(e)

        threads = [threading.Thread(target=worker, args=(i,)) for i in range(len(feeds))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert not errors, errors[0]
