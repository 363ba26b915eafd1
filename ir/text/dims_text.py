"""Dims in text: printing sympy dims with minimal parentheses, and parsing dim expressions.

Printed operators follow Python: ``+ -`` bind loosest, then ``* // % /`` (left-associative), then
unary ``-``. ``floor(a/b)`` prints as ``a // b``, ``Mod(a, b)`` as ``a % b``, ``Max``/``Min`` as
``max(...)``/``min(...)``, ``ceiling(a/b)`` as ``ceil(a / b)``. ``/`` is exact division; as a
dim must be provably an integer (``ir.check_dim``), it only appears inside ``ceil``/``floor``.

Anonymous symbols (``?``) are printed through an ``AnonNamer``: the printer first writes a
placeholder per symbol, and once a whole global definition is printed, replaces each placeholder
by ``?`` (one occurrence) or ``?0``, ``?1``, ... (several, numbered by first appearance).
"""

from __future__ import annotations

import functools
import re

import sympy

from ..dims import Dim, check_dim, fresh, is_anonymous, sym
from ..errors import IRError
from .lexer import Kind, Token, TokenStream

_ADD, _MUL, _UNARY, _ATOM = 1, 2, 3, 4

_PLACEHOLDER = re.compile("\x00([0-9]+)\x01")


def _placeholder(k: int) -> str:
    # Zero-padded so that sympy orders stand-ins by first encounter.
    return f"\x00{k:06d}\x01"


@functools.cache
def _stand_in(k: int) -> sympy.Symbol:
    # Same assumptions as real dim symbols, so sympy simplifies the same way.
    return sympy.Symbol(_placeholder(k), integer=True, nonnegative=True)


class AnonNamer:
    """Numbers anonymous symbols in order of first encounter while one unit is printed.

    A *unit* is one global definition (or one standalone type or expression): ``?`` labels are
    local to it. Call ``resolve`` on the unit's finished text.
    """

    def __init__(self) -> None:
        self.index: dict[sympy.Basic, int] = {}

    def stand_in(self, symbol: sympy.Basic) -> sympy.Symbol:
        """The placeholder symbol of an anonymous symbol."""
        k = self.index.setdefault(symbol, len(self.index))
        return _stand_in(k)

    def dim(self, dim: Dim) -> str:
        """The text of ``dim``, with placeholders for its anonymous symbols."""
        if isinstance(dim, int):
            return str(dim)
        anon = [s for s in dim.free_symbols if is_anonymous(s)]
        if not anon:
            return dim_text(dim)
        # Stand-ins are numbered in order of first appearance in the text, because sympy
        # orders the terms of a sum by name and the parser creates symbols in text order:
        # this is what makes print(parse(print(m))) == print(m). Symbols first seen in this
        # dim start in creation order (their text order after a parse), then are renumbered
        # by where they appear, until stable.
        new = sorted((s for s in anon if s not in self.index), key=lambda s: s.dummy_index)
        base = len(self.index)
        text = ""
        for _ in range(4):
            for i, s in enumerate(new):
                self.index[s] = base + i
            text = dim_text(dim.xreplace({s: _stand_in(self.index[s]) for s in anon}))
            order = sorted(new, key=lambda s: text.index(_placeholder(self.index[s])))
            if order == new:
                break
            new = order
        return text

    @staticmethod
    def resolve(text: str) -> str:
        """Replace placeholders by ``?`` (used once) or ``?0``, ``?1``, ... (used more)."""
        counts: dict[str, int] = {}
        for m in _PLACEHOLDER.finditer(text):
            counts[m.group(1)] = counts.get(m.group(1), 0) + 1
        labels: dict[str, str] = {}
        for key, count in counts.items():  # dicts keep first-appearance order
            labels[key] = "?" if count == 1 else f"?{sum(1 for v in labels.values() if v != '?')}"
        return _PLACEHOLDER.sub(lambda m: labels[m.group(1)], text)


@functools.lru_cache(maxsize=65536)
def dim_text(dim: sympy.Expr) -> str:
    """The text of a symbolic dim (anonymous symbols must already be stand-ins)."""
    return _fmt(dim)[0]


