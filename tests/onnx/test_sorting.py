"""``Compress`` and ``Unique`` (``dynshape/onnx/ops/sorting.py``) against onnxruntime, with
symbolic and data-dependent dims."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

pytest.importorskip("onnxruntime")

from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import helper

from tests.onnx.model_builder import compare, import_error, model

RNG = np.random.default_rng(5)


@pytest.mark.parametrize("axis", [None, 0, 1, -1])
def test_compress_matches_onnxruntime(axis: int | None) -> None:
    attrs: dict[str, Any] = {} if axis is None else {"axis": axis}
    node = helper.make_node("Compress", ["x", "c"], ["y"], **attrs)
    length: Any = "n * 3" if axis is None else ("n" if axis == 0 else 3)
    cond_dims = ["k"] if axis is None else [length]
    m = model(
        [node],
        [("x", "float32", ["n", 3]), ("c", "bool", cond_dims)],
        ["y"],
        output_dtypes=["float32"],
    )
    feeds = []
    for n in (1, 4, 6):
        size = n * 3 if axis is None else (n if axis == 0 else 3)
        feeds.append(
            [RNG.standard_normal((n, 3)).astype(np.float32), RNG.integers(0, 2, size).astype(bool)]
        )
    compare(m, *feeds)


def test_compress_with_a_shorter_static_condition_cuts_the_axis() -> None:
    node = helper.make_node("Compress", ["x", "c"], ["y"], axis=1)
    m = model(
        [node], [("x", "float32", ["n", 5]), ("c", "bool", [3])], ["y"], output_dtypes=["float32"]
    )
    x = RNG.standard_normal((2, 5)).astype(np.float32)
    compare(m, [x, np.array([True, False, True])])


def test_compress_refuses_a_longer_condition() -> None:
    node = helper.make_node("Compress", ["x", "c"], ["y"], axis=0)
    m = model([node], [("x", "float32", [2, 3]), ("c", "bool", [4])], ["y"])
    assert "a condition of 4 for an axis of 2" in import_error(m)


def _unique_model(axis: int | None, keep_sorted: int, dims: list[Any], dtype: str) -> Any:
    attrs: dict[str, Any] = {"sorted": keep_sorted}
    if axis is not None:
        attrs["axis"] = axis
    node = helper.make_node("Unique", ["x"], ["y", "first", "inverse", "counts"], **attrs)
    outs = [dtype, "int64", "int64", "int64"]
    return model(
        [node], [("x", dtype, dims)], ["y", "first", "inverse", "counts"], output_dtypes=outs
    )


@settings(max_examples=15, deadline=None)
@given(
    axis=st.sampled_from([None, 0, 1, -1]),
    keep_sorted=st.sampled_from([0, 1]),
    dtype=st.sampled_from(["float32", "int64"]),
)
def test_unique_matches_onnxruntime(axis: int | None, keep_sorted: int, dtype: str) -> None:
    m = _unique_model(axis, keep_sorted, ["n", 3], dtype)
    compare(m, *[[RNG.integers(0, 3, (n, 3)).astype(dtype)] for n in (1, 4, 9)])


def test_unique_of_a_known_input_is_folded() -> None:
    node = helper.make_node("Unique", ["k"], ["y", "first", "inverse", "counts"], sorted=0)
    m = model(
        [node],
        [("x", "float32", [1])],
        ["y", "first", "inverse", "counts"],
        {"k": np.array([3, 1, 3, 2, 1], np.int64)},
        output_dtypes=["int64"] * 4,
    )
    m.graph.input.pop()
    compare(m, [])


def test_unique_refuses_bool() -> None:
    m = _unique_model(None, 1, [4], "bool")
    assert "Unique of a bool tensor" in import_error(m)
