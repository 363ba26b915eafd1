"""Attention as one op: the ``fuse_attention`` pass turns the exported pattern into
``nn.attention``.

Assumes: a typed module (``InferTypes`` output), in graph form.
Guarantees: a typed module in which every chain

    P = nn.softmax(S, axis=-1)                      S = add(S1, M) | add(M, S1) | S1
    P' = P | where(not_equal(P, P), 0, P)           (SDPA's NaN cleanup: nan_to_zero=True)
    S1 = divide(S0, c) | multiply(S0, c) | multiply(c, S0) | S0
    S0 = nn.matmul(Q, KT)       (or nn.batch_matmul(Q, K), transpose_a=False)
    R = nn.matmul(P', V)        (or nn.batch_matmul(P', V, transpose_a=False))

whose intermediate values ``S0``, ``S1``, ``S``, ``P`` (and the cleanup's test) have no other
use, whose dtype is floating point, whose operands have at least 2 axes, whose constant ``c``
is a finite non-zero scalar of that dtype, and whose mask ``M`` (of that dtype, of no more axes
than the scores) never widens the scores where the unfused program succeeds (each dim proved 1
or the scores'; on the keys' axis also any length when ``V``'s rows are proved equal to the
keys: a widening would fail the second matmul's check, as it fails ``nn.attention``'s), is one
call ``nn.attention(q, k, v, mask)`` computing the same values. Then:

- a ``transpose`` feeding ``Q``, ``KT`` or ``V`` (any number of them, and also when the
  transpose has other uses) is folded into ``q_axes``/``k_axes``/``v_axes``: the kernel reads
  the transposed operand as a numpy view, so the head split's transposes and ``k^T`` are
  never copied (``KT`` itself is ``k`` with its last two axes swapped: also a view);
- a ``multiply`` or ``divide`` of ``Q`` or ``KT`` by a scalar constant (torch.export scales q
  and k by ``sqrt(scale)`` each) is folded into ``scale``, as is ``c``;
- when ``R``'s only use is a ``transpose``, that transpose is folded into ``out_axes`` (the
  head merge: the kernel writes through the inverse permutation, and the ``reshape`` after it
  becomes a reshape of a contiguous result, which ``fuse_ops`` makes a view);
- torch.export's flat ``k^T`` (``reshape(transpose(reshape(k, (-1, t, d)), (0, 2, 1)), (b, h,
  d, t))``) is a transpose too (``attention_groups.flat_transposed``);
- grouped-query attention's ``repeat_kv`` of ``K`` and/or ``V`` (``expand_dims ->
  broadcast_to -> reshape``) is folded away: every operand's heads axis split as the repeat
  merged it, the kv cache read as a broadcast view, the result reshaped back
  (``attention_groups``' module doc).

Anything else (another use of an intermediate, a softmax on another axis, a mask that widens
the scores, a ``where(c, S, fill)`` select, integer dtypes, a 1-d operand, a function with
``let``s) is left as it is.

Sound because each fold is an identity of the unfused ops: transposes commute into the
matmuls' operands, scalar factors commute with matmul (up to float rounding: the scale is
applied once to the scores, not to q and k), and the mask and softmax act on the same
``(..., S_q, S_k)`` scores. The results differ from the unfused program within float rounding
only (one multiply by ``1/c`` instead of a divide by ``c``).

Why: the unfused chain is 4-5 kernels with a planned ``(B, H, S_q, S_k)`` tensor between
each, plus copy kernels for the head split and merge; ``nn.attention`` is one kernel that
keeps the scores in one temporary and reads its operands as views (design/compiler_fusion.md,
"Attention as one kernel (issue 27)").

Only the rewritten calls and their users are rebuilt; the users keep their types, the new
calls are typed by ``CompleteTypes``. A module without the pattern is returned as it is.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

import ir
from ir import Call, Constant, Expr, Function, Module
from ir.dims import known_equal

from ..analysis.dataflow import Use, UseGraph
from .attention_groups import Operand, flat_transposed, group, merge_shape
from .base import ModulePass
from .infer_types import CompleteTypes
from .patterns import ChainRewriter, call_of, only_use, rewrite_chains, tensor_type

_ATTENTION = ir.get_op("nn.attention")
_RESHAPE = ir.get_op("reshape")
_FLOATS = frozenset({"float16", "float32", "float64"})


class FuseAttention(ModulePass):
    """Rewrite ``softmax(q @ k^T * c + mask) @ v`` chains into ``nn.attention`` (see the
    module docstring)."""

    name = "fuse_attention"

    def __init__(self) -> None:
        self.rewritten = 0
        """How many attention chains the last ``run`` rewrote."""

    def run(self, module: Module) -> Module:
        out, self.rewritten = rewrite_chains(module, _find, _build)
        return CompleteTypes().run(out) if self.rewritten else module


def fuse_attention(module: Module) -> Module:
    """``FuseAttention().run(module)``."""
    return FuseAttention().run(module)


@dataclasses.dataclass
class _Match:
    replaces: Call
    """The node the ``nn.attention`` call stands for (the last matmul or its transpose)."""
    q: Expr
    k: Expr
    v: Expr
    mask: Expr | None
    scale: float
    q_axes: list[int]
    k_axes: list[int]
    v_axes: list[int]
    out_axes: list[int] | None
    nan_to_zero: bool = False
    merge: list[Any] | None = None
    """With grouped heads: the ``newshape`` merging the result's split heads axis back (the
    replaced node's shape)."""


