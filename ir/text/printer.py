"""The printer: modules, expressions and types to text that ``ir.parse`` reads back.

Printing rules (design/ir.md, "Text format", has the full list):

- Inside each scope, every non-atomic node (call, tuple, projection, if, inline function, and
  a let that is not a scope's result) that is not printed in full at its only use is printed
  once as a graph binding ``%k = ...;`` in the lowest scope enclosing all of its uses, before
  its first use. Atomic nodes (variables, globals, constants) print inline.
- Graph bindings are numbered ``%0``, ``%1``, ... per global definition, in the order their
  lines are completed (an inline function's inner bindings get numbers before the function).
- Variables print as their name hint, made unique per global definition (``%x``, ``%x1``);
  a hint that is not a plain name is cleaned, and an all-digit one gets a ``v`` prefix so that
  it never looks like a graph binding.
- Op attributes equal to their declared default are omitted.
- With ``show_types``, a node's inferred type and its deferred facts (the checks inference left
  for run time) are appended as ``/* ty=...; check add: broadcast(n, m) */``, a let's and a
  function's facts after the let's value and the signature: comments, which the parser
  ignores (inference derives both again).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from ..expr import Call, Constant, Expr, Function, GlobalVar, If, Let, Tuple, TupleGetItem, Var
from ..graph import Scope
from ..module import Module
from ..nesting import allow_deep_recursion, check_nesting
from ..op import OpDef
from ..types import Type
from .constants_text import attr_text, constant_text
from .dims_text import AnonNamer
from .function_attrs_text import function_attrs_text
from .layout import Layout, Use
from .types_text import format_type, type_to_text

__all__ = ["expr_to_text", "function_to_text", "module_to_text", "type_to_text"]

_INDENT = "  "
_NOT_NAME_CHAR = re.compile(r"[^A-Za-z0-9_]")


class _Unit:
    """Prints one global definition (or one expression): its names, numbers and ``?`` dims."""

    def __init__(self, show_types: bool, notes: Mapping[Expr, str] | None = None) -> None:
        self.show_types = show_types
        self.notes = notes or {}
        self.pending_notes: list[str] = []
        self.namer = AnonNamer()
        self.var_names: dict[Var, str] = {}
        self.used_names: set[str] = set()
        self.numbers: dict[Expr, int] = {}
        self.layout: Layout | None = None
        self.depth = 0
        """How many blocks enclose the statements being printed: lines are indented as they are
        made, never re-indented (re-indenting each level's text made nested ifs cubic)."""

    # ---- names ---------------------------------------------------------------------------
    def var(self, var: Var) -> str:
        """``%name`` of ``var``, choosing a unique name the first time."""
        name = self.var_names.get(var)
        if name is None:
            base = _NOT_NAME_CHAR.sub("_", var.name_hint)
            if base.isdigit():
                base = "v" + base
            name, k = base, 0
            while name in self.used_names:
                k += 1
                name = f"{base}{k}"
            self.used_names.add(name)
            self.var_names[var] = name
        return f"%{name}"

    def type(self, ty: Type) -> str:
        """A type, with placeholders for ``?`` dims until the unit is resolved."""
        return format_type(ty, self.namer)

    def ty_comment(self, node: Expr) -> str:
        """`` /* ty=...; check ... */`` when types are shown: ``node``'s type and facts."""
        if not self.show_types:
            return ""
        parts = [f"ty={self.type(node.ty)}"] if node.ty is not None else []
        parts += [f"check {self.fact(f)}" for f in node.facts]
        return f" /* {'; '.join(parts)} */" if parts else ""

    def fact(self, fact: Any) -> str:
        """A deferred fact (``kind`` and ``dims``, and the ``op_name`` that stated it):
        ``add: broadcast(n, m)``, ``reshape: 4 divides n``, ``topk: k <= n``."""
        a, b = (self.namer.dim(d) for d in fact.dims)
        if fact.kind == "broadcast":
            formula = f"broadcast({a}, {b})"
        elif fact.kind == "divides":
            formula = f"{a} divides {b}"
        else:
            formula = f"{a} {fact.kind} {b}"
        op = getattr(fact, "op_name", "")
        return f"{op}: {formula}" if op else formula

    # ---- nodes -----------------------------------------------------------------------------
    def ref(self, node: Expr) -> str:
        """How a use of ``node`` prints: an atom, or the number of its binding."""
        if isinstance(node, Var):
            return self.var(node)
        if isinstance(node, GlobalVar):
            return f"@{node.name}"
        if isinstance(node, Constant):
            return constant_text(node)
        number = self.numbers.get(node)
        if number is None:
            raise ValueError(
                f"cannot print a {type(node).__name__} used outside the scope it belongs to "
                "(is a node shared between functions, or a variable used out of its scope?)"
            )
        return f"%{number}"

    def show(self, node: Expr) -> str:
        """``node`` in full if it prints at this use, else a reference."""
        assert self.layout is not None
        if node in self.layout.inline:
            return self.full(node)
        return self.ref(node)

    def full(self, node: Expr) -> str:
        """The complete text of a non-atomic node (may span several lines)."""
        assert self.layout is not None
        if node in self.notes:
            self.pending_notes.append(self.notes[node])
        if isinstance(node, Call):
            return self.call(node)
        if isinstance(node, Tuple):
            fields = ", ".join(self.ref(f) for f in node.fields)
            return f"({fields},)" if len(node.fields) == 1 else f"({fields})"
        if isinstance(node, TupleGetItem):
            base = self.ref(node.tuple_value)
            if isinstance(node.tuple_value, Constant):
                base = f"({base})"  # "0.1" would read as a float, "(0).1" is a projection
            return f"{base}.{node.index}"
        if isinstance(node, If):
            then = self.block(self.layout.scope(node, Use.THEN), node.then_branch)
            other = self.block(self.layout.scope(node, Use.ELSE), node.else_branch)
            return f"if ({self.ref(node.cond)}) {then} else {other}"
        if isinstance(node, Function):
            return self.function(node, "fn ")
        if isinstance(node, Let):
            return self.block(self.layout.let_scope[node], node)
        return self.ref(node)

    def call(self, node: Call) -> str:
        parts = [self.show(a) for a in node.args]
        callee = node.callee
        if isinstance(callee, OpDef):
            for a in callee.attrs:
                value = node.attrs[a.name]
                if a.required or type(value) is not type(a.default) or value != a.default:
                    parts.append(f"{a.name}={attr_text(value, self.namer)}")
            return f"{callee.name}({', '.join(parts)})"
        return f"{self.ref(callee)}({', '.join(parts)})"

    def function(self, fn: Function, head: str) -> str:
        """``head(params, Attr=v) -> T { body }``; ``head`` is ``fn `` or ``def @name``."""
        params = [self.param(p) for p in fn.params]
        params += function_attrs_text(fn.attrs)
        text = f"{head}({', '.join(params)})"
        if fn.ret_type is not None:
            text += f" -> {self.type(fn.ret_type)}"
        if fn.ranges:
            text += f" where {fn.ranges}"
        if self.show_types and fn.facts:  # the result annotation's checks
            text += f" /* {'; '.join(f'check {self.fact(f)}' for f in fn.facts)} */"
        outer = self.layout
        if outer is None:  # a global: the body is the root of its own layout
            self.layout = Layout(fn.body)
            body = self.block(self.layout.root, fn.body)
        else:
            body = self.block(outer.scope(fn, Use.BODY), fn.body)
        return f"{text} {body}"

    def param(self, var: Var) -> str:
        name = self.var(var)
        if var.type_annotation is None:
            return name
        return f"{name}: {self.type(var.type_annotation)}"

    # ---- blocks ----------------------------------------------------------------------------
    def statements(self, scope: Scope, result: Expr) -> list[str]:
        """The lines of a scope: its bindings, then lets with their bodies, then the result."""
        assert self.layout is not None
        lines: list[str] = []
        while True:  # a loop, not recursion: let chains can be thousands long
            for item in scope.items:
                text = self.full(item)
                self.numbers[item] = len(self.numbers)
                lines.append(f"%{self.numbers[item]} = {text}{self.ty_comment(item)};")
                self.attach_notes(lines)
            if isinstance(result, Let) and self.layout.let_scope.get(result) is scope:
                var = result.var
                head = f"let {self.param(var)} = {self.show(result.value)}"
                comment = (
                    self.ty_comment(result.value) if result.value in self.layout.inline else ""
                )
                if self.show_types and result.facts:  # the annotation's checks
                    comment += f" /* {'; '.join(f'check {self.fact(f)}' for f in result.facts)} */"
                lines.append(f"{head}{comment};")
                self.attach_notes(lines)
                scope = self.layout.scope(result, Use.LET_BODY)
                result = result.body
                continue
            shown = self.show(result)  # before the comment: '?' labels follow text order
            comment = self.ty_comment(result) if result in self.layout.inline else ""
            lines.append(shown + comment)
            self.attach_notes(lines)
            return lines

    def attach_notes(self, lines: list[str]) -> None:
        """End the last line with the notes of the nodes printed in full on it."""
        if self.pending_notes:
            first, newline, rest = lines[-1].partition("\n")
            lines[-1] = first + "  // <-- " + "; ".join(self.pending_notes) + newline + rest
            self.pending_notes.clear()

    def block(self, scope: Scope, result: Expr) -> str:
        """``{ statements }`` over several lines. Each statement's first line is indented here;
        its other lines are those of blocks nested in it, indented when they were made."""
        self.depth += 1
        try:
            lines = self.statements(scope, result)
        finally:
            self.depth -= 1
        inner = "\n" + _INDENT * (self.depth + 1)
        return "{" + inner + inner.join(lines) + "\n" + _INDENT * self.depth + "}"

    def resolve(self, text: str) -> str:
        """Replace the ``?`` placeholders of this unit."""
        return self.namer.resolve(text)


def function_to_text(
    name: str, fn: Function, show_types: bool = True, notes: Mapping[Expr, str] | None = None
) -> str:
    """The text of the global definition ``def @name``.

    ``notes`` maps nodes to one-line remarks printed as ``// <-- remark`` at the end of the line
    where the node is printed in full: how errors point at the failing expression.
    """
    check_nesting({name: fn})
    allow_deep_recursion()  # the printer recurses per level of nesting (ifs within ifs)
    unit = _Unit(show_types, notes)
    return unit.resolve(unit.function(fn, f"def @{name}"))


def printed_names(name: str, fn: Function) -> dict[Var, str]:
    """The name (without ``%``) the printer gives each variable of ``def @name``: how reports
    that list variables (the memory report) name them as the printed IR does."""
    allow_deep_recursion()
    unit = _Unit(show_types=False)
    unit.function(fn, f"def @{name}")
    return dict(unit.var_names)


def module_to_text(module: Module, show_types: bool = True) -> str:
    """The text of ``module``: its global definitions in order, separated by blank lines."""
    return "\n\n".join(function_to_text(name, fn, show_types) for name, fn in module.items())


def expr_to_text(expr: Expr, show_types: bool = True) -> str:
    """The text of one expression: its bindings and result, one per line (no braces).

    A function prints as ``fn (...) { ... }``. Free variables print by name.
    """
    check_nesting(expr)
    unit = _Unit(show_types)
    unit.layout = Layout(expr)
    return unit.resolve("\n".join(unit.statements(unit.layout.root, expr)))
