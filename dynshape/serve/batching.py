"""Batching requests whose shapes are symbolic: which requests can share one call, and how.

One executable serves every size, so a batch is just a bigger call: the requests' inputs are
joined along the batch axis and the results cut back at the same offsets. That is exact only
when the batch symbol is what the batch axis means in the executable's signature, so the rule
is checked once, at start-up (``BatchPlan.for_executable``), against ``main``:

- the batch symbol (``batch``) is the leading dim of every parameter and of every result, and
  appears nowhere else in the signature, not even inside an expression (``(batch, batch)`` or
  a result ``(batch, 2*batch)`` would couple the rows of different requests);
- every other dim is free to differ between requests: two requests share a call only when
  they agree on all of them (the same ``seq``, the same static dims) and on the dtypes, which
  ``group`` checks on the arrays themselves (``key``);
- a result whose leading dim is not the batch symbol (a data-dependent ``?`` size, a
  reduction over the batch) cannot be cut back: such an executable is served one request per
  call, and the plan says why.

Padding, only where the user allows it (``pad={"seq": 0}``): requests that differ only in a
padded symbol share a call; each input is filled up to the group's largest extent along the
axes whose dim is exactly that symbol, and every result axis whose dim is exactly that symbol
is cut back to the request's own extent. The symbol may not appear inside an expression
(``seq + 1`` could not be cut back), and a request whose inputs disagree on it is refused (the
VM would have refused it alone). Padding is exact only for models in which a padded position
cannot change a real one (per-position layers, attention with a mask that the fill zeroes);
that is the user's promise, which is why it is never on by default.

A request whose own inputs disagree on the batch size is refused alone (``RequestError``), the
others of its batch are unaffected. Rows never mix: a group's requests are joined in order and
each gets exactly its rows back (tested with results that encode their row of origin).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from vm import Executable
from vm.executable import Function, TensorSpec, TupleSpec

from ..errors import RequestError, ServeConfigError

Arrays = tuple[np.ndarray, ...]
#: (parameter or result index, axis): where a padded symbol stands as a whole dim.
Axis = tuple[int, int]

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True)
class Group:
    """Requests that can run as one call: their indices (in arrival order), batch sizes, and
    each one's extents along the padded symbols (in ``BatchPlan.pads`` order; empty without
    padding)."""

    indices: tuple[int, ...]
    sizes: tuple[int, ...]
    extents: tuple[tuple[int, ...], ...] = ()

    @property
    def total(self) -> int:
        """Rows of the joined call."""
        return sum(self.sizes)


@dataclass(frozen=True)
class Pad:
    """A symbol the user allows to be padded, and where it stands in ``main``'s signature."""

    symbol: str
    fill: float
    """The value padded positions of the inputs hold."""
    inputs: tuple[Axis, ...]
    """(parameter, axis) of every input dim that is exactly the symbol."""
    outputs: tuple[Axis, ...]
    """(result, axis) of every result dim that is exactly the symbol: cut back per request."""


