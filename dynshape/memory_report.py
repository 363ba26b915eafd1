"""The memory report of a compiled function: what planning bought, as formulas in its symbols.

For each global function (``memory_report(program)``):

- **planned peak**: the most bytes of storage live at once in the planned program (``planned``
  stage): a walk of the let chain adding each ``alloc_storage`` and subtracting each ``kill``,
  maximised over program points (an ``if`` contributes the peaks of both branches, except
  the planner's ``if (memory.holds(planned <= kills))``, which runs the smaller: ``Min``;
  ``analysis/peak.py``). A call of a
  global adds the callee's own peak, in the caller's symbols, at the call, and what the callee
  leaves allocated (its results) from there on: the VM frees a callee's unkilled storages when
  the top-level call ends. This is what the VM's ``stats.peak_live_bytes`` measures with the
  naive allocator (exact byte counts). A *loop* (a function that calls itself only in tail
  position, with arguments of its parameters' types: the builder's ``while_loop``) is included:
  each iteration's tail call frees the last one's frame, so an iteration has live what it is
  passed plus its own peak, whatever the number of iterations (``_Loop``); its allocation
  counts are per iteration, and the unplanned total counts one iteration. Not included: any
  other recursive callee (its depth is a run-time value; the report names it) and the
  scratch the VM allocates for a fused kernel whose scratch shapes the IR cannot express
  (``manifest_alloc``; with symbolic shapes it can).
- **unplanned peak / total**: the same walk over the ``kill`` stage (one storage per tensor,
  freed after its last use), and the bytes of every allocation of one call with no frees at all
  (callees included, the longer branch of an ``if``), so never below the unplanned peak;
- **tensor bytes live**: the most bytes of *tensors* live at any one program point (each tensor
  from its ``alloc_tensor`` to its last use; at a call, plus the callee's figure). A bound only
  for plans that keep every tensor's bytes apart: one that writes an output over a dying input
  (``analysis/in_place.py``) goes below it, so the report does not call it a lower bound;
- **allocations per call**, planned and unplanned (the longer branch of an ``if``; callees
  included);
- **appended**: the bytes of the tensors ``memory.append`` grows (a KV cache's ``present``:
  design/memory.md, "Appends"), which are in buffers of their own, outside the figures above
  (like the parameters they grow): each buffer holds up to twice its tensor's bytes, or the
  declared bound's (``capacity``), and one step copies only the appended part;
- **layout**: every storage of the planned program with its tensors (offset, bytes, interval).

``format(values)`` prints it, evaluated at a binding when one is given.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass, field

import sympy

import ir
from dynshape_errors import DynShapeError
from ir import Call, Expr, Function, GlobalVar, If, Module, Var

from .analysis.dim_bounds import evaluate
from .analysis.liveness import END, StorageLife, chain, timeline
from .analysis.memory_check import symbol_values
from .analysis.peak import max_of, walk
from .dialect.memory import AllocStorage, Append, Invoke, memory_op
from .inference.type_relations import bind_plain_symbols
from .pipeline import stages


@dataclass
class FunctionMemory:
    """The memory figures of one function (see the module docstring)."""

    name: str
    planned_peak: ir.Dim
    unplanned_peak: ir.Dim
    unplanned_total: ir.Dim
    lower_bound: ir.Dim
    """Most tensor bytes live at once (not a bound for in-place plans; module docstring)."""
    allocations: int
    unplanned_allocations: int
    layout: list[StorageLife]
    """The storages of the planned function, each with its tensors."""
    calls: list[str]
    """Recursive globals it calls, directly or not, whose memory is not included."""
    values: dict[sympy.Basic, int] | None = None
    """Symbol values of the binding the report was made at (None: formulas only)."""
    names: dict[Var, str] = field(default_factory=dict)
    """The printed IR's name of each variable of the planned function."""
    branches: bool = False
    """The function branches (an ``if``, or the run-time choice between memory plans): its
    allocation counts are the longer branch's."""
    default: int = 3
    """The value the sizes known only at run time (``?``) take in ``values``."""
    bound: dict[str, int] = field(default_factory=dict)
    """The named symbol values the report was asked for (``memory_report``'s bindings)."""
    loop: bool = False
    """The function is a loop (it tail-calls itself with its parameters' shapes): its
    figures hold for any number of iterations, its allocation counts are per iteration."""
    loops: list[str] = field(default_factory=list)
    """The loops it runs (itself or callees): the unplanned total counts one iteration each."""
    appended: ir.Dim = 0
    """Bytes of the tensors ``memory.append`` grows (module docstring), in the function's
    symbols; their buffers are outside the peaks."""
    capacities: list[ir.Dim] = field(default_factory=list)
    """Each appended tensor's length along its axis when its buffer has the declared room
    (``memory.append``'s ``capacity``), or 0 where the room doubles."""
    steps: list[str] = field(default_factory=list)
    """What each program step (the time axis of ``layout``) does: ``alloc_tensor``, the
    invoked primitive's name, ``kill``..."""

    def name_of(self, var: Var) -> str:
        """``%name`` of ``var`` as the printed planned IR shows it."""
        return f"%{self.names.get(var, var.name_hint)}"

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
            "appended": evaluate(self.appended, values),
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
        row("tensor bytes live (max)", "lower_bound", self.lower_bound)
        row("unplanned peak (kills)", "unplanned_peak", self.unplanned_peak)
        row("unplanned total", "unplanned_total", self.unplanned_total)
        if self.appended != 0:
            row("appended (own buffers)", "appended", self.appended)
            rooms = sorted({str(c) for c in self.capacities})
            room = "twice each tensor" if rooms == ["0"] else f"lengths {', '.join(rooms)}"
            lines.append(
                f"  {'':<28}({len(self.capacities)} grown in place; room for {room}; "
                "a step copies the appended part)"
            )
        most = "at most " if self.branches else ""
        longer = " (the longer branch)" if self.branches else ""
        longer += ", per iteration" if self.loop else ""
        lines.append(
            f"  {'allocations per call':<28}{most}{self.allocations} planned, "
            f"{self.unplanned_allocations} unplanned{longer}"
        )
        guessed = sorted(str(s) for s in (values or {}) if ir.is_anonymous(s))
        if guessed:
            lines.append(
                f"  (sizes known only at run time, {', '.join(guessed)}, evaluated at "
                f"{self.default}: the figures hold for those sizes)"
            )
        own = f"@{self.name}"
        others = [c for c in self.calls if c != own]
        if self.loop:
            lines.append(
                f"  (a loop: {own} tail-calls itself with the shapes it was given, so each "
                "iteration frees the last one's frame; the peaks hold for any number of them)"
            )
        if own in self.calls:
            lines.append(
                f"  (one call of {own}: not included, the memory of its own recursive calls)"
            )
        if self.loops:
            lines.append(f"  (unplanned total: one iteration of {', '.join(self.loops)})")
        if others:
            what = "which is recursive" if len(others) == 1 else "which are recursive"
            lines.append(f"  (not included: the memory of {', '.join(others)}, {what})")
        lines.append("  layout:")
        for st in self.layout:
            kill = "returned or freed at the end" if st.kill is None else f"killed at {st.kill}"
            size = st.size if values is None else f"{st.size} = {evaluate(st.size, values):,}"
            lines.append(f"    {self.name_of(st.var)}: {size} bytes, from {st.start}, {kill}")
            for t in st.tensors:
                end = "end" if t.end == END else str(t.end)
                off = t.offset if values is None else evaluate(t.offset, values)
                nb = t.nbytes if values is None else evaluate(t.nbytes, values)
                lines.append(
                    f"      {self.name_of(t.var):<13} offset {off}, {nb} bytes, "
                    f"steps {t.start}-{end}"
                )
        return "\n".join(lines)


