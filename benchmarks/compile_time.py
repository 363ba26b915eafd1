"""Compile time of the example models and of op chains, with where it goes.

For each program: the median of ``dynshape.compile`` over several runs, and the share spent in
type inference (``InferTypes.run``, however often the pipeline calls it) and in each pass. The
chains (200 to 1,600 ops) show how compile time grows with program size: a flat time per op is
linear growth.

    python benchmarks/compile_time.py [--quick] [--repeat N]
    python benchmarks/compile_time.py --against ../base-checkout [--rounds 5]
    python benchmarks/compile_time.py --models     # the CNN reproducers of issue 27 only

The second table (needs ``onnx``): import + compile of convolution networks built the way
PyTorch exports them (``onnx_cnns``: a ResNet-18 structure, a MobileNetV3-like stack with
depthwise convolutions and squeeze-excite, a conv1d speech front end), each also with a strange
input dim (2^31, a dim_param ``n//0``): seconds per phase, the slowest pass, the size proofs
asked, and the memory plans given up for want of proof budget. Issue 27's target: under 2 s
each (design/compiler.md, "Compile time and proof budgets").

``--against`` compares with another checkout of the project (an older commit, say) on the same
programs (this checkout's): each round compiles every program in a fresh process of each
checkout, the two alternating which goes first, and each cell is the median over rounds of
each round's median compile time (the figures in benchmarks/RESULTS.md were measured so).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import compare_numpy as cn

import dynshape
from dynshape.passes import infer_types

PROGRAMS: dict[str, Callable[[], str]] = {
    "seed": lambda: cn.SEED,
    "mlp": lambda: cn.MLP,
    "encoder": lambda: cn.ENCODER,
    "data-dependent": lambda: cn.DATA_DEPENDENT,
    "chain 200": lambda: cn.chain_program(200),
    "chain 400": lambda: cn.chain_program(400),
    "chain 800": lambda: cn.chain_program(800),
    "chain 1600": lambda: cn.chain_program(1600),
}


class _Timer:
    """Seconds spent in each wrapped callable, by label, over one compile."""

    def __init__(self) -> None:
        self.spent: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)

    def wrap(self, label: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.spent[label] += time.perf_counter() - t0
                self.calls[label] += 1

        return timed


def measure(text: str, repeat: int) -> tuple[float, dict[str, float], int]:
    """Median compile seconds, the median share of inference, and inference runs per compile."""
    totals, shares, runs = [], [], 0
    original = infer_types.InferTypes.run
    for _ in range(repeat):
        timer = _Timer()
        infer_types.InferTypes.run = timer.wrap("infer", original)  # type: ignore[method-assign]
        try:
            t0 = time.perf_counter()
            dynshape.compile(text)
            total = time.perf_counter() - t0
        finally:
            infer_types.InferTypes.run = original  # type: ignore[method-assign]
        totals.append(total)
        shares.append(timer.spent["infer"] / total)
        runs = timer.calls["infer"]
    return statistics.median(totals), {"infer": statistics.median(shares)}, runs


# Run in a child process with the other checkout first on the path: times each program's
# dynshape.compile (median of N after one warm-up) and prints the medians as JSON.
_CHILD = """
import json, statistics, sys, time
import dynshape
programs, repeat = json.loads(sys.stdin.read())
out = {}
for name, text in programs.items():
    dynshape.compile(text)
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        dynshape.compile(text)
        times.append(time.perf_counter() - t0)
    out[name] = statistics.median(times)
