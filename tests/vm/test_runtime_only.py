"""The runtime alone (issue 17, item 7): what the ``dynshape-runtime`` distribution holds
(``runtime/pyproject.toml``: ``vm``, ``shape_funcs``, ``dynshape_errors``) loads and runs a
saved executable in a Python that has numpy and nothing else of ours: no sympy, no ``ir``, no
``dynshape``. Hermetic: the packages are copied as the wheel would hold them and numpy is
linked in; ``.ci/run`` also builds the real wheel and installs it into an empty virtualenv."""

from __future__ import annotations

import fnmatch
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import dynshape

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = """
import sys
sys.path.insert(0, {site!r})  # -I -S: the standard library only, then this
for banned in ("sympy", "ir", "dynshape"):
    try:
        __import__(banned)
    except ImportError:
        pass
    else:
        raise SystemExit(f"{{banned}} is importable: the environment is not the runtime's")
import numpy as np
from vm import Executable, VirtualMachine, VMArgumentError

exe = Executable.load({exe!r})
vm = VirtualMachine(exe)
x = np.load({x!r})
np.save({out!r}, vm.run(x=x))
try:
    vm.run(x.astype(np.float64))
except VMArgumentError as e:
    print("refused:", e)
assert "sympy" not in sys.modules and "ir" not in sys.modules, sorted(sys.modules)
print("ran without", ", ".join(m for m in ("sympy", "ir", "dynshape") if m not in sys.modules))
"""


def _runtime_contents() -> tuple[list[str], list[str]]:
    """The package patterns and top-level modules ``runtime/pyproject.toml`` ships."""
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    config = tomllib.loads((ROOT / "runtime" / "pyproject.toml").read_text())
    tool = config["tool"]["setuptools"]
    main = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert config["project"]["version"] == main["version"]
    assert config["project"]["dependencies"] == ["numpy>=1.24"], "numpy must be the only dep"
    assert "numpy>=1.24" in main["dependencies"]
    return tool["packages"]["find"]["include"], tool["py-modules"]


def _copy_runtime(site: Path) -> None:
    patterns, modules = _runtime_contents()
    for top in sorted(p for p in ROOT.iterdir() if (p / "__init__.py").is_file()):
        if not any(fnmatch.fnmatch(top.name, pat) for pat in patterns):
            continue
        for src in top.rglob("*.py"):
            dst = site / src.relative_to(ROOT)
            dst.parent.mkdir(parents=True, exist_ok=True)
            dst.write_bytes(src.read_bytes())
    for module in modules:
        (site / f"{module}.py").write_bytes((ROOT / f"{module}.py").read_bytes())
    numpy_dir = Path(np.__file__).parent
    os.symlink(numpy_dir, site / "numpy")
    libs = numpy_dir.parent / "numpy.libs"
    if libs.is_dir():
        os.symlink(libs, site / "numpy.libs")


def test_a_saved_executable_runs_with_numpy_only(tmp_path: Path) -> None:
    site = tmp_path / "site"
    site.mkdir()
    _copy_runtime(site)
    assert not (site / "ir").exists() and not (site / "dynshape").exists()
    exe = dynshape.compile(
        "def @main(%x: Tensor[(n, 4), float32]) -> Tensor[(n,), float32] {\n"
        "  sum(multiply(exp(%x), 2f), axis=[1])\n}"
    )
    exe.save(tmp_path / "model.dsx")
    x = np.random.default_rng(0).standard_normal((5, 4)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    script = SCRIPT.format(
        site=str(site),
        exe=str(tmp_path / "model.dsx"),
        x=str(tmp_path / "x.npy"),
        out=str(tmp_path / "out.npy"),
    )
    proc = subprocess.run(
        [sys.executable, "-I", "-S", "-c", textwrap.dedent(script)],
        capture_output=True,
        text=True,
        check=False,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr + proc.stdout
    assert "ran without sympy, ir, dynshape" in proc.stdout
    assert "refused: main: parameter 'x': expected dtype float32, got float64" in proc.stdout
    got = np.load(tmp_path / "out.npy")
    np.testing.assert_allclose(got, (np.exp(x) * 2).sum(axis=1), rtol=1e-5)
