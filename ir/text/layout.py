"""Where each node of a function prints: the scope analysis behind the printer.

The printed form names every non-atomic node that is not printed in full at its single use
(``%0 = add(%x, %x);``). Such a *bound* node must appear in the scope that encloses all of its
uses (the lowest common ancestor of the scopes of its uses), before its first use. Scopes are
the function body, each ``if`` branch, each inline function body, each let body, and the
``{ ... }`` block of a let that is printed as a value.

Everything here is iterative: programs with thousands of chained bindings or nested lets do not
recurse.
"""

from __future__ import annotations

import enum

from ..expr import Call, Constant, Expr, Function, GlobalVar, If, Let, Tuple, TupleGetItem, Var
from ..graph import Scope, common_scope, post_order_uses

#: Nodes that always print inline, wherever they occur.
ATOMIC = (Var, GlobalVar, Constant)


class Use(enum.Enum):
    """How a node is used by its parent; decides the scope of the use."""

    PLAIN = "operand"
    """A callee, tuple field, projected tuple or condition: the parent's scope."""
    ARG = "argument"
    """A call argument: the parent's scope; a tuple used only there prints in place
    (``memory.invoke(%f, (%x, %y), (%t,))``): its fields are references, so it stays short."""
    THEN = "then"
    ELSE = "else"
    BODY = "function body"
    VALUE = "let value"
    """Printed in full on the ``let`` line when used only there."""
    LET_BODY = "let body"
    ROOT = "root"


#: Uses at which a node used only there prints in full instead of being bound.
_INLINE_USES = frozenset({Use.ROOT, Use.THEN, Use.ELSE, Use.BODY, Use.LET_BODY, Use.VALUE})
#: Uses that are the result of a scope (a let there prints as statements of that scope).
_RESULT_USES = _INLINE_USES - {Use.VALUE}


def children(node: Expr) -> list[tuple[Expr, Use]]:
    """The nodes ``node`` uses, in printing order, with how it uses them."""
    if isinstance(node, Call):
        out = [(node.callee, Use.PLAIN)] if isinstance(node.callee, Expr) else []
        return out + [(a, Use.ARG) for a in node.args]
    if isinstance(node, Tuple):
        return [(f, Use.PLAIN) for f in node.fields]
    if isinstance(node, TupleGetItem):
        return [(node.tuple_value, Use.PLAIN)]
    if isinstance(node, If):
        return [(node.cond, Use.PLAIN), (node.then_branch, Use.THEN), (node.else_branch, Use.ELSE)]
    if isinstance(node, Function):
        return [(node.body, Use.BODY)]
    if isinstance(node, Let):
        return [(node.value, Use.VALUE), (node.body, Use.LET_BODY)]
    return []


class Layout:
    """The placement of every node reachable from ``root`` (a function body or an expression).

    ``inline`` holds the non-atomic nodes printed in full at their only use; every other
    non-atomic node is an item of exactly one scope. ``let_scope[let]`` is the scope whose
    statements include the ``let`` line.
    """

    def __init__(self, root: Expr) -> None:
        self.root = Scope(None)
        self.inline: set[Expr] = set()
        self.placement: dict[Expr, Scope] = {}
        self.let_scope: dict[Let, Scope] = {}
        self._child_scopes: dict[tuple[Expr, Use], Scope] = {}
        order, uses = post_order_uses(root, children, Use.ROOT)
        # Reverse post-order visits every user of a node before the node itself.
        for node in reversed(order):
            if isinstance(node, ATOMIC):
                continue
            node_uses = uses[node]
            sites = [self._site(parent, use) for parent, use in node_uses]
            only_use = node_uses[0][1] if len(node_uses) == 1 else None
            if only_use in _INLINE_USES or (only_use is Use.ARG and isinstance(node, Tuple)):
                self.inline.add(node)
                home = sites[0]
            else:
                home = common_scope(sites)
                home.items.append(node)
            self.placement[node] = home
            if isinstance(node, Let):
                # A let that is a scope's result prints as statements of that scope; any other
                # let prints as a "{ let ...; ... }" block of its own.
                self.let_scope[node] = home if only_use in _RESULT_USES else Scope(home)
        self._reverse_items(self.root)

    def scope(self, node: Expr, use: Use) -> Scope:
        """The scope opened by ``node`` for its child used as ``use`` (branch, body...)."""
        key = (node, use)
        scope = self._child_scopes.get(key)
        if scope is None:
            parent = self.let_scope[node] if isinstance(node, Let) else self.placement[node]
            scope = self._child_scopes[key] = Scope(parent)
        return scope

    def _site(self, parent: Expr | None, use: Use) -> Scope:
        if parent is None:
            return self.root
        if use is Use.PLAIN or use is Use.ARG:
            return self.placement[parent]
        if use is Use.VALUE:
            assert isinstance(parent, Let)
            return self.let_scope[parent]
        return self.scope(parent, use)

    def _reverse_items(self, _root: Scope) -> None:
        seen: set[int] = set()
        for scope in [self.root, *self._child_scopes.values(), *self.let_scope.values()]:
            if id(scope) not in seen:
                seen.add(id(scope))
                scope.items.reverse()
