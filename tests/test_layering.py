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

#: What each package may import, of ours and of the heavy third-party libraries. ``ir`` reads
#: the op declarations of ``shape_funcs`` (and nothing else of it: ``DECLARATIONS_ONLY``).
ALLOWED = {
    "ir": {"ir", "shape_funcs", "dynshape_errors", "sympy", "numpy"},
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


def _imported_modules(path: Path) -> set[str]:
    """The full names of the modules ``path`` imports absolutely."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
    return names


#: Where ``shape_funcs`` is imported from outside it only for its op declarations.
DECLARATIONS_ONLY = ("ir",)
DECLARATIONS = "shape_funcs.declarations"


@pytest.mark.parametrize("package", DECLARATIONS_ONLY)
def test_ir_reads_only_the_declarations_of_shape_funcs(package: str) -> None:
    bad = [
        f"{path.relative_to(ROOT)} imports {name}"
        for path in sorted((ROOT / package).rglob("*.py"))
        for name in _imported_modules(path)
        if name.split(".")[0] == "shape_funcs"
        and name != DECLARATIONS
        and not name.startswith(DECLARATIONS + ".")
    ]
    assert not bad, "\n".join(bad)


def test_the_declarations_import_nothing_of_the_project() -> None:
    """They sit below both ``ir`` and ``vm``: plain data, no other module of ``shape_funcs``
    (a relative import stays inside the folder), no sympy."""
    folder = ROOT / "shape_funcs" / "declarations"
    bad = []
    for path in sorted(folder.rglob("*.py")):
        depth = len(path.relative_to(folder).parts)  # 1 in the folder, 2 in catalogue/
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and node.level >= depth + 1:
                bad.append(f"{path.relative_to(ROOT)} imports from outside the declarations")
        roots = _imported_roots(path) & (OURS | CHECKED_THIRD_PARTY)
        bad += [f"{path.relative_to(ROOT)} imports {r}" for r in roots - {"dynshape_errors"}]
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize(
    ("package", "forbidden"),
    [
        ("ir", ["dynshape", "vm"]),
        (DECLARATIONS, ["dynshape", "vm", "ir", "sympy"]),
        ("shape_funcs", ["dynshape", "vm", "ir", "sympy"]),
        ("vm", ["dynshape", "ir", "sympy"]),
        # the extras load only where they are asked for
        ("dynshape", ["onnx", "onnxruntime", "ray", "starlette", "torch", "dynshape.torch"]),
        ("dynshape.torch", ["torch"]),
        ("dynshape.serve", ["ray", "starlette"]),
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


#: Inside ``dynshape``: what each folder or top-level module may import of the others
#: (design/layering.md, "Inside dynshape"). The compiler never imports ``testing``.
INSIDE_DYNSHAPE = {
    "errors": set(),
    "dialect": {"errors"},
    "inference": {"errors"},
    "analysis": {"dialect", "errors", "inference"},
    "passes": {"analysis", "dialect", "errors", "inference"},
    "lower": {"analysis", "dialect", "errors"},
    "pipeline": {"errors", "lower", "passes"},
    "builder": {"errors", "inference", "pipeline"},
    "custom_op": {"builder", "errors"},
    "memory_report": {"analysis", "dialect", "inference", "pipeline"},
    "svg_layout": {"analysis", "memory_report"},
    "demo": {"pipeline"},
    "onnx": {"builder", "errors", "inference"},
    "torch": {"builder", "errors"},
    "cli": {"demo", "errors", "generate_loop", "generate_model", "memory_report", "onnx",
            "pipeline", "serve", "svg_layout", "torch"},
    "serve": {"errors", "generate_loop", "generate_model", "generate_sampling"},
    "frontend": {"onnx", "pipeline", "torch"},
    "batch_processes": {"analysis"},
    "session": {"batch_processes", "errors", "onnx", "pipeline"},
    "generate_model": {"errors", "session"},
    "generate_sampling": {"errors"},
    "generate_loop": {"errors", "generate_model", "generate_sampling"},
    "__main__": {"cli"},
    "__init__": {"builder", "custom_op", "errors", "frontend", "generate_loop", "passes",
                 "pipeline", "session"},
    "testing": {"analysis", "dialect", "errors", "inference", "lower", "passes", "pipeline"},
}  # fmt: skip


def _dynshape_units_imported(path: Path) -> set[str]:
    """The folders / top-level modules of ``dynshape`` that ``path`` imports (relative or not)."""
    pkg = path.relative_to(ROOT / "dynshape").parts[:-1]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.level:
            base = list(pkg[: len(pkg) - (node.level - 1)])
            parts = base + (node.module.split(".") if node.module else [])
            found |= {parts[0]} if parts else {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("dynshape."):
            found.add(node.module.split(".")[1])  # type: ignore[union-attr]
        elif isinstance(node, ast.Import):
            found |= {a.name.split(".")[1] for a in node.names if a.name.startswith("dynshape.")}
    return found


def test_the_folders_inside_dynshape_respect_their_layering() -> None:
    bad = []
    for path in sorted((ROOT / "dynshape").rglob("*.py")):
        parts = path.relative_to(ROOT / "dynshape").parts
        unit = parts[0] if len(parts) > 1 else parts[0].removesuffix(".py")
        assert unit in INSIDE_DYNSHAPE, f"dynshape/{'/'.join(parts)}: add {unit!r} to the table"
        for used in _dynshape_units_imported(path) - {unit}:
            if used not in INSIDE_DYNSHAPE[unit]:
                bad.append(f"dynshape/{'/'.join(parts)} imports dynshape.{used}")
    assert not bad, "\n".join(bad)


def _import_graph_tools():  # type: ignore[no-untyped-def]
    """``module_graph`` and ``cycles`` of tests/ir/test_import_cycles.py (loaded by path: two
    test folders cannot share a module name)."""
    import importlib.util

    path = ROOT / "tests" / "ir" / "test_import_cycles.py"
    spec = importlib.util.spec_from_file_location("_ir_import_cycles", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.module_graph, module.cycles


#: Imports allowed to close a cycle inside ``dynshape``: the tracer's. A traced value's
#: operators and indexing build IR through the tracer, and the tracer wraps what it builds in
#: values; both back edges are imports inside functions (design/layering.md).
DYNSHAPE_BACK_EDGES = {
    ("dynshape.builder.value", "dynshape.builder.indexing"),
    ("dynshape.builder.trace", "dynshape.builder.value"),
}


def test_the_only_cycle_inside_dynshape_is_the_tracers() -> None:
    module_graph, cycles = _import_graph_tools()
    graph = module_graph("dynshape")
    for source, target in DYNSHAPE_BACK_EDGES:
        assert graph[source].get(target) is True, f"{source} no longer imports {target} lazily"
    without = {
        m: {t: lazy for t, lazy in e.items() if (m, t) not in DYNSHAPE_BACK_EDGES}
        for m, e in graph.items()
    }
    assert cycles(without) == []


def test_only_the_importer_imports_onnx() -> None:
    """``onnx`` is an optional extra: only ``dynshape/onnx/`` names it, and importing dynshape
    (and compiling a program) loads none of it."""
    bad = [
        str(path.relative_to(ROOT))
        for package in ALLOWED
        for path in sorted((ROOT / package).rglob("*.py"))
        if "onnx" in _imported_roots(path) and (ROOT / "dynshape" / "onnx") not in path.parents
    ]
    assert not bad, bad
    code = (
        "import sys, dynshape\n"
        "dynshape.compile('def @main(%x: Tensor[(n,), float32]) { exp(%x) }')\n"
        "print(','.join(m for m in ('onnx', 'onnxruntime', 'dynshape.onnx') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_only_the_importer_imports_torch() -> None:
    """``torch`` is an optional extra: only ``dynshape/torch/`` names it, and importing
    dynshape (and compiling a program) loads none of it."""
    bad = [
        str(path.relative_to(ROOT))
        for package in ALLOWED
        for path in sorted((ROOT / package).rglob("*.py"))
        if "torch" in _imported_roots(path) and (ROOT / "dynshape" / "torch") not in path.parents
    ]
    assert not bad, bad
    code = (
        "import sys, dynshape\n"
        "dynshape.compile('def @main(%x: Tensor[(n,), float32]) { exp(%x) }')\n"
        "print(','.join(m for m in ('torch', 'dynshape.torch') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""