def _wrap(e: sympy.Expr, at_least: int) -> str:
    text, prec = _fmt(e)
    return text if prec >= at_least else f"({text})"


def _fmt(e: sympy.Expr) -> tuple[str, int]:
    """The text of ``e`` and the precedence of its outermost operator."""
    if e.is_Integer:
        return str(int(e)), _ATOM if e >= 0 else _UNARY
    if e.is_Rational:
        return f"{_wrap(sympy.Integer(e.p), _MUL)} / {e.q}", _MUL
    if e.is_Symbol:
        return e.name, _ATOM
    if e.is_Add:
        terms = e.as_ordered_terms()
        out = _wrap(terms[0], _ADD)
        for t in terms[1:]:
            if t.as_coeff_Mul()[0].is_negative:
                out += " - " + _wrap(-t, _MUL)
            else:
                out += " + " + _wrap(t, _MUL)
        return out, _ADD
    if e.is_Mul or e.is_Pow:
        return _fmt_product(e)
    if isinstance(e, sympy.floor):
        num, den = sympy.fraction(sympy.together(e.args[0]))
        if den == 1:
            return f"floor({_fmt(e.args[0])[0]})", _ATOM
        return f"{_wrap(num, _MUL)} // {_wrap(den, _UNARY)}", _MUL
    if isinstance(e, sympy.ceiling):
        num, den = sympy.fraction(sympy.together(e.args[0]))
        if den == 1:
            return f"ceil({_fmt(e.args[0])[0]})", _ATOM
        return f"ceil({_wrap(num, _MUL)} / {_wrap(den, _UNARY)})", _ATOM
    if isinstance(e, sympy.Mod):
        a, b = e.args
        return f"{_wrap(a, _MUL)} % {_wrap(b, _UNARY)}", _MUL
    if isinstance(e, (sympy.Max, sympy.Min)):
        name = "max" if isinstance(e, sympy.Max) else "min"
        return f"{name}({', '.join(_fmt(a)[0] for a in e.args)})", _ATOM
    # Not expressible in the dim grammar; print something readable (it will not parse back).
    return str(e), _ATOM


def _fmt_product(e: sympy.Expr) -> tuple[str, int]:
    coeff, rest = e.as_coeff_Mul()
    if coeff.is_negative:
        text, prec = _fmt(-e)
        if prec >= _UNARY:
            return f"-{text}", _UNARY
        if (-e).is_Mul or (-e).is_Pow:
            # "-a*b" reads as "(-a)*b", which is the same product.
            return f"-{text}", _MUL
        # "-a // b" would read as "(-a) // b": a negated floor division or modulo needs parens.
        return f"-({text})", _UNARY
    num: list[str] = []
    den: list[str] = []
    if coeff.p != 1:
        num.append(str(coeff.p))
    if coeff.q != 1:
        den.append(str(coeff.q))
    factors = rest.as_ordered_factors() if rest.is_Mul else [rest]
    for f in factors:
        base, exp = (f.base, f.exp) if f.is_Pow else (f, sympy.Integer(1))
        if not exp.is_Integer:
            num.append(str(f))  # not in the grammar (e.g. a square root)
            continue
        # Powers print as repeated products: the grammar has no exponent operator.
        side = num if exp > 0 else den
        side.extend([_wrap(base, _UNARY)] * abs(int(exp)))
    text = "*".join(num) if num else "1"
    if den:
        denominator = den[0] if len(den) == 1 else f"({'*'.join(den)})"
        text = f"{text} / {denominator}"
    return text, _MUL


# ---- parsing ---------------------------------------------------------------------------------


