"""The ``Resize`` converter of ``dynshape.onnx`` against onnxruntime: small models with
symbolic input dims, each compiled once and run at several sizes (the output type must stay
symbolic); the ONNX reference where onnxruntime computes otherwise; and the messages of the
variants refused."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from model_builder import compare, import_error  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

import dynshape  # noqa: E402
import dynshape.onnx  # noqa: E402
import ir  # noqa: E402
from dynshape.passes.infer_types import infer_types  # noqa: E402

RNG = np.random.default_rng(20261201)
FLOAT, INT64, UINT8 = TensorProto.FLOAT, TensorProto.INT64, TensorProto.UINT8
NCHW = ["N", "C", "H", "W"]


def model(
    inputs: Sequence[tuple[str, Any, list[Any]]],
    weights: dict[str, np.ndarray] | None = None,
    order: list[str] | None = None,
    nodes: list[Any] | None = None,
    opset: int = 19,
    **attrs: Any,
) -> Any:
    """A model ending in one Resize named ``the_resize`` (after ``nodes``); its inputs are
    ``order`` (default ``x, "", scales`` or ``x, "", "", sizes`` from ``weights``)."""
    weights = weights or {}
    if order is None:
        order = ["x", "", "scales"] if "scales" in weights else ["x", "", "", "sizes"]
    node = helper.make_node("Resize", order, ["y"], name="the_resize", **attrs)
    graph = helper.make_graph(
        [*(nodes or []), node],
        "g",
        [helper.make_tensor_value_info(n, t, dims) for n, t, dims in inputs],
        [helper.make_empty_tensor_value_info("y")],
        [numpy_helper.from_array(w, n) for n, w in weights.items()],
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 9
    return m


def output_type(program: Any) -> str:
    """The printed type of the program's result."""
    text = ir.text.printer.module_to_text(infer_types(program))
    return re.findall(r"ty=(Tensor\[[^\]]*\])", text)[-1]


def evaluate(m: Any, x: np.ndarray) -> np.ndarray:
    """The ONNX reference implementation's result of ``m`` at ``x``."""
    outputs: Any = ReferenceEvaluator(m).run(None, {"x": x})
    return np.asarray(outputs[0])


def rand(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def scales(*values: float) -> dict[str, np.ndarray]:
    return {"scales": np.array(values, np.float32)}


def sizes(*values: int) -> dict[str, np.ndarray]:
    return {"sizes": np.array(values, np.int64)}


X = [("x", FLOAT, NCHW)]
FEEDS = [[rand(1, 2, 3, 4)], [rand(2, 1, 5, 2)], [rand(1, 3, 1, 7)]]


# ---- scales: the exporters' upsampling --------------------------------------------------------


@pytest.mark.parametrize("mode", ["nearest", "linear"])
@pytest.mark.parametrize(
    "coord", ["half_pixel", "pytorch_half_pixel", "asymmetric", "half_pixel_symmetric"]
)
def test_scale_factor_two_is_symbolic(mode: str, coord: str) -> None:
    m = model(X, scales(1, 1, 2, 2), mode=mode, coordinate_transformation_mode=coord)
    program = compare(m, *FEEDS)
    assert output_type(program) == "Tensor[(N, C, 2*H, 2*W), float32]"


def test_fractional_scales_floor_the_exact_float() -> None:
    # 0.7f is 0.69999998...: floor(10 * 0.7f) is 6 in exact (and float64) arithmetic.
    m = model([("x", FLOAT, ["n", "m"])], scales(0.7, 1.5), mode="linear")
    program = dynshape.onnx.load(m)
    assert output_type(program) == "Tensor[(11744051*n // 16777216, 3*m // 2), float32]"
    vm = dynshape.VirtualMachine(dynshape.compile(program))
    for shape in [(10, 3), (4, 1), (7, 5)]:
        x = rand(*shape)
        np.testing.assert_allclose(vm.run(x), evaluate(m, x), rtol=1e-6)
    assert vm.run(rand(10, 2)).shape == (6, 3)


# ---- sizes: constants and computed from shapes -----------------------------------------------


@pytest.mark.parametrize(
    "coord",
    ["half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric", "half_pixel_symmetric"],
)
@pytest.mark.parametrize("nearest", ["round_prefer_floor", "round_prefer_ceil", "floor", "ceil"])
def test_nearest_to_sizes(coord: str, nearest: str) -> None:
    if (coord, nearest) == ("half_pixel_symmetric", "floor"):
        pytest.skip("onnxruntime's float32 coordinates land below integers (see test_kernels)")
    m = model(
        [("x", FLOAT, ["n", "c", "h", "w"])],
        sizes(2, 3, 7, 3),
        coordinate_transformation_mode=coord,
        nearest_mode=nearest,
    )
    program = compare(m, [rand(1, 1, 3, 4)], [rand(2, 3, 5, 2)], [rand(3, 2, 1, 9)])
    assert output_type(program) == "Tensor[(2, 3, 7, 3), float32]"


@pytest.mark.parametrize(
    "coord",
    ["half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric", "half_pixel_symmetric"],
)
def test_linear_to_sizes(coord: str) -> None:
    # (onnxruntime's linear resize takes 2-d and 3-d inputs, or 4-d ones with N and C kept)
    m = model(
        [("x", FLOAT, ["n", "h", "w"])],
        sizes(2, 6, 5),
        mode="linear",
        coordinate_transformation_mode=coord,
    )
    compare(m, [rand(1, 3, 4)], [rand(3, 8, 2)], [rand(2, 1, 1)])


def test_sizes_from_the_input_shape_stay_symbolic() -> None:
    # sizes = Concat(Shape(x)[:2], [64, 64]): what exporters write for a fixed output size.
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Slice", ["s", "zero", "two"], ["nc"]),
        helper.make_node("Concat", ["nc", "hw"], ["sizes"], axis=0),
    ]
    weights = {
        "zero": np.array([0], np.int64),
        "two": np.array([2], np.int64),
        "hw": np.array([6, 5], np.int64),
    }
    m = model(X, weights, ["x", "", "", "sizes"], nodes, mode="linear")
    program = compare(m, *FEEDS)
    assert output_type(program) == "Tensor[(N, C, 6, 5), float32]"


