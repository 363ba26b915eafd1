"""Which kernel outputs may take the bytes of an input that dies at that kernel.

Shared by the planner (which places such an output over its input) and the checker (which
accepts exactly those overlaps). An output ``t`` of ``memory.invoke(f, (..., u, ...), (t,))``
may reuse ``u``'s bytes when:

- ``f`` is one op applied to its parameters, elementwise or broadcast (any input: numpy ufuncs
  allow an output that is exactly an input, and elementwise kernels must work in place anyway)
  or declared ``in_place`` (its first input: softmax, log-softmax, layer norm, the scatters,
  ``dynamic_update_slice``; constants may stand among its other operands);
- the invoke writes that one output and no scratch;
- ``u`` is a tensor made by ``memory.alloc_tensor`` whose last use (of it or of anything that
  may alias it) is this invoke, and it has ``t``'s shape and dtype.
"""

from __future__ import annotations

from ir import Call, Constant, Function, If, OpDef, OpPattern, TensorType, Tuple, Var

from ..dialect.memory import Invoke
from .liveness import chain, timeline
from .step_plan import same_type

_ANY_INPUT = (OpPattern.ELEMWISE, OpPattern.BROADCAST)


def in_place_pairs(fn: Function) -> dict[Var, Var]:
    """Output tensor -> the input tensor whose bytes it may take (see the module docstring)."""
    tl = timeline(fn)
    functions = _let_bound_functions(fn)
    pairs: dict[Var, Var] = {}
    for time, let in enumerate(tl.steps):
        invoke = Invoke.of(let.value)
        if invoke is None:
            continue
        callee, ins, outs = invoke.fn, invoke.inputs, invoke.outputs
        prim = functions.get(callee) if isinstance(callee, Var) else callee
        single = _single_op(prim)
        if single is None or not isinstance(ins, Tuple) or not isinstance(outs, Tuple):
            continue
        op, plain = single
        if len(outs.fields) != 1 or not isinstance(outs.fields[0], Var):
            continue
        out = outs.fields[0]
        if not isinstance(out.ty, TensorType):
            continue
        if op.pattern in _ANY_INPUT:
            candidates = list(ins.fields) if plain else []
        else:
            candidates = list(ins.fields[:1]) if op.in_place else []
        for u in (c for c in candidates if isinstance(c, Var)):
            life = tl.tensors.get(u)
            if life is not None and life.end == time and same_type(u.ty, out.ty):
                pairs[out] = u
                break
    return pairs


def _single_op(fn: object) -> tuple[OpDef, bool] | None:
    """The op of a primitive that is one op applied to its parameters in order, its first
    operand the first parameter (a tuple operand's fields counting one argument each:
    ``dynamic_update_slice``'s starts; constants may stand among them: the starts ``0``), and
    whether it is applied to its parameters alone; else None."""
    if not isinstance(fn, Function) or not fn.is_primitive:
        return None
    body = fn.body
    if not isinstance(body, Call) or body.op is None or not body.args or not fn.params:
        return None
    if body.args[0] is not fn.params[0]:
        return None
    args: list[object] = []
    for a in body.args:
        args += a.fields if isinstance(a, Tuple) else [a]
    variables = [a for a in args if not isinstance(a, Constant)]
    if len(variables) != len(fn.params) or not all(
        a is p for a, p in zip(variables, fn.params, strict=True)
    ):
        return None
    return body.op, len(variables) == len(args)


def _let_bound_functions(fn: Function) -> dict[Var, Function]:
    """The primitive functions bound by lets anywhere in ``fn`` (branches included)."""
    out: dict[Var, Function] = {}
    stack = [fn.body]
    while stack:
        lets, _ = chain(stack.pop())
        for let in lets:
            v = let.value
            if isinstance(v, Function):
                out[let.var] = v
            elif isinstance(v, If):
                stack += [v.then_branch, v.else_branch]
    return out
