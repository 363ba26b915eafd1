"""``nn.attention``'s workspace: the scores are carved from a buffer of the size the op's rule
declares (``shape_funcs/ops/nn.py`` ``attention_workspace``), so the compiler's planned bytes
are all the kernel uses.

The oracle is the kernel without a workspace (its own allocation, as before): with the
declared workspace it must give the same bits and spill nothing (``Spills``), in one piece or
in bounded blocks; with an empty one it spills and still gives the same bits."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dynshape
from shape_funcs.workspace import workspace_bytes
from vm.kernels import attention as attention_module
from vm.kernels import get_kernel_factory
from vm.kernels.workspace import Spills

#: The head split of an exported model: (B, S, H, D) read as (B, H, S, D).
SPLIT = (0, 2, 1, 3)


def _case(draw: Any) -> tuple[dict[str, Any], list[np.ndarray], tuple[int, ...]]:
    """Attributes, operands (q, k, v, mask) and the result's shape of a drawn attention."""
    b, h = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    # q's rows times D times S_k past blas_threads.LOW: where the kernel makes the scores
    n, m = draw(st.integers(1, 3)) * 100 + 29, draw(st.integers(1, 3)) * 90 + 37
    d, dv = 32, draw(st.sampled_from([4, 8]))
    hk = draw(st.sampled_from([h, 1]))  # all heads, or one kv head broadcast
    split = draw(st.booleans())
    dtype = draw(st.sampled_from(["float32", "float64", "float16"]))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))

    def operand(heads: int, rows: int, cols: int) -> np.ndarray:
        shape = (b, rows, heads, cols) if split else (b, heads, rows, cols)
        return rng.standard_normal(shape).astype(dtype)

    q, k, v = operand(h, n, d), operand(hk, m, d), operand(hk, m, dv)
    mask = np.where(rng.random((b, 1, 1, m)) > 0.2, 0, -1e4).astype(dtype)
    axes = SPLIT if split else None
    attrs = {"scale": 0.25, "q_axes": axes, "k_axes": axes, "v_axes": axes, "out_axes": axes}
    result = (b, n, h, dv) if split else (b, h, n, dv)
    return attrs, [q, k, v, mask], result


def _run(
    attrs: dict[str, Any], ops: list[np.ndarray], result: tuple[int, ...], room: int | None
) -> np.ndarray:
    out = np.full(result, np.nan, ops[0].dtype)
    extra = [] if room is None else [np.empty(room, np.uint8)]
    get_kernel_factory("nn.attention")(attrs)(*ops, out, *extra)
    return out


def _declared(attrs: dict[str, Any], ops: list[np.ndarray], result: tuple[int, ...]) -> int:
    shapes = [o.shape for o in ops]
    nbytes = workspace_bytes("nn.attention", result, shapes, str(ops[0].dtype), attrs)
    assert isinstance(nbytes, int) and nbytes > 0
    return nbytes


@settings(max_examples=40, deadline=None)
@given(data=st.data(), blocks=st.booleans())
def test_the_scores_fit_the_declared_workspace(data: st.DataObject, blocks: bool) -> None:
    attrs, ops, result = _case(data.draw)
    with pytest.MonkeyPatch.context() as mp:
        if blocks:  # bounded blocks, one after the other in the same bytes
            mp.setattr(attention_module, "SCORES_MAX_BYTES", 4096)
            mp.setattr(attention_module, "SCORES_ALONE_BYTES", 4096)
        plain = _run(attrs, ops, result, None)
        before = Spills.count
        carved = _run(attrs, ops, result, _declared(attrs, ops, result))
        assert Spills.count == before, "the scores did not fit the declared workspace"
        np.testing.assert_array_equal(carved, plain, strict=True)
        before = Spills.count
        spilled = _run(attrs, ops, result, 0)
        assert Spills.count > before
        np.testing.assert_array_equal(spilled, plain, strict=True)


def test_a_compiled_attention_gets_a_planned_workspace() -> None:
    text = """
def @main(%q: Tensor[(b, h, n, 16), float32], %k: Tensor[(b, h, m, 16), float32],
          %v: Tensor[(b, h, m, 4), float32], %mask: Tensor[(b, 1, 1, m), float32]) {
  nn.attention(%q, %k, %v, %mask, scale=0.5)
}
"""
    manifest = str(dynshape.stages(text)["manifest"])
    assert "%workspace = memory.alloc_tensor" in manifest, manifest
    rng = np.random.default_rng(5)
    # past blas_threads.LOW (130 * 16 * 130): the scores are carved, not numpy's
    q = rng.standard_normal((2, 3, 130, 16)).astype(np.float32)
    k = rng.standard_normal((2, 3, 130, 16)).astype(np.float32)
    v = rng.standard_normal((2, 3, 130, 4)).astype(np.float32)
    mask = np.zeros((2, 1, 1, 130), np.float32)
    before = Spills.count
    got = dynshape.VirtualMachine(dynshape.compile(text)).run(q, k, v, mask)
    assert Spills.count == before
    scores = q.astype(np.float64) @ k.swapaxes(-1, -2) * 0.5
    p = np.exp(scores - scores.max(-1, keepdims=True))
    want = p / p.sum(-1, keepdims=True) @ v
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_large_scores_of_small_products_are_carved_too() -> None:
    """A batch of small products (each below ``blas_threads.LOW``) whose scores together pass
    ``NUMPY_SCORES_BYTES`` (an encoder's (4, 4, 64, 64)) uses the workspace; small scores (a
    decode step's) stay numpy's own allocation."""
    rng = np.random.default_rng(6)
    attrs = {"scale": 0.5, "q_axes": None, "k_axes": None, "v_axes": None, "out_axes": None}
    for shape, carved in (((4, 4, 64, 32), True), ((1, 4, 1, 32), False)):
        q, k, v = (rng.standard_normal(shape).astype(np.float32) for _ in range(3))
        ops = [q, k, v, np.zeros((), np.float32)]
        assert shape[-2] * shape[-1] * shape[-2] <= 65536 * 4  # below blas_threads.LOW
        plain = _run(attrs, ops, shape, None)
        before = Spills.count
        got = _run(attrs, ops, shape, 0)  # an empty workspace: a carved piece spills
        assert (Spills.count > before) == carved
        np.testing.assert_array_equal(got, plain, strict=True)
