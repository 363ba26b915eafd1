"""The demo: the seed program of the project, shown at each stage that exists."""

from __future__ import annotations

from typing import TextIO

import ir

#: The seed example: a primitive function computing ``(p0 + p0) - p1`` on float32 vectors.
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


def run_demo(out: TextIO) -> int:
    """Print the seed program as parsed and as printed back; return an exit status."""
    module = ir.parse(SEED_PROGRAM, source_name="<seed>")
    printed = str(module)
    out.write("== The seed program, parsed and printed by dynshape:\n")
    out.write(printed + "\n")
    again = ir.parse(printed, source_name="<printed seed>")
    same = ir.structurally_equal(module, again)
    out.write(f"== Printed text parses back to a structurally equal module: {same}\n")
    return 0 if same else 1
