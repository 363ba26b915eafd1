"""Uses and scopes of a function body in graph form: the analyses behind fuse_ops and to_anf.

A function body is a DAG: a node used twice is shared. Two facts about it matter to passes that
regroup or bind its nodes:

- **Uses.** ``use_graph`` lists every node reachable from a root in post-order (operands before
  their users) together with each node's uses: which parent uses it, and how (as an operand,
  as a branch of an ``if``, as a function body, as a let's value or body).
- **Scopes.** ``Placement`` decides, for every computation, the scope it is evaluated in: the
  lowest scope enclosing all of its uses, before its first use. That is the printer's rule
  (``ir/text/layout.py``, design/ir.md "Printing rules"), so a program converted to A-normal
  form binds each node where the graph-form printout showed its ``%k = ...;`` line. Scopes
  are function bodies, ``if`` branches and let bodies; a ``let`` that is an operand (a block
  value) opens a block of its own.

Primitive functions (``Primitive=1``) are values here: neither analysis enters their bodies,
which belong to the kernel, not to the function being analysed.

Everything is iterative: let chains and operand chains thousands long do not recurse.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from ir import Call, Constant, Expr, Function, GlobalVar, If, Let, Tuple, TupleGetItem, Var
from ir.graph import Scope, common_scope, post_order_uses


class Use(enum.Enum):
    """How a parent uses a child; decides the scope the use happens in."""

    OPERAND = "operand"
    """A call's callee or argument, a tuple field, a projected tuple, an ``if`` condition."""
    THEN = "then branch"
    ELSE = "else branch"
    BODY = "function body"
    VALUE = "let value"
    LET_BODY = "let body"
    ROOT = "root"
    """The root of the analysis (a function body): used by nobody inside it."""


#: Uses that are the result of a scope: a let used there continues that scope's let chain.
RESULT_USES = frozenset({Use.ROOT, Use.THEN, Use.ELSE, Use.BODY, Use.LET_BODY})


def is_value_atom(node: Expr) -> bool:
    """True for nodes that are never bound to a variable: variables, globals, constants and
    primitive functions (code, referenced where they are called)."""
    if isinstance(node, (Var, GlobalVar, Constant)):
        return True
    return isinstance(node, Function) and node.is_primitive


def children(node: Expr) -> list[tuple[Expr, Use]]:
    """The nodes ``node`` uses, in evaluation (and printing) order, with how it uses them.

    A primitive function has none: its body is not part of the enclosing function's graph.
    """
    if isinstance(node, Call):
        out = [(node.callee, Use.OPERAND)] if isinstance(node.callee, Expr) else []
        out.extend((a, Use.OPERAND) for a in node.args)
        return out
    if isinstance(node, Tuple):
        return [(f, Use.OPERAND) for f in node.fields]
    if isinstance(node, TupleGetItem):
        return [(node.tuple_value, Use.OPERAND)]
    if isinstance(node, If):
        return [
            (node.cond, Use.OPERAND),
            (node.then_branch, Use.THEN),
            (node.else_branch, Use.ELSE),
        ]
    if isinstance(node, Function):
        return [] if node.is_primitive else [(node.body, Use.BODY)]
    if isinstance(node, Let):
        return [(node.value, Use.VALUE), (node.body, Use.LET_BODY)]
    return []


UseList = list[tuple[Expr | None, Use]]


@dataclass
class UseGraph:
    """Every node reachable from a root, and how each is used."""

    order: list[Expr]
    """Post-order: each node after everything it uses. Reversed, users come first."""
    uses: dict[Expr, UseList]
    """For each node, ``(parent, use)`` per use, in the order the walk met them; the root has
    the single use ``(None, Use.ROOT)``. A parent using a node twice appears twice."""


def use_graph(root: Expr) -> UseGraph:
    """The post-order and the uses of every node reachable from ``root`` (iterative DFS)."""
    return UseGraph(*post_order_uses(root, children, Use.ROOT))


class Placement:
    """Where each computation reachable from ``root`` (a function body) is evaluated.

    - ``items`` of each scope: the nodes bound there, in post-order. Every non-atomic node is
      an item of the lowest scope enclosing its uses, except a *let value* (a node whose only
      use is the value of one ``let``: that let binds it) and a ``let`` that is a scope's
      result (it is the scope's chain itself).
    - A ``let`` that is not a scope's result (an operand, a let's value, or shared) is an item
      too: its own block (``line_scope[let]``) is spliced into the enclosing chain at its
      position, and its value is the block's result.
    """

    def __init__(self, root: Expr) -> None:
        graph = use_graph(root)
        self.root = Scope(None)
        self.home: dict[Expr, Scope] = {}
        """The scope a computation is evaluated in (for a let value: its let's line)."""
        self.line_scope: dict[Let, Scope] = {}
        """The scope whose chain holds the ``let`` line of each let."""
        self.let_values: set[Expr] = set()
        """Nodes bound directly by the only let whose value they are."""
        self._child: dict[tuple[Expr, Use], Scope] = {}
        for node in reversed(graph.order):  # users before the nodes they use
            if is_value_atom(node):
                continue
            node_uses = graph.uses[node]
            home = common_scope(self._site(parent, use) for parent, use in node_uses)
            self.home[node] = home
            only = node_uses[0][1] if len(node_uses) == 1 else None
            if isinstance(node, Let):
                if only in RESULT_USES:
                    self.line_scope[node] = home
                    continue
                self.line_scope[node] = Scope(home)
            elif only is Use.VALUE:
                self.let_values.add(node)
                continue
            home.items.append(node)
        for scope in {id(s): s for s in self._all_scopes()}.values():
            scope.items.reverse()

    def child(self, node: Expr, use: Use) -> Scope:
        """The scope ``node`` opens for its child used as ``use`` (a branch, a body)."""
        key = (node, use)
        scope = self._child.get(key)
        if scope is None:
            parent = self.line_scope[node] if isinstance(node, Let) else self.home[node]
            scope = self._child[key] = Scope(parent)
        return scope

    def _site(self, parent: Expr | None, use: Use) -> Scope:
        if parent is None:
            return self.root
        if use is Use.OPERAND:
            return self.home[parent]
        if use is Use.VALUE:
            assert isinstance(parent, Let)
            return self.line_scope[parent]
        return self.child(parent, use)

    def _all_scopes(self) -> list[Scope]:
        return [self.root, *self._child.values(), *self.line_scope.values()]