# The shared matchers (patterns.py) under the short names this module's matchers use.
_op, _only_use, _tensor = call_of, only_use, tensor_type


def _find(node: Expr, graph: UseGraph, fn: Function) -> tuple[Call, _Match] | None:
    found = _match(node, graph, fn.ranges, fn.param_symbols())
    return None if found is None else (found.replaces, found)


def _scalar(node: Expr, dtype: str) -> float | None:
    """The value of a finite non-zero scalar constant of ``dtype`` (0-d), else None."""
    if not isinstance(node, Constant) or node.value.ndim != 0 or node.value.dtype.name != dtype:
        return None
    value = float(node.value)
    return value if math.isfinite(value) and value != 0.0 else None


def _scaled(node: Expr, dtype: str) -> tuple[Expr, float] | None:
    """``(x, f)`` when ``node`` is ``x * c``, ``c * x`` or ``x / c`` with a scalar constant
    ``c`` of the same type as ``x`` (so the product has ``x``'s type): ``node == x * f``."""
    call = _op(node, "multiply", "divide")
    if call is None or _tensor(call) is None:
        return None
    a, b = call.args
    assert call.op is not None
    pairs = [(a, b)] if call.op.name == "divide" else [(a, b), (b, a)]
    for x, c in pairs:
        value = _scalar(c, dtype)
        if value is not None and str(_tensor(x)) == str(call.ty):
            return x, (1.0 / value if call.op.name == "divide" else value)
    return None


def _transposed(node: Expr) -> tuple[Expr, list[int]] | None:
    """``(x, axes)`` when ``node`` is ``transpose(x, axes)`` (``axes=None``: reversed)."""
    call = _op(node, "transpose")
    ty = _tensor(node)
    if call is None or ty is None:
        return None
    axes = call.attrs["axes"]
    rank = len(ty.shape)
    perm = list(reversed(range(rank))) if axes is None else [a % rank for a in axes]
    return call.args[0], perm


def _unwrap(
    node: Expr, perm: list[int], dtype: str, scales: bool, ranges: Mapping[Any, Any]
) -> tuple[Expr, list[int], float]:
    """Folds transposes (also spelled ``flat_transposed``) and, with ``scales``, scalar factors
    feeding an operand: the operand is ``transpose(x, perm) * factor`` for the returned
    ``(x, perm, factor)``."""
    factor = 1.0
    while True:
        t = _transposed(node) or flat_transposed(node, ranges)
        if t is not None:
            # node = transpose(x, a), operand = transpose(node, perm) = transpose(x, a[perm]).
            node, perm = t[0], [t[1][p] for p in perm]
            continue
        s = _scaled(node, dtype) if scales else None
        if s is not None:
            node, factor = s[0], factor * s[1]
            continue
        return node, perm, factor


def _swap_last(rank: int) -> list[int]:
    return [*range(rank - 2), rank - 1, rank - 2]


def _matmul_operands(node: Expr) -> tuple[Expr, Expr, bool] | None:
    """``(a, b, b_is_transposed)`` of ``nn.matmul(a, b)`` or ``nn.batch_matmul(a, b)`` with
    ``transpose_a=False``: ``node = a @ b`` (``b_is_transposed``: ``node = a @ b^T``)."""
    call = _op(node, "nn.matmul", "nn.batch_matmul")
    if call is None:
        return None
    a, b = call.args
    assert call.op is not None
    if call.op.name == "nn.matmul":
        return a, b, False
    if call.attrs["transpose_a"]:
        return None
    return a, b, bool(call.attrs["transpose_b"])


