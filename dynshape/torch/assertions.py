"""torch's run-time assertions as dynshape's entry checks.

``aten._assert_scalar(cond, msg)`` asserts a relation of sizes that the export assumed
(``torch._check(x.shape[0] >= 4)``, or a guard torch could not prove). Decision:

- a relation the ranges already prove is dropped;
- a bound on one symbol (``s0 >= 4``, ``s0 <= 100``, ``s0 == 8``'s two sides) narrows that
  symbol's range, which the compiled program checks at entry with dynshape's message
  (the argument, axis, symbol and value);
- any other relation is unsupported (named with the node): dynshape has no op that checks an
  arbitrary relation of dims at run time, and dropping it could run the program on sizes
  torch refuses.

``aten._assert_tensor_metadata`` (dtype/device checks of the default IR) is dropped: the
program's input types already fix the dtypes.
"""

from __future__ import annotations

from typing import Any

import sympy

import ir

from .registry import NodeError, Unsupported

#: The targets handled here rather than by a converter.
TARGETS = frozenset({"aten._assert_scalar.default", "aten._assert_tensor_metadata.default"})

_OPS = {"==": "==", ">=": ">=", "<=": "<=", ">": ">", "<": "<", "!=": "!="}


def check(importer: Any, node: Any, where: str) -> None:
    """Apply the assertion of ``node`` (see the module doc)."""
    if str(node.target) == "aten._assert_tensor_metadata.default":
        return
    cond = node.args[0] if node.args else None
    meta = getattr(cond, "meta", None)
    val = meta.get("val") if isinstance(meta, dict) else cond
    if isinstance(val, bool):
        if not val:
            raise NodeError("the assertion is always false")
        return
    expr = getattr(getattr(val, "node", None), "expr", None)
    if expr is None:
        raise Unsupported(f"an assertion on {val!r}")
    if expr is sympy.true:
        return
    if not isinstance(expr, sympy.core.relational.Relational) or expr.rel_op not in _OPS:
        raise Unsupported(f"the assertion {expr}: only relations of sizes are checked")
    symbols = importer.symbols
    lhs, rhs = symbols.expr(expr.lhs), symbols.expr(expr.rhs)
    op = expr.rel_op
    verdict = _decide(symbols, lhs, op, rhs)
    if verdict is True:
        return
    if verdict is False:
        raise NodeError(f"the assertion {expr} never holds in the declared ranges")
    if isinstance(rhs, sympy.Symbol) and isinstance(lhs, int):
        lhs, rhs, op = rhs, lhs, {">=": "<=", "<=": ">=", ">": "<", "<": ">"}.get(op, op)
    named = isinstance(lhs, sympy.Symbol) and not ir.is_anonymous(lhs)
    if not (named and isinstance(rhs, int) and op != "!="):
        raise Unsupported(f"the assertion {expr}: only a bound on one size becomes an entry check")
    name = str(lhs)
    lo, hi = symbols.ranges.get(name, (0, None))
    if op in (">=", ">", "=="):
        lo = max(lo, rhs + (op == ">"))
    if op in ("<=", "<", "=="):
        bound = rhs - (op == "<")
        hi = bound if hi is None else min(hi, bound)
    if hi is not None and hi < lo:
        raise NodeError(f"the assertion {expr} leaves {name} no size")
    symbols.ranges[name] = (lo, hi)


def _decide(symbols: Any, lhs: Any, op: str, rhs: Any) -> bool | None:
    """``lhs op rhs`` under the ranges: True, False or None (undecided). A data-dependent
    size is below the bound its op gives it (``nonzero``'s rows <= its input's numel), so
    ``u0 <= 64`` is proved where that bound is <= 64: proved, not assumed."""
    try:
        verdict = ir.compare(lhs, op, rhs, symbols.ranges)
    except (ir.IRError, TypeError):
        return None
    bounded = verdict is None and op in ("<=", "<") and lhs in symbols.bounds
    if bounded and ir.compare(symbols.bounds[lhs], op, rhs, symbols.ranges) is True:
        return True
    return verdict
