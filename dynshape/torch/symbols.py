"""torch's shape symbols as dynshape's: names, ranges, ``dims=`` and expressions.

An ``ExportedProgram`` types its tensors with sympy expressions of symbols (``s27``,
``2*s27``, ``(s27 - 3)//2 + 1``) and bounds each symbol in ``range_constraints``
(``s27: VR[5, 2048]``). Each symbol becomes a dynshape symbol named after the user's
``torch.export.Dim`` where torch still records it (a freshly exported program keeps the names
in its shape environment; one read back from a ``.pt2`` does not), else torch's own name. Its
range becomes the program's range, so the planner and the memory report see the bounds the
user declared. torch's functions of integers (``FloorDiv``, ``PythonMod``, ``CeilDiv``,
``ModularIndexing``, its ``Max``/``Min``) become dynshape's (floor semantics throughout, as
torch's: both are defined on non-negative sizes).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import sympy

import ir

from ..errors import ModelImportError
from .registry import NodeError, Unsupported

DimOption = int | str | tuple[int, int | None]
"""A value of ``dims=``: a size, a new name, or a range ``(lo, hi)`` (``hi`` None: no bound)."""


class Symbols:
    """torch's symbols -> dynshape dims; the ranges of ``main``."""

    def __init__(self, ep: Any, options: Mapping[str, DimOption] | None = None) -> None:
        self.dims: dict[sympy.Symbol, ir.Dim] = {}
        """torch's symbol -> its dim (a dynshape symbol, or an int where ``dims=`` fixed it)."""
        self.ranges: dict[str, tuple[int, int | None]] = {}
        """The ranges of ``main``'s symbols, by name, inclusive; None: no upper bound."""
        self.torch_names: dict[str, str] = {}
        """dynshape's name of a symbol -> torch's (``batch`` -> ``s77``), for messages."""
        self.unbacked: dict[sympy.Symbol, ir.Dim] = {}
        """torch's data-dependent symbol (``u0``, the row count of ``nonzero``) -> the ``?`` dim
        of the result it first sizes (``bind_unbacked``)."""
        self.bounds: dict[sympy.Basic, ir.Dim] = {}
        """A ``?`` dim -> an upper bound of it in the input dims (``nonzero``: the numel of its
        input), with which assertions on it are proved (``assertions.py``)."""
        debug = _debug_names(ep)
        backed = _input_symbols(ep)
        taken: set[str] = set()
        names: dict[sympy.Symbol, str] = {}
        # A derived dim (``2*dx``) has its own entry, implied by its symbol's: skipped.
        # So has a data-dependent symbol (``u0``), which no input binds.
        constraints = {
            s: vr
            for s, vr in ep.range_constraints.items()
            if isinstance(s, sympy.Symbol) and s in backed
        }
        for s in sorted(constraints, key=str):
            name = debug.get(s)
            if name is None or not name.isidentifier() or name in taken:
                name = str(s)
            taken.add(name)
            names[s] = name
        options = dict(options or {})
        unknown = sorted(set(options) - set(names.values()) - {str(s) for s in names})
        if unknown:
            known = ", ".join(sorted(set(names.values()))) or "none"
            raise ModelImportError(
                f"dims= names {', '.join(unknown)}, which no input of the program uses "
                f"(its dim names: {known})"
            )
        for s, name in names.items():
            lo, hi = _bounds(constraints[s])
            option = options.get(name, options.get(str(s)))
            if isinstance(option, str):
                if not option.isidentifier():
                    raise ModelImportError(
                        f"dims={{{name!r}: {option!r}}}: a new name must be an identifier"
                    )
                name = option
            elif isinstance(option, int) and not isinstance(option, bool):
                if option < lo or (hi is not None and option > hi):
                    raise ModelImportError(
                        f"dims={{{name!r}: {option}}}: outside the range torch recorded "
                        f"[{lo}, {'...' if hi is None else hi}]"
                    )
                self.dims[s] = option
                continue
            elif isinstance(option, tuple) and len(option) == 2:
                lo, hi = _narrowed(name, (lo, hi), option)
            elif option is not None:
                raise ModelImportError(
                    f"dims={{{name!r}: {option!r}}}: expected a size, a name or a range"
                )
            self.dims[s] = ir.sym(name)
            self.torch_names[name] = str(s)
            if lo > 0 or hi is not None:
                self.ranges[name] = (lo, hi)

    def dim(self, expr: Any) -> ir.Dim:
        """The dim of one entry of a torch shape (an int, a ``SymInt``, a sympy expression)."""
        if isinstance(expr, bool):
            raise NodeError(f"a bool {expr} where a size was expected")
        if isinstance(expr, int):
            return expr
        node = getattr(expr, "node", None)
        if node is not None:  # a SymInt
            expr = node.expr
        if not isinstance(expr, sympy.Basic):
            raise NodeError(f"not a size: {expr!r}")
        try:
            return ir.check_dim(self.expr(expr))
        except ir.IRError as e:
            raise Unsupported(f"size {expr}: {e}") from None

    def shape(self, shape: Any) -> list[ir.Dim]:
        """The dims of a torch shape (``torch.Size`` of ints and ``SymInt``s)."""
        return [self.dim(d) for d in shape]

    def bind_unbacked(self, shape: Any, ours: Any) -> None:
        """Each data-dependent symbol that is a whole dim of torch's ``shape`` names the dim
        of ``ours`` (a result's shape) at that axis, where it is first met."""
        for d, mine in zip(shape, ours, strict=False):
            node = getattr(d, "node", None)
            expr = node.expr if node is not None else None
            if isinstance(expr, sympy.Symbol) and expr not in self.dims:
                self.unbacked.setdefault(expr, mine)

    def expr(self, e: sympy.Basic) -> Any:
        """``e`` with dynshape's symbols and functions (not checked to be a dim: a relation's
        sides, ``s0 - 3``, may be negative)."""
        if isinstance(e, sympy.Integer):
            return int(e)
        if isinstance(e, sympy.Symbol):
            if e in self.unbacked:
                return self.unbacked[e]
            if e not in self.dims:
                raise Unsupported(
                    f"symbol {e} is not a dim of the inputs (a data-dependent size that "
                    "no converted op gave a dim)"
                )
            return self.dims[e]
        args = [self.expr(a) for a in e.args]
        if isinstance(e, sympy.Add):
            return sympy.Add(*args)
        if isinstance(e, sympy.Mul):
            return sympy.Mul(*args)
        return _function(e, args)