def test_axes_and_sizes_of_a_symbolic_dim() -> None:
    # sizes = 2 * Shape(x)[2:]: computed from shapes at import, symbolic, with opset 18's axes.
    nodes = [
        helper.make_node("Shape", ["x"], ["s"], start=2),
        helper.make_node("Mul", ["s", "two"], ["sizes"]),
    ]
    weights = {"two": np.array(2, np.int64)}
    m = model(X, weights, ["x", "", "", "sizes"], nodes, axes=[2, 3], mode="linear")
    program = compare(m, *FEEDS)
    assert output_type(program) == "Tensor[(N, C, 2*H, 2*W), float32]"


def test_axes_with_scales_leave_the_other_axes() -> None:
    m = model([("x", FLOAT, ["n", "m", "k"])], scales(3, 0.5), axes=[-1, 0], mode="linear")
    program = compare(m, [rand(2, 3, 4)], [rand(5, 1, 1)], [rand(1, 2, 3)])
    assert output_type(program) == "Tensor[(n // 2, m, 3*k), float32]"


@pytest.mark.parametrize("policy", ["not_larger", "not_smaller"])
def test_keep_aspect_ratio_policy(policy: str) -> None:
    m = model(
        [("x", FLOAT, [1, 1, 4, 6])], sizes(5, 5), axes=[2, 3], keep_aspect_ratio_policy=policy
    )
    program = compare(m, [rand(1, 1, 4, 6)])
    h, w = (3, 5) if policy == "not_larger" else (5, 8)
    assert output_type(program) == f"Tensor[(1, 1, {h}, {w}), float32]"
    # one axis: the ratio is the stretch's, so a symbolic dim is fine
    m = model([("x", FLOAT, ["n", "m"])], sizes(4), axes=[1], keep_aspect_ratio_policy=policy)
    compare(m, [rand(2, 3)], [rand(1, 7)])


def test_cubic_and_exclude_outside() -> None:
    for exclude in (0, 1):
        m = model(
            [("x", FLOAT, ["h", "w"])],
            sizes(7, 5),
            mode="cubic",
            exclude_outside=exclude,
            cubic_coeff_a=-0.5,
        )
        compare(m, [rand(3, 4)], [rand(9, 2)], [rand(1, 1)])


