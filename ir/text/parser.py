"""The parser: text to ``ir.Module`` (grammar in design/ir.md, "Text format").

Recursive descent over the tokens of ``lexer``. Every node built gets the span of its first
token. A graph binding ``%k = expr;`` only names a node: later uses of ``%k`` are that very
node, so the parsed program is a DAG. ``let %v = e; rest`` builds an ``ir.Let`` whose body is
the rest of the block; the lets of a block are folded iteratively, so thousands of nested lets
do not recurse. Nesting beyond ``ir.MAX_NESTING`` is a ParseError: the lexer counts open
brackets, and the parsed module is measured (graph bindings nest without brackets).

IR errors raised while building nodes (arity, attributes, types) become ParseErrors at the
line and column of the text they are about.
"""

from __future__ import annotations

from typing import Any

import sympy

from ..attrs import Attrs, has_symbolic_entries, takes_dims
from ..dims import free_symbols, sym
from ..errors import IRError, ParseError
from ..expr import Call, Expr, Function, GlobalVar, If, Let, Tuple, TupleGetItem, Var
from ..module import Module
from ..nesting import allow_deep_recursion, find_too_deep, too_deep_message
from ..op import OpDef, get_op, has_op
from ..ranges import Ranges
from ..types import Type, type_symbols
from .constants_text import is_literal_start, parse_attr_value, parse_scalar, parse_tensor_const
from .function_attrs_text import Written, read_function_attrs
from .lexer import Kind, Token, TokenStream
from .types_text import TypeParser

__all__ = ["parse", "parse_type"]


class _Names:
    """Lexically scoped ``%`` names (variables and graph bindings) with O(1) lookup."""

    def __init__(self) -> None:
        self.table: dict[str, list[Expr]] = {}
        self.frames: list[set[str]] = [set()]

    def push(self) -> None:
        self.frames.append(set())

    def pop(self) -> None:
        for name in self.frames.pop():
            stack = self.table[name]
            stack.pop()
            if not stack:
                del self.table[name]

    def define(self, name: str, node: Expr) -> bool:
        """Bind ``name`` in the innermost scope; False if it is already bound there."""
        frame = self.frames[-1]
        if name in frame:
            return False
        frame.add(name)
        self.table.setdefault(name, []).append(node)
        return True

    def lookup(self, name: str) -> Expr | None:
        stack = self.table.get(name)
        return stack[-1] if stack else None


