"""``assert_program``: passing programs pass; failures say binding, output and errors."""

from __future__ import annotations

import numpy as np
import pytest

from dynshape.testing import assert_program

PROGRAM = "def @main(%x: Tensor[(n, 3), float32]) { (sum(%x, axis=1), argmax(%x, axis=1)) }"


def test_passes_on_the_default_bindings() -> None:
    assert_program(PROGRAM, lambda x: (x.sum(axis=1), x.argmax(axis=1)), check_stages=True)


def test_failure_names_binding_output_and_error() -> None:
    def wrong(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return x.sum(axis=1) + (x.shape[0] > 500), x.argmax(axis=1)

    with pytest.raises(AssertionError) as info:
        assert_program(PROGRAM, wrong)
    text = str(info.value)
    assert text.startswith("binding n=1000: result[0]: got float32[1000], expected float32[1000]")
    assert "max abs error 1" in text and "inputs: float32[1000, 3]" in text


def test_shape_and_integer_mismatches() -> None:
    with pytest.raises(AssertionError, match=r"binding n=0: result\[0\].*shapes differ"):
        assert_program(PROGRAM, lambda x: (x.sum(axis=0), x.argmax(axis=1)))
    with pytest.raises(AssertionError, match="binding n=0: the reference raises ValueError"):
        assert_program(PROGRAM, lambda x: (x.sum(axis=1), x.argmax(axis=0)))
    with pytest.raises(AssertionError, match=r"binding n=1: result\[1\]: .* elements differ"):
        assert_program(PROGRAM, lambda x: (x.sum(axis=1), x.argmax(axis=1) + 1))


def test_custom_inputs_and_missing_symbols() -> None:
    program = "def @main(%x: Tensor[(n,), float32]) { log(%x) }"
    assert_program(
        program,
        np.log,
        bindings=[{"n": 5}],
        make_inputs=lambda rng, b: [rng.uniform(1, 2, b["n"]).astype(np.float32)],
    )
    with pytest.raises(AssertionError, match="the binding gives no n"):
        assert_program(program, np.log, bindings=[{"m": 1}])
