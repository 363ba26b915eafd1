"""Memory planning: peak bytes unplanned / planned / liveness lower bound, allocations per call.

For each program and size, the program is compiled with planning off (``kill`` stage: one
storage per tensor, freed after its last use) and on (``planned``), run on a VM with the naive
allocator (exact byte counts) and the figures are read from ``vm.allocator.stats``: peak live
bytes and requests (allocations) per call. The lower bound is the memory report's (the most
bytes of tensors live at one program point; ``?`` unknowns evaluated at their real values is
not possible statically, so programs with data-dependent ops report the measured peak against
the bound evaluated at the measured count). Steady state: with the pooled allocator, the
second and later calls of the same shapes obtain nothing new from the system.

    python benchmarks/memory_planning.py [--quick]
"""

from __future__ import annotations

import argparse
import sys
import textwrap
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import dynshape
from dynshape.memory_report import memory_report
from vm.memory.allocator import NaiveAllocator

SEED = """
def @main(%x: Tensor[(n,), float32], %y: Tensor[(n,), float32]) -> Tensor[(n,), float32] {
  subtract(add(%x, %x), %y)
}
"""

MLP = """
def @main(%x: Tensor[(n, 256), float32], %w1: Tensor[(512, 256), float32],
          %w2: Tensor[(512, 512), float32], %w3: Tensor[(512, 512), float32],
          %w4: Tensor[(10, 512), float32]) -> Tensor[(n, 10), float32] {
  %h1 = nn.relu(nn.dense(%x, %w1));
  %h2 = nn.relu(nn.dense(%h1, %w2));
  %h3 = nn.relu(nn.dense(%h2, %w3));
  nn.dense(%h3, %w4)
}
"""

DATA_DEPENDENT = """
def @main(%x: Tensor[(n, 64), float32], %w: Tensor[(64, 64), float32]) -> Tensor[(?, 64), float32] {
  %h = nn.relu(nn.dense(%x, %w));
  %s = sum(%h, axis=[1]);
  %idx = squeeze(argwhere(greater(%s, 0f)), axis=[1]);
  %g = take(%h, %idx, axis=0);
  nn.relu(nn.dense(nn.relu(nn.dense(%g, %w)), %w))
}
"""

PROGRAMS = {"seed": SEED, "mlp": MLP, "data_dependent": DATA_DEPENDENT}


def _inputs(exe: dynshape.Executable, n: int, rng: np.random.Generator) -> list[np.ndarray]:
    out = []
    for p in exe.functions[0].params:
        shape = tuple(n if isinstance(d, str) else d for d in p.type.shape)  # type: ignore[union-attr]
        out.append(rng.standard_normal(shape).astype(np.float32))
    return out


def measure(source: str, n: int) -> dict[str, int]:
    """Peak bytes and allocations per call, planned and unplanned, and the lower bound."""
    rng = np.random.default_rng(n)
    row: dict[str, int] = {}
    for label, plan in (("unplanned", False), ("planned", True)):
        exe = dynshape.compile(source, plan_memory=plan)
        args = _inputs(exe, n, rng)
        vm = dynshape.VirtualMachine(exe, allocator=NaiveAllocator())
        vm.run(*args)
        row[f"{label}_peak"] = vm.allocator.stats.peak_live_bytes
        row[f"{label}_allocs"] = vm.allocator.stats.requests
        pooled = dynshape.VirtualMachine(exe)
        pooled.run(*args)
        before = pooled.allocator.stats.allocations
        pooled.run(*args)
        row[f"{label}_new_in_steady_state"] = pooled.allocator.stats.allocations - before
    report = memory_report(source, {"n": n}, default=n)["main"]
    row["lower_bound"] = report.evaluate()["lower_bound"]
    row["formula_peak"] = report.evaluate()["planned_peak"]
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes (CI smoke)")
    sizes = [1, 8] if parser.parse_args().quick else [1, 32, 256, 2048]
    header = (
        f"{'program':<16}{'n':>6}{'unplanned':>12}{'planned':>12}{'lower bnd':>12}"
        f"{'planned/lb':>11}{'allocs u/p':>12}{'steady new':>11}"
    )
    print(header)
    print("-" * len(header))
    for name, source in PROGRAMS.items():
        source = textwrap.dedent(source)
        for n in sizes:
            r = measure(source, n)
            ratio = r["planned_peak"] / r["lower_bound"] if r["lower_bound"] else float("nan")
            print(
                f"{name:<16}{n:>6}{r['unplanned_peak']:>12,}{r['planned_peak']:>12,}"
                f"{r['lower_bound']:>12,}{ratio:>11.3f}"
                f"{r['unplanned_allocs']:>6}/{r['planned_allocs']:<5}"
                f"{r['planned_new_in_steady_state']:>11}"
            )
    print(
        "\nlower bound: most tensor bytes live at one point; for data_dependent the '?' count "
        "is evaluated at n (an upper estimate), so its ratio is indicative only."
    )


if __name__ == "__main__":
    main()
