"""End-to-end: every corpus program compiled once, run on the VM at each binding of its symbols,
compared with its numpy reference; then saved, loaded and run again.

``test_corpus_type_checks`` needs no compiler: it checks that every program infers types, that
every binding satisfies the run-time checks type inference recorded for ``@main``, and that
every reference runs on the generated inputs and agrees with the inferred result type.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from harness import (
    Case,
    all_cases,
    assert_matches,
    assert_same,
    binding_id,
    case_binding_params,
    check_against_type,
    copy_args,
    make_inputs,
    result_type,
    run_reference,
    typed,
)

import dynshape
import ir
import vm as vm_module

CASES = all_cases()
RUNS = case_binding_params()


def _compile_api() -> Any:
    return dynshape.compile  # no fallback: a missing compile fails every case, never skips


_MACHINES: dict[str, tuple[Any, Any]] = {}


@pytest.fixture(scope="session")
def save_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the executables are saved (one file per case) and loaded from."""
    return tmp_path_factory.mktemp("executables")


def _machines(case: Case, save_dir: Path) -> tuple[Any, Any]:
    """The case compiled once, and a VM for it and for its saved-and-loaded executable.

    A failure is cached too (as the exception), so a program that does not compile fails each
    of its runs with the same error without compiling again. The VMs are reused across the
    bindings, so their pooled memory is reused across shapes too.
    """
    if case.name not in _MACHINES:
        try:
            exe = _compile_api()(case.source)
            path = save_dir / f"{case.name}.dsx"
            exe.save(path)
            loaded = vm_module.Executable.load(path)
            make_vm = getattr(dynshape, "VirtualMachine", vm_module.VirtualMachine)
            _MACHINES[case.name] = (make_vm(exe), make_vm(loaded))
        except Exception as e:  # re-raised by every run of the case
            _MACHINES[case.name] = (e, None)
    return _MACHINES[case.name]


def _same_args(a: Any, b: Any) -> bool:
    if isinstance(a, tuple):
        return all(_same_args(x, y) for x, y in zip(a, b, strict=True))
    return np.array_equal(np.asarray(a), np.asarray(b), equal_nan=True)


@pytest.mark.parametrize(
    ("case", "binding"),
    RUNS,
    ids=[f"{c.name}[{binding_id(b)}]" for c, b in RUNS],
)
def test_e2e(case: Case, binding: dict[str, int], save_dir: Path) -> None:
    """Compile (cached), run, compare with numpy; run the loaded executable, compare again."""
    machine, loaded = _machines(case, save_dir)
    if isinstance(machine, Exception):
        raise machine
    args = make_inputs(case, binding)
    before = copy_args(args)
    expected = run_reference(case, args)
    ty = result_type(case)
    out = machine.run(*args)
    assert_matches(out, expected, ty, case.rtol, case.atol)
    assert all(_same_args(a, b) for a, b in zip(args, before, strict=True)), (
        "the VM modified its arguments"
    )
    again = loaded.run(*args)
    assert_matches(again, expected, ty, case.rtol, case.atol, where="result after save/load")
    assert_same(out, again, where="result after save/load vs before")


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_corpus_type_checks(case: Case) -> None:
    """Types infer; each binding passes @main's deferred checks; the reference runs on the
    generated inputs and its result has the inferred structure, shapes and dtype kinds."""
    module, infer = typed(case)
    assert "main" in module
    for binding in case.bindings:
        values = {ir.sym(k): v for k, v in binding.items()}
        for check in infer.deferred.get("main", []):
            try:
                failure = check.failure(values)
            except (ValueError, KeyError, TypeError):
                continue  # mentions a `?` or a symbol the binding does not give
            assert failure is None, f"binding {binding_id(binding)} is illegal: {failure}"
        args = make_inputs(case, binding)
        expected = run_reference(case, args)
        check_against_type(expected, result_type(case), binding)
