"""Tokens of the text format, and a cursor over them that reports errors with a caret.

The lexer is context-free except in one place: inside the brackets of ``Tensor[...]``, and
inside a bracketed attribute value (``shape=[n // 2, 4]``, ``size=(n % 4 + 8)``), the text is
made of dim expressions, where ``//`` is floor division and ``%`` is modulo. Everywhere else
``//`` starts a line comment and ``%`` starts a local name. The lexer tracks the brackets to know
which reading applies (a line comment cannot appear in those places; ``/* */`` can).
"""

from __future__ import annotations

import enum
import re
from typing import NamedTuple

from ..errors import ParseError
from ..nesting import ADVICE, MAX_NESTING
from ..span import Span


class Kind(enum.Enum):
    """What a token is."""

    LOCAL = "local name"
    """``%x``, ``%0``: a variable or a graph binding; ``text`` is the name without ``%``."""
    GLOBAL = "global name"
    """``@main``; ``text`` is the name without ``@``."""
    ANON = "anonymous dim"
    """``?`` or ``?name``; ``text`` is the part after ``?`` (empty for a bare ``?``)."""
    IDENT = "name"
    """An identifier, possibly dotted (``nn.conv2d``), or a keyword."""
    NUMBER = "number"
    """A numeric literal; ``text`` is the digits (and exponent), ``suffix`` the dtype suffix."""
    STRING = "string"
    """A double-quoted string; ``value`` is the decoded string."""
    VERSION = "version"
    """The ``v0.0.3`` header."""
    PUNCT = "punctuation"
    """An operator or delimiter; ``text`` is the symbol."""
    EOF = "end of input"


class Token(NamedTuple):
    """One token with its 1-based position (a named tuple: the lexer makes one per token, and
    building a frozen dataclass cost a third of the lexer's time)."""

    kind: Kind
    text: str
    line: int
    column: int
    suffix: str = ""
    """For numbers: ``f``, ``f16``, ``f64``, ``i8``, ``i64``, ``u8``, ... or empty."""
    value: str = ""
    """For strings: the decoded value."""

    def describe(self) -> str:
        """How error messages name this token."""
        if self.kind is Kind.EOF:
            return "end of input"
        if self.kind is Kind.LOCAL:
            return f"'%{self.text}'"
        if self.kind is Kind.GLOBAL:
            return f"'@{self.text}'"
        if self.kind is Kind.ANON:
            return f"'?{self.text}'"
        if self.kind is Kind.NUMBER:
            return f"'{self.text}{self.suffix}'"
        return f"'{self.text}'"


# The first match decides a token's class; the branches below refine it where the text around
# matters (a version header, numbers after '.', '//' and '%' inside dims, comments).
_TOKEN = re.compile(
    r"(?P<space>[ \t\r\n]+)"
    r"|(?P<ident>[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*)"
    r"|[%@?](?P<sigil>[A-Za-z0-9_]*)"  # the group is the name after the sigil
    r"|(?P<punct>->|[()\[\]{},;:=.+\-*])"
    r"|(?P<other>.)",
    re.DOTALL,
)
_SIGILS = {"%": Kind.LOCAL, "@": Kind.GLOBAL, "?": Kind.ANON}
_VERSION = re.compile(r"v\d+\.\d+\.\d+(?![A-Za-z0-9_.])")
# A number: digits, an optional fraction and exponent, then an optional dtype suffix.
_NUMBER = re.compile(
    r"(\d+(?:\.\d+)?(?:[eE][+-]?\d+)?)(f16|f32|f64|f|i8|i16|i32|i64|u8|u16|u32|u64)?(?![A-Za-z0-9_])"
)
_DIGITS = re.compile(r"\d+(?![A-Za-z0-9_])")
_STRING = re.compile(r'"(?:[^"\\\n]|\\.)*"')
# Punctuation the master pattern leaves to the branches: "//" and "%" are symbols only inside
# dims (elsewhere a line comment and a local name); "/" is one unless it starts a comment.
_DIM_PUNCT = re.compile(r"//|[/%]")


_OPEN = frozenset({"(", "[", "{"})
_CLOSE = frozenset({")", "]", "}"})


def too_deep_text() -> str:
    """The error for text with more than ``MAX_NESTING`` brackets open at once."""
    return (
        f"nested too deeply: more than {MAX_NESTING} levels (the nesting limit, "
        f"ir.MAX_NESTING: at most {MAX_NESTING} brackets '(', '[', '{{' open at once); {ADVICE}"
    )


def tokenize(text: str, source: str = "<string>") -> list[Token]:
    """Split ``text`` into tokens, ending with an EOF token. Raises ParseError on bad input."""
    return _Lexer(text, source).run()