def _function(e: sympy.Basic, args: list[Any]) -> Any:
    """torch's integer function ``e`` of (converted) ``args`` as dynshape's."""
    kind = type(e).__name__
    if isinstance(e, sympy.Pow) or kind == "PowByNatural":
        if not (isinstance(args[1], int) and args[1] >= 0):
            raise Unsupported(f"size {e}: a power other than by a natural number")
        return sympy.Pow(args[0], args[1])
    if kind in ("FloorDiv", "CleanDiv"):
        return sympy.floor(sympy.Mul(args[0], sympy.Pow(args[1], -1)))
    if kind == "CeilDiv":
        return sympy.ceiling(sympy.Mul(args[0], sympy.Pow(args[1], -1)))
    if kind in ("Mod", "PythonMod"):
        return sympy.Mod(args[0], args[1])
    if kind == "ModularIndexing":
        base, div, mod = args
        return sympy.Mod(sympy.floor(sympy.Mul(base, sympy.Pow(div, -1))), mod)
    if kind == "Max":
        return sympy.Max(*args)
    if kind == "Min":
        return sympy.Min(*args)
    if kind == "Identity":
        return args[0]
    raise Unsupported(f"size {e}: torch's {kind} has no dynshape equivalent")


def _input_symbols(ep: Any) -> set[Any]:
    """The symbols of the placeholders' shapes (the symbols an input binds)."""
    out: set[Any] = set()
    for node in ep.graph.nodes:
        val = node.meta.get("val") if node.op == "placeholder" else None
        for d in getattr(val, "shape", ()):
            expr = getattr(getattr(d, "node", None), "expr", None)
            if isinstance(expr, sympy.Basic):
                out |= expr.free_symbols
    return out


def _debug_names(ep: Any) -> dict[Any, str]:
    """torch's symbol -> the name of the user's ``Dim`` that made it, where torch still knows
    it: the shape environment of a freshly exported program maps each symbol to its sources
    (``L['x'].size()[1]``) and each source to the ``Dim``'s name. A program loaded from a
    ``.pt2`` has no such record (its symbols keep torch's names)."""
    env = None
    for node in ep.graph.nodes:
        val = node.meta.get("val") if node.op == "placeholder" else None
        mode = getattr(val, "fake_mode", None)
        if mode is not None and getattr(mode, "shape_env", None) is not None:
            env = mode.shape_env
            break
    if env is None:
        return {}
    debug = getattr(env, "source_name_to_debug_name", {}) or {}
    out: dict[Any, str] = {}
    for s, sources in getattr(env, "var_to_sources", {}).items():
        for source in sources:
            try:
                name = debug.get(source.name)
            except Exception:  # a source kind without a name: keep torch's
                name = None
            if isinstance(name, str):
                out[s] = name
                break
    return out


def _bounds(vr: Any) -> tuple[int, int | None]:
    """A torch ``ValueRanges`` as ``(lo, hi)``, ``hi`` None when unbounded."""
    lo = vr.lower
    hi = vr.upper
    low = int(lo) if isinstance(lo, (int, sympy.Integer)) else 0
    high = int(hi) if isinstance(hi, (int, sympy.Integer)) else None
    return max(low, 0), high


def _narrowed(
    name: str, recorded: tuple[int, int | None], option: tuple[Any, Any]
) -> tuple[int, int | None]:
    """torch's range of ``name`` intersected with the range ``dims=`` gives it."""
    lo, hi = option
    bad_hi = hi is not None and (not isinstance(hi, int) or hi < lo)
    if not isinstance(lo, int) or lo < 0 or bad_hi:
        raise ModelImportError(
            f"dims={{{name!r}: {option!r}}}: a range is (lo, hi) with 0 <= lo <= hi, or hi None"
        )
    low = max(lo, recorded[0])
    highs = [h for h in (hi, recorded[1]) if h is not None]
    high = min(highs) if highs else None
    if high is not None and high < low:
        shown = "..." if recorded[1] is None else recorded[1]
        raise ModelImportError(
            f"dims={{{name!r}: {option!r}}}: no size is also in the range torch recorded "
            f"[{recorded[0]}, {shown}]"
        )
    return low, high
