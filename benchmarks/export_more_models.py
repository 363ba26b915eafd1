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

import argparse
import importlib.util
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

import numpy as np
from export_torch_models import (
    EXPORTERS,
    IMAGE_DIMS,
    TOKEN_DIMS,
    Case,
    _rng,
    export,
    images,
    one_line,
    tokens,
    write_inputs_and_expected,
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


def run(outdir: Path, names: list[str], exporters: list[str]) -> list[tuple[str, str]]:
    """Export every (model, exporter) pair; returns the pairs that failed, with the error."""
    import torch

    outdir.mkdir(parents=True, exist_ok=True)
    failures = []
    for model_name in names:
        for exporter in exporters:
            name = f"{model_name}-{exporter}"
            t0 = time.perf_counter()
            try:
                torch.manual_seed(0)
                model = CASES[model_name].build()
                export(model, CASES[model_name], exporter, outdir / f"{name}.onnx")
                write_inputs_and_expected(model, CASES[model_name], outdir, name)
            except Exception as e:
                traceback.print_exc()
                message = f"{type(e).__name__}: {one_line(str(e))}"
                print(f"FAILED {name}: {message}", flush=True)
                failures.append((name, message))
                for p in outdir.glob(f"{name}.*"):  # no half-written case for the benchmark
                    p.unlink()
                continue
            size_mb = (outdir / f"{name}.onnx").stat().st_size / 1e6
            print(f"ok {name}: {size_mb:.2f} MB in {time.perf_counter() - t0:.0f} s", flush=True)
    return failures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("outdir", nargs="?", type=Path, help="where to write the files")
    parser.add_argument("--only", nargs="+", choices=list(CASES), help="these models only")
    parser.add_argument("--exporter", choices=[*EXPORTERS, "both"], default="both")
    parser.add_argument("--quick", action="store_true", help="CI smoke run: tcn, torchscript")
    args = parser.parse_args(argv)
    needs = ("torch", "onnx", "onnxscript")
    missing = [m for m in needs if importlib.util.find_spec(m) is None]
    if missing:
        print(f"export_more_models: needs {', '.join(missing)}; nothing exported")
        return 0 if args.quick else 1
    if args.quick:
        with tempfile.TemporaryDirectory() as tmp:
            return 1 if run(Path(tmp), ["tcn"], ["torchscript"]) else 0
    if args.outdir is None:
        parser.error("OUTDIR is required (unless --quick)")
    exporters = list(EXPORTERS) if args.exporter == "both" else [args.exporter]
    failures = run(args.outdir, args.only or list(CASES), exporters)
    print(f"\n{len(failures)} failed" + "".join(f"\n  {n}: {m}" for n, m in failures))
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
