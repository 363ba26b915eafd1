"""Which targets a program uses: their keys in ``CONVERTERS``, the nodes that compute numbers
(no converter needed), the nodes of subgraphs (``cond`` branches, loop bodies), the listing
of every unsupported target with its count, and the refusal of programs that update state."""

from __future__ import annotations

from typing import Any

from ..errors import ModelImportError
from . import assertions
from .reading import torch_module
from .registry import CONVERTERS


def check_outputs(ep: Any) -> None:
    """A program that mutates its buffers or inputs (a training-mode batch norm's running
    statistics: a mutation output after decomposition, an in-place ``add_`` in the default
    IR) is refused by name: dynshape programs are functions of their inputs."""
    torch = torch_module()
    kinds = torch.export.graph_signature.OutputKind
    mutated = [
        f"{spec.kind.name.lower()} of {spec.target}"
        for spec in ep.graph_signature.output_specs
        if spec.kind != kinds.USER_OUTPUT
    ]
    for node in ep.graph.nodes:
        target = node.target
        if node.op == "call_function" and isinstance(target, torch._ops.OpOverload):
            name = target.overloadpacket.__name__
            if name.endswith("_") and not name.startswith("_") and node.args:
                mutated.append(f"{target} of {node.args[0]}")
    if mutated:
        raise ModelImportError(
            f"the exported program cannot be imported: unsupported: it updates state "
            f"({', '.join(mutated[:3])}{', ...' if len(mutated) > 3 else ''}); export the model "
            "in eval mode (model.eval())"
        )


def target_key(target: Any) -> str:
    """The key of a node's target in ``CONVERTERS``: ``aten.linear.default``, ``operator.getitem``,
    ``higher_order.cond``."""
    torch = torch_module()
    if isinstance(target, torch._ops.OpOverload):
        return str(target)
    if isinstance(target, torch._ops.HigherOrderOperator):
        return f"higher_order.{target.name()}"
    module = getattr(target, "__module__", None) or ""
    name = getattr(target, "__name__", None) or str(target)
    if module in ("_operator", "operator") or module == "builtins":
        return f"operator.{name}"
    return f"{module}.{name}"


def is_scalar(node: Any) -> bool:
    """Whether ``node`` computes a (symbolic) number, not a tensor: its value is what torch
    recorded (``meta["val"]``), so its target needs no converter."""
    torch = torch_module()
    val = node.meta.get("val")
    scalar = (torch.SymInt, torch.SymBool, torch.SymFloat, int, float, bool)
    return isinstance(val, scalar) and target_key(node.target) not in assertions.TARGETS


def missing_targets(ep: Any) -> list[str]:
    """One line per target with no converter: the target, its count and its first nodes."""
    missing: dict[str, list[str]] = {}
    for node in all_nodes(ep.graph_module):
        if node.op == "call_function":
            key = target_key(node.target)
            if key in CONVERTERS or key in assertions.TARGETS or is_scalar(node):
                continue
        elif node.op == "get_attr" and _is_graph(submodule(ep.graph_module, node.target)):
            continue  # a branch or loop body: its nodes are listed with the others
        elif node.op in ("call_module", "call_method", "get_attr"):
            key = f"{node.op} {node.target}"
        else:
            continue
        missing.setdefault(key, []).append(node.name)
    return [
        f"unsupported target {key} ({len(names)} node(s): {', '.join(names[:5])}"
        f"{', ...' if len(names) > 5 else ''})"
        for key, names in sorted(missing.items())
    ]


def submodule(module: Any, target: str) -> Any:
    """The attribute ``target`` (dotted) of ``module``, or None."""
    for part in str(target).split("."):
        module = getattr(module, part, None)
    return module


def _is_graph(value: Any) -> bool:
    return isinstance(value, torch_module().fx.GraphModule)


def all_nodes(module: Any) -> list[Any]:
    """The nodes of a graph module and of the subgraphs it reads (``cond`` branches)."""
    out = []
    for node in module.graph.nodes:
        out.append(node)
        if node.op == "get_attr":
            sub = submodule(module, node.target)
            if _is_graph(sub):
                out += all_nodes(sub)
    return out
