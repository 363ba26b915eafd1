"""The dims of a model's inputs: ``dim_param`` names become symbols, ``dims=`` adjusts them.

Each ``dim_param`` (``batch``, ``seq``) is one symbol shared by every input that uses it; a
dynamic dim with no name is a fresh ``?``. ``dims={"batch": 1}`` fixes a name to a size,
``{"seq": (1, 512)}`` bounds it (a range on ``main``), ``{"batch": "b"}`` renames it. A name
that is not an identifier (``batch-size``) is spelled with ``_`` for the other characters.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from ..errors import ModelImportError

DimOption = int | str | tuple[int, int | None]
"""A value of ``dims=``: a size, a new name, or a range ``(lo, hi)`` (``hi`` None: no bound)."""


class InputDims:
    """Maps the dims of the model's inputs to the builder's dims, and gathers the ranges."""

    def __init__(self, options: Mapping[str, DimOption] | None, names: set[str]) -> None:
        self.options = dict(options or {})
        unknown = sorted(set(self.options) - names)
        if unknown:
            known = ", ".join(sorted(names)) or "none"
            raise ModelImportError(
                f"dims= names {', '.join(unknown)}, which no input of the model uses "
                f"(its dim names: {known})"
            )
        self.ranges: dict[str, tuple[int, int | None]] = {}
        for name, option in self.options.items():
            self._check(name, option)

    def _check(self, name: str, option: Any) -> None:
        if isinstance(option, bool):
            raise ModelImportError(
                f"dims={{{name!r}: {option!r}}}: expected a size, a name or a range"
            )
        if isinstance(option, int):
            if option < 0:
                raise ModelImportError(f"dims={{{name!r}: {option}}}: a size must be >= 0")
        elif isinstance(option, str):
            if not option.isidentifier():
                raise ModelImportError(
                    f"dims={{{name!r}: {option!r}}}: a new name must be an identifier"
                )
        elif isinstance(option, tuple) and len(option) == 2:
            lo, hi = option
            if (
                not isinstance(lo, int)
                or lo < 0
                or (hi is not None and (not isinstance(hi, int) or hi < lo))
            ):
                raise ModelImportError(
                    f"dims={{{name!r}: {option!r}}}: a range is (lo, hi) with "
                    "0 <= lo <= hi, or hi None"
                )
            self.ranges[symbol_name(name)] = (lo, hi)
        else:
            raise ModelImportError(
                f"dims={{{name!r}: {option!r}}}: expected a size, a name or a range"
            )

    def dim(self, d: Any) -> int | str:
        """The builder dim of one ONNX ``TensorShapeProto.Dimension``."""
        which = d.WhichOneof("value")
        if which == "dim_value":
            return int(d.dim_value)
        if which == "dim_param" and d.dim_param:
            option = self.options.get(d.dim_param)
            if isinstance(option, int) and not isinstance(option, bool):
                return option
            if isinstance(option, str):
                return option
            return symbol_name(d.dim_param)
        return "?"


def symbol_name(name: str) -> str:
    """An identifier for a ``dim_param`` (other characters become ``_``)."""
    out = re.sub(r"\W", "_", name)
    return out if out.isidentifier() else f"d_{out}"


def dim_names(graph: Any, initializers: set[str]) -> set[str]:
    """The ``dim_param`` names the graph's (non-weight) inputs use."""
    names = set()
    for value in graph.input:
        if value.name in initializers:
            continue
        for d in value.type.tensor_type.shape.dim:
            if d.WhichOneof("value") == "dim_param" and d.dim_param:
                names.add(d.dim_param)
    return names


def recorded_dim(text: str, dims: InputDims, names: set[str]) -> Any:
    """A dim an exporter recorded in ``value_info`` as text (torch.export writes
    ``((height - 1)//4) + 1``, ``Min(128, seq)``), as a dim of the input symbols; None when it
    is not an expression of the input dim names (an invented name such as ``unk__0``) or does
    not parse. Parsed by the IR's dim grammar: nothing is evaluated."""
    import ir

    source = re.sub(r"\bMin\(", "min(", re.sub(r"\bMax\(", "max(", text))
    try:
        ty = ir.parse_type(f"Tensor[({source},), int32]", source_name="<value_info>")
    except Exception:
        return None
    if not isinstance(ty, ir.TensorType):
        return None
    dim = ty.shape[0]
    if isinstance(dim, int):
        return dim
    symbols = {str(s) for s in ir.free_symbols(dim)}
    if not symbols <= {symbol_name(n) for n in names}:
        return None
    binding = {}
    for name in names:
        option = dims.options.get(name)
        target = (
            option if option is not None and not isinstance(option, tuple) else symbol_name(name)
        )
        binding[ir.sym(symbol_name(name))] = ir.sym(target) if isinstance(target, str) else target
    return ir.check_dim(ir.simplify(dim.xreplace(binding)))
