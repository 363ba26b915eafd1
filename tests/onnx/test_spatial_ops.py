"""The spatial converters (``dynshape/onnx/ops/spatial.py``, 3-d pools in ``ops/nn.py``) against
onnxruntime, over symbolic dims and several shapes, and their error messages."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from model_builder import compare, import_error, model, run
from onnx import helper
from onnx.reference import ReferenceEvaluator

RNG = np.random.default_rng(7)


def _m(nodes: list[Any], inputs: list[Any], outputs: list[str], **kw: Any) -> Any:
    """``model`` with float32 outputs (onnxruntime refuses untyped ones at these opsets)."""
    return model(nodes, inputs, outputs, output_dtypes=["float32"] * len(outputs), **kw)


def _x(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("mode", ["linear", "nearest", "cubic"])
@pytest.mark.parametrize("padding", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("align", [0, 1])
def test_grid_sample_2d(mode: str, padding: str, align: int) -> None:
    node = helper.make_node(
        "GridSample", ["x", "g"], ["y"], mode=mode, padding_mode=padding, align_corners=align
    )
    m = _m(
        [node],
        [("x", "float32", ["n", "c", "h", "w"]), ("g", "float32", ["n", "p", "q", 2])],
        ["y"],
        opset=20,
    )
    feeds = []
    for n, c, h, w, p, q in [(1, 1, 4, 5, 3, 2), (2, 3, 3, 6, 4, 4)]:
        # coordinates past [-1, 1] exercise the padding; away from pixel edges (nearest's ties)
        grid = RNG.uniform(-1.6, 1.6, (n, p, q, 2)).astype(np.float32)
        feeds.append([_x(n, c, h, w), grid])
    if mode == "cubic" and padding == "border":
        # onnxruntime (as PyTorch) leaves the coordinate unclamped for cubic taps; the spec's
        # reference clamps it outside [lo, hi] first, and so does dynshape
        for x, grid in feeds:
            want = ReferenceEvaluator(m).run(None, {"x": x, "g": grid})[0]  # type: ignore[index]
            np.testing.assert_allclose(run(m, x, grid), want, rtol=1e-4, atol=1e-5)
        return
    compare(m, *feeds, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("mode", ["linear", "nearest"])
def test_grid_sample_3d(mode: str) -> None:
    node = helper.make_node("GridSample", ["x", "g"], ["y"], mode=mode, padding_mode="border")
    m = _m(
        [node],
        [("x", "float32", ["n", 2, "d", "h", "w"]), ("g", "float32", ["n", 2, 3, 2, 3])],
        ["y"],
        opset=20,
    )
    grid = RNG.uniform(-1.2, 1.2, (2, 2, 3, 2, 3)).astype(np.float32)
    compare(m, [_x(2, 2, 3, 4, 5), grid])


def test_grid_sample_old_mode_names() -> None:
    """Before opset 20 the modes are ``bilinear``/``bicubic``."""
    node = helper.make_node("GridSample", ["x", "g"], ["y"], mode="bicubic")
    m = _m(
        [node], [("x", "float32", [1, 1, 4, 4]), ("g", "float32", [1, 2, 2, 2])], ["y"], opset=16
    )
    compare(m, [_x(1, 1, 4, 4), RNG.uniform(-1, 1, (1, 2, 2, 2)).astype(np.float32)])
    bad = helper.make_node("GridSample", ["x", "g"], ["y"], mode="cubic")
    m = _m([bad], [("x", "float32", [1, 1, 4, 4]), ("g", "float32", [1, 2, 2, 2])], ["y"], opset=16)
    assert "mode 'cubic' is not one of bilinear, nearest, bicubic" in import_error(m)


def test_grid_sample_bad_grid() -> None:
    node = helper.make_node("GridSample", ["x", "g"], ["y"])
    m = _m(
        [node], [("x", "float32", [1, 1, 4, 4]), ("g", "float32", [1, 2, 2, 3])], ["y"], opset=20
    )
    assert "the grid must be (N, *out, 2)" in import_error(m)


@pytest.mark.parametrize("align", [0, 1])
@pytest.mark.parametrize("size", [[2, 3, 4, 5], [2, 1, 3, 4, 2]])
def test_affine_grid(align: int, size: list[int]) -> None:
    r = len(size) - 2
    node = helper.make_node("AffineGrid", ["theta", "size"], ["y"], align_corners=align)
    m = _m(
        [node],
        [("theta", "float32", ["n", r, r + 1])],
        ["y"],
        initializers={"size": np.array(size, np.int64)},
        opset=20,
    )
    compare(m, [_x(size[0], r, r + 1)], [_x(size[0], r, r + 1)])


@pytest.mark.parametrize("mode", ["DCR", "CRD"])
def test_depth_to_space(mode: str) -> None:
    node = helper.make_node("DepthToSpace", ["x"], ["y"], blocksize=2, mode=mode)
    m = _m([node], [("x", "float32", ["n", 8, "h", "w"])], ["y"], opset=13)
    compare(m, [_x(1, 8, 2, 3)], [_x(2, 8, 3, 1)])


def test_space_to_depth() -> None:
    node = helper.make_node("SpaceToDepth", ["x"], ["y"], blocksize=2)
    m = _m([node], [("x", "float32", ["n", "c", 4, 6])], ["y"], opset=13)
    compare(m, [_x(1, 3, 4, 6)], [_x(2, 1, 4, 6)])
    sym = _m([node], [("x", "float32", ["n", "c", "h", 6])], ["y"], opset=13)
    assert "SpaceToDepth over the symbolic height h" in import_error(sym)
    odd = _m([node], [("x", "float32", [1, 1, 5, 6])], ["y"], opset=13)
    assert "the height (5) is not a multiple of blocksize (2)" in import_error(odd)


@settings(max_examples=8, deadline=None)
@given(
    p=st.sampled_from([1, 2, 3]),
    kernel=st.sampled_from([[2], [3, 2], [2, 2, 2]]),
    stride=st.integers(1, 2),
    pad=st.integers(0, 1),
)
def test_lp_pool(p: int, kernel: list[int], stride: int, pad: int) -> None:
    n = len(kernel)
    node = helper.make_node(
        "LpPool",
        ["x"],
        ["y"],
        p=p,
        kernel_shape=kernel,
        strides=[stride] * n,
        pads=[pad] * 2 * n,
    )
    dims = ["b", "c", *(["s"] * n)]
    m = _m([node], [("x", "float32", dims)], ["y"], opset=18)
    compare(m, [_x(1, 2, *[5] * n)], [_x(2, 1, *[4] * n)], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("op", ["MaxPool", "AveragePool"])
@pytest.mark.parametrize("ceil", [0, 1])
def test_pool_3d(op: str, ceil: int) -> None:
    extra: dict[str, Any] = {"count_include_pad": 1} if op == "AveragePool" else {}
    node = helper.make_node(
        op,
        ["x"],
        ["y"],
        kernel_shape=[2, 3, 2],
        strides=[2, 1, 2],
        pads=[1, 0, 1, 0, 1, 0],
        ceil_mode=ceil,
        **extra,
    )
    m = _m([node], [("x", "float32", ["n", "c", "d", "h", "w"])], ["y"], opset=19)
    compare(m, [_x(1, 2, 5, 4, 6)], [_x(2, 1, 4, 5, 3)])


@pytest.mark.parametrize(("size", "axes"), [([3, 6], None), ([5], [-1]), ([2, 7], [0, 2])])
def test_center_crop_pad(size: list[int], axes: list[int] | None) -> None:
    extra: dict[str, Any] = {"axes": axes} if axes is not None else {}
    node = helper.make_node("CenterCropPad", ["x", "s"], ["y"], **extra)
    m = _m(
        [node],
        [("x", "float32", [4, 3, 4] if axes else [4, 4])],
        ["y"],
        initializers={"s": np.array(size, np.int64)},
        opset=18,
    )
    compare(m, [_x(*([4, 3, 4] if axes else [4, 4]))])


def test_center_crop_pad_symbolic() -> None:
    node = helper.make_node("CenterCropPad", ["x", "s"], ["y"], axes=[1])
    inits = {"s": np.array([3], np.int64)}
    m = _m([node], [("x", "float32", ["n", 5])], ["y"], initializers=inits, opset=18)
    compare(m, [_x(1, 5)], [_x(3, 5)])
    m = _m([node], [("x", "float32", [2, "w"])], ["y"], initializers=inits, opset=18)
    assert "CenterCropPad of the symbolic dim w to 3" in import_error(m)


def test_max_unpool_inverts_max_pool() -> None:
    pool = helper.make_node("MaxPool", ["x"], ["p", "i"], kernel_shape=[2, 2], strides=[2, 2])
    unpool = helper.make_node("MaxUnpool", ["p", "i"], ["y"], kernel_shape=[2, 2], strides=[2, 2])
    m = _m(
        [pool, unpool],
        [("p", "float32", ["n", "c", 3, 2]), ("i", "int64", ["n", "c", 3, 2])],
        ["y"],
        opset=13,
    )
    m.graph.node.remove(m.graph.node[0])
    feeds = []
    for n, c in [(1, 1), (2, 3)]:
        idx = np.arange(n * c * 6 * 4).reshape(n, c, 6, 4)[:, :, ::2, ::2] + RNG.integers(
            0, 2, (n, c, 3, 2)
        )
        feeds.append([_x(n, c, 3, 2), idx.astype(np.int64)])
    compare(m, *feeds)


@pytest.mark.parametrize(
    ("image", "block", "attrs"),
    [
        ([5, 5], [2, 2], {}),
        ([5, 5], [2, 2], {"strides": [2, 2]}),
        ([5, 5], [2, 2], {"pads": [1, 0, 1, 1], "dilations": [2, 1]}),
        ([3, 4, 3], [2, 2, 1], {}),
    ],
)
def test_col2im(image: list[int], block: list[int], attrs: dict[str, Any]) -> None:
    n = len(image)
    strides = attrs.get("strides", [1] * n)
    dil = attrs.get("dilations", [1] * n)
    pads = attrs.get("pads", [0] * 2 * n)
    counts = [
        (image[i] + pads[i] + pads[i + n] - dil[i] * (block[i] - 1) - 1) // strides[i] + 1
        for i in range(n)
    ]
    node = helper.make_node("Col2Im", ["x", "im", "bl"], ["y"], **attrs)
    k, length = int(np.prod(block)), int(np.prod(counts))
    m = _m(
        [node],
        [("x", "float32", ["n", 2 * k, length])],
        ["y"],
        initializers={"im": np.array(image, np.int64), "bl": np.array(block, np.int64)},
        opset=18,
    )
    compare(m, [_x(1, 2 * k, length)], [_x(3, 2 * k, length)])


def test_col2im_errors() -> None:
    node = helper.make_node("Col2Im", ["x", "im", "bl"], ["y"])
    inits = {"im": np.array([5, 5], np.int64), "bl": np.array([2, 2], np.int64)}
    m = _m([node], [("x", "float32", [1, 6, 16])], ["y"], initializers=inits, opset=18)
    assert "input dim 1 (6) is not a multiple of prod(block_shape) = 4" in import_error(m)
    m = _m([node], [("x", "float32", [1, 4, 15])], ["y"], initializers=inits, opset=18)
    assert "input dim 2 (15) is not the number of blocks (16)" in import_error(m)


@pytest.mark.parametrize("order", [0, 1])
@pytest.mark.parametrize(
    "attrs",
    [
        {"kernel_shape": [2, 2], "strides": [2, 2]},
        {"kernel_shape": [3, 2], "pads": [1, 0, 1, 1], "ceil_mode": 1, "strides": [2, 2]},
        {"kernel_shape": [2], "dilations": [2]},
    ],
)
def test_max_pool_indices(order: int, attrs: dict[str, Any]) -> None:
    rank = len(attrs["kernel_shape"])
    node = helper.make_node("MaxPool", ["x"], ["y", "i"], storage_order=order, **attrs)
    spatial = [5, 6][:rank] if rank == 2 else [7]
    m = model(
        [node],
        [("x", "float32", ["n", "c", *spatial])],
        ["y", "i"],
        opset=13,
        output_dtypes=["float32", "int64"],
    )
    compare(m, [_x(1, 1, *spatial)], [_x(2, 3, *spatial)])


def test_max_pool_indices_symbolic_spatial() -> None:
    node = helper.make_node("MaxPool", ["x"], ["y", "i"], kernel_shape=[2, 2])
    m = _m([node], [("x", "float32", [1, 1, "h", 4])], ["y", "i"], opset=13)
    assert "MaxPool's Indices over symbolic spatial dims [h, 4]" in import_error(m)


@pytest.mark.parametrize("mode", ["linear", "cubic"])
@pytest.mark.parametrize("factor", [0.6, 0.3])
def test_resize_antialias(mode: str, factor: float) -> None:
    """Antialiased downsampling over static spatial dims (the weights are computed at import)
    under a symbolic batch."""
    node = helper.make_node("Resize", ["x", "", "s"], ["y"], mode=mode, antialias=1)
    scales = np.array([1, 1, factor, factor], np.float32)
    m = _m([node], [("x", "float32", ["n", 2, 9, 7])], ["y"], initializers={"s": scales}, opset=18)
    compare(m, [_x(1, 2, 9, 7)], [_x(3, 2, 9, 7)], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("mode", ["linear", "nearest"])
def test_resize_tf_crop_and_resize(mode: str) -> None:
    node = helper.make_node(
        "Resize",
        ["x", "roi", "", "sizes"],
        ["y"],
        mode=mode,
        coordinate_transformation_mode="tf_crop_and_resize",
        extrapolation_value=-3.0,
        axes=[2, 3],
    )
    inits = {
        "roi": np.array([0.2, -0.1, 0.9, 1.3], np.float32),
        "sizes": np.array([4, 5], np.int64),
    }
    m = _m([node], [("x", "float32", ["n", "c", 6, 5])], ["y"], initializers=inits, opset=18)
    # onnxruntime 1.32 differs from the spec's reference here (by up to the extrapolation
    # value, axes or not); the backend cases follow the reference, and so does dynshape
    for x in (_x(1, 1, 6, 5), _x(2, 3, 6, 5)):
        want = ReferenceEvaluator(m).run(None, {"x": x})[0]  # type: ignore[index]
        np.testing.assert_allclose(run(m, x), want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("mode", ["avg", "max"])
@pytest.mark.parametrize("coord", ["half_pixel", "output_half_pixel"])
def test_roi_align(mode: str, coord: str) -> None:
    node = helper.make_node(
        "RoiAlign",
        ["x", "rois", "idx"],
        ["y"],
        mode=mode,
        coordinate_transformation_mode=coord,
        output_height=3,
        output_width=4,
        sampling_ratio=2,
        spatial_scale=0.5,
    )
    m = _m(
        [node],
        [
            ("x", "float32", ["n", "c", "h", "w"]),
            ("rois", "float32", ["r", 4]),
            ("idx", "int64", ["r"]),
        ],
        ["y"],
        opset=16,
    )
    feeds = []
    for n, c, h, w, r in [(1, 2, 8, 9, 3), (2, 1, 6, 5, 4)]:
        corners = RNG.uniform(-2, 2 * max(h, w) + 2, (r, 2, 2)).astype(np.float32)
        rois = np.concatenate([corners.min(1), corners.max(1)], axis=1)  # x1 <= x2, y1 <= y2
        feeds.append([_x(n, c, h, w), rois, RNG.integers(0, n, r).astype(np.int64)])
    compare(m, *feeds)


def test_roi_align_adaptive_grid_is_unsupported() -> None:
    node = helper.make_node("RoiAlign", ["x", "rois", "idx"], ["y"])
    m = _m(
        [node],
        [("x", "float32", [1, 1, 4, 4]), ("rois", "float32", [2, 4]), ("idx", "int64", [2])],
        ["y"],
        opset=16,
    )
    assert "RoiAlign with sampling_ratio 0" in import_error(m)


@pytest.mark.parametrize(
    "attrs",
    [
        {},
        {"strides": [2, 1, 2], "pads": [1, 0, 0, 0, 1, 1], "output_padding": [1, 0, 1]},
        {"dilations": [1, 2, 1], "strides": [1, 2, 2]},
        {"strides": [2, 2, 2], "auto_pad": "SAME_UPPER"},
        {"strides": [3, 1, 1], "output_shape": [9, 5, 6]},
    ],
)
def test_conv_transpose_3d(attrs: dict[str, Any]) -> None:
    node = helper.make_node("ConvTranspose", ["x", "w", "b"], ["y"], **attrs)
    inits = {"w": _x(3, 2, 2, 3, 2), "b": _x(2)}
    m = _m([node], [("x", "float32", ["n", 3, 3, 4, 5])], ["y"], initializers=inits, opset=13)
    compare(m, [_x(1, 3, 3, 4, 5)], [_x(2, 3, 3, 4, 5)], rtol=1e-4, atol=1e-4)


def test_conv_transpose_3d_refusals() -> None:
    node = helper.make_node("ConvTranspose", ["x", "w"], ["y"], group=3)
    m = _m(
        [node],
        [("x", "float32", [1, 3, 3, 4, 5])],
        ["y"],
        initializers={"w": _x(3, 1, 2, 2, 2)},
        opset=13,
    )
    assert "3-d ConvTranspose with group > 1" in import_error(m)
    node = helper.make_node("ConvTranspose", ["x", "w"], ["y"])
    m = _m(
        [node],
        [("x", "float32", [1, 3, "d", 4, 5])],
        ["y"],
        initializers={"w": _x(3, 1, 2, 2, 2)},
        opset=13,
    )
    assert "3-d ConvTranspose over symbolic dims" in import_error(m)
