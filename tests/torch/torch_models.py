"""Small models of the families the issue names, written with plain ``torch.nn`` (no
downloads), each with its export arguments and a maker of inputs at a size.

Shared by the tests of ``tests/torch`` (imported by name: pytest puts this folder on the path).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.export import Dim, export


class MLP(nn.Module):
    """Linear, LayerNorm, exact GELU, Dropout (eval: identity)."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(12, 32)
        self.norm = nn.LayerNorm(32)
        self.b = nn.Linear(32, 5)
        self.drop = nn.Dropout(0.1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(self.drop(F.gelu(self.norm(self.a(x)))))


class CNN(nn.Module):
    """Conv2d + BatchNorm2d (eval) + ReLU, a residual add, max pool, global pool, linear."""

    def __init__(self) -> None:
        super().__init__()
        self.c1 = nn.Conv2d(3, 8, 3, padding=1)
        self.b1 = nn.BatchNorm2d(8)
        self.c2 = nn.Conv2d(8, 8, 3, padding=1)
        self.b2 = nn.BatchNorm2d(8)
        self.pool = nn.MaxPool2d(2)
        self.fc = nn.Linear(8, 4)
        for bn in (self.b1, self.b2):  # statistics that are not the identity
            bn.running_mean.uniform_(-0.5, 0.5)
            bn.running_var.uniform_(0.5, 2.0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.relu(self.b1(self.c1(x)))
        y = F.relu(y + self.b2(self.c2(y)))
        y = F.adaptive_avg_pool2d(self.pool(y), 1)
        return self.fc(torch.flatten(y, 1))


class Mobile(nn.Module):
    """A MobileNet block: depthwise 3x3 stride 2 (groups), BatchNorm, ReLU6, pointwise 1x1."""

    def __init__(self) -> None:
        super().__init__()
        self.dw = nn.Conv2d(8, 8, 3, stride=2, padding=1, groups=8, bias=False)
        self.bn = nn.BatchNorm2d(8)
        self.pw = nn.Conv2d(8, 16, 1)
        self.act = nn.ReLU6()
        self.bn.running_mean.uniform_(-0.5, 0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.pw(self.act(self.bn(self.dw(x)))))


class Encoder(nn.Module):
    """A transformer encoder layer: fused QKV, chunk, head split by view, SDPA, residuals."""

    def __init__(self, d: int = 16, heads: int = 2, causal: bool = False) -> None:
        super().__init__()
        self.heads, self.causal = heads, causal
        self.qkv = nn.Linear(d, 3 * d)
        self.o = nn.Linear(d, d)
        self.n1 = nn.LayerNorm(d)
        self.ff = nn.Sequential(nn.Linear(d, 32), nn.GELU(), nn.Linear(32, d))
        self.n2 = nn.LayerNorm(d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=self.causal)
        a = a.transpose(1, 2).contiguous().view(b, t, d)
        x = self.n1(x + self.o(a))
        return self.n2(x + self.ff(x))


class Decoder(nn.Module):
    """One decoder step with a KV cache: embedding, the new keys and values appended to the
    past ones with ``torch.cat``, attention over all of them; returns the logits and the
    presents."""

    def __init__(self, d: int = 16, heads: int = 2, vocab: int = 50) -> None:
        super().__init__()
        self.heads = heads
        self.emb = nn.Embedding(vocab, d)
        self.q, self.k, self.v = nn.Linear(d, d), nn.Linear(d, d), nn.Linear(d, d)
        self.out = nn.Linear(d, vocab)

    def forward(
        self, input_ids: torch.Tensor, past_key: torch.Tensor, past_value: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        x = self.emb(input_ids)
        b, t, d = x.shape
        split = [self.heads, d // self.heads]
        q = self.q(x).view(b, t, *split).transpose(1, 2)
        k = torch.cat([past_key, self.k(x).view(b, t, *split).transpose(1, 2)], dim=2)
        v = torch.cat([past_value, self.v(x).view(b, t, *split).transpose(1, 2)], dim=2)
        a = F.scaled_dot_product_attention(q, k, v)
        return self.out(a.transpose(1, 2).reshape(b, t, d)), k, v


class Speech(nn.Module):
    """A wav2vec2-style front end: two strided conv1d with GELU, then LayerNorm and a
    projection (lengths ``((samples - 10)//5 + 1 - 3)//2 + 1``)."""

    def __init__(self) -> None:
        super().__init__()
        self.c1 = nn.Conv1d(1, 8, 10, stride=5)
        self.c2 = nn.Conv1d(8, 8, 3, stride=2)
        self.norm = nn.LayerNorm(8)
        self.proj = nn.Linear(8, 12)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.gelu(self.c2(F.gelu(self.c1(x.unsqueeze(1)))))
        return self.proj(self.norm(y.transpose(1, 2)))


@dataclass
class Family:
    """A model, how it is exported, and its inputs at a size."""

    name: str
    model: nn.Module
    example: tuple[torch.Tensor, ...]
    dynamic: dict[str, Any]
    inputs: Callable[[int], tuple[torch.Tensor, ...]]
    sizes: tuple[int, int, int]
    """Three sizes; the first and last are the ends of the declared range they drive."""

    def export(self) -> Any:
        """``torch.export.export`` of the model in eval mode."""
        return export(self.model.eval(), self.example, dynamic_shapes=self.dynamic)


def families() -> list[Family]:
    """Every family, freshly built (seeded weights)."""
    torch.manual_seed(0)
    batch = Dim("batch", min=1, max=64)
    h, w = Dim("h", min=4, max=64), Dim("w", min=4, max=64)
    seq = Dim("seq", min=1, max=256)
    past = Dim("past", min=0, max=256)
    return [
        Family("mlp", MLP(), (torch.randn(3, 12),), {"x": {0: batch}},
               lambda n: (torch.randn(n, 12),), (1, 7, 64)),
        Family("cnn", CNN(), (torch.randn(2, 3, 16, 16),), {"x": {0: batch, 2: h, 3: w}},
               lambda n: (torch.randn(2, 3, n, n + 1 if n < 64 else n),), (4, 13, 64)),
        Family("mobile", Mobile(), (torch.randn(2, 8, 16, 16),), {"x": {0: batch, 2: h, 3: w}},
               lambda n: (torch.randn(1, 8, n, 64 - n + 4),), (4, 9, 64)),
        Family("encoder", Encoder(), (torch.randn(2, 7, 16),), {"x": {0: batch, 1: seq}},
               lambda n: (torch.randn(2, n, 16),), (1, 9, 256)),
        Family("causal_encoder", Encoder(causal=True), (torch.randn(2, 7, 16),),
               {"x": {0: batch, 1: seq}}, lambda n: (torch.randn(1, n, 16),), (1, 5, 256)),
        Family("decoder", Decoder(),
               (torch.randint(0, 50, (2, 3)), torch.randn(2, 2, 5, 8), torch.randn(2, 2, 5, 8)),
               {"input_ids": {0: batch, 1: seq}, "past_key": {0: batch, 2: past},
                "past_value": {0: batch, 2: past}},
               lambda n: (torch.randint(0, 50, (2, max(n, 1))), torch.randn(2, 2, n, 8),
                          torch.randn(2, 2, n, 8)), (0, 6, 256)),
        Family("speech", Speech(), (torch.randn(2, 400),),
               {"x": {0: batch, 1: Dim("samples", min=400, max=16000)}},
               lambda n: (torch.randn(3, n),), (400, 1234, 16000)),
    ]  # fmt: skip
