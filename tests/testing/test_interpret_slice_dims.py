"""The reference interpreter and every pipeline stage on slices by dims (issue 30, item 1):
the interpreter resolves ``begin=[k]`` under the frame's binding, the IR after each stage
(fused, allocated, planned) gives the parsed program's results, and a dim index that is
negative at run time is refused by the interpreter as by the VM's check."""

from __future__ import annotations

import numpy as np
import pytest

from dynshape.testing.differential import check_stages
from dynshape.testing.interpret import InterpreterError, interpret

SOURCE = """
def @main(%x: Tensor[(n, m), float32], %c: Tensor[(8, 4), float32]) {
  %a = strided_slice(%x, begin=[(n // 2), 1], end=[n, m], strides=[1, m]);
  %b = add(strided_slice(%c, begin=[m], end=[max(m, 6)]), 1f);
  %r = strided_slice(%x, begin=[m], end=[-4611686018427387904], strides=[-1]);
  (%a, %b, %r)
}
"""


@pytest.mark.parametrize("shape", [(5, 3), (0, 1), (1, 9), (6, 2)])
def test_every_stage_agrees_with_numpy(shape: tuple[int, int]) -> None:
    x = np.arange(shape[0] * shape[1], dtype=np.float32).reshape(shape)
    c = np.arange(32, dtype=np.float32).reshape(8, 4)
    n, m = shape
    check_stages(SOURCE, x, c)
    a, b, r = interpret(SOURCE, x, c)
    np.testing.assert_array_equal(a, x[n // 2 : n, 1:m:m])
    np.testing.assert_array_equal(b, c[m : max(m, 6)] + 1)
    np.testing.assert_array_equal(r, x[m::-1])


def test_a_negative_dim_index_is_an_interpreter_error() -> None:
    source = "def @main(%x: Tensor[(n,), float32]) { strided_slice(%x, begin=[n - 3], end=[n]) }"
    np.testing.assert_array_equal(interpret(source, np.arange(4.0, dtype=np.float32)), [1, 2, 3])
    with pytest.raises(InterpreterError, match=r"attribute begin uses n - 3 = -1, but a dim index"):
        interpret(source, np.arange(2.0, dtype=np.float32))
