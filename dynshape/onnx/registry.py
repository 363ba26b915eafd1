"""The table of ONNX op converters: ``@converter("Relu")`` registers a function of a ``Node``.

A converter returns one result per node output: a builder ``Value`` (a tensor computed at run
time), a ``Known`` (contents known at import: constants and shape computations, ``known.py``)
or None for an optional output left unused. It reads the node through ``Node``: inputs as
Values or Knowns, attributes by name with defaults, and the opset of the model.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import ModelImportError
from .known import Known

Result = Any
"""A ``Value``, a ``Known`` or None."""

Converter = Callable[["Node"], Sequence[Result] | Result]

#: Op type (default domain) -> its converter.
CONVERTERS: dict[str, Converter] = {}


def converter(*op_types: str) -> Callable[[Converter], Converter]:
    """Register the decorated function as the converter of ``op_types`` (default domain)."""

    def register(fn: Converter) -> Converter:
        for op_type in op_types:
            if op_type in CONVERTERS:
                raise ValueError(f"two converters for ONNX op {op_type}")
            CONVERTERS[op_type] = fn
        return fn

    return register


class NodeError(Exception):
    """A node the importer cannot convert; the importer names the node and collects these."""


class Unsupported(NodeError):
    """A node using a variant of its op that the importer does not support (an attribute
    value, a rank, a training mode): reported as ``unsupported: ...``, not as a bug."""


@dataclass
class Node:
    """One ONNX node as a converter sees it."""

    op_type: str
    name: str
    inputs: list[Result]
    """The node's inputs, None where an optional input is omitted."""
    attrs: dict[str, Any]
    """Attributes decoded to Python values (ints, floats, strings, lists, numpy arrays)."""
    opset: int
    """The model's version of the default domain."""
    num_outputs: int
    materialize: Callable[[Known], Any]
    """Turns a ``Known`` into a run-time tensor (``graph.py``)."""
    named: tuple[bool, ...] = ()
    """Per output, whether the model names it (an empty name omits an optional output);
    empty when not told, and then every output counts as wanted."""
    subgraph: Callable[..., list[Result]] | None = None
    """``subgraph(graph, inputs=())`` converts a graph attribute's nodes (an ``If`` branch, a
    ``Loop`` body) where this node is, with the values of the enclosing graphs in scope and
    the graph's inputs bound to ``inputs``, and returns the subgraph's outputs."""
    domain: Any = None
    """The input dims (``dims.InputDims``): ``domain.nonnegative(dim)`` proves a dim
    non-negative or narrows its symbol's range so that it is; None proves without ranges."""

    def nonnegative(self, dim: Any, narrow: bool = True) -> bool:
        """Whether ``dim >= 0`` wherever the program runs: proved over the ranges of the
        input dims or, with ``narrow``, made so by narrowing one (``InputDims.nonnegative``)."""
        if self.domain is not None:
            if narrow:
                return bool(self.domain.nonnegative(dim))
            return bool(self.domain.proves_nonnegative(dim))
        import ir

        return ir.compare(dim, ">=", 0) is True

    def wants(self, i: int) -> bool:
        """True unless output ``i`` is omitted (past the end, or given an empty name): a
        converter may skip computing what nobody reads."""
        if i >= self.num_outputs:
            return False
        return self.named[i] if i < len(self.named) else True

    def attr(self, name: str, default: Any = None) -> Any:
        """Attribute ``name``, or ``default`` when the node does not set it."""
        return self.attrs.get(name, default)

    def input(self, i: int) -> Result:
        """Input ``i`` (None when omitted or past the end)."""
        return self.inputs[i] if i < len(self.inputs) else None

    def tensor(self, i: int) -> Any:
        """Input ``i`` as a run-time tensor (a builder Value), a ``Known`` one materialised."""
        value = self.input(i)
        if value is None:
            raise NodeError(f"input {i} is required")
        return self.materialize(value) if isinstance(value, Known) else value

    def known(self, i: int) -> Known | None:
        """Input ``i`` when its contents are known at import time, else None."""
        value = self.input(i)
        return value if isinstance(value, Known) else None

    def ints(self, i: int, what: str) -> list[Any] | None:
        """Input ``i`` as a list of ints or dims (an axes, shape or pads input), None when
        omitted; a NodeError naming ``what`` when it depends on tensor data."""
        value = self.input(i)
        if value is None:
            return None
        if not isinstance(value, Known):
            raise NodeError(
                f"{what} (input {i}) depends on tensor data; it must be computable from shapes"
            )
        return value.dims()

    def all_known(self) -> bool:
        """True if every given input is known at import time."""
        return all(v is None or isinstance(v, Known) for v in self.inputs)

    def numeric(self, i: int) -> np.ndarray | None:
        """Input ``i`` as a numeric array when known and not symbolic, else None."""
        value = self.known(i)
        return None if value is None else value.numeric()


def unsupported(problems: list[str]) -> ModelImportError:
    """The error listing every node the importer cannot convert."""
    return ModelImportError(
        f"the model cannot be imported: {len(problems)} problem(s)", tuple(problems)
    )
