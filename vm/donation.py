"""Donated arguments: arrays the caller gives the VM for good (``run(..., donate=...)``).

JAX's ``donate_argnums`` is the model: a donated array's memory may be reused by the call, so
the caller must not use the array afterwards. What the VM does with it today: an ``append``
(``memory/capacity.py``) onto a donated array writes at the array's end even when a longer view
of the same buffer was handed out before (a rolled-back speculation, a beam that is dropped):
without the donation it copies instead, since that view might still be in use.

Misuse is detectable: with ``check_memory=True`` the sanitizer remembers every donated array
(weakly, by identity) and a later call that is passed one of them raises ``DonatedArrayError``
naming the parameter. Without the sanitizer nothing is checked (donation costs one set lookup
per append).
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from .errors import DonatedArrayError, VMArgumentError
from .executable import Function


def donated_positions(fn: Function, donate: Iterable[str | int]) -> list[int]:
    """The parameter positions ``donate`` names (names or positions); VMArgumentError names an
    unknown one."""
    if isinstance(donate, (str, int)):
        donate = (donate,)
    names = [p.name for p in fn.params]
    out: list[int] = []
    for d in donate:
        if isinstance(d, bool) or not isinstance(d, (str, int)):
            raise VMArgumentError(f"donate: expected parameter names or positions, got {d!r}")
        if isinstance(d, str):
            if d not in names:
                raise VMArgumentError(
                    f"donate: {fn.name} has no parameter {d!r} (its parameters: {', '.join(names)})"
                )
            out.append(names.index(d))
        elif not 0 <= d < len(names):
            raise VMArgumentError(
                f"donate: position {d} is out of range ({fn.name} has {len(names)} parameters)"
            )
        else:
            out.append(d)
    return out


class DonationRecord:
    """The arrays donated to a sanitized VM's calls so far (weakly), to catch a reuse."""

    def __init__(self) -> None:
        self._donated: dict[int, tuple[weakref.ref[Any], str]] = {}

    def remember(self, fn: Function, args: Sequence[Any], positions: Iterable[int]) -> None:
        """Note the arrays at ``positions`` of a call of ``fn`` as donated."""
        for i in positions:
            a = args[i]
            if type(a) is np.ndarray:
                key = id(a)

                def forget(_: object, key: int = key) -> None:
                    self._donated.pop(key, None)

                self._donated[key] = (weakref.ref(a, forget), f"{fn.name}: {fn.params[i].name!r}")

    def check(self, fn: Function, args: Sequence[Any]) -> None:
        """Raise DonatedArrayError if an argument of this call of ``fn`` was donated before."""
        if not self._donated:
            return
        for i, a in enumerate(args):
            entry = self._donated.get(id(a))
            if entry is not None and entry[0]() is a:
                raise DonatedArrayError(
                    f"{fn.name}: argument {fn.params[i].name!r} is an array donated to an "
                    f"earlier call (as {entry[1]}); a donated array must not be used again "
                    "(pass the result that replaced it)"
                )
