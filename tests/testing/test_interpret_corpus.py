"""The reference interpreter on every end-to-end program: at every binding, the parsed program
interpreted matches the numpy reference, and every stage's IR interpreted and the VM match it."""

from __future__ import annotations

from typing import Any

import pytest
from e2e_corpus import load_harness

from dynshape.testing import check_stages

harness = load_harness()
RUNS = harness.case_binding_params()


@pytest.mark.parametrize(
    ("case", "binding"), RUNS, ids=[f"{c.name}[{harness.binding_id(b)}]" for c, b in RUNS]
)
def test_every_stage_matches_reference(case: Any, binding: dict[str, int]) -> None:
    args = harness.make_inputs(case, binding)
    before = harness.copy_args(args)
    results = check_stages(case.source, *args, rtol=case.rtol, atol=case.atol)
    assert set(results.outputs) >= {"parsed", "types", "fused", "anf", "manifest", "vm"}
    expected = harness.run_reference(case, args)
    ty = harness.result_type(case)
    harness.assert_matches(results.outputs["parsed"], expected, ty, case.rtol, case.atol)
    for i, (a, b) in enumerate(zip(args, before, strict=True)):
        harness.assert_same(a, b, where=f"argument {i} after interpreting")
