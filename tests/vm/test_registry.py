"""The kernel registry: every op of the catalogue has a kernel; users can add their own."""

from __future__ import annotations

import numpy as np
import pytest

import vm
from vm import Assembler, Executable, FormatError, KernelRegistryError, VirtualMachine, tensor
from vm.kernels import registered_kernels
from vm.kernels.attr_schema import check_kernel_attrs, has_schema, register_attr_schema


def test_every_catalogue_op_has_a_kernel():
    import ir

    missing = sorted(
        op.name for op in ir.tensor_ops(builtin_only=True) if op.name not in registered_kernels()
    )
    assert not missing, f"ops without a kernel: {missing}"


def test_user_kernel_for_a_new_op_and_duplicate_registration():
    name = "test_registry.scale"
    vm.unregister_kernel(name, missing_ok=True)

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
        assert vm.unregister_kernel(name) is scale
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


def test_unregister_kernel_undoes_the_registration_and_its_schema():
    name = "test_registry.undo"

    @vm.register_kernel(name)
    def factory(attrs):
        return lambda x, out: np.copyto(out, x)

    register_attr_schema(name, {"factor": "float"})
    with pytest.raises(FormatError, match="'factor' = 'x' is not float"):
        check_kernel_attrs(name, {"factor": "x"}, "kernel 0")
    assert vm.unregister_kernel(name) is factory
    assert not vm.has_kernel(name) and not has_schema(name)
    check_kernel_attrs(name, {"anything": 1}, "kernel 0")  # no schema left to check against
    vm.register_kernel(name)(factory)  # the name is free again
    try:
        assert vm.has_kernel(name)
    finally:
        vm.unregister_kernel(name)


def test_unregister_kernel_of_an_op_without_one_says_so():
    name = "test_registry.present"
    vm.register_kernel(name)(lambda attrs: np.negative)
    try:
        with pytest.raises(
            KernelRegistryError,
            match=r"^op 'test_registry\.presnt' has no registered kernel: nothing to unregister "
            r"\(did you mean 'test_registry\.present'\?\)$",
        ):
            vm.unregister_kernel("test_registry.presnt")
    finally:
        vm.unregister_kernel(name)
    with pytest.raises(
        KernelRegistryError,
        match=r"^op 'zzz\.none' has no registered kernel: nothing to unregister$",
    ):
        vm.unregister_kernel("zzz.none")
    assert vm.unregister_kernel("zzz.none", missing_ok=True) is None


def test_a_built_in_kernel_cannot_be_unregistered():
    with pytest.raises(
        KernelRegistryError,
        match=r"^op 'add' has a built-in kernel, which cannot be unregistered \(executables "
        r"that use it would no longer load\)$",
    ):
        vm.unregister_kernel("add")
    assert vm.has_kernel("add")
