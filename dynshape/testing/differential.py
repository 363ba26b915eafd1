"""Differential checking of the pipeline: interpret the IR after every stage on the same inputs,
run the VM, and name the first stage whose results differ from the parsed program's.

    check_stages(program, x, y)              # raises StageMismatch naming the stage
    check_stages(program, x, passes=[...])   # a custom list of (stage name, pass)

The oracle is the reference interpreter on the parsed program (types inferred); every later
stage's IR is interpreted with the memory dialect, then the lowered executable runs on the VM
(stage ``"vm"``). Results must agree with the tolerances of their dtype.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from dynshape_errors import DynShapeError
from ir import Module

from .compare import difference
from .interpret import InterpreterError, interpret, typed_module

#: The name of the last "stage": the lowered executable run on the VM.
VM_STAGE = "vm"


class StageMismatch(DynShapeError):
    """A stage's results differ from the parsed program's (or it fails where that succeeds).

    ``stage`` names the stage, ``detail`` says how the results differ, ``ir_text`` is the IR
    after that stage (empty for the VM stage, whose program is the bytecode).
    """

    def __init__(self, stage: str, detail: str, ir_text: str = "") -> None:
        self.stage = stage
        self.detail = detail
        self.ir_text = ir_text
        text = f"stage {stage!r} changes the program's results: {detail}"
        if ir_text:
            where = "lowered to bytecode" if stage == VM_STAGE else f"after {stage}"
            text += f"\n--- the IR {where} ---\n{ir_text}"
        super().__init__(text)


@dataclass
class StageResults:
    """What ``check_stages`` ran: the modules and the results of every stage."""

    modules: dict[str, Module] = field(default_factory=dict)
    """The module after every stage, by stage name."""
    outputs: dict[str, Any] = field(default_factory=dict)
    """The results of every stage (``"vm"`` for the VM), by stage name."""
    executable: Any = None
    """The compiled ``vm.Executable`` (None when the VM was not run)."""


def run_stages(
    program: Module | str, passes: Sequence[tuple[str, Any]] | None
) -> dict[str, Module]:
    """The module after every stage: ``dynshape.stages`` or, with ``passes``, those passes in
    order (types re-inferred after each, as the pipeline does)."""
    import dynshape
    from dynshape.passes.infer_types import InferTypes
    from dynshape.pipeline import as_module

    if passes is None:
        return dict(dynshape.stages(program))
    module = as_module(program)
    out = {"parsed": module}
    for stage, p in passes:
        module = p.run(module)
        if not isinstance(p, InferTypes):
            module = InferTypes().run(module)
        out[stage] = module
    return out


def check_stages(
    program: Module | str,
    *arrays: Any,
    passes: Sequence[tuple[str, Any]] | None = None,
    modules: Mapping[str, Module] | None = None,
    run_vm: bool = True,
    rtol: float | None = None,
    atol: float | None = None,
) -> StageResults:
    """Interpret every stage of ``program`` on ``arrays`` and run the VM; raise StageMismatch
    naming the first stage whose results differ from the parsed program's.

    ``passes`` replaces the default pipeline (a list of ``(stage name, pass)``, e.g.
    ``dynshape.pipeline.default_passes()`` with a pass inserted). An error of the interpreter
    on the parsed program itself is raised as is: the inputs do not fit the program.
    ``modules`` reuses the stages of an earlier ``run_stages`` (to check several inputs).
    """
    modules = dict(modules) if modules is not None else run_stages(program, passes)
    results = StageResults(modules)
    names = list(modules)
    reference = interpret(typed_module(modules[names[0]]), *arrays)
    results.outputs[names[0]] = reference
    for stage in names[1:]:
        module = modules[stage]
        try:
            out = interpret(module, *arrays)
        except InterpreterError as e:
            raise StageMismatch(stage, f"the interpreter fails: {e}", str(module)) from e
        _compare(stage, out, reference, rtol, atol, str(module))
        results.outputs[stage] = out
    if run_vm:
        import dynshape
        from dynshape.lower import lower

        last = modules[names[-1]]
        try:
            results.executable = lower(last)
        except DynShapeError as e:
            raise StageMismatch(VM_STAGE, f"the lowering fails: {e}", str(last)) from e
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)  # numpy's, in the kernels
                out = dynshape.VirtualMachine(results.executable).run(*arrays)
        except DynShapeError as e:
            raise StageMismatch(VM_STAGE, f"the VM fails: {type(e).__name__}: {e}") from e
        _compare(VM_STAGE, out, reference, rtol, atol, "")
        results.outputs[VM_STAGE] = out
    return results


def _compare(stage: str, out: Any, reference: Any, rtol: Any, atol: Any, text: str) -> None:
    found = difference(out, reference, rtol, atol)
    if found:
        raise StageMismatch(stage, found, text)


def compile_checked(program: Module | str, inputs: Sequence[Any] | None = None) -> Any:
    """``dynshape.compile(program)``, and with ``inputs`` (the arguments of one call of
    ``@main``) every stage checked on them first (see ``check_stages``)."""
    import dynshape

    if inputs is None:
        return dynshape.compile(program)
    return check_stages(program, *inputs).executable
