"""The demo: the seed program through the compiler, then run at several sizes against numpy."""

from __future__ import annotations

import time
from typing import TextIO

import numpy as np

import ir
from vm import VirtualMachine

from .pipeline import compile, stages

#: The seed example, as published: a primitive function computing ``(p0 + p0) - p1``.
SEED_PROGRAM = """\
v0.0.3
fn (%x: Tensor[(10,), float32], %y: Tensor[(10,), float32]) -> Tensor[(10,), float32] {
  %1 = fn (%p0: Tensor[(10,), float32], %p1: Tensor[(10,), float32], Primitive=1) -> Tensor[(10,), float32] {
    %0 = add(%p0, %p0) /* ty=Tensor[(10,), float32] */;
    subtract(%0, %p1) /* ty=Tensor[(10,), float32] */
  };
  let %x1: Tensor[(10,), float32] = %1(%x, %y) /* ty=Tensor[(10,), float32] */;
  %x1
}
"""  # noqa: E501  (the seed is quoted as published)

#: The same program with a symbolic length ``n``.
SYMBOLIC_PROGRAM = SEED_PROGRAM.replace("(10,)", "(n,)")

SIZES = (0, 1, 10, 1_000, 1_000_000)


def run_demo(out: TextIO) -> int:
    """Print the seed through the stages and check the symbolic version against numpy."""
    seed = ir.parse(SEED_PROGRAM, source_name="<seed>")
    out.write("== The seed program (static shapes), as parsed:\n")
    out.write(f"{seed}\n\n")
    out.write("== After manifest_alloc: one 40-byte storage, one tensor, one invoke:\n")
    out.write(f"{stages(seed)['manifest']}\n\n")
    out.write("== The same program with a symbolic length n, after manifest_alloc:\n")
    symbolic = stages(SYMBOLIC_PROGRAM)["manifest"]
    out.write(f"{symbolic}\n\n")
    exe = compile(SYMBOLIC_PROGRAM)
    out.write("== Its bytecode:\n")
    out.write(f"{exe.bytecode}\n\n")
    out.write("== Compiled once, run at several sizes, checked against numpy:\n")
    vm = VirtualMachine(exe)
    rng = np.random.default_rng(0)
    ok = True
    for n in SIZES:
        x = rng.standard_normal(n).astype(np.float32)
        y = rng.standard_normal(n).astype(np.float32)
        start = time.perf_counter()
        got = vm.run(x, y)
        elapsed = time.perf_counter() - start
        expected = (x + x) - y
        same = got.shape == expected.shape and bool(np.array_equal(got, expected))
        ok &= same
        out.write(
            f"  n = {n:>9,}: output shape {got.shape}, equal to numpy: {same}, "
            f"{elapsed * 1e6:,.0f} us\n"
        )
    out.write(f"\nall sizes match numpy: {ok}\n")
    return 0 if ok else 1
