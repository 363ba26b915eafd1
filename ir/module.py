"""A module: the global functions of a program, in order. ``main`` is the entry point."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from types import MappingProxyType

from .errors import IRError
from .expr import Function


class Module(Mapping[str, Function]):
    """An immutable, ordered mapping from global names (without ``@``) to functions."""

    __slots__ = ("_functions",)

    def __init__(self, functions: Mapping[str, Function] | None = None) -> None:
        table: dict[str, Function] = {}
        for name, fn in (functions or {}).items():
            if not isinstance(name, str) or not name.isidentifier():
                raise IRError(f"bad global name {name!r}")
            if not isinstance(fn, Function):
                raise IRError(f"global @{name} is not a function")
            table[name] = fn
        self._functions = MappingProxyType(table)

    @classmethod
    def from_main(cls, fn: Function) -> Module:
        """A module whose only function is ``main``."""
        return cls({"main": fn})

    def __getitem__(self, name: str) -> Function:
        try:
            return self._functions[name]
        except KeyError:
            raise KeyError(f"module has no global @{name}") from None

    def __iter__(self) -> Iterator[str]:
        return iter(self._functions)

    def __len__(self) -> int:
        return len(self._functions)

    @property
    def main(self) -> Function:
        """The entry function ``@main``."""
        return self["main"]

    def with_function(self, name: str, fn: Function) -> Module:
        """A new module with ``name`` bound to ``fn`` (replacing or appending)."""
        table = dict(self._functions)
        table[name] = fn
        return Module(table)

    def __str__(self) -> str:
        from .text.printer import module_to_text

        return module_to_text(self)

    def __repr__(self) -> str:
        return f"Module({', '.join('@' + n for n in self._functions)})"
