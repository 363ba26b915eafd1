"""The compile-time mode of shape functions: dims are sympy expressions, facts are decided.

A shape function states every fact it needs through its context (``shape_funcs/context.py``).
Here each fact is decided with ``ir.dims.compare``, which answers True, False or None:

- proved (True): nothing to do;
- refuted (False): a ShapeError at once, worded exactly as the run-time error would be;
- undecided (None): a ``DeferredCheck`` is recorded in ``SymbolicContext.deferred`` and the
  shape function continues as if the fact held. The compiler turns each record into a run-time
  check, so a program never runs past a fact that does not hold.

See ``design/shapes.md`` for the dim algebra and the reasoning behind broadcasting's result.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import sympy

import ir
from ir.dim_proofs import fold_roundings
from ir.dims import as_expr, compare, dim_max, dim_min
from ir.ranges import as_ranges, simplify_under
from ir.roundings import floor_of
from ir.text.dims_text import AnonNamer
from shape_funcs import ShapeError, UnknownValue, get_shape_func
from shape_funcs.errors import FACT_KINDS, fact_failure, fact_text, format_what
from shape_funcs.registry import describe_value, input_names_of

Dim = ir.Dim


@dataclass(frozen=True)
class DeferredCheck:
    """A fact about dims that could not be decided at compile time: checked at run time."""

    kind: str
    """``==``, ``!=``, ``<``, ``<=``, ``>``, ``>=`` (``a kind b``), ``divides`` (``a`` divides
    ``b``) or ``broadcast`` (``a == b or a == 1 or b == 1``)."""
    dims: tuple[Dim, Dim]
    """The two dims ``(a, b)`` the fact is about."""
    op_name: str
    """The op whose shape function stated the fact (empty for facts stated by a pass)."""
    described: str | Callable[[], str]
    """``description``, or the function that words it on first use (``Text``)."""
    what: str = ""
    """The fact named in terms of the op's inputs, as the shape function worded it."""
    inputs_described: str | Callable[[], str] = ""
    """``inputs``, or the function that words it on first use."""

    # Worded on first use: printing the dims of every deferred fact and its op's inputs was a
    # third of a convolution network's compile (most facts are discharged or merged later).
    @functools.cached_property
    def description(self) -> str:
        """The fact in words and as a formula, for reports: ``topk: k <= x.shape[1]: 5 <= n``."""
        return _text(self.described)

    @functools.cached_property
    def inputs(self) -> str:
        """The op's inputs with their symbolic shapes, for the run-time message."""
        return _text(self.inputs_described)

    def holds(self, binding: Mapping[sympy.Basic, int]) -> bool:
        """Whether the fact holds when the symbols take the values of ``binding``.

        Compile-time and test use only: it calls sympy. Raises ValueError if a symbol of the
        fact is not bound.
        """
        a, b = (_evaluate(d, binding) for d in self.dims)
        if self.kind == "broadcast":
            return a == b or a == 1 or b == 1
        if self.kind == "divides":
            return b == 0 if a == 0 else b % a == 0
        return bool(ir.dims.COMPARE[self.kind](a, b))

    def failure(self, binding: Mapping[sympy.Basic, int]) -> str | None:
        """None if the fact holds under ``binding``, else the error text the run time reports.

        The wording is the concrete mode's, followed by the inputs' symbolic shapes and the
        values of the symbols involved.
        """
        if self.holds(binding):
            return None
        a, b = (_evaluate(d, binding) for d in self.dims)
        symbols = sorted(set().union(*(ir.free_symbols(d) for d in self.dims)), key=str)
        values = ", ".join(f"{s} = {binding[s]}" for s in symbols)
        detail = fact_failure(self.kind, a, b, self.what)
        text = f"{self.op_name}: {detail}" if self.op_name else detail
        context = "; ".join(
            p for p in (f"inputs: {self.inputs}" if self.inputs else "", values) if p
        )
        return f"{text} ({context})" if context else text

    def message_template(self) -> str:
        """The run-time error text, worded like the concrete mode's errors: ``{a}`` and ``{b}``
        stand for the two dims' values and ``{=n}`` for the value of symbol ``n`` (the lowering
        turns each into a register of the VM's ``check_values``, so no sympy at run time):
        ``... 3 vs 2 (inputs: a (n, 4), b (m, 4); where ... must hold; m = {=m}, n = {=n})``.
        A ``?`` has no name a reader could match, so its value is not shown.
        """
        detail = fact_failure(self.kind, "{a}", "{b}", self.what)
        text = f"{self.op_name}: {detail}" if self.op_name else detail
        formula = fact_text(self.kind, *(dim_text(d) for d in self.dims))
        context = f"inputs: {self.inputs}; " if self.inputs else ""
        found = set().union(*(ir.free_symbols(d) for d in self.dims))
        named = sorted((s for s in found if not ir.is_anonymous(s)), key=str)
        values = ", ".join(f"{s} = {{={s}}}" for s in named)
        return f"{text} ({context}where {formula} must hold{'; ' if values else ''}{values})"

    def __str__(self) -> str:
        return self.description