def _nan_cleanup(node: Expr, graph: UseGraph) -> Call | None:
    """The softmax ``p`` of ``where(not_equal(p, p), 0, p)`` (exporters zero the NaNs of a
    fully masked row so), when the comparison and ``p`` have no other use and the where's type
    is ``p``'s (its ``+0`` constant of ``p``'s dtype broadcasts without widening)."""
    where = _op(node, "where")
    if where is None:
        return None
    cond, zero, p = where.args
    test = _op(cond, "not_equal")
    p_ty, z_ty = _tensor(p), _tensor(zero)
    if test is None or test.args[0] is not p or test.args[1] is not p or p_ty is None:
        return None
    if not isinstance(zero, Constant) or z_ty is None or z_ty.dtype != p_ty.dtype:
        return None
    value = zero.value
    if value.ndim > len(p_ty.shape) or value.size != 1 or value.item() != 0.0:
        return None
    if np.signbit(value).any() or str(where.ty) != str(p_ty):
        return None
    if not _only_use(test, where, graph):
        return None
    uses = graph.uses.get(p, [])
    if len(uses) != 3 or any(u is not test and u is not where for u, _ in uses):
        return None
    return _op(p, "nn.softmax")


def _match(
    node: Expr, graph: UseGraph, ranges: Mapping[Any, Any], bound: frozenset[Any]
) -> _Match | None:
    """The attention chain ending at the matmul ``node``, or None (see the module doc)."""
    second = _matmul_operands(node)
    r_ty = _tensor(node)
    if second is None or r_ty is None or r_ty.dtype not in _FLOATS:
        return None
    dtype = r_ty.dtype
    probs, v, v_transposed = second
    found_probs = _probabilities(probs, node, graph)
    if found_probs is None:
        return None
    softmax, nan_to_zero = found_probs
    p_ty, v_ty = _tensor(softmax), _tensor(v)
    if p_ty is None or v_ty is None or len(p_ty.shape) < 2 or len(v_ty.shape) < 2:
        return None
    if softmax.attrs["axis"] not in (-1, len(p_ty.shape) - 1):
        return None
    (scores,) = softmax.args
    if str(_tensor(scores)) != str(p_ty):
        return None
    rv = len(v_ty.shape)
    # The canonical v is (..., S_k, Dv): its rows are the keys the probabilities weigh.
    v_rows = v_ty.shape[rv - 1] if v_transposed else v_ty.shape[rv - 2]
    mask: Expr | None = None
    add = _op(scores, "add")
    if add is not None:
        if not _only_use(add, softmax, graph):
            return None
        found = _masked(add, v_rows, ranges)
        if found is None:
            return None
        scores, mask = found
    scale = 1.0
    scaled = _scaled(scores, dtype)
    if scaled is not None:
        if not _only_use(scores, add if add is not None else softmax, graph):
            return None
        user = scores
        scores, scale = scaled
    else:
        user = add if add is not None else softmax
    first = _matmul_operands(scores)
    if first is None or not _only_use(scores, user, graph):
        return None
    q, kt, k_transposed = first
    q_ty, k_ty, s_ty = _tensor(q), _tensor(kt), _tensor(scores)
    if q_ty is None or k_ty is None or s_ty is None:
        return None
    if add is None and str(s_ty) != str(p_ty):
        return None
    if len(q_ty.shape) < 2 or len(k_ty.shape) < 2 or s_ty.dtype != dtype:
        return None
    rq, rk = len(q_ty.shape), len(k_ty.shape)
    # The canonical k is (..., S_k, D): kt as given when the matmul transposes it already,
    # else kt with its last two axes swapped.
    k_perm = list(range(rk)) if k_transposed else _swap_last(rk)
    q, q_axes, fq = _unwrap(q, list(range(rq)), dtype, True, ranges)
    k, k_axes, fk = _unwrap(kt, k_perm, dtype, True, ranges)
    v_perm = _swap_last(rv) if v_transposed else list(range(rv))
    v, v_axes, _ = _unwrap(v, v_perm, dtype, False, ranges)
    assert isinstance(node, Call)
    replaces, out_axes = _merge_transpose(node, graph)
    match = _Match(
        replaces, q, k, v, mask, scale * fq * fk, q_axes, k_axes, v_axes, out_axes, nan_to_zero
    )
    _group(match, len(r_ty.shape), ranges, bound)
    return match


def _probabilities(probs: Expr, node: Expr, graph: UseGraph) -> tuple[Call, bool] | None:
    """``(softmax, nan_to_zero)`` when the second matmul's operand ``probs`` is the softmax or
    its NaN cleanup, used by the matmul ``node`` only."""
    softmax = _op(probs, "nn.softmax")
    if softmax is not None:
        return (softmax, False) if _only_use(softmax, node, graph) else None
    softmax = _nan_cleanup(probs, graph)
    if softmax is None or not _only_use(probs, node, graph):
        return None
    return softmax, True


