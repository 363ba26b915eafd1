"""Types in text: ``Tensor[(n, 10), float32]``, bare ``float32`` (rank 0), tuples, functions.

Grammar (see design/ir.md)::

    type   ::= 'Tensor' '[' shape ',' dtype ']' | dtype
             | '(' ')' | '(' type ',' ')' | '(' type (',' type)+ [','] ')'
             | 'fn' '(' [type (',' type)* [',']] ')' '->' type
    shape  ::= '(' [dim (',' dim)* [',']] ')'
"""

from __future__ import annotations

import sympy

from ..dtypes import SUPPORTED, check_dtype
from ..errors import IRError
from ..types import FuncType, StorageType, TensorType, TupleType, Type
from .dims_text import AnonNamer, DimParser
from .lexer import Kind, TokenStream


def format_type(ty: Type, namer: AnonNamer) -> str:
    """The text of ``ty``, with placeholders for anonymous dims (see ``AnonNamer``)."""
    if isinstance(ty, TensorType):
        if ty.rank == 0:
            return ty.dtype
        dims = ", ".join(namer.dim(d) for d in ty.shape)
        if ty.rank == 1:
            dims += ","
        return f"Tensor[({dims}), {ty.dtype}]"
    if isinstance(ty, TupleType):
        fields = ", ".join(format_type(f, namer) for f in ty.fields)
        return f"({fields},)" if len(ty.fields) == 1 else f"({fields})"
    if isinstance(ty, FuncType):
        params = ", ".join(format_type(p, namer) for p in ty.params)
        return f"fn ({params}) -> {format_type(ty.ret, namer)}"
    if isinstance(ty, StorageType):
        return "Storage"
    raise TypeError(f"not a type: {ty!r}")


def type_to_text(ty: Type) -> str:
    """The text of one type; its ``?`` dims are labelled within this type alone."""
    namer = AnonNamer()
    return namer.resolve(format_type(ty, namer))


class TypeParser:
    """Parses types from a token stream. ``anon`` holds the ``?name`` dims of the unit."""

    def __init__(self, ts: TokenStream, anon: dict[str, sympy.Dummy]) -> None:
        self.ts = ts
        self.dims = DimParser(ts, anon)

    def type(self) -> Type:
        """Parse one type."""
        ts = self.ts
        tok = ts.peek()
        if ts.accept("Tensor"):
            ts.expect("[", "'[' after Tensor")
            shape_tok = ts.expect("(", "a shape '(d0, d1, ...)'")
            shape = []
            while not ts.at(")"):
                shape.append(self.dims.dim())
                if not ts.accept(","):
                    break
            ts.expect(")", "',' or ')' in the shape")
            ts.expect(",", "',' and a dtype after the shape")
            dtype = self._dtype()
            ts.expect("]", "']' closing Tensor[")
            try:
                return TensorType(tuple(shape), dtype)
            except IRError as e:
                raise ts.error(e.message, shape_tok) from None
        if ts.accept("fn"):
            ts.expect("(", "'(' and the parameter types of a function type")
            params = self._list()
            ts.expect("->", "'->' and the result type of a function type")
            return FuncType(tuple(params), self.type())
        if ts.accept("("):
            fields: list[Type] = []
            trailing_comma = False
            while not ts.at(")"):
                fields.append(self.type())
                trailing_comma = bool(ts.accept(","))
                if not trailing_comma:
                    break
            ts.expect(")", "',' or ')' in the tuple type")
            if len(fields) == 1 and not trailing_comma:
                raise ts.error("a tuple type of one field needs a trailing comma: (T,)", tok)
            return TupleType(tuple(fields))
        if ts.accept("Storage"):
            return StorageType()
        if tok.kind is Kind.IDENT:
            return TensorType((), self._dtype())
        raise ts.unexpected("a type (Tensor[...], a dtype, a tuple type or fn (...) -> ...)")

    def _list(self) -> list[Type]:
        out: list[Type] = []
        while not self.ts.at(")"):
            out.append(self.type())
            if not self.ts.accept(","):
                break
        self.ts.expect(")", "',' or ')' in the list of types")
        return out

    def _dtype(self) -> str:
        tok = self.ts.peek()
        if tok.kind is not Kind.IDENT:
            raise self.ts.unexpected(f"a dtype (one of {SUPPORTED})")
        self.ts.next()
        try:
            return check_dtype(tok.text)
        except IRError as e:
            raise self.ts.error(e.message, tok) from None
