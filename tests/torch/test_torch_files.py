"""``.pt2`` files (``torch.export.save``) through ``load``, ``dynshape.compile`` and the CLI;
``dynshape.generate`` on an imported decoder step."""

from __future__ import annotations

import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest

# torch.export, not torch: without torch installed, "torch" would import tests/torch itself
# (a namespace package: tests/ is on the path)
pytest.importorskip("torch.export")
import torch
from torch.export import Dim, export
from torch_models import Decoder, families

import dynshape
import dynshape.torch as dstorch
from dynshape.cli import main
from dynshape.errors import ModelImportError


@pytest.fixture(scope="module")
def speech(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any]:
    family = next(f for f in families() if f.name == "speech")
    path = tmp_path_factory.mktemp("pt2") / "speech.pt2"
    torch.export.save(family.export(), str(path))
    return path, family.model


def test_a_pt2_round_trip_keeps_shapes_ranges_and_results(speech: tuple[Path, Any]) -> None:
    path, model = speech
    program = dstorch.load(path)
    # torch keeps the ranges in the file, not the Dim names: the symbols are torch's
    (batch, batch_range), (samples, samples_range) = sorted(
        program.ranges.items(), key=lambda kv: kv[1]
    )
    assert batch_range == (1, 64) and samples_range == (400, 16000)
    assert f"%x: Tensor[({batch}, {samples}), float32]" in str(program)
    exe = dynshape.compile(path)  # dynshape.compile takes the path too
    x = np.random.randn(2, 777).astype(np.float32)
    expected = model(torch.from_numpy(x)).detach().numpy()
    np.testing.assert_allclose(dynshape.VirtualMachine(exe).run(x), expected, rtol=1e-4, atol=1e-5)


def test_a_damaged_pt2_is_a_model_import_error(speech: tuple[Path, Any], tmp_path: Path) -> None:
    path, _ = speech
    damaged = tmp_path / "damaged.pt2"
    with zipfile.ZipFile(path) as src, zipfile.ZipFile(damaged, "w") as dst:
        for item in src.infolist():
            data = src.read(item)
            if item.filename.endswith(".json") and b"graph" in data:
                data = data[: len(data) // 2]  # a truncated graph
            dst.writestr(item, data)
    with pytest.raises(
        ModelImportError, match=r"damaged\.pt2 cannot be read by torch\.export\.load"
    ):
        dstorch.load(damaged)


def test_the_cli_takes_a_pt2(
    speech: tuple[Path, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path, model = speech
    assert main(["import", str(path)]) == 0
    text = capsys.readouterr().out
    assert "def @main(%x: Tensor[(" in text and "nn.conv2d" in text
    assert main(["import", str(path), "--stats"]) == 0
    out = capsys.readouterr().out
    assert "nodes: 8 (6 targets)" in out
    assert "aten.conv1d.default" in out
    (batch, _), (samples, _) = sorted(dstorch.load(path).ranges.items(), key=lambda kv: kv[1])
    assert main(["compile", str(path), "--emit", "types", "--dim", f"{batch}=2"]) == 0
    assert f"Tensor[(2, {samples}), float32]" in capsys.readouterr().out
    x = tmp_path / "x.npy"
    np.save(x, np.ones((1, 500), np.float32))
    saved = tmp_path / "out.npz"
    assert main(["run", str(path), "--input", f"x={x}", "-o", str(saved)]) == 0
    got = next(iter(np.load(saved).values()))
    expected = model(torch.ones(1, 500)).detach().numpy()
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)
    capsys.readouterr()
    assert main(["explain", str(path), "--bind", f"{batch}=1", "--bind", f"{samples}=16000"]) == 0
    assert "planned peak" in capsys.readouterr().out
    assert main(["explain", str(path), "--bind", f"{batch}=1", "--bind", f"{samples}=16001"]) == 1
    assert "16001" in capsys.readouterr().err


def _greedy(model: Decoder, prompt: np.ndarray, new: int) -> np.ndarray:
    ids = torch.from_numpy(prompt)
    past_k = past_v = torch.zeros(ids.shape[0], model.heads, 0, 8)
    tokens, out = ids, [ids]
    with torch.no_grad():
        for _ in range(new):
            logits, past_k, past_v = model(tokens, past_k, past_v)
            tokens = logits[:, -1].argmax(-1, keepdim=True)
            out.append(tokens)
    return torch.cat(out, 1).numpy()


def test_generate_runs_an_imported_decoder_step() -> None:
    torch.manual_seed(1)
    model = Decoder().eval()
    batch, seq, past = Dim("batch", max=8), Dim("seq", max=64), Dim("past", max=64)
    ep = export(
        model,
        (torch.randint(0, 50, (2, 3)), torch.randn(2, 2, 5, 8), torch.randn(2, 2, 5, 8)),
        dynamic_shapes={
            "input_ids": {0: batch, 1: seq},
            "past_key": {0: batch, 2: past},
            "past_value": {0: batch, 2: past},
        },
    )
    program = dstorch.load(
        ep,
        inputs=["input_ids", "past_key_values.0.key", "past_key_values.0.value"],
        outputs=["logits", "present.0.key", "present.0.value"],
    )
    exe = dynshape.compile(program)
    prompt = np.array([[3, 14, 15], [9, 2, 6]], np.int64)
    got = dynshape.generate(exe, prompt, max_new_tokens=6)
    np.testing.assert_array_equal(got, _greedy(model, prompt, 6))
