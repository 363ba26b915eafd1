"""Kernel attributes are checked against each op's schema when a file is loaded."""

from __future__ import annotations

import dataclasses

import pytest

import dynshape
from dynshape.custom_op import unregister_op
from ir.op import tensor_ops
from vm import Executable, FormatError
from vm.executable import OpKernel
from vm.kernels.attr_schema import BUILTIN_SCHEMAS, check_kernel_attrs, kind_check


def test_the_vm_schemas_are_the_catalogues():
    """The VM keeps a copy (it cannot import the IR): it must not drift."""
    catalogue = {
        op.name: {a.name: a.kind.name for a in op.attrs} for op in tensor_ops(builtin_only=True)
    }
    assert catalogue == BUILTIN_SCHEMAS


def test_every_catalogue_default_passes_its_own_check():
    for op in tensor_ops(builtin_only=True):
        for a in op.attrs:
            if not a.required:
                assert kind_check(a.kind.name)(a.default), (op.name, a.name, a.default)


@pytest.mark.parametrize(
    ("op", "attrs", "message"),
    [
        ("sum", {"axis": "garbage", "keepdims": False, "exclude": False}, "'axis' = 'garbage'"),
        ("sum", {"axis": None, "keepdims": 1, "exclude": False}, "'keepdims' = 1 is not bool"),
        ("sum", {"axis": None, "keepdims": False}, "'exclude' missing"),
        ("sum", {"axis": None, "keepdims": False, "exclude": False, "x": 1}, "unknown attribute"),
        ("tile", {"reps": (2, "3")}, "'reps' = (2, '3') is not list[int | dim]"),
        ("tile", {"reps": 3}, "is not list[int | dim]"),
        (
            "topk",
            {"k": 1, "axis": -1, "ret_type": "all", "is_ascend": False, "dtype": "int64"},
            "'ret_type' = 'all' is not 'both' | 'values' | 'indices'",
        ),
        ("cast", {"dtype": "float128"}, "'dtype' = 'float128' is not dtype"),
        ("nn.pad", {"pad_width": ((1, 2, 3),), "pad_value": 0.0}, "is not list[[int, int]]"),
        ("add", {"alpha": 1.0}, "unknown attribute(s) 'alpha' for add (it takes: none)"),
        (
            "strided_slice",
            {"begin": (1 << 63,), "end": (1,), "strides": None},
            "is not list[int]",
        ),
    ],
)
def test_bad_attributes_are_named(op, attrs, message):
    with pytest.raises(FormatError) as info:
        check_kernel_attrs(op, attrs, "kernel 0")
    assert message in str(info.value)


def test_a_loaded_file_with_a_bad_attribute_is_refused():
    src = "def @main(%x: Tensor[(n, 4), float32]) -> Tensor[(n,), float32] { sum(%x, axis=[1]) }"
    exe = dynshape.compile(src, fuse=False) if _takes_fuse() else dynshape.compile(src)
    kernels = list(exe.kernels)
    i = next(j for j, k in enumerate(kernels) if isinstance(k, OpKernel) and k.op == "sum")
    kernels[i] = dataclasses.replace(kernels[i], attrs={**kernels[i].attrs, "axis": "garbage"})
    bad = dataclasses.replace(exe, kernels=kernels)
    with pytest.raises(FormatError, match=r"kernel \d \(sum\): attribute 'axis' = 'garbage'"):
        Executable.from_bytes(bad.to_bytes())


def _takes_fuse() -> bool:
    import inspect

    return "fuse" in inspect.signature(dynshape.compile).parameters


def test_custom_ops_get_their_schema():
    import numpy as np

    name = "test_schema.scale"
    try:
        dynshape.register_op(
            name,
            inputs=["x"],
            attrs={"factor": 1.0},
            pattern="elementwise",
            kernel=lambda x, out, factor: np.multiply(x, factor, out=out),
        )
        check_kernel_attrs(name, {"factor": 2.0}, "kernel 0")
        with pytest.raises(FormatError, match="'factor' = 'x' is not float"):
            check_kernel_attrs(name, {"factor": "x"}, "kernel 0")
    finally:
        unregister_op(name)
    check_kernel_attrs(name, {"anything": 1}, "kernel 0")  # gone with the op: no schema
