"""Compile time of the example models and of op chains, with where it goes.

For each program: the median of ``dynshape.compile`` over several runs, and the share spent in
type inference (``InferTypes.run``, however often the pipeline calls it) and in each pass. The
chains (200 to 1,600 ops) show how compile time grows with program size: a flat time per op is
linear growth.

    python benchmarks/compile_time.py [--quick] [--repeat N]

To compare two commits, run this script from a checkout of each, interleaved (the figures in
benchmarks/RESULTS.md were measured so).
"""

from __future__ import annotations

import argparse
import statistics
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer runs, no 1,600-op chain")
    parser.add_argument("--repeat", type=int, default=None)
    args = parser.parse_args()
    repeat = args.repeat or (3 if args.quick else 7)
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


if __name__ == "__main__":
    main()
