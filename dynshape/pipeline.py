"""The compilation pipeline: one readable list of passes, and ``compile``.

    parse -> infer_types -> select -> merge_matmuls -> fuse_ops -> to_anf -> manifest_alloc
          -> kill -> plan_memory -> lower -> vm.Executable

Every stage's output is a module that prints as text and parses back (``stages`` returns them
all), so ``dynshape compile --emit=STAGE`` can show any of them. With ``debug=True`` the IR is
re-checked between passes (types re-inferred, printed text re-parsed and compared), so a pass
that breaks an invariant is named.

``time_budget=seconds`` bounds a compile: a cooperative deadline, checked between passes and
inside the expensive loops (the size proofs' search, the memory planner's), raising
``CompileTimeoutError`` naming the pass that was running. No signal, no thread: a pass is never
interrupted in the middle of building IR. ``report=CompileReport()`` is filled with the seconds
of every pass, the size proofs asked, and the memory plans chosen for want of proof budget.
"""

from __future__ import annotations

import difflib
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import ir
from ir import Module
from vm import Executable

from .errors import CompileError, CompileTimeoutError
from .lower import lower
from .passes.append_in_place import AppendInPlace
from .passes.base import ModulePass, Sequential
from .passes.dense_layout import DenseWeightLayout
from .passes.fold_constants import FoldConstants
from .passes.fold_decided import FoldDecided
from .passes.fold_pad import FoldPadIntoConv
from .passes.fuse_attention import FuseAttention
from .passes.fuse_ops import FuseOps
from .passes.fuse_rms_norm import FuseRMSNorm
from .passes.fuse_silu import FuseSiLU
from .passes.infer_types import InferTypes, stale_type
from .passes.kill import KillAfterLastUse
from .passes.manifest_alloc import ManifestAlloc
from .passes.merge_matmuls import MergeSharedMatmuls
from .passes.plan_memory import PlanMemory
from .passes.select import SimplifySelection
from .passes.sink_squeezes import SinkSqueezes
from .passes.to_anf import ToANF


def default_passes(planner: PlanMemory | None = None) -> list[tuple[str, ModulePass]]:
    """The passes of the default pipeline, each with the stage name of its output
    (``planner``: the memory planner with its options, default ``PlanMemory()``)."""
    return [
        ("types", InferTypes()),
        ("selected", SimplifySelection()),
        (
            "rewritten",
            Sequential(
                FoldConstants(),
                FoldDecided(),
                FoldPadIntoConv(),
                MergeSharedMatmuls(),
                DenseWeightLayout(),
                FuseAttention(),
                FuseRMSNorm(),
                FuseSiLU(),
                SinkSqueezes(),
                AppendInPlace(),
            ),
        ),
        ("fused", FuseOps()),
        ("anf", ToANF()),
        ("manifest", ManifestAlloc()),
        ("kill", KillAfterLastUse()),
        ("planned", planner or PlanMemory()),
    ]


#: The names of the stages, in order: the parsed input, then each pass's output (``--emit``
#: accepts these, plus ``bytecode``).
STAGES = ("parsed", *(stage for stage, _ in default_passes()))


def infer_types(module: Module) -> Module:
    """``module`` typed: the ``types`` stage alone (the model builder checks what it built with
    this, so it imports no pass)."""
    return InferTypes().run(module)


def as_module(program: Module | str | os.PathLike[str], source_name: str = "<string>") -> Module:
    """A module from a module or program text, nested at most ``ir.MAX_NESTING`` levels (the
    passes rely on that bound; the parser checks text)."""
    if isinstance(program, os.PathLike):
        path = Path(program)
        try:
            program = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise CompileError(f"cannot read the program {path}: {e}") from None
        source_name = str(path) if source_name == "<string>" else source_name
    if isinstance(program, str):
        _not_a_path(program)
        module = ir.parse(program, source_name=source_name)
    elif isinstance(program, Module):
        too_deep = ir.find_too_deep(program)
        if too_deep is not None:
            name, node = too_deep
            raise CompileError(ir.too_deep_message(f"@{name}"), node.span)
        module = program
    else:
        raise CompileError(
            f"expected a Module, program text or a path, got {type(program).__name__}"
        )
    if not len(module):
        raise CompileError(
            f"{source_name}: the program is empty: it defines no function "
            "(write def @main(%x: Tensor[(n,), float32]) { ... })"
        )
    return module


def _output_names(program: object, count: int) -> tuple[str, ...]:
    """The names a built or imported program gives its results (``Program.outputs``: an ONNX
    model's output names), kept in the executable when there is one per result."""
    names = tuple(getattr(program, "outputs", ()) or ())
    return names if len(names) == count and all(isinstance(n, str) and n for n in names) else ()


