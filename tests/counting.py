"""Counting work instead of timing it: no test asserts a wall-clock time (a busy machine makes
any bound on seconds fail, and a quiet one lets a slow path pass).

``python_calls(f)`` is the number of Python function calls ``f()`` makes (its own included),
counted with ``cProfile``: deterministic for a given input once caches are warm, and
independent of the machine's load. A walk that is linear makes a number of calls that grows
like its input; a quadratic one, or one that does the whole work before failing, does not.
``assert_linear`` checks that growth between two sizes.
"""

from __future__ import annotations

import cProfile
from collections.abc import Callable
from typing import Any


def python_calls(f: Callable[[], Any]) -> int:
    """How many Python function calls ``f()`` makes, ``f`` itself included (calls of functions
    written in C are not counted). An exception ``f`` raises propagates (wrap ``f``'s body in
    ``pytest.raises`` to count a failing call)."""
    profile = cProfile.Profile(builtins=False)  # C-level counting: a few percent slower
    profile.enable()
    try:
        f()
    finally:
        profile.disable()
    return sum(entry.callcount for entry in profile.getstats() if not isinstance(entry.code, str))


#: The largest ratio of counts at sizes ``n`` and ``2 n`` that ``assert_linear`` accepts: a
#: linear walk doubles (less, with a fixed part), a quadratic one quadruples.
LINEAR_GROWTH = 2.5


def assert_linear(run: Callable[[int], Any], n: int) -> tuple[int, int]:
    """``run(n)`` and ``run(2 * n)`` counted (after a first ``run(n)`` that warms caches): the
    second makes at most ``LINEAR_GROWTH`` times the calls of the first. Returns both counts."""
    run(n)
    small = python_calls(lambda: run(n))
    large = python_calls(lambda: run(2 * n))
    assert large <= LINEAR_GROWTH * small, (
        f"{large} Python calls at size {2 * n} against {small} at {n}: not linear"
    )
    return small, large
