"""The memory report of a compiled function: what planning bought, as formulas in its symbols.

For each global function (``memory_report(program)``):

- **planned peak**: the most bytes of storage live at once in the planned program (``planned``
  stage): a walk of the let chain adding each ``alloc_storage`` and subtracting each ``kill``,
  maximised over program points (an ``if`` contributes the peaks of both branches). This is what
  the VM's ``stats.peak_live_bytes`` measures with the naive allocator (exact byte counts), as
  long as kernels need no scratch and the function calls no globals (callees are not included).
- **unplanned peak / total**: the same walk over the ``kill`` stage (one storage per tensor,
  freed after its last use), and the sum of every allocation (no frees at all);
- **lower bound**: the most bytes of *tensors* live at any one program point (each tensor from its
  ``alloc_tensor`` to its last use): no plan of these tensors can need less;
- **allocations per call**, planned and unplanned (the longer branch of an ``if``);
- **layout**: every storage of the planned program with its tensors (offset, bytes, interval).

``format(values)`` prints it, evaluated at a binding when one is given.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import sympy

import ir
from ir import Call, Expr, Function, GlobalVar, If, Module

from .passes.dim_bounds import dims_le, evaluate
from .passes.liveness import END, StorageLife, chain, memory_op, timeline
from .passes.memory_check import symbol_values
from .pipeline import stages


@dataclass
class FunctionMemory:
    """The memory figures of one function (see the module docstring)."""

    name: str
    planned_peak: ir.Dim
    unplanned_peak: ir.Dim
    unplanned_total: ir.Dim
    lower_bound: ir.Dim
    allocations: int
    unplanned_allocations: int
    layout: list[StorageLife]
    """The storages of the planned function, each with its tensors."""
    calls: list[str]
    """Globals it calls (their memory is not included)."""
    values: dict[sympy.Basic, int] | None = None
    """Symbol values of the binding the report was made at (None: formulas only)."""

    def evaluate(self, values: Mapping[sympy.Basic, int] | None = None) -> dict[str, int]:
        """The byte figures at concrete symbol values (default: the report's binding)."""
        values = values if values is not None else self.values
        if values is None:
            raise ValueError("no binding: pass symbol values or make the report with bindings")
        return {
            "planned_peak": evaluate(self.planned_peak, values),
            "unplanned_peak": evaluate(self.unplanned_peak, values),
            "unplanned_total": evaluate(self.unplanned_total, values),
            "lower_bound": evaluate(self.lower_bound, values),
        }

    def format(self, values: Mapping[sympy.Basic, int] | None = None) -> str:
        """The report as text; figures evaluated at ``values`` (or the report's binding) too."""
        values = values if values is not None else self.values
        got = self.evaluate(values) if values is not None else None
        lines = [f"@{self.name}"]

        def row(label: str, key: str, dim: ir.Dim) -> None:
            text = f"  {label:<28}{dim}"
            if got is not None:
                text += f"  = {got[key]:,} bytes"
            lines.append(text)

        row("planned peak", "planned_peak", self.planned_peak)
        row("liveness lower bound", "lower_bound", self.lower_bound)
        row("unplanned peak (kills)", "unplanned_peak", self.unplanned_peak)
        row("unplanned total", "unplanned_total", self.unplanned_total)
        lines.append(
            f"  {'allocations per call':<28}{self.allocations} planned, "
            f"{self.unplanned_allocations} unplanned"
        )
        if self.calls:
            lines.append(f"  (not included: the memory of {', '.join(self.calls)})")
        lines.append("  layout:")
        for st in self.layout:
            kill = "returned or freed at the end" if st.kill is None else f"killed at {st.kill}"
            size = st.size if values is None else f"{st.size} = {evaluate(st.size, values):,}"
            lines.append(f"    %{st.var.name_hint}: {size} bytes, from {st.start}, {kill}")
            for t in st.tensors:
                end = "end" if t.end == END else str(t.end)
                off = t.offset if values is None else evaluate(t.offset, values)
                nb = t.nbytes if values is None else evaluate(t.nbytes, values)
                lines.append(
                    f"      %{t.var.name_hint:<12} offset {off}, {nb} bytes, steps {t.start}-{end}"
                )
        return "\n".join(lines)


def memory_report(
    program: Module | str,
    bindings: Mapping[str, int] | None = None,
    *,
    default: int = 3,
    source_name: str = "<string>",
) -> dict[str, FunctionMemory]:
    """The memory figures of every global function of ``program`` (text or module).

    With ``bindings`` (symbol name -> value) the figures are also evaluated there; symbols the
    binding does not give (``?`` unknowns bound at run time) take ``default``.
    """
    out = stages(program, source_name=source_name)
    planned, killed = out["planned"], out["kill"]
    values = None
    if bindings is not None:
        values = symbol_values(killed, bindings, default)
        values.update(symbol_values(planned, bindings, default))
    report = {}
    for name, fn in planned.items():
        if fn.is_primitive:
            continue
        before = killed[name]
        peak, _, allocs, calls = _walk(fn.body, 0)
        upeak, _, uallocs, _ = _walk(before.body, 0)
        report[name] = FunctionMemory(
            name=name,
            planned_peak=_max(peak),
            unplanned_peak=_max(upeak),
            unplanned_total=_total(before),
            lower_bound=lower_bound(before),
            allocations=allocs,
            unplanned_allocations=uallocs,
            layout=list(timeline(fn).storages.values()),
            calls=sorted(calls),
            values=values,
        )
    return report


def lower_bound(fn: Function) -> ir.Dim:
    """The most bytes of tensors live at one program point (a symbolic max over points)."""
    tl = timeline(fn)
    candidates: list[ir.Dim] = []
    for t in sorted({t.start for t in tl.tensors.values()}):  # the max is at some start
        live = [x.nbytes for x in tl.tensors.values() if x.start <= t <= x.end]
        candidates.append(ir.simplify(sympy.Add(*(ir.dims.as_expr(d) for d in live))))
    return _max(candidates)


def _total(fn: Function) -> ir.Dim:
    sizes = [ir.dims.as_expr(s.size) for s in timeline(fn).storages.values()]
    return ir.simplify(sympy.Add(*sizes))


def _walk(body: Expr, live: ir.Dim) -> tuple[list[ir.Dim], ir.Dim, int, set[str]]:
    """Peaks candidates, live bytes at the end, allocations, and called globals of a chain."""
    lets, _ = chain(body)
    sizes: dict[object, ir.Dim] = {}
    peaks: list[ir.Dim] = []
    allocs = 0
    calls: set[str] = set()
    for let in lets:
        value, op = let.value, memory_op(let.value)
        if op == "memory.alloc_storage":
            assert isinstance(value, Call)
            sizes[let.var] = value.attrs["size"]
            live = ir.simplify(ir.dims.as_expr(live) + value.attrs["size"])
            peaks.append(live)
            allocs += 1
        elif op == "memory.kill":
            assert isinstance(value, Call)
            target = value.args[0]
            if target in sizes:
                live = ir.simplify(ir.dims.as_expr(live) - sizes.pop(target))
        elif isinstance(value, If):
            p1, l1, a1, c1 = _walk(value.then_branch, live)
            p2, l2, a2, c2 = _walk(value.else_branch, live)
            peaks += p1 + p2
            live = _max([l1, l2])
            allocs += max(a1, a2)
            calls |= c1 | c2
        elif isinstance(value, Call) and isinstance(value.callee, GlobalVar):
            calls.add(f"@{value.callee.name}")
    return peaks, live, allocs, calls


def _max(dims: list[ir.Dim]) -> ir.Dim:
    """The max of ``dims``, without the ones provably dominated by another."""
    kept: list[ir.Dim] = []
    for d in dims:
        if any(dims_le(d, k) for k in kept):
            continue
        kept = [k for k in kept if not dims_le(k, d)] + [d]
    if not kept:
        return 0
    if len(kept) == 1:
        return kept[0]
    return ir.check_dim(sympy.Max(*(ir.dims.as_expr(k) for k in kept)))
