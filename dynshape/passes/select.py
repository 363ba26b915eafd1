"""Boolean selection: the ``select`` pass turns a gather by a mask's positions into ``compress``.

Assumes: a typed module (the output of ``InferTypes``), in graph form.
Guarantees: a new typed module in which every call

    take(%x, squeeze(argwhere(%m), axis=[1]), axis=a)      (or reshape(argwhere(%m), [-1]))

whose mask ``%m`` is 1-d and provably as long as ``%x``'s axis ``a`` (``axis=None`` only for a
1-d ``%x``) is ``compress(%x, %m, axis=a)``, when the positions (the ``argwhere`` and its
``squeeze``) have no other use. The two compute the same slices in the same order, and fail
on the same programs: the positions of a mask are in range exactly when the mask is not longer
than the axis, and the rewrite requires the two lengths equal. A mask whose length is not
provably the axis's (``take`` would accept a shorter one, ``compress`` refuses it) is left to
``take``. When the positions are used elsewhere too, the ``argwhere`` runs anyway and the
``take`` is cheaper than a second selection: left as well.

Why: ``argwhere`` materialises an int64 ``(count, 1)`` index tensor (built by ``np.argwhere``,
then copied into its planned buffer), and ``take`` reads it back with numpy's bounds-checked,
output-buffered ``mode="raise"``; ``compress``'s kernel is one ``np.flatnonzero`` and an
unchecked ``np.take`` straight into the output, sized by one ``np.count_nonzero`` over the mask
the program has computed already (design/compiler_fusion.md, "Boolean selection").

Only the rewritten calls and their users are rebuilt, each with its original's type (see
``_Rewriter``); a module without a selection is returned as it is.
"""

from __future__ import annotations

import ir
from ir import Call, Expr, Function, Let, Module, TensorType

from ..analysis.dataflow import UseGraph, use_graph
from .base import ModulePass
from .patterns import TypedRewriter

_COMPRESS = ir.get_op("compress")


class SimplifySelection(ModulePass):
    """Rewrite gathers by a 1-d mask's positions into ``compress`` (see the module docstring)."""

    name = "select"

    def __init__(self) -> None:
        self.rewritten = 0
        """How many ``take`` calls the last ``run`` rewrote."""

    def run(self, module: Module) -> Module:
        self.rewritten = 0
        out: dict[str, Function] = {}
        for name, fn in module.items():
            if fn.is_primitive:
                out[name] = fn
                continue
            rewriter = _Rewriter(fn)
            new = rewriter.visit(fn)
            assert isinstance(new, Function)
            self.rewritten += rewriter.count
            out[name] = new
        return Module(out) if self.rewritten else module


def _single_use(node: Expr, uses: dict[Expr, list[object]]) -> bool:
    return len(uses.get(node, ())) == 1


def _positions_of(idx: Expr, uses: dict[Expr, list[object]]) -> Expr | None:
    """The 1-d mask whose positions ``idx`` is (``squeeze(argwhere(m), axis=[1])`` or
    ``reshape(argwhere(m), newshape=[-1])``, each node used once), else None."""
    if not isinstance(idx, Call) or idx.op is None or not _single_use(idx, uses):
        return None
    name, attrs = idx.op.name, idx.attrs
    if name == "squeeze":
        if attrs["axis"] is None or list(attrs["axis"]) not in ([1], [-1]):
            return None
    elif name == "reshape":
        if list(attrs["newshape"]) != [-1]:
            return None
    else:
        return None
    (w,) = idx.args
    if not (isinstance(w, Call) and w.op is not None and w.op.name == "argwhere"):
        return None
    if not _single_use(w, uses):
        return None
    (mask,) = w.args
    ty = mask.ty
    if not isinstance(ty, TensorType) or len(ty.shape) != 1:
        return None
    return mask


def _rewrite(take: Call, uses: dict[Expr, list[object]]) -> Call | None:
    """``compress`` in place of ``take``, or None when the rewrite would not be exact."""
    data, idx = take.args
    mask = _positions_of(idx, uses)
    data_ty = data.ty
    if mask is None or not isinstance(data_ty, TensorType) or not data_ty.shape:
        return None
    axis = take.attrs["axis"]
    if axis is None:
        if len(data_ty.shape) != 1:  # take of the flattened data: not one axis of it
            return None
        axis = 0
    if not -len(data_ty.shape) <= axis < len(data_ty.shape):
        return None  # infer_types has refused it already; never reached on a typed module
    assert isinstance(mask.ty, TensorType)
    if not ir.known_equal(mask.ty.shape[0], data_ty.shape[axis]):
        return None
    return Call(_COMPRESS, (data, mask), ir.Attrs({"axis": int(axis)}), span=take.span)


def _has_let(graph: UseGraph) -> bool:
    return any(isinstance(node, Let) for node in graph.order)


class _Rewriter(TypedRewriter):
    """Rewrites the ``take`` calls of one function in graph form (a function with lets is left
    as it is: its graph's uses decide sharing, and a let is a binding the rewrite would have to
    see through). ``compress`` has the type of the ``take`` it replaces (the same dims: the
    axis dim is the mask's count either way), so every rebuilt node keeps its original's type
    and facts: the pipeline's passes build typed nodes and never re-infer."""

    def __init__(self, fn: Function) -> None:
        super().__init__()
        graph = use_graph(fn.body)
        self.enabled = not _has_let(graph)
        self.uses: dict[Expr, list[object]] = {k: list(v) for k, v in graph.uses.items()}
        self.count = 0

    def replacement(self, call: Call) -> Expr | None:
        if not (self.enabled and call.op is not None and call.op.name == "take"):
            return None
        new = _rewrite(call, self.uses)
        if new is None:
            return None
        self.count += 1
        data, mask = (self.visit(a) for a in new.args)
        return Call(new.callee, (data, mask), new.attrs, span=new.span, ty=call.ty)