@dataclass(frozen=True)
class BatchPlan:
    """How requests to one executable are batched (see the module doc)."""

    symbol: str | None
    """The batch symbol, or None: one request per call."""
    params: tuple[str, ...]
    """``main``'s parameter names, in order (what a request gives)."""
    reason: str = ""
    """Why requests are not batched, when ``symbol`` is None."""
    pads: tuple[Pad, ...] = ()
    """The symbols requests may be padded along (only with a batch symbol)."""
    ranks: tuple[int, ...] = ()
    """The rank of each parameter (a request of another rank runs alone: the VM says why)."""

    @classmethod
    def for_executable(
        cls, exe: Executable, symbol: str | None, pad: Mapping[str, float] | None = None
    ) -> BatchPlan:
        """The plan for ``exe`` batched along ``symbol`` (None: no batching), padding the
        symbols of ``pad`` (symbol -> fill value) where requests differ in them. Raises
        ServeConfigError if ``symbol`` cannot batch the parameters or a padded symbol cannot
        be padded; an executable whose results cannot be cut back gets a plan without
        batching, saying why."""
        main = next((f for f in exe.functions if f.name == "main"), None)
        if main is None:
            raise ServeConfigError("the executable has no main function to serve")
        names = tuple(p.name for p in main.params)
        if symbol is None:
            if pad:
                raise ServeConfigError(
                    f"padding ({', '.join(pad)}) needs a batch symbol: padded requests share "
                    "a call along it"
                )
            return cls(None, names, "no batch symbol was given")
        _check_params(main, symbol)
        pads = tuple(_pad(main, symbol, s, fill) for s, fill in (pad or {}).items())
        for j, name in enumerate(names):
            fills = {p.symbol: p.fill for p in pads if any(jj == j for jj, _ in p.inputs)}
            if len(set(fills.values())) > 1:
                raise ServeConfigError(
                    f"parameter {name!r} is padded along {', '.join(fills)} with different "
                    f"fills ({', '.join(map(repr, fills.values()))}): one fill per input"
                )
        problem = _result_problem(main, symbol)
        if problem:
            return cls(None, names, problem)
        ranks = tuple(len(_tensor(p.type).shape) for p in main.params)
        return cls(symbol, names, pads=pads, ranks=ranks)

    @property
    def batches(self) -> bool:
        """True if requests may share a call."""
        return self.symbol is not None

    def key(self, inputs: Arrays) -> tuple[Any, ...]:
        """What two requests must share to run as one call: every input's dims but the
        first (a padded one counts as -1: any extent) and its dtype (call ``size`` first: it
        checks the inputs)."""
        padded = {axis for p in self.pads for axis in p.inputs}
        return tuple(
            (a.dtype.str, tuple(-1 if (j, k) in padded else d for k, d in enumerate(a.shape))[1:])
            for j, a in enumerate(inputs)
        )

    def size(self, inputs: Arrays) -> int:
        """The batch size of one request; RequestError if its inputs disagree on it (or on a
        padded symbol) or lack the batch axis."""
        if len(inputs) != len(self.params):
            raise RequestError(
                f"expected {len(self.params)} input(s) ({', '.join(self.params)}), "
                f"got {len(inputs)}"
            )
        for name, a in zip(self.params, inputs, strict=True):
            if not isinstance(a, np.ndarray) or a.ndim == 0:
                raise RequestError(f"input {name!r}: expected an array with the {self.symbol} axis")
        return _agreed(self.symbol or "", [(n, 0) for n in self.params], self.params, inputs)

    def extents(self, inputs: Arrays) -> tuple[int, ...] | None:
        """The request's extent along each padded symbol; None if an input's rank is not the
        parameter's (the request then runs alone and the VM says what is wrong)."""
        if any(a.ndim != r for a, r in zip(inputs, self.ranks, strict=True)):
            return None
        return tuple(
            _agreed(p.symbol, [(self.params[j], k) for j, k in p.inputs], self.params, inputs)
            for p in self.pads
        )

    def group(
        self, requests: Sequence[Arrays], max_batch: int
    ) -> tuple[list[Group], dict[int, str]]:
        """Requests that can share a call, at most ``max_batch`` rows each (a larger request
        runs alone), in arrival order; and the refused ones by index, with the reason."""
        refused: dict[int, str] = {}
        open_groups: dict[tuple[Any, ...], list[tuple[int, int, tuple[int, ...]]]] = {}
        done: list[Group] = []
        for i, inputs in enumerate(requests):
            try:
                n = self.size(inputs) if self.batches else 0
                ext = self.extents(inputs) if self.pads else ()
            except RequestError as e:
                refused[i] = str(e)
                continue
            if not self.batches or n >= max_batch or ext is None:  # alone; the rest go on
                done.append(Group((i,), (n,)))
                continue
            k = self.key(inputs)
            members = open_groups.setdefault(k, [])
            if members and sum(s for _, s, _ in members) + n > max_batch:
                done.append(_group(members))
                members = open_groups[k] = []
            members.append((i, n, ext))
        done += [_group(m) for m in open_groups.values() if m]
        done.sort(key=lambda g: g.indices[0])
        return done, refused

    def join(self, requests: Sequence[Arrays], group: Group) -> Arrays:
        """The group's inputs joined along the batch axis, in the group's order (padded to the
        group's largest extent along the padded symbols)."""
        if len(group.indices) == 1:
            return requests[group.indices[0]]
        columns = list(zip(*(requests[i] for i in group.indices), strict=True))
        if not self.pads:
            return tuple(np.concatenate(col, axis=0) for col in columns)
        widest = [max(e[p] for e in group.extents) for p in range(len(self.pads))]
        return tuple(self._padded(j, col, group, widest) for j, col in enumerate(columns))

    def _padded(
        self, j: int, column: Sequence[np.ndarray], group: Group, widest: list[int]
    ) -> np.ndarray:
        """Parameter ``j``'s arrays in one array of the group's rows, padded along its axes of
        padded symbols to ``widest`` and filled with the symbol's fill value."""
        axes = {k: p for p, pad in enumerate(self.pads) for jj, k in pad.inputs if jj == j}
        if not axes:
            return np.concatenate(column, axis=0)
        shape = [group.total, *column[0].shape[1:]]
        for k, p in axes.items():
            shape[k] = widest[p]
        fill = self.pads[next(iter(axes.values()))].fill
        out = np.full(shape, fill, dtype=column[0].dtype)
        row = 0
        for a in column:
            block = (slice(row, row + len(a)), *[slice(0, d) for d in a.shape[1:]])
            out[block] = a
            row += len(a)
        return out

    def split(self, result: Any, group: Group) -> list[Any]:
        """Each request's part of the joined call's result (an array or a tuple of them),
        cut back to its own extent along the padded symbols."""
        if len(group.indices) == 1:
            return [result]
        cuts = np.cumsum(group.sizes)[:-1]
        leaves = result if isinstance(result, tuple) else (result,)
        parts = [self._cut(r, k, group, cuts) for k, r in enumerate(leaves)]
        if isinstance(result, tuple):
            return [tuple(p[j] for p in parts) for j in range(len(group.indices))]
        return parts[0]

    def _cut(self, result: Any, k: int, group: Group, cuts: np.ndarray) -> list[np.ndarray]:
        if not isinstance(result, np.ndarray) or result.ndim == 0 or result.shape[0] != group.total:
            raise RequestError(  # the plan's start-up check makes this unreachable for a valid file
                f"a batched result has leading dim {getattr(result, 'shape', '?')}, expected "
                f"{group.total} rows"
            )
        rows = np.split(result, cuts, axis=0)
        axes = [(axis, p) for p, pad in enumerate(self.pads) for kk, axis in pad.outputs if kk == k]
        if not axes:
            return [part.copy() for part in rows]
        out = []
        for part, ext in zip(rows, group.extents, strict=True):
            index = [slice(None)] * part.ndim
            for axis, p in axes:
                index[axis] = slice(0, ext[p])
            out.append(part[tuple(index)].copy())
        return out