class _Parser:
    def __init__(self, text: str, source: str) -> None:
        self.ts = TokenStream(text, source)
        self.anon: dict[str, sympy.Dummy] = {}  # ?name -> symbol, per global definition
        self.types = TypeParser(self.ts, self.anon)
        self.names = _Names()
        self.global_refs: list[Token] = []
        # The symbols the parameters of the global being parsed bind (None outside one): the
        # only ones a dim in an op attribute may use (``newshape=[n, -1]``).
        self.bound: frozenset[Any] | None = None

    # ---- module and functions ----------------------------------------------------------------
    def module(self) -> Module:
        ts = self.ts
        if ts.peek().kind is Kind.VERSION:
            ts.next()
        if ts.at("fn"):  # a bare function is the program's main
            fn = self.function(ts.next())
            ts.expect_kind(Kind.EOF, "end of input after the main function")
            self._check_globals({"main"})
            return Module({"main": fn})
        functions: dict[str, Function] = {}
        first: dict[str, Token] = {}
        while ts.peek().kind is not Kind.EOF:
            def_tok = ts.expect("def", "'def @name(...)' or end of input")
            name_tok = ts.expect_kind(Kind.GLOBAL, "a global name '@name' after def")
            if name_tok.text in functions:
                prev = first[name_tok.text]
                raise ts.error(
                    f"duplicate global @{name_tok.text} (first defined at line "
                    f"{prev.line}:{prev.column})",
                    name_tok,
                )
            self.anon.clear()
            functions[name_tok.text] = self.function(def_tok)
            first[name_tok.text] = name_tok
        self._check_globals(set(functions))
        return Module(functions)

    def _check_globals(self, defined: set[str]) -> None:
        for tok in self.global_refs:
            if tok.text not in defined:
                raise self.ts.error(f"undefined global @{tok.text}", tok)

    def function(self, start: Token) -> Function:
        """After ``fn`` or ``def @name``: ``(params, Attr=v) [-> T] { body }``."""
        ts = self.ts
        ts.expect("(", "'(' and the parameters")
        self.names.push()
        params: list[Var] = []
        attrs: list[Written] = []
        while not ts.at(")"):
            tok = ts.peek()
            if tok.kind is Kind.LOCAL:
                ts.next()
                ty = self.types.type() if ts.accept(":") else None
                var = Var(tok.text, ty, span=ts.span(tok))
                if not self.names.define(tok.text, var):
                    raise ts.error(f"duplicate parameter %{tok.text}", tok)
                params.append(var)
            elif tok.kind is Kind.IDENT and ts.at("=", 1):
                ts.next()
                ts.next()
                value_tok = ts.peek()
                value = parse_attr_value(ts, self.types.dims)
                if any(key.text == tok.text for key, _, _ in attrs):
                    raise ts.error(f"duplicate function attribute {tok.text}", tok)
                if not isinstance(value, (int, float, str)):  # bool is an int
                    raise ts.error(
                        f"function attribute {tok.text}={value!r} must be a scalar "
                        "(int, float, string or bool)",
                        value_tok,
                    )
                attrs.append((tok, value_tok, value))
            else:
                raise ts.unexpected("a parameter '%name' or an attribute 'Name=value'")
            if not ts.accept(","):
                break
        ts.expect(")", "',' or ')' in the parameters")
        ret = self.types.type() if ts.accept("->") else None
        ranges = self.where_clause(params) if ts.at("where") else Ranges()
        outer = self.bound
        if outer is None:  # a global (inner functions see the global's symbols)
            self.bound = frozenset().union(
                *(type_symbols(p.type_annotation) for p in params if p.type_annotation)
            )
        body = self.block()
        self.bound = outer
        self.names.pop()
        fn_attrs = read_function_attrs(ts, attrs, body)
        return Function(tuple(params), body, ret, fn_attrs, ranges, span=ts.span(start))

    def where_clause(self, params: list[Var]) -> Ranges:
        """``where n in [1, 4096], m in [2, ...]``: ranges of symbols of the parameter types."""
        ts = self.ts
        ts.expect("where")
        known: set[sympy.Basic] = set()
        for p in params:
            if p.type_annotation is not None:
                known |= type_symbols(p.type_annotation)
        items: dict[sympy.Symbol, tuple[int, int | None]] = {}
        while True:
            name_tok = ts.peek()
            if name_tok.kind is not Kind.IDENT or name_tok.text in ("in",):
                raise ts.unexpected("a symbol name in the where clause ('n in [lo, hi]')")
            ts.next()
            symbol = sym(name_tok.text) if name_tok.text.isidentifier() else None
            if symbol is None:
                raise ts.error(f"bad symbol name '{name_tok.text}'", name_tok)
            if symbol in items:
                raise ts.error(f"duplicate range for {name_tok.text}", name_tok)
            if symbol not in known:
                raise ts.error(
                    f"symbol {name_tok.text} in the where clause does not occur in the "
                    "parameter types",
                    name_tok,
                )
            ts.expect("in", f"'in' and a range '[lo, hi]' after {name_tok.text}")
            ts.expect("[", f"'[' starting the range of {name_tok.text}")
            lo = self.range_bound(name_tok.text, "lower")
            ts.expect(",", f"',' and an upper bound (or '...') in the range of {name_tok.text}")
            hi_tok = ts.peek()
            hi = None if self.ellipsis() else self.range_bound(name_tok.text, "upper")
            ts.expect("]", f"']' closing the range of {name_tok.text}")
            if hi is not None and hi < lo:
                raise ts.error(
                    f"empty range for {name_tok.text}: [{lo}, {hi}] (the upper bound is below "
                    "the lower bound)",
                    hi_tok,
                )
            items[symbol] = (lo, hi)
            if not ts.accept(","):
                break
        return Ranges(items)

    def range_bound(self, name: str, which: str) -> int:
        ts = self.ts
        tok = ts.peek()
        if ts.at("-"):
            raise ts.error(f"the {which} bound of {name} is negative: ranges of dims are >= 0", tok)
        if tok.kind is not Kind.NUMBER or tok.suffix or not tok.text.isdigit():
            raise ts.unexpected(
                f"a non-negative integer {which} bound for {name}"
                + (" or '...' (no upper bound)" if which == "upper" else "")
            )
        ts.next()
        return int(tok.text)

    def ellipsis(self) -> bool:
        """Consume ``...`` (three adjacent dots) if it is next."""
        ts = self.ts
        first = ts.peek()
        if not ts.at("."):
            return False
        for k in (1, 2):
            tok = ts.peek(k)
            if not ts.at(".", k) or tok.line != first.line or tok.column != first.column + k:
                raise ts.error("expected '...' (no upper bound)", first)
        for _ in range(3):
            ts.next()
        return True

    def block(self) -> Expr:
        """``{ bindings and lets; result }``: the lets nest to the right of each other."""
        ts = self.ts
        ts.expect("{", "'{' starting a block")
        self.names.push()
        frames = 1
        lets: list[tuple[Var, Expr, Token]] = []
        while True:
            tok = ts.peek()
            if tok.kind is Kind.LOCAL and ts.at("=", 1):
                ts.next()
                ts.next()
                value = self.expr()
                ts.expect(";", f"';' after the binding of %{tok.text}")
                if not self.names.define(tok.text, value):
                    raise ts.error(f"%{tok.text} is already defined in this block", tok)
            elif ts.at("let"):
                let_tok = ts.next()
                var_tok = ts.expect_kind(Kind.LOCAL, "a variable '%name' after let")
                ty = self.types.type() if ts.accept(":") else None
                ts.expect("=", "'=' in the let")
                value = self.expr()
                ts.expect(";", f"';' after the value of %{var_tok.text}")
                var = Var(var_tok.text, ty, span=ts.span(var_tok))
                self.names.push()  # the let's body: the rest of the block
                frames += 1
                self.names.define(var_tok.text, var)
                lets.append((var, value, let_tok))
            else:
                break
        result = self.expr()
        ts.expect("}", "'}' closing the block (a block ends with one result expression)")
        for _ in range(frames):
            self.names.pop()
        for var, value, let_tok in reversed(lets):
            result = Let(var, value, result, span=ts.span(let_tok))
        return result

    # ---- expressions -----------------------------------------------------------------------
    def expr(self) -> Expr:
        """A primary expression followed by calls ``(...)`` and projections ``.i``."""
        ts = self.ts
        start = ts.peek()
        node = self.primary()
        while True:
            if ts.at("("):
                args, attrs = self.arguments("the call")
                if attrs:
                    raise ts.error("only op calls take attributes", attrs[0][0])
                node = Call(node, tuple(args), span=ts.span(start))
            elif ts.accept("."):
                index = ts.expect_kind(Kind.NUMBER, "a tuple index after '.'")
                node = TupleGetItem(node, int(index.text), span=ts.span(start))
            else:
                return node

    def primary(self) -> Expr:
        ts = self.ts
        tok = ts.peek()
        if tok.kind is Kind.LOCAL:
            ts.next()
            node = self.names.lookup(tok.text)
            if node is None:
                raise ts.error(f"undefined variable %{tok.text}", tok)
            return node
        if tok.kind is Kind.GLOBAL:
            ts.next()
            self.global_refs.append(tok)
            return GlobalVar(tok.text, span=ts.span(tok))
        if is_literal_start(ts):
            return parse_scalar(ts)
        if ts.at("("):
            return self.parenthesized()
        if ts.at("{"):
            return self.block()
        if tok.kind is Kind.IDENT:
            if tok.text == "fn":
                return self.function(ts.next())
            if tok.text == "if":
                return self.if_expr()
            if tok.text == "let":
                raise ts.error(
                    "a let is a statement: to use it as a value write { let %v = ...; result }", tok
                )
            if ts.at("(", 1):
                if tok.text == "const":
                    return parse_tensor_const(ts, ts.next())
                return self.op_call()
        raise ts.unexpected("an expression")

    def parenthesized(self) -> Expr:
        """``()``, ``(e,)``, ``(e1, e2, ...)`` are tuples; ``(e)`` is ``e``."""
        ts = self.ts
        open_tok = ts.next()
        fields: list[Expr] = []
        trailing_comma = False
        while not ts.at(")"):
            fields.append(self.expr())
            trailing_comma = bool(ts.accept(","))
            if not trailing_comma:
                break
        ts.expect(")", "',' or ')' in the tuple")
        if len(fields) == 1 and not trailing_comma:
            return fields[0]
        return Tuple(tuple(fields), span=ts.span(open_tok))

    def if_expr(self) -> Expr:
        ts = self.ts
        if_tok = ts.next()
        ts.expect("(", "'(' and the condition after if")
        cond = self.expr()
        ts.expect(")", "')' after the condition")
        then_branch = self.block()
        ts.expect("else", "'else' and a block: an if needs both branches")
        else_branch = self.block()
        return If(cond, then_branch, else_branch, span=ts.span(if_tok))

    def arguments(self, what: str) -> tuple[list[Expr], list[tuple[Token, Token, Any]]]:
        """``(e, ..., key=value, ...)``: positional arguments, then (key, value token, value)."""
        ts = self.ts
        ts.expect("(")
        args: list[Expr] = []
        attrs: list[tuple[Token, Token, Any]] = []
        while not ts.at(")"):
            tok = ts.peek()
            if tok.kind is Kind.IDENT and ts.at("=", 1):
                ts.next()
                ts.next()
                value_tok = ts.peek()
                if any(k.text == tok.text for k, _, _ in attrs):
                    raise ts.error(f"duplicate attribute {tok.text}", tok)
                attrs.append((tok, value_tok, parse_attr_value(ts, self.types.dims)))
            else:
                if attrs:
                    raise ts.error("positional argument after an attribute", tok)
                args.append(self.expr())
            if not ts.accept(","):
                break
        ts.expect(")", f"',' or ')' in the arguments of {what}")
        return args, attrs

    def op_call(self) -> Expr:
        ts = self.ts
        name_tok = ts.next()
        if not has_op(name_tok.text):
            try:
                get_op(name_tok.text)
            except IRError as e:
                raise ts.error(e.message, name_tok) from None
        op = get_op(name_tok.text)
        args, attrs = self.arguments(op.name)
        given = {key.text: value for key, _, value in attrs}
        try:
            call = Call(op, tuple(args), Attrs(given), span=ts.span(name_tok))
        except ParseError:
            raise
        except IRError as e:
            raise ts.error(e.message, _attr_error_at(op, len(args), attrs) or name_tok) from None
        self.check_attr_symbols(call, attrs)
        return call

    def check_attr_symbols(self, call: Call, attrs: list[tuple[Token, Token, Any]]) -> None:
        """A dim in an op attribute may use only symbols of the global's parameter types."""
        assert call.op is not None
        for key, value_tok, _ in attrs:
            value = call.attrs[key.text]
            if not takes_dims(call.op.attr_index[key.text].kind) or not has_symbolic_entries(value):
                continue
            free = set().union(*(free_symbols(d) for d in value if isinstance(d, sympy.Expr)))
            unbound = sorted(str(s) for s in free if s not in (self.bound or frozenset()))
            if unbound:
                raise self.ts.error(
                    f"op {call.op.name}: attribute {key.text} uses {', '.join(unbound)}, which "
                    "no parameter of the function binds (a dim in an attribute may use only "
                    "the symbols of the parameter types)",
                    value_tok,
                )


