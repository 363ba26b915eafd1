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

    def __init__(
        self,
        options: Mapping[str, DimOption] | None,
        names: set[str],
        narrow: bool = False,
        run_time_sizes: bool = False,
    ) -> None:
        self.options = dict(options or {})
        self.narrow = narrow
        """Whether ``nonnegative`` may narrow a symbol's range (the importer's second try)."""
        self.run_time_sizes = run_time_sizes
        """Whether a size computed from data may be left to run time (``dyn.resize``): the
        importer's last try, for a model the others refused (``graph.import_model``)."""
        unknown = sorted(set(self.options) - names)
        if unknown:
            known = ", ".join(sorted(names)) or "none"
            raise ModelImportError(
                f"dims= names {', '.join(unknown)}, which no input of the model uses "
                f"(its dim names: {known})"
            )
        self.ranges: dict[str, tuple[int, int | None]] = {}
        """The ranges of ``main``'s symbols: the declared ones, narrowed by ``nonnegative``."""
        self.narrowed: dict[str, int] = {}
        """Symbol -> the lower bound ``nonnegative`` gave it (the model's own domain)."""
        self.bounded: dict[str, int] = {}
        """Symbol -> the upper bound ``at_most`` gave it (float math exact below it)."""
        self.symbols: set[str] = set()
        """The names of the symbols the inputs' dims are (``dim`` records them)."""
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
            name = option if isinstance(option, str) else symbol_name(d.dim_param)
            self.symbols.add(name)
            return name
        return "?"

    def proves_nonnegative(self, dim: Any) -> bool:
        """Whether ``dim >= 0`` is proved over the symbols' ranges (narrowing none)."""
        import ir

        return ir.compare(dim, ">=", 0, self.ranges) is True

    def nonnegative(self, dim: Any) -> bool:
        """Whether ``dim >= 0`` wherever the program runs: proved over the symbols' ranges, or
        made so by narrowing the range of its one symbol to the least value from which it is
        proved (``floor(samples/80) - 3 >= 0`` gives ``samples`` the range ``[240, ..)``). The
        program checks its ranges at entry, so a size below is refused there, naming the
        symbol and the input it is read from. False when neither works (another symbol, a
        ``?``, no such value within the declared range, or a bound the proofs do not reach).
        """
        import ir

        if isinstance(dim, int):
            return dim >= 0
        if self.proves_nonnegative(dim):
            return True
        symbol = self._input_symbol(dim) if self.narrow else None
        if symbol is None:
            return False
        name = str(symbol)
        lo, hi = self.ranges.get(name, (0, None))
        least = _least_nonnegative(dim, symbol, lo, hi)
        if least is None or least == lo:
            return False
        narrowed = {**self.ranges, name: (least, hi)}
        if ir.compare(dim, ">=", 0, narrowed) is not True:
            return False
        self.ranges[name] = (least, hi)
        self.narrowed[name] = least
        return True

    def _input_symbol(self, dim: Any) -> Any:
        """The one symbol of ``dim`` when it is an input dim's (the only kind whose range the
        importer may narrow), else None."""
        import ir

        symbols = ir.free_symbols(dim)
        if len(symbols) != 1:
            return None
        (symbol,) = symbols
        if ir.is_anonymous(symbol) or str(symbol) not in self.symbols:
            return None
        return symbol

    def at_most(self, dim: Any, bound: int) -> bool:
        """Whether ``0 <= dim <= bound`` wherever the program runs: proved over the symbols'
        ranges, or made so by lowering the upper bound of its one symbol to the largest value
        up to which it is proved (``float_dims.py``: a dim that went through float math is
        exact up to ``2**24`` in float32). Unlike ``nonnegative`` this narrows on the first
        import: the float math is the model's, so a larger size would not give the sizes the
        model computes, and the program's entry check refuses it, naming the dim."""
        import ir

        if isinstance(dim, int):
            return 0 <= dim <= bound
        if not self.proves_nonnegative(dim):
            return False
        if ir.compare(dim, "<=", bound, self.ranges) is True:
            return True
        symbol = self._input_symbol(dim)
        if symbol is None:
            return False
        name = str(symbol)
        lo, hi = self.ranges.get(name, (0, None))
        top = _largest_at_most(dim, symbol, bound, lo, bound if hi is None else min(hi, bound))
        if top is None:
            return False
        narrowed = {**self.ranges, name: (lo, top)}
        if ir.compare(dim, "<=", bound, narrowed) is not True:
            return False
        self.ranges[name] = (lo, top)
        self.bounded[name] = top
        return True


def _largest_at_most(dim: Any, symbol: Any, bound: int, lo: int, hi: int) -> int | None:
    """The largest ``v`` in ``[lo, hi]`` with ``dim(v) <= bound``, for a ``dim`` that does not
    decrease in ``symbol`` (dims of sizes do not); None when even ``lo`` is past it."""
    import sympy

    def value(v: int) -> int:
        return int(sympy.sympify(dim).subs(symbol, v))

    if value(lo) > bound:
        return None
    while lo < hi:  # invariant: value(lo) <= bound
        mid = (lo + hi + 1) // 2
        if value(mid) <= bound:
            lo = mid
        else:
            hi = mid - 1
    return lo


#: How far ``_least_nonnegative`` looks: past it, a dim is not taken to become non-negative.
_SEARCH_LIMIT = 2**40


def _least_nonnegative(dim: Any, symbol: Any, lo: int, hi: int | None) -> int | None:
    """The least ``v`` in ``[lo, hi]`` with ``dim(v) >= 0``, found as if ``dim`` were
    non-decreasing in ``symbol`` (doubling, then bisection): a candidate only, which the caller
    proves; None when there is none up to ``hi`` (or ``_SEARCH_LIMIT``)."""
    import sympy

    def holds(v: int) -> bool | None:
        value = dim.xreplace({symbol: sympy.Integer(v)})
        return bool(value >= 0) if isinstance(value, sympy.Integer) else None

    top = _SEARCH_LIMIT if hi is None else min(hi, _SEARCH_LIMIT)
    below, step = lo, 1  # holds(below) is False once checked
    first = holds(lo)
    if first is None:
        return None
    if first:
        return lo
    while True:
        probe = min(lo + step, top)
        verdict = holds(probe)
        if verdict is None:
            return None
        if verdict:
            break
        if probe >= top:
            return None
        below, step = probe, step * 2
    above = probe  # holds(above); not holds(below)
    while above - below > 1:
        mid = (below + above) // 2
        verdict = holds(mid)
        if verdict is None:
            return None
        below, above = (below, mid) if verdict else (mid, above)
    return above


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
