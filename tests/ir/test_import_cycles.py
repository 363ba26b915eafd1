"""Import cycles inside ``ir`` (design/layering.md, "Inside ir").

Every import statement of the package counts, those inside functions too: a lazy import only
hides a cycle from the interpreter, not from a reader. The one cycle allowed is that the data
model's ``__str__`` (of expressions, modules and types) calls the printer, which needs the node
classes: ``str(node)`` is the text format.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

#: The imports allowed to close a cycle: ``__str__`` -> the printer, made inside the method.
ALLOWED_BACK_EDGES = {
    ("ir.expr", "ir.text.printer"),
    ("ir.module", "ir.text.printer"),
    ("ir.types", "ir.text.printer"),
}


def module_graph(package: str) -> dict[str, dict[str, bool]]:
    """``{module: {imported module of the package: True if only imported inside a function}}``.

    ``from . import x`` and ``from .pkg import x`` lead to the submodule ``x`` when there is
    one, else to the module named before ``import``. Importing a submodule also runs its
    package's ``__init__``, but that is not an edge here: a package always "imports" its
    children's parents, and counting it would put every package in a cycle with its modules.
    """
    files = {}
    for path in sorted((ROOT / package).rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        name = ".".join(parts[:-1] if is_package else parts)
        files[name] = (path, is_package)
    graph: dict[str, dict[str, bool]] = {}
    for name, (path, is_package) in files.items():
        here = name.split(".") if is_package else name.split(".")[:-1]
        edges: dict[str, bool] = {}

        def add(target: str, lazy: bool, name: str = name, edges: dict[str, bool] = edges) -> None:
            if target in files and target != name:
                edges[target] = edges.get(target, True) and lazy

        def walk(node: ast.AST, lazy: bool, here: list[str] = here) -> None:
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.Import):
                    for alias in child.names:
                        add(alias.name, lazy)
                elif isinstance(child, ast.ImportFrom):
                    base = here[: len(here) - child.level + 1] if child.level else []
                    module = ".".join([*base, *([child.module] if child.module else [])])
                    for alias in child.names:
                        sub = f"{module}.{alias.name}"
                        add(sub if sub in files else module, lazy)
                inner = isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
                walk(child, lazy or inner)

        walk(ast.parse(path.read_text(), str(path)), False)
        graph[name] = edges
    return graph


def cycles(graph: dict[str, dict[str, bool]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(graph[start]))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(graph[child])))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_the_cycle_finder_finds_a_cycle() -> None:
    graph = {"a": {"b": False}, "b": {"c": True}, "c": {"a": False}, "d": {"a": False}}
    assert cycles(graph) == [["a", "b", "c"]]
    assert cycles({"a": {"b": False}, "b": {}}) == []


def test_op_does_not_import_the_catalogue() -> None:
    graph = module_graph("ir")
    assert "ir.op" in graph and "ir.op" in graph["ir.ops._declare"]  # the catalogue -> op.py
    assert not [m for m in graph["ir.op"] if m == "ir.ops" or m.startswith("ir.ops.")]


def test_importing_ir_runs_no_cycle() -> None:
    top_level = {
        m: {t: lazy for t, lazy in e.items() if not lazy} for m, e in module_graph("ir").items()
    }
    assert cycles(top_level) == []


def test_the_only_cycle_in_ir_is_str_calling_the_printer() -> None:
    graph = module_graph("ir")
    for source, target in ALLOWED_BACK_EDGES:
        assert graph[source].get(target) is True, f"{source} no longer imports {target} lazily"
    assert cycles(graph) != []  # they do close a cycle: the printer needs the node classes
    without = {
        m: {t: lazy for t, lazy in e.items() if (m, t) not in ALLOWED_BACK_EDGES}
        for m, e in graph.items()
    }
    assert cycles(without) == []
