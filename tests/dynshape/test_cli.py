"""The command line: demo, compile --emit, run; errors are one line and a non-zero status."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import dynshape
from dynshape import cli
from dynshape.cli import main

PROGRAM = """
def @main(%x: Tensor[(n, 4), float32], %y: Tensor[(1, 4), float32]) {
  %0 = add(%x, %y);
  argwhere(greater(%0, 0f))
}
"""


@pytest.fixture()
def program(tmp_path: Path) -> Path:
    path = tmp_path / "prog.txt"
    path.write_text(PROGRAM)
    return path


def test_demo_runs_the_seed_at_every_size(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo"]) == 0
    out = capsys.readouterr().out
    assert "memory.alloc_storage(size=40)" in out
    assert "memory.alloc_storage(size=4*n)" in out
    assert "n = 1,000,000: output shape (1000000,), equal to numpy: True" in out
    assert "all sizes match numpy: True" in out


@pytest.mark.parametrize(
    ("stage", "fragment"),
    [
        ("parsed", "%0 = add(%x, %y);"),
        ("types", "argwhere(%1) /* ty=Tensor[(?, 2), int64] */"),
        ("fused", "Primitive=1"),
        ("anf", "let %x1"),
        ("manifest", "memory.shape_func("),
        ("bytecode", "shape_func %"),
    ],
)
def test_compile_emits_every_stage(
    program: Path, stage: str, fragment: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["compile", str(program), "--emit", stage]) == 0
    assert fragment in capsys.readouterr().out


def test_compile_saves_and_run_loads_an_executable(
    program: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    exe = tmp_path / "prog.dsx"
    assert main(["compile", str(program), "-o", str(exe)]) == 0
    y = tmp_path / "y.npy"
    np.save(y, np.zeros((1, 4), np.float32))
    assert main(["run", str(exe), "--input", "x=3,4", "--input", f"y={y}", "--stats"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("out: int64[")
    assert "peak live bytes" in out


def test_run_compiles_text_and_profiles(program: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", str(program), "--input", "x=2,4", "--input", "y=1,4", "--profile"]) == 0
    assert "argwhere" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["compile", "no/such/file.txt", "--emit", "parsed"], "cannot read no/such/file.txt"),
        (["run", "{prog}", "--input", "x=3,4"], "missing --input y=SHAPE|FILE.npy"),
        (["run", "{prog}", "--input", "x=3;4", "--input", "y=1,4"], "a shape is comma-separated"),
        (["run", "{prog}", "--input", "z=1", "--input", "y=1,4"], "has no parameter 'z'"),
        (["run", "{prog}", "--input", "x=3,5", "--input", "y=1,4"], "axis 1 must be 4, got 5"),
        (["compile", "{prog}"], "compile needs --emit STAGE or -o OUTPUT"),
        (["compile", "{bad}", "--emit", "parsed"], "bad.txt:1:17: unknown op 'nosuchop'"),
        (["run", "{corrupt}", "--input", "x=1"], "not a dynshape VM executable"),
    ],
)
def test_errors_are_one_line_with_a_nonzero_status(
    argv: list[str], message: str, program: Path, tmp_path: Path
) -> None:
    bad = tmp_path / "bad.txt"
    bad.write_text("def @main(%x) { nosuchop(%x) }")
    corrupt = tmp_path / "corrupt.dsx"
    corrupt.write_bytes(b"DSHVMEXF" + bytes(100))
    argv = [a.format(prog=program, bad=bad, corrupt=corrupt) for a in argv]
    proc = subprocess.run(
        [sys.executable, "-m", "dynshape", *argv], capture_output=True, text=True, check=False
    )
    assert proc.returncode == 1
    assert proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("dynshape: ")
    assert message in lines[0]


# -- serve's HTTP port (the function around serve.start; Ray's own start is tests/serve's) -----


class _Steps:
    def __init__(self) -> None:
        self.said: list[str] = []

    def step(self, what: str) -> None:
        self.said.append(what)


def _taken_then_free(taken: int) -> tuple[list[int], object]:
    """A stand-in for ``serve.start`` whose proxy cannot bind ``taken`` (Ray's error text)."""
    tried: list[int] = []

    def start(http_options: dict[str, object]) -> None:
        port = http_options["port"]
        assert isinstance(port, int)
        tried.append(port)
        if port == taken:
            raise RuntimeError(f"Failed to bind to address '127.0.0.1:{port}'.")

    return tried, start


def test_any_free_port_is_tried_again_when_taken_meanwhile(monkeypatch) -> None:
    ports = iter([40001, 40002])
    monkeypatch.setattr(cli, "_free_port", lambda: next(ports))
    tried, start = _taken_then_free(40001)
    stops: list[int] = []
    got = cli._start_http(start, lambda: stops.append(1), 0, _Steps())
    assert (got, tried, stops) == (40002, [40001, 40002], [1])


def test_a_port_taken_is_said_not_raised_by_ray(monkeypatch) -> None:
    tried, start = _taken_then_free(40003)
    with pytest.raises(dynshape.DynShapeError, match=r"could not bind 127.0.0.1:40003: another"):
        cli._start_http(start, lambda: None, 40003, _Steps())
    monkeypatch.setattr(cli, "_free_port", lambda: 40003)  # taken at every try
    with pytest.raises(dynshape.DynShapeError, match=f"tried {cli.FREE_PORT_TRIES} free ports"):
        cli._start_http(start, lambda: None, 0, _Steps())
    assert tried == [40003] * (1 + cli.FREE_PORT_TRIES)


def test_another_start_failure_is_not_taken_for_a_port() -> None:
    def start(http_options: dict[str, object]) -> None:
        raise RuntimeError("the controller died")

    with pytest.raises(RuntimeError, match="the controller died"):
        cli._start_http(start, lambda: None, 0, _Steps())


def test_a_port_in_use_is_refused_before_anything_slow() -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        with pytest.raises(dynshape.DynShapeError, match=f"--port {port}: .* cannot be bound"):
            cli._port_is_free(port)
    cli._port_is_free(port)  # closed: free again