def _merge_transpose(node: Call, graph: UseGraph) -> tuple[Call, list[int] | None]:
    """``(transpose, axes)`` when the result's only use is a transpose (the head merge), else
    ``(node, None)``."""
    users = graph.uses.get(node, [])
    if len(users) == 1 and users[0][1] is Use.OPERAND:
        parent = users[0][0]
        t = _transposed(parent) if isinstance(parent, Call) else None
        if t is not None and t[0] is node and isinstance(parent, Call):
            return parent, t[1]
    return node, None


def _group(match: _Match, out_rank: int, ranges: Mapping[Any, Any], bound: frozenset[Any]) -> None:
    """Split the heads of a chain with a ``repeat_kv`` (``attention_groups``), in place."""
    m = match
    grouped = group(
        Operand(m.q, m.q_axes),
        Operand(m.k, m.k_axes),
        Operand(m.v, m.v_axes),
        m.mask,
        out_rank,
        m.out_axes,
        ranges,
        bound,
    )
    out_ty = _tensor(m.replaces)
    if grouped is None or out_ty is None:
        return
    merged = merge_shape(grouped.merge_at, out_ty.shape, bound)
    if merged is not None:
        m.q, m.q_axes = grouped.q.x, grouped.q.perm
        m.k, m.k_axes = grouped.k.x, grouped.k.perm
        m.v, m.v_axes = grouped.v.x, grouped.v.perm
        m.mask, m.out_axes = grouped.mask, grouped.out_perm
        m.merge = merged


def _masked(add: Call, v_rows: Any, ranges: Mapping[Any, Any]) -> tuple[Expr, Expr] | None:
    """``(scores, mask)`` of ``add(scores, mask)`` (or ``add(mask, scores)``) when the mask
    broadcasts to the scores without widening them wherever the unfused program succeeds:
    each of its dims is 1 or the scores' (proved), or, on the keys' axis, one that would widen
    the scores past the rows of ``v`` (``v_rows``, proved equal to the scores' keys), which
    the unfused second matmul rejects as ``nn.attention``'s check does (an exporter's
    ``total_seq`` against ``past_seq + seq``)."""
    a, b = add.args
    for scores, mask in ((a, b), (b, a)):
        s_ty, m_ty = _tensor(scores), _tensor(mask)
        if s_ty is None or m_ty is None or m_ty.dtype != s_ty.dtype:
            continue
        rank, m_rank = len(s_ty.shape), len(m_ty.shape)
        if m_rank > rank or rank < 2:
            continue
        if _matmul_operands(scores) is None and _scaled(scores, s_ty.dtype) is None:
            continue
        keys = s_ty.shape[rank - 1]
        ok = True
        for i, m in enumerate(m_ty.shape):
            at = rank - m_rank + i
            s = s_ty.shape[at]
            if known_equal(m, 1, ranges) or known_equal(m, s, ranges):
                continue
            if at == rank - 1 and known_equal(keys, v_rows, ranges):
                continue
            ok = False
            break
        if ok:
            return scores, mask
    return None


def _axes(perm: Sequence[int]) -> list[int] | None:
    return None if list(perm) == list(range(len(perm))) else [int(p) for p in perm]


def _build(rewriter: ChainRewriter, call: Call, m: _Match) -> Expr:
    """The ``nn.attention`` call standing for the matched node ``call`` (with the reshape
    merging grouped heads back)."""
    ty = _tensor(m.replaces)
    assert ty is not None
    mask = (
        rewriter.visit(m.mask) if m.mask is not None else Constant(np.zeros((), np.dtype(ty.dtype)))
    )
    attrs = ir.Attrs(
        {
            "scale": float(m.scale),
            "q_axes": _axes(m.q_axes),
            "k_axes": _axes(m.k_axes),
            "v_axes": _axes(m.v_axes),
            "out_axes": None if m.out_axes is None else _axes(m.out_axes),
            "nan_to_zero": m.nan_to_zero,
        }
    )
    args = (rewriter.visit(m.q), rewriter.visit(m.k), rewriter.visit(m.v), mask)
    out: Expr = Call(_ATTENTION, args, attrs, span=call.span)
    if m.merge is not None:
        out = Call(_RESHAPE, (out,), ir.Attrs({"newshape": m.merge}), span=call.span)
    return out
