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
