"""The workspace of an op call: the scratch its kernel carves, as a destination of its step.

An op with a workspace rule (``shape_funcs/workspace.py``: ``nn.conv2d``'s im2col buffers, a
recurrent layer's input projections) writes one more tensor than its result's leaves: a 1-d
``uint8`` buffer of the rule's bytes, in the call's symbols. The step plan gives it a scratch
slot after the result's destinations, dead as soon as the step has run; ``manifest_alloc``
allocates it in the IR with the plan's other scratch, so memory planning reuses it and the
memory report shows it.
"""

from __future__ import annotations

import ir
from ir import Call, TensorType
from shape_funcs.workspace import WORKSPACE_DTYPE, has_workspace, workspace_bytes

from ..errors import CompileError


def workspace_type(call: Call) -> TensorType | None:
    """The type of ``call``'s workspace, or None when it has none (its op takes none, or its
    rule gives 0 bytes for this call)."""
    op = call.op
    if op is None or not has_workspace(op.name):
        return None
    # The rule reads the (first) result's shape: a recurrent layer's Y, of (Y, Y_h, Y_c).
    ty = call.ty
    leaves = ir.tensor_leaves(ty) if isinstance(ty, (TensorType, ir.TupleType)) else []
    result, inputs = leaves[0] if leaves else None, [a.ty for a in call.args]
    if not isinstance(result, TensorType) or not all(isinstance(t, TensorType) for t in inputs):
        raise CompileError(
            f"{op.name}: a workspace needs tensor operands and a tensor result (run infer_types)",
            call.span,
        )
    shapes = [t.shape for t in inputs if isinstance(t, TensorType)]
    first = inputs[0]
    assert isinstance(first, TensorType)
    nbytes = workspace_bytes(op.name, result.shape, shapes, first.dtype, dict(call.attrs))
    nbytes = ir.simplify(nbytes)
    return None if nbytes == 0 else TensorType((nbytes,), WORKSPACE_DTYPE)


def step_leaves(call: Call) -> list[TensorType]:
    """The tensors step ``call`` writes, one destination each: its result's leaves, then its
    workspace if its op takes one."""
    if call.ty is None:
        raise CompileError("the step plan needs typed primitive functions (run infer_types)")
    leaves = ir.tensor_leaves(call.ty)
    workspace = workspace_type(call)
    return leaves if workspace is None else [*leaves, workspace]
