"""The CLI with ONNX models: ``import`` (text, -o, --stats, --dim), and ``compile``, ``run``,
``explain`` taking a ``.onnx`` file directly; the errors a user can hit."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

from test_import import HEADS  # noqa: E402

from dynshape.cli import main  # noqa: E402


@pytest.fixture
def heads(tmp_path: Path) -> Path:
    path = tmp_path / "heads.onnx"
    onnx.save(HEADS, str(path))
    return path


def test_import_prints_the_program(heads: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["import", str(heads)]) == 0
    out = capsys.readouterr().out
    assert "def @main(%x: Tensor[(batch, seq, 64), float32])" in out
    assert "newshape=[batch, seq, 4, -1]" in out


def test_import_saves_text_that_compiles(heads: Path, tmp_path: Path) -> None:
    text = tmp_path / "heads.txt"
    assert main(["import", str(heads), "-o", str(text), "--dim", "batch=1:8"]) == 0
    assert "where batch in [1, 8]" in text.read_text()
    exe = tmp_path / "heads.dsx"
    assert main(["compile", str(text), "-o", str(exe)]) == 0
    assert exe.stat().st_size > 0


def test_import_stats(heads: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["import", str(heads), "--stats"]) == 0
    out = capsys.readouterr().out
    assert "node outputs: 8" in out
    rows = {line[:40].strip(): line[40:].split() for line in out.splitlines()[1:]}
    assert rows["known at import (constants, shapes)"] == ["6", "75.0%"]
    assert rows["fully symbolic shape"] == ["2", "25.0%"]
    assert rows["partially known shape"] == rows["unknown shape"] == ["0", "0.0%"]
    assert "def @main" not in out  # --stats alone prints the figures only


def test_compile_run_and_explain_take_an_onnx_file(
    heads: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["compile", str(heads), "--emit", "types", "--dim", "batch=2"]) == 0
    assert "Tensor[(2, 4, seq, 16), float32]" in capsys.readouterr().out
    x = tmp_path / "x.npy"
    np.save(x, np.ones((2, 3, 64), np.float32))
    saved = tmp_path / "out.npz"
    assert main(["run", str(heads), "--input", f"x={x}", "-o", str(saved)]) == 0
    assert "y: float32[2, 4, 3, 16]" in capsys.readouterr().out  # the model's output name
    assert list(np.load(saved)) == ["y"]
    assert main(["explain", str(heads), "--bind", "batch=2", "--bind", "seq=8"]) == 0
    assert "planned peak" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["import", "prog.txt"],
            "import takes an ONNX model (.onnx) or a torch.export program (.pt2), got prog.txt",
        ),
        (["import", "HEADS", "--dim", "batch"], "--dim 'batch': expected NAME=SIZE"),
        (["import", "HEADS", "--dim", "batch=1:x"], "--dim 'batch=1:x': expected NAME=SIZE"),
        (["import", "HEADS", "--dim", "time=3"], "dims= names time, which no input"),
        (["import", "missing.onnx"], "missing.onnx: no such model file"),
    ],
)
def test_cli_errors_are_one_line(
    heads: Path, argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = [str(heads) if a == "HEADS" else a for a in argv]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert err.startswith("dynshape: error: ") and message in err, err
    assert len(err.strip().splitlines()) == 1


def test_dim_is_refused_for_a_text_program(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    prog = tmp_path / "p.txt"
    prog.write_text("def @main(%x: Tensor[(n,), float32]) { %x }\n")
    assert main(["compile", str(prog), "--emit", "types", "--dim", "n=3"]) == 1
    assert "--dim is for models (.onnx, .pt2)" in capsys.readouterr().err
