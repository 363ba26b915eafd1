"""Each converter against torch: a one-op module per case, exported with a dynamic batch,
run at two sizes (``b`` in ``[1, 16]``: 1 and 5) and compared with torch's eager result."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

# torch.export, not torch: without torch installed, "torch" would import tests/torch itself
# (a namespace package: tests/ is on the path)
pytest.importorskip("torch.export")
import torch
import torch.nn.functional as F
from torch import nn
from torch.export import Dim, export

import dynshape
import dynshape.torch as dstorch


def rnd(*shape: int) -> Callable[[int], Any]:
    return lambda b: torch.randn(b, *shape)


def ints(high: int, *shape: int) -> Callable[[int], Any]:
    return lambda b: torch.randint(0, high, (b, *shape))


def pos(*shape: int) -> Callable[[int], Any]:
    return lambda b: torch.rand(b, *shape) + 0.5


class Op(nn.Module):
    def __init__(self, fn: Callable[..., Any], params: dict[str, Any] | None = None) -> None:
        super().__init__()
        self.fn = fn
        for name, value in (params or {}).items():
            self.register_buffer(name, value)

    def forward(self, *args: Any) -> Any:
        return self.fn(self, *args)


T = torch
W44 = torch.randn(4, 4)
CASES: dict[str, tuple[Callable[..., Any], list[Callable[[int], Any]]]] = {
    # arithmetic and promotion
    "add_alpha": (lambda m, x, y: torch.add(x, y, alpha=2), [rnd(3), rnd(3)]),
    "sub_scalar": (lambda m, x: x - 1.5, [rnd(3)]),
    "rsub": (lambda m, x: 2 - x, [rnd(3)]),
    "mul_broadcast": (lambda m, x, y: x * y[:, :1], [rnd(3), rnd(3)]),
    "div": (lambda m, x, y: x / y, [rnd(3), pos(3)]),
    "int_times_float": (lambda m, x: x * 1.5, [ints(9, 3)]),
    "int_true_div": (lambda m, x: x / 2, [ints(9, 3)]),
    "floor_div": (lambda m, x, y: torch.div(x, y, rounding_mode="floor"), [rnd(3), pos(3)]),
    "trunc_div": (lambda m, x, y: torch.div(x, y, rounding_mode="trunc"), [rnd(3), pos(3)]),
    "remainder": (lambda m, x, y: x % y + torch.remainder(x, -1.5) + (x // y), [rnd(3), pos(3)]),
    "int_remainder": (lambda m, x: (x - 4) % 3 + (x - 4) // 3, [ints(9, 3)]),
    "pow_scalar": (lambda m, x: x**3, [rnd(3)]),
    "pow_tensor": (lambda m, x, y: x**y, [pos(3), rnd(3)]),
    "max_min": (lambda m, x, y: torch.maximum(x, y) + torch.minimum(x, y), [rnd(3), rnd(3)]),
    "square": (lambda m, x: torch.square(x), [rnd(3)]),
    # activations and unary
    "unary": (
        lambda m, x: (
            torch.sigmoid(x)
            + torch.tanh(x)
            + torch.exp(x)
            - torch.erf(x)
            + torch.sin(x) * torch.cos(x)
            + torch.floor(x)
            + torch.ceil(x)
            - torch.abs(-x)
        ),
        [rnd(3)],
    ),
    "roots_logs": (lambda m, x: torch.sqrt(x) + torch.rsqrt(x) + torch.log(x), [pos(3)]),
    "gelu_tanh": (lambda m, x: F.gelu(x, approximate="tanh"), [rnd(5)]),
    "silu_leaky": (lambda m, x: F.silu(x) + F.leaky_relu(x, 0.2), [rnd(5)]),
    "clamp": (lambda m, x: torch.clamp(x, min=-0.5, max=0.25) + F.hardtanh(x), [rnd(5)]),
    "relu6": (lambda m, x: F.relu6(x * 4), [rnd(5)]),
    "softmax": (lambda m, x: F.softmax(x, -1) + F.log_softmax(x, 1), [rnd(5)]),
    # comparisons and selection
    "compare": (
        lambda m, x, y: (
            torch.where(x > y, x, y)
            + (x <= 0).float()
            + (x == y).float()
            + (x != 0.5).float()
            + (x >= y).float()
            + (x < 0.1).float()
        ),
        [rnd(4), rnd(4)],
    ),
    "masked_fill": (lambda m, x: x.masked_fill(x < 0, -1.0), [rnd(4)]),
    "logical_not": (lambda m, x: torch.logical_not(x > 0).to(torch.int64), [rnd(4)]),
    "to_int": (
        lambda m, x: (x * 3).to(torch.int64) + x.to(torch.int32).to(torch.int64),
        [rnd(4)],
    ),
    # matmuls
    "matmul": (lambda m, x: torch.matmul(x, m.w), [rnd(2, 4)], {"w": W44}),
    "bmm": (lambda m, x, y: torch.bmm(x, y.transpose(1, 2)), [rnd(3, 4), rnd(2, 4)]),
    "mm_t": (lambda m, x: torch.mm(x, m.w.t()), [rnd(4)], {"w": W44}),
    # layout
    "permute": (lambda m, x: x.permute(2, 0, 1) * 1, [rnd(3, 4)]),
    "unsqueeze_squeeze": (lambda m, x: x.unsqueeze(-1).unsqueeze(1).squeeze(1) * 2, [rnd(3)]),
    "squeeze_kept": (lambda m, x: x.squeeze(2) + 0, [rnd(3, 1)]),
    "flatten": (lambda m, x: torch.flatten(x, 1) + 0, [rnd(3, 4)]),
    "flatten_all": (lambda m, x: torch.flatten(x) + 0, [rnd(3, 4)]),
    "cat": (lambda m, x, y: torch.cat([x, y, x], dim=1), [rnd(2), rnd(3)]),
    "expand": (lambda m, x: x[:, :1].expand(-1, 4) + 0, [rnd(3)]),
    "slices": (lambda m, x: x[:, 1:-1:2] + x[:, -3:-1][:, :1].sum(1, keepdim=True), [rnd(7)]),
    "select": (lambda m, x: x[:, 2] + x[:, -1], [rnd(4)]),
    "split": (lambda m, x: torch.split(x, [1, 3], dim=1)[1] * 2, [rnd(4)]),
    "chunk": (lambda m, x: x.chunk(3, dim=1)[2] + 1, [rnd(7)]),
    "reductions": (lambda m, x: x.mean((1, 2)) + x.sum(-1).amax(1) + x.sum(), [rnd(3, 4)]),
    "reshape_batch": (lambda m, x: x.reshape(-1, 2).sum(1), [rnd(4)]),
    # more (transformer exports)
    "cumsum": (lambda m, x: torch.cumsum(x, 1) + (x > 0).long().cumsum(-1), [rnd(4)]),
    "stack": (lambda m, x, y: torch.stack([x, y], 1) * 1, [rnd(3), rnd(3)]),
    "baddbmm": (
        lambda m, b, x, y: torch.baddbmm(b, x, y, beta=0.5, alpha=2.0),
        [rnd(3, 2), rnd(3, 4), rnd(4, 2)],
    ),
    "new_tensors": (
        lambda m, x: x.new_ones(x.shape[0], 2) + x.new_zeros(2) + x.new_full((x.shape[0], 1), 3.0),
        [rnd(3)],
    ),
    "tril_triu": (
        lambda m, x: torch.tril(x) + torch.triu(x, 1) * 2 + torch.tril(x, -1),
        [rnd(4, 6)],
    ),
    "tril_square": (lambda m, x: torch.tril(x @ x.t()) + 0, [rnd(3)]),
    "index_select": (lambda m, x, i: torch.index_select(x, 1, i[0]), [rnd(5), ints(5, 3)]),
    "repeat": (lambda m, x: x.repeat(2, 1, 3) + 0, [rnd(2)]),
    "argmax": (
        lambda m, x: torch.argmax(x, 1) + torch.argmin(x, -1, keepdim=True).sum() + torch.argmax(x),
        [rnd(5)],
    ),
    "max_min_dim": (
        lambda m, x: (
            torch.max(x, 1)[0] + torch.min(x, 1).values + torch.max(x, 1).indices + torch.amin(x, 1)
        ),
        [rnd(5)],
    ),
    "where_scalar": (
        lambda m, x: torch.where(x > 0, x, 0.5) + torch.where(x > 0, 1.0, x),
        [rnd(5)],
    ),
    "clamp_one": (lambda m, x: torch.clamp_min(x, 0.1) + torch.clamp_max(x, -0.1), [rnd(5)]),
    "bitwise_not": (lambda m, x: (~(x > 0)).long() + ~(x > 1).long(), [rnd(5)]),
    "reciprocal": (lambda m, x: torch.reciprocal(x) + torch.exp2(x) + torch.sign(x - 1), [pos(5)]),
    # creation
    "arange_static": (lambda m, x: x + torch.arange(3), [rnd(3)]),
    "arange_dim": (lambda m, x: torch.arange(x.shape[0]) * 2, [rnd(3)]),
    "full_like": (
        lambda m, x: torch.zeros_like(x) + torch.ones_like(x) + torch.full_like(x, 2.5),
        [rnd(3)],
    ),
    "full_dims": (
        lambda m, x: (
            torch.full((x.shape[0], 2), 7.0)
            + torch.zeros(x.shape[0], 2)
            + torch.ones(x.shape[0], 2, dtype=torch.float32)
        ),
        [rnd(3)],
    ),
    # nn
    "embedding": (lambda m, x: F.embedding(x, m.w), [ints(4, 3)], {"w": W44}),
    "index_tensor": (
        lambda m, x, i: x[:, i[0]] + x[i[:, 1] % x.shape[0]].sum(),
        [rnd(5), ints(5, 2)],
    ),
    "weight_norm": (
        lambda m, x: F.conv1d(x, torch._weight_norm(m.v, m.g, 2)),
        [rnd(2, 9)],
        {"v": torch.randn(3, 2, 3), "g": torch.rand(1, 1, 3) + 0.5},
    ),
    "layer_norm_plain": (lambda m, x: F.layer_norm(x, (4,)), [rnd(4)]),
    "batch_norm_plain": (
        lambda m, x: F.batch_norm(x, m.mean, m.var, eps=1e-3),
        [rnd(4, 3, 3)],
        {"mean": torch.randn(4), "var": torch.rand(4) + 0.5},
    ),
    "conv2d_dilated_grouped": (
        lambda m, x: F.conv2d(x, m.w, stride=(2, 1), padding=(2, 1), dilation=2, groups=2),
        [rnd(4, 9, 8)],
        {"w": torch.randn(6, 2, 3, 3)},
    ),
    "conv3d_strided_grouped": (
        lambda m, x: F.conv3d(x, m.w, m.b, stride=(1, 2, 1), padding=(1, 0, 1), groups=2),
        [rnd(4, 5, 6, 3)],
        {"w": torch.randn(6, 2, 3, 2, 2), "b": torch.randn(6)},
    ),
    "conv1d_padded": (
        lambda m, x: F.conv1d(x, m.w, m.b, padding=2, dilation=2),
        [rnd(3, 11)],
        {"w": torch.randn(5, 3, 3), "b": torch.randn(5)},
    ),
    "max_pool_padded": (
        lambda m, x: F.max_pool2d(x, 3, stride=2, padding=1, dilation=1),
        [rnd(2, 9, 7)],
    ),
    "avg_pool_padded": (
        lambda m, x: (
            F.avg_pool2d(x, 2, padding=1)
            + F.avg_pool2d(x, 3, stride=1, padding=1, count_include_pad=False)[:, :, :5, :4]
        ),
        [rnd(2, 8, 6)],
    ),
    "adaptive_pool": (lambda m, x: F.adaptive_avg_pool2d(x, (2, 3)), [rnd(2, 8, 6)]),
    "sdpa_bool_mask": (
        lambda m, q, k, v, mask: F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask > 0, scale=0.3
        ),
        [rnd(2, 5, 4), rnd(2, 6, 4), rnd(2, 6, 3), pos(1, 5, 6)],
    ),
    "sdpa_float_mask": (
        lambda m, q, k, v, mask: F.scaled_dot_product_attention(q, k, v, attn_mask=mask),
        [rnd(2, 5, 4), rnd(2, 6, 4), rnd(2, 6, 3), rnd(1, 5, 6)],
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_converter_matches_torch(name: str) -> None:
    fn, makers, *params = CASES[name]
    model = Op(fn, params[0] if params else None).eval()
    torch.manual_seed(0)
    example = tuple(make(3) for make in makers)
    batch = Dim("b", min=1, max=16)
    ep = export(model, example, dynamic_shapes=(tuple({0: batch} for _ in makers),))
    vm = dynshape.VirtualMachine(dynshape.compile(dstorch.load(ep)))
    for b in (1, 5):
        args = tuple(make(b) for make in makers)
        with torch.no_grad():
            expected = model(*args).numpy()
        got = vm.run(*[a.numpy() for a in args])
        assert got.shape == expected.shape and got.dtype == expected.dtype, name
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