def _group(members: list[tuple[int, int, tuple[int, ...]]]) -> Group:
    return Group(
        tuple(i for i, _, _ in members),
        tuple(n for _, n, _ in members),
        tuple(e for _, _, e in members) if any(e for _, _, e in members) else (),
    )


def _agreed(
    symbol: str, where: Sequence[tuple[str, int]], params: Sequence[str], inputs: Arrays
) -> int:
    """The one extent the request's inputs give ``symbol`` at ``where`` ((name, axis) pairs);
    RequestError naming each if they disagree."""
    by_name = dict(zip(params, inputs, strict=True))
    seen: list[tuple[str, int, int]] = [(name, k, by_name[name].shape[k]) for name, k in where]
    if len({d for _, _, d in seen}) != 1:
        shown = ", ".join(f"{n} axis {k}: {d}" for n, k, d in seen)
        raise RequestError(f"the inputs disagree on {symbol} ({shown})")
    return seen[0][2]


def _tensor(spec: Any) -> TensorSpec:
    assert isinstance(spec, TensorSpec)  # _check_params has checked every parameter
    return spec


def _uses(dim: int | str, symbol: str) -> bool:
    """True if ``dim`` is ``symbol`` or an expression over it (``2*seq``, ``min(8, seq)``)."""
    return isinstance(dim, str) and symbol in _NAME.findall(dim)