def step_name(value: Expr) -> str:
    """A short name of what a let of the planned function computes (a time axis label)."""
    op = memory_op(value)
    if isinstance(op, Invoke):
        callee = op.fn
        if isinstance(callee, GlobalVar):
            return callee.name
        if isinstance(callee, Function):  # a primitive: its ops in order, as its kernel's name
            return "+".join(_op_names(callee.body)) or "invoke"
        return "invoke"
    if op is not None:
        return op.NAME.removeprefix("memory.")
    if isinstance(value, Call):
        target = value.callee
        if isinstance(target, GlobalVar):
            return f"@{target.name}"
        return str(getattr(target, "name", "call"))
    if isinstance(value, If):
        return "if"
    return type(value).__name__.lower()


def _op_names(expr: Expr) -> list[str]:
    """The ops ``expr`` calls, operands first (lets in order)."""
    lets, result = chain(expr)
    names: list[str] = []
    for e in (*(let.value for let in lets), result):
        if isinstance(e, Call):
            for arg in e.args:
                names += _op_names(arg)
            if isinstance(e.callee, ir.OpDef):
                names.append(e.callee.name.split(".")[-1])
    return names


def named_symbols(module: Module) -> dict[str, tuple[int, int | None]]:
    """The named symbols a caller binds: those of ``main``'s signature (of every function's
    without a ``main``; a callee's are bound by its call), with their declared ranges
    (``(0, None)`` without one)."""
    found: dict[str, tuple[int, int | None]] = {}
    entry = [module["main"]] if "main" in module else list(module.values())
    for fn in entry:
        types = [p.ty or p.type_annotation for p in fn.params]
        for ty in types:
            for d in getattr(ty, "shape", ()):
                for s in ir.free_symbols(d):
                    if not ir.is_anonymous(s):
                        found.setdefault(s.name, (0, None))
        for s, bound in fn.ranges.items():
            found[s.name] = bound
    return found