class _Lexer:
    """One pass over ``text``: the main loop takes spaces and names, and hands every other
    token to the method of its class (a sigil name, a number, a string, a comment, a symbol)."""

    def __init__(self, text: str, source: str) -> None:
        self.text = text
        self.source = source
        self.lines = text.split("\n")
        # Start offset of each line, to turn an offset into line:column.
        self.starts = [0]
        for text_line in self.lines[:-1]:
            self.starts.append(self.starts[-1] + len(text_line) + 1)
        self.line = 1  # the line of the last offset ``where`` placed (offsets only grow)
        self.tokens: list[Token] = []
        # One entry per open '[' or '(': True when it opened dims (Tensor[...], name=[...]).
        self.brackets: list[bool] = []
        self.depth = 0  # brackets open at once: ( [ {

    def where(self, offset: int) -> tuple[int, int]:
        """The line and column of ``offset``, which is at or after the last one asked."""
        starts = self.starts
        while self.line < len(starts) and starts[self.line] <= offset:
            self.line += 1
        return self.line, offset - starts[self.line - 1] + 1

    def error(self, message: str, line: int, column: int) -> ParseError:
        """A ParseError at ``line``:``column``, showing that line."""
        lines = self.lines
        shown = lines[line - 1] if 0 < line <= len(lines) else None
        return ParseError(message, Span(line, column, self.source), shown)

    def run(self) -> list[Token]:
        """Every token of the text, then EOF."""
        text, tokens = self.text, self.tokens
        pos, n = 0, len(text)
        while pos < n:
            m = _TOKEN.match(text, pos)
            assert m is not None  # the last branch matches any character
            group = m.lastgroup
            if group == "space":
                pos = m.end()
                continue
            ln, col = self.where(pos)
            if group != "ident":
                pos = self.other(m, pos, ln, col)
                continue
            word = m.group()
            version = _VERSION.match(text, pos) if word[0] == "v" and not tokens else None
            if version:
                tokens.append(Token(Kind.VERSION, version.group(), ln, col))
                pos = version.end()
                continue
            tokens.append(Token(Kind.IDENT, word, ln, col))
            pos = m.end()
        ln, col = self.where(n)
        tokens.append(Token(Kind.EOF, "", ln, col))
        return tokens

    def other(self, m: re.Match[str], pos: int, ln: int, col: int) -> int:
        """Take the token (or comment) at ``pos`` that is not a space or a name; the offset
        after it."""
        text = self.text
        in_dims = bool(self.brackets) and self.brackets[-1]
        ch = text[pos]
        if m.lastgroup == "sigil" and not (ch == "%" and in_dims):
            name = m.group("sigil")
            if ch != "?" and not name:
                raise self.error(f"expected a name after '{ch}'", ln, col)
            self.tokens.append(Token(_SIGILS[ch], name, ln, col))
            return m.end()
        if ch.isdigit():
            return self.number(pos, ln, col)
        if ch == '"':
            return self.string(pos, ln, col)
        if text.startswith("/*", pos):
            end = text.find("*/", pos + 2)
            if end < 0:
                raise self.error("unterminated comment: '/*' has no matching '*/'", ln, col)
            return end + 2
        if text.startswith("//", pos) and not in_dims:
            end = text.find("\n", pos)
            return len(text) if end < 0 else end
        if m.lastgroup != "punct":
            dim_punct = _DIM_PUNCT.match(text, pos)
            if not dim_punct:
                raise self.error(f"unexpected character {ch!r}", ln, col)
            m = dim_punct
        self.punct(m.group(), in_dims, ln, col)
        return m.end()

    def number(self, pos: int, ln: int, col: int) -> int:
        """Take the number at ``pos``; the offset after it."""
        text, tokens = self.text, self.tokens
        # After '.', a number is a tuple index: "%t.1.0" is two projections, not "1.0".
        after_dot = bool(tokens) and tokens[-1].kind is Kind.PUNCT and tokens[-1].text == "."
        m = (_DIGITS if after_dot else _NUMBER).match(text, pos)
        if not m:
            bad = re.match(r"[A-Za-z0-9_.]+", text[pos:])
            word = bad.group() if bad else text[pos]
            raise self.error(f"malformed number '{word}'", ln, col)
        suffix = "" if after_dot else (m.group(2) or "")
        digits = m.group() if after_dot else m.group(1)
        tokens.append(Token(Kind.NUMBER, digits, ln, col, suffix=suffix))
        return m.end()

    def string(self, pos: int, ln: int, col: int) -> int:
        """Take the string literal at ``pos``; the offset after it."""
        m = _STRING.match(self.text, pos)
        if not m:
            raise self.error("unterminated string", ln, col)
        literal = m.group()
        self.tokens.append(
            Token(Kind.STRING, literal, ln, col, value=self.decode(literal, ln, col))
        )
        return m.end()

    def decode(self, literal: str, line: int, column: int) -> str:
        """Decode a string literal written as JSON writes strings (the printer uses json.dumps)."""
        import json

        try:
            value = json.loads(literal)
        except ValueError:
            raise self.error(f"bad escape in string {literal}", line, column) from None
        assert isinstance(value, str)
        return value

    def punct(self, p: str, in_dims: bool, ln: int, col: int) -> None:
        """Take symbol ``p``, tracking which brackets open dims and how deep they nest."""
        tokens = self.tokens
        if p == "[" or p == "(":
            prev = tokens[-1] if tokens else None
            opens_dims = prev is not None and (
                (p == "[" and prev.kind is Kind.IDENT and prev.text == "Tensor")
                or _after_attribute_name(tokens)
            )
            self.brackets.append(in_dims or opens_dims)
        elif (p == "]" or p == ")") and self.brackets:
            self.brackets.pop()
        if p in _OPEN:
            self.depth += 1
            if self.depth > MAX_NESTING:  # the parser recurses once per open bracket
                raise self.error(too_deep_text(), ln, col)
        elif p in _CLOSE and self.depth:
            self.depth -= 1
        tokens.append(Token(Kind.PUNCT, p, ln, col))