def _not_a_path(text: str) -> None:
    """A CompileError if ``text`` is the name of a file rather than program text."""
    if "\n" in text or "{" in text or len(text) > 4096:
        return
    try:
        is_file = Path(text.strip()).is_file()
    except (OSError, ValueError):
        return
    if is_file:
        raise CompileError(
            f"{text.strip()!r} is the name of a file, not program text: pass "
            f"pathlib.Path({text.strip()!r}) to read it, or its text"
        )


@dataclass
class CompileReport:
    """What one compile spent and chose (``compile(..., report=CompileReport())``; the CLI's
    ``import --stats``)."""

    passes: list[tuple[str, str, float]] = field(default_factory=list)
    """``(stage, pass name, seconds)`` of every pass run, then ``("bytecode", "lower", s)``."""
    notes: list[str] = field(default_factory=list)
    """What the passes chose for want of budget (a memory plan not kept: ``PlanMemory.notes``)."""
    proofs: str = ""
    """The size questions asked during the compile (``ir.dim_proofs.ProofSession.summary``)."""
    typed: Module | None = field(default=None, repr=False)
    """The module after type inference (the ``types`` stage): what analyses of the program as
    written read (``InferenceSession(batch_processes=2)``'s proof that its rows are
    independent) without inferring the types again."""

    @property
    def seconds(self) -> float:
        """The compile's total, pass by pass."""
        return sum(t for _, _, t in self.passes)

    def format(self) -> str:
        """One line per pass with its seconds and share, then the proofs and the notes."""
        total = self.seconds or 1.0
        lines = [f"compile: {self.seconds:.3f} s"]
        lines += [
            f"  {stage:<10} {name:<16} {t:8.3f} s {t / total:6.1%}"
            for stage, name, t in self.passes
        ]
        if self.proofs:
            lines.append(f"size proofs: {self.proofs}")
        lines += [f"note: {note}" for note in self.notes]
        return "\n".join(lines)


#: The clock of time budgets (a test replaces it to run out of time deterministically).
_clock: Callable[[], float] = time.perf_counter


class _Deadline:
    """The cooperative deadline of one compile: ``check`` raises once ``budget`` seconds have
    passed (at once for a budget of 0), naming the pass that runs."""

    def __init__(self, budget: float) -> None:
        self.budget, self.start = budget, _clock()
        self.stage, self.pass_name = "parsed", "parse"

    def enter(self, stage: str, pass_name: str) -> None:
        """The pass that runs from now on; checked on entry."""
        self.stage, self.pass_name = stage, pass_name
        self.check()

    def check(self) -> None:
        """Raise ``CompileTimeoutError`` if the budget is spent."""
        elapsed = _clock() - self.start
        if elapsed >= self.budget:
            raise CompileTimeoutError(self.stage, self.pass_name, self.budget, elapsed)


def _pass_name(p: ModulePass) -> str:
    return str(getattr(p, "name", "") or type(p).__name__)


