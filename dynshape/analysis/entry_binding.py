"""How a function's parameter shapes bind its symbols at entry (the rule of design/shapes.md,
"Binding symbols at entry").

1. A dim that is exactly a symbol binds it at its first occurrence (parameters in order, tuple
   fields in order, axes in order); its later plain occurrences are checked against it.
2. Then, until nothing changes: a dim ``a*s + b`` in which ``s`` is the only symbol not bound
   yet, ``a`` an integer >= 1 and ``b`` over bound symbols, binds ``s = (d - b) / a``, checked
   at run time to be an integer >= 0 (torch.export's derived dims: ``2*n + 1``, ``n - 1``).
3. Every other symbolic dim is computed from the bound symbols and checked.

A dim with a symbol that neither step binds is a compile error saying which symbol needs a
plain dim. Shared by ``manifest_alloc`` (the symbols a function may use from the start) and
the lowering (which emits the ``dim``, ``check_dim``, shape-program and ``check`` code).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field

import sympy

import ir
from ir import Span, TensorType, TupleType, Type
from ir.text.dims_text import dim_text

from ..errors import CompileError
from ..inference.derived_dims import affine_inverse


@dataclass(frozen=True)
class Site:
    """One symbolic axis of a parameter's tensor leaf."""

    leaf: tuple[int, ...]
    """The parameter's index, then the tuple field indices down to the tensor."""
    axis: int
    """The axis within the tensor."""
    what: str
    """The axis as messages name it: ``x.shape[0]``, ``t.1.shape[2]``."""
    dim: sympy.Expr
    """Its dim."""


@dataclass(frozen=True)
class Derived:
    """``symbol = (the axis value - offset) / scale``: bound by a dim ``scale*symbol + offset``."""

    site: Site
    symbol: sympy.Symbol
    scale: int
    """An integer >= 1."""
    offset: sympy.Expr
    """An expression of symbols bound before this one (often an int)."""


@dataclass
class EntryPlan:
    """The entry code of one function, in the order the lowering emits it."""

    plain: list[tuple[Site, bool]] = field(default_factory=list)
    """Every plain-symbol axis: True where it binds its symbol, False where it is checked."""
    derived: list[Derived] = field(default_factory=list)
    """The symbols bound by affine dims, in binding order (each offset uses earlier ones)."""
    checked: list[Site] = field(default_factory=list)
    """The compound dims checked against the bound symbols."""
    bound_by: dict[sympy.Basic, str] = field(default_factory=dict)
    """Where each symbol is bound: ``x.shape[0]``, or ``x.shape[0] = 2*n + 1`` if derived."""

    @property
    def bound(self) -> frozenset[sympy.Basic]:
        """Every symbol the parameters bind."""
        return frozenset(self.bound_by)


def entry_plan(
    params: Sequence[tuple[str, Type | None]], where: str, span: Span | None = None
) -> EntryPlan:
    """The binding plan of parameters ``(name, type)``; ``where`` (``@main``) prefixes errors,
    ``span`` locates them.

    Raises CompileError for a dim with a symbol that no plain or affine dim binds.
    """
    sites: list[Site] = []
    for i, (name, ty) in enumerate(params):
        if ty is not None:
            _collect(ty, (i,), name, sites)
    plan = EntryPlan()
    compound = []
    for site in sites:
        d = site.dim
        if isinstance(d, sympy.Symbol):
            plan.plain.append((site, d not in plan.bound_by))
            plan.bound_by.setdefault(d, site.what)
        else:
            compound.append(site)
    progress = True
    while progress:  # a derived symbol may be the offset of another dim: to a fixed point
        progress = False
        for site in compound:
            derived = _inverse(site, plan.bound_by.keys())
            if derived is not None:
                plan.derived.append(derived)
                plan.bound_by[derived.symbol] = f"{site.what} = {dim_text(site.dim)}"
                progress = True
    binders = {id(d.site) for d in plan.derived}
    for site in compound:
        if id(site) in binders:
            continue
        missing = sorted(ir.free_symbols(site.dim) - plan.bound_by.keys(), key=str)
        if missing:
            raise CompileError(_unbound_message(site, missing, where), span)
        plan.checked.append(site)
    return plan


def _collect(ty: Type, leaf: tuple[int, ...], path: str, out: list[Site]) -> None:
    if isinstance(ty, TensorType):
        for axis, d in enumerate(ty.shape):
            if not isinstance(d, int):
                out.append(Site(leaf, axis, f"{path}.shape[{axis}]", d))
    elif isinstance(ty, TupleType):
        for i, f in enumerate(ty.fields):
            _collect(f, (*leaf, i), f"{path}.{i}", out)


def _inverse(site: Site, bound: Collection[sympy.Basic]) -> Derived | None:
    inv = affine_inverse(site.dim, bound)
    return None if inv is None else Derived(site, inv.symbol, inv.scale, inv.offset)


def _unbound_message(site: Site, missing: list[sympy.Symbol], where: str) -> str:
    names = [_show(s) for s in missing]
    head = f"{where}: {site.what} is {dim_text(site.dim)}"
    if len(missing) == 1:
        return (
            f"{head}, which cannot bind {names[0]} (only a dim a*{names[0]} + b with an "
            f"integer a >= 1 does): give {names[0]} a plain dim, an axis that is exactly "
            f"{names[0]}, in some parameter"
        )
    listed = ", ".join(names[:-1]) + f" and {names[-1]}"
    return (
        f"{head}, but no parameter axis binds {listed}, and one dim binds only one symbol: "
        f"give all but one of {listed} a plain dim, an axis that is exactly the symbol, in "
        "some parameter"
    )


def _show(s: sympy.Basic) -> str:
    return "?" if ir.is_anonymous(s) else str(s)
