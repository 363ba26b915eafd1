"""The typed memory dialect (dynshape/dialect/memory.py): views, constructors, and tables that
cover every op."""

from __future__ import annotations

import ir
from dynshape.dialect.memory import (
    OPS,
    AllocStorage,
    AllocTensor,
    Check,
    Invoke,
    Kill,
    ReshapeTensor,
    ShapeFunc,
    ShapeOf,
    memory_op,
)
from dynshape.lower.lower import _LOWER_MEMORY_OP
from dynshape.testing.memory_ops import MEMORY_OPS

n = ir.sym("n")


def test_the_dialect_classes_are_exactly_the_catalogues_memory_ops():
    declared = {op.name for op in ir.all_ops() if op.name.startswith("memory.")}
    assert {cls.NAME for cls in OPS} == declared


def test_every_op_has_a_lowering_and_a_reference_evaluation():
    for table in (_LOWER_MEMORY_OP, MEMORY_OPS):
        assert set(table) == set(OPS)


def test_constructors_build_calls_whose_views_read_back_the_fields():
    storage = ir.Var("s", ir.StorageType())
    x = ir.Var("x", ir.TensorType((n,), "float32"))
    alloc = AllocStorage.make(4 * n, 64, "float32")
    view = AllocStorage.of(alloc)
    assert view is not None and (view.size, view.alignment, view.dtype_hint) == (
        4 * n,
        64,
        "float32",
    )
    t = AllocTensor.of(AllocTensor.make(storage, 8, (n, 2), "int32"))
    assert t is not None and (t.storage, t.offset, t.shape, t.dtype) == (
        storage,
        8,
        (n, 2),
        "int32",
    )
    inv = Invoke.of(Invoke.make(x, [x], [x, x]))
    assert inv is not None and isinstance(inv.outputs, ir.Tuple) and len(inv.outputs.fields) == 2
    sf = ShapeFunc.of(ShapeFunc.make(x, [x], [1], [[n]]))
    assert sf is not None and sf.data_dependent == (1,) and sf.out_shapes == ((n,),)
    assert ReshapeTensor.of(ReshapeTensor.make(x, (n, 1))).shape == (n, 1)  # type: ignore[union-attr]
    assert ShapeOf.of(ShapeOf.make(x)).tensor is x  # type: ignore[union-attr]
    assert Kill.of(Kill.make(x)).target is x  # type: ignore[union-attr]
    c = Check.of(Check.make("<=", n, 8, "n = {a} exceeds {b}"))
    assert c is not None and (c.kind, c.lhs, c.rhs, c.message) == (
        "<=",
        n,
        8,
        "n = {a} exceeds {b}",
    )


def test_views_are_found_by_op_identity_and_nothing_else_is_a_view():
    x = ir.Var("x", ir.TensorType((n,), "float32"))
    kill = Kill.make(x)
    assert isinstance(memory_op(kill), Kill)
    assert AllocStorage.of(kill) is None  # the wrong class
    assert memory_op(ir.call("add", x, x)) is None  # not the dialect
    assert memory_op(x) is None  # not a call
    # The parsed text gives the same views as the constructors.
    module = ir.parse("def @main(%x: Tensor[(n,), float32]) { memory.kill(%x) }")
    body = module["main"].body
    assert isinstance(memory_op(body), Kill)
