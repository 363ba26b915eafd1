"""Walking an expression as a graph: every node once, operands before users, with its uses.

The printer (``text/layout.py``), the compiler's dataflow analysis and the lowering each decide
differently what a node's children are (whether a primitive function's body is inside, how a
use is labelled), so they pass their own ``children``; the walk itself is written once, here.
It is iterative, so programs nested thousands deep need no recursion.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TypeVar

from .expr import Expr

U = TypeVar("U")

#: ``children(node)``: the nodes it uses, in order, each with a label of how it is used.
Children = Callable[[Expr], Iterable[tuple[Expr, U]]]


def post_order_uses(
    root: Expr, children: Callable[[Expr], Iterable[tuple[Expr, U]]], root_use: U
) -> tuple[list[Expr], dict[Expr, list[tuple[Expr | None, U]]]]:
    """Every node reachable from ``root`` in post-order, and each node's ``(parent, use)`` list
    in the order the walk met them (``root`` has the single use ``(None, root_use)``; a parent
    using a node twice appears twice)."""
    uses: dict[Expr, list[tuple[Expr | None, U]]] = {root: [(None, root_use)]}
    order: list[Expr] = []
    stack = [(root, iter(children(root)))]
    while stack:
        node, pending = stack[-1]
        for child, use in pending:
            if child in uses:
                uses[child].append((node, use))
                continue
            uses[child] = [(node, use)]
            stack.append((child, iter(children(child))))
            break
        else:
            stack.pop()
            order.append(node)
    return order, uses


class Scope:
    """A block of code being laid out: a function body, an ``if`` branch, a let body or a let
    block, inside its ``parent`` (None for the outermost). The printer places the nodes it
    binds in scopes (``ir/text/layout.py``), and so does the ANF conversion
    (``dynshape/analysis/dataflow.py``): each node in the lowest scope enclosing its uses."""

    __slots__ = ("depth", "items", "parent")

    def __init__(self, parent: Scope | None) -> None:
        self.parent = parent
        self.depth: int = 0 if parent is None else parent.depth + 1
        self.items: list[Expr] = []
        """The nodes placed here, in dependency (post-)order."""


def common_scope(scopes: Iterable[Scope]) -> Scope:
    """The lowest scope enclosing all of ``scopes`` (at least one)."""
    it = iter(scopes)
    home = next(it)
    for other in it:
        a, b = home, other
        while a.depth > b.depth:
            a = a.parent  # type: ignore[assignment]
        while b.depth > a.depth:
            b = b.parent  # type: ignore[assignment]
        while a is not b:
            a, b = a.parent, b.parent  # type: ignore[assignment]
        home = a
    return home
