"""The layering of the four packages (see design/layering.md), checked two ways.

Statically: every import statement in a package names only what that package may use.
Dynamically: importing a package in a fresh interpreter loads nothing it must not.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
OURS = {"ir", "shape_funcs", "vm", "dynshape", "dynshape_errors"}

#: What each package may import, of ours and of the heavy third-party libraries.
ALLOWED = {
    "ir": {"ir", "dynshape_errors", "sympy", "numpy"},
    "shape_funcs": {"shape_funcs", "dynshape_errors", "numpy"},
    "vm": {"vm", "shape_funcs", "dynshape_errors", "numpy"},
    "dynshape": OURS | {"sympy", "numpy"},
}
CHECKED_THIRD_PARTY = {"sympy", "numpy"}


def _imported_roots(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), str(path))
    roots: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            roots |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            roots.add(node.module.split(".")[0])
    return roots


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_imports_respect_the_layering(package: str) -> None:
    files = sorted((ROOT / package).rglob("*.py"))
    assert files, f"package {package} has no files"
    bad = []
    for path in files:
        for root in _imported_roots(path):
            if (root in OURS or root in CHECKED_THIRD_PARTY) and root not in ALLOWED[package]:
                bad.append(f"{path.relative_to(ROOT)} imports {root}")
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize(
    ("package", "forbidden"),
    [
        ("ir", ["dynshape", "vm", "shape_funcs"]),
        ("shape_funcs", ["dynshape", "vm", "ir", "sympy"]),
        ("vm", ["dynshape", "ir", "sympy"]),
    ],
)
def test_importing_a_package_loads_nothing_forbidden(package: str, forbidden: list[str]) -> None:
    code = (
        f"import sys, {package}\n"
        f"bad = [m for m in {forbidden!r} if m in sys.modules]\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "", f"importing {package} loaded {out.stdout.strip()}"


def test_every_error_derives_from_the_project_base() -> None:
    import dynshape_errors
    import ir
    import shape_funcs

    assert issubclass(ir.IRError, dynshape_errors.DynShapeError)
    assert issubclass(ir.ParseError, ir.IRError)
    assert issubclass(shape_funcs.ShapeError, dynshape_errors.DynShapeError)
