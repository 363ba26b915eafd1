"""VM dispatch overhead: a chain of 200 tiny elementwise kernels vs the same numpy calls.

The VM program is hand-assembled: two (1, 16) float32 tensors allocated once, then 200
``invoke add`` instructions ping-ponging between them. The baseline makes the same 200
``np.add(a, b, out=c)`` calls from a Python loop. Both are timed as the median of repeats;
the ratio is VM time / numpy time. Also reported: the fixed cost of one ``run`` of a 1-kernel
program (argument check, frame, one allocation, output hand-over) beyond the kernel itself.

    python benchmarks/vm_dispatch.py [--quick]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from vm import Assembler, VirtualMachine, tensor

SHAPE = (1, 16)
CHAIN = 200


def chain_program(n: int = CHAIN):
    """main(x) = x + x + ... (n adds), in two buffers."""
    asm = Assembler()
    add = asm.kernel("add", num_inputs=2)
    spec = tensor("float32", SHAPE)
    f = asm.function("main", [("x", spec)], spec)
    (x,) = f.params
    s = f.alloc_storage(128)
    a = f.alloc_tensor(s, 0, SHAPE, "float32")
    b = f.alloc_tensor(s, 64, SHAPE, "float32")
    f.invoke(add, [x, x], [a])
    src, dst = a, b
    for _ in range(n - 1):
        f.invoke(add, [src, x], [dst])
        src, dst = dst, src
    f.ret(src)
    return asm.build()


def numpy_chain(x: np.ndarray, a: np.ndarray, b: np.ndarray, n: int = CHAIN) -> np.ndarray:
    """The same adds, made directly from Python with ``out=``."""
    np.add(x, x, out=a)
    src, dst = a, b
    for _ in range(n - 1):
        np.add(src, x, out=dst)
        src, dst = dst, src
    return src


def median_time(fn, repeats: int, inner: int) -> float:
    """Median over ``repeats`` of the mean time of ``inner`` calls, in seconds."""
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(inner):
            fn()
        times.append((time.perf_counter() - t0) / inner)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="few repeats (CI smoke test)")
    args = parser.parse_args(argv)
    repeats, inner = (5, 20) if args.quick else (31, 200)

    x = np.ones(SHAPE, np.float32)
    a, b = np.empty_like(x), np.empty_like(x)
    vm = VirtualMachine(chain_program())
    vm_transfer = VirtualMachine(chain_program(), output_policy="transfer")
    expected = numpy_chain(x, a, b)
    np.testing.assert_array_equal(vm.run(x), expected)

    t_np = median_time(lambda: numpy_chain(x, a, b), repeats, inner)
    t_vm = median_time(lambda: vm.run(x), repeats, inner)
    t_vm_transfer = median_time(lambda: vm_transfer.run(x), repeats, inner)

    one = VirtualMachine(chain_program(1))
    t_one = median_time(lambda: one.run(x), repeats, inner * 10)
    t_add = median_time(lambda: np.add(x, x, out=a), repeats, inner * 10)

    figures = {
        "numpy_us": t_np * 1e6,
        "vm_us": t_vm * 1e6,
        "ratio": t_vm / t_np,
        "per_instruction_overhead_ns": (t_vm - t_np) / CHAIN * 1e9,
        "vm_transfer_us": t_vm_transfer * 1e6,
        "one_kernel_run_us": t_one * 1e6,
        "fixed_overhead_us": (t_one - t_add) * 1e6,
    }
    print(f"{CHAIN} x add{SHAPE} float32, median of {repeats} x {inner}")
    print(f"  numpy with out=, from Python : {figures['numpy_us']:8.1f} us")
    print(f"  VM (hand-assembled bytecode) : {figures['vm_us']:8.1f} us")
    print(f"  ratio VM / numpy             : {figures['ratio']:8.3f}")
    print(f"  overhead per instruction     : {figures['per_instruction_overhead_ns']:8.0f} ns")
    print(f"  VM, output_policy='transfer' : {figures['vm_transfer_us']:8.1f} us")
    print("1-kernel program")
    print(f"  run()                        : {figures['one_kernel_run_us']:8.2f} us")
    print(f"  fixed overhead beyond np.add : {figures['fixed_overhead_us']:8.2f} us")
    return figures


if __name__ == "__main__":
    main()
