"""Opsets 26 to 28: what changed in the ops the importer converts is followed (``Range``'s
``stash_type``, ``Mod`` of floats with ``fmod=0``), each checked against onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from model_builder import compare, import_error, model  # noqa: E402
from onnx import helper  # noqa: E402

from dynshape.onnx.model import OPSETS  # noqa: E402


def test_the_opsets_of_the_installed_onnx_are_read() -> None:
    assert OPSETS.stop - 1 >= 28
    assert OPSETS.stop - 1 <= onnx.defs.onnx_opset_version()


def _mod(opset: int, fmod: int = 0) -> onnx.ModelProto:
    return model(
        [helper.make_node("Mod", ["a", "b"], ["c"], fmod=fmod)],
        [("a", "float32", ["n"]), ("b", "float32", ["n"])],
        ["c"],
        opset=opset,
        output_dtypes=["float32"],
    )


def test_float_mod_with_the_divisors_sign_from_opset_28() -> None:
    a = np.array([-5, 5, -0.0, 0.0, 7.5, np.inf, 1, -1, np.nan, 3], np.float32)
    b = np.array([3, -3, 2, -2, 2, 3, np.inf, np.inf, 1, 0], np.float32)
    rng = np.random.default_rng(0)
    x = (rng.standard_normal(50) * 10).astype(np.float32)
    y = (rng.standard_normal(50) * 3).astype(np.float32)
    compare(_mod(28), [a, b], [x, y])
    compare(_mod(28, fmod=1), [x, y])


def test_float_mod_with_fmod_0_is_refused_before_opset_28() -> None:
    assert "needs fmod=1 before opset 28" in import_error(_mod(25))


def _range(opset: int, **attrs: int) -> onnx.ModelProto:
    return model(
        [helper.make_node("Range", ["start", "limit", "delta"], ["y"], **attrs)],
        [("start", "float16", []), ("limit", "float16", []), ("delta", "float16", [])],
        ["y"],
        opset=opset,
        output_dtypes=["float16"],
    )


@pytest.mark.parametrize("attrs", [{}, {"stash_type": 1}, {"stash_type": 11}])
def test_float16_range_counts_in_its_stash_type(attrs: dict[str, int]) -> None:
    # 2000 + 0.3 i: counted in float16 the steps would round away
    bounds = [np.array(v, np.float16) for v in (2000, 2030, 0.3)]
    compare(_range(27, **attrs), bounds, [np.array(v, np.float16) for v in (0, 7, 0.5)])


def test_an_unknown_stash_type_is_refused() -> None:
    assert "stash_type=0: expected 1 (float) or 11 (double)" in import_error(
        _range(27, stash_type=0)
    )
