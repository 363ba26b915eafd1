"""A fused kernel as one ``numexpr`` expression: a long chain of tiny ops in one call.

A fused chain of ``k`` elementwise steps costs ``k`` numpy calls, ~0.2-0.3 us each even on a
handful of elements. ``numexpr`` (optional: the ``fast`` extra) evaluates a whole expression in
one call; this module translates a fused kernel into one when every step is an op of
``EXPRESSIONS`` and every value has one float dtype, compiles it once per kernel (at decode
time) and runs it where that was measured faster (design/vm.md, "Fast paths of fused
kernels"): kernels of at least ``EXPR_MIN_STEPS`` steps, on outputs up to a size set per kernel
by a measured cost model (``size_limit``). numexpr's loops were measured slower than numpy's per
element on the benchmark machine (its float32 ``tanh`` ~50x), so large arrays keep numpy.

Safety: the expression text is made only from generated names (``i0``, ``c0``) and the fixed
templates of ``EXPRESSIONS``, looked up by op name; no string of the executable enters it.
Inputs and constants reach numexpr as values (its arguments), never as text.

Exactness: numexpr computes every value in the one dtype of the signature, as numpy does when
every operand, constant and destination of every step has that dtype (the only case
translated; the dtypes of the call's arrays are checked on every call, and any other call runs
the plain kernel). Values agree with numpy's within float rounding (numexpr's ``tanh`` or
``exp`` may differ in the last bits).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

#: op -> expression template over its operands ``{0}``, ``{1}``: fixed text, chosen by op name.
EXPRESSIONS: dict[str, str] = {
    "add": "({0} + {1})",
    "subtract": "({0} - {1})",
    "multiply": "({0} * {1})",
    "divide": "({0} / {1})",  # float operands only (checked): true division, as the kernel's
    "negative": "(-{0})",
    "exp": "exp({0})",
    "log": "log({0})",
    "sqrt": "sqrt({0})",
    "sin": "sin({0})",
    "cos": "cos({0})",
    "tanh": "tanh({0})",
    "abs": "abs({0})",
}

#: Steps from which a kernel runs as one expression: below, numexpr's fixed cost per call
#: (~3 us measured) is more than the numpy calls it replaces.
EXPR_MIN_STEPS = 8
#: Output elements up to which the expression may run, whatever the cost model says. Below
#: 2 x 1024 elements (2 x its BLOCK_SIZE1) numexpr evaluates serially on the calling thread;
#: from there up it hands blocks to its thread pool, whose threads wait for a core when another
#: process keeps the cores busy (the failure of OpenBLAS's threads, design/vm.md "BLAS threads on
#: a busy machine"). So the expression stays in the serial range and never wakes the pool.
EXPR_MAX_ELEMENTS = 2 * 1024 - 1
#: The cost model that sets each kernel's size limit (measured on the benchmark machine, numpy
#: 2.4, numexpr 2.14 without VML): one expression costs ``EXPR_CALL_NS`` plus, per element, the
#: ``EXPR_ELEMENT_NS`` of each op (numexpr's float32 ``tanh`` is scalar libm, ~50 ns per
#: element, against ~1 ns for numpy's SIMD loop); it saves ``STEP_CALL_NS`` per step (one numpy
#: call on a few elements). The expression runs up to the size where the two meet.
EXPR_CALL_NS = 3000
STEP_CALL_NS = 400
EXPR_ELEMENT_NS = {"tanh": 50.0, "exp": 11.0, "log": 11.0, "sin": 11.0, "cos": 11.0}
EXPR_ELEMENT_NS_DEFAULT = 1.5
#: Longest expression text translated: values read by several steps are repeated in the text
#: (numexpr merges equal subtrees again), so a kernel whose text would grow past this (a deep
#: tree of shared values) is not translated.
MAX_EXPR_CHARS = 1 << 15
#: Float dtypes numexpr computes in exactly (``float`` is its name for float32).
FLOAT_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))

# numexpr's interpreter keeps global state per call; calls from several threads are serialised
# (a lock costs ~0.1 us, against the microseconds of the call).
_lock = threading.Lock()


def numexpr_module() -> Any:
    """The ``numexpr`` module, or None when it is not installed (the optional ``fast`` extra)."""
    try:
        import numexpr
    except ImportError:
        return None
    return numexpr


def translate(spec: Any, num_constants: int) -> tuple[str, list[tuple[str, int]]] | None:
    """``(text, operands)``: the expression of ``spec``'s single output over the names
    ``v0, v1, ...`` and what each name is (``("in", i)`` or ``("const", c)``), or None when the
    kernel is not a single-output chain of ``EXPRESSIONS`` ops."""
    if spec.num_outputs != 1 or (spec.scratch and any(s.shape[0] == "arg" for s in spec.scratch)):
        return None
    names: dict[tuple[str, int], str] = {}
    operands: list[tuple[str, int]] = []
    current: dict[tuple[str, int], str] = {}  # the expression an out/tmp ref holds now
    for step in spec.steps:
        template = EXPRESSIONS.get(step.op)
        if template is None or len(step.outputs) != 1:
            return None
        args = []
        for ref in step.inputs:
            if type(ref) is tuple:
                return None
            key = (ref.kind, int(ref.index))
            if ref.kind in ("in", "const"):
                if ref.kind == "const" and not 0 <= key[1] < num_constants:
                    return None
                if key not in names:
                    names[key] = f"v{len(operands)}"
                    operands.append(key)
                args.append(names[key])
            elif key in current:
                args.append(current[key])
            else:
                return None
        if template.count("{") != len(args):
            return None
        out = step.outputs[0]
        text = template.format(*args)
        if len(text) > MAX_EXPR_CHARS:
            return None
        current[out.kind, int(out.index)] = text
    final = current.get(("out", 0))
    return None if final is None else (final, operands)


class ExprPlan:
    """One fused kernel compiled to a ``numexpr.NumExpr``; ``__call__(*inputs, out)`` returns
    False (doing nothing) when the call's dtypes are not the compiled ones."""

    def __init__(
        self,
        nex: Any,
        operands: list[tuple[str, int]],
        constants: Sequence[np.ndarray],
        dt: Any,
        max_elements: int,
    ) -> None:
        self.nex = nex
        self.max_elements = max_elements
        """Outputs up to this many elements run as the expression (``size_limit``)."""
        self.dtype = dt
        self.inputs = [i for kind, i in operands if kind == "in"]
        # Each operand: an input index, or a constant (bound now).
        self.sources: list[tuple[int, Any]] = [
            (i, None) if kind == "in" else (-1, constants[i]) for kind, i in operands
        ]

    def __call__(self, *args: np.ndarray) -> bool:
        out = args[-1]
        dt = self.dtype
        if out.dtype != dt or any(args[i].dtype != dt for i in self.inputs):
            return False
        values = [args[i] if i >= 0 else c for i, c in self.sources]
        try:
            with _lock:
                self.nex(*values, out=out, order="K", casting="no", ex_uses_vml=False)
        except (ValueError, TypeError, IndexError, ArithmeticError):
            return False  # the plain kernel runs again and names the failing step
        return True


