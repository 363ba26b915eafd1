"""The op registry: registering, asking whether an op is built in, and unregistering."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import ir
from ir import IRError, OpDef, Operand, OpPattern, TensorType, Var
from ir.ops import _declare as rules

NAME = "test_registry.scale"


def _declaration(doc: str = "scales") -> OpDef:
    return OpDef(NAME, (Operand("x"),), (), OpPattern.ELEMWISE, rules.same_as(0), doc)


@pytest.fixture
def clean() -> Iterator[None]:
    """No test leaves its op behind, whatever it asserted."""
    yield
    if ir.has_op(NAME):
        ir.unregister_op(NAME)


def test_builtin_ops_are_known_to_the_registry() -> None:
    assert ir.is_builtin_op("add") and ir.is_builtin_op("memory.alloc_storage")
    assert not ir.is_builtin_op("no_such_op")
    assert {op.name for op in ir.all_ops() if ir.is_builtin_op(op.name)} == set(
        ir.ops.BUILTIN_OP_NAMES
    )


@pytest.mark.usefixtures("clean")
def test_a_registered_op_is_not_builtin_and_can_be_removed() -> None:
    declared = ir.register_op(_declaration())
    assert ir.get_op(NAME) is declared
    assert not ir.is_builtin_op(NAME)
    assert declared in ir.tensor_ops() and declared not in ir.tensor_ops(builtin_only=True)
    assert ir.unregister_op(NAME) is declared
    assert not ir.has_op(NAME)
    with pytest.raises(IRError, match=f"unknown op '{NAME}'"):
        ir.get_op(NAME)


@pytest.mark.usefixtures("clean")
def test_a_removed_name_can_be_registered_again() -> None:
    x = Var("x", TensorType((4,), "float32"))
    old = ir.register_op(_declaration("old"))
    built = ir.call(NAME, x)
    ir.unregister_op(NAME)
    new = ir.register_op(_declaration("new"))
    assert ir.get_op(NAME) is new and ir.get_op(NAME).doc == "new"
    assert built.op is old  # IR built before keeps the declaration it was built with
    parsed = ir.parse(f"def @main(%x: Tensor[(4,), float32]) {{ {NAME}(%x) }}")
    assert parsed["main"].body.op is new  # type: ignore[attr-defined]


def test_builtin_ops_cannot_be_unregistered() -> None:
    with pytest.raises(IRError) as info:
        ir.unregister_op("add")
    assert str(info.value) == (
        "op 'add' is built in: only ops added with register_op can be removed"
    )
    assert ir.has_op("add")


def test_unregistering_an_unknown_op_names_it() -> None:
    with pytest.raises(IRError) as info:
        ir.unregister_op("no_such_op")
    assert str(info.value) == (
        "cannot unregister op 'no_such_op': no op of that name is registered"
    )


@pytest.mark.usefixtures("clean")
def test_unregistering_twice_raises() -> None:
    ir.register_op(_declaration())
    ir.unregister_op(NAME)
    with pytest.raises(IRError, match=f"cannot unregister op '{NAME}'"):
        ir.unregister_op(NAME)
