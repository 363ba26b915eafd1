"""The architectures ``benchmarks/export_more_models.py`` exports, in plain torch (its
docstring says which and why). Small configs, random weights; ``VOCAB`` as the token models of
``export_torch_models.py``."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

VOCAB = 1000


class LayerNorm2d(nn.Module):
    """ConvNeXt's channels_first LayerNorm, written out."""

    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(1 + 0.1 * torch.randn(dim))
        self.bias = nn.Parameter(0.1 * torch.randn(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        u = x.mean(1, keepdim=True)
        s = (x - u).pow(2).mean(1, keepdim=True)
        x = (x - u) / torch.sqrt(s + self.eps)
        return self.weight[:, None, None] * x + self.bias[:, None, None]


class ConvNeXtBlock(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.dwconv = nn.Conv2d(dim, dim, 7, padding=3, groups=dim)
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.pwconv1 = nn.Linear(dim, 4 * dim)
        self.act = nn.GELU()
        self.pwconv2 = nn.Linear(4 * dim, dim)
        # trained layer scales are far from their 1e-6 init
        self.gamma = nn.Parameter(0.1 + 0.4 * torch.rand(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shortcut = x
        x = self.dwconv(x)
        x = x.permute(0, 2, 3, 1)
        x = self.pwconv2(self.act(self.pwconv1(self.norm(x))))
        x = self.gamma * x
        x = x.permute(0, 3, 1, 2)
        return shortcut + x


class ConvNeXt(nn.Module):
    def __init__(self, dims=(32, 64), depths=(2, 2), classes: int = 10) -> None:
        super().__init__()
        self.downsample = nn.ModuleList(
            [nn.Sequential(nn.Conv2d(3, dims[0], 4, stride=4), LayerNorm2d(dims[0]))]
        )
        for i in range(len(dims) - 1):
            self.downsample.append(
                nn.Sequential(LayerNorm2d(dims[i]), nn.Conv2d(dims[i], dims[i + 1], 2, stride=2))
            )
        self.stages = nn.ModuleList(
            nn.Sequential(*(ConvNeXtBlock(d) for _ in range(n)))
            for d, n in zip(dims, depths, strict=True)
        )
        self.norm = nn.LayerNorm(dims[-1], eps=1e-6)
        self.head = nn.Linear(dims[-1], classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for down, stage in zip(self.downsample, self.stages, strict=True):
            x = stage(down(x))
        return self.head(self.norm(x.mean([-2, -1])))


class SqueezeExcite(nn.Module):
    def __init__(self, channels: int, squeezed: int) -> None:
        super().__init__()
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.reduce = nn.Conv2d(channels, squeezed, 1)
        self.act = nn.SiLU()
        self.expand = nn.Conv2d(squeezed, channels, 1)
        self.gate = nn.Sigmoid()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s = self.gate(self.expand(self.act(self.reduce(self.pool(x)))))
        return x * s


def conv_bn_act(cin: int, cout: int, k: int, stride: int = 1, groups: int = 1, act: bool = True):
    layers: list[nn.Module] = [
        nn.Conv2d(cin, cout, k, stride, (k - 1) // 2, groups=groups, bias=False),
        nn.BatchNorm2d(cout),
    ]
    if act:
        layers.append(nn.SiLU())
    return nn.Sequential(*layers)


class MBConv(nn.Module):
    def __init__(self, cin: int, cout: int, expand: int, k: int, stride: int) -> None:
        super().__init__()
        mid = cin * expand
        layers: list[nn.Module] = []
        if expand != 1:
            layers.append(conv_bn_act(cin, mid, 1))
        layers += [
            conv_bn_act(mid, mid, k, stride, groups=mid),
            SqueezeExcite(mid, max(1, cin // 4)),
            conv_bn_act(mid, cout, 1, act=False),
        ]
        self.block = nn.Sequential(*layers)
        self.residual = stride == 1 and cin == cout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.block(x)
        return x + y if self.residual else y


class EfficientNet(nn.Module):
    def __init__(self, classes: int = 10) -> None:
        super().__init__()
        cfg = [  # cin, cout, expand, kernel, stride
            (16, 16, 1, 3, 1),
            (16, 24, 4, 3, 2),
            (24, 24, 4, 3, 1),
            (24, 40, 4, 5, 2),
            (40, 40, 4, 5, 1),
        ]
        self.features = nn.Sequential(
            conv_bn_act(3, 16, 3, 2),
            *(MBConv(*c) for c in cfg),
            conv_bn_act(40, 128, 1),
        )
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(128, classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.avgpool(self.features(x))
        return self.classifier(torch.flatten(x, 1))


def double_conv(cin: int, cout: int) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(cin, cout, 3, padding=1, bias=False),
        nn.BatchNorm2d(cout),
        nn.ReLU(inplace=True),
        nn.Conv2d(cout, cout, 3, padding=1, bias=False),
        nn.BatchNorm2d(cout),
        nn.ReLU(inplace=True),
    )


class UNet(nn.Module):
    def __init__(self, classes: int = 2) -> None:
        super().__init__()
        c = [8, 16, 32, 64, 128]
        self.inc = double_conv(3, c[0])
        self.downs = nn.ModuleList(double_conv(c[i], c[i + 1]) for i in range(4))
        self.pool = nn.MaxPool2d(2)
        self.up1 = nn.ConvTranspose2d(c[4], c[3], 2, stride=2)
        self.conv1 = double_conv(2 * c[3], c[3])
        self.up2 = nn.ConvTranspose2d(c[3], c[2], 2, stride=2)
        self.conv2 = double_conv(2 * c[2], c[2])
        # bilinear: no learned upsampling, the channels stay c[2]
        self.conv3 = double_conv(c[2] + c[1], c[1])
        self.up4 = nn.ConvTranspose2d(c[1], c[0], 2, stride=2)
        self.conv4 = double_conv(2 * c[0], c[0])
        self.outc = nn.Conv2d(c[0], classes, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        skips = [self.inc(x)]
        for down in self.downs:
            skips.append(down(self.pool(skips[-1])))
        x1, x2, x3, x4, x5 = skips
        x = self.conv1(torch.cat([x4, self.up1(x5)], dim=1))
        x = self.conv2(torch.cat([x3, self.up2(x)], dim=1))
        up = F.interpolate(x, scale_factor=2, mode="bilinear", align_corners=False)
        x = self.conv3(torch.cat([x2, up], dim=1))
        x = self.conv4(torch.cat([x1, self.up4(x)], dim=1))
        return self.outc(x)


class ViT(nn.Module):
    def __init__(self, image=32, patch=8, dim=64, heads=4, layers=2, classes=10) -> None:
        super().__init__()
        self.patch_embed = nn.Conv2d(3, dim, patch, stride=patch)
        n = (image // patch) ** 2
        self.cls_token = nn.Parameter(0.02 * torch.randn(1, 1, dim))
        self.pos_embed = nn.Parameter(0.02 * torch.randn(1, n + 1, dim))
        layer = nn.TransformerEncoderLayer(
            dim, heads, 2 * dim, dropout=0.0, activation="gelu", batch_first=True, norm_first=True
        )
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.patch_embed(x).flatten(2).transpose(1, 2)
        cls = self.cls_token.expand(x.shape[0], -1, -1)
        x = torch.cat([cls, x], dim=1) + self.pos_embed
        x = self.norm(self.encoder(x))
        return self.head(x[:, 0])


class T5RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(1 + 0.1 * torch.randn(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        variance = x.pow(2).mean(-1, keepdim=True)
        return self.weight * (x * torch.rsqrt(variance + self.eps))


def relative_position_bucket(
    relative_position: torch.Tensor, bidirectional=True, num_buckets=32, max_distance=128
) -> torch.Tensor:
    """transformers' T5Attention._relative_position_bucket."""
    relative_buckets = 0
    if bidirectional:
        num_buckets //= 2
        relative_buckets += (relative_position > 0).to(torch.long) * num_buckets
        relative_position = torch.abs(relative_position)
    else:
        relative_position = -torch.min(relative_position, torch.zeros_like(relative_position))
    max_exact = num_buckets // 2
    is_small = relative_position < max_exact
    relative_position_if_large = max_exact + (
        torch.log(relative_position.float() / max_exact)
        / math.log(max_distance / max_exact)
        * (num_buckets - max_exact)
    ).to(torch.long)
    relative_position_if_large = torch.min(
        relative_position_if_large, torch.full_like(relative_position_if_large, num_buckets - 1)
    )
    relative_buckets += torch.where(is_small, relative_position, relative_position_if_large)
    return relative_buckets


class T5Attention(nn.Module):
    def __init__(self, dim: int, heads: int, kv: int, has_bias: bool) -> None:
        super().__init__()
        self.heads, self.kv = heads, kv
        self.q = nn.Linear(dim, heads * kv, bias=False)
        self.k = nn.Linear(dim, heads * kv, bias=False)
        self.v = nn.Linear(dim, heads * kv, bias=False)
        self.o = nn.Linear(heads * kv, dim, bias=False)
        self.has_bias = has_bias
        if has_bias:
            self.relative_attention_bias = nn.Embedding(32, heads)

    def compute_bias(self, qlen: int, klen: int, device: Any) -> torch.Tensor:
        context_position = torch.arange(qlen, dtype=torch.long, device=device)[:, None]
        memory_position = torch.arange(klen, dtype=torch.long, device=device)[None, :]
        relative_position = memory_position - context_position
        buckets = relative_position_bucket(relative_position)
        values = self.relative_attention_bias(buckets)  # [q, k, heads]
        return values.permute([2, 0, 1]).unsqueeze(0)

    def forward(self, x, mask, position_bias=None):
        b, s = x.shape[:2]

        def shape(t):
            return t.view(b, -1, self.heads, self.kv).transpose(1, 2)

        q, k, v = shape(self.q(x)), shape(self.k(x)), shape(self.v(x))
        scores = torch.matmul(q, k.transpose(3, 2))  # T5: no 1/sqrt(d)
        if position_bias is None:
            position_bias = self.compute_bias(s, s, x.device) + mask
        scores = scores + position_bias
        weights = F.softmax(scores.float(), dim=-1).type_as(scores)
        out = (
            torch.matmul(weights, v).transpose(1, 2).contiguous().view(b, -1, self.heads * self.kv)
        )
        return self.o(out), position_bias


class T5Block(nn.Module):
    def __init__(self, dim, heads, kv, ff, has_bias) -> None:
        super().__init__()
        self.ln1 = T5RMSNorm(dim)
        self.attn = T5Attention(dim, heads, kv, has_bias)
        self.ln2 = T5RMSNorm(dim)
        self.wi_0 = nn.Linear(dim, ff, bias=False)
        self.wi_1 = nn.Linear(dim, ff, bias=False)
        self.wo = nn.Linear(ff, dim, bias=False)

    def forward(self, x, mask, position_bias):
        h, position_bias = self.attn(self.ln1(x), mask, position_bias)
        x = x + h
        h = self.ln2(x)
        h = F.gelu(self.wi_0(h), approximate="tanh") * self.wi_1(h)
        return x + self.wo(h), position_bias


class T5Encoder(nn.Module):
    def __init__(self, dim=128, heads=4, kv=32, ff=256, layers=2) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(VOCAB, dim)
        self.blocks = nn.ModuleList(T5Block(dim, heads, kv, ff, i == 0) for i in range(layers))
        self.final_layer_norm = T5RMSNorm(dim)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        x = self.embed_tokens(input_ids)
        ext = attention_mask[:, None, None, :].to(x.dtype)
        ext = (1.0 - ext) * torch.finfo(x.dtype).min
        position_bias = None
        for block in self.blocks:
            x, position_bias = block(x, ext, position_bias)
        return self.final_layer_norm(x)


def sinusoids(length: int, channels: int, max_timescale: float = 10000) -> torch.Tensor:
    log_timescale_increment = np.log(max_timescale) / (channels // 2 - 1)
    inv_timescales = torch.exp(-log_timescale_increment * torch.arange(channels // 2))
    scaled_time = torch.arange(length)[:, None] * inv_timescales[None, :]
    return torch.cat([torch.sin(scaled_time), torch.cos(scaled_time)], dim=1).float()


class WhisperLayer(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.attn_ln = nn.LayerNorm(dim)
        self.q = nn.Linear(dim, dim)
        self.k = nn.Linear(dim, dim, bias=False)
        self.v = nn.Linear(dim, dim)
        self.out = nn.Linear(dim, dim)
        self.mlp_ln = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        h = self.attn_ln(x)
        q = self.q(h).view(b, t, self.heads, -1).transpose(1, 2)
        k = self.k(h).view(b, t, self.heads, -1).transpose(1, 2)
        v = self.v(h).view(b, t, self.heads, -1).transpose(1, 2)
        a = F.scaled_dot_product_attention(q, k, v)
        x = x + self.out(a.transpose(1, 2).reshape(b, t, d))
        return x + self.mlp(self.mlp_ln(x))


class WhisperEncoder(nn.Module):
    def __init__(self, mels=80, dim=64, heads=4, layers=2, ctx=1500) -> None:
        super().__init__()
        self.conv1 = nn.Conv1d(mels, dim, 3, padding=1)
        self.conv2 = nn.Conv1d(dim, dim, 3, stride=2, padding=1)
        self.register_buffer("positional_embedding", sinusoids(ctx, dim))
        self.blocks = nn.ModuleList(WhisperLayer(dim, heads) for _ in range(layers))
        self.ln_post = nn.LayerNorm(dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.gelu(self.conv1(x))
        x = F.gelu(self.conv2(x))
        x = x.permute(0, 2, 1)
        x = x + self.positional_embedding[: x.shape[1]]
        for block in self.blocks:
            x = block(x)
        return self.ln_post(x)


class GRUSeq2Seq(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, 64)
        self.gru = nn.GRU(64, 64, num_layers=2, batch_first=True, bidirectional=True)
        self.head = nn.Linear(128, VOCAB // 4)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        hidden, _ = self.gru(self.embed(tokens))
        return self.head(hidden)


class TemporalBlock(nn.Module):
    def __init__(self, cin: int, cout: int, k: int, dilation: int) -> None:
        super().__init__()
        self.pad = (k - 1) * dilation
        self.conv1 = nn.Conv1d(cin, cout, k, dilation=dilation)
        self.conv2 = nn.Conv1d(cout, cout, k, dilation=dilation)
        self.down = nn.Conv1d(cin, cout, 1) if cin != cout else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.relu(self.conv1(F.pad(x, (self.pad, 0))))
        y = F.relu(self.conv2(F.pad(y, (self.pad, 0))))
        res = x if self.down is None else self.down(x)
        return F.relu(y + res)


class TCN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.Sequential(
            TemporalBlock(16, 32, 3, 1), TemporalBlock(32, 32, 3, 2), TemporalBlock(32, 32, 3, 4)
        )
        self.head = nn.Conv1d(32, 8, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.blocks(x))


class MiscOps(nn.Module):
    """A grab-bag of ops exporters emit."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 16, 3, padding=1)
        self.gn = nn.GroupNorm(4, 16)
        self.conv2 = nn.Conv2d(16, 16, 3, padding=1)
        self.inorm = nn.InstanceNorm2d(16, affine=True)
        self.shuffle = nn.PixelShuffle(2)  # 16 -> 4 channels, 2x size
        self.conv3 = nn.Conv2d(4, 16, 3, stride=2, padding=1)
        self.conv4 = nn.Conv2d(16, 16, 3, stride=2, padding=1)
        self.score = nn.Linear(16, 1)
        self.cls = nn.Linear(16, 7)
        with torch.no_grad():
            self.inorm.weight.copy_(1 + 0.2 * torch.randn(16))
            self.inorm.bias.copy_(0.2 * torch.randn(16))
            self.gn.weight.copy_(1 + 0.2 * torch.randn(16))
            self.gn.bias.copy_(0.2 * torch.randn(16))

    def forward(self, x: torch.Tensor):
        x = F.hardswish(self.gn(self.conv1(x)))
        x = F.mish(self.inorm(self.conv2(x)))
        x = self.shuffle(x)  # [b, 4, 2h, 2w]
        x = F.leaky_relu(self.conv3(x), 0.1)  # [b, 16, h, w]
        x = F.interpolate(x, scale_factor=2, mode="nearest")  # [b, 16, 2h, 2w]
        x = F.elu(self.conv4(x))  # [b, 16, h, w]
        x = torch.clamp(F.softplus(x), -2.0, 2.0) - 1.0
        x = torch.flip(x, dims=[3])
        dense = torch.roll(x, shifts=1, dims=2)
        feats = dense.flatten(2).transpose(1, 2)  # [b, h*w, 16]
        scores = self.score(feats).squeeze(-1)  # [b, h*w]
        scores = scores.masked_fill(scores < -0.5, -1.0)
        vals, idx = torch.topk(scores, 8, dim=1)
        picked = torch.gather(feats, 1, idx.unsqueeze(-1).expand(-1, -1, feats.shape[-1]))
        picked = torch.cumsum(picked * vals.unsqueeze(-1), dim=1)  # [b, 8, 16]
        labels = torch.argmax(self.cls(picked), dim=-1)  # [b, 8]
        return dense, picked, idx, labels


def calibrated(model: nn.Module, example: torch.Tensor) -> nn.Module:
    """Batch norms with running statistics of one batch (as training would have), eval mode."""
    for m in model.modules():
        if isinstance(m, nn.modules.batchnorm._BatchNorm):
            m.reset_running_stats()
            m.momentum = None
            with torch.no_grad():
                m.weight.copy_(1 + 0.2 * torch.randn_like(m.weight))
                m.bias.copy_(0.2 * torch.randn_like(m.bias))
    with torch.no_grad():
        model.train()(example)
    return model.eval()
