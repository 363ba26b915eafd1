"""The type of one call of an op: its dtype rule, then its shape function in symbolic mode.

Type inference (``passes/infer_types.py``) types every call with it, and the model builder
(``builder/trace.py``) each call it makes, so that a model that builds is a model that
type-checks.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import ir
from ir import Constant, Expr, TensorType, TupleType, Type
from shape_funcs import UnknownValue, get_shape_func

from ..errors import CompileError
from .symbolic_context import SymbolicContext


def op_result_type(
    ctx: SymbolicContext,
    op: ir.OpDef,
    attrs: ir.Attrs,
    args: Sequence[Expr],
    arg_types: Sequence[Type],
) -> Type:
    """The type of a call of ``op``: its dtype rule, then its shape function in symbolic mode.

    A data-dependent input is passed as its value when it is a ``Constant`` and as an
    ``UnknownValue`` otherwise. The model builder types each call it makes with this too, so
    that a model that builds is a model that type-checks.
    """
    dtypes: list[Any] = []
    for operand, ty in zip(op.operands, arg_types, strict=True):
        if isinstance(ty, TensorType):
            if operand.is_tuple:
                raise CompileError(f"{op.name}'s {operand.name} must be a tuple, got {ty}")
            dtypes.append(ty.dtype)
        elif isinstance(ty, TupleType) and operand.is_tuple:
            dtypes.append(tuple(_tensor(f, op, operand.name).dtype for f in ty.fields))
        else:
            raise CompileError(f"{op.name}'s {operand.name} must be a tensor, got {ty}")
    try:
        out_dtypes = op.dtype_rule(dtypes, attrs)
    except ir.IRError as e:
        raise CompileError(f"{op.name}: {e}") from None
    sf = get_shape_func(op.name)
    inputs: list[Any] = []
    for i, (operand, arg, ty) in enumerate(zip(op.operands, args, arg_types, strict=True)):
        if operand.is_tuple:
            assert isinstance(ty, TupleType)
            inputs.append([_tensor(f, op, operand.name).shape for f in ty.fields])
        elif i < len(sf.data_dependent) and sf.data_dependent[i]:
            assert isinstance(ty, TensorType)
            inputs.append(
                arg.value if isinstance(arg, Constant) else UnknownValue(ty.shape, ty.dtype)
            )
        else:
            assert isinstance(ty, TensorType)
            inputs.append(ty.shape)
    shapes = ctx.run(op.name, sf.fn, inputs, dict(attrs))
    return _result_type(op, shapes, out_dtypes)


def _tensor(ty: Type, op: ir.OpDef, what: str) -> TensorType:
    if not isinstance(ty, TensorType):
        raise CompileError(f"{op.name}'s {what} must hold tensors, got {ty}")
    return ty


def _result_type(op: ir.OpDef, shapes: Any, dtypes: str | tuple[str, ...]) -> Type:
    if isinstance(shapes, list):
        if not isinstance(dtypes, tuple) or len(dtypes) != len(shapes):
            raise CompileError(f"{op.name}: shape function and dtype rule disagree on outputs")
        return TupleType(tuple(TensorType(s, d) for s, d in zip(shapes, dtypes, strict=True)))
    if isinstance(dtypes, tuple):
        raise CompileError(f"{op.name}: shape function and dtype rule disagree on outputs")
    return TensorType(tuple(shapes), dtypes)
