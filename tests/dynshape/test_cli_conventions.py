"""The command line without papercuts (issue 17, item 3), tried from a shell as a user would:
custom ops by --import, results printed whole and saved, statistics on request, --bind checked,
common options on either side of the subcommand, --version, a closed pipe, an empty program."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]

PROGRAM = """
def @main(%x: Tensor[(n, 4), float32]) -> Tensor[(n, 4), float32] where n in [1, 512] {
  add(exp(%x), %x)
}
"""

TWO_RESULTS = """
def @main(%x: Tensor[(n, 4), float32]) -> (Tensor[(n, 4), float32], Tensor[(n,), float32]) {
  (negative(%x), sum(%x, axis=[1]))
}
"""

CUSTOM = """
import numpy as np
import dynshape

dynshape.register_op(
    "cli_test.twice",
    pattern="elementwise",
    kernel=lambda x, out: np.multiply(x, 2, out=out),
)
"""


def cli(
    *argv: str, cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "dynshape", *argv],
        capture_output=True,
        text=True,
        check=False,
        cwd=cwd,
        env={**os.environ, **(env or {})},
    )


@pytest.fixture()
def work(tmp_path: Path) -> Path:
    (tmp_path / "prog.txt").write_text(PROGRAM)
    (tmp_path / "two.txt").write_text(TWO_RESULTS)
    return tmp_path


def test_import_makes_custom_ops_usable_on_every_command(work: Path) -> None:
    (work / "my_ops.py").write_text(textwrap.dedent(CUSTOM))
    (work / "custom.txt").write_text(
        "def @main(%x: Tensor[(n,), float32]) -> Tensor[(n,), float32] { cli_test.twice(%x) }"
    )
    env = {"PYTHONPATH": os.pathsep.join([str(work), str(ROOT)])}
    without = cli("compile", "custom.txt", "-o", "c.dsx", cwd=work, env=env)
    assert without.returncode == 1 and "unknown op 'cli_test.twice'" in without.stderr
    made = cli("--import", "my_ops", "compile", "custom.txt", "-o", "c.dsx", cwd=work, env=env)
    assert made.returncode == 0, made.stderr
    ran = cli("run", "c.dsx", "--import", "my_ops", "--input", "x=3", cwd=work, env=env)
    assert ran.returncode == 0, ran.stderr and ran.stdout.startswith("out: float32[3]")
    # the executable alone, without the module: the loader says what to do
    alone = cli("run", "c.dsx", "--input", "x=3", cwd=work, env=env)
    assert alone.returncode == 1 and "--import MODULE" in alone.stderr
    missing = cli("run", "c.dsx", "--import", "no_such_module", "--input", "x=3", cwd=work)
    assert "--import no_such_module: ModuleNotFoundError" in missing.stderr


def test_run_prints_results_whole_up_to_a_size_and_saves_them(work: Path) -> None:
    small = cli("run", "prog.txt", "--input", "x=250,4", cwd=work)  # 1,000 elements
    assert small.returncode == 0 and "..." not in small.stdout
    assert "peak live bytes" not in small.stdout  # statistics only when asked for
    large = cli("run", "prog.txt", "--input", "x=251,4", cwd=work)
    assert "..." in large.stdout and "-o FILE.npz saves it whole" in large.stdout
    saved = cli("run", "two.txt", "--input", "x=3,4", "-o", "res.npz", "--stats", cwd=work)
    assert saved.returncode == 0, saved.stderr
    assert "peak live bytes" in saved.stdout
    with np.load(work / "res.npz") as data:
        assert sorted(data) == ["out.0", "out.1"]
        assert data["out.0"].shape == (3, 4) and data["out.1"].shape == (3,)
        np.testing.assert_allclose(data["out.1"], -data["out.0"].sum(axis=1), rtol=1e-6)


@pytest.mark.parametrize(
    ("binds", "message"),
    [
        (["--bind", "m=3"], "m is not a symbol of the program; no value for n"),
        (["--bind", "nn=3"], "nn is not a symbol of the program (did you mean 'n'?)"),
        (["--bind", "n=-1"], "n=-1 is negative"),
        (["--bind", "n=1000"], "n=1000 is outside its range [1, 512]"),
        (["--svg", "x.svg"], "no value for n (give each: --bind n=INT)"),
        (["--bind", "n=x"], "--bind 'n=x': expected NAME=INT"),
    ],
)
def test_explain_checks_every_binding(work: Path, binds: list[str], message: str) -> None:
    proc = cli("explain", "prog.txt", *binds, cwd=work)
    assert proc.returncode == 1 and message in proc.stderr, proc.stderr


def test_explain_at_a_binding_and_without_one(work: Path) -> None:
    proc = cli("explain", "prog.txt", "--bind", "n=8", cwd=work)
    assert proc.returncode == 0 and "= 128 bytes" in proc.stdout
    symbolic = cli("explain", "prog.txt", cwd=work)
    assert symbolic.returncode == 0 and "16*n" in symbolic.stdout
    assert "= 128 bytes" not in symbolic.stdout  # formulas only: no size was guessed


def test_common_options_before_or_after_the_subcommand(work: Path) -> None:
    (work / "bad.txt").write_text("def @main(%x: float32) {\n  nosuchop(%x)\n}")
    for argv in (
        ("--full-errors", "compile", "bad.txt", "--emit", "parsed"),
        ("compile", "bad.txt", "--emit", "parsed", "--full-errors"),
    ):
        proc = cli(*argv, cwd=work)
        assert proc.returncode == 1 and len(proc.stderr.strip().splitlines()) > 1, argv
    short = cli("compile", "bad.txt", "--emit", "parsed", cwd=work)
    assert len(short.stderr.strip().splitlines()) == 1


def test_version_and_help_without_markup(work: Path) -> None:
    import dynshape

    version = cli("--version", cwd=work)
    assert version.returncode == 0 and version.stdout.strip() == f"dynshape {dynshape.__version__}"
    for argv in (("--help",), ("run", "--help"), ("explain", "--help")):
        text = cli(*argv, cwd=work).stdout
        assert "``" not in text and text.startswith("usage: dynshape"), argv


def test_a_closed_pipe_ends_quietly_and_the_svg_is_written_first(work: Path) -> None:
    for argv in (
        ("run", "prog.txt", "--input", "x=500,4"),
        ("explain", "prog.txt", "--bind", "n=4", "--svg", "layout.svg"),
    ):
        proc = subprocess.Popen(
            [sys.executable, "-m", "dynshape", *argv],
            cwd=work,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert proc.stdout is not None and proc.stderr is not None
        proc.stdout.readline()
        proc.stdout.close()  # the reader goes away, as `| head -1` does
        err = proc.stderr.read()
        proc.wait(timeout=60)
        proc.stderr.close()
        assert "Traceback" not in err and "BrokenPipeError" not in err, err
        assert proc.returncode in (0, 141)
    assert (work / "layout.svg").read_text().startswith("<svg")


def test_an_empty_program_is_a_compile_error(work: Path) -> None:
    (work / "empty.txt").write_text("// nothing here\n")
    proc = cli("compile", "empty.txt", "-o", "e.dsx", cwd=work)
    assert proc.returncode == 1
    assert "compile error: empty.txt: the program is empty: it defines no function" in proc.stderr
    assert not (work / "e.dsx").exists()


def test_explain_of_an_executable_says_what_to_do_instead(work: Path) -> None:
    assert cli("compile", "prog.txt", "-o", "prog.dsx", cwd=work).returncode == 0
    proc = cli("explain", "prog.dsx", cwd=work)
    assert proc.returncode == 1
    assert "prog.dsx is a compiled executable" in proc.stderr
    assert "dynshape run prog.dsx --input ... --stats" in proc.stderr
