"""Exported layouts for ``fuse_attention``: grouped-query attention's ``repeat_kv`` folded away.

Exporters write grouped-query attention (``H`` query heads sharing ``H_kv`` key/value heads,
``H = H_kv * G``) by copying each kv head ``G`` times before the matmuls, as transformers'
``repeat_kv`` does::

    k_rep = reshape(broadcast_to(expand_dims(k, axis=e), (..., H_kv, G, S, D)), (..., H, S, D))

(``e`` the axis after the heads: head ``h`` reads kv head ``h // G``; or ``e`` the heads' own
axis, ``(..., G, H_kv, S, D)``: head ``h`` reads ``h % H_kv``). That is a copy of the whole cache
every decode step. The identity used instead: split the heads axis of every operand as the
repeat merged it, ``(H_kv, G)`` (or ``(G, H_kv)``). Split so, ``k_rep`` *is*
``expand_dims(k, e)`` broadcast along ``G``, which ``nn.attention`` reads without copying (its
leading axes broadcast as numpy's matmul does); ``q`` split so is a reshape (a view of the
contiguous query), an axis of 1 (a broadcast head axis) is an ``expand_dims``, and the result,
split the same way, is reshaped back (a view of the kernel's contiguous output). Every value
is the same: nothing is reassociated, each query head meets the same kv head's rows.

``group`` plans that split for a matched chain or returns None (no repeat, or one the split
cannot express exactly: then the chain is fused with the repeated operands as they are).
``flat_transposed`` recognises torch.export's ``k^T`` through a 3-d layout as a transpose.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import ir
from ir import Call, Expr, TensorType
from ir.dims import known_equal

_RESHAPE = ir.get_op("reshape")
_EXPAND_DIMS = ir.get_op("expand_dims")


@dataclasses.dataclass
class Operand:
    """An operand read as ``transpose(x, perm)``."""

    x: Expr
    perm: list[int]


@dataclasses.dataclass(frozen=True)
class _Repeat:
    source: Expr
    """The kv tensor before the repeat (``k``)."""
    merged: int
    """The axis of the repeated tensor that is the merge of the broadcast's ``merged`` and
    ``merged + 1``."""
    inserted: int
    """The broadcast axis (``expand_dims``' axis), ``merged`` or ``merged + 1``."""
    factors: tuple[Any, Any]
    """The merged axis' two factors, outermost first."""


def _tensor(node: Expr) -> TensorType | None:
    return node.ty if isinstance(node.ty, TensorType) else None


def _op(node: Expr, name: str) -> Call | None:
    if isinstance(node, Call) and node.op is not None and node.op.name == name:
        return node
    return None


def _chain(node: Expr, *names: str) -> list[Call] | None:
    """The calls ``names[0](names[1](...))`` down from ``node`` (each the first operand of
    the one before), or None if the chain is not there."""
    calls: list[Call] = []
    for name in names:
        call = _op(node, name)
        if call is None:
            return None
        calls.append(call)
        node = call.args[0]
    return calls


def repeated(x: Expr, ranges: Mapping[Any, Any]) -> _Repeat | None:
    """The repeat ``x = reshape(broadcast_to(expand_dims(y, axis=e), shape), newshape)`` when
    the reshape merges the broadcast axis ``e`` with a neighbour and changes nothing else."""
    found = _chain(x, "reshape", "broadcast_to", "expand_dims")
    if found is None:
        return None
    reshape, bcast, expand = found
    tys = [_tensor(n) for n in (expand.args[0], expand, bcast, reshape)]
    if any(t is None for t in tys) or expand.attrs["num_newaxis"] != 1:
        return None
    y_ty, e_ty, b_ty, r_ty = (t for t in tys if t is not None)
    eshape, bshape, rshape = list(e_ty.shape), list(b_ty.shape), list(r_ty.shape)
    rank = len(eshape)
    if len(bshape) != rank or len(rshape) != rank - 1 or len(y_ty.shape) != rank - 1:
        return None
    e = int(expand.attrs["axis"]) % rank
    if eshape[e] != 1:
        return None
    same = all(known_equal(eshape[i], bshape[i], ranges) for i in range(rank) if i != e)
    if not same:
        return None
    for m in (e - 1, e):
        if m < 0 or m + 1 >= rank:
            continue
        merged = [*bshape[:m], bshape[m] * bshape[m + 1], *bshape[m + 2 :]]
        if all(known_equal(a, b, ranges) for a, b in zip(merged, rshape, strict=True)):
            return _Repeat(expand.args[0], m, e, (bshape[m], bshape[m + 1]))
    return None


def flat_transposed(node: Expr, ranges: Mapping[Any, Any]) -> tuple[Expr, list[int]] | None:
    """``(x, perm)`` when ``node = reshape(transpose(reshape(x, (P, *T)), (0, *p)), (*L, *U))``
    merges the leading axes ``L`` of ``x = (*L, *T)`` into one, permutes only the trailing ones
    and splits ``L`` back (torch.export's ``k^T`` of a 4-d key: a 3-d ``bmm`` layout): then
    ``node = transpose(x, perm)``, a view, since both reshapes keep row-major order and the
    leading index is never moved (the reshapes' own checks keep the element counts)."""
    found = _chain(node, "reshape", "transpose", "reshape")
    if found is None:
        return None
    outer, t, inner = found
    tys = [_tensor(n) for n in (inner.args[0], inner, t, outer)]
    if any(ty is None for ty in tys):
        return None
    x, flat, moved, out = (list(ty.shape) for ty in tys if ty is not None)
    tail = len(flat) - 1
    lead = len(x) - tail
    axes = t.attrs["axes"]
    if tail < 1 or lead < 1 or len(out) != len(x) or axes is None:
        return None
    axes = [a % len(flat) for a in axes]
    if axes[0] != 0:
        return None
    pairs = [*zip(flat[1:], x[lead:], strict=True), *zip(out[:lead], x[:lead], strict=True)]
    pairs += list(zip(out[lead:], moved[1:], strict=True))
    if not all(known_equal(a, b, ranges) for a, b in pairs):
        return None
    return inner.args[0], [*range(lead), *(lead + a - 1 for a in axes[1:])]


def split_perm(perm: Sequence[int], axis: int) -> list[int]:
    """``perm`` once the source axis ``axis`` is split in two (``axis``, ``axis + 1``)."""
    out: list[int] = []
    for p in perm:
        if p == axis:
            out += [axis, axis + 1]
        else:
            out.append(p + 1 if p > axis else p)
    return out


def _bound_dims(dims: Sequence[Any], bound: frozenset[Any]) -> bool:
    """Whether every dim can be written in a ``newshape`` attribute: an int, or over the
    symbols the function's parameters bind (``InferTypes.check_attr_symbols``)."""
    return all(isinstance(d, int) or set(ir.free_symbols(d)) <= bound for d in dims)


def split_axis(
    x: Expr, axis: int, factors: tuple[Any, Any], ranges: Mapping[Any, Any], bound: frozenset[Any]
) -> Expr | None:
    """``x`` with its axis ``axis`` split as ``factors`` (a 1 split as ``(1, 1)``): an
    ``expand_dims`` or a ``reshape``, else None (a dim neither 1 nor the factors' product, or
    one a ``newshape`` cannot spell)."""
    ty = _tensor(x)
    if ty is None or axis >= len(ty.shape):
        return None
    dim = ty.shape[axis]
    if known_equal(dim, 1, ranges):
        return Call(_EXPAND_DIMS, (x,), ir.Attrs({"axis": axis, "num_newaxis": 1}))
    if not known_equal(dim, factors[0] * factors[1], ranges):
        return None
    tail = list(ty.shape[axis + 1 :])
    if not _bound_dims([*factors, *tail], bound):
        return None
    newshape = [0] * axis + [factors[0], factors[1]] + tail
    return Call(_RESHAPE, (x,), ir.Attrs({"newshape": newshape}))


def merge_shape(axis: int, shape: Sequence[Any], bound: frozenset[Any]) -> list[Any] | None:
    """The ``newshape`` reshaping a result of ``shape`` whose axis ``axis`` is split in two
    back to ``shape``, else None when ``shape``'s dims from ``axis`` on cannot be spelled."""
    tail = list(shape[axis:])
    if not _bound_dims(tail, bound):
        return None
    return [0] * axis + tail


@dataclasses.dataclass
class Grouped:
    """The split plan: the operands and mask as the kernel reads them, the output permutation
    of the split result, and the axis of the (permuted) result to merge back."""

    q: Operand
    k: Operand
    v: Operand
    mask: Expr | None
    out_perm: list[int] | None
    merge_at: int


def _repeats(
    k: Operand, v: Operand, ranges: Mapping[Any, Any]
) -> dict[str, tuple[_Repeat, int]] | None:
    """The repeats of ``k`` and ``v`` with the leading axis each repeats (counted from the last
    leading axis), when there is one and they split the same axis the same way."""
    found: dict[str, tuple[_Repeat, int]] = {}
    for name, op in (("k", k), ("v", v)):
        rep = repeated(op.x, ranges)
        if rep is None:
            continue
        rank = len(op.perm)
        j = op.perm.index(rep.merged)
        if j >= rank - 2:  # the repeat is along S or D: not a head axis
            return None
        found[name] = (rep, rank - 2 - j)
    if not found:
        return None
    reps = list(found.values())
    depth, factors = reps[0][1], reps[0][0].factors
    for rep, d in reps[1:]:
        if d != depth or not all(
            known_equal(a, b, ranges) for a, b in zip(rep.factors, factors, strict=True)
        ):
            return None
    return found


def group(
    q: Operand,
    k: Operand,
    v: Operand,
    mask: Expr | None,
    out_rank: int,
    out_perm: list[int] | None,
    ranges: Mapping[Any, Any],
    bound: frozenset[Any],
) -> Grouped | None:
    """Split the heads axis of a chain whose ``k`` and/or ``v`` is a repeat (see the module
    doc), or None. ``out_rank`` is the rank of ``softmax(...) @ v``; ``out_perm`` the transpose
    applied to it (None: none)."""
    found = _repeats(k, v, ranges)
    if found is None:
        return None
    depth, factors = next(iter(found.values()))[1], next(iter(found.values()))[0].factors
    operands: dict[str, Operand] = {}
    for name, op in (("q", q), ("k", k), ("v", v)):
        if name in found:
            rep = found[name][0]
            source = Call(
                _EXPAND_DIMS, (rep.source,), ir.Attrs({"axis": rep.inserted, "num_newaxis": 1})
            )
            operands[name] = Operand(source, split_perm(op.perm, rep.merged))
            continue
        j = len(op.perm) - 2 - depth
        if j < 0:  # no such leading axis: it broadcasts against both halves
            operands[name] = op
            continue
        split = split_axis(op.x, op.perm[j], factors, ranges, bound)
        if split is None:
            return None
        operands[name] = Operand(split, split_perm(op.perm, op.perm[j]))
    new_mask = mask
    if mask is not None:
        m_ty = _tensor(mask)
        if m_ty is None:
            return None
        j = len(m_ty.shape) - 2 - depth  # aligned with the scores (..., S_q, S_k)
        if j >= 0:
            new_mask = split_axis(mask, j, factors, ranges, bound)
            if new_mask is None:
                return None
    at = out_rank - 2 - depth
    if at < 0:
        return None
    if out_perm is None:
        return Grouped(operands["q"], operands["k"], operands["v"], new_mask, None, at)
    merge_at = out_perm.index(at)
    return Grouped(
        operands["q"], operands["k"], operands["v"], new_mask, split_perm(out_perm, at), merge_at
    )