def _after_attribute_name(tokens: list[Token]) -> bool:
    """True after ``(name=`` or ``, name=``: an attribute value starts (not a binding's ``=``)."""
    if len(tokens) < 3:
        return False
    eq, name, before = tokens[-1], tokens[-2], tokens[-3]
    return (
        eq.kind is Kind.PUNCT
        and eq.text == "="
        and name.kind is Kind.IDENT
        and before.kind is Kind.PUNCT
        and before.text in ("(", ",")
    )


class TokenStream:
    """A cursor over tokens with the helpers a recursive-descent parser needs."""

    def __init__(self, text: str, source: str = "<string>") -> None:
        self.source = source
        self.lines = text.split("\n")
        self.tokens = tokenize(text, source)
        self._count = len(self.tokens)
        self.pos = 0

    def peek(self, ahead: int = 0) -> Token:
        """The token ``ahead`` places after the current one (EOF past the end)."""
        i = self.pos + ahead
        return self.tokens[i] if i < self._count else self.tokens[-1]

    def next(self) -> Token:
        """Consume and return the current token."""
        tok = self.tokens[self.pos]
        if tok.kind is not Kind.EOF:
            self.pos += 1
        return tok

    def at(self, text: str, ahead: int = 0) -> bool:
        """True if the token ``ahead`` is the punctuation or identifier ``text``."""
        tok = self.peek(ahead)
        return tok.text == text and (tok.kind is Kind.PUNCT or tok.kind is Kind.IDENT)

    def accept(self, text: str) -> Token | None:
        """Consume the current token if it is ``text``."""
        if self.at(text):
            return self.next()
        return None

    def expect(self, text: str, what: str | None = None) -> Token:
        """Consume ``text`` or raise 'expected ..., found ...'."""
        if self.at(text):
            return self.next()
        raise self.unexpected(what or f"'{text}'")

    def expect_kind(self, kind: Kind, what: str | None = None) -> Token:
        """Consume a token of ``kind`` or raise."""
        if self.peek().kind is kind:
            return self.next()
        raise self.unexpected(what or kind.value)

    def unexpected(self, expected: str, tok: Token | None = None) -> ParseError:
        """The error for finding something other than ``expected`` at ``tok`` (default: here)."""
        tok = tok or self.peek()
        return self.error(f"expected {expected}, found {tok.describe()}", tok)

    def span(self, tok: Token) -> Span:
        """The span of ``tok`` in this source."""
        return Span(tok.line, tok.column, self.source)

    def error(self, message: str, tok: Token | Span) -> ParseError:
        """A ParseError at ``tok`` (a token or a span), showing its line with a caret."""
        span = tok if isinstance(tok, Span) else self.span(tok)
        line = self.lines[span.line - 1] if 0 < span.line <= len(self.lines) else None
        return ParseError(message, span, line)

    def text_between(self, start: Token, end: Token) -> str:
        """The source text from the start of ``start`` up to (not including) ``end``."""
        if start.line == end.line:
            return self.lines[start.line - 1][start.column - 1 : end.column - 1].strip()
        parts = [self.lines[start.line - 1][start.column - 1 :]]
        parts += self.lines[start.line : end.line - 1]
        parts.append(self.lines[end.line - 1][: end.column - 1])
        return " ".join(p.strip() for p in parts).strip()
