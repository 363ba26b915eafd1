"""``NegativeLogLikelihoodLoss`` and ``SoftmaxCrossEntropyLoss`` against onnxruntime: every
reduction, with and without weights and ``ignore_index``, the ``log_prob`` output, 2-d to 5-d
inputs with symbolic dims, each model compiled once and run at several sizes."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from model_builder import compare, import_error, model, run  # noqa: E402
from onnx import helper  # noqa: E402

import dynshape  # noqa: E402

RNG = np.random.default_rng(20261202)
C = 5


def loss_model(
    op: str,
    extra: int,
    weights: bool = False,
    log_prob: bool = False,
    target_dtype: str = "int64",
    dtype: str = "float32",
    **attrs: Any,
) -> Any:
    """A one-node model on ``x: (N, C, d1..d_extra)`` and ``t: (N, d1..)``, symbolic but C."""
    spatial = [f"d{i}" for i in range(extra)]
    inputs: list[tuple[str, str, list[Any] | None]] = [
        ("x", dtype, ["N", C, *spatial]),
        ("t", target_dtype, ["N", *spatial]),
    ]
    names = ["x", "t"]
    if weights:
        inputs.append(("w", dtype, [C]))
        names.append("w")
    outputs = ["loss", "log_prob"] if log_prob else ["loss"]
    node = helper.make_node(op, names, outputs, **attrs)
    return model([node], inputs, outputs, output_dtypes=[dtype] * len(outputs))


def feeds(
    extra: int,
    weights: bool,
    ignore: int | None,
    target_dtype: str = "int64",
    dtype: str = "float32",
) -> list[list[np.ndarray]]:
    """Inputs at three sizes (batch 1 among them); about a third of the targets ignored."""
    out = []
    for n, d in ((1, 3), (4, 2), (3, 5)):
        shape = (n, *([d] * extra))
        x = RNG.standard_normal((shape[0], C, *shape[1:])).astype(dtype)
        t = RNG.integers(0, C, size=shape)
        if ignore is not None:
            t = np.where(RNG.random(shape) < 0.3, ignore, t)
        arrays = [x, t.astype(target_dtype)]
        if weights:
            arrays.append(RNG.random(C).astype(dtype) + 0.5)
        out.append(arrays)
    return out


CASES = [
    (reduction, extra, weights, ignore)
    for reduction in ("none", "sum", "mean")
    for extra, weights, ignore in ((0, False, None), (1, True, None), (2, False, 2), (3, True, -1))
] + [("mean", 1, True, 7), ("sum", 2, False, 0)]


@pytest.mark.parametrize(("reduction", "extra", "weights", "ignore"), CASES)
def test_nll_loss(reduction: str, extra: int, weights: bool, ignore: int | None) -> None:
    attrs: dict[str, Any] = {} if ignore is None else {"ignore_index": ignore}
    m = loss_model("NegativeLogLikelihoodLoss", extra, weights, reduction=reduction, **attrs)
    compare(m, *feeds(extra, weights, ignore))


@pytest.mark.parametrize(("reduction", "extra", "weights", "ignore"), CASES)
def test_softmax_cross_entropy(reduction: str, extra: int, weights: bool, ignore: Any) -> None:
    attrs: dict[str, Any] = {} if ignore is None else {"ignore_index": ignore}
    for log_prob in (False, True):
        m = loss_model(
            "SoftmaxCrossEntropyLoss", extra, weights, log_prob, reduction=reduction, **attrs
        )
        compare(m, *feeds(extra, weights, ignore))


def test_default_reduction_int32_targets_float64() -> None:
    """The default is ``mean``; int32 targets and float64 inputs work as well."""
    for op in ("NegativeLogLikelihoodLoss", "SoftmaxCrossEntropyLoss"):
        m = loss_model(op, 1, True, target_dtype="int32", dtype="float64", ignore_index=1)
        compare(m, *feeds(1, True, 1, target_dtype="int32", dtype="float64"))


@pytest.mark.filterwarnings("ignore:invalid value encountered")
def test_everything_ignored_is_nan() -> None:
    """``mean`` over nothing counted is 0/0, as in the ONNX reference."""
    m = loss_model("NegativeLogLikelihoodLoss", 0, ignore_index=3)
    x = RNG.standard_normal((2, C)).astype(np.float32)
    assert np.isnan(run(m, x, np.array([3, 3])))


def test_target_out_of_range_raises() -> None:
    """A target outside ``[0, C)`` that is not ignored is an error, not another element."""
    m = loss_model("NegativeLogLikelihoodLoss", 0, reduction="none", ignore_index=-100)
    x = RNG.standard_normal((2, C)).astype(np.float32)
    np.testing.assert_allclose(run(m, x, np.array([-100, 1])), [0, -x[1, 1]])
    for bad in (C, -1):
        with pytest.raises(dynshape.DynShapeError):
            run(m, x, np.array([bad, 1]))


def test_errors() -> None:
    nll = "NegativeLogLikelihoodLoss"
    assert "reduction='avg' is not one of none, sum, mean" in import_error(
        loss_model(nll, 1, reduction="avg")
    )
    node = helper.make_node(nll, ["x", "t"], ["y"])
    bad_rank = model([node], [("x", "float32", [2, C]), ("t", "int64", [2, 3])], ["y"])
    assert "the target must have rank 1" in import_error(bad_rank)
    bad_dim = model([node], [("x", "float32", [2, C, 4]), ("t", "int64", [2, 3])], ["y"])
    assert "target dim 1 is 3, the input's is 4" in import_error(bad_dim)
    scalar = model([node], [("x", "float32", [C]), ("t", "int64", [])], ["y"])
    assert "must have rank >= 2" in import_error(scalar)
    node = helper.make_node(nll, ["x", "t", "w"], ["y"])
    bad_w = model(
        [node],
        [("x", "float32", [2, C]), ("t", "int64", [2]), ("w", "float32", [C + 1])],
        ["y"],
    )
    assert "the weights must have shape [C] = [5]" in import_error(bad_w)
