"""How type inference time grows with program size.

Builds programs of 250, 500, 1000 and 2000 ops over symbolic dims (broadcasting, reductions,
reshapes, concatenation), infers their types, and prints the median time per program and per
op. Linear growth shows as a flat time per op.

    python benchmarks/infer_scaling.py [--quick]
"""

from __future__ import annotations

import argparse
import statistics
import time

import ir
from dynshape.passes.infer_types import infer_types


def build_program(num_ops: int) -> ir.Module:
    """A chain of ``num_ops`` op calls over (n, 16) and (1, 16) inputs with symbolic n."""
    n = ir.sym("n")
    x = ir.Var("x", ir.TensorType((n, 16), "float32"))
    b = ir.Var("b", ir.TensorType((1, 16), "float32"))
    e: ir.Expr = x
    count = 0
    while count < num_ops:
        step = count % 5
        if step == 0:
            e = ir.call("add", e, b)
        elif step == 1:
            e = ir.call("multiply", e, e)
        elif step == 2:
            e = ir.call("reshape", e, newshape=[-1, 8])
        elif step == 3:
            e = ir.call("reshape", e, newshape=[-1, 16])
        else:
            e = ir.call("tanh", e)
        count += 1
    return ir.Module.from_main(ir.function([x, b], e))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, one repeat (CI)")
    args = parser.parse_args()
    sizes = [50, 100] if args.quick else [250, 500, 1000, 2000]
    repeats = 1 if args.quick else 5
    print(f"{'ops':>6} {'median s':>10} {'us/op':>8}")
    per_op = []
    for size in sizes:
        module = build_program(size)
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            infer_types(module)
            times.append(time.perf_counter() - start)
        med = statistics.median(times)
        per_op.append(med / size)
        print(f"{size:>6} {med:>10.4f} {med / size * 1e6:>8.1f}")
    print(f"time per op, largest / smallest program: {per_op[-1] / per_op[0]:.2f}x (1.0 = linear)")


if __name__ == "__main__":
    main()
