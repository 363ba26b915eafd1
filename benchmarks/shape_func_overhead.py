"""What a run-time (concrete) shape-function call costs, relative to a plain Python call.

For a few ops it times ``concrete_shapes(op, inputs, attrs)`` (the run-time entry: registry
lookup, call, error decoration only on failure) and the registered function called directly
with the concrete context, and prints each median against the median of a trivial Python
function call measured the same way. Run ``python benchmarks/shape_func_overhead.py``;
``--quick`` takes a few milliseconds-long samples for a CI smoke run.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import timeit
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import shape_funcs
from shape_funcs import CONCRETE, concrete_shapes, get_shape_func

CASES: list[tuple[str, str, list[Any], dict[str, Any]]] = [
    ("add (2, 3) + (3,)", "add", [(2, 3), (3,)], {}),
    ("add (8, 1, 6, 1) + (7, 1, 5)", "add", [(8, 1, 6, 1), (7, 1, 5)], {}),
    ("reshape (4, 6, 8) -> [0, -1]", "reshape", [(4, 6, 8)], {"newshape": [0, -1]}),
    (
        "strided_slice (10, 20, 30)",
        "strided_slice",
        [(10, 20, 30)],
        {"begin": [1, -1, 0], "end": [8, 0, 30], "strides": [2, -3, 1]},
    ),
    (
        "conv2d (1, 3, 224, 224) * (64, 3, 7, 7)",
        "nn.conv2d",
        [(1, 3, 224, 224), (64, 3, 7, 7)],
        {"strides": [2, 2], "padding": [3, 3, 3, 3], "dilation": [1, 1], "groups": 1},
    ),
]


def _trivial(ctx: Any, a: Any, b: Any) -> Any:
    return a


def median_ns(fn: Callable[[], Any], number: int, repeat: int) -> float:
    """The median over ``repeat`` runs of the time of one call, in nanoseconds."""
    runs = timeit.repeat(fn, number=number, repeat=repeat)
    return statistics.median(runs) / number * 1e9


def main(argv: list[str] | None = None) -> None:
    """Measure and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="short samples (CI smoke run)")
    args = parser.parse_args(argv)
    number, repeat = (200, 3) if args.quick else (20_000, 15)

    a, b = (2, 3), (3,)
    base = median_ns(partial(_trivial, CONCRETE, a, b), number, repeat)
    print(f"python {sys.version.split()[0]}, {len(shape_funcs.registered_ops())} shape functions")
    print(f"trivial python call f(ctx, a, b): {base:7.0f} ns  (= 1.0x)")
    print(f"{'case':42} {'concrete_shapes':>20} {'raw fn(CONCRETE)':>20}")
    for label, op, inputs, attrs in CASES:
        fn = get_shape_func(op).fn
        entry = median_ns(partial(concrete_shapes, op, inputs, attrs), number, repeat)
        raw = median_ns(partial(fn, CONCRETE, *inputs, **attrs), number, repeat)
        print(f"{label:42} {entry:8.0f} ns {entry / base:6.1f}x {raw:8.0f} ns {raw / base:6.1f}x")


if __name__ == "__main__":
    main()
