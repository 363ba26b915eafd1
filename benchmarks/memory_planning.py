"""Memory planning on the example models: peak bytes unplanned / planned / lower bound, and
allocations per call, planned vs unplanned; new buffers per call in steady state.

Each model of ``examples/`` (and the seed program) is compiled twice, with planning off (the
``kill`` stage: one exact-size storage per tensor, freed after its last use) and on, and run at
several sizes. Everything is *measured* on the VM, callees, loops and kernel scratch included:

- ``unplanned`` / ``planned``: the allocator's peak of live bytes over one call, with the naive
  allocator (exact byte counts, no size classes);
- ``lower bnd``: the liveness lower bound, the most bytes of tensors live at one program point.
  The unplanned program *is* that measurement: each tensor has a buffer of exactly its size,
  allocated where the tensor is and freed right after its last use, so its peak is the most
  tensor bytes live at once (under the compiler's liveness, which both programs share; for
  data-dependent sizes, at the sizes the data gave). A plan that writes an output over an input
  dying at its kernel (softmax over attention scores) goes below it;
- ``allocs u/p``: storages requested per call, unplanned / planned;
- ``steady new``: buffers obtained from the system by the planned program's third call with the
  same shapes (pooled allocator, results dropped by the caller between calls): 0 is the goal.

The goals: ``planned`` <= ``unplanned`` on every row (the planner's guarantee: never more
memory than kills alone), ``planned/lb`` <= 1.10 on every model at every size, and
``steady new`` = 0.

    python benchmarks/memory_planning.py [--quick]
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "examples"))

import dynshape  # noqa: E402
from vm.memory.allocator import NaiveAllocator  # noqa: E402

MODELS = ("mlp", "cnn", "transformer_encoder", "rnn", "detection_postprocess")

SEED = """
def @main(%x: Tensor[(n,), float32], %y: Tensor[(n,), float32]) -> Tensor[(n,), float32] {
  subtract(add(%x, %x), %y)
}
"""

#: The target of the issue: planned peak within 10% of the lower bound.
TARGET = 1.10


def load_example(name: str) -> ModuleType:
    """The example module ``examples/<name>.py``."""
    spec = importlib.util.spec_from_file_location(
        f"examples_{name}", ROOT / "examples" / f"{name}.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def measure(exes: dict[bool, dynshape.Executable], args: list[Any]) -> dict[str, int]:
    """Peaks and requests of one call, planned and unplanned; steady-state new buffers."""
    row: dict[str, int] = {}
    for planned, exe in exes.items():
        label = "planned" if planned else "unplanned"
        vm = dynshape.VirtualMachine(exe, allocator=NaiveAllocator())
        vm.run(*args)
        row[f"{label}_peak"] = vm.allocator.stats.peak_live_bytes
        row[f"{label}_allocs"] = vm.allocator.stats.requests
    pooled = dynshape.VirtualMachine(exes[True])
    pooled.run(*args)
    pooled.run(*args)
    before = pooled.allocator.stats.allocations
    pooled.run(*args)
    row["steady_new"] = pooled.allocator.stats.allocations - before
    return row


def workloads(quick: bool) -> list[tuple[str, dict[bool, dynshape.Executable], list[Any]]]:
    """(label, executables planned and not, arguments) for every model and size."""
    out = []
    seed = {p: dynshape.compile(SEED, plan_memory=p) for p in (False, True)}
    rng = np.random.default_rng(0)
    for n in (10, 1000) if quick else (10, 1000, 100_000):
        x = rng.standard_normal(n).astype(np.float32)
        out.append((f"seed n={n}", seed, [x, x]))
    for name in MODELS:
        model = load_example(name)
        program = model.build_model()
        exes = {p: dynshape.compile(program, plan_memory=p) for p in (False, True)}
        params = list(model.make_params(rng))
        for size in model.SMALL_SIZES if quick else model.SIZES:
            inputs = list(model.make_inputs(rng, size))
            out.append((f"{name} {model.SIZE_LABEL}={size}", exes, params + inputs))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes (CI smoke)")
    quick = parser.parse_args().quick
    header = (
        f"{'workload':<44}{'unplanned':>12}{'planned':>12}{'lower bnd':>12}"
        f"{'planned/lb':>11}{'allocs u/p':>12}{'steady new':>11}"
    )
    print(header)
    print("-" * len(header))
    missed = []
    for label, exes, args in workloads(quick):
        r = measure(exes, args)
        lb = r["unplanned_peak"]
        ratio = r["planned_peak"] / lb if lb else 1.0
        if ratio > TARGET or r["steady_new"] or r["planned_peak"] > r["unplanned_peak"]:
            missed.append(label)
        print(
            f"{label:<44}{r['unplanned_peak']:>12,}{r['planned_peak']:>12,}{lb:>12,}"
            f"{ratio:>11.3f}{r['unplanned_allocs']:>6}/{r['planned_allocs']:<5}"
            f"{r['steady_new']:>11}"
        )
    verdict = "met everywhere" if not missed else "MISSED for " + ", ".join(missed)
    target = f"planned <= unplanned, planned/lb <= {TARGET:.2f}, steady new = 0"
    print(f"\ntarget ({target}): {verdict}")


if __name__ == "__main__":
    main()
