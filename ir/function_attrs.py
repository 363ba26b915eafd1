"""What the compiler records on a function, as typed fields: ``Function.attrs``.

The text writes them as attributes after the parameters, as it always has:

    fn (%p0: ..., %p1: ..., Primitive=1, Steps="0 add -> t0; 1 exp -> o0; 2 multiply -> o0")

- ``primitive`` (``Primitive=1``): a fused primitive function, made by ``fuse_ops``: a kernel,
  closed, its body in graph form;
- ``reshape`` (``Reshape=1``): a primitive whose ops only reshape, which ``manifest_alloc``
  turns into a view;
- ``steps`` (``Steps="..."``): a primitive's step plan, where each op call of its body writes,
  recorded by ``manifest_alloc`` and run by the lowering (``ir/steps.py`` numbers the calls and
  checks a plan against the body; ``dynshape/analysis/step_plan.py`` makes plans);
- ``others``: any other scalar attribute (``Name="f"``), kept as written; no pass reads one.

The text form lives in ``ir/text/function_attrs_text.py``: the parser reads ``Steps`` into
``Step`` values once, checking it, so no pass reads a fact back from a string.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .errors import IRError

Scalar = int | float | str
"""The value of an attribute in ``FunctionAttrs.others`` (bool is an int)."""

KNOWN = ("Primitive", "Reshape", "Steps")
"""The attribute names of the typed fields, in the order they print."""


@dataclass(frozen=True)
class Dest:
    """Where one result tensor of a step goes: output ``index`` or scratch slot ``index``."""

    kind: str
    """``"out"`` (printed ``o<index>``) or ``"tmp"`` (printed ``t<index>``)."""
    index: int
    """The output's or the slot's number."""

    def __post_init__(self) -> None:
        if self.kind not in ("out", "tmp"):
            raise IRError(f"a step's destination is 'out' or 'tmp', got {self.kind!r}")
        if isinstance(self.index, bool) or not isinstance(self.index, int) or self.index < 0:
            raise IRError(f"a step's destination needs an index >= 0, got {self.index!r}")

    def __str__(self) -> str:
        return f"{'o' if self.kind == 'out' else 't'}{self.index}"


@dataclass(frozen=True)
class Step:
    """One step of a step plan: op call number ``call`` of the body (``ir.steps.op_calls``
    numbers them), which calls ``op``, writing one destination per tensor of its result."""

    call: int
    """The op call's number in evaluation order."""
    op: str
    """The name of that call's op: stated so that a stale number is caught."""
    dests: tuple[Dest, ...]
    """One per tensor leaf of the call's result, in order."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "dests", tuple(self.dests))
        if isinstance(self.call, bool) or not isinstance(self.call, int) or self.call < 0:
            raise IRError(f"a step's call number must be an int >= 0, got {self.call!r}")
        if not self.dests or not all(isinstance(d, Dest) for d in self.dests):
            raise IRError(f"step {self.call} {self.op} needs one or more Dest values")

    def __str__(self) -> str:
        return f"{self.call} {self.op} -> {','.join(str(d) for d in self.dests)}"


@dataclass(frozen=True)
class FunctionAttrs:
    """The facts recorded on a function (see the module docstring); all default to absent."""

    primitive: bool = False
    """A fused primitive function (``Primitive=1``)."""
    reshape: bool = False
    """A primitive whose ops only reshape (``Reshape=1``)."""
    steps: tuple[Step, ...] | None = None
    """A primitive's step plan (``Steps="..."``), or None when none is recorded."""
    others: tuple[tuple[str, Scalar], ...] = ()
    """Other scalar attributes, name and value, in the order written."""

    def __post_init__(self) -> None:
        if self.steps is not None:
            object.__setattr__(self, "steps", tuple(self.steps))
            if not all(isinstance(s, Step) for s in self.steps):
                raise IRError("Steps must be a sequence of ir.Step values")
            if not self.primitive:
                raise IRError(
                    "Steps is a step plan, which only a primitive function (Primitive=1) has"
                )
        object.__setattr__(self, "others", tuple(self.others))
        for key, value in self.others:
            if key in KNOWN:
                raise IRError(f"function attribute {key} is a field of FunctionAttrs")
            if not isinstance(value, (int, float, str)):
                raise IRError(f"function attribute {key}={value!r} must be a scalar")

    @classmethod
    def of(cls, attrs: Mapping[str, Any]) -> FunctionAttrs:
        """The facts a mapping names (``{"Primitive": 1}``, ``{"Steps": (Step(...), ...)}``,
        other names as ``others``), for building IR in code."""
        rest = {k: v for k, v in attrs.items() if k not in KNOWN}
        steps = attrs.get("Steps")
        if isinstance(steps, str):
            raise IRError("Steps must be ir.Step values; ir.parse reads the text form")
        return cls(
            flag("Primitive", attrs.get("Primitive", 0)),
            flag("Reshape", attrs.get("Reshape", 0)),
            steps,
            tuple(rest.items()),
        )


def flag(name: str, value: object) -> bool:
    """A yes/no fact written as ``1``/``0`` (or ``True``/``False``); anything else an error."""
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    raise IRError(f"function attribute {name}={value!r} must be 1 (or 0)")