class StageModules(dict[str, Module]):
    """``stages``' result: the module after each stage, by name; a name that is no stage is a
    KeyError with the closest stage name and the list."""

    def __missing__(self, key: str) -> Module:
        close = difflib.get_close_matches(str(key), STAGES, n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        ran = f"; this run has: {', '.join(self)}" if set(self) != set(STAGES) else ""
        raise KeyError(f"no stage {key!r} ({hint}stages: {', '.join(STAGES)}{ran})")


def stages(
    program: Module | str | os.PathLike[str],
    *,
    debug: bool = False,
    start: str = "parsed",
    source_name: str = "<string>",
    on_stage: Callable[[str, Module], None] | None = None,
    plan_memory: bool | PlanMemory = True,
    time_budget: float | None = None,
    report: CompileReport | None = None,
) -> StageModules:
    """The module after every stage, by stage name (see ``STAGES``); types inferred on each.

    ``start`` names the stage the input is already at (``"manifest"`` for the printed output
    of ``--emit manifest``): the passes up to it are skipped. ``plan_memory=False`` stops after
    ``kill`` (no ``planned`` stage); a ``PlanMemory`` instance plans with its options.
    ``time_budget`` and ``report``: see ``compile``.
    """
    deadline = _deadline(time_budget)
    with ir.dim_proofs.proof_session(check=deadline.check if deadline else None) as session:
        try:
            return _stages(
                program, debug, start, source_name, on_stage, plan_memory, deadline, report
            )
        finally:
            if report is not None:
                report.proofs = session.summary()


def _deadline(time_budget: float | None) -> _Deadline | None:
    if time_budget is None:
        return None
    if isinstance(time_budget, bool) or not isinstance(time_budget, (int, float)):
        raise CompileError(f"time_budget must be seconds or None, got {time_budget!r}")
    if time_budget < 0:
        raise CompileError(f"time_budget must be >= 0 seconds, got {time_budget}")
    return _Deadline(float(time_budget))


def _stages(
    program: Module | str | os.PathLike[str],
    debug: bool,
    start: str,
    source_name: str,
    on_stage: Callable[[str, Module], None] | None,
    plan_memory: bool | PlanMemory,
    deadline: _Deadline | None,
    report: CompileReport | None,
) -> StageModules:
    if start not in STAGES:
        raise CompileError(f"unknown stage {start!r} (stages: {', '.join(STAGES)})")
    if not isinstance(plan_memory, (bool, PlanMemory)):
        raise CompileError(
            f"plan_memory must be True, False or a PlanMemory, got {type(plan_memory).__name__}"
        )
    module = as_module(program, source_name)
    if start != "parsed":
        module = InferTypes().run(module)
    out = StageModules({start: module})
    done = STAGES.index(start)
    planner = plan_memory if isinstance(plan_memory, PlanMemory) else None
    for stage, p in default_passes(planner):
        if STAGES.index(stage) <= done or (stage == "planned" and not plan_memory):
            continue
        # Every pass keeps the types of what it copies and types what it builds (no
        # re-inference: that was ~70% of compile time); debug=True checks both.
        if deadline is not None:
            deadline.enter(stage, _pass_name(p))
        t0 = _clock()
        module = p.run(module)
        if debug:
            _verify(stage, module)
        if report is not None:
            report.passes.append((stage, _pass_name(p), _clock() - t0))
            report.notes += getattr(p, "notes", [])
        out[stage] = module
        if report is not None and stage == "types":
            report.typed = module
        if on_stage is not None:
            on_stage(stage, module)
    return out


def compile(
    program: Module | str | os.PathLike[str],
    *,
    debug: bool = False,
    start: str = "parsed",
    source_name: str = "<string>",
    plan_memory: bool | PlanMemory = True,
    time_budget: float | None = None,
    report: CompileReport | None = None,
) -> Executable:
    """Compile a module (or program text) to a VM executable.

    ``debug=True`` verifies the IR after every pass and names the pass that broke it;
    ``start`` is the stage the input is already at (see ``stages``); ``source_name`` names the
    text in error messages; ``plan_memory=False`` lowers the ``kill`` stage instead of the
    ``planned`` one (one storage per tensor, still freed after its last use), for comparisons;
    ``plan_memory=PlanMemory(returned_in_arena=False)`` gives results storages of their own
    (for callers that keep many results: a kept result otherwise keeps its whole arena).

    ``time_budget`` (seconds; default None, no limit) bounds the whole compile, lowering
    included: past it, ``CompileTimeoutError`` (a ``CompileError``) names the pass that was
    running. The size proofs have budgets of their own, counted in steps, so a compile's result
    never depends on the machine's speed; the time budget is the user's bound on top (see
    design/compiler.md). ``report``: a ``CompileReport`` to fill with the time of every pass,
    the size proofs asked and the memory plans given up for want of proof budget.

    To check every stage on the arguments of one call, use
    ``dynshape.testing.compile_checked(program, args)`` (the reference interpreter, which the
    compiler itself never imports).
    """
    deadline = _deadline(time_budget)
    with ir.dim_proofs.proof_session(check=deadline.check if deadline else None) as session:
        try:
            out = _stages(program, debug, start, source_name, None, plan_memory, deadline, report)
            if deadline is not None:
                deadline.enter("bytecode", "lower")
            t0 = _clock()
            exe = lower(out[max(out, key=STAGES.index)])  # the last stage
            exe.output_names = _output_names(program, len(exe.outputs))
            if report is not None:
                report.passes.append(("bytecode", "lower", _clock() - t0))
            return exe  # done: a lowering that ended past the deadline is kept (see docs)
        finally:
            if report is not None:
                report.proofs = session.summary()


def _verify(stage: str, module: Module) -> None:
    if stage != "types":
        # Every type as a full inference gives it (see stale_type for what is compared).
        stale = stale_type(module, InferTypes().run(module))
        if stale is not None:
            node, inferred = stale
            problem = (
                "a type the pass kept differs from what inference gives (the pass copied a "
                "node whose children it changed, keeping a stale type)"
            )
            if node.ty is None:
                problem = "the pass built a node without its type (passes build typed nodes)"
                what = f"inference gives {inferred}"
            elif str(node.ty) != str(inferred):
                what = f"kept {node.ty}, inference gives {inferred}"
            else:
                what = f"its deferred checks differ ({len(node.facts)} kept)"
            raise CompileError(
                f"after {stage}: {problem}: "
                f"{ir.text.expr_to_text(node).splitlines()[-1][:200]} {what}",
                node.span,
            )
    text = str(module)
    try:
        again = ir.parse(text, source_name=f"<after {stage}>")
    except ir.ParseError as e:
        raise CompileError(f"after {stage}: the printed IR does not parse back: {e}") from None
    if not ir.structurally_equal(again, module):
        raise CompileError(f"after {stage}: the printed IR does not parse back to the same IR")
