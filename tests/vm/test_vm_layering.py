"""A deployed model needs numpy only: importing vm loads neither sympy, ir nor dynshape."""

from __future__ import annotations

import subprocess
import sys


def test_importing_vm_loads_no_sympy_ir_or_dynshape():
    code = (
        "import sys, vm\n"
        "vm.VirtualMachine  # touch the public API\n"
        "bad = [m for m in ('sympy', 'ir', 'dynshape') if m in sys.modules]\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "", f"importing vm loaded {out.stdout.strip()}"
