"""Helpers for text-in / text-out tests of type inference."""

from __future__ import annotations

import textwrap

import ir
from dynshape.passes.infer_types import InferTypes


def infer_text(source: str) -> tuple[str, InferTypes]:
    """Parse ``source``, infer its types, and return the printed typed module and the pass."""
    module = ir.parse(textwrap.dedent(source))
    infer = InferTypes()
    typed = infer.run(module)
    return str(typed), infer


def check_infer(source: str, expected: str) -> InferTypes:
    """Assert that inferring ``source`` prints exactly ``expected`` (both dedented, stripped)."""
    printed, infer = infer_text(source)
    want = textwrap.dedent(expected).strip()
    assert printed.strip() == want, f"--- got:\n{printed}\n--- expected:\n{want}"
    # The typed text is still valid input, and re-inferring it gives the same types.
    again, _ = infer_text(printed)
    assert again.strip() == want
    return infer
