"""The nesting limit: how deep an expression may be, checked once where programs enter.

The walks over expressions (type inference, the passes, the printer's helpers, structural
equality, the lowering, the reference interpreter) recurse once per level of nesting, a few
Python frames per level. So a program's nesting is bounded by ``MAX_NESTING``, checked here
iteratively (linear in the number of nodes, no recursion) by the parser, ``dynshape.compile``,
the builder and the reference interpreter; everything after those entries relies on the bound
(see design/ir.md, "Recursion depth").

*Nesting* is the longest chain of nodes, each a child of the one before, that the walks recurse
along: a call's callee and operands, a function's parameters and body, a tuple's fields, a
projection's tuple, an if's condition and branches, a let's variable and value. A let's body is
not a level: every walk iterates let chains, so a let chain is one level however long it is
(a graph binding ``%k = e;`` names a node and does nest: ``%1 = add(%0, 1f)`` is one level
above ``%0``). Atoms (variables, globals, constants) are one level.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping

from .errors import IRError
from .expr import Call, Constant, Expr, Function, GlobalVar, If, Let, Tuple, TupleGetItem, Var

__all__ = [
    "MAX_NESTING",
    "RECURSION_LIMIT",
    "allow_deep_recursion",
    "check_nesting",
    "find_too_deep",
    "nesting_depth",
    "too_deep_message",
]

#: The deepest nesting every stage handles. The walks use at most about 4 Python frames per
#: level (the parser: expr, primary, op_call, arguments) and the recursion limit is raised to
#: 100,000 (ir/functor.py), so 25,000 levels is where recursion runs out; 10,000 leaves room
#: for the caller's own frames and for walks that use more frames per level.
MAX_NESTING = 10_000
#: Python's recursion limit while a recursive walk runs (see ``MAX_NESTING``).
RECURSION_LIMIT = 100_000


def allow_deep_recursion() -> None:
    """Raise Python's recursion limit to ``RECURSION_LIMIT`` if it is lower: each recursive walk
    (visitors, parser, printer, structural equality) calls this where it starts."""
    if sys.getrecursionlimit() < RECURSION_LIMIT:
        sys.setrecursionlimit(RECURSION_LIMIT)


ADVICE = "bind intermediate values with let ('let %v = ...;'), which does not nest"

_ATOMS = (Var, GlobalVar, Constant)


def too_deep_message(where: str | None = None) -> str:
    """The text of the error for a program nested beyond ``MAX_NESTING``."""
    at = f" in {where}" if where else ""
    return (
        f"expression nested too deeply{at}: more than {MAX_NESTING} levels (the nesting "
        f"limit, ir.MAX_NESTING); {ADVICE}"
    )


def _children(node: Expr) -> list[tuple[Expr, int]]:
    """The nodes a walk recurses into from ``node``, each with the levels it adds (0 for a
    let's body: let chains are iterated)."""
    if isinstance(node, Call):
        kids = [(a, 1) for a in node.args]
        if isinstance(node.callee, Expr):
            kids.append((node.callee, 1))
        return kids
    if isinstance(node, Let):
        body = node.body
        return [(node.var, 1), (node.value, 1), (body, 0 if isinstance(body, Let) else 1)]
    if isinstance(node, Function):
        return [(p, 1) for p in node.params] + [(node.body, 1)]
    if isinstance(node, Tuple):
        return [(f, 1) for f in node.fields]
    if isinstance(node, TupleGetItem):
        return [(node.tuple_value, 1)]
    if isinstance(node, If):
        return [(node.cond, 1), (node.then_branch, 1), (node.else_branch, 1)]
    raise TypeError(f"not an expression node: {type(node).__name__}")


def _deepest(root: Expr, limit: int, heights: dict[Expr, int]) -> Expr | None:
    """Fill ``heights`` (the nesting of each node below ``root``) bottom-up, without recursion;
    stop at the first node nested more than ``limit`` levels and return it."""
    stack = [root]
    while stack:
        node = stack[-1]
        if node in heights:
            stack.pop()
            continue
        if isinstance(node, _ATOMS):
            heights[node] = 1
            stack.pop()
            continue
        kids = _children(node)
        pending = [k for k, _ in kids if k not in heights]
        if pending:
            stack.extend(pending)
            continue
        stack.pop()
        height = max([heights[k] + extra for k, extra in kids], default=1)
        if height > limit:
            return node
        heights[node] = height
    return None


def nesting_depth(expr: Expr) -> int:
    """The nesting of ``expr`` (see the module doc): 1 for an atom, ``n + 1`` for ``exp`` of an
    expression of nesting ``n``. Linear in the number of nodes; no recursion."""
    heights: dict[Expr, int] = {}
    _deepest(expr, 1 << 62, heights)
    return heights[expr]


def find_too_deep(
    program: Expr | Mapping[str, Function], limit: int | None = None
) -> tuple[str | None, Expr] | None:
    """The first node nested more than ``limit`` (default ``MAX_NESTING``) levels, with the
    name of its global function (None for an expression), or None when all is within it."""
    limit = MAX_NESTING if limit is None else limit
    heights: dict[Expr, int] = {}
    items = [(None, program)] if isinstance(program, Expr) else list(program.items())
    for name, root in items:
        node = _deepest(root, limit, heights)
        if node is not None:
            return name, node
    return None


def check_nesting(program: Expr | Mapping[str, Function], what: str | None = None) -> None:
    """Raise ``IRError`` if ``program`` (a module or an expression) is nested more than
    ``MAX_NESTING`` levels: the message names the function, the node's span if it has one,
    and says what to do. ``what`` names an expression in the message (e.g. its builder)."""
    found = find_too_deep(program)
    if found is None:
        return
    name, node = found
    where = f"@{name}" if name is not None else what
    raise IRError(too_deep_message(where), node.span)