def _text(text: str | Callable[[], str]) -> str:
    return text if isinstance(text, str) else text()


def _evaluate(dim: Dim, binding: Mapping[sympy.Basic, int]) -> int:
    if isinstance(dim, int):
        return dim
    value = dim.xreplace({s: sympy.Integer(v) for s, v in binding.items()})
    if not isinstance(value, sympy.Integer):
        missing = ", ".join(sorted(str(s) for s in value.free_symbols))
        raise ValueError(f"cannot evaluate {dim}: no value for {missing or 'its symbols'}")
    return int(value)


def dim_text(dim: Dim) -> str:
    """A dim as the text format prints it (``min(1, n)``, ``n // 2``, ``?``)."""
    namer = AnonNamer()
    return namer.resolve(namer.dim(dim))


class SymbolicContext:
    """The shape-function context of type inference (see the module docstring).

    One context can serve a whole function: ``deferred`` accumulates the run-time checks of
    every op it runs, each naming its op. A fact recorded twice is kept once.
    """

    symbolic = True

    def __init__(self, ranges: Mapping[Any, tuple[int, int | None]] | None = None) -> None:
        self.ranges: ir.Ranges = as_ranges(ranges)
        """Declared symbol ranges (of the function being inferred), used in every proof."""
        self.deferred: list[DeferredCheck] = []
        """The facts left for run time, in the order they were stated."""
        self.op_name = ""
        """The op whose shape function is running (empty between ops)."""
        self._fn: Callable[..., Any] | None = None
        self._inputs: Sequence[Any] = ()
        self._seen: set[tuple[str, Dim, Dim]] = set()

    # ---- running a shape function ---------------------------------------------------------
    def run(
        self,
        op_name: str,
        fn: Callable[..., Any],
        inputs: Sequence[Any],
        attrs: Mapping[str, Any] | None = None,
    ) -> Any:
        """Call the shape function ``fn`` of ``op_name`` on symbolic ``inputs``.

        Returns its shape (or list of shapes). A refuted fact raises ShapeError naming the op
        and the inputs, worded as ``concrete_shapes`` words it at run time.
        """
        saved = (self.op_name, self._fn, self._inputs)
        self.op_name, self._fn, self._inputs = op_name, fn, inputs
        try:
            return _folded(fn(self, *inputs, **(attrs or {})), self.ranges)
        except ShapeError as e:
            raise e.in_op(op_name, self._describe_inputs()) from None
        except (TypeError, ValueError, IndexError, KeyError, ZeroDivisionError) as e:
            raise ShapeError(
                f"bad call of the shape function: {type(e).__name__}: {e}",
                op_name,
                self._describe_inputs(),
            ) from e
        finally:
            self.op_name, self._fn, self._inputs = saved

    def shapes(
        self, op_name: str, inputs: Sequence[Any], attrs: Mapping[str, Any] | None = None
    ) -> Any:
        """``run`` with the registered shape function of ``op_name``."""
        return self.run(op_name, get_shape_func(op_name).fn, inputs, attrs)

    def _describe_inputs(self) -> str:
        return _describe_inputs(self._fn, self._inputs)

    # ---- the context protocol -------------------------------------------------------------
    def check_equal(self, a: Dim, b: Dim, what: str, *args: object) -> None:
        """Prove, refute (ShapeError) or defer ``a == b``."""
        self.check(a, "==", b, what, *args)

    def check(self, a: Dim, op: str, b: Dim, what: str, *args: object) -> None:
        """Prove, refute (ShapeError) or defer ``a op b``."""
        verdict = compare(a, op, b, self.ranges)
        if verdict is None:
            self._defer(op, a, b, format_what(what, args))
        elif not verdict:
            raise ShapeError(fact_failure(op, a, b, what, args))

    def check_divides(self, divisor: Dim, value: Dim, what: str, *args: object) -> None:
        """Prove, refute (ShapeError) or defer that ``divisor`` divides ``value``."""
        if isinstance(divisor, int) and isinstance(value, int):
            verdict: bool | None = (value % divisor if divisor else value) == 0
        elif compare(divisor, "==", 0, self.ranges):
            verdict = compare(value, "==", 0, self.ranges)
        else:
            verdict = compare(sympy.Mod(as_expr(value), as_expr(divisor)), "==", 0, self.ranges)
        if verdict is None:
            self._defer("divides", divisor, value, format_what(what, args))
        elif not verdict:
            raise ShapeError(fact_failure("divides", divisor, value, what, args))

    def decide(self, a: Dim, op: str, b: Dim) -> bool | None:
        """``a op b``: True, False, or None when it cannot be decided."""
        return compare(a, op, b, self.ranges)

    def broadcast(self, a: Dim, b: Dim, what: str, *args: object) -> Dim:
        """numpy broadcasting of two dims, exact whenever the recorded check holds.

        A dim provably not 1 is the result whenever broadcasting succeeds. When neither is,
        the result is ``Max(a, b) * Min(a, b, 1)``: ``Max`` alone would be wrong for the pair
        (1, 0), which numpy broadcasts to 0.
        """
        r = self.ranges
        a_is_1, b_is_1 = compare(a, "==", 1, r), compare(b, "==", 1, r)
        if b_is_1:
            return a
        if a_is_1:
            return b
        same = compare(a, "==", b, r)
        if same:
            return a
        if a_is_1 is False and b_is_1 is False and same is False:
            raise ShapeError(fact_failure("broadcast", a, b, what, args))
        self._defer("broadcast", a, b, format_what(what, args))
        if a_is_1 is False:
            return a
        if b_is_1 is False:
            return b
        return ir.simplify(dim_max(a, b, r) * dim_min(dim_min(a, b, r), 1, r))

    def max(self, a: Dim, b: Dim) -> Dim:
        """The larger dim (``Max(a, b)`` when the order is unknown)."""
        return dim_max(a, b, self.ranges)

    def min(self, a: Dim, b: Dim) -> Dim:
        """The smaller dim (``Min(a, b)`` when the order is unknown)."""
        return dim_min(a, b, self.ranges)

    def floor_div(self, a: Dim, b: Dim) -> Dim:
        """``a // b``: sympy's ``floor(a / b)``, built by ``ir.roundings`` (a new floor of a
        conv's size cost 10-20 ms of sympy's assumption queries)."""
        if isinstance(a, int) and isinstance(b, int):
            return a // b
        out = floor_of(as_expr(a) / as_expr(b))
        return int(out) if out.is_Integer else out

    def fresh(self, hint: str) -> Dim:
        """A new anonymous dim (printed ``?``)."""
        return ir.fresh(hint)

    def is_known(self, value: Any) -> bool:
        """True for a constant (a numpy array), False for an ``UnknownValue``."""
        return not isinstance(value, UnknownValue)

    # ---- recording ------------------------------------------------------------------------
    def _defer(self, kind: str, a: Dim, b: Dim, what: str) -> None:
        assert kind in FACT_KINDS, kind
        key = (kind, a, b)
        if key in self._seen:
            return
        self._seen.add(key)
        prefix = f"{self.op_name}: " if self.op_name else ""
        fn, inputs = self._fn, tuple(self._inputs)  # as they are now: the context moves on
        self.deferred.append(
            DeferredCheck(
                kind=kind,
                dims=(a, b),
                op_name=self.op_name,
                described=lambda: f"{prefix}{what}: {fact_text(kind, a, b)}",
                what=what,
                inputs_described=lambda: _describe_inputs(fn, inputs),
            )
        )


