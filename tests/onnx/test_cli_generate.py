"""``python -m dynshape generate``: its output (one row a line, comma-separated, the padding it
added left out) is ``dynshape.generate``'s; prompts of different lengths, eos, sampling, a
saved executable; and the errors a user can hit, one line each."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

from generate_models import llama, successor  # noqa: E402

import dynshape  # noqa: E402
from dynshape.cli import main  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
NEWCOMER = ["--prompt-ids", "1,2,3", "--max-new-tokens", "4"]


@pytest.fixture(scope="module")
def succ_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("gen") / "succ.onnx"
    onnx.save(successor(vocab=16), str(path))
    return path


def _lines(capsys: pytest.CaptureFixture[str]) -> list[str]:
    return capsys.readouterr().out.splitlines()


def test_greedy_rows_eos_and_a_batch_of_prompts(
    succ_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["generate", str(succ_path), "--prompt-ids", "3,4", "--max-new-tokens", "3"]) == 0
    assert _lines(capsys) == ["3,4,5,6,7"]
    argv = ["generate", str(succ_path), "--prompt-ids", "3,4", "--prompt-ids", "13"]
    assert main([*argv, "--max-new-tokens", "5", "--eos-token-id", "15"]) == 0
    # row 1 meets 15 first and is padded with it; the loop ends when row 0 meets it
    assert _lines(capsys) == ["3,4,5,6,7,8,9", "13,14,15,15,15,15"]


def test_prompts_of_different_lengths_are_left_padded_and_masked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "llama.onnx"
    onnx.save(llama(layers=1), str(path))
    argv = ["generate", str(path), "--prompt-ids", "5,6,7", "--prompt-ids", "11"]
    assert main([*argv, "--max-new-tokens", "4"]) == 0
    ids = np.array([[5, 6, 7], [0, 0, 11]])
    mask = np.array([[1, 1, 1], [0, 0, 1]])
    expected = dynshape.generate(str(path), ids, 4, attention_mask=mask)
    assert _lines(capsys) == [
        ",".join(map(str, expected[0])),
        ",".join(map(str, expected[1, 2:])),
    ]


def test_sampling_with_a_seed(succ_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["generate", str(succ_path), "--prompt-ids", "1", "--max-new-tokens", "6"]
    options = ["--sample", "--seed", "5", "--temperature", "8", "--top-k", "4"]
    assert main([*argv, *options]) == 0
    first = _lines(capsys)
    assert main([*argv, *options]) == 0
    assert _lines(capsys) == first
    expected = dynshape.generate(
        str(succ_path), [[1]], 6, do_sample=True, seed=5, temperature=8.0, top_k=4
    )
    assert first == [",".join(map(str, expected[0]))]


def test_a_saved_executable(
    succ_path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    exe = tmp_path / "succ.dsx"
    assert main(["compile", str(succ_path), "-o", str(exe)]) == 0
    assert main(["generate", str(exe), "--prompt-ids", "7", "--max-new-tokens", "2"]) == 0
    assert _lines(capsys) == ["7,8,9"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--prompt-ids", "1,x"], "--prompt-ids '1,x': token ids are comma-separated ints (1,2,3)"),
        (["--prompt-ids", ""], "--prompt-ids '': token ids are comma-separated ints (1,2,3)"),
        (["--prompt-ids", "1,99"], "input_ids[0, 1] = 99 is not a token id of the model (0..15)"),
        (
            ["--prompt-ids", "1", "--eos-token-id", "a"],
            "--eos-token-id: token ids are comma-separated ints (1,2,3)",
        ),
        (
            ["--prompt-ids", "1", "--top-k", "3"],
            "top_k=3 is for sampling: pass do_sample=True (--sample; greedy decoding takes the "
            "most likely token and would ignore it)",
        ),
    ],
)
def test_bad_arguments(
    succ_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    assert main(["generate", str(succ_path), *args, "--max-new-tokens", "2"]) == 1
    assert capsys.readouterr().err == f"dynshape: error: {message}\n"


def test_a_model_that_is_not_a_decoder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "plain.onnx"
    onnx.save(successor(layers=0), str(path))
    assert main(["generate", str(path), "--prompt-ids", "1", "--max-new-tokens", "2"]) == 1
    assert capsys.readouterr().err.startswith(
        "dynshape: error: the model has no past_key_values.{i}.key/value inputs"
    )
    assert (
        main(
            ["generate", str(tmp_path / "none.onnx"), "--prompt-ids", "1", "--max-new-tokens", "2"]
        )
        == 1
    )
    assert "no such model file" in capsys.readouterr().err


def test_the_command_a_newcomer_runs(succ_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "dynshape", "generate", str(succ_path), *NEWCOMER],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, "1,2,3,4,5,6,7\n", "")
