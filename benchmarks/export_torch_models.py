"""Export real PyTorch models to ONNX with dynamic axes, both ways PyTorch does it (issue 27).

    python benchmarks/export_torch_models.py OUTDIR [--only NAME ...] \\
        [--exporter torchscript|dynamo|both]

Run it with a Python that has torch, torchvision, transformers, onnx and onnxscript (not the
project's own environment: dynshape does not depend on torch). For every model and exporter it
writes, in OUTDIR:

- ``NAME-EXPORTER.onnx``: the model, exported by ``torch.onnx.export(..., dynamo=False,
  opset_version=17, dynamic_axes=...)`` (EXPORTER ``torchscript``) or ``torch.onnx.export(...,
  dynamo=True, opset_version=18, dynamic_shapes=...)`` (``dynamo``, the torch.export-based one);
- ``NAME-EXPORTER.{small,mid,large}.npz``: valid inputs at three sizes, keyed by the graph's
  input names (token ids inside the vocabulary, attention masks of ones with left padding at the
  larger sizes, position ids that skip the padding, KV caches of the right shapes);
- ``NAME-EXPORTER.expected.{small,mid,large}.npz``: PyTorch's outputs for those inputs, keyed by
  the graph's output names, for a checker to compare against (onnxruntime, dynshape).

The files are generated: keep them out of git (OUTDIR belongs outside the checkout). The weights
are random (``torch.manual_seed(0)``, ``weights=None``, configs built here: nothing is
downloaded), the models are in eval mode (torchvision's with batch-norm statistics taken from
one random batch, see ``calibrate_batch_norm``), and the transformers ones use small configs so
each file is a few MB (torchvision's models keep their standard sizes).

The models (``--only`` takes these names):

- ``resnet18``, ``mobilenet_v3_small``: torchvision classifiers on ``input``
  [batch, 3, height, width], sizes 1x3x64x64 / 4x3x96x96 / 8x3x128x128;
- ``lraspp``: torchvision ``lraspp_mobilenet_v3_large`` segmentation, the ``out`` output only;
- ``wav2vec2``: transformers ``Wav2Vec2Model`` (hidden 64, 2 layers, the default 7-layer conv
  front end at 32 channels) on ``input_values`` [batch, samples], 1x4000 / 2x16000 / 4x32000;
- ``bert``, ``distilbert``, ``roberta``: encoders (hidden 128, 2 layers, 4 heads, vocabulary
  1000) on ``input_ids`` and ``attention_mask`` [batch, seq], (1, 16) / (4, 64) / (8, 128);
- ``gpt2``, ``llama``: one decode step with a KV cache (2 layers, hidden 128, 4 heads, Llama
  with 2 kv heads): ``input_ids``, ``position_ids`` [batch, seq], ``attention_mask``
  [batch, past_seq + seq], ``past_key_values.{i}.key/value`` [batch, kv_heads, past_seq,
  head_dim] -> ``logits``, ``present.{i}.key/value``; (batch, seq, past_seq) = (1, 1, 16) /
  (4, 1, 64) / (8, 1, 256);
- ``lstm_tagger``: Embedding -> 2-layer bidirectional ``nn.LSTM`` -> Linear on ``tokens``
  [batch, seq], (1, 16) / (4, 64) / (8, 128);
- ``mlp``: tabular MLP, (Linear -> LayerNorm -> exact GELU) x 3 at width 256, then a 10-way
  Linear, on ``features`` [batch, 64] at batch 1 / 32 / 256.

Every model is exported from example inputs of at least 2 in every dynamic dim (torch.export
specializes dims of size 0 and 1); the decode step is exported with seq = 2 and runs with 1.
A model that fails to export with one exporter is reported and skipped; the others go on.
With torch 2.14.1, torchvision 0.29.1, transformers 5.24.0, onnxscript 0.7.2 every pair exports.

``--quick`` (CI's smoke run, which has no torch) prints that torch is needed and exits 0; with
torch installed it exports ``mlp`` with the TorchScript exporter into a temporary directory.
"""

from __future__ import annotations

import argparse
import importlib.util
import inspect
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

SIZES = ("small", "mid", "large")
EXPORTERS = ("torchscript", "dynamo")
VOCAB = 1000  # every token model's vocabulary


