"""One VirtualMachine shared by threads gives every thread the answers it gets alone.

Eight threads share one VM per program (elementwise, an MLP, control flow with recursion and a
loop, data-dependent shapes) and run the programs in random order at random bindings; each
result must be identical, bit for bit, to what a single-threaded run of the same VM gave for
the same inputs. The switch interval is lowered so that threads interleave inside calls.
"""

from __future__ import annotations

import random
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import pytest
from harness import Case, all_cases, assert_same, make_inputs

import dynshape
import vm as vm_module

PROGRAMS = (
    "unary_float_chain",
    "mlp_dense_relu_log_softmax",
    "attention_dynamic_batch_and_sequence",
    "recursion_grows_rows_by_concatenation",
    "fibonacci_non_tail_recursion",
    "loop_with_tuple_state",
    "if_on_data_dependent_count",
    "argwhere_then_take",
    "recursion_with_data_dependent_filter",
    "shape_of_then_arange",
)
THREADS = 8
CALLS_PER_THREAD = 40


@contextmanager
def _fast_switching() -> Iterator[None]:
    saved = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as CPython allows
    try:
        yield
    finally:
        sys.setswitchinterval(saved)


def _cases() -> list[Case]:
    by_name = {c.name: c for c in all_cases()}
    missing = [n for n in PROGRAMS if n not in by_name]
    assert not missing, f"corpus programs renamed or gone: {missing}"
    return [by_name[n] for n in PROGRAMS]


def _work(cases: list[Case], seed: int) -> list[tuple[int, int]]:
    """(case index, binding index) pairs, in a random order of the thread's own."""
    rng = random.Random(seed)
    return [
        (ci, rng.randrange(len(cases[ci].bindings)))
        for ci in (rng.randrange(len(cases)) for _ in range(CALLS_PER_THREAD))
    ]


@pytest.mark.parametrize("check_memory", [False, True], ids=["plain", "sanitized"])
def test_threads_sharing_one_vm_get_the_single_threaded_answers(check_memory: bool) -> None:
    cases = _cases()
    machines = [
        vm_module.VirtualMachine(dynshape.compile(c.source), check_memory=check_memory)
        for c in cases
    ]
    inputs = {
        (ci, bi): make_inputs(c, b) for ci, c in enumerate(cases) for bi, b in enumerate(c.bindings)
    }
    alone = {key: machines[key[0]].run(*args) for key, args in inputs.items()}
    failures: list[str] = []
    results: dict[int, list[tuple[tuple[int, int], Any]]] = {}
    start = threading.Barrier(THREADS)

    def worker(t: int) -> None:
        start.wait()
        got = []
        try:
            for key in _work(cases, seed=t):
                got.append((key, machines[key[0]].run(*inputs[key])))
        except Exception as e:  # reported below, with the thread
            failures.append(f"thread {t}: {type(e).__name__}: {e}")
        results[t] = got

    with _fast_switching():
        threads = [threading.Thread(target=worker, args=(t,)) for t in range(THREADS)]
        for th in threads:
            th.start()
        for th in threads:
            th.join(timeout=120)
    assert not failures, failures
    assert all(not th.is_alive() for th in threads)
    calls = 0
    for t, got in results.items():
        for key, value in got:
            assert_same(value, alone[key], where=f"thread {t}, {cases[key[0]].name}")
            calls += 1
    assert calls == THREADS * CALLS_PER_THREAD
    for m in machines:
        assert m.allocator.stats.live_bytes == 0  # every call gave back what it did not lend


def test_a_kernel_that_reenters_its_own_vm_gets_a_fresh_instance() -> None:
    """A call made while another call of the same VM is running (here: from inside a kernel,
    the same thread) takes another decoded instance instead of clobbering the first."""
    name = "test_threads.reenter"
    box: dict[str, Any] = {}
    if not vm_module.has_kernel(name):

        @vm_module.register_kernel(name)
        def _reenter(attrs: Any) -> Any:
            def kernel(x: np.ndarray, out: np.ndarray) -> None:
                inner = box.get("vm")
                if inner is not None and x.size > 1:
                    np.copyto(out, inner.run(x[:1].copy()).sum() + x)
                else:
                    np.copyto(out, x)

            return kernel

    asm = vm_module.Assembler()
    k = asm.kernel(name)
    f = asm.function("main", [("x", vm_module.tensor("float32", ("n",)))])
    (x,) = f.params
    n = f.dim(x, 0)
    b = vm_module.ShapeProgramBuilder(["n"])
    (sym,) = b.inputs
    (nbytes, shape) = f.shape_program(asm.shape_program(b.build([sym * 4, (sym,)])), [n])
    out = f.alloc_tensor(f.alloc_storage(nbytes), 0, shape, "float32")
    f.invoke(k, [x], [out])
    f.ret(out)
    machine = vm_module.VirtualMachine(asm.build())
    box["vm"] = machine
    x = np.arange(4, dtype=np.float32)
    np.testing.assert_array_equal(machine.run(x), x + 0.0)
    np.testing.assert_array_equal(machine.run(x + 1), x + 2)
    assert machine.allocator.stats.live_bytes == 0
