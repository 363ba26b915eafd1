"""The reference interpreter's evaluation of the memory dialect (``catalogue/memory.py``).

A storage is a zeroed byte buffer; a tensor is a typed numpy view of it at a byte offset (a view
past the end is an error, so a planner that under-sizes a storage is caught); ``invoke``
interprets the primitive's body and copies the result into the outputs; ``shape_func`` runs the
op's shape function (``shape_funcs.concrete_shapes``) and binds the new symbols of
``out_shapes``; ``kill`` marks a variable dead; ``check`` evaluates its fact; ``holds`` makes
it a ``bool``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import sympy

from ir import Call, Constant, Tuple, TupleType, Var
from ir.dims import COMPARE
from shape_funcs import ShapeError, concrete_shapes, get_shape_func

from ..dialect.memory import (
    AllocStorage,
    AllocTensor,
    Append,
    Check,
    Holds,
    Invoke,
    Kill,
    ReshapeTensor,
    ShapeFunc,
    ShapeOf,
)
from .interpret import (
    MEMORY_OPS,
    Closure,
    Frame,
    Interpreter,
    InterpreterError,
    Storage,
    describe,
    eval_dim,
)


def _dim(interp: Interpreter, frame: Frame, d: Any, node: Call, what: str) -> int:
    value = eval_dim(d, frame.binding)
    if value is None:
        raise InterpreterError(
            f"@{frame.function}: {describe(node)}: {what} {d} has a symbol not bound here"
        )
    return value


def alloc_storage(interp: Interpreter, op: AllocStorage, frame: Frame) -> Storage:
    size = _dim(interp, frame, op.size, op.call, "size")
    return Storage(np.zeros(size, np.uint8), op.alignment)


def alloc_tensor(interp: Interpreter, op: AllocTensor, frame: Frame) -> np.ndarray:
    node = op.call
    storage = interp.eval(op.storage, frame)
    if not isinstance(storage, Storage):
        raise InterpreterError(f"@{frame.function}: {describe(node)}: not a storage")
    offset = _dim(interp, frame, op.offset, node, "offset")
    shape = [_dim(interp, frame, d, node, "dim") for d in op.shape]
    dtype = np.dtype(op.dtype)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if offset + nbytes > storage.data.size:
        raise InterpreterError(
            f"@{frame.function}: {describe(node)}: {nbytes} bytes at offset {offset} do not fit "
            f"a storage of {storage.data.size} bytes"
        )
    view = storage.data[offset : offset + nbytes].view(dtype)
    return view.reshape(shape)


def invoke(interp: Interpreter, op: Invoke, frame: Frame) -> tuple[()]:
    node = op.call
    fn = interp.eval(op.fn, frame)
    inputs, outputs = interp.eval(op.inputs, frame), interp.eval(op.outputs, frame)
    if not isinstance(fn, Closure):
        raise InterpreterError(f"@{frame.function}: {describe(node)}: not a function")
    result = interp.call_closure(fn, list(inputs), "<primitive>")
    leaves = _leaves(result)
    # Destinations after the results are the kernel's scratch buffers (manifest_alloc's step
    # plan): the reference computes without them, but they must be tensors.
    if len(leaves) > len(outputs):
        raise InterpreterError(
            f"@{frame.function}: {describe(node)}: {len(leaves)} results, {len(outputs)} outputs"
        )
    for i, extra in enumerate(outputs[len(leaves) :], len(leaves)):
        if not isinstance(extra, np.ndarray):
            raise InterpreterError(f"@{frame.function}: {describe(node)}: scratch {i} is no tensor")
    for i, (value, out) in enumerate(zip(leaves, outputs[: len(leaves)], strict=True)):
        if not isinstance(out, np.ndarray) or out.shape != value.shape or out.dtype != value.dtype:
            raise InterpreterError(
                f"@{frame.function}: {describe(node)}: output {i} is {out.dtype}"
                f"{list(out.shape)} but the primitive made {value.dtype}{list(value.shape)}"
            )
        np.copyto(out, value)
    return ()


def _leaves(value: Any) -> list[np.ndarray]:
    if isinstance(value, tuple):
        return [leaf for v in value for leaf in _leaves(v)]
    return [value]


def shape_of(interp: Interpreter, op: ShapeOf, frame: Frame) -> np.ndarray:
    x = interp.eval(op.tensor, frame)
    return np.array(x.shape, np.int64)


def reshape_tensor(interp: Interpreter, op: ReshapeTensor, frame: Frame) -> np.ndarray:
    node = op.call
    x = interp.eval(op.tensor, frame)
    shape = [_dim(interp, frame, d, node, "dim") for d in op.shape]
    if int(np.prod(shape, dtype=np.int64)) != x.size:
        raise InterpreterError(f"@{frame.function}: {describe(node)}: {x.shape} to {shape}")
    return np.asarray(x).reshape(shape)


def append(interp: Interpreter, op: Append, frame: Frame) -> np.ndarray:
    """A fresh concatenation (the VM's growing in place is an optimisation of it)."""
    node = op.call
    x, y = interp.eval(op.tensor, frame), interp.eval(op.appended, frame)
    out = np.concatenate((x, y), axis=op.axis)
    shape = [_dim(interp, frame, d, node, "dim") for d in op.shape]
    if list(out.shape) != shape:
        raise InterpreterError(
            f"@{frame.function}: {describe(node)}: made {out.shape}, not {shape}"
        )
    return out


def kill(interp: Interpreter, op: Kill, frame: Frame) -> tuple[()]:
    target = op.target
    interp.eval(target, frame)  # killing a dead value is reading it
    if isinstance(target, Var):
        frame.dead.add(target)
    return ()


def check(interp: Interpreter, op: Check, frame: Frame) -> tuple[()]:
    a = _dim(interp, frame, op.lhs, op.call, "lhs")
    b = _dim(interp, frame, op.rhs, op.call, "rhs")
    kind = op.kind
    if kind == "broadcast":
        holds = a == b or a == 1 or b == 1
    elif kind == "divides":
        holds = b == 0 if a == 0 else b % a == 0
    else:
        holds = COMPARE[kind](a, b)
    if not holds:
        message = op.message.replace("{a}", str(a)).replace("{b}", str(b))
        raise InterpreterError(f"@{frame.function}: run-time check failed: {message}")
    return ()


def holds(interp: Interpreter, op: Holds, frame: Frame) -> np.ndarray:
    a = _dim(interp, frame, op.lhs, op.call, "lhs")
    b = _dim(interp, frame, op.rhs, op.call, "rhs")
    return np.array(COMPARE[op.kind](a, b))


def shape_func(interp: Interpreter, op: ShapeFunc, frame: Frame) -> tuple[()]:
    node = op.call
    closure = interp.eval(op.fn, frame)
    given = interp.eval(op.inputs, frame)
    if not isinstance(closure, Closure):
        raise InterpreterError(f"@{frame.function}: {describe(node)}: not a function")
    body = closure.fn.body
    if not isinstance(body, Call) or body.op is None:
        raise InterpreterError(f"@{frame.function}: {describe(node)}: not a single-op primitive")
    flags = list(op.data_dependent)
    by_param = {
        p: (v if i < len(flags) and flags[i] else _as_shape(v))
        for i, (p, v) in enumerate(zip(closure.fn.params, given, strict=True))
    }
    reads_value = get_shape_func(body.op.name).data_dependent
    inputs: list[Any] = []
    for i, arg in enumerate(body.args):
        if isinstance(arg, Var) and arg in by_param:
            inputs.append(by_param[arg])
        elif isinstance(arg, Constant):
            inputs.append(arg.value if reads_value[i] else tuple(arg.value.shape))
        elif isinstance(arg, Tuple):
            inputs.append([by_param[f] if f in by_param else _as_shape(f) for f in arg.fields])
        else:
            raise InterpreterError(f"@{frame.function}: {describe(node)}: input {arg}")
    try:
        shapes = concrete_shapes(body.op.name, inputs, dict(body.attrs))
    except ShapeError as e:
        raise InterpreterError(f"@{frame.function}: {describe(node)}: {e}") from e
    single = not isinstance(body.ty, TupleType)
    results = [shapes] if single else list(shapes)
    for j, (actual, expected) in enumerate(zip(results, op.out_shapes, strict=True)):
        for axis, d in enumerate(expected):
            if isinstance(d, sympy.Symbol) and d not in frame.binding:
                frame.binding[d] = int(actual[axis])
                continue
            want = _dim(interp, frame, d, node, "out_shapes dim")
            if want != int(actual[axis]):
                raise InterpreterError(
                    f"@{frame.function}: {describe(node)}: output {j} has shape[{axis}] = "
                    f"{actual[axis]}, expected {d} = {want}"
                )
    return ()


def _as_shape(value: Any) -> tuple[int, ...]:
    return tuple(int(v) for v in np.asarray(value).tolist())


MEMORY_OPS.update(
    {
        AllocStorage: alloc_storage,
        AllocTensor: alloc_tensor,
        Invoke: invoke,
        ShapeOf: shape_of,
        ShapeFunc: shape_func,
        ReshapeTensor: reshape_tensor,
        Append: append,
        Kill: kill,
        Check: check,
        Holds: holds,
    }
)