@dataclass
class Case:
    """One model to export: how to build it, its ONNX signature and its inputs."""

    build: Callable[[], Any]
    """Returns the ``torch.nn.Module`` (eval mode) whose forward takes the inputs in order."""
    inputs: Callable[[str], dict[str, np.ndarray]]
    """Inputs for a size name (``SIZES``, or ``"export"`` for the example inputs of the export),
    in forward order, keyed by the ONNX input names."""
    outputs: list[str]
    """The ONNX output names, in the order forward returns them."""
    dims: dict[str, dict[int, str]]
    """The dynamic axes of every input: ``{input: {axis: dim name}}``."""


# --- inputs --------------------------------------------------------------------------------------


def _rng(size: str) -> np.random.Generator:
    return np.random.default_rng(SIZES.index(size) + 1 if size in SIZES else 0)


def images(size: str) -> dict[str, np.ndarray]:
    shape = {"small": (1, 3, 64, 64), "mid": (4, 3, 96, 96), "large": (8, 3, 128, 128)}
    shape["export"] = (2, 3, 80, 72)
    return {"input": _rng(size).standard_normal(shape[size]).astype(np.float32)}


def left_padded_mask(batch: int, length: int) -> np.ndarray:
    """Ones, with row ``b`` left-padded by ``b * length // (2 * batch)`` zeros (none at batch 1)."""
    mask = np.ones((batch, length), np.int64)
    for b in range(batch):
        mask[b, : b * length // (2 * batch)] = 0
    return mask


def tokens(size: str, pad_id: int = 0) -> dict[str, np.ndarray]:
    """``input_ids`` and a left-padded ``attention_mask``; padded positions hold ``pad_id``."""
    batch, seq = {"small": (1, 16), "mid": (4, 64), "large": (8, 128), "export": (2, 8)}[size]
    mask = left_padded_mask(batch, seq)
    ids = _rng(size).integers(2, VOCAB, (batch, seq))
    return {"input_ids": np.where(mask == 1, ids, pad_id), "attention_mask": mask}


def audio(size: str) -> dict[str, np.ndarray]:
    shape = {"small": (1, 4000), "mid": (2, 16000), "large": (4, 32000), "export": (2, 8000)}
    return {"input_values": _rng(size).standard_normal(shape[size]).astype(np.float32)}


def decode_step(size: str, layers: int, kv_heads: int, head_dim: int) -> dict[str, np.ndarray]:
    """A decode step of a left-padded batch: the step's tokens, the mask over past + step, the
    positions counted over unpadded tokens, and a random past of ``past_seq`` entries."""
    sizes = {"small": (1, 1, 16), "mid": (4, 1, 64), "large": (8, 1, 256), "export": (2, 2, 6)}
    batch, seq, past = sizes[size]
    rng = _rng(size)
    mask = left_padded_mask(batch, past + seq)
    positions = np.maximum(np.cumsum(mask, axis=1) - 1, 0)[:, past:]
    feed = {
        "input_ids": rng.integers(2, VOCAB, (batch, seq)),
        "attention_mask": mask,
        "position_ids": positions,
    }
    for i in range(layers):
        for kind in ("key", "value"):
            cache = rng.standard_normal((batch, kv_heads, past, head_dim)).astype(np.float32)
            feed[f"past_key_values.{i}.{kind}"] = cache
    return feed


def features(size: str) -> dict[str, np.ndarray]:
    batch = {"small": 1, "mid": 32, "large": 256, "export": 4}[size]
    return {"features": _rng(size).standard_normal((batch, 64)).astype(np.float32)}


# --- models --------------------------------------------------------------------------------------
# torch is imported inside the builders, so that this file imports (and --quick runs) without it.


def _first_output(model: Any, key: str | int) -> Any:
    """``model`` with forward returning only ``model(*args)[key]`` (a dict entry or a field)."""
    import torch

    class FirstOutput(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, *args: torch.Tensor) -> torch.Tensor:
            return self.model(*args)[key]

    return FirstOutput().eval()


def calibrate_batch_norm(model: Any) -> Any:
    """Set every batch norm's running statistics to those of one random batch, as training
    would have: with the initial ones (mean 0, variance 1) MobileNetV3's logits are ~1e-9, too
    small for an error check to mean anything. Returns ``model`` in eval mode."""
    import torch

    for module in model.modules():
        if isinstance(module, torch.nn.modules.batchnorm._BatchNorm):
            module.reset_running_stats()
            module.momentum = None  # a cumulative average: after one batch, that batch's stats
    with torch.no_grad():
        model.train()(torch.randn(8, 3, 96, 96))
    return model.eval()


def torchvision_model(name: str) -> Callable[[], Any]:
    def build() -> Any:
        import torchvision

        if name == "lraspp":
            model = torchvision.models.segmentation.lraspp_mobilenet_v3_large(
                weights=None, weights_backbone=None
            )
            return _first_output(calibrate_batch_norm(model), "out")
        return calibrate_batch_norm(getattr(torchvision.models, name)(weights=None))

    return build


def wav2vec2() -> Any:
    from transformers import Wav2Vec2Config, Wav2Vec2Model

    config = Wav2Vec2Config(
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=128,
        conv_dim=(32,) * 7,  # the default kernels (10, 3, 3, 3, 3, 2, 2) and strides (5, 2, ...)
        num_conv_pos_embeddings=32,
        num_conv_pos_embedding_groups=8,
    )
    return _first_output(Wav2Vec2Model(config).eval(), "last_hidden_state")


def encoder(kind: str) -> Callable[[], Any]:
    def build() -> Any:
        import transformers

        common = {"vocab_size": VOCAB, "max_position_embeddings": 512}
        if kind == "distilbert":
            config: Any = transformers.DistilBertConfig(
                dim=128, n_layers=2, n_heads=4, hidden_dim=512, **common
            )
            model = transformers.DistilBertModel(config)
        else:
            layout = {"hidden_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4}
            if kind == "bert":
                model = transformers.BertModel(
                    transformers.BertConfig(intermediate_size=512, **layout, **common)
                )
            else:  # RoBERTa: positions start after padding_idx = pad_token_id = 1
                config = transformers.RobertaConfig(intermediate_size=512, **layout, **common)
                model = transformers.RobertaModel(config)
        return _first_output(model.eval(), "last_hidden_state")

    return build


def decoder(kind: str) -> Any:
    """A GPT-2- or Llama-style ``*ForCausalLM`` as one step with flat KV-cache tensors.

    The wrapper turns ``past_key_values.{i}.key/value`` into the ``DynamicCache`` that the model
    takes (``cache=``; transformers 5), and its grown layers back into ``present.{i}.*``.
    """
    import torch
    import transformers

    if kind == "gpt2":
        config: Any = transformers.GPT2Config(
            vocab_size=VOCAB, n_positions=512, n_embd=128, n_layer=2, n_head=4
        )
        model = transformers.GPT2LMHeadModel(config)
    else:
        config = transformers.LlamaConfig(
            vocab_size=VOCAB,
            hidden_size=128,
            intermediate_size=256,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=512,
        )
        model = transformers.LlamaForCausalLM(config)

    class DecoderStep(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model.eval()

        def forward(
            self,
            input_ids: torch.Tensor,
            attention_mask: torch.Tensor,
            position_ids: torch.Tensor,
            *past: torch.Tensor,
        ) -> tuple[torch.Tensor, ...]:
            cache = transformers.DynamicCache(list(zip(past[::2], past[1::2], strict=True)))
            out = self.model(
                input_ids=input_ids,
                attention_mask=attention_mask,
                position_ids=position_ids,
                cache=cache,
                use_cache=True,
            )
            present = [t for layer in cache.layers for t in (layer.keys, layer.values)]
            return (out.logits, *present)

    return DecoderStep().eval()


def lstm_tagger() -> Any:
    import torch

    class LSTMTagger(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = torch.nn.Embedding(VOCAB, 64)
            self.lstm = torch.nn.LSTM(64, 96, num_layers=2, batch_first=True, bidirectional=True)
            self.head = torch.nn.Linear(2 * 96, 17)

        def forward(self, tokens: torch.Tensor) -> torch.Tensor:
            hidden, _ = self.lstm(self.embed(tokens))
            return self.head(hidden)

    return LSTMTagger().eval()


def mlp() -> Any:
    from torch import nn

    blocks = [
        layer
        for width_in in (64, 256, 256)
        for layer in (nn.Linear(width_in, 256), nn.LayerNorm(256), nn.GELU())
    ]
    return nn.Sequential(*blocks, nn.Linear(256, 10)).eval()


IMAGE_DIMS = {"input": {0: "batch", 2: "height", 3: "width"}}
TOKEN_DIMS = {"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "seq"}}
LAYERS, HEADS, HEAD_DIM = 2, 4, 32  # both decoders: hidden 128 = 4 heads x 32


def decoder_case(kind: str, kv_heads: int) -> Case:
    dims = {
        "input_ids": {0: "batch", 1: "seq"},
        "attention_mask": {0: "batch", 1: "total_seq"},
        "position_ids": {0: "batch", 1: "seq"},
    }
    present = []
    for i in range(LAYERS):
        for kind_ in ("key", "value"):
            dims[f"past_key_values.{i}.{kind_}"] = {0: "batch", 2: "past_seq"}
            present.append(f"present.{i}.{kind_}")
    return Case(
        build=lambda: decoder(kind),
        inputs=lambda size: decode_step(size, LAYERS, kv_heads, HEAD_DIM),
        outputs=["logits", *present],
        dims=dims,
    )


CASES: dict[str, Case] = {
    "resnet18": Case(torchvision_model("resnet18"), images, ["logits"], IMAGE_DIMS),
    "mobilenet_v3_small": Case(
        torchvision_model("mobilenet_v3_small"), images, ["logits"], IMAGE_DIMS
    ),
    "lraspp": Case(torchvision_model("lraspp"), images, ["out"], IMAGE_DIMS),
    "wav2vec2": Case(
        wav2vec2, audio, ["last_hidden_state"], {"input_values": {0: "batch", 1: "samples"}}
    ),
    "bert": Case(encoder("bert"), tokens, ["last_hidden_state"], TOKEN_DIMS),
    "distilbert": Case(encoder("distilbert"), tokens, ["last_hidden_state"], TOKEN_DIMS),
    "roberta": Case(
        encoder("roberta"), lambda size: tokens(size, pad_id=1), ["last_hidden_state"], TOKEN_DIMS
    ),
    "gpt2": decoder_case("gpt2", kv_heads=HEADS),
    "llama": decoder_case("llama", kv_heads=2),
    "lstm_tagger": Case(
        lstm_tagger,
        lambda size: {"tokens": tokens(size)["input_ids"]},
        ["tag_logits"],
        {"tokens": {0: "batch", 1: "seq"}},
    ),
    "mlp": Case(mlp, features, ["logits"], {"features": {0: "batch"}}),
}


# --- export --------------------------------------------------------------------------------------


def export(model: Any, case: Case, exporter: str, path: Path) -> None:
    """Write ``model`` (built by ``case``) to ``path`` with ``exporter`` (of ``EXPORTERS``)."""
    import torch

    example = case.inputs("export")
    args = tuple(torch.from_numpy(a) for a in example.values())
    names = {"input_names": list(example), "output_names": case.outputs}
    if exporter == "torchscript":
        torch.onnx.export(
            model, args, str(path), dynamo=False, opset_version=17, dynamic_axes=case.dims, **names
        )
    else:
        # One entry per forward parameter; a *args parameter takes a tuple of the rest.
        names_left = list(example)
        shapes: list[Any] = []
        for param in inspect.signature(model.forward).parameters.values():
            if param.kind is inspect.Parameter.VAR_POSITIONAL:
                shapes.append(tuple(case.dims.get(n, {}) for n in names_left))
                names_left = []
            elif names_left:
                shapes.append(case.dims.get(names_left.pop(0), {}))
        program = torch.onnx.export(
            model, args, dynamo=True, opset_version=18, dynamic_shapes=tuple(shapes), **names
        )
        program.save(str(path))


def write_inputs_and_expected(model: Any, case: Case, outdir: Path, name: str) -> None:
    """The inputs at every size and ``model``'s outputs for them, keyed by the graph's names."""
    import onnx
    import torch

    graph = onnx.load(str(outdir / f"{name}.onnx"), load_external_data=False).graph
    graph_inputs = [i.name for i in graph.input]
    graph_outputs = [o.name for o in graph.output]
    if graph_outputs != case.outputs:
        raise RuntimeError(f"graph outputs {graph_outputs}, expected {case.outputs}")
    for size in SIZES:
        feed = case.inputs(size)
        with torch.no_grad():
            result = model(*(torch.from_numpy(a) for a in feed.values()))
        results = result if isinstance(result, tuple) else (result,)
        expected = {k: v.numpy() for k, v in zip(case.outputs, results, strict=True)}
        # An input the graph does not read (pruned by the exporter) is left out.
        np.savez(outdir / f"{name}.{size}.npz", **{k: feed[k] for k in graph_inputs})
        np.savez(outdir / f"{name}.expected.{size}.npz", **expected)


def one_line(error: str) -> str:
    """The line that says what went wrong (torch.onnx puts it under "Exception summary")."""
    lines = [line.strip() for line in error.splitlines() if line.strip()]
    if "## Exception summary" in lines:
        lines = lines[lines.index("## Exception summary") + 1 :]
    return lines[0][:300] if lines else ""


def run(
    outdir: Path, names: list[str], exporters: list[str], cases: dict[str, Case] | None = None
) -> list[tuple[str, str]]:
    """Export every (model, exporter) pair of ``cases`` (default this file's ``CASES``);
    returns the pairs that failed, with the error (their files removed: no half-written case
    for the benchmark)."""
    import torch

    cases = CASES if cases is None else cases
    outdir.mkdir(parents=True, exist_ok=True)
    failures = []
    for model_name in names:
        for exporter in exporters:
            name = f"{model_name}-{exporter}"
            t0 = time.perf_counter()
            try:
                torch.manual_seed(0)
                model = cases[model_name].build()
                export(model, cases[model_name], exporter, outdir / f"{name}.onnx")
                write_inputs_and_expected(model, cases[model_name], outdir, name)
            except Exception as e:  # report, skip, go on with the next pair
                traceback.print_exc()
                message = f"{type(e).__name__}: {one_line(str(e))}"
                print(f"FAILED {name}: {message}", flush=True)
                failures.append((name, message))
                for written in outdir.glob(f"{name}.*"):
                    written.unlink()
                continue
            size_mb = (outdir / f"{name}.onnx").stat().st_size / 1e6
            print(f"ok {name}: {size_mb:.2f} MB in {time.perf_counter() - t0:.0f} s", flush=True)
    return failures


def command(
    argv: list[str] | None,
    *,
    prog: str,
    description: str,
    cases: dict[str, Case],
    needs: tuple[str, ...],
    quick: str,
) -> int:
    """The command line of an export script (this one, ``export_more_models.py``): OUTDIR,
    ``--only``, ``--exporter``, and ``--quick`` (CI's smoke run: model ``quick`` with the
    TorchScript exporter, or a line saying which of ``needs`` are missing and status 0)."""
    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument("outdir", nargs="?", type=Path, help="where to write the files")
    parser.add_argument("--only", nargs="+", choices=list(cases), help="these models only")
    parser.add_argument("--exporter", choices=[*EXPORTERS, "both"], default="both")
    parser.add_argument("--quick", action="store_true", help=f"CI smoke run: {quick}, torchscript")
    args = parser.parse_args(argv)
    missing = [m for m in needs if importlib.util.find_spec(m) is None]
    if missing:
        print(f"{prog}: needs {', '.join(missing)}; nothing exported")
        return 0 if args.quick else 1
    if args.quick:
        with tempfile.TemporaryDirectory() as tmp:
            return 1 if run(Path(tmp), [quick], ["torchscript"], cases) else 0
    if args.outdir is None:
        parser.error("OUTDIR is required (unless --quick)")
    exporters = list(EXPORTERS) if args.exporter == "both" else [args.exporter]
    failures = run(args.outdir, args.only or list(cases), exporters, cases)
    print(f"\n{len(failures)} failed" + "".join(f"\n  {n}: {m}" for n, m in failures))
    return 1 if failures else 0


def main(argv: list[str] | None = None) -> int:
    return command(
        argv,
        prog="export_torch_models",
        description=__doc__.split("\n")[0],
        cases=CASES,
        needs=("torch", "torchvision", "transformers", "onnx", "onnxscript"),
        quick="mlp",
    )


if __name__ == "__main__":
    raise SystemExit(main())
