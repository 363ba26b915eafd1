"""``ReverseSequence``, ``TensorScatter`` (``dynshape/onnx/ops/misc.py``) and ``Einsum``'s
diagonals against onnxruntime, with symbolic dims."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("onnxruntime")

from onnx import helper

from tests.onnx.model_builder import compare, import_error, model

RNG = np.random.default_rng(11)


@pytest.mark.parametrize("batch_axis,time_axis", [(0, 1), (1, 0)])
def test_reverse_sequence_matches_onnxruntime(batch_axis: int, time_axis: int) -> None:
    node = helper.make_node(
        "ReverseSequence", ["x", "lens"], ["y"], batch_axis=batch_axis, time_axis=time_axis
    )
    dims: list[object] = ["t", "b", 3] if time_axis == 0 else ["b", "t", 3]
    m = model(
        [node],
        [("x", "float32", dims), ("lens", "int64", ["b"])],
        ["y"],
        output_dtypes=["float32"],
    )
    feeds: list[list[np.ndarray]] = []
    for b, t in [(1, 1), (3, 5), (4, 7)]:
        shape = (t, b, 3) if time_axis == 0 else (b, t, 3)
        lens = RNG.integers(1, t + 1, b).astype(np.int64)
        feeds.append([RNG.standard_normal(shape).astype(np.float32), lens])
    compare(m, *feeds)


def test_reverse_sequence_refuses_other_axes() -> None:
    node = helper.make_node("ReverseSequence", ["x", "lens"], ["y"], batch_axis=0, time_axis=2)
    m = model([node], [("x", "float32", [2, 3, 4]), ("lens", "int64", [2])], ["y"])
    assert "must be 0 and 1" in import_error(m)


@pytest.mark.parametrize("mode", ["linear", "circular"])
def test_tensor_scatter_matches_onnxruntime(mode: str) -> None:
    node = helper.make_node("TensorScatter", ["cache", "update", "at"], ["y"], mode=mode)
    m = model(
        [node],
        [
            ("cache", "float32", ["b", 2, 6, 4]),
            ("update", "float32", ["b", 2, "s", 4]),
            ("at", "int64", ["b"]),
        ],
        ["y"],
        opset=24,
        output_dtypes=["float32"],
    )
    feeds: list[list[np.ndarray]] = []
    for b, s in [(1, 1), (2, 3), (3, 2)]:
        high = 6 if mode == "circular" else 6 - s + 1
        feeds.append(
            [
                RNG.standard_normal((b, 2, 6, 4)).astype(np.float32),
                RNG.standard_normal((b, 2, s, 4)).astype(np.float32),
                RNG.integers(0, high, b).astype(np.int64),
            ]
        )
    compare(m, *feeds)


def test_tensor_scatter_refuses_an_update_longer_than_the_cache() -> None:
    node = helper.make_node("TensorScatter", ["cache", "update"], ["y"])
    m = model(
        [node], [("cache", "float32", [2, 3, 4]), ("update", "float32", [2, 5, 4])], ["y"], opset=24
    )
    assert "longer than the cache" in import_error(m)


@pytest.mark.parametrize(
    "equation,shapes",
    [
        ("...ii->...i", [["b", 4, 4]]),
        ("ii->", [["n", "n"]]),
        ("iij,jk->ik", [[3, 3, "m"], ["m", 2]]),
        ("bii,bi->b", [["b", 5, 5], ["b", 5]]),
    ],
)
def test_einsum_diagonals_match_onnxruntime(equation: str, shapes: list[list[object]]) -> None:
    names = [f"x{i}" for i in range(len(shapes))]
    node = helper.make_node("Einsum", names, ["y"], equation=equation)
    inputs = [(n, "float32", s) for n, s in zip(names, shapes, strict=True)]
    m = model([node], inputs, ["y"], output_dtypes=["float32"])
    feeds: list[list[np.ndarray]] = []
    for size in (2, 5):
        env: dict[object, int] = {"b": size, "n": size, "m": size + 1}
        dims = [[env[d] if isinstance(d, str) else int(d) for d in s] for s in shapes]  # type: ignore[call-overload]
        feeds.append([RNG.standard_normal(d).astype(np.float32) for d in dims])
    compare(m, *feeds)


@pytest.mark.parametrize("mode", ["TF", "IDF", "TFIDF"])
@pytest.mark.parametrize("grams,skips", [((1, 2), 2), ((2, 2), 0), ((1, 1), 0)])
@pytest.mark.parametrize("batched", [False, True])
def test_tfidf_vectorizer_matches_onnxruntime(
    mode: str, grams: tuple[int, int], skips: int, batched: bool
) -> None:
    node = helper.make_node(
        "TfIdfVectorizer",
        ["x"],
        ["y"],
        mode=mode,
        min_gram_length=grams[0],
        max_gram_length=grams[1],
        max_skip_count=skips,
        ngram_counts=[0, 4],
        ngram_indexes=[0, 1, 2, 3, 4, 5, 6],
        pool_int64s=[2, 3, 5, 4, 5, 6, 7, 8, 6, 7],
        weights=[0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 3.5],
    )
    dims: list[object] = ["b", "n"] if batched else ["n"]
    m = model([node], [("x", "int64", dims)], ["y"], opset=17, output_dtypes=["float32"])
    feeds = []
    for b, n in [(1, 1), (2, 6), (3, 12)]:
        size = (b, n) if batched else (n,)
        feeds.append([RNG.integers(2, 9, size).astype(np.int64)])
    compare(m, *feeds)


def test_tfidf_vectorizer_refuses_strings() -> None:
    node = helper.make_node(
        "TfIdfVectorizer",
        ["x"],
        ["y"],
        mode="TF",
        min_gram_length=1,
        max_gram_length=1,
        max_skip_count=0,
        ngram_counts=[0],
        ngram_indexes=[0],
        pool_strings=["a"],
    )
    m = model([node], [("x", "int64", [4])], ["y"], opset=17)
    assert "over strings" in import_error(m)
