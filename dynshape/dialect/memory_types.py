"""Type rules of the memory dialect (``memory.py``), used by type inference.

The dialect's sizes, offsets and shapes are dims in attributes, so its types follow from the
attributes and the operands' types directly; no shape function is involved. One rule per op
class, given the operands' types and the op's typed view.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ir import FuncType, StorageType, TensorType, TupleType, Type, tensor_leaves

from ..errors import CompileError
from .memory import (
    AllocStorage,
    AllocTensor,
    Check,
    Invoke,
    Kill,
    MemoryOp,
    ReshapeTensor,
    ShapeFunc,
    ShapeOf,
)

#: The type of a memory op used only for its effect (invoke, kill, check, shape_func).
UNIT = TupleType(())

Rule = Callable[[Sequence[Type], Any], Type]


def _tensor(ty: Type, what: str) -> TensorType:
    if not isinstance(ty, TensorType):
        raise CompileError(f"{what} must be a tensor, got {ty}")
    return ty


def _alloc_storage(args: Sequence[Type], op: AllocStorage) -> Type:
    return StorageType()


def _alloc_tensor(args: Sequence[Type], op: AllocTensor) -> Type:
    if not isinstance(args[0], StorageType):
        raise CompileError(f"memory.alloc_tensor needs a storage, got {args[0]}")
    return TensorType(op.shape, op.dtype)


def _invoke(args: Sequence[Type], op: Invoke) -> Type:
    fn, inputs, outputs = args
    if not isinstance(fn, FuncType):
        raise CompileError(f"memory.invoke needs a function, got {fn}")
    if not isinstance(inputs, TupleType) or not isinstance(outputs, TupleType):
        raise CompileError("memory.invoke takes its inputs and its outputs as two tuples")
    if len(inputs.fields) != len(fn.params):
        raise CompileError(
            f"memory.invoke passes {len(inputs.fields)} inputs to a function of "
            f"{len(fn.params)} parameters"
        )
    # Outputs beyond the function's results are its scratch buffers (manifest_alloc).
    results = len(tensor_leaves(fn.ret))
    if len(outputs.fields) < results:
        raise CompileError(
            f"memory.invoke passes {len(outputs.fields)} outputs to a function of {results} results"
        )
    for i, out in enumerate(outputs.fields):
        _tensor(out, f"memory.invoke's output {i}")
    return UNIT


def _shape_of(args: Sequence[Type], op: ShapeOf) -> Type:
    return TensorType((_tensor(args[0], "memory.shape_of's operand").rank,), "int64")


def _shape_func(args: Sequence[Type], op: ShapeFunc) -> Type:
    if not isinstance(args[0], FuncType):
        raise CompileError(f"memory.shape_func needs a function, got {args[0]}")
    return UNIT


def _reshape_tensor(args: Sequence[Type], op: ReshapeTensor) -> Type:
    x = _tensor(args[0], "memory.reshape_tensor's operand")
    return TensorType(op.shape, x.dtype)


def _effect(args: Sequence[Type], op: MemoryOp) -> Type:
    return UNIT


#: The rule of each op class (a test checks that every class of the dialect has one).
RULES: dict[type[MemoryOp], Rule] = {
    AllocStorage: _alloc_storage,
    AllocTensor: _alloc_tensor,
    Invoke: _invoke,
    ShapeOf: _shape_of,
    ShapeFunc: _shape_func,
    ReshapeTensor: _reshape_tensor,
    Kill: _effect,
    Check: _effect,
}
