"""The profiler: counts and times per instruction kind and kernel, shape time, memory."""

from __future__ import annotations

import numpy as np
import pytest
from vm_testlib import elementwise_program

from vm import VirtualMachine, VMError


def test_profile_counts_instructions_and_kernels():
    m = VirtualMachine(elementwise_program("add"), profile=True)
    x = np.ones((3, 4), np.float32)
    for _ in range(5):
        m.run(x, x)
    p = m.profiler
    assert p is not None and p.runs.count == 5
    assert p.instructions["invoke"].count == 10
    assert p.instructions["alloc_storage"].count == 10
    assert p.kernels["add"].count == 10 and p.kernels["add"].ns > 0
    assert p.shape_ns > 0
    report = m.profile_report()
    for word in (
        "instruction",
        "invoke",
        "kernel",
        "add",
        "shape computation",
        "memory",
        "pool hits",
        "peak live bytes",
        "mean us",
    ):
        assert word in report
    p.reset()
    assert p.runs.count == 0 and not any(c.count for c in p.instructions.values())
    assert "alloc_storage" not in m.profile_report()
    m.run(x, x)  # the steps decoded before the reset count into its rows
    assert p.runs.count == 1 and p.instructions["alloc_storage"].count == 2


def test_profile_report_needs_profile():
    with pytest.raises(VMError, match="profile=True"):
        VirtualMachine(elementwise_program("add")).profile_report()
