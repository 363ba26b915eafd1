"""Export more real PyTorch architectures to ONNX, written by hand in plain torch (issue 27).

    python benchmarks/export_more_models.py OUTDIR [--only NAME ...] \\
        [--exporter torchscript|dynamo|both]

``export_torch_models.py`` exports torchvision's and transformers' models; this file adds
architectures written here from their papers and reference code, so that they need torch
alone (plus onnx and onnxscript): a ConvNeXt (7x7 depthwise convolutions, channels-last layer
norms, layer scale), an EfficientNet (MBConv with SiLU and squeeze-excite), a UNet (max pooling,
transposed convolutions, skip concatenations, a bilinear upsampling), a ViT (PyTorch's own
``nn.TransformerEncoderLayer``), a T5 encoder (relative position buckets computed in the
graph from the sequence length, RMSNorm, gated GELU), a Whisper encoder (Conv1d front end,
sinusoidal positions sliced to the length, ``scaled_dot_product_attention``), a bidirectional
GRU, a temporal conv net (dilated causal Conv1d) and a grab-bag of ops exporters emit
(GroupNorm, InstanceNorm, PixelShuffle, nearest upsampling, topk, gather, cumsum, argmax, flip,
roll, masked_fill). Each is exported both ways, at three sizes, in the format and with the
helpers of ``export_torch_models.py`` (its docstring says what the files are); the project
never saw these when it was tuned, so ``python benchmarks/onnx_models.py --dir OUTDIR`` says
how it does on models it was not fitted to (benchmarks/RESULTS.md, session 34).

Weights are random (``torch.manual_seed(0)``), batch norms calibrated on one random batch,
configs small (at most 2 MB a file). With torch 2.13.0 (CPU) and onnxscript 0.7.2 every pair
exports. ``--quick`` (CI's smoke run) exports the TCN with the TorchScript exporter when torch
is installed, else prints what is missing and exits 0.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from export_torch_models import (
    IMAGE_DIMS,
    TOKEN_DIMS,
    Case,
    _rng,
    command,
    images,
    tokens,
)

# --- inputs --------------------------------------------------------------------------------------


def unet_images(size: str) -> dict[str, np.ndarray]:
    shape = {"small": (1, 3, 64, 64), "mid": (4, 3, 96, 96), "large": (8, 3, 128, 128)}
    shape["export"] = (2, 3, 80, 96)  # multiples of 16
    return {"input": _rng(size).standard_normal(shape[size]).astype(np.float32)}


def vit_images(size: str) -> dict[str, np.ndarray]:
    batch = {"small": 1, "mid": 4, "large": 8, "export": 2}[size]
    return {"input": _rng(size).standard_normal((batch, 3, 32, 32)).astype(np.float32)}


def mel(size: str) -> dict[str, np.ndarray]:
    shape = {"small": (1, 80, 100), "mid": (4, 80, 400), "large": (8, 80, 800)}
    shape["export"] = (2, 80, 160)
    return {"input_features": _rng(size).standard_normal(shape[size]).astype(np.float32)}


def series(size: str) -> dict[str, np.ndarray]:
    shape = {"small": (1, 16, 16), "mid": (4, 16, 64), "large": (8, 16, 128)}
    shape["export"] = (2, 16, 24)
    return {"input": _rng(size).standard_normal(shape[size]).astype(np.float32)}


# --- models ---------------------------------------------------------------------------------------


def _built(name: str, *example: int) -> Any:
    """The model class ``name`` of ``more_models/architectures.py`` (imported here: it needs
    torch, which CI's smoke run has not) built in eval mode, its batch norms calibrated on a
    random batch of shape ``example`` when one is given."""
    import torch
    from more_models import architectures

    model = getattr(architectures, name)()
    return architectures.calibrated(model, torch.randn(*example)) if example else model.eval()


CASES: dict[str, Case] = {
    "convnext": Case(lambda: _built("ConvNeXt"), images, ["logits"], IMAGE_DIMS),
    "efficientnet": Case(
        lambda: _built("EfficientNet", 8, 3, 96, 96), images, ["logits"], IMAGE_DIMS
    ),
    "unet": Case(lambda: _built("UNet", 4, 3, 96, 96), unet_images, ["mask"], IMAGE_DIMS),
    "vit": Case(lambda: _built("ViT"), vit_images, ["logits"], {"input": {0: "batch"}}),
    "t5_encoder": Case(lambda: _built("T5Encoder"), tokens, ["last_hidden_state"], TOKEN_DIMS),
    "whisper_encoder": Case(
        lambda: _built("WhisperEncoder"),
        mel,
        ["last_hidden_state"],
        {"input_features": {0: "batch", 2: "frames"}},
    ),
    "gru_seq2seq": Case(
        lambda: _built("GRUSeq2Seq"),
        lambda size: {"tokens": tokens(size)["input_ids"]},
        ["logits"],
        {"tokens": {0: "batch", 1: "seq"}},
    ),
    "tcn": Case(lambda: _built("TCN"), series, ["output"], {"input": {0: "batch", 2: "time"}}),
    "misc_ops": Case(
        lambda: _built("MiscOps"), images, ["dense", "picked", "indices", "labels"], IMAGE_DIMS
    ),
}


def main(argv: list[str] | None = None) -> int:
    return command(
        argv,
        prog="export_more_models",
        description=__doc__.split("\n")[0],
        cases=CASES,
        needs=("torch", "onnx", "onnxscript"),
        quick="tcn",
    )


if __name__ == "__main__":
    raise SystemExit(main())