def test_tf_half_pixel_for_nn_and_uint8() -> None:
    m = model(X, sizes(1, 1, 7, 3), coordinate_transformation_mode="tf_half_pixel_for_nn")
    compare(m, [rand(2, 3, 3, 4)], [rand(1, 1, 5, 9)])
    m = model([("x", UINT8, ["h", "w"])], scales(2, 2), mode="linear")
    x = RNG.integers(0, 256, (3, 4)).astype(np.uint8)
    # onnxruntime truncates its float result into uint8 (the reference rounds): so do we
    # (here every blend is exact: halves and quarters of a scale of 2).
    compare(m, [x], [x[:1, :3]])


# ---- refusals -----------------------------------------------------------------------------


def test_refusals() -> None:
    def error(**kwargs: Any) -> str:
        weights = kwargs.pop("weights", scales(1, 1, 2, 2))
        order = kwargs.pop("order", None)
        return import_error(model(kwargs.pop("inputs", X), weights, order, **kwargs))

    prefix = "Resize 'the_resize': "
    crop = error(coordinate_transformation_mode="tf_crop_and_resize")
    assert prefix + "unsupported: tf_crop_and_resize with a roi computed from data" in crop
    symbolic = "unsupported: antialias or tf_crop_and_resize over the symbolic dim H"
    assert prefix + symbolic in error(antialias=1, mode="linear")
    assert "antialias with mode 'nearest' (linear and cubic only)" in error(antialias=1)
    assert "unsupported: exclude_outside with mode 'nearest'" in error(exclude_outside=1)
    assert prefix + "mode 'bilinear' is not one of nearest, linear, cubic" in error(mode="bilinear")
    assert "nearest_mode 'round' is not one of" in error(nearest_mode="round")
    assert "keep_aspect_ratio_policy 'fit' is not one of" in error(keep_aspect_ratio_policy="fit")
    both = {**scales(1, 1, 2, 2), **sizes(1, 1, 2, 2)}
    assert "exactly one of scales and sizes" in error(
        weights=both, order=["x", "", "scales", "sizes"]
    )
    assert "exactly one of scales and sizes" in error(weights={}, order=["x"])
    assert "3 scales for 4 axes" in error(weights=scales(1, 2, 2))
    assert "must be positive numbers" in error(weights=scales(1, 1, 0, 2))
    assert "2 sizes for 4 axes" in error(weights=sizes(3, 3))
    assert "must be >= 0" in error(weights=sizes(1, 1, -1, 2))
    assert "axes [2, -2] repeat an axis" in error(weights=scales(2, 2), axes=[2, -2])
    assert "axis 4 is out of range" in error(weights=scales(2), axes=[4])
    bools = [("x", TensorProto.BOOL, ["n"])]
    assert "linear Resize of a bool tensor" in error(inputs=bools, weights=scales(2), mode="linear")
    aspect = error(weights=sizes(5, 5), axes=[2, 3], keep_aspect_ratio_policy="not_larger")
    assert "unsupported: keep_aspect_ratio_policy 'not_larger' over several axes" in aspect
    assert prefix + "Resize of a scalar" in error(inputs=[("x", FLOAT, [])], weights=scales())
    empty = [("x", FLOAT, [1, 1, 0, 6])]
    aspect = error(
        inputs=empty, weights=sizes(5, 5), axes=[2, 3], keep_aspect_ratio_policy="not_smaller"
    )
    assert "keep_aspect_ratio_policy 'not_smaller' of an empty axis" in aspect
    data = [("x", FLOAT, ["n"]), ("s", FLOAT, [1])]
    assert "unsupported: scales computed from data" in error(inputs=data, order=["x", "", "s"])
    data = [("x", FLOAT, ["n", "m"]), ("s", INT64, [1])]
    some = error(inputs=data, order=["x", "", "", "s"], axes=[1])
    assert "unsupported: sizes computed from data for some axes" in some


def test_bool_nearest_moves_elements() -> None:
    m = model([("x", TensorProto.BOOL, ["n"])], scales(2.5))
    vm = dynshape.VirtualMachine(dynshape.compile(dynshape.onnx.load(m)))
    x = np.array([True, False, True])
    # the reference cannot cast back to bool: it resizes the same elements as 0.0 and 1.0
    floats = model([("x", FLOAT, ["n"])], scales(2.5))
    expected = evaluate(floats, x.astype(np.float32)).astype(bool)
    got = vm.run(x)
    assert got.dtype == np.bool_ and got.shape == (7,)
    np.testing.assert_array_equal(got, expected)
