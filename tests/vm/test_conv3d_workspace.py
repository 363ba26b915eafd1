"""``nn.conv3d``: the kernel against a float64 reference, and its workspace: with the bytes
its rule declares it carves every array (the stacked depth taps, the 2-d result, the 2-d
kernel's scratch) and spills nothing, with the bits of the kernel run without one; a too small
or overlapping workspace still gives those bits."""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import given
from hypothesis import strategies as st
from vm_testlib import KERNEL_SETTINGS

from dynshape.testing.numpy_nn import NN_OPS
from shape_funcs.workspace import workspace_bytes
from vm.kernels import get_kernel_factory
from vm.kernels.workspace import Spills


@st.composite
def _cases(draw: st.DrawFn) -> tuple[np.ndarray, np.ndarray, dict[str, Any], tuple[int, ...]]:
    groups = draw(st.sampled_from([1, 2]))
    cg, og = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    kernel = [draw(st.integers(1, 3)) for _ in range(3)]
    strides = [draw(st.integers(1, 2)) for _ in range(3)]
    dilation = [draw(st.integers(1, 2)) for _ in range(3)]
    padding = [draw(st.integers(0, 2)) for _ in range(6)]
    sizes = []
    for a in range(3):
        least = max(1, dilation[a] * (kernel[a] - 1) + 1 - padding[a] - padding[3 + a])
        sizes.append(draw(st.integers(least, least + 4)))
    n = draw(st.integers(1, 2))
    rng = np.random.default_rng(draw(st.integers(0, 99)))
    x = rng.standard_normal((n, groups * cg, *sizes)).astype(np.float32)
    w = rng.standard_normal((groups * og, cg, *kernel)).astype(np.float32)
    attrs = {"strides": strides, "padding": padding, "dilation": dilation, "groups": groups}
    out = tuple(
        (sizes[a] + padding[a] + padding[3 + a] - dilation[a] * (kernel[a] - 1) - 1) // strides[a]
        + 1
        for a in range(3)
    )
    return x, w, attrs, (n, groups * og, *out)


@KERNEL_SETTINGS
@given(case=_cases())
def test_the_kernel_is_the_definition_and_fits_its_declared_workspace(case):
    x, w, attrs, shape = case
    kernel = get_kernel_factory("nn.conv3d")(attrs)
    plain = np.full(shape, np.nan, np.float32)
    kernel(x, w, plain)
    np.testing.assert_allclose(plain, NN_OPS["nn.conv3d"]([x, w], attrs), rtol=1e-4, atol=1e-4)
    nbytes = workspace_bytes("nn.conv3d", shape, [x.shape, w.shape], "float32", attrs)
    assert isinstance(nbytes, int) and nbytes > 0
    carved = np.full(shape, 7, np.float32)
    before = Spills.count
    kernel(x, w, carved, np.empty(nbytes, np.uint8))
    assert Spills.count == before, "a piece did not fit the declared workspace"
    np.testing.assert_array_equal(carved, plain)
    for workspace in (np.empty(nbytes // 3, np.uint8), x.view(np.uint8).reshape(-1)):
        again = np.full(shape, 7, np.float32)
        kernel(x, w, again, workspace)  # too small, or overlapping an input: not used
        np.testing.assert_array_equal(again, plain)