class DimParser:
    """Parses dim expressions from a token stream into checked dims.

    ``anon`` maps ``?name`` labels to their symbols; it is shared by one global definition.
    """

    def __init__(self, ts: TokenStream, anon: dict[str, sympy.Dummy]) -> None:
        self.ts = ts
        self.anon = anon

    def dim(self) -> Dim:
        """Parse one dim and check it (non-negative integer expression over dim symbols)."""
        start = self.ts.peek()
        expr = self._sum(start)
        try:
            return check_dim(expr)
        except IRError as e:
            detail = e.message.split(": ", 1)[1] if e.message.startswith("bad dim") else e.message
            raise self._malformed(start, self.ts.peek(), detail, start) from None

    def _malformed(self, start: Token, end: Token, detail: str, at: Token) -> Exception:
        text = self.ts.text_between(start, end) if end is not start else ""
        return self.ts.error(f"malformed dim expression '{text}': {detail}", at)

    def _operand_error(self, start: Token) -> Exception:
        tok = self.ts.peek()
        closing = tok.kind is Kind.EOF or (tok.kind is Kind.PUNCT and tok.text in ",)];")
        end = tok if closing else self.ts.peek(1)
        return self._malformed(start, end, f"expected a dim, found {tok.describe()}", tok)

    def _sum(self, start: Token) -> sympy.Expr:
        left = self._product(start)
        while self.ts.at("+") or self.ts.at("-"):
            op = self.ts.next().text
            right = self._product(start)
            left = left + right if op == "+" else left - right
        return left

    def _product(self, start: Token) -> sympy.Expr:
        left = self._unary(start)
        while any(self.ts.at(op) for op in ("*", "//", "%", "/")):
            op_tok = self.ts.next()
            right = self._unary(start)
            if op_tok.text != "*" and right == 0:
                raise self._malformed(start, self.ts.peek(), "division by zero", op_tok)
            if op_tok.text == "*":
                left = left * right
            elif op_tok.text == "//":
                left = sympy.floor(left / right)
            elif op_tok.text == "%":
                left = sympy.Mod(left, right)
            else:
                left = left / right
        return left

    def _unary(self, start: Token) -> sympy.Expr:
        negations = 0
        while self.ts.accept("-"):  # a loop: '- - - n' does not recurse
            negations += 1
        atom = self._atom(start)
        return -atom if negations % 2 else atom

    def _atom(self, start: Token) -> sympy.Expr:
        tok = self.ts.peek()
        if tok.kind is Kind.NUMBER:
            self.ts.next()
            if tok.suffix or not tok.text.isdigit():
                raise self._malformed(start, self.ts.peek(), "a dim must be an integer", tok)
            return sympy.Integer(int(tok.text))
        if tok.kind is Kind.ANON:
            self.ts.next()
            if not tok.text:
                return fresh()
            if tok.text not in self.anon:
                self.anon[tok.text] = fresh()
            return self.anon[tok.text]
        if tok.kind is Kind.IDENT:
            self.ts.next()
            if self.ts.at("("):
                return self._function(start, tok)
            try:
                return sym(tok.text)
            except IRError:
                raise self._malformed(
                    start, self.ts.peek(), f"bad symbol name '{tok.text}'", tok
                ) from None
        if self.ts.accept("("):
            inner = self._sum(start)
            if not self.ts.at(")"):
                tok = self.ts.peek()
                raise self._malformed(start, tok, f"expected ')', found {tok.describe()}", tok)
            self.ts.next()
            return inner
        raise self._operand_error(start)

    def _function(self, start: Token, name: Token) -> sympy.Expr:
        self.ts.expect("(")
        args = [self._sum(start)]
        while self.ts.accept(","):
            args.append(self._sum(start))
        self.ts.expect(")", "',' or ')' in the arguments of " + name.text)
        fn = name.text
        if fn in ("max", "min"):
            if len(args) < 2:
                raise self._malformed(
                    start, self.ts.peek(), f"{fn} needs at least 2 arguments", name
                )
            return sympy.Max(*args) if fn == "max" else sympy.Min(*args)
        if fn in ("floor", "ceil"):
            if len(args) != 1:
                raise self._malformed(start, self.ts.peek(), f"{fn} takes 1 argument", name)
            return sympy.floor(args[0]) if fn == "floor" else sympy.ceiling(args[0])
        raise self._malformed(
            start,
            self.ts.peek(),
            f"unknown dim function '{fn}' (known: max, min, floor, ceil)",
            name,
        )
