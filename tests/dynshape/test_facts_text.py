"""Deferred facts print with the types (``/* ty=...; check ... */``) and are derived again, the
same, when the printed text is parsed and inferred."""

from __future__ import annotations

import textwrap

import dynshape
import ir
from dynshape.passes.infer_types import InferTypes

SOURCE = textwrap.dedent(
    """
    def @main(%x: Tensor[(n, 4), float32], %y: Tensor[(m, 4), float32]) -> Tensor[(n, 2, 2), float32] {
      let %s: Tensor[(n, 4), float32] = add(%x, %y);
      reshape(%s, newshape=[-1, 2, 2])
    }
    """
)
RESULT = textwrap.dedent(
    """
    def @main(%x: Tensor[(n, 4), float32]) -> Tensor[(m, 2), float32] {
      reshape(%x, newshape=[-1, 2])
    }
    """
)


def test_the_types_stage_prints_each_fact_where_it_is_due() -> None:
    # The broadcast on the add that needs it; the annotation's check on the let.
    (let_line,) = [
        line for line in str(dynshape.stages(SOURCE)["types"]).splitlines() if "let" in line
    ]
    assert let_line.endswith(
        "add(%x, %y) /* ty=Tensor[(max(m, n)*min(1, m, n), 4), float32]; check add: "
        "broadcast(n, m) */ /* check max(m, n)*min(1, m, n) == n */;"
    )
    # The result annotation's check, on the signature.
    head = str(InferTypes().run(ir.parse(RESULT))).splitlines()[0]
    assert head.endswith("-> Tensor[(m, 2), float32] /* check 2*n == m */ {")


def test_without_types_no_facts_print() -> None:
    typed = dynshape.stages(SOURCE)["types"]
    assert "check" not in ir.text.module_to_text(typed, show_types=False)


def test_printed_facts_are_comments_that_inference_derives_again() -> None:
    for source in (SOURCE, RESULT):
        typed = InferTypes().run(ir.parse(source))
        text = str(typed)
        assert "check " in text
        again = InferTypes().run(ir.parse(text))
        assert str(again) == text
        plain = ir.parse(ir.text.module_to_text(typed, show_types=False))
        assert ir.structurally_equal(ir.parse(text), plain)