def check_bindings(module: Module, bindings: Mapping[str, int]) -> None:
    """A DynShapeError naming every binding that is not a symbol of ``module``, negative or
    outside its declared range, and every symbol left unbound."""
    symbols = named_symbols(module)
    problems = []
    for name, value in bindings.items():
        if name not in symbols:
            close = difflib.get_close_matches(name, list(symbols), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            problems.append(f"{name} is not a symbol of the program{hint}")
        elif value < 0:
            problems.append(f"{name}={value} is negative: a size is >= 0")
        else:
            lo, hi = symbols[name]
            if value < lo or (hi is not None and value > hi):
                top = "" if hi is None else str(hi)
                problems.append(f"{name}={value} is outside its range [{lo}, {top or 'inf'}]")
    missing = [s for s in symbols if s not in bindings]
    if missing:
        problems.append(
            "no value for "
            + ", ".join(missing)
            + " (give each: "
            + " ".join(f"--bind {s}=INT" for s in missing)
            + ")"
        )
    if problems:
        known = ", ".join(symbols) or "none"
        raise DynShapeError(f"bindings: {'; '.join(problems)} (the program's symbols: {known})")


def memory_report(
    program: Module | str,
    bindings: Mapping[str, int] | None = None,
    *,
    default: int = 3,
    source_name: str = "<string>",
) -> dict[str, FunctionMemory]:
    """The memory figures of every global function of ``program`` (text or module).

    With ``bindings`` (symbol name -> value) the figures are also evaluated there: every named
    symbol of the program must be given, within its declared range (a DynShapeError lists what
    is unknown, missing, negative or out of range); the ``?`` sizes known only at run time
    take ``default``.
    """
    out = stages(program, source_name=source_name)
    planned, killed = out["planned"], out["kill"]
    values = None
    if bindings is not None:
        check_bindings(killed, bindings)
        values = symbol_values(killed, bindings, default)
        values.update(symbol_values(planned, bindings, default))
    report = {}
    planned_calls: dict[str, _Summary] = {}
    killed_calls: dict[str, _Summary] = {}
    loops: dict[str, frozenset[str]] = {}  # the loops each function runs, its own included
    for name in _callees_first(planned):
        fn, before = planned[name], killed[name]
        loop = _loop(name, fn, planned_calls)
        peak, end, allocs, missing = _walk(fn.body, 0, planned_calls, loop)
        upeak, uend, uallocs, _ = _walk(
            before.body, 0, killed_calls, _loop(name, before, killed_calls)
        )
        utotal = _walk_total(before.body, killed_calls)
        bound = lower_bound(before, killed_calls)
        params = tuple(p.ty or p.type_annotation for p in fn.params)
        planned_calls[name] = _Summary(params, _max(peak), end, allocs, missing=frozenset(missing))
        loops[name] = frozenset({f"@{name}"} if loop is not None else ()).union(
            *(loops.get(callee, frozenset()) for callee in _direct_calls(fn.body))
        )
        killed_calls[name] = _Summary(params, _max(upeak), uend, uallocs, bound, total=utotal)
        tl = timeline(fn)
        report[name] = FunctionMemory(
            name=name,
            bound=dict(bindings or {}),
            branches=any(isinstance(let.value, If) for let in tl.steps),
            default=default,
            planned_peak=_max(peak),
            unplanned_peak=_max(upeak),
            unplanned_total=utotal,
            lower_bound=bound,
            allocations=allocs,
            unplanned_allocations=uallocs,
            layout=list(tl.storages.values()),
            steps=[step_name(let.value) for let in tl.steps],
            appended=_appended(fn.body),
            capacities=[a.capacity for a in _appends(fn.body)],
            calls=sorted(missing),
            loop=loop is not None,
            loops=sorted(loops[name]),
            values=values,
            names=ir.text.printed_names(name, fn),
        )
    return {name: report[name] for name in planned if name in report}


@dataclass(frozen=True)
class _Summary:
    """What a call of a function costs its caller, in the callee's symbols."""

    params: tuple[ir.Type | None, ...]
    peak: ir.Dim
    """Most bytes the call has live at once."""
    end: ir.Dim
    """Bytes it leaves allocated when it returns."""
    allocations: int
    lower_bound: ir.Dim = 0
    missing: frozenset[str] = frozenset()
    total: ir.Dim = 0
    """Bytes of every allocation of one call (no frees), callees included."""
    """Recursive functions it calls, whose memory the figures leave out."""

    def at(self, dim: ir.Dim, args: tuple[Expr, ...]) -> ir.Dim:
        """``dim`` (a figure of this summary) in the caller's terms, for a call on ``args``."""
        binding: dict[sympy.Basic, sympy.Expr] = {}
        for p, a in zip(self.params, args, strict=True):
            bind_plain_symbols(p, a.ty, binding)
        return dim if isinstance(dim, int) else ir.simplify(dim.xreplace(binding))


def _callees_first(module: Module) -> list[str]:
    """The global functions, every callee before its callers (recursive ones in any order)."""
    order: list[str] = []
    state: dict[str, int] = {}  # 1: being visited, 2: done

    def visit(name: str) -> None:
        if state.get(name):
            return
        state[name] = 1
        for callee in sorted(_direct_calls(module[name].body)):
            if callee in module:
                visit(callee)
        state[name] = 2
        order.append(name)

    for name, fn in module.items():
        if not fn.is_primitive:
            visit(name)
    return order


def _direct_calls(body: Expr) -> set[str]:
    out: set[str] = set()
    lets, _ = chain(body)
    for let in lets:
        v = let.value
        if isinstance(v, Call) and isinstance(v.callee, GlobalVar):
            out.add(v.callee.name)
        elif isinstance(v, If):
            out |= _direct_calls(v.then_branch) | _direct_calls(v.else_branch)
    return out


def lower_bound(fn: Function, callees: Mapping[str, _Summary] | None = None) -> ir.Dim:
    """The most bytes of tensors live at one program point (a symbolic max over points); at a
    call of a function in ``callees``, the callee's own bound counts too."""
    tl = timeline(fn)
    points = {t.start: ir.dims.as_expr(0) for t in tl.tensors.values()}  # the max is at a start
    for t, let in enumerate(tl.steps):  # ... or inside a call
        v = let.value
        if isinstance(v, Call) and isinstance(v.callee, GlobalVar) and callees:
            summary = callees.get(v.callee.name)
            if summary is not None:
                points[t] = ir.dims.as_expr(summary.at(summary.lower_bound, v.args))
    candidates: list[ir.Dim] = []
    for t, extra in sorted(points.items(), key=lambda p: p[0]):
        live = [x.nbytes for x in tl.tensors.values() if x.start <= t <= x.end]
        candidates.append(ir.simplify(sympy.Add(extra, *(ir.dims.as_expr(d) for d in live))))
    return _max(candidates)


def _appends(body: Expr) -> list[Append]:
    """The ``memory.append`` lets of a chain, branches included."""
    out: list[Append] = []
    for let in chain(body)[0]:
        op = memory_op(let.value)
        if isinstance(op, Append):
            out.append(op)
        elif isinstance(let.value, If):
            out += _appends(let.value.then_branch) + _appends(let.value.else_branch)
    return out


def _appended(body: Expr) -> ir.Dim:
    """Bytes of the tensors the appends of a chain grow (both branches of an ``if``)."""
    terms = []
    for op in _appends(body):
        ty = op.call.ty
        assert isinstance(ty, ir.TensorType)
        terms.append(sympy.Mul(ir.ITEMSIZE[ty.dtype], *(ir.dims.as_expr(d) for d in ty.shape)))
    return ir.check_dim(ir.simplify(sympy.Add(*terms))) if terms else 0


def _walk_total(body: Expr, callees: Mapping[str, _Summary]) -> ir.Dim:
    """Bytes of every allocation of a chain (no frees): its own, the larger branch of each
    ``if`` (``max``), and each callee's total in the caller's symbols (a recursive one, without
    a summary, is left out as in the peak)."""
    lets, _ = chain(body)
    terms: list[sympy.Expr] = []
    for let in lets:
        value, op = let.value, memory_op(let.value)
        if isinstance(op, AllocStorage):
            terms.append(ir.dims.as_expr(op.size))
        elif isinstance(value, If):
            branches = [_walk_total(b, callees) for b in (value.then_branch, value.else_branch)]
            terms.append(ir.dims.as_expr(_max(branches)))
        elif isinstance(value, Call) and isinstance(value.callee, GlobalVar):
            summary = callees.get(value.callee.name)
            if summary is not None:
                terms.append(ir.dims.as_expr(summary.at(summary.total, value.args)))
    return ir.check_dim(ir.simplify(sympy.Add(*terms)))


@dataclass(frozen=True)
class _Loop:
    """A function that is a loop: it calls itself only in tail position, with arguments of its
    parameters' types (the builder's ``while_loop``). An iteration's tail call replaces its
    frame (the VM frees what the next iteration does not reach), so the next iteration has
    live what this one passes it plus its own allocations, which are this one's (the same
    shapes): its peak on top of the call's live bytes is the body's own peak, whatever the
    number of iterations."""

    name: str
    body_peak: ir.Dim
    """The most bytes one iteration has live at once, beyond what it is passed."""
    result: ir.Dim
    """Bytes of the function's result: at most what the last iteration leaves allocated."""
    calls: frozenset[Var]
    """The variables its calls of itself are bound to."""


def _loop(name: str, fn: Function, callees: Mapping[str, _Summary]) -> _Loop | None:
    """``fn`` as a ``_Loop``, or None if it does not call itself or not only as a loop does."""
    calls = _self_calls(fn.body, name, tail=True)
    if not calls or any(v is None for v in calls):
        return None
    params = [p.ty or p.type_annotation for p in fn.params]
    for _, call in calls.values():
        if [str(a.ty) for a in call.args] != [str(p) for p in params]:
            return None  # a growing or shrinking shape: each iteration differs
    peaks, _, _, missing = _walk(fn.body, 0, callees)
    if missing - {f"@{name}"}:
        return None
    ret = fn.ret_type or fn.body.ty
    leaves = ir.tensor_leaves(ret) if ret is not None else []
    result = [
        sympy.Mul(ir.ITEMSIZE[t.dtype], *(ir.dims.as_expr(d) for d in t.shape)) for t in leaves
    ]
    tails = frozenset(v for v in calls if v is not None)
    return _Loop(name, _max(peaks), ir.simplify(sympy.Add(*result)), tails)


def _self_calls(body: Expr, name: str, tail: bool) -> dict[Var | None, tuple[Var | None, Call]]:
    """The calls of ``@name`` in a chain, keyed by their variable when in tail position (the
    chain's result, only kills after it, its ``if`` itself in tail position), else by None."""
    lets, result = chain(body)
    last = len(lets)
    while last and memory_op(lets[last - 1].value) is not None:  # kills, checks after it
        last -= 1
    out: dict[Var | None, tuple[Var | None, Call]] = {}
    for k, let in enumerate(lets):
        in_tail = tail and k == last - 1 and result is let.var
        v = let.value
        if isinstance(v, Call) and isinstance(v.callee, GlobalVar) and v.callee.name == name:
            key = let.var if in_tail else None
            out[key] = (key, v)
        elif isinstance(v, If):
            for branch in (v.then_branch, v.else_branch):
                out.update(_self_calls(branch, name, in_tail))
    return out


def _walk(
    body: Expr, live: ir.Dim, callees: Mapping[str, _Summary], loop: _Loop | None = None
) -> tuple[list[ir.Dim], ir.Dim, int, set[str]]:
    """Peak candidates, live bytes at the end, allocations, and the called globals without a
    summary (recursive), of a chain (``analysis/peak.py``, both branches of each ``if``).
    ``loop``: the function walked is that loop, and its calls of itself cost one iteration."""

    inherited: set[str] = set()  # the recursive functions the callees leave out

    def cost(var: Var, call: Call) -> tuple[ir.Dim, ir.Dim, int] | None:
        assert isinstance(call.callee, GlobalVar)
        if loop is not None and var in loop.calls:
            return loop.body_peak, loop.result, 0
        summary = callees.get(call.callee.name)
        if summary is None:
            return None
        inherited.update(summary.missing)
        args = call.args
        return summary.at(summary.peak, args), summary.at(summary.end, args), summary.allocations

    w = walk(body, cost, live)
    w.missing |= inherited
    return w.peaks, w.live, w.allocations, w.missing


_max = max_of
