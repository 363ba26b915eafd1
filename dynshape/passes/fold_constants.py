"""Calls of constants computed at compile time: the ``fold_constants`` pass.

Assumes: a typed module (``InferTypes`` output), in graph form.
Guarantees: a typed module in which every call of an op of ``FOLDABLE`` whose operands are all
constants (or tuples of constants), whose type is a tensor of static shape with no run-time
check, and whose value is at most ``FOLD_MAX_BYTES`` or twice its operands' bytes, is that
value, a constant, computed by the op's own VM kernel (the same numpy code a run would use,
so the same bits). A chain of such calls folds whole. A call whose kernel fails on its
constants is kept: the run fails there as it did.

Why: importers lay weights out with ops (ONNX's 1-d convolutions run as 2-d ones, so every
Conv1d weight is ``expand_dims(W, axis=2)``: a wav2vec2, a Whisper or a temporal conv net has
one per layer), and such a call ran on every call of the model, copying the weight; worse, the
convolution then saw a computed weight instead of a constant, so nothing it derives from the
weight (its layouts, ``vm/kernels/constant_layouts.py``) was kept between calls. Only ops that
are cheap, pure and shape-preserving in spirit are folded (layouts, casts, arithmetic):
anything heavier stays a kernel call, where its cost is measured.
"""

from __future__ import annotations

from typing import Any

import numpy as np

import ir
from ir import Call, Constant, Expr, Function, Module, TensorType, Tuple
from vm.kernels.registry import get_kernel_factory, has_kernel

from .base import ModulePass
from .patterns import TypedRewriter

#: The ops folded: layouts, casts and elementwise arithmetic (pure, with a kernel ``(operands,
#: out)``, and no larger than their operands but for a broadcast).
FOLDABLE = frozenset(
    [
        *("reshape", "expand_dims", "squeeze", "transpose", "broadcast_to", "strided_slice"),
        *("take", "concatenate", "stack", "cast"),
        *("add", "subtract", "multiply", "negative", "maximum", "minimum"),
    ]
)
#: A folded value may take this many bytes whatever its operands take (a small broadcast).
FOLD_MAX_BYTES = 1 << 16


class FoldConstants(ModulePass):
    """Compute calls of ``FOLDABLE`` ops on constants at compile time (see the module
    docstring)."""

    name = "fold_constants"

    def __init__(self) -> None:
        self.folded = 0
        """How many calls the last ``run`` folded."""

    def run(self, module: Module) -> Module:
        self.folded = 0
        out: dict[str, Function] = {}
        for name, fn in module.items():
            if fn.is_primitive:
                out[name] = fn
                continue
            folder = _Folder()
            new = folder.visit(fn)
            assert isinstance(new, Function)
            out[name] = new
            self.folded += folder.folded
        return Module(out) if self.folded else module


class _Folder(TypedRewriter):
    """Rebuilds each call over its rebuilt operands, then folds it if it can: operands first,
    so that a chain folds whole."""

    def __init__(self) -> None:
        super().__init__()
        self.folded = 0

    def visit_call(self, call: Call) -> Expr:
        rebuilt = self._typed(call, ir.ExprMutator.visit_call(self, call))
        value = _value(rebuilt) if isinstance(rebuilt, Call) else None
        if value is None:
            return rebuilt
        self.folded += 1
        # typed as the call was (its static type is the value's): nothing to infer again
        return Constant(value, span=call.span, ty=rebuilt.ty)


def _operand(arg: Expr) -> Any | None:
    """A constant operand as the kernel takes it (an array, or a tuple of them), else None."""
    if isinstance(arg, Constant):
        return arg.value
    if isinstance(arg, Tuple):
        fields = [f.value for f in arg.fields if isinstance(f, Constant)]
        return tuple(fields) if len(fields) == len(arg.fields) else None
    return None


def _value(call: Call) -> np.ndarray | None:
    """The value of ``call`` when it folds (see the module docstring), else None."""
    ty = call.ty
    if (
        call.op is None
        or call.op.name not in FOLDABLE
        or call.facts
        or not call.args
        or not isinstance(ty, TensorType)
        or not all(isinstance(d, int) for d in ty.shape)
        or not has_kernel(call.op.name)
    ):
        return None
    operands = [_operand(a) for a in call.args]
    if any(o is None for o in operands):
        return None
    arrays = [a for o in operands for a in (o if isinstance(o, tuple) else (o,))]
    try:
        dtype = np.dtype(ty.dtype)
    except TypeError:  # a dtype numpy does not name (ml_dtypes' int4): left to the run
        return None
    out = np.empty(tuple(int(d) for d in ty.shape), dtype)
    if out.nbytes > max(FOLD_MAX_BYTES, 2 * sum(a.nbytes for a in arrays)):
        return None
    try:
        kernel = get_kernel_factory(call.op.name)(dict(call.attrs))
        # an overflow or an invalid value is the run's to report, under the caller's
        # np.errstate: such a call is kept
        with np.errstate(all="raise"):
            kernel(*operands, out)
    except Exception:  # whatever the kernel raises, the run raises: the call is kept
        return None
    out.flags.writeable = False
    return out


def fold_constants(module: Module) -> Module:
    """``FoldConstants().run(module)``."""
    return FoldConstants().run(module)
