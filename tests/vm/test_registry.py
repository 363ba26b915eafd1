"""The kernel registry: every op of the catalogue has a kernel; users can add their own."""

from __future__ import annotations

import numpy as np
import pytest

import vm
from vm import Assembler, Executable, FormatError, KernelRegistryError, VirtualMachine, tensor
from vm.kernels import registered_kernels, unregister_kernel


def test_every_catalogue_op_has_a_kernel():
    try:
        import ir
    except ImportError as e:  # the IR package is being written by others at the same time
        pytest.skip(f"ir does not import yet: {e}")
    missing = sorted(
        op.name for op in ir.tensor_ops(builtin_only=True) if op.name not in registered_kernels()
    )
    assert not missing, f"ops without a kernel: {missing}"


def test_user_kernel_for_a_new_op_and_duplicate_registration():
    name = "test_registry.scale"
    unregister_kernel(name)

    @vm.register_kernel(name)
    def scale(attrs):
        factor = attrs["factor"]
        return lambda x, out: np.multiply(x, factor, out=out)

    try:
        with pytest.raises(KernelRegistryError, match="already has a kernel"):
            vm.register_kernel(name)(scale)
        asm = Assembler()
        k = asm.kernel(name, {"factor": 3.0})
        f = asm.function("main", [("x", tensor("float32", (2,)))])
        (x,) = f.params
        out = f.empty((2,), "float32")
        f.invoke(k, [x], [out])
        f.ret(out)
        data = asm.build().to_bytes()
        got = VirtualMachine(Executable.from_bytes(data)).run(np.array([1, 2], np.float32))
        assert got.tolist() == [3, 6]
    finally:
        unregister_kernel(name)
    # In a process without the kernel, the file names the missing op.
    with pytest.raises(FormatError, match=r"op 'test_registry\.scale' has no registered kernel"):
        Executable.from_bytes(data)


def test_bad_attributes_are_refused_before_a_vm_binds_them():
    asm = Assembler()
    asm.kernel("clip", {"a_min": 0.0}, num_inputs=1)  # a_max missing
    f = asm.function("main", [])
    f.ret(f.load_int(0))
    with pytest.raises(
        vm.FormatError, match="kernel 0 \\(clip\\): attribute\\(s\\) 'a_max' missing"
    ):
        asm.build()


def test_a_factory_that_refuses_its_attributes_fails_when_the_vm_is_built():
    name = "test_registry.picky"
    if not vm.has_kernel(name):

        @vm.register_kernel(name)
        def _picky(attrs):
            raise AttributeError("no such mode")  # whatever a factory raises

    asm = Assembler()
    asm.kernel(name, {"mode": "x"}, num_inputs=1)
    f = asm.function("main", [])
    f.ret(f.load_int(0))
    with pytest.raises(vm.VMError, match=r"kernel 0 \(test_registry.picky\): cannot bind its attr"):
        VirtualMachine(asm.build())
