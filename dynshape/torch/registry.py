"""The table of ATen converters: ``@converter("aten.linear.default")`` registers a function of
a ``Call``.

A converter returns the node's result: a builder ``Value``, a tuple of them (ops with several
outputs, read by ``operator.getitem``), or None (an op with no result, such as
``aten._assert_tensor_metadata``). It reads the call's arguments by their names in the op's
schema (``call["input"]``), with the schema's defaults filled in, so a converter does not care
whether the exporter passed an argument by position or by keyword.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import ModelImportError

Converter = Callable[["Call"], Any]

#: Target (``str`` of an ATen overload, ``aten.linear.default``) -> its converter.
CONVERTERS: dict[str, Converter] = {}


def converter(*targets: str) -> Callable[[Converter], Converter]:
    """Register the decorated function as the converter of ``targets``."""

    def register(fn: Converter) -> Converter:
        for target in targets:
            if target in CONVERTERS:
                raise ValueError(f"two converters for {target}")
            CONVERTERS[target] = fn
        return fn

    return register


class NodeError(Exception):
    """A node the importer cannot convert; the importer names the node."""


class Unsupported(NodeError):
    """A node using a variant of its op that the importer does not support (a training mode,
    a rank, an argument value): reported as ``unsupported: ...``, not as a bug."""


@dataclass
class Call:
    """One ``call_function`` node as a converter sees it."""

    target: str
    """The op, ``aten.linear.default``."""
    name: str
    """The node's name in the graph (``linear_1``)."""
    args: Mapping[str, Any]
    """The arguments by schema name: Values for tensors, ints or dims for (Sym)ints, lists of
    them, numbers, strings, None; schema defaults filled in."""
    out: Any = None
    """What torch recorded of the result (``meta["val"]``: a fake tensor, or a tuple of them)."""
    out_dtype: str | None = None
    """The IR dtype of the (first) result as torch recorded it."""
    shape_of: Callable[[Any], list[Any]] | None = None
    """Converts a torch shape (of ``out``'s fake tensors) to dims."""
    dim_tensor: Callable[[Any, str], Any] | None = None
    """A dim (``seq``, ``past + seq``) as a 0-d tensor of a dtype, computed at run time from
    the input shapes."""

    importer: Any = None
    """The importer, for converters of higher-order ops (``cond``'s branches are converted
    with it: ``importer.subgraph(module, inputs)``) and of symbolic predicates."""

    def recorded(self, index: int | None = None) -> list[Any]:
        """The dims torch recorded for the result (or its ``index``-th element)."""
        val = self.out if index is None else self.out[index]
        assert self.shape_of is not None
        return self.shape_of(val.shape)

    def scalar(self, dim: Any, dtype: str) -> Any:
        """``dim_tensor(dim, dtype)``: a run-time 0-d tensor holding a dim."""
        assert self.dim_tensor is not None
        return self.dim_tensor(dim, dtype)

    def __getitem__(self, name: str) -> Any:
        if name not in self.args:
            raise NodeError(f"{self.target} has no argument {name!r}")
        return self.args[name]

    def get(self, name: str, default: Any = None) -> Any:
        """The argument ``name``, or ``default`` where the schema has no such argument."""
        return self.args.get(name, default)


def unsupported(problems: list[str]) -> ModelImportError:
    """The error listing every node the importer cannot convert."""
    return ModelImportError(
        f"the exported program cannot be imported: {len(problems)} problem(s)", tuple(problems)
    )
