"""Image ops: ``Resize`` (opsets 13-21), as the catalogue's ``resize``.

The output shape stays symbolic. Given ``sizes`` (known at import: constants, or computed from
shapes such as ``Concat(Shape(x)[:2], [64, 64])``), the output dims are those entries; the
kernel then takes each axis's scale as out/in at run time, as ONNX does. Given ``scales``, an
output dim is ``floor(dim * scale)`` with ``scale`` the exact value of the float32 in the
model (``sympy.Rational(float)``): ``scale_factor=2`` of ``(N, C, H, W)`` types as
``(N, C, 2*H, 2*W)``. ONNX's reference computes that product in float64, where it is exact
for any dim below 2**29, so the two agree; onnxruntime multiplies in float32 and can give one
more where the product lies within float32 rounding below an integer (``10 * 0.7f``).

Sizes computed from data (an exporter's float math on a shape that is not exact, such as
``floor(h * 0.75)``) give ``dyn.resize``, whose output dims are known at run time only.

``antialias`` and ``tf_crop_and_resize`` (a region of interest, with its
``extrapolation_value``) are per-axis affine maps, ``x @ W.T + b`` along each resized axis,
whose weights are the onnx reference's own 1-d interpolation of unit vectors, computed at
import: they need numbers for the resized dims and the ``roi``, and a float element type.

Refused as unsupported: scales computed from data (sizes too, for some axes
only or with an aspect policy),
``keep_aspect_ratio_policy`` other than ``stretch`` over several axes with symbolic dims (the
scale is a minimum or maximum of ratios of dims), and ``exclude_outside`` with ``nearest``.
``exclude_outside`` is passed on otherwise (it changes ``cubic`` only: a linear tap outside the
axis has the same element as the one inside, edge padding).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import sympy

import ir
from dynshape.builder import trace
from ir.ops.image import COORDINATE_MODES, NEAREST_MODES
from ir.ops.image import MODES as _MODES

from ..known import Known
from ..registry import Node, NodeError, Unsupported, converter
from .operands import normalize_axis, value_dtype, value_shape

_POLICIES = ("stretch", "not_larger", "not_smaller")


def _given(node: Node, i: int) -> Any:
    """Input ``i`` unless it is omitted or an empty tensor (ONNX's two ways to leave out
    ``roi``, ``scales`` or ``sizes``)."""
    value = node.input(i)
    if value is None or (isinstance(value, Known) and value.array.size == 0):
        return None
    return value


def _choice(node: Node, name: str, default: str, choices: tuple[str, ...]) -> str:
    value = node.attr(name, default)
    value = value.decode() if isinstance(value, bytes) else str(value)
    if value not in choices:
        raise NodeError(f"{name} {value!r} is not one of {', '.join(choices)}")
    return value


def _scaled(d: Any, scale: float) -> Any:
    """``floor(d * scale)`` with the exact value of the float ``scale``: an int for an int
    ``d``, else a dim (``2*H`` for a scale of 2)."""
    out = sympy.floor(sympy.sympify(d) * sympy.Rational(scale))
    return int(out) if out.is_Integer else ir.check_dim(out)


def _aspect(
    dims: list[Any], axes: list[int], sizes: list[Any], policy: str
) -> tuple[list[Any], float]:
    """``keep_aspect_ratio_policy`` ``not_larger``/``not_smaller``: one scale for every axis
    (the smallest or largest of sizes/dims), and the sizes it gives (``int(scale * dim +
    0.5)``), in float64 as the reference computes them. Needs ints where the ratios are
    compared (several axes)."""
    inputs = [dims[a] for a in axes]
    if not all(isinstance(v, int) for v in inputs + sizes):
        raise Unsupported(
            f"keep_aspect_ratio_policy {policy!r} over several axes with symbolic dims or sizes"
        )
    if 0 in inputs:
        raise NodeError(f"keep_aspect_ratio_policy {policy!r} of an empty axis (no ratio)")
    ratios = [s / d for s, d in zip(sizes, inputs, strict=True)]
    scale = min(ratios) if policy == "not_larger" else max(ratios)
    return [int(scale * d + 0.5) for d in inputs], scale


def _sizes_from_scales(
    scales_in: Any, dims: list[Any], axes: list[int]
) -> tuple[list[Any], list[float]]:
    """Resize's output dims and per-axis scales from its ``scales`` input (one per axis of
    ``axes``; the other axes keep scale 1)."""
    if not isinstance(scales_in, Known) or scales_in.numeric() is None:
        raise Unsupported("scales computed from data")
    given = [float(s) for s in np.asarray(scales_in.numeric()).reshape(-1)]
    if len(given) != len(axes):
        raise NodeError(f"{len(given)} scales for {len(axes)} axes")
    if not all(math.isfinite(s) and s > 0 for s in given):
        raise NodeError(f"scales {given} must be positive numbers")
    out = list(dims)
    scales = [1.0] * len(dims)
    for a, s in zip(axes, given, strict=True):
        scales[a] = s
        out[a] = _scaled(dims[a], s)
    return out, scales


def _sizes_given(
    sizes_in: Any, dims: list[Any], axes: list[int], policy: str
) -> tuple[list[Any], list[float] | None]:
    """Resize's output dims from its ``sizes`` input (one per axis of ``axes``), fitted to
    ``keep_aspect_ratio_policy``; the scales only when the policy sets one for every axis."""
    if not isinstance(sizes_in, Known):
        raise Unsupported("sizes computed from data")
    sizes = [int(s) if isinstance(s, (int, np.integer)) else s for s in sizes_in.dims()]
    if len(sizes) != len(axes):
        raise NodeError(f"{len(sizes)} sizes for {len(axes)} axes")
    if any(isinstance(s, int) and s < 0 for s in sizes):
        raise NodeError(f"sizes {sizes} must be >= 0")
    scales: list[float] | None = None
    if policy != "stretch" and len(axes) > 1:
        sizes, scale = _aspect(dims, axes, sizes, policy)
        scales = [scale if a in axes else 1.0 for a in range(len(dims))]
    out = list(dims)
    for a, s in zip(axes, sizes, strict=True):
        out[a] = s
    return out, scales


@converter("Resize")
def resize(node: Node) -> Any:
    """``resize`` with the output sizes worked out at import (see the module doc)."""
    dims = list(value_shape(node.input(0)))
    rank = len(dims)
    mode = _choice(node, "mode", "nearest", _MODES)
    coord = _choice(
        node,
        "coordinate_transformation_mode",
        "half_pixel",
        (*COORDINATE_MODES, "tf_crop_and_resize"),
    )
    nearest = _choice(node, "nearest_mode", "round_prefer_floor", NEAREST_MODES)
    policy = _choice(node, "keep_aspect_ratio_policy", "stretch", _POLICIES)
    antialias = bool(node.attr("antialias", 0))
    if antialias and mode == "nearest":
        raise NodeError("antialias with mode 'nearest' (linear and cubic only)")
    exclude = bool(node.attr("exclude_outside", 0))
    if exclude and mode == "nearest":
        # the reference gives the samples outside weight 0 (zeros near the edges);
        # onnxruntime refuses it: no model relies on either
        raise Unsupported("exclude_outside with mode 'nearest'")
    if mode != "nearest" and value_dtype(node.input(0)) == "bool":
        raise NodeError(f"{mode} Resize of a bool tensor")
    if rank == 0:
        raise NodeError("Resize of a scalar")
    axes_attr = node.attr("axes")
    axes = (
        list(range(rank))
        if axes_attr is None
        else [normalize_axis(int(a), rank) for a in axes_attr]
    )
    if len(set(axes)) != len(axes):
        raise NodeError(f"axes {list(axes_attr)} repeat an axis")

    scales_in, sizes_in = _given(node, 2), _given(node, 3)
    if (scales_in is None) == (sizes_in is None):
        raise NodeError("exactly one of scales and sizes must be given")
    interpolation = {
        "mode": mode,
        "coordinate_transformation_mode": coord,
        "nearest_mode": nearest,
        "cubic_coeff_a": float(node.attr("cubic_coeff_a", -0.75)),
        "exclude_outside": exclude,
    }
    if sizes_in is not None and not isinstance(sizes_in, Known):
        # sizes computed from data (an exporter's float math on a shape): known at run time
        # only, on the importer's last try (the others may find the sizes as dims)
        if node.domain is not None and not node.domain.run_time_sizes:
            raise Unsupported("sizes computed from data")
        if axes != list(range(rank)) or policy != "stretch":
            raise Unsupported("sizes computed from data for some axes or with an aspect policy")
        return trace.apply("dyn.resize", node.tensor(0), node.tensor(3), **interpolation)
    scales: list[float] | None
    if scales_in is not None:
        out, scales = _sizes_from_scales(scales_in, dims, axes)
    else:
        out, scales = _sizes_given(sizes_in, dims, axes, policy)
    if antialias or coord == "tf_crop_and_resize":
        return _by_matrices(node, dims, axes, out, scales, interpolation, antialias)
    return trace.apply("resize", node.tensor(0), sizes=out, scales=scales, **interpolation)


def _by_matrices(
    node: Node,
    dims: list[Any],
    axes: list[int],
    out: list[Any],
    scales: list[float] | None,
    interpolation: dict[str, Any],
    antialias: bool,
) -> Any:
    """``antialias`` and ``tf_crop_and_resize``: per resized axis (in the order of ``axes``,
    as the reference), an affine map of that axis, ``x @ W.T + b``, whose ``W`` and ``b``
    (the extrapolation value where a coordinate falls outside the region of interest) are the
    onnx reference's own 1-d interpolation of the unit vectors and of zeros, computed at
    import. Needs numbers for the resized dims and the ``roi``, and a float element type."""
    from onnx.reference.ops import op_resize as ref

    dtype = value_dtype(node.input(0))
    if dtype not in ("float16", "float32", "float64"):
        raise Unsupported(f"antialias or tf_crop_and_resize of {dtype} (a float type is supported)")
    mode, coord = interpolation["mode"], interpolation["coordinate_transformation_mode"]
    rank = len(dims)
    roi: list[float] | None = None
    if coord == "tf_crop_and_resize":
        given = _given(node, 1)
        if not isinstance(given, Known) or given.numeric() is None:
            raise Unsupported("tf_crop_and_resize with a roi computed from data")
        values = [float(v) for v in np.asarray(given.numeric()).reshape(-1)]
        if len(values) != 2 * len(axes):
            raise NodeError(f"roi has {len(values)} entries for {len(axes)} axes")
        roi = [0.0] * rank + [1.0] * rank
        for i, a in enumerate(axes):
            roi[a], roi[rank + a] = values[i], values[len(axes) + i]
    a_cubic = interpolation["cubic_coeff_a"]
    coeffs: Callable[[float, float], Any]
    if mode == "nearest":
        nearest = interpolation["nearest_mode"]

        def nearest_coeffs(x: float, scale: float) -> Any:
            return ref._nearest_coeffs(x, mode=nearest)

        coeffs = nearest_coeffs
    elif mode == "cubic":
        cubic = ref._cubic_coeffs_antialias if antialias else ref._cubic_coeffs

        def cubic_coeffs(x: float, scale: float) -> Any:
            return cubic(x, scale, A=a_cubic)

        coeffs = cubic_coeffs
    else:
        coeffs = ref._linear_coeffs_antialias if antialias else ref._linear_coeffs
    x = node.tensor(0)
    for a in axes:
        size, target = dims[a], out[a]
        crop = None if roi is None else [roi[a], roi[rank + a]]
        whole = crop is None or (math.isclose(crop[0], 0.0) and math.isclose(crop[1], 1.0))
        if whole and target == size and (scales is None or math.isclose(scales[a], 1.0)):
            continue  # the reference leaves such an axis as it is
        if not (isinstance(size, int) and isinstance(target, int)):
            symbolic = size if not isinstance(size, int) else target
            raise Unsupported(
                f"antialias or tf_crop_and_resize over the symbolic dim {symbolic} "
                f"(its interpolation weights are computed at import)"
            )
        scale = scales[a] if scales is not None else (target / size if size else 1.0)
        if whole and target == size and math.isclose(scale, 1.0):
            continue
        kwargs = {
            "roi": crop,
            "extrapolation_value": float(node.attr("extrapolation_value", 0.0)),
            "coordinate_transformation_mode": coord,
            "exclude_outside": interpolation["exclude_outside"],
        }
        full = ref._interpolate_1d_along_axis(np.eye(size), 0, scale, target, coeffs, **kwargs)
        bias = ref._interpolate_1d_along_axis(
            np.zeros((size, 1)), 0, scale, target, coeffs, **kwargs
        )
        weight = np.asarray(full) - np.asarray(bias)  # (target, size)
        perm = [*(i for i in range(rank) if i != a), a]
        moved = trace.apply("transpose", x, axes=perm) if a != rank - 1 else x
        moved = trace.apply("nn.dense", moved, trace.constant(weight.astype(dtype), dtype))
        if np.any(bias):
            moved = trace.apply(
                "add", moved, trace.constant(np.asarray(bias).reshape(-1).astype(dtype), dtype)
            )
        back = [perm.index(i) for i in range(rank)]
        x = trace.apply("transpose", moved, axes=back) if a != rank - 1 else moved
    return x
