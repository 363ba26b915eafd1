"""A custom op whose kernel skips elements, end to end: compiled, it returns stale memory
unchecked; ``check_memory=True`` names the kernel and the output; ``check_op`` names the op."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

import dynshape
from dynshape.testing import OpCheckError, check_op
from vm import UnwrittenOutputError

PROGRAM = """
def @main(%x: Tensor[(n), float32]) {
  %y = skipping.last(%x);
  add(%y, 1f)
}
"""


@pytest.fixture
def skipping() -> Iterator[None]:
    def all_but_last(x, out):
        out[:-1] = x[:-1]  # the last element is left as the buffer was

    dynshape.register_op(
        "skipping.last", shape_func=lambda ctx, x: x, pattern="opaque", kernel=all_but_last
    )
    yield
    dynshape.unregister_op("skipping.last")


def test_check_memory_names_the_kernel_and_the_output(skipping):
    exe = dynshape.compile(PROGRAM)
    x = np.ones(4, np.float32)
    with pytest.raises(UnwrittenOutputError) as info:
        dynshape.VirtualMachine(exe, check_memory=True).run(x)
    message = str(info.value)
    assert message.startswith(
        "kernel skipping.last did not write 1 of 4 element(s) (the first at index (3,)) of its "
        "output 0 (register %"
    )
    assert ", float32 (4,)): the result would hold stale memory\n  at main@" in message
    assert info.value.kernel == "skipping.last" and info.value.output == 0


def test_check_op_names_the_op(skipping):
    with pytest.raises(OpCheckError) as info:
        check_op("skipping.last", inputs=[[np.array([1, 2, 3], np.int32)]])
    assert str(info.value) == (
        "check_op skipping.last: the kernel did not write 1 of 3 element(s) (the first at index "
        "(2,)) of output 0 (declared int32 (3,))\n  inputs: x int32 (3,) = [1, 2, 3]"
    )