def size_limit(ops: Sequence[str]) -> int:
    """Output elements up to which the expression of a kernel of ``ops`` is cheaper than its
    steps, by the cost model above (0: never), at most ``EXPR_MAX_ELEMENTS``."""
    per_element = sum(EXPR_ELEMENT_NS.get(op, EXPR_ELEMENT_NS_DEFAULT) for op in ops)
    saved = len(ops) * STEP_CALL_NS - EXPR_CALL_NS
    if saved <= 0:
        return 0
    return min(EXPR_MAX_ELEMENTS, int(saved / per_element))


def plan_expr(spec: Any, constants: Sequence[np.ndarray]) -> ExprPlan | None:
    """The one-expression runner of ``spec``, or None: numexpr not installed, fewer than
    ``EXPR_MIN_STEPS`` steps, an op or dtype that is not translated (see the module doc)."""
    if len(spec.steps) < EXPR_MIN_STEPS:
        return None
    limit = size_limit([s.op for s in spec.steps])
    if limit < 1:
        return None
    ne = numexpr_module()
    if ne is None:
        return None
    found = translate(spec, len(constants))
    if found is None:
        return None
    text, operands = found
    dtypes = {np.dtype(s.dtype) for s in spec.scratch}
    dtypes |= {np.asarray(constants[i]).dtype for kind, i in operands if kind == "const"}
    if len(dtypes) > 1 or not dtypes <= set(FLOAT_DTYPES):
        return None
    # The kernel's dtype: the constants' and scratch's if any, else float32 (a call with
    # float64 arrays then runs the plain kernel). numexpr's type names: float is float32.
    dt = dtypes.pop() if dtypes else FLOAT_DTYPES[0]
    kind = float if dt == FLOAT_DTYPES[0] else np.double
    signature = [(f"v{k}", kind) for k in range(len(operands))]
    try:
        nex = ne.NumExpr(text, signature)
    except (ValueError, TypeError, KeyError, SyntaxError, RecursionError, MemoryError):
        return None  # numexpr refused it (too deep, too many registers): the plain kernel runs
    return ExprPlan(nex, operands, constants, dt, limit)
