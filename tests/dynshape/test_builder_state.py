"""Builds do not share state: each ``ds.build`` sees only the loops its outputs reach, loops
traced at once in two threads stay apart, and a loop is freed with the values that use it.

(``ds.while_loop`` used to keep every loop definition in one module-level table, and the open
tracing scopes in one module-level list that every thread pushed onto.)
"""

from __future__ import annotations

import gc
import threading
import weakref
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

import dynshape
import dynshape.builder as ds

TIMEOUT = 30.0  # seconds a thread waits for the other before the test fails (never a hang)


def _run(program: ds.Program, *args: Any) -> Any:
    return dynshape.VirtualMachine(dynshape.compile(program)).run(*args)


def _nothing() -> None:
    pass


def _doubling_program(
    factor: float, before: Callable[[], None] = _nothing, after: Callable[[], None] = _nothing
) -> ds.Program:
    """``x`` multiplied by ``factor`` and ``w`` added until its sum reaches 100. While the loop
    body is traced, ``before`` runs before it makes its nodes and ``after`` after."""
    x = ds.tensor("x", ("n",))
    w = ds.tensor("w", ("n",))

    def body(v: Any) -> Any:
        before()
        result = v * factor + w
        after()
        return result

    return ds.build(ds.while_loop(lambda v: v.sum() < 100, body, x), [x, w])


def _reference(factor: float, x: np.ndarray, w: np.ndarray) -> np.ndarray:
    v = x.copy()
    while v.sum() < 100:
        v = v * np.float32(factor) + w
    return v


def test_two_builds_with_same_named_loops_see_only_their_own() -> None:
    x = ds.tensor("x", ("n",))
    a = ds.while_loop(lambda v: v.sum() < 10, lambda v: v * 2, x)  # program A's @loop
    y = ds.tensor("y", ("n",))
    b = ds.while_loop(lambda v: v.sum() < 10, lambda v: v + 3, y)  # program B's @loop
    a2 = ds.while_loop(lambda v: v.max() < 50, lambda v: v * 5, a)  # program A's @loop1
    program_a = ds.build(a2, [x])
    program_b = ds.build(b, [y])
    assert list(program_a.keys()) == ["loop", "loop1", "main"]
    assert list(program_b.keys()) == ["loop", "main"]
    assert "multiply" in str(program_a["loop"]) and "add" not in str(program_a)
    assert "add(%v0, 3f)" in str(program_b["loop"]) and "multiply" not in str(program_b)
    ones = np.ones(2, np.float32)
    np.testing.assert_array_equal(_run(program_a, ones), [200, 200])  # 8, then 40, 200
    np.testing.assert_array_equal(_run(program_b, ones), [7, 7])
    assert str(ds.build(a2, [x])) == str(program_a)  # building again changes nothing


def test_loops_traced_at_once_in_two_threads_stay_apart() -> None:
    # The order is forced: A opens its loop's scope, then B opens its own; A makes its body's
    # nodes while B's scope is the latest opened; B finishes first. With one scope stack for
    # all threads, A's nodes were recorded in B's scope and A's build failed.
    a_open, b_open, a_made, b_done = (threading.Event() for _ in range(4))

    def wait(event: threading.Event) -> None:
        assert event.wait(TIMEOUT), "the other thread did not get there"

    def a_before() -> None:
        a_open.set()
        wait(b_open)

    def a_after() -> None:
        a_made.set()
        wait(b_done)

    def b_before() -> None:
        b_open.set()
        wait(a_made)

    def build_a() -> ds.Program:
        return _doubling_program(2.0, a_before, a_after)

    def build_b() -> ds.Program:
        wait(a_open)
        try:
            return _doubling_program(3.0, b_before)
        finally:
            b_done.set()

    with ThreadPoolExecutor(max_workers=2) as pool:
        future_a = pool.submit(build_a)
        future_b = pool.submit(build_b)
        program_a, program_b = future_a.result(TIMEOUT), future_b.result(TIMEOUT)
    assert str(program_a) == str(_doubling_program(2.0))
    assert str(program_b) == str(_doubling_program(3.0))
    x, w = np.ones(3, np.float32), np.full(3, 0.5, np.float32)
    np.testing.assert_array_equal(_run(program_a, x, w), _reference(2.0, x, w))
    np.testing.assert_array_equal(_run(program_b, x, w), _reference(3.0, x, w))


def test_many_threads_building_nested_loops_get_what_one_thread_gets() -> None:
    def build(factor: float) -> str:
        x = ds.tensor("x", ("n",))
        k = ds.tensor("k", (), "int32")

        def body(i: Any, v: Any) -> tuple[Any, Any]:
            inner = ds.while_loop(lambda u: u.sum() < 10, lambda u: u * factor, v)
            return i + 1, ds.concatenate([inner, v[:1]])

        _, out = ds.while_loop(lambda i, v: i < k, body, (0, x))
        return str(ds.build(out, [x, k]))

    factors = [1.5, 2.0, 2.5, 3.0] * 5
    expected = [build(f) for f in factors]
    with ThreadPoolExecutor(max_workers=4) as pool:
        got = list(pool.map(build, factors))
    assert got == expected


def test_a_loop_is_freed_with_the_values_that_use_it() -> None:
    made_in_body: list[weakref.ref[Any]] = []

    def body(v: Any) -> Any:
        doubled = v * 2
        made_in_body.append(weakref.ref(doubled.expr))
        return doubled

    x = ds.tensor("x", ("n",))
    y = ds.while_loop(lambda v: v.sum() < 10, body, x)
    program = ds.build(y, [x])
    assert made_in_body and made_in_body[-1]() is not None
    del y, program
    gc.collect()
    assert [ref() for ref in made_in_body] == [None] * len(made_in_body)
