"""The ONNX backend node tests (``onnx.backend.test``) whose ops the importer converts: each
passes through the importer and the VM, or is listed in ``KNOWN`` with its reason (and then
must still fail: a fixed case leaves the list)."""

from __future__ import annotations

import pytest

pytest.importorskip("onnx")

from dynshape.onnx import CONVERTERS, conformance

#: In-scope cases that give a wrong answer or an error, and why (none today; an unsupported
#: variant, such as a 3-d pool, is reported as unsupported, not listed here).
KNOWN: dict[str, str] = {}

CASES = [c for c in conformance.cases() if conformance.op_types(c) <= set(CONVERTERS)]


def test_the_generated_suite_is_there() -> None:
    assert len(conformance.cases()) >= 1800
    assert len(CASES) >= 200


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_backend_node_case(case: object) -> None:
    outcome = conformance.run_case(case)
    if outcome.name in KNOWN:
        assert outcome.status == "failed", f"{outcome.name} passes now: remove it from KNOWN"
        return
    assert outcome.status in ("passed", "unsupported"), outcome.detail
    # Every op is converted, so "unsupported" can only be an element type, opset or non-tensor.
    assert "unsupported op" not in outcome.detail