def _attr_error_at(op: OpDef, nargs: int, attrs: list[tuple[Token, Token, Any]]) -> Token | None:
    """The token an error building a call of ``op`` is about (None: the op name).

    Mirrors the order of checks in ``Call``: arity first, then unknown attributes, then values.
    """
    if nargs != op.arity:
        return None
    for key, _, _ in attrs:
        if key.text not in op.attr_index:
            return key
    for key, value_tok, value in attrs:
        try:
            op.attr_index[key.text].kind.normalize(value)
        except TypeError:
            return value_tok
    return None


def parse(text: str, source_name: str = "<string>") -> Module:
    """Parse a program: optional ``v0.0.3``, then ``def @name(...) {...}`` globals, or one bare
    ``fn (...) {...}`` which becomes ``@main``. Raises ``ir.ParseError`` with line and column.
    """
    allow_deep_recursion()  # nested text (ifs within ifs) recurses
    parser = _Parser(text, source_name)
    module = parser.module()
    # The brackets are counted by the lexer; graph bindings and call chains nest without them.
    found = find_too_deep(module)
    if found is not None:
        name, node = found
        message = too_deep_message(f"@{name}")
        raise parser.ts.error(message, node.span) if node.span else IRError(message)
    return module


def parse_type(text: str, source_name: str = "<string>") -> Type:
    """Parse one type, e.g. ``Tensor[(n, ?), float32]`` or ``(float32, fn (int32) -> bool)``."""
    allow_deep_recursion()  # nested text (ifs within ifs) recurses
    parser = _Parser(text, source_name)
    ty = parser.types.type()
    parser.ts.expect_kind(Kind.EOF, "end of input after the type")
    return ty