def _describe_inputs(fn: Callable[..., Any] | None, inputs: Sequence[Any]) -> str:
    """The inputs of shape function ``fn`` by name, with their shapes or values."""
    if fn is None:
        return ""
    names = input_names_of(fn)
    return ", ".join(
        f"{names[i] if i < len(names) else f'input{i}'} {describe_value(v)}"
        for i, v in enumerate(inputs)
    )


def _folded(shape: Any, ranges: ir.Ranges) -> Any:
    """A shape function's result with nested roundings folded (``fold_roundings``): a stack of
    strided convolutions gives ``floor((floor((h - 1)/2) - 1)/2) + 1``, which folds to
    ``floor((h - 3)/4) + 1``. One spelling per size, whichever way a model computes it (an
    exporter's ``h // 4`` and the shape functions' towers), so that types compare cheaply.
    Also a broadcast's ``seq * min(1, seq)``, which is ``seq`` (``fold_roundings``). Then the
    clamps the declared ranges decide (``simplify_under``): with ``samples >= 400``, a speech
    encoder's ``max(0, frames) * min(1, frames)`` is ``frames``, and its reshapes' proofs no
    longer split every ``max`` (issue 27: wav2vec2's import spent a second there)."""
    if isinstance(shape, list):
        return [_folded(s, ranges) for s in shape]
    if isinstance(shape, tuple):
        return tuple(
            simplify_under(fold_roundings(d), ranges)
            if isinstance(d, sympy.Expr) and d.has(sympy.floor, sympy.ceiling, sympy.Min, sympy.Max)
            else d
            for d in shape
        )
    return shape