def _results(main: Function) -> tuple[Any, ...]:
    ret = main.ret
    return ret.fields if isinstance(ret, TupleSpec) else (ret,)


def _check_params(main: Function, symbol: str) -> None:
    for p in main.params:
        spec = p.type
        if not isinstance(spec, TensorSpec) or not spec.shape or spec.shape[0] != symbol:
            raise ServeConfigError(
                f"batch symbol {symbol!r}: parameter {p.name!r} is {spec}, whose leading dim "
                f"is not {symbol} (signature: {main.signature})"
            )
        if any(_uses(d, symbol) for d in spec.shape[1:]):
            raise ServeConfigError(
                f"batch symbol {symbol!r}: parameter {p.name!r} is {spec}, which uses it "
                "beyond the leading dim: rows of different requests would meet"
            )


def _result_problem(main: Function, symbol: str) -> str:
    for k, spec in enumerate(_results(main)):
        if not isinstance(spec, TensorSpec) or not spec.shape or spec.shape[0] != symbol:
            return (
                f"result {k} is {spec}: its leading dim is not {symbol}, so a batched call's "
                "result cannot be cut back per request"
            )
        if any(_uses(d, symbol) for d in spec.shape[1:]):
            return f"result {k} is {spec}, which uses {symbol} beyond the leading dim"
    return ""


def _pad(main: Function, batch: str, symbol: str, fill: float) -> Pad:
    """Where ``symbol`` may be padded in ``main``'s signature; ServeConfigError if it may
    not (the batch symbol, in no parameter, or inside an expression)."""
    if symbol == batch:
        raise ServeConfigError(f"cannot pad {symbol!r}: it is the batch symbol")
    params = [(f"parameter {p.name!r}", p.type) for p in main.params]
    inputs = _exact_axes(params, symbol, "only a dim that is exactly the symbol can be padded")
    if not inputs:
        raise ServeConfigError(
            f"cannot pad {symbol!r}: no parameter has it as a dim (signature: {main.signature})"
        )
    for j, p in enumerate(main.params):
        if any(jj == j for jj, _ in inputs):
            _check_fill(symbol, fill, p.name, _tensor(p.type).dtype)
    results = [(f"result {k}", spec) for k, spec in enumerate(_results(main))]
    outputs = _exact_axes(results, symbol, "a padded result could not be cut back")
    return Pad(symbol, fill, tuple(inputs), tuple(outputs))


def _exact_axes(specs: Sequence[tuple[str, Any]], symbol: str, why: str) -> list[Axis]:
    """(index, axis) of every dim of ``specs`` (labelled types) that is exactly ``symbol``;
    ServeConfigError naming the one where it stands inside an expression."""
    axes: list[Axis] = []
    for j, (label, spec) in enumerate(specs):
        for k, d in enumerate(getattr(spec, "shape", ())):
            if d == symbol:
                axes.append((j, k))
            elif _uses(d, symbol):
                raise ServeConfigError(
                    f"cannot pad {symbol!r}: {label} is {spec}, where it stands inside an "
                    f"expression ({why})"
                )
    return axes


def _check_fill(symbol: str, fill: float, param: str, dtype: str) -> None:
    """The fill value must be exactly representable in every padded input's dtype."""
    with np.errstate(all="ignore"):
        try:
            held = np.array(fill).astype(dtype)
        except (OverflowError, ValueError):
            held = None
    same = held is not None and (held == fill or (np.isnan(fill) and np.isnan(held)))
    if not same:
        raise ServeConfigError(
            f"cannot pad {symbol!r} with {fill!r}: parameter {param!r} is {dtype}, which "
            "cannot hold it"
        )