print(json.dumps(out))
"""


def _child_medians(checkout: Path, programs: dict[str, str], repeat: int) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    done = subprocess.run(
        [sys.executable, "-c", _CHILD],
        input=json.dumps([programs, repeat]),
        capture_output=True,
        text=True,
        cwd=checkout,
        env=env,
        check=True,
    )
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def compare(other: Path, rounds: int, repeat: int, quick: bool) -> None:
    """Print this checkout's compile times against ``other``'s, interleaved (module docstring)."""
    here = Path(__file__).resolve().parent.parent
    programs = {n: make() for n, make in PROGRAMS.items() if not (quick and n == "chain 1600")}
    samples: dict[Path, list[dict[str, float]]] = {here: [], other: []}
    for r in range(rounds):
        for checkout in (other, here) if r % 2 == 0 else (here, other):
            samples[checkout].append(_child_medians(checkout, programs, repeat))
    print(f"{'program':<16} {'before ms':>10} {'after ms':>10} {'after/before':>13}")
    for name in programs:
        before = statistics.median(s[name] for s in samples[other])
        after = statistics.median(s[name] for s in samples[here])
        print(f"{name:<16} {before * 1e3:>10.2f} {after * 1e3:>10.2f} {after / before:>13.2f}")


def onnx_cnns() -> dict[str, Callable[[], Any]]:
    """The reproducer models of issue 27 (``onnx.helper`` graphs, ``cnn_reproducers.py``), by
    name."""
    from cnn_reproducers import MODELS

    return MODELS


def model_rows() -> None:
    """Import + compile of ``onnx_cnns`` (module docstring), each in a fresh process (no
    proof or evaluation cached from another model)."""
    print(
        f"\n{'model':<20} {'import s':>9} {'compile s':>10} {'total s':>8} {'cpu s':>6} "
        f"{'slowest pass':<22} "
        "size proofs / plan notes"
    )
    for name in onnx_cnns():
        done = subprocess.run(
            [sys.executable, __file__, "--one-model", name],
            capture_output=True,
            text=True,
            check=True,
        )
        print(done.stdout.rstrip())


def one_model(name: str) -> None:
    """One row of ``model_rows``."""
    import dynshape.onnx
    from dynshape.pipeline import CompileReport

    model = onnx_cnns()[name]()
    report = CompileReport()
    c0, t0 = time.process_time(), time.perf_counter()
    program = dynshape.onnx.load(model)
    t1 = time.perf_counter()
    dynshape.compile(program, report=report)
    c2, t2 = time.process_time(), time.perf_counter()
    _, slowest, seconds = max(report.passes, key=lambda p: p[2])
    proofs = report.proofs.split(" (")[0]
    print(
        f"{name:<20} {t1 - t0:>9.2f} {t2 - t1:>10.2f} {t2 - t0:>8.2f} {c2 - c0:>6.2f} "
        f"{slowest + f' {seconds:.2f}':<22} {proofs}; {len(report.notes)} plan note(s)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer runs, no 1,600-op chain")
    parser.add_argument("--repeat", type=int, default=None)
    parser.add_argument("--against", type=Path, help="another checkout to compare with")
    parser.add_argument("--rounds", type=int, default=5, help="rounds of --against")
    parser.add_argument("--models", action="store_true", help="only the ONNX CNN table")
    parser.add_argument("--one-model", help=argparse.SUPPRESS)  # a row, in a child process
    args = parser.parse_args()
    if args.one_model:
        one_model(args.one_model)
        return
    if args.models:
        model_rows()
        return
    repeat = args.repeat or (3 if args.quick else 7)
    if args.against is not None:
        compare(args.against.resolve(), args.rounds, repeat, args.quick)
        return
    print(f"{'program':<16} {'ops':>6} {'compile ms':>11} {'ms/op':>7} {'infer':>6} {'runs':>5}")
    for name, make in PROGRAMS.items():
        if args.quick and name == "chain 1600":
            continue
        text = make()
        ops = text.count("(") - text.count("Tensor[(")  # calls, roughly: one paren each
        seconds, share, runs = measure(text, repeat)
        print(
            f"{name:<16} {ops:>6} {seconds * 1e3:>11.1f} {seconds * 1e3 / max(ops, 1):>7.2f} "
            f"{share['infer']:>6.0%} {runs:>5}"
        )
    try:
        import onnx  # noqa: F401
    except ImportError:
        print("\n(onnx is not installed: no model table)")
        return
    model_rows()


if __name__ == "__main__":
    main()
