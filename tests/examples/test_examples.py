"""The example models of examples/: each script runs with --small in a fresh process, exits 0
and says its numpy check passed; each exposes the same structure for the benchmarks."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

import dynshape

ROOT = Path(__file__).resolve().parents[2]
# Every example script; example_runner.py is their shared run loop, not an example.
Loader = Callable[[str], ModuleType]
SCRIPTS = sorted(p for p in (ROOT / "examples").glob("*.py") if p.stem != "example_runner")
NAMES = ("build_model", "numpy_reference", "make_params", "make_inputs", "SIZES", "SMALL_SIZES")


def test_the_five_examples_exist() -> None:
    names = {s.stem for s in SCRIPTS}
    assert {"mlp", "cnn", "transformer_encoder", "rnn", "detection_postprocess"} <= names


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda s: s.stem)
def test_example_runs_small_and_passes_its_numpy_check(script: Path) -> None:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    result = subprocess.run(
        [sys.executable, str(script), "--small"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "all numpy checks passed" in result.stdout, output
    assert "FAILED" not in result.stdout, output
    assert "planned peak" in result.stdout, output  # the memory report was printed


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda s: s.stem)
def test_example_has_the_shared_structure(script: Path, load_example: Loader) -> None:
    module = load_example(script.stem)
    for name in NAMES:
        assert hasattr(module, name), f"{script.name} lacks {name}"
    assert module.SIZES and module.SMALL_SIZES
    assert isinstance(module.build_model(), dynshape.Program)


def test_a_mismatch_is_reported_and_exits_non_zero(
    capsys: pytest.CaptureFixture[str], load_example: Loader
) -> None:
    mlp = load_example("mlp")
    reference = mlp.numpy_reference
    mlp.numpy_reference = lambda *args: reference(*args) + 1e-2
    assert mlp.main(["--small"]) == 1
    out = capsys.readouterr().out
    assert "numpy check FAILED" in out and "all numpy checks passed" not in out


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda s: s.stem)
def test_planning_never_needs_more_memory_than_kills_alone(
    script: Path, load_example: Loader
) -> None:
    """The planner's guarantee on the example models, at every size they run at (measured by
    the VM with exact byte counts)."""
    from vm.memory.allocator import NaiveAllocator

    model = load_example(script.stem)
    program = model.build_model()
    exes = [dynshape.compile(program, plan_memory=p) for p in (True, False)]
    rng = np.random.default_rng(0)
    params = list(model.make_params(rng))
    for size in model.SMALL_SIZES:
        args = params + list(model.make_inputs(rng, size))
        peaks = []
        for exe in exes:
            vm = dynshape.VirtualMachine(exe, allocator=NaiveAllocator())
            vm.run(*[a.copy() if isinstance(a, np.ndarray) else a for a in args])
            peaks.append(vm.allocator.stats.peak_live_bytes)
        assert peaks[0] <= peaks[1], (size, peaks)
