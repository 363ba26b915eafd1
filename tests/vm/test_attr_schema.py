"""Kernel attributes are checked against each op's declaration when a file is loaded.

The VM reads the schema from the declaration the IR builds its op from
(``shape_funcs/declarations``): there is no copy to compare, so these tests show that what a
declaration says is what the loader enforces, for built-in and custom ops alike.
"""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest

import dynshape
from dynshape.custom_op import unregister_op
from shape_funcs.declarations import BUILTIN_OPS, OpDecl, attr, declare
from vm import Executable, FormatError
from vm.executable import OpKernel
from vm.kernels.attr_schema import (
    check_kernel_attrs,
    has_schema,
    kind_check,
    register_declaration,
    unregister_attr_schema,
)

#: A value of the wrong kind for each kind text that built-in attributes use.
_WRONG = {"bool": 1, "str": 3, "dtype": "float128"}
_TENSOR_OPS = sorted(name for name, op in BUILTIN_OPS.items() if op.computes_tensors)


def _defaults(op: OpDecl) -> dict[str, object]:
    """A valid attribute dict: the defaults, and a value of the kind for required ones."""
    fill = {"int": 1, "list[int]": (1,), "list[int | dim]": (1,), "float": 1.0, "dtype": "int32"}
    given = {}
    for a in op.attrs:
        kind = a.kind.split(" or ")[0]
        given[a.name] = a.default if not a.required else fill.get(kind, (((0, 0),)))
    return given


@pytest.mark.parametrize("name", _TENSOR_OPS)
def test_every_builtin_kernel_is_checked_by_its_declaration(name: str) -> None:
    """Each op with a kernel has a schema; its declared defaults pass; a value of another kind
    for any of its attributes is refused in the declaration's words."""
    op = BUILTIN_OPS[name]
    assert has_schema(name)
    good = _defaults(op)
    check_kernel_attrs(name, good, "kernel 0")
    for a in op.attrs:
        bad = {**good, a.name: _WRONG.get(a.kind, "garbage")}
        with pytest.raises(
            FormatError, match=f"attribute '{a.name}' = .* is not {re.escape(a.kind)}$"
        ):
            check_kernel_attrs(name, bad, "kernel 0")
    with pytest.raises(FormatError, match=f"unknown attribute.*for {name}"):
        check_kernel_attrs(name, {**good, "not_declared": 1}, "kernel 0")


def test_the_memory_dialect_has_no_kernel_schema() -> None:
    assert not has_schema("memory.alloc_storage")


def test_a_kind_changed_in_a_declaration_is_what_the_loader_enforces() -> None:
    """The same op declared twice with another kind for one attribute: the loader follows."""
    name = "test_schema.redeclared"
    try:
        register_declaration(declare(name, ["x"], "elementwise", "first", [attr("k", "int", 1)]))
        check_kernel_attrs(name, {"k": 2}, "kernel 0")
        with pytest.raises(FormatError, match=r"'k' = 2\.5 is not int"):
            check_kernel_attrs(name, {"k": 2.5}, "kernel 0")
        register_declaration(
            declare(name, ["x"], "elementwise", "first", [attr("k", "float", 1.0)])
        )
        check_kernel_attrs(name, {"k": 2.5}, "kernel 0")
    finally:
        unregister_attr_schema(name)
    assert not has_schema(name)


def test_every_declared_default_passes_its_own_check() -> None:
    for op in BUILTIN_OPS.values():
        for a in op.attrs:
            if not a.required:
                assert kind_check(a.kind)(a.default), (op.name, a.name, a.default)


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
            "is not list[int | dim]",
        ),
    ],
)
def test_bad_attributes_are_named(op, attrs, message):
    with pytest.raises(FormatError) as info:
        check_kernel_attrs(op, attrs, "kernel 0")
    assert message in str(info.value)


def test_a_loaded_file_with_a_bad_attribute_is_refused():
    src = "def @main(%x: Tensor[(n, 4), float32]) -> Tensor[(n,), float32] { sum(%x, axis=[1]) }"
    exe = dynshape.compile(src)
    with pytest.raises(FormatError, match=r"kernel \d \(sum\): attribute 'axis' = 'garbage'"):
        Executable.from_bytes(_with_attr(exe, "sum", "axis", "garbage").to_bytes())


def _with_attr(exe: Executable, op: str, key: str, value: object) -> Executable:
    """``exe`` with attribute ``key`` of its first ``op`` kernel set to ``value``."""
    kernels = list(exe.kernels)
    i = next(j for j, k in enumerate(kernels) if isinstance(k, OpKernel) and k.op == op)
    kernels[i] = dataclasses.replace(kernels[i], attrs={**kernels[i].attrs, key: value})
    return dataclasses.replace(exe, kernels=kernels)


def test_a_custom_ops_declaration_is_checked_by_the_loader():
    """``register_op`` builds one declaration; a saved file whose kernel entry breaks it is
    refused at load, in the words of the declaration's kind."""
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
        src = f"def @main(%x: Tensor[(n,), float32]) {{ {name}(%x, factor=2.0) }}"
        exe = dynshape.compile(src)
        Executable.from_bytes(exe.to_bytes())  # as compiled, it loads
        bad = _with_attr(exe, name, "factor", "x")
        with pytest.raises(FormatError, match=r"\(test_schema.scale\): attribute 'factor' = 'x'"):
            Executable.from_bytes(bad.to_bytes())
    finally:
        unregister_op(name)
    check_kernel_attrs(name, {"anything": 1}, "kernel 0")  # gone with the op: no schema
