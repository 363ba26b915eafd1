"""Batching requests whose shapes are symbolic: which requests can share one call, and how.

One executable serves every size, so a batch is just a bigger call: the requests' inputs are
joined along the batch axis and the results cut back at the same offsets. That is exact only
when the batch symbol is what the batch axis means in the executable's signature, so the rule
is checked once, at start-up (``BatchPlan.for_executable``), against ``main``:

- the batch symbol (``batch``) is the leading dim of every parameter and of every result, and
  appears nowhere else in the signature (a second use, ``(batch, batch)``, would couple rows);
- every other dim is free to differ between requests: two requests share a call only when
  they agree on all of them (the same ``seq``, the same static dims) and on the dtypes, which
  ``group`` checks on the arrays themselves (``key``);
- a result whose leading dim is not the batch symbol (a data-dependent ``?`` size, a
  reduction over the batch) cannot be cut back: such an executable is served one request per
  call, and the plan says why.

A request whose own inputs disagree on the batch size is refused alone (``RequestError``), the
others of its batch are unaffected. Rows never mix: a group's requests are joined in order and
each gets exactly its rows back (tested with results that encode their row of origin).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from vm import Executable
from vm.executable import Function, TensorSpec, TupleSpec

from ..errors import RequestError, ServeConfigError

Arrays = tuple[np.ndarray, ...]


@dataclass(frozen=True)
class Group:
    """Requests that can run as one call: their indices (in arrival order) and batch sizes."""

    indices: tuple[int, ...]
    sizes: tuple[int, ...]

    @property
    def total(self) -> int:
        """Rows of the joined call."""
        return sum(self.sizes)


@dataclass(frozen=True)
class BatchPlan:
    """How requests to one executable are batched (see the module doc)."""

    symbol: str | None
    """The batch symbol, or None: one request per call."""
    params: tuple[str, ...]
    """``main``'s parameter names, in order (what a request gives)."""
    reason: str = ""
    """Why requests are not batched, when ``symbol`` is None."""

    @classmethod
    def for_executable(cls, exe: Executable, symbol: str | None) -> BatchPlan:
        """The plan for ``exe`` batched along ``symbol`` (None: no batching). Raises
        ServeConfigError if ``symbol`` cannot batch its parameters; an executable whose
        results cannot be cut back gets a plan without batching, saying why."""
        main = next((f for f in exe.functions if f.name == "main"), None)
        if main is None:
            raise ServeConfigError("the executable has no main function to serve")
        names = tuple(p.name for p in main.params)
        if symbol is None:
            return cls(None, names, "no batch symbol was given")
        _check_params(main, symbol)
        problem = _result_problem(main, symbol)
        if problem:
            return cls(None, names, problem)
        return cls(symbol, names)

    @property
    def batches(self) -> bool:
        """True if requests may share a call."""
        return self.symbol is not None

    def key(self, inputs: Arrays) -> tuple[Any, ...]:
        """What two requests must share to run as one call: every input's dims but the
        first, and its dtype (call ``size`` first: it checks the inputs)."""
        return tuple((a.dtype.str, a.shape[1:]) for a in inputs)

    def size(self, inputs: Arrays) -> int:
        """The batch size of one request; RequestError if its inputs disagree on it or lack the
        batch axis."""
        if len(inputs) != len(self.params):
            raise RequestError(
                f"expected {len(self.params)} input(s) ({', '.join(self.params)}), "
                f"got {len(inputs)}"
            )
        sizes = set()
        for name, a in zip(self.params, inputs, strict=True):
            if not isinstance(a, np.ndarray) or a.ndim == 0:
                raise RequestError(f"input {name!r}: expected an array with the {self.symbol} axis")
            sizes.add(a.shape[0])
        if len(sizes) != 1:
            shown = ", ".join(
                f"{n}: {a.shape[0]}" for n, a in zip(self.params, inputs, strict=True)
            )
            raise RequestError(f"the inputs disagree on {self.symbol}, their leading dim ({shown})")
        return sizes.pop()

    def group(
        self, requests: Sequence[Arrays], max_batch: int
    ) -> tuple[list[Group], dict[int, str]]:
        """Requests that can share a call, at most ``max_batch`` rows each (a larger request
        runs alone), in arrival order; and the refused ones by index, with the reason."""
        refused: dict[int, str] = {}
        open_groups: dict[tuple[Any, ...], list[tuple[int, int]]] = {}
        done: list[Group] = []
        for i, inputs in enumerate(requests):
            try:
                n = self.size(inputs) if self.batches else 0
            except RequestError as e:
                refused[i] = str(e)
                continue
            if not self.batches or n >= max_batch:  # alone; an open group stays open
                done.append(Group((i,), (n,)))
                continue
            k = self.key(inputs)
            members = open_groups.setdefault(k, [])
            if members and sum(s for _, s in members) + n > max_batch:
                done.append(_group(members))
                members = open_groups[k] = []
            members.append((i, n))
        done += [_group(m) for m in open_groups.values() if m]
        done.sort(key=lambda g: g.indices[0])
        return done, refused

    @staticmethod
    def join(requests: Sequence[Arrays], group: Group) -> Arrays:
        """The group's inputs joined along the batch axis, in the group's order."""
        if len(group.indices) == 1:
            return requests[group.indices[0]]
        columns = zip(*(requests[i] for i in group.indices), strict=True)
        return tuple(np.concatenate(col, axis=0) for col in columns)

    @staticmethod
    def split(result: Any, group: Group) -> list[Any]:
        """Each request's part of the joined call's result (an array or a tuple of them)."""
        if len(group.indices) == 1:
            return [result]
        cuts = np.cumsum(group.sizes)[:-1]
        if isinstance(result, tuple):
            parts = [_cut(r, group, cuts) for r in result]
            return [tuple(p[j] for p in parts) for j in range(len(group.indices))]
        return _cut(result, group, cuts)


def _group(members: list[tuple[int, int]]) -> Group:
    return Group(tuple(i for i, _ in members), tuple(n for _, n in members))


def _cut(result: Any, group: Group, cuts: np.ndarray) -> list[np.ndarray]:
    if not isinstance(result, np.ndarray) or result.ndim == 0 or result.shape[0] != group.total:
        raise RequestError(  # the plan's start-up check makes this unreachable for a valid file
            f"a batched result has leading dim {getattr(result, 'shape', '?')}, expected "
            f"{group.total} rows"
        )
    return [part.copy() for part in np.split(result, cuts, axis=0)]


def _check_params(main: Function, symbol: str) -> None:
    for p in main.params:
        spec = p.type
        if not isinstance(spec, TensorSpec) or not spec.shape or spec.shape[0] != symbol:
            raise ServeConfigError(
                f"batch symbol {symbol!r}: parameter {p.name!r} is {spec}, whose leading dim "
                f"is not {symbol} (signature: {main.signature})"
            )
        if symbol in spec.shape[1:]:
            raise ServeConfigError(
                f"batch symbol {symbol!r}: parameter {p.name!r} is {spec}, which uses it "
                "beyond the leading dim: rows of different requests would meet"
            )


def _result_problem(main: Function, symbol: str) -> str:
    ret = main.ret
    results = ret.fields if isinstance(ret, TupleSpec) else (ret,)
    for k, spec in enumerate(results):
        if not isinstance(spec, TensorSpec) or not spec.shape or spec.shape[0] != symbol:
            return (
                f"result {k} is {spec}: its leading dim is not {symbol}, so a batched call's "
                "result cannot be cut back per request"
            )
        if symbol in spec.shape[1:]:
            return f"result {k} is {spec}, which uses {symbol} beyond the leading dim"
    return ""
